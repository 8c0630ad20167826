"""A resumed controller finds every Job its dead predecessor left in the namespace (benchmaker.kube),
against the strict fake Kubernetes API (tests/fake_kube.py) through the real `kubernetes` client.

The arrangement that the Jobs' ``status.active`` misses: a namespace with a pod quota (NRP namespaces
have one) and a controller that submitted more Jobs than it allows. The Jobs over the quota exist,
accepted, with no pod (its creation is forbidden: exceeded quota) and no ``active`` count; they start
when a place frees, which is when the new controller's own Jobs for the same outputs run. They must
be cancelled with the running ones.
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


def _post_pod(url: str, name: str, target: str, script: str) -> None:
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {"app": "snakemake"}},
            "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "snakemake", "image": "x", "command": ["/bin/sh"],
                 "args": ["-c", f"{script} # python -m snakemake --target-jobs '{target}' --cores 1"]}]}}}}
    req = urllib.request.Request(f"{url}/apis/batch/v1/namespaces/{NAMESPACE}/jobs", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer t", "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        assert r.status == 201


def test_a_pods_death_reads_like_a_local_failure(tmp_path, monkeypatch):
    """What ended a pod, as the Kubernetes API reports it (the strict fake answers as the API server
    does; read through the real `kubernetes` client): the controller's record of each failed Job
    (snakemake_compat.record_pod_status's reader) gives the final block the rule, the reason, the exit
    code and the fix: OOMKilled -> mem_mb, evicted for disk -> disk_mb, a deadline -> runtime/shards, and
    an ordinary failure keeps its own error line."""
    from types import SimpleNamespace

    import kubernetes.client

    from benchmaker.kube import load_config
    from benchmaker.podlogs import pod_failure_summary
    from benchmaker.snakemake_compat import _write_pod_status

    ctl = tmp_path / "controller"
    ctl.mkdir()
    fk = FakeKube(namespace=NAMESPACE, run_jobs=True, hide_paths=[str(ctl)], base_env={"PATH": "/usr/bin:/bin"},
                  fates={r"^evaluate_model:": "OOMKilled", r"^summary:": "Evicted", r"^export:": "DeadlineExceeded"})
    url = fk.start()
    monkeypatch.setenv("KUBECONFIG", str(fk.kubeconfig(tmp_path / "kubeconfig", url)))
    t0 = time.time()
    jobs = {"snakejob-oom": ("evaluate_model:system=big", "echo 'rule evaluate_model:'; sleep 120"),
            "snakejob-evicted": ("summary:", "sleep 120"),
            "snakejob-deadline": ("export:", "sleep 120"),
            "snakejob-plain": ("score:", "echo 'rule score:'; echo 'ValueError: qrels.jsonl has no rows'; exit 3")}
    try:
        for name, (target, script) in jobs.items():
            _post_pod(url, name, target, script)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(fk.state[n]["exit"] is None for n in jobs):
            time.sleep(0.1)
        load_config()
        logs = tmp_path / "kubernetes-logs"
        logs.mkdir()
        ex = SimpleNamespace(kubeapi=kubernetes.client.CoreV1Api(), batchapi=kubernetes.client.BatchV1Api(),
                             namespace=NAMESPACE, log_path=logs)
        for name in jobs:
            # as the executor does: the pod's log when there is a pod, then the report (our record)
            if ex.kubeapi.list_namespaced_pod(NAMESPACE, label_selector=f"job-name={name}").items:
                (logs / f"{name}.log").write_text(ex.kubeapi.read_namespaced_pod_log(f"{name}-p0d", NAMESPACE))
            _write_pod_status(ex, SimpleNamespace(external_jobid=name))
        with fk.lock:
            assert not fk.unexpected and not fk.rejected, (fk.unexpected, fk.rejected)
    finally:
        fk.stop()
    status = {n: json.loads((logs / f"{n}.status.json").read_text()) for n in jobs}
    assert status["snakejob-oom"] == {"reason": "OOMKilled", "exit_code": 137, "message": None,
                                      "rule": "evaluate_model"}, status
    assert status["snakejob-evicted"]["reason"] == "Evicted" and status["snakejob-evicted"]["exit_code"] == 137
    assert status["snakejob-deadline"]["reason"] == "DeadlineExceeded"
    assert status["snakejob-deadline"]["rule"] == "export"
    assert status["snakejob-plain"]["exit_code"] == 3 and status["snakejob-plain"]["reason"] == "Error"
    final = pod_failure_summary(t0, {}, logs)
    blocks = {b.split(" failed in its pod")[0].split()[-1]: b for b in final.split("benchmaker: rule ")[1:]}
    assert "Kubernetes: OOMKilled, exit code 137" in blocks["evaluate_model"], final
    assert "--set-resources evaluate_model:mem_mb=" in blocks["evaluate_model"] and "--retries 1" in final
    assert "Kubernetes: Evicted, exit code 137 (The node was low on resource: memory." in blocks["summary"], final
    assert "summary:mem_mb=" in blocks["summary"], final
    assert "Kubernetes: DeadlineExceeded (Job was active longer than specified deadline)" in blocks["export"], final
    assert "export:runtime=" in blocks["export"] and "n_shards" in blocks["export"], final
    assert "snakejob-deadline.status.json" in blocks["export"]   # no pod, no pod log: the record is named
    assert "ValueError: qrels.jsonl has no rows" in blocks["score"] and "exit code 3" in blocks["score"], final
    assert "fix:" not in blocks["score"], final
