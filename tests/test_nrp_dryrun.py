"""`snakemake --profile nrp` as the README writes it, against a local S3 and a fake Kubernetes API.

* S3: a `moto_server` on 127.0.0.1 stands in for NRP's Ceph RGW (bucket `sage-imsearch`, the
  profile's default: the name must be a valid S3 bucket name).
* Kubernetes: tests/fake_kube.py, a strict stand-in for the API calls of the kubernetes executor
  plugin; in the real run it "runs" every Job by executing the container's command in an empty
  folder (the pod's emptyDir) with the pod's environment, while the user's home folder (config
  file, rights map, weights) and the checkout are hidden from it (a private mount namespace), so
  a pod can only read what is in the bucket or on the image PVC.
* The user's files live outside the checkout, as a new user would have them: `~/my.yaml`, a local
  rights map, a local `local-dir:` CLIP folder, a seeds file and a metadata.jsonl.

The commands run in a copy of the checkout (a git repository, as a clone is), after
`benchmaker install-profiles`, so that `--profile nrp` is the bare name of the README.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import support
from fake_kube import FakeKube

ROOT = support.ROOT
BUCKET = "sage-imsearch"  # the profile's default bucket
PREFIX = "benchmaker/my-bench"
KEY = "test-access-key"
SECRET = "test-secret-key"
NAMESPACE = "sage"
PVC = "benchmaker-images"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory):
    exe = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    if not Path(exe).exists():
        pytest.fail("moto_server not installed (pip install 'moto[server]', in the test extra)")
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


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A copy of this checkout as a git repository (what `git clone` gives a user)."""
    dest = tmp_path_factory.mktemp("clone") / "benchmaker"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    xdg = tmp_path_factory.mktemp("xdg")
    cli = subprocess.run([sys.executable, "-c", "import sys; from benchmaker.cli import main; sys.exit(main())",
                          "install-profiles"], cwd=dest, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "XDG_CONFIG_HOME": str(xdg), "PYTHONPATH": str(dest / "src")})
    assert cli.returncode == 0, cli.stdout + cli.stderr
    return {"dir": dest, "xdg": xdg}


def _user_files(home: Path, corpus: Path, clip: Path, **overrides) -> tuple[Path, dict]:
    """~/my.yaml with a local rights map, local weights (local-dir:), seeds and metadata files."""
    home.mkdir(parents=True, exist_ok=True)
    models = home / "models" / "tiny-clip"
    if not models.exists():
        shutil.copytree(clip, models)
    cfg = support.tiny_config(home, corpus, models)
    cfg["paths"]["results"] = "results"  # relative: s3://BUCKET/PREFIX/results/...
    cfg["paths"]["rights_map"] = str(support.rights_map(home / "rights_map.json"))
    cfg = _merge(cfg, overrides)
    return support.write_config(home / "my.yaml", cfg), cfg


def _merge(cfg: dict, over: dict) -> dict:
    from benchmaker.config import deep_merge

    return deep_merge(cfg, over)


