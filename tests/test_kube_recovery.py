"""A resumed controller finds every Job its dead predecessor left in the namespace (benchmaker.kube),
against the strict fake Kubernetes API (tests/fake_kube.py) through the real `kubernetes` client.

The arrangement that the Jobs' ``status.active`` misses: a namespace with a pod quota (NRP namespaces
have one) and a controller that submitted more Jobs than it allows. The Jobs over the quota exist,
accepted, with no pod and an empty status; they start when a place frees, which is when the new
controller's own Jobs for the same outputs run. They must be cancelled with the running ones.
"""

from __future__ import annotations

import json
import time
import urllib.request

from fake_kube import FakeKube

NAMESPACE = "sage"
PREFIX = "s3://sage-imsearch/benchmaker/my-bench"


def _post_job(url: str, name: str, target: str, prefix: str) -> None:
    """A Job as snakemake-executor-plugin-kubernetes 0.5.1 makes it (label, command shape)."""
    cmd = (f"python -m snakemake --deploy-sources {prefix}/snakemake-workflow-sources.x.tar.xz x "
           f"--default-storage-prefix '{prefix}' --default-storage-provider 's3' && sleep 120 "
           f"--target-jobs '{target}' --default-storage-prefix '{prefix}'")
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"app": "snakemake"}},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "snakemake", "image": "x", "command": ["/bin/sh"],
                 # the pod only sleeps: the command above is what the controller reads
                 "args": ["-c", f"sleep 120 # {cmd}"]}]}}}}
    req = urllib.request.Request(f"{url}/apis/batch/v1/namespaces/{NAMESPACE}/jobs", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer t", "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        assert r.status == 201


def test_jobs_waiting_for_a_pod_are_cancelled_too(tmp_path, monkeypatch):
    from benchmaker.kube import cancel_jobs, previous_jobs

    ctl = tmp_path / "controller"
    ctl.mkdir()
    fk = FakeKube(namespace=NAMESPACE, run_jobs=True, hide_paths=[str(ctl)], pod_quota=2,
                  base_env={"PATH": "/usr/bin:/bin"})
    url = fk.start()
    monkeypatch.setenv("KUBECONFIG", str(fk.kubeconfig(tmp_path / "kubeconfig", url)))
    try:
        # another build's Job (another storage prefix) holds one place of the quota
        _post_job(url, "snakejob-other", "vision:shard=00000", "s3://sage-imsearch/benchmaker/other")
        # the dead controller's: one running, two accepted without a pod (over the quota)
        _post_job(url, "snakejob-a", "embed_images:shard=00000", PREFIX)
        _post_job(url, "snakejob-b", "embed_images:shard=00001", PREFIX)
        _post_job(url, "snakejob-c", "vision:shard=00001", PREFIX)
        with fk.lock:
            assert fk.waiting == ["snakejob-b", "snakejob-c"], fk.waiting

        found = previous_jobs(NAMESPACE, PREFIX)
        assert {j.name for j in found} == {"snakejob-a", "snakejob-b", "snakejob-c"}, found
        assert {j.name: j.rule for j in found} == {"snakejob-a": "embed_images", "snakejob-b": "embed_images",
                                                   "snakejob-c": "vision"}
        assert {j.name for j in found if j.active} == {"snakejob-a"}

        cancel_jobs(NAMESPACE, found, timeout=30)
        time.sleep(0.5)
        with fk.lock:
            assert set(fk.deleted_jobs) == {"snakejob-a", "snakejob-b", "snakejob-c"}
            # the waiting Jobs were deleted before the running one freed its place: never started
            assert not fk.state["snakejob-b"].get("started") and not fk.state["snakejob-c"].get("started")
            assert fk.state["snakejob-a"]["exit"] == 137
            assert fk.state["snakejob-other"]["exit"] is None  # another build's Job is left alone
            assert not fk.unexpected and not fk.rejected, (fk.unexpected, fk.rejected)
        assert previous_jobs(NAMESPACE, PREFIX) == []
    finally:
        fk.stop()
