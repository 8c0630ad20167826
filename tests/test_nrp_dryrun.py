"""The nrp profile (Kubernetes executor + S3 default storage) against a local S3 server.

A `moto_server` on 127.0.0.1 stands in for NRP's Ceph RGW. The dry run must reach it (Snakemake
checks every input/output in S3), map every workflow file under s3://BUCKET/PREFIX/, and plan the
GPU rule with gpu=1, gpu_manufacturer=nvidia and scale=0, which the kubernetes executor turns into
an nvidia.com/gpu request and limit (checked against a fake Kubernetes API in test_k8s_job_spec).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import support

ROOT = support.ROOT
GPU_RULE = "embed_images"
BUCKET = "benchmaker-test"
PREFIX = "runs/ci"
KEY = "test-access-key"
SECRET = "test-secret-key"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    exe = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    if not Path(exe).exists():
        pytest.skip("moto_server not installed (pip install 'moto[server]', in the test extra)")
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=fh)
    url = f"http://127.0.0.1:{port}"
    import boto3

    s3 = boto3.client("s3", endpoint_url=url, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                      region_name="us-east-1")
    try:
        for _ in range(100):
            try:
                s3.list_buckets()
                break
            except Exception:
                if proc.poll() is not None:
                    pytest.fail(f"moto_server exited: {log.read_text()[-2000:]}")
                time.sleep(0.1)
        s3.create_bucket(Bucket=BUCKET)
        yield {"url": url, "client": s3, "log": log}
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _workdir(tmp_path: Path) -> tuple[Path, dict]:
    # the controller lists image_root when it parses the workflow (change detection): it must exist
    support.make_corpus(tmp_path / "images", n_per=1, with_bad=False)
    cfg = support.tiny_config(tmp_path, tmp_path / "images", tmp_path / "clip")
    cfg["paths"]["rights_map"] = None  # a controller-local file; would have to live in S3 too
    cfg["paths"]["results"] = "results"  # relative: becomes s3://BUCKET/PREFIX/results/...
    return support.write_config(tmp_path / "config.yaml", cfg), cfg


def _snakemake(args: list[str], config: Path, workdir: Path, s3_url: str,
               extra_env: dict | None = None, timeout: int = 300,
               targets: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BENCHMAKER_", "SNAKEMAKE_STORAGE_S3_", "AWS_"))}
    env.update({
        "HF_HUB_OFFLINE": "1",
        "SNAKEMAKE_STORAGE_S3_ACCESS_KEY": KEY, "SNAKEMAKE_STORAGE_S3_SECRET_KEY": SECRET,
        "BENCHMAKER_S3_ENDPOINT": s3_url, "BENCHMAKER_S3_BUCKET": BUCKET,
        "BENCHMAKER_S3_PREFIX": PREFIX,
        "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        **(extra_env or {}),
    })
    cmd = [sys.executable, "-m", "snakemake", "--profile", "profiles/nrp", "-d", str(workdir),
           "--configfile", str(config), *args, *(["--", *targets] if targets else [])]
    env["PATH"] = support.no_slurm_path(env.get("PATH", ""))
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout)


def _resources(out: str, rule: str) -> list[str]:
    return re.findall(rf"rule {rule}:\n(?:    .*\n)*?    resources: (.*)", out)


def test_nrp_dry_run_against_local_s3(s3_server, tmp_path):
    config, cfg = _workdir(tmp_path)
    res = _snakemake(["-n"], config, tmp_path, s3_server["url"])
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "Using profiles profiles/nrp and workflow specific profile profiles/default" in out
    prefix = f"s3://{BUCKET}/{PREFIX}/results/{cfg['benchmark']['name']}/"
    assert f"{prefix}embeddings/images/00000.parquet" in out
    gpu = _resources(out, GPU_RULE)
    assert len(gpu) == cfg["n_shards"]
    for r in gpu:
        assert "gpu=1" in r and "gpu_manufacturer=nvidia" in r and "scale=0" in r, r
        assert "mem_mb=" in r and "runtime=" in r and "mem_mb=16000" not in r  # from the rule
    for r in _resources(out, "plan"):
        assert "scale=0" in r and "gpu" not in r
    assert "merge_annotations" in out  # a localrule: planned, runs on the controller
    # the dry run really asked the S3 server about the workflow's files
    requests = s3_server["log"].read_text()
    assert re.search(rf"(HEAD|GET) /{BUCKET}/{PREFIX}/results/", requests) or \
        re.search(rf"GET /{BUCKET}/?\?[^ ]*prefix={re.escape(PREFIX.split('/')[0])}", requests), \
        requests[-2000:]


def test_nrp_dry_run_sees_existing_objects(s3_server, tmp_path):
    """Objects already in the bucket change the plan: S3 is the source of truth for the nrp profile."""
    config, cfg = _workdir(tmp_path)
    base = f"{PREFIX}/results/{cfg['benchmark']['name']}"
    s3 = s3_server["client"]
    for key in ("images.jsonl", "quarantine.jsonl", "shards/images/00000.jsonl",
                "shards/images/00001.jsonl"):
        s3.put_object(Bucket=BUCKET, Key=f"{base}/{key}", Body=b"{}\n")
    target = f"results/{cfg['benchmark']['name']}/embeddings/images/00000.parquet"
    res = _snakemake(["-n", "--rerun-triggers", "mtime"], config, tmp_path, s3_server["url"],
                     targets=(target,))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out.split("Job stats:")[1], flags=re.M))
    assert jobs == {GPU_RULE: "1", "total": "1"}, out[-3000:]
    assert f"s3://{BUCKET}/{base}/shards/images/00000.jsonl (retrieve from storage)" in out


# ---------------------------------------------------------------------------------------------
# The executor's real Job spec, from a fake Kubernetes API (records what Snakemake creates).


class _FakeKube(BaseHTTPRequestHandler):
    created: list = []

    def log_message(self, *a):  # quiet
        pass

    def _send(self, code: int, obj: dict):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def do_POST(self):
        obj = self._body()
        type(self).created.append((self.path, obj))
        self._send(201, obj)

    def do_GET(self):
        if "/jobs/" in self.path:  # job status: report it failed, so that Snakemake stops at once
            name = self.path.split("/jobs/")[1].split("/")[0]
            self._send(200, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                             "status": {"failed": 1, "active": 0, "succeeded": 0}})
        elif "/pods" in self.path:
            self._send(200, {"apiVersion": "v1", "kind": "PodList", "items": [], "metadata": {}})
        else:
            self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def do_DELETE(self):
        self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})


@pytest.fixture()
def fake_kube(tmp_path):
    _FakeKube.created = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeKube)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": "sage"}}],
    }))
    yield kubeconfig, _FakeKube.created
    server.shutdown()


def test_k8s_job_spec_requests_nvidia_gpu(s3_server, fake_kube, tmp_path):
    kubeconfig, created = fake_kube
    config, cfg = _workdir(tmp_path)
    base = f"{PREFIX}/results/{cfg['benchmark']['name']}"
    s3 = s3_server["client"]
    for key in ("images.jsonl", "quarantine.jsonl", "shards/images/00000.jsonl",
                "shards/images/00001.jsonl"):
        s3.put_object(Bucket=BUCKET, Key=f"{base}/{key}", Body=b"{}\n")
    target = f"results/{cfg['benchmark']['name']}/embeddings/images/00000.parquet"
    res = _snakemake(["--retries", "0", "--latency-wait", "1", "--rerun-triggers", "mtime"],
                     config, tmp_path, s3_server["url"],
                     {"KUBECONFIG": str(kubeconfig), "BENCHMAKER_K8S_NAMESPACE": "sage"}, timeout=300,
                     targets=(target,))
    out = res.stdout + res.stderr
    jobs = [obj for path, obj in created if path.endswith("/namespaces/sage/jobs")]
    assert jobs, f"no Job was created in namespace sage:\n{out[-4000:]}"
    assert res.returncode != 0  # the fake API reports the Job as failed
    spec = jobs[0]["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["image"] == "gitlab-registry.nrp-nautilus.io/ndp/sage/benchmaker:latest"
    req, lim = container["resources"]["requests"], container["resources"]["limits"]
    assert req["nvidia.com/gpu"] == lim["nvidia.com/gpu"] == "1"
    # memory from the rule (benchmaker/resources.py: torch + model + loader for this shard)
    assert req["memory"] == lim["memory"] and 500 <= int(req["memory"].rstrip("M")) < 16000
    assert req["cpu"] == lim["cpu"]  # kubernetes-cpu-scalar 1.0: NRP's limit/request rule
    assert int(req["ephemeral-storage"].rstrip("M")) >= 1000
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
            "effect": "NoSchedule"} in spec["tolerations"]
    assert f"--target-jobs 'embed_images:shard=00000'" in " ".join(container.get("args") or []) + \
        " ".join(container.get("command") or [])
    # credentials travel as a k8s Secret made from the controller's environment, never in the spec
    secrets = [obj for path, obj in created if path.endswith("/namespaces/sage/secrets")]
    assert secrets and KEY not in json.dumps(jobs[0])