def _env(checkout, s3_url: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BENCHMAKER_", "SNAKEMAKE_", "AWS_", "KUBECONFIG"))}
    env.update({
        "HF_HUB_OFFLINE": "1", "XDG_CONFIG_HOME": str(checkout["xdg"]),
        # the README's exports
        "SNAKEMAKE_STORAGE_S3_ACCESS_KEY": KEY, "SNAKEMAKE_STORAGE_S3_SECRET_KEY": SECRET,
        "BENCHMAKER_S3_PREFIX": PREFIX, "BENCHMAKER_S3_ENDPOINT": s3_url,
        "BENCHMAKER_IMAGE": "gitlab-registry.nrp-nautilus.io/ndp/sage/benchmaker:test",
        "PYTHONPATH": str(checkout["dir"] / "src"),
        "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    })
    env["PATH"] = support.no_slurm_path(env.get("PATH", ""))
    env.update(extra)
    return env


def _snakemake(checkout, config: Path, env: dict, *args: str, timeout: int = 600):
    cmd = [sys.executable, "-m", "snakemake", "--profile", "nrp", "--configfile", str(config), *args]
    return subprocess.run(cmd, cwd=checkout["dir"], capture_output=True, text=True, env=env,
                          timeout=timeout)


def _keys(s3, prefix: str) -> dict[str, int]:
    out = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"]] = o["Size"]
    return out


def _clear(s3, prefix: str) -> None:
    for k in _keys(s3, prefix):
        s3.delete_object(Bucket=BUCKET, Key=k)


def _job_stats(out: str) -> dict[str, int]:
    table = out.split("Job stats:")[1].split("\n\n")[0]
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", table, flags=re.MULTILINE)}


def _resources(out: str, rule: str) -> list[str]:
    return re.findall(rf"rule {rule}:\n(?:    .*\n)*?    resources: (.*)", out)


# ------------------------------------------------------------------------------------ dry runs
def test_readme_dry_run_stages_local_inputs(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip):
    """Config outside the checkout, local rights map / metadata / seeds / weights: planned as staged
    copies under s3://BUCKET/PREFIX/results/<name>/inputs/, never as s3://...//home/..."""
    home = tmp_path / "home"
    meta = home / "metadata.jsonl"
    seeds = home / "seeds.jsonl"
    home.mkdir()
    meta.write_text("")
    seeds.write_text(json.dumps({"seed_image_ids": ["red/circle_0.jpg"]}) + "\n")
    config, cfg = _user_files(home, tiny_corpus, tiny_clip, paths={
        "metadata_jsonl": str(meta), "seeds_file": str(seeds)})
    _clear(s3_server["client"], PREFIX)
    res = _snakemake(checkout, config, _env(checkout, s3_server["url"]), "-n")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "Using profiles nrp and workflow specific profile profiles/default" in out
    assert "Ignoring source file" not in out, out  # the config file outside the checkout
    assert not re.search(r"s3://[^\s]*//", out), re.findall(r"s3://[^\s]*//[^\s]*", out)[:3]
    assert str(home) not in " ".join(re.findall(r"s3://\S+", out))
    base = f"s3://{BUCKET}/{PREFIX}/results/{cfg['benchmark']['name']}"
    staged = re.findall(rf"{re.escape(base)}/inputs/(file|dir)/([0-9a-f]{{12}})/([^\s,]+)", out)
    names = {(kind, name) for kind, _, name in staged}
    assert {("file", "rights_map.json"), ("file", "metadata.jsonl"), ("file", "seeds.jsonl"),
            ("dir", "tiny-clip")} <= names, names
    stats = _job_stats(out)
    # rights map, metadata, seeds + each shard's listing of the image folder (written by the controller)
    assert stats.get("stage_file") == 3 + cfg["n_shards"] and stats.get("stage_folder") == 1, stats
    assert {("file", f"{s:05d}.tsv") for s in range(cfg["n_shards"])} <= names, names
    # the relocated config file is what the jobs get
    copies = list((checkout["dir"] / ".snakemake" / "benchmaker" / "configfiles").glob("*-my.yaml"))
    assert copies and copies[0].read_bytes() == config.read_bytes()
    # GPU only where a model runs: vision (clip adapter) and embed_images
    for rule in ("vision", "embed_images"):
        rs = _resources(out, rule)
        assert len(rs) == cfg["n_shards"] and all("gpu=1" in r and "gpu_manufacturer=nvidia" in r
                                                  and "scale=0" in r for r in rs), rs
    for rule in ("preprocess", "plan", "judge", "embed_queries", "score", "summary", "export"):
        for r in _resources(out, rule):
            assert not re.search(r"\bgpu=", r), (rule, r)


def test_metadata_adapter_has_no_gpu(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip):
    """(Also: a pools file and a judge reuse file are staged like the seeds file; the seeds file, unused
    beside a pools file, is not.)"""
    home = tmp_path / "home"
    home.mkdir()
    meta, pools, reuse, seeds = (home / n for n in ("metadata.jsonl", "pools.jsonl", "reuse.jsonl", "seeds.jsonl"))
    for f in (meta, pools, reuse, seeds):
        f.write_text("")
    config, cfg = _user_files(home, tiny_corpus, tiny_clip, paths={
        "metadata_jsonl": str(meta), "pools_file": str(pools), "judge_reuse_file": str(reuse),
        "seeds_file": str(seeds)}, vision={"adapter": "metadata"})
    res = _snakemake(checkout, config, _env(checkout, s3_server["url"]), "-n")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    base = f"s3://{BUCKET}/{PREFIX}/results/{cfg['benchmark']['name']}"
    names = {n for n in re.findall(rf"{re.escape(base)}/inputs/file/[0-9a-f]{{12}}/([^\s,]+)", out)}
    assert {"pools.jsonl", "reuse.jsonl"} <= names and "seeds.jsonl" not in names, names
    assert str(home) not in " ".join(re.findall(r"s3://\S+", out))
    vision = _resources(out, "vision")
    assert len(vision) == cfg["n_shards"]
    for r in vision:
        assert not re.search(r"\bgpu=", r), r
    assert all("gpu=1" in r for r in _resources(out, "embed_images"))


@pytest.mark.parametrize("adapter,mode", [("openai", "sync"), ("openai", "batch"),
                                          ("gemini", "sync"), ("gemini", "batch")])
def test_api_adapters_stay_on_the_controller(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip,
                                             adapter, mode):
    """Vision and judge with an API adapter: the API-bound rules are localrules (keys stay on the
    controller), the batch build step is a cluster job without a GPU."""
    home = tmp_path / "home"
    config, cfg = _user_files(home, tiny_corpus, tiny_clip,
                              vision={"adapter": adapter, adapter: {"mode": mode}},
                              judge={"adapter": adapter, adapter: {"mode": mode}})
    dump = tmp_path / "localrules.json"
    # a dry run does not print which jobs are local; record Snakemake's own decision
    # (Workflow.is_local for the kubernetes executor) for every rule once the workflow is parsed
    hook = ("import json, os, snakemake.api, snakemake.workflow as W\n"
            "orig = W.Workflow.check_localrules\n"
            "def check(self):\n"
            "    json.dump({r.name: bool(r.name in self._localrules or r.norun) for r in self.rules},"
            " open(os.environ['LOCALRULES_DUMP'], 'w'))\n"
            "    return orig(self)\n"
            "W.Workflow.check_localrules = check\n"
            "import sys; from snakemake.cli import main; sys.argv[0] = 'snakemake'; main()\n")
    env = _env(checkout, s3_server["url"], LOCALRULES_DUMP=str(dump))
    res = subprocess.run([sys.executable, "-c", hook, "--profile", "nrp", "--configfile", str(config), "-n"],
                         cwd=checkout["dir"], capture_output=True, text=True, env=env, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    is_local = json.loads(dump.read_text())
    planned = set(re.findall(r"^rule (\w+):", out, flags=re.MULTILINE))
    local = {r for r in planned if is_local[r]}
    remote = planned - local
    from benchmaker.providers.settings import is_batch

    # batch mode of an adapter that has a Batch API (openai): build (cluster) -> submit -> collect
    # (controller); otherwise (sync, or gemini whose runner batches inside the rule) one API rule
    batch = is_batch(cfg["vision"])
    api_rules = ({"vision_submit", "vision_collect", "judge_submit", "judge_collect"}
                 if batch else {"vision", "judge"})
    assert api_rules <= local, (api_rules, local)
    assert not api_rules & remote, api_rules & remote
    if batch:
        assert {"vision_build", "judge_build"} <= remote
        for rule in ("vision_build", "judge_build"):
            assert not any(re.search(r"\bgpu=", r) for r in _resources(out, rule))
    assert {"embed_images", "preprocess"} <= remote and "merge_annotations" in local


# ------------------------------------------------------------------------------ preflight errors
@pytest.mark.parametrize("case,env,message", [
    ("bad bucket name", {"BENCHMAKER_S3_BUCKET": "sage_imsearch"}, "is not valid"),
    ("missing bucket", {"BENCHMAKER_S3_BUCKET": "no-such-bucket"}, "does not exist"),
    ("wrong key", {"SNAKEMAKE_STORAGE_S3_SECRET_KEY": ""}, "no S3 credentials"),
])
def test_s3_preflight_one_clear_error(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip, case, env, message):
    config, _ = _user_files(tmp_path / "home", tiny_corpus, tiny_clip)
    e = _env(checkout, s3_server["url"], **env)
    if not e.get("SNAKEMAKE_STORAGE_S3_SECRET_KEY"):
        e.pop("SNAKEMAKE_STORAGE_S3_SECRET_KEY")
        e.pop("SNAKEMAKE_STORAGE_S3_ACCESS_KEY")
    res = _snakemake(checkout, config, e, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert "S3 preflight" in out and message in out, out[-3000:]
    assert "has been submitted" not in out and "Get status with" not in out


def test_s3_preflight_checks(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip):
    """Missing bucket, unreachable endpoint, a prefix with "//" (wrong keys: test_staging.py)."""
    from benchmaker.staging import StagingError, check_s3_prefix

    with pytest.raises(StagingError, match="does not exist"):
        check_s3_prefix("s3://absent-bucket/x", endpoint_url=s3_server["url"], access_key=KEY,
                        secret_key=SECRET)
    with pytest.raises(StagingError, match="not reachable"):
        check_s3_prefix(f"s3://{BUCKET}/x", endpoint_url=f"http://127.0.0.1:{_free_port()}",
                        access_key=KEY, secret_key=SECRET, timeout=2)
    with pytest.raises(StagingError, match="'//'"):
        check_s3_prefix(f"s3://{BUCKET}/a//home/x", endpoint_url=s3_server["url"], access_key=KEY,
                        secret_key=SECRET)
    check_s3_prefix(f"s3://{BUCKET}/{PREFIX}", endpoint_url=s3_server["url"], access_key=KEY,
                    secret_key=SECRET)


def test_absolute_results_path_is_refused(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip):
    config, _ = _user_files(tmp_path / "home", tiny_corpus, tiny_clip,
                            paths={"results": str(tmp_path / "abs-results")})
    res = _snakemake(checkout, config, _env(checkout, s3_server["url"]), "-n")
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "paths.results is absolute" in out, out[-3000:]


# ------------------------------------------------------------------------ the real run (fake k8s)
def _pod_bin(tmp: Path) -> Path:
    """What the image provides on PATH: `python` (with snakemake, torch, the S3 plugin) and a `pip`
    whose `install --target .snakemake/pip-deployments snakemake-storage-plugin-s3` is recorded
    (the image has the plugin already; nothing is downloaded in tests)."""
    d = tmp / "podbin"
    d.mkdir()
    (d / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (d / "pip").write_text("#!/bin/sh\necho \"$@\" >> \"$POD_PIP_LOG\"\n"
                           "case \"$*\" in *snakemake-storage-plugin-s3*) exit 0;; esac\n"
                           "echo 'unexpected pip call' >&2; exit 1\n")
    for f in d.iterdir():
        f.chmod(0o755)
    return d


def _can_hide() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.fixture()
def kube(tmp_path):
    fakes = []

    def make(**kw):
        fk = FakeKube(namespace=NAMESPACE, **kw)
        url = fk.start()
        fakes.append(fk)
        return fk, fk.kubeconfig(tmp_path / f"kubeconfig-{len(fakes)}", url)

    yield make
    for fk in fakes:
        fk.stop()


@pytest.mark.slow
def test_readme_run_on_fake_kubernetes(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip, kube):
    """The whole pipeline: every non-local job is a Kubernetes Job whose pod, with an empty workdir
    and without the controller's files, finds all it reads in the bucket (or on the image PVC)."""
    s3 = s3_server["client"]
    _clear(s3, PREFIX)
    home = tmp_path / "home"
    corpus = tmp_path / "pvc" / "images"  # what the PVC holds
    shutil.copytree(tiny_corpus, corpus)
    config, cfg = _user_files(home, corpus, tiny_clip)
    hide = [str(home), str(checkout["dir"])] if _can_hide() else []
    pip_log = tmp_path / "pip.log"
    pod_home = tmp_path / "podhome"
    pod_home.mkdir()
    fk, kubeconfig = kube(run_jobs=True, pvcs={PVC}, base_env={
        "PATH": f"{_pod_bin(tmp_path)}:/usr/local/bin:/usr/bin:/bin", "HOME": str(pod_home),
        "HF_HUB_OFFLINE": "1", "POD_PIP_LOG": str(pip_log), "MPLCONFIGDIR": str(pod_home / "mpl"),
    }, hide_paths=hide)
    env = _env(checkout, s3_server["url"], KUBECONFIG=str(kubeconfig),
               BENCHMAKER_K8S_PVC=f"{PVC}:{corpus}", BENCHMAKER_K8S_JOBS="4")
    t0 = time.monotonic()
    res = _snakemake(checkout, config, env, "--retries", "0", "--latency-wait", "2", timeout=1500)
    wall = time.monotonic() - t0
    out = res.stdout + res.stderr
    failed = {n: st["log"][-3000:] for n, st in fk.state.items() if st["exit"] not in (0, None)}
    assert not fk.unexpected and not fk.rejected, (fk.unexpected, fk.rejected)
    assert res.returncode == 0, f"{out[-5000:]}\nfailed pods: {json.dumps(failed, indent=1)[-6000:]}"
    print(f"nrp run on fake k8s: {len(fk.jobs)} Jobs in {wall:.0f}s (hidden from pods: {hide})")

    # every non-local rule ran as a Job; localrules (staging, merge) never did
    by_rule: dict[str, list[dict]] = {}
    for body in fk.jobs.values():
        c = body["spec"]["template"]["spec"]["containers"][0]
        m = re.search(r"--target-jobs '(\w+):", c["args"][1])
        by_rule.setdefault(m.group(1), []).append(body)
    n = cfg["n_shards"]
    assert {r: len(b) for r, b in by_rule.items()} == {
        "preprocess": n, "vision": n, "embed_images": n, "plan": 1, "judge": 1, "embed_queries": 1,
        "score": 1, "summary": 1, "export": 1, "audit_labelling": 1, "audit_report": 1,
    }, sorted(by_rule)
    for rule, bodies in by_rule.items():
        for body in bodies:
            spec = body["spec"]["template"]["spec"]
            c = spec["containers"][0]
            req, lim = c["resources"]["requests"], c["resources"]["limits"]
            assert c["image"] == env["BENCHMAKER_IMAGE"]
            assert req["memory"] == lim["memory"] and req["cpu"] == lim["cpu"], (rule, req, lim)
            assert "ephemeral-storage" in req
            gpu = rule in ("vision", "embed_images")  # the clip adapter runs a model
            tol = [t for t in spec.get("tolerations") or [] if "gpu" in t["key"]]
            if gpu:
                assert req["nvidia.com/gpu"] == lim["nvidia.com/gpu"] == "1", (rule, req)
                assert tol == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                "effect": "NoSchedule"}], (rule, tol)
            else:
                assert not any("gpu" in k for k in (*req, *lim)) and not tol, (rule, req, tol)
            mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
            assert mounts[PVC] == str(corpus)
            assert KEY not in json.dumps(body) and SECRET not in json.dumps(body)
    # credentials reached the pods only through the per-run Secret, which is gone at the end
    assert fk.deleted_secrets and not fk.secrets

    keys = _keys(s3, PREFIX)
    base = f"{PREFIX}/results/{cfg['benchmark']['name']}"
    # the staged inputs, once each, byte-identical to the controller's files
    staged = {k: v for k, v in keys.items() if k.startswith(f"{base}/inputs/")}
    rights = [k for k in staged if k.endswith("/rights_map.json")]
    assert len(rights) == 1
    assert s3.get_object(Bucket=BUCKET, Key=rights[0])["Body"].read() == (home / "rights_map.json").read_bytes()
    weights = {Path(k).name for k in staged if "/inputs/dir/" in k}
    assert {p.name for p in (home / "models" / "tiny-clip").iterdir()} <= weights
    for f in ("images.jsonl", "annotations.jsonl", "query_plan.jsonl", "qrels.jsonl",
              "qrels_with_score.jsonl"):
        assert keys.get(f"{base}/{f}", 0) > 0, f
    assert any(k.startswith(f"{base}/hf_dataset/") for k in keys)
    assert any(k.startswith(f"{base}/summary/") for k in keys)
    # the pods got the workflow from the source archive in the bucket (removed at the end of the run)
    for body in fk.jobs.values():
        assert re.search(rf"--deploy-sources s3://{BUCKET}/{PREFIX}/snakemake-workflow-sources\.\w+\.tar\.xz",
                         body["spec"]["template"]["spec"]["containers"][0]["args"][1])
    assert not any("snakemake-workflow-sources" in k for k in keys)
    # the rights map was applied in the preprocess pod: the prefix rule licenses red/ images
    images = s3.get_object(Bucket=BUCKET, Key=f"{base}/images.jsonl")["Body"].read().decode()
    assert "CC-BY-4.0" in images
    assert pip_log.read_text().count("snakemake-storage-plugin-s3") == len(fk.jobs)

    # nothing to do the second time, and nothing is staged again
    again = _snakemake(checkout, config, env, "-n")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, \
        (again.stdout + again.stderr)[-3000:]
    assert _keys(s3, f"{base}/inputs/") == staged
