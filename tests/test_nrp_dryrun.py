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
    # two clip systems of the similarity stage's local model: in fp32 it loads the model (a GPU job
    # reading the staged folder); as configured for similarity it ranks that stage's embeddings
    model = f"local-dir:{home / 'models' / 'tiny-clip'}"
    config, cfg = _user_files(home, tiny_corpus, tiny_clip, paths={
        "metadata_jsonl": str(meta), "seeds_file": str(seeds)}, evaluate={"systems": [
            {"name": "same", "kind": "clip", "model": model, "device": "cpu", "num_workers": 0},
            {"name": "fp32", "kind": "clip", "model": model, "device": "cpu", "precision": "fp32"}]})
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
    for rule in ("preprocess", "decode_images", "plan", "queries", "judge", "embed_queries", "score", "summary",
                 "export", "evaluate_system"):
        for r in _resources(out, rule):
            assert not re.search(r"\bgpu=", r), (rule, r)
    jobs = {m.group(2): m.group(1) for m in re.finditer(r"rule (\w+):\n(?:    .*\n)*?    wildcards: system=(\S+)", out)}
    assert jobs == {"same": "evaluate_system", "fp32": "evaluate_model"}, jobs
    assert all("gpu=1" in r for r in _resources(out, "evaluate_model"))
    inputs = dict(re.findall(r"    input: (.*)\n(?:    .*\n)*?    wildcards: system=(\S+)", out))
    inputs = {v: [p.split(" (")[0] for p in k.split(", ")] for k, v in inputs.items()}  # " (retrieve from storage)"
    assert f"{base}/embeddings/queries.parquet" in inputs["same"] and f"{base}/embeddings/images/00000.parquet" \
        in inputs["same"] and not any("/inputs/" in p for p in inputs["same"]), inputs["same"]
    assert any(re.search(r"/inputs/dir/[0-9a-f]{12}/tiny-clip$", p) for p in inputs["fp32"]), inputs["fp32"]


_POD_CONFIG_HOOK = """
import json, os, snakemake.api, snakemake.workflow as W
orig = W.Workflow.check_localrules
def check(self):
    from snakemake.spawn_jobs import SpawnedJobArgsFactory
    # what every pod is given (--configfiles ...) and the config the controller validated
    json.dump({"configfiles": SpawnedJobArgsFactory(self).get_configfiles_arg(), "config": self.config},
              open(os.environ['POD_CONFIG_DUMP'], 'w'))
    return orig(self)
W.Workflow.check_localrules = check
import sys; from snakemake.cli import main; sys.argv[0] = 'snakemake'; main()
"""


def test_pods_validate_to_the_controllers_config(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip):
    """Same inputs, same bytes, whatever the executor: the config a pod ends with (Snakemake parsing
    the config files it is given where the user's folders do not exist) is the config the controller
    and a local run of the same config validated. The smoke-test verdict reads the local-dir: model
    folder (benchmaker.smoke): without the controller's verdict a pod records "not a smoke test", and
    the report, the card, config_values.csv and dataset_metadata.json differ from a local run's."""
    import shlex

    from benchmaker.export import flatten_config

    home = tmp_path / "home"
    config, cfg = _user_files(home, tiny_corpus, tiny_clip)

    def parsed(*args: str, nrp: bool) -> dict:
        dump = tmp_path / f"dump-{len(list(tmp_path.glob('dump-*')))}.json"
        env = _env(checkout, s3_server["url"], POD_CONFIG_DUMP=str(dump))
        where = [] if nrp else ["-s", str(checkout["dir"] / "Snakefile"), "-d", str(tmp_path / "local"), "-c1"]
        res = subprocess.run([sys.executable, "-c", _POD_CONFIG_HOOK, *where, *args, "-n"], cwd=checkout["dir"],
                             capture_output=True, text=True, timeout=600, env=env)
        assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
        return json.loads(dump.read_text())

    controller = parsed("--profile", "nrp", "--configfile", str(config), nrp=True)
    assert controller["config"]["benchmark"]["smoke_test"] is True, controller["config"]["benchmark"]
    local = parsed("--configfile", str(config), nrp=False)["config"]
    assert local == controller["config"]
    args = shlex.split(controller["configfiles"])
    assert args[0] == "--configfiles" and len(args) > 1, args
    files = [(checkout["dir"] / f).resolve() for f in args[1:]]
    for f in files:  # below the working directory: in the pods' source archive
        assert f.is_relative_to(checkout["dir"].resolve()), f
    # a pod: the same config files, parsed where the user's model folder does not exist
    (home / "models").rename(home / "hidden-models")
    try:
        pod = parsed("--configfiles", *map(str, files), nrp=False)["config"]
    finally:
        (home / "hidden-models").rename(home / "models")
    assert flatten_config(pod) == flatten_config(local)  # config_values.csv, row by row
    assert pod == local


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
    api_rules = ({"vision_submit", "vision_collect", "judge_submit", "judge_collect", "queries_submit",
                  "queries_collect"} if batch else {"vision", "judge", "queries"})
    assert api_rules <= local, (api_rules, local)
    assert not api_rules & remote, api_rules & remote
    if batch:
        assert {"vision_build", "judge_build", "queries_build"} <= remote
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
    (the image has the plugin already; nothing is downloaded in tests). The image has no SLURM
    client: an `scontrol` that fails at once stands in for the missing one (this host's, where
    tests/test_slurm.py installed it, retries 10 s per pod's Snakemake with no controller running)."""
    d = tmp / "podbin"
    d.mkdir()
    (d / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (d / "pip").write_text("#!/bin/sh\necho \"$@\" >> \"$POD_PIP_LOG\"\n"
                           "case \"$*\" in *snakemake-storage-plugin-s3*) exit 0;; esac\n"
                           "echo 'unexpected pip call' >&2; exit 1\n")
    (d / "scontrol").write_text("#!/bin/sh\necho 'scontrol: command not found in the image' >&2\nexit 127\n")
    for f in d.iterdir():
        f.chmod(0o755)
    return d


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
    and without the controller's files, finds all it reads in the bucket (or on the image PVC). The
    clip vision adapter with a local-dir: model and a seeds file (the shipped-Job test runs the
    metadata adapter and a pools file instead)."""
    s3 = s3_server["client"]
    _clear(s3, PREFIX)
    home = tmp_path / "home"
    corpus = tmp_path / "pvc" / "images"  # what the PVC holds
    shutil.copytree(tiny_corpus, corpus)
    home.mkdir()
    seeds = ["red/circle_0.jpg", "blue/square_0.jpg"]
    (home / "seeds.jsonl").write_text("".join(json.dumps({"seed_image_ids": [i]}) + "\n" for i in seeds))
    # one shard: every rule still runs as a pod that sees only the bucket and the PVC (shard-parallel
    # staging and requests are the dry runs' to check: test_readme_dry_run_stages_local_inputs)
    config, cfg = _user_files(home, corpus, tiny_clip, n_shards=1, paths={"seeds_file": str(home / "seeds.jsonl")})
    hide = [str(home), str(checkout["dir"])]  # FakeKube fails where it cannot hide them
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
    # the plugin asks for each Job's status every second instead of every 10 s: a finished pod's
    # dependants start at once (the chain of rules is a dozen Jobs long)
    res = _snakemake(checkout, config, env, "--retries", "0", "--latency-wait", "2",
                     "--seconds-between-status-checks", "1", timeout=1500)
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
        "preprocess": n, "vision": n, "decode_images": n, "embed_images": n, "plan": 1, "queries": 1, "judge": 1,
        "embed_queries": 1,
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
    # the plan pod read the staged seeds file: its seeds, in its order
    plan = s3.get_object(Bucket=BUCKET, Key=f"{base}/query_plan.jsonl")["Body"].read().decode().splitlines()
    assert [json.loads(q)["seed_image_ids"] for q in plan] == [[i] for i in seeds], plan[:2]
    # the export pod, which cannot see the tiny CLIP's folder, records the controller's (and a local
    # run's) smoke-test verdict
    meta = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{base}/hf_dataset/dataset_metadata.json")["Body"].read())
    assert meta["smoke_test"] is True and "tinyclip" in meta["smoke_reason"], meta["smoke_reason"]
    assert pip_log.read_text().count("snakemake-storage-plugin-s3") == len(fk.jobs)

    # nothing to do the second time, and nothing is staged again
    again = _snakemake(checkout, config, env, "-n")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr, \
        (again.stdout + again.stderr)[-3000:]
    assert _keys(s3, f"{base}/inputs/") == staged


# ----------------------------------------------------- the shipped controller Job (deploy/nrp/), as is
def _image(tmp: Path) -> Path:
    """/opt/benchmaker of the image: what the Dockerfile COPYs there (the library is also installed:
    the pods' `python` imports it from here, as the image's site-packages would give it)."""
    text = (ROOT / "Dockerfile").read_text()
    assert "WORKDIR /opt/benchmaker" in text
    copied = re.findall(r"^COPY (.+) \./\S*$", text.split("WORKDIR /opt/benchmaker", 1)[1].split("WORKDIR", 1)[0],
                        flags=re.MULTILINE)
    names = [n for line in copied for n in line.split()]
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    dest = tmp / "opt" / "benchmaker"
    for f in filter(None, files):
        if f.split("/")[0] in names and (ROOT / f).exists():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f, follow_symlinks=False)
    assert (dest / "Snakefile").is_file() and (dest / "src" / "benchmaker").is_dir()
    return dest


def _good_images(corpus: Path) -> list[str]:
    """The corpus's image ids that preprocess keeps (not the broken/ files)."""
    return sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*")
                  if p.is_file() and not p.relative_to(corpus).as_posix().startswith("broken/"))


_MILVUS_LITE = """
import json, sys
import numpy as np, polars as pl
from pymilvus import MilvusClient
from benchmaker.evaluate.milvus import index_embeddings
images = json.loads(sys.argv[2])
vecs = np.random.default_rng(0).standard_normal((len(images), 64)).astype("float32")
client = MilvusClient(sys.argv[1])
n = index_embeddings(client, "bench_images", pl.DataFrame({"image_id": images, "embedding": vecs.tolist()}))
client.close()
assert n == len(images), n
"""


def _milvus_lite(db: Path, images: list[str]) -> None:
    """A Milvus Lite database holding one 64-d vector (the tiny CLIP's width) per image, made in a
    process of its own (Milvus Lite holds the database's lock until its process ends)."""
    r = subprocess.run([sys.executable, "-c", _MILVUS_LITE, str(db), json.dumps(images)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0, r.stderr[-3000:]


def _all_features(home: Path, corpus: Path, clip: Path, cfg_dir: Path, *, openai_url: str, search_url: str) -> dict:
    """A config with every feature that reads a file of the user's: every evaluate system kind (clip
    with a local model folder, bm25, hybrid, a reranker through the strict fake OpenAI, a local run
    file, an http service and a Milvus Lite file, both queried from the controller), the audit with a
    human label file and a second judge, judge label reuse, a rights map, pool deepening, and the
    collection's own labels: the metadata vision adapter reads them from a metadata file, and the plan
    is a pools file (the clip vision adapter and a seeds file, which these replace, run in
    test_readme_run_on_fake_kubernetes)."""
    from test_evaluate_live import _http_system

    from benchmaker.ids import trec_id

    home.mkdir(parents=True, exist_ok=True)
    models = home / "models" / "tiny-clip"
    shutil.copytree(clip, models)
    eval_model = home / "models" / "eval-clip"
    shutil.copytree(clip, eval_model)
    images = sorted(p.relative_to(corpus).as_posix() for p in corpus.rglob("*.jpg"))
    good = _good_images(corpus)
    # the collection's labels (<color>/<shape>_<i>.<ext>) for the metadata vision adapter
    labels = {i: {"color": i.split("/")[0], "shape": i.split("/")[1].split("_")[0],
                  "is_bright": i.split("/")[0] in ("yellow", "red")} for i in good}
    (home / "metadata.jsonl").write_text("".join(json.dumps({"image_id": i, "site": "W0", **labels[i]}) + "\n"
                                                 for i in good))
    # fixed pools: a seed, another image of its colour and one of each other colour
    pools = []
    for n, colour in enumerate(("red", "blue")):
        mine = [i for i in good if labels[i]["color"] == colour]
        others = [next(i for i in good if labels[i]["color"] == c) for c in ("green", "yellow", "gray")]
        pools.append({"query_id": f"tiny_q{n + 1:04d}", "seed_image_ids": [mine[0]],
                      "candidate_image_ids": [mine[0], mine[1], *others]})
    (home / "pools.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pools))
    (home / "reuse.jsonl").write_text("")
    (home / "erin.csv").write_text("item_id,label\nnot-labelled-yet,\n")
    (home / "prod.trec").write_text("".join(f"{trec_id('tiny_q0001')} Q0 {trec_id(i)} {n + 1} {10 - n} prod\n"
                                            for n, i in enumerate(images[:5])))
    cfg = support.tiny_config(home, corpus, models, n_shards=1)
    cfg["paths"].update(results="results", rights_map=str(support.rights_map(cfg_dir / "rights_map.json")),
                        metadata_jsonl=str(home / "metadata.jsonl"), pools_file=str(home / "pools.jsonl"),
                        judge_reuse_file=str(home / "reuse.jsonl"))
    cfg["vision"] = {"adapter": "metadata"}
    cfg["audit"] = {"sample_size": 8, "bootstrap": 10, "require_complete": False,
                    "human_labels": [{"path": str(home / "erin.csv"), "rater": "erin"}],
                    "second_judge": {"name": "loose", "judge": {"rules": {"relevant_min_jaccard": 0.0}}}}
    cfg["evaluate"] = {"k": [5], "systems": [
        {"name": "eval-clip", "kind": "clip", "model": f"local-dir:{eval_model}", "device": "cpu", "num_workers": 0},
        # the similarity stage's own model: a GPU-less pod ranking that stage's embeddings files
        {"name": "same-clip", "kind": "clip", "model": cfg["similarity"]["model"], "pretrained": None,
         "device": cfg["similarity"]["device"]},
        {"name": "bm25", "kind": "bm25"},
        {"name": "fused", "kind": "hybrid", "systems": ["eval-clip", "bm25"]},
        {"name": "prod", "kind": "trec_run", "path": str(home / "prod.trec")},
        {"name": "vlm", "kind": "rerank", "base": "eval-clip", "k": 3,
         # mode: sync spelled out: under Snakemake, llm_common's default (batch) reaches the system
         "llm": {"model": "gpt-5-mini", "mode": "sync", "base_url": openai_url, "image_max_side": 64,
                 "max_attempts": 2}},
        _http_system(search_url),  # "live"
        {"name": "vdb", "kind": "milvus", "db_file": str(home / "vdb.db"), "collection": "bench_images",
         "model": f"local-dir:{eval_model}", "device": "cpu", "depth": 6, "version": "lite-1"},
    ]}
    # pool deepening: the offline judge labels what the systems ranked above the pools (docs/deepen.md)
    cfg["deepen"] = {"enabled": True, "k": 3}
    _milvus_lite(home / "vdb.db", _good_images(corpus))
    return cfg


def _checkout_but_the_venv(venv_python: Path) -> list[str]:
    """Every folder of the checkout, except the one holding the test's Python (in CI the venv is
    ROOT/.venv: the pods run that interpreter as the image's, so it must stay visible)."""
    keep = Path(venv_python).parent.parent  # the venv (venv_python is realpath(sys.prefix)/bin/python)
    return [str(p) for p in sorted(ROOT.iterdir())
            if p.is_dir() and not p.is_symlink() and p.resolve() not in (keep, *keep.parents)]


@pytest.mark.slow
@pytest.mark.heavy
def test_shipped_controller_job_on_fake_kubernetes(s3_server, tmp_path, tiny_corpus, tiny_clip, kube):
    """deploy/nrp/controller-job.yaml's own command (the copy of the workflow into /state, which is no
    git repository, then `snakemake --profile profiles/nrp --configfile /config/my.yaml`), with the
    Job's environment, against S3 and the strict fake Kubernetes API, on a config with every feature
    that reads the user's files on: every cluster job succeeds in a pod that sees neither the
    controller's folders nor the user's (only the bucket, the image volume and the image)."""
    import yaml

    job = yaml.safe_load((ROOT / "deploy" / "nrp" / "controller-job.yaml").read_text())
    pod = job["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["command"] == ["/bin/sh", "-c"] and c["workingDir"] == "/state"
    image = _image(tmp_path)
    state, cfg_dir, data = tmp_path / "state", tmp_path / "config", tmp_path / "data"
    for d in (state, cfg_dir):
        d.mkdir()
    shutil.copytree(tiny_corpus, data / "images")
    home = tmp_path / "home"  # where the user made the config map's files
    import fake_openai
    from test_evaluate_live import TOKEN, Service

    openai = fake_openai.start(steps=2)  # the reranker's provider (sync mode)
    search = Service(_good_images(data / "images"), depth=8)  # the http system's search service
    try:
        _shipped_job_run(s3_server, tmp_path, tiny_clip, kube, c, image, state, cfg_dir, data, home, openai,
                         search, TOKEN)
    finally:
        fake_openai.stop(openai)
        support.shutdown(search.srv)


def _shipped_job_run(s3_server, tmp_path, tiny_clip, kube, c, image, state, cfg_dir, data, home, openai, search,
                     token):
    cfg = _all_features(home, data / "images", tiny_clip, cfg_dir, openai_url=openai.base_url, search_url=search.url)
    support.write_config(cfg_dir / "my.yaml", cfg)
    mounts = {"/opt/benchmaker": str(image), "/state": str(state), "/config": str(cfg_dir), "/data": str(data)}

    def here(text: str) -> str:  # the container's paths -> this machine's folders (each path once)
        pattern = "|".join(re.escape(k) for k in mounts)
        return re.sub(rf"(?<![\w./-])({pattern})(?=/|\s|$)", lambda m: mounts[m.group(1)], text)

    script = here(c["args"][0])
    assert "git" not in script  # the folder the workflow runs from is a plain copy
    _clear(s3_server["client"], PREFIX)
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path / "ctlhome"),
           "PYTHONPATH": str(image / "src"), "HF_HUB_OFFLINE": "1", "MPLCONFIGDIR": str(tmp_path / "mpl"),
           # envFrom: the benchmaker-s3 Secret (deploy/nrp/s3-secret.example.yaml's keys)
           "SNAKEMAKE_STORAGE_S3_ACCESS_KEY": KEY, "SNAKEMAKE_STORAGE_S3_SECRET_KEY": SECRET,
           # envFrom: the benchmaker-api Secret (the reranker's key; the http system's auth_env)
           "OPENAI_API_KEY": "sk-test", "SEARCH_TOKEN": token,
           "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}
    assert {"secretRef": {"name": "benchmaker-api", "optional": True}} in c["envFrom"]
    for e in c["env"]:
        if "valueFrom" in e:
            assert e["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}, e
            env[e["name"]] = NAMESPACE
        else:
            env[e["name"]] = here(e["value"])
    assert env["BENCHMAKER_S3_BUCKET"] == BUCKET and env["BENCHMAKER_S3_PREFIX"] == PREFIX
    env["BENCHMAKER_S3_ENDPOINT"] = s3_server["url"]  # the in-cluster Ceph RGW -> moto
    env["PATH"] = support.no_slurm_path(env["PATH"])
    (tmp_path / "ctlhome").mkdir()
    # the pods: the image's python (the library installed from /opt/benchmaker) and nothing of ours
    pod_home = tmp_path / "podhome"
    pod_home.mkdir()
    podbin = _pod_bin(tmp_path)
    venv_python = Path(os.path.realpath(sys.prefix)) / "bin" / "python"  # not below the hidden checkout
    (podbin / "python").write_text(f"#!/bin/sh\nPYTHONPATH={image / 'src'} exec {venv_python} \"$@\"\n")
    fk, kubeconfig = kube(run_jobs=True, pvcs={PVC}, base_env={
        "PATH": f"{podbin}:/usr/local/bin:/usr/bin:/bin", "HOME": str(pod_home), "HF_HUB_OFFLINE": "1",
        "POD_PIP_LOG": str(tmp_path / "pip.log"), "MPLCONFIGDIR": str(pod_home / "mpl"),
    }, hide_paths=[str(state), str(cfg_dir), str(home), *_checkout_but_the_venv(venv_python)])
    env["KUBECONFIG"] = str(kubeconfig)
    t0 = time.monotonic()
    res = subprocess.run(["/bin/sh", "-c", script], cwd=state, env=env, capture_output=True, text=True,
                         timeout=2400)
    wall = time.monotonic() - t0
    out = res.stdout + res.stderr
    failed = {n: st["log"][-3000:] for n, st in fk.state.items() if st["exit"] not in (0, None)}
    assert not fk.unexpected and not fk.rejected, (fk.unexpected, fk.rejected)
    assert res.returncode == 0 and not failed, f"{out[-5000:]}\nfailed pods: {json.dumps(failed, indent=1)[-8000:]}"
    assert not (state / ".git").exists()
    print(f"controller Job on fake k8s: {len(fk.jobs)} Jobs in {wall:.0f}s")
    rules = {re.search(r"--target-jobs '(\w+):", b["spec"]["template"]["spec"]["containers"][0]["args"][1]).group(1)
             for b in fk.jobs.values()}
    assert {"preprocess", "vision", "embed_images", "plan", "queries", "judge", "score", "summary", "export",
            "evaluate_model", "evaluate_system", "audit_judge2", "audit_report"} <= rules, rules
    # the reranker and the live systems ran on the controller (evaluate_api, a local rule), with its keys
    assert "evaluate_api" not in rules and re.search(r"localrule evaluate_api:", out), out[-3000:]
    assert openai.count("POST", "/v1/responses") > 0 and search.requests
    for body in fk.jobs.values():
        assert "OPENAI_API_KEY" not in json.dumps(body) and token not in json.dumps(body)
    s3 = s3_server["client"]
    keys = _keys(s3, PREFIX)
    base = f"{PREFIX}/results/{cfg['benchmark']['name']}"
    staged = {Path(k).name for k in keys if k.startswith(f"{base}/inputs/")}
    assert {"rights_map.json", "metadata.jsonl", "pools.jsonl", "reuse.jsonl", "erin.csv", "prod.trec"} <= staged
    # the vision pods labelled the images from the staged metadata (no GPU), the plan pod read the pools
    for b in fk.jobs.values():
        if re.search(r"--target-jobs 'vision:", b["spec"]["template"]["spec"]["containers"][0]["args"][1]):
            assert "nvidia.com/gpu" not in json.dumps(b["spec"]["template"]["spec"]["containers"][0]["resources"])
    ann = [json.loads(line) for line in s3.get_object(Bucket=BUCKET, Key=f"{base}/annotations.jsonl")["Body"]
           .read().decode().splitlines()]
    assert ann and all(a["color"] == a["image_id"].split("/")[0] for a in ann), ann[:2]
    plan = [json.loads(line) for line in s3.get_object(Bucket=BUCKET, Key=f"{base}/query_plan.jsonl")["Body"]
            .read().decode().splitlines()]
    assert [q["query_id"] for q in plan] == ["tiny_q0001", "tiny_q0002"], [q["query_id"] for q in plan]
    assert "vdb.db" not in staged  # the Milvus Lite file is read in place by the controller (x-path-use)
    board = s3.get_object(Bucket=BUCKET, Key=f"{base}/evaluate/leaderboard.csv")["Body"].read().decode()
    names = ("eval-clip", "same-clip", "bm25", "fused", "prod", "vlm", "live", "vdb")
    assert all(name in board for name in names), board
    # the system with the similarity stage's model ran in a pod without a GPU, from that stage's files
    same = [b["spec"]["template"]["spec"]["containers"][0] for b in fk.jobs.values()
            if re.search(r"--target-jobs 'evaluate\w*:system=same-clip'",
                         b["spec"]["template"]["spec"]["containers"][0]["args"][1])]
    assert same and all("--target-jobs 'evaluate_system:" in c["args"][1] for c in same), same
    assert not any("nvidia.com/gpu" in json.dumps(c["resources"]) for c in same), same
    meta = json.loads(s3.get_object(Bucket=BUCKET, Key=f"{base}/evaluate/runs/same-clip.json")["Body"].read())
    assert meta["timing"]["embeddings"] == "similarity stage" and meta["timing"]["images_indexed"] > 0, meta
    # no path of a pod's disk (its copies of staged files) in what is published or reported
    for k in keys:
        if k.startswith((f"{base}/hf_dataset/", f"{base}/summary/", f"{base}/evaluate/", f"{base}/audit/")) \
                and k.endswith((".md", ".json", ".jsonl", ".csv", ".html")):
            text = s3.get_object(Bucket=BUCKET, Key=k)["Body"].read().decode()
            assert ".snakemake/storage" not in text, k
    assert any(k.startswith(f"{base}/deepen/") for k in keys)
    _same_as_local(s3, base, cfg, tmp_path, {"OPENAI_API_KEY": "sk-test", "SEARCH_TOKEN": token})


# What may differ between two builds of the same inputs, each file named, with the reason
# (docs/export.md, "run_facts.json"): the run facts, and the quality-vs-compute chart of the results'
# summary (it plots the systems' query latencies; the dataset's copy of the summary leaves it out).
RUN_RECORDS = {
    "hf_dataset/run_facts.json": "the run facts: creation time, machine, every timing",
    "summary/evaluate/quality_vs_latency.png": "plots query latency (a timing), kept out of the dataset",
}


def _same_as_local(s3, base: str, cfg: dict, tmp_path: Path, env: dict) -> None:
    """Every executor publishes the same files: the same config run locally, in strict mode (each job
    reads only what it declares, benchmaker/strict.py), gives the same complete file lists of
    summary/ and hf_dataset/ as the cluster run left in the bucket (the evaluate result files beside
    the leaderboard included), and the same bytes in every file but RUN_RECORDS."""
    import hashlib

    cluster = {}
    for k in _keys(s3, f"{base}/"):
        rel = k[len(base) + 1:]
        data = s3.get_object(Bucket=BUCKET, Key=k)["Body"].read()
        (tmp_path / "cluster-tree" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cluster-tree" / rel).write_bytes(data)  # the bucket's results: a diff when bytes differ
        if rel.split("/")[0] in ("summary", "hf_dataset"):
            cluster[rel] = hashlib.sha256(data).hexdigest()
    here = tmp_path / "local-run"
    here.mkdir()
    t0 = time.monotonic()
    r = support.snakemake(["-c2"], here, support.write_config(here / "my.yaml", cfg),
                          env={**env, "BENCHMAKER_STRICT": "1", "MPLCONFIGDIR": str(tmp_path / "mpl")}, timeout=2400)
    assert r.returncode == 0, (r.stdout + r.stderr)[-5000:]
    print(f"the same config locally (strict mode): {time.monotonic() - t0:.0f}s")
    res = here / cfg["paths"]["results"] / cfg["benchmark"]["name"]
    local = {f.relative_to(res).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()
             for d in ("summary", "hf_dataset") for f in sorted((res / d).rglob("*")) if f.is_file()}
    assert sorted(local) == sorted(cluster), {"local only": sorted(set(local) - set(cluster)),
                                              "cluster only": sorted(set(cluster) - set(local))}
    assert {"summary/evaluate/drilldown.csv", "summary/evaluate/sage_leaderboard.csv",
            "hf_dataset/evaluate/leaderboard.json"} <= set(local), sorted(local)
    assert set(RUN_RECORDS) <= set(local), sorted(set(RUN_RECORDS) - set(local))
    differ = sorted(k for k in local if local[k] != cluster[k] and k not in RUN_RECORDS)
    print(f"summary/ and hf_dataset/: {len(local)} files, the same list; bytes differ in {len(differ)}: {differ}")
    assert not differ, (f"{len(differ)} of {len(local)} files differ between the cluster run and the local run "
                        f"(diff {tmp_path / 'cluster-tree'} against {res}): {differ}")


# ------------------------------------------------ staging derived from the schema's x-path marking
# How to switch each marked key on (a config override using the file or folder `p`), in two groups
# that can be on together. A key marked `x-path` that is missing here fails the test below: add how
# to switch it on, and the test then checks that the dry run stages it.
def _path_examples(p):
    return {
        "paths.rights_map": (0, {"paths": {"rights_map": p}}),
        "paths.metadata_jsonl": (0, {"paths": {"metadata_jsonl": p}}),
        "paths.seeds_file": (0, {"paths": {"seeds_file": p}}),
        "paths.pools_file": (1, {"paths": {"pools_file": p}}),
        "paths.judge_reuse_file": (0, {"paths": {"judge_reuse_file": p}}),
        "vision.clip.model": (0, {"vision": {"clip": {"model": f"local-dir:{p}", "pretrained": None}}}),
        "vision.clip.pretrained": (1, {"vision": {"clip": {"model": "ViT-B-32", "pretrained": p}}}),
        "similarity.model": (0, {"similarity": {"model": f"local-dir:{p}", "pretrained": None}}),
        "similarity.pretrained": (1, {"similarity": {"model": "ViT-B-32", "pretrained": p}}),
        "audit.human_labels[].path": (0, {"audit": {"human_labels": [{"path": p}]}}),
        "evaluate.systems[].model": (0, {"evaluate": {"systems": [
            {"name": "c1", "kind": "clip", "model": f"local-dir:{p}"}]}}),
        "evaluate.systems[].pretrained": (0, {"evaluate": {"systems": [
            {"name": "c2", "kind": "clip", "model": "ViT-B-32", "pretrained": p}]}}),
        "evaluate.systems[].path": (0, {"evaluate": {"systems": [{"name": "t1", "kind": "trec_run", "path": p}]}}),
        "evaluate.compare.baseline": (2, {"evaluate": {"systems": [{"name": "b1", "kind": "bm25"}],
                                                       "compare": {"baseline": p}}}),
    }


def _merge_lists(cfg: dict, over: dict) -> dict:
    """deep merge that appends lists (several evaluate systems from several examples)."""
    out = dict(cfg)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge_lists(out[k], v)
        elif isinstance(v, list) and isinstance(out.get(k), list):
            out[k] = out[k] + v
        else:
            out[k] = v
    return out


def test_every_marked_path_is_staged(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip):
    """Walks config/schema.yaml's x-path marking: each key that names an input (x-path-use: stage),
    set to a file or folder outside the checkout, is planned as a staged copy in the bucket (and as
    nothing on the controller's disk), in a dry run of `snakemake --profile nrp`."""
    from benchmaker.config_paths import config_paths, path_keys
    from benchmaker.staging import stage_key

    keys = [k for k in path_keys() if k.use == "stage"]
    home = tmp_path / "home"
    home.mkdir()
    made: dict[str, str] = {}
    for k in keys:
        name = re.sub(r"[^a-z0-9]+", "-", k.pointer.lower()).strip("-")
        if k.kind == "dir":
            shutil.copytree(tiny_clip, home / name)
            made[k.pointer] = str(home / name)
        else:
            f = home / (f"{name}.pt" if k.if_pathlike else f"{name}.jsonl")
            f.write_text("")
            made[k.pointer] = str(f)
    if "evaluate.compare.baseline" in made:  # a kept evaluation (benchmaker keep-evaluation)
        base = Path(made["evaluate.compare.baseline"])
        (base / "leaderboard.json").write_text('{"systems": []}')
        (base / "per_query.csv").write_text("")
    missing = [k.pointer for k in keys if k.pointer not in _path_examples("x")]
    assert not missing, f"keys marked x-path with no example here (add one to _path_examples): {missing}"
    groups: dict[int, dict] = {}
    for k in keys:
        group, over = _path_examples(made[k.pointer])[k.pointer]
        groups[group] = _merge_lists(groups.get(group, {}), over)
    seen: set[str] = set()
    for group, over in sorted(groups.items()):
        config, cfg = _user_files(home / f"g{group}", tiny_corpus, tiny_clip)
        cfg = _merge_lists(cfg, over)
        support.write_config(config, cfg)
        res = _snakemake(checkout, config, _env(checkout, s3_server["url"],
                                                BENCHMAKER_K8S_PVC=f"{PVC}:{tiny_corpus}"), "-n")
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-4000:]
        assert not re.search(r"s3://[^\s]*//", out), re.findall(r"s3://[^\s]*//[^\s]*", out)[:3]
        assert str(home) not in " ".join(re.findall(r"s3://\S+", out))
        base = f"s3://{BUCKET}/{PREFIX}/results/{cfg['benchmark']['name']}/inputs"
        for p in config_paths(cfg, use="stage"):
            if p.path.startswith(str(home / f"g{group}")):
                continue  # the fixture's own files (rights map, model of _user_files)
            want = f"{base}/{p.kind}/{stage_key(p.path)}/{Path(p.path).name}"
            assert want in out, f"{p.key} ({p.pointer}) = {p.value}: not staged (no {want} in the plan)"
            seen.add(p.pointer)
        assert "no volume of the pods holds it" not in out  # the image folder is on BENCHMAKER_K8S_PVC
    assert seen == {k.pointer for k in keys}, {k.pointer for k in keys} - seen


def test_every_path_like_key_is_marked():
    """A config key whose name or description says it names a file or folder carries `x-path` (so a
    key added without the marking fails here, not on a cluster)."""
    from benchmaker.config import load_schema
    from benchmaker.config_paths import path_keys

    marked = {k.pointer for k in path_keys()}
    hint = re.compile(r"(^|_)(path|file|dir|folder|jsonl)$|checkpoint|local-dir:|run file|\.jsonl|\.json\b")
    # names that look like paths but are not local files: prefixes/URLs, cache keys, column names
    not_paths = {"audit.label_studio_image_prefix", "preprocess.image_base_url", "export.repo_id",
                 "audit.human_labels[].rater"}
    found = []

    def walk(node, pointer, root, depth=0):
        if depth > 12 or not isinstance(node, dict):
            return
        if "$ref" in node:
            ref = node["$ref"]
            target = root
            for part in ref.lstrip("#/").split("/"):
                target = target[part]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        types = node.get("type")
        types = types if isinstance(types, list) else [types]
        leaf = pointer.rsplit(".", 1)[-1]
        if "string" in types and (hint.search(leaf) or hint.search(str(node.get("description", "")))):
            found.append(pointer)
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, f"{pointer}.{name}" if pointer else name, root, depth + 1)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{pointer}[]", root, depth + 1)

    schema = load_schema()
    walk(schema, "", schema)
    # prompts and column names mention images.jsonl, the file they are read from
    unmarked = sorted(k for k in set(found) - marked - not_paths if not re.search(r"prompts\.user$|_column$", k))
    assert not unmarked, f"path-like keys without x-path in config/schema.yaml: {unmarked}"


def test_fake_cluster_pods_never_see_the_controllers_disk(tmp_path, monkeypatch):
    """The fake cluster's isolation is the default, not an extra: a pod cannot read a folder of the
    controller (hide_paths) while it reads the rest of the machine; a fake that runs Jobs without
    folders to hide, or where it cannot hide them (no root / unshare), refuses to start."""
    import urllib.request

    ctl = tmp_path / "controller"
    ctl.mkdir()
    (ctl / "my.yaml").write_text("secret: controller-only\n")
    seen = tmp_path / "image"  # not hidden: what the image would hold
    seen.mkdir()
    (seen / "ok.txt").write_text("visible\n")
    with pytest.raises(RuntimeError, match="needs hide_paths"):
        FakeKube(namespace=NAMESPACE, run_jobs=True)
    with monkeypatch.context() as m:
        m.setattr(os, "geteuid", lambda: 1000)
        with pytest.raises(RuntimeError, match="private mount namespace"):
            FakeKube(namespace=NAMESPACE, run_jobs=True, hide_paths=[str(ctl)])
    fk = FakeKube(namespace=NAMESPACE, run_jobs=True, hide_paths=[str(ctl)], base_env={"PATH": "/usr/bin:/bin"})
    url = fk.start()
    try:
        def job(name: str, script: str) -> None:
            body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                    "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "c", "image": "x", "command": ["/bin/sh", "-c"], "args": [script]}]}}}}
            req = urllib.request.Request(f"{url}/apis/batch/v1/namespaces/{NAMESPACE}/jobs", method="POST",
                                         data=json.dumps(body).encode(),
                                         headers={"Authorization": "Bearer t", "Content-Type": "application/json"})
            with urllib.request.urlopen(req) as r:
                assert r.status == 201

        job("reads-the-image", f"cat {seen / 'ok.txt'}")
        job("reads-the-controller", f"ls -A {ctl}; cat {ctl / 'my.yaml'}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(st["exit"] is None for st in fk.state.values()):
            time.sleep(0.1)
        assert fk.state["reads-the-image"]["exit"] == 0 and "visible" in fk.state["reads-the-image"]["log"]
        hidden = fk.state["reads-the-controller"]
        assert hidden["exit"] != 0 and "controller-only" not in hidden["log"], hidden
        assert (ctl / "my.yaml").read_text() == "secret: controller-only\n"  # hidden in the pod only
    finally:
        fk.stop()


@pytest.mark.slow
@pytest.mark.heavy
def test_pod_failure_and_namespace_read_like_local_errors(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip,
                                                          kube):
    """An image folder on the controller's disk only (no BENCHMAKER_K8S_PVC): the dry run warns and
    names the fix; the real run's final block names the rule, the pod's first error line and the
    fix. A namespace without rights: one message naming BENCHMAKER_K8S_NAMESPACE, no traceback,
    nothing submitted."""
    home = tmp_path / "home"
    corpus = tmp_path / "local" / "images"  # in a pod: no such folder (its parent is hidden)
    shutil.copytree(tiny_corpus, corpus)
    config, cfg = _user_files(home, corpus, tiny_clip)
    _clear(s3_server["client"], PREFIX)
    fk, kubeconfig = kube(run_jobs=True, pvcs={PVC}, base_env={
        "PATH": f"{_pod_bin(tmp_path)}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1", "POD_PIP_LOG": str(tmp_path / "pip.log")},
        hide_paths=[str(home), str(checkout["dir"]), str(corpus.parent)])
    env = _env(checkout, s3_server["url"], KUBECONFIG=str(kubeconfig), BENCHMAKER_K8S_JOBS="4")

    dry = _snakemake(checkout, config, env, "-n")
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out[-3000:]
    assert "paths.image_root" in out and "no volume of the pods holds it" in out and "BENCHMAKER_K8S_PVC" in out

    # a namespace this account has no rights in
    bad = _snakemake(checkout, config, {**env, "BENCHMAKER_K8S_NAMESPACE": "someone-else"}, timeout=300)
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0
    assert "namespace 'someone-else'" in out and "403 Forbidden" in out and "BENCHMAKER_K8S_NAMESPACE" in out, \
        out[-3000:]
    assert "Traceback" not in out and "ApiException" not in out, out[-3000:]
    assert not fk.jobs and fk.forbidden

    res = _snakemake(checkout, config, env, "--retries", "0", "--latency-wait", "2", timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    failed = [_target(fk.jobs[n]) for n, st in fk.state.items() if st["exit"] not in (0, None)]
    assert failed and all(t.startswith("preprocess:") for t in failed), failed
    final = out[out.rindex("jobs that failed in their pod"):]
    assert "benchmaker: rule preprocess failed in its pod" in final, final
    assert "paths.image_root" in final and str(corpus) in final, final
    assert "fix: paths.image_root must be on a volume of every pod" in final and "BENCHMAKER_K8S_PVC" in final
    assert "kubernetes-logs" in final


def _target(body: dict) -> str:
    """`rule:wildcards` a Job runs (its --target-jobs)."""
    return re.search(r"--target-jobs '([^']+)'", body["spec"]["template"]["spec"]["containers"][0]["args"][1]).group(1)


# ------------------------------------------------ a controller killed: in a pod's run, at a submission
GPU_RULES = ("vision", "embed_images")


def _killable_run(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip, kube, **fake) -> dict:
    """The user's files, the fake cluster (``fake``: FakeKube's options), the README's environment and
    the controller started in its own process group; returns what the kill tests use."""
    s3 = s3_server["client"]
    _clear(s3, PREFIX)
    home = tmp_path / "home"
    corpus = tmp_path / "pvc" / "images"
    shutil.copytree(tiny_corpus, corpus)
    config, cfg = _user_files(home, corpus, tiny_clip)
    pod_home = tmp_path / "podhome"
    pod_home.mkdir()
    fk, kubeconfig = kube(run_jobs=True, pvcs={PVC}, base_env={
        "PATH": f"{_pod_bin(tmp_path)}:/usr/local/bin:/usr/bin:/bin", "HOME": str(pod_home), "HF_HUB_OFFLINE": "1",
        "POD_PIP_LOG": str(tmp_path / "pip.log"), "MPLCONFIGDIR": str(pod_home / "mpl"),
    }, hide_paths=[str(home), str(checkout["dir"])], **fake)
    env = _env(checkout, s3_server["url"], KUBECONFIG=str(kubeconfig), BENCHMAKER_K8S_PVC=f"{PVC}:{corpus}",
               BENCHMAKER_K8S_JOBS="4")
    cmd = [sys.executable, "-m", "snakemake", "--profile", "nrp", "--configfile", str(config),
           "--retries", "0", "--latency-wait", "2"]
    since = {"s3_log": s3_server["log"].stat().st_size, "time": time.time()}
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(cmd, cwd=checkout["dir"], env=env, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    return {"s3": s3, "dir": checkout["dir"], "s3_log": s3_server["log"], "home": home, "corpus": corpus,
            "config": config, "cfg": cfg, "fk": fk, "env": env,
            "first": first, "log": log, "since": since, "base": f"{PREFIX}/results/{cfg['benchmark']['name']}"}


def _pause_pods(fk) -> tuple[set, set, set] | None:
    """(paused, waiting, all Jobs): every running pod paused (SIGSTOP: a long job, whatever the
    machine's load, still runs when the new controller looks, its place in the quota taken), the
    Jobs waiting for a pod; None while a pod is starting (call again)."""
    import signal

    with fk.lock:
        if any(st.get("started") and st["exit"] is None and st.get("proc") is None for st in fk.state.values()):
            return None
        paused = set()
        for n, st in fk.state.items():
            if st["exit"] is None and st.get("proc") is not None:
                try:
                    os.killpg(st["proc"].pid, signal.SIGSTOP)
                    paused.add(n)
                except ProcessLookupError:
                    pass  # it has just ended
        return paused, set(fk.waiting), set(fk.jobs)


def _kill_controller(run: dict) -> tuple[set, set, set, dict]:
    """kill -9 of the controller's process group with every pod paused first and again after (a Job
    it was creating when it died is in the cluster by then); returns (orphans: the paused and the
    waiting Jobs, waiting, all Jobs, what the controller and the bucket hold at the kill)."""
    import signal

    fk = run["fk"]
    while _pause_pods(fk) is None:
        time.sleep(0.1)
    os.killpg(run["first"].pid, signal.SIGKILL)  # the controller dies; its pods do not
    run["first"].wait()
    run["log"].close()
    fk.release_create.set()  # a held answer goes to nobody now
    time.sleep(1)
    while (paused := _pause_pods(fk)) is None:
        time.sleep(0.1)
    paused_pods, waiting, jobs = paused
    time.sleep(1)  # an upload a paused pod had sent has arrived
    return paused_pods | waiting, waiting, jobs, _at_the_kill(run)


def _records(dot: Path, kind: str, since: float) -> set[str]:
    """Bucket keys of the outputs Snakemake keeps a ``kind`` record of (``metadata``: finished and
    recorded; ``incomplete``: marked before it ran), written at or after ``since`` (earlier tests of
    the module ran in the same checkout). Snakemake names a record by the url-safe base64 of the
    output's storage query, cut into ``@``-prefixed parts (snakemake.persistence.file)."""
    import base64

    out = set()
    root = dot / kind
    for f in root.rglob("*") if root.is_dir() else ():
        if f.is_file() and f.stat().st_mtime >= since - 1:
            try:
                query = base64.urlsafe_b64decode("".join(p.lstrip("@") for p in f.relative_to(root).parts)).decode()
            except ValueError:
                continue  # not a record (migration_underway)
            if query.startswith(f"s3://{BUCKET}/"):
                out.add(query[len(f"s3://{BUCKET}/"):])
    return out


def _at_the_kill(run: dict) -> dict:
    """The bucket's keys and the dead controller's records (outputs recorded finished, outputs marked
    incomplete)."""
    dot = run["dir"] / ".snakemake"
    return {"keys": set(_keys(run["s3"], f"{run['base']}/")),
            "recorded": _records(dot, "metadata", run["since"]["time"]),
            "marked": _records(dot, "incomplete", run["since"]["time"])}


def _covered(key: str, records: set[str]) -> bool:
    """``key`` is a recorded output or a file of a recorded directory() output."""
    return any(key == r or key.startswith(r.rstrip("/") + "/") for r in records)


def _s3_writes(log: Path, since: int) -> dict[str, int]:
    """Object writes per bucket key in the S3 server's request log from byte ``since`` on: PUTs of an
    object (put, upload, copy; not of an upload's parts) and completed multipart uploads."""
    from urllib.parse import unquote

    with open(log, "rb") as fh:
        fh.seek(since)
        text = fh.read().decode(errors="replace")
    out: dict[str, int] = {}
    for m in re.finditer(rf'"(?:\x1b\[[0-9;]*m)*(PUT|POST) /{BUCKET}/([^ ?"]+)(\?[^ "]*)? HTTP', text):
        method, key, query = m.group(1), unquote(m.group(2)), m.group(3) or ""
        if (method == "PUT" and "partNumber=" not in query) or (method == "POST" and "uploadId=" in query):
            out[key] = out.get(key, 0) + 1
    return out


def _written_once(run: dict, at_kill: dict) -> dict[str, int]:
    """Every output of the run was written once, by the dead controller's jobs or by the resumed
    one's, but for what a job of the dead controller finished while none watched (in the bucket at
    the kill, not recorded): that is remade, once (the dead controller marked it incomplete before
    it submitted the job, so it is never trusted without its metadata). A job's log and benchmark
    files are its records, not outputs (Snakemake keeps no metadata of them): they are written by
    every run of the job. Returns the writes per output key."""
    base = f"{run['base']}/"
    records = re.compile(rf"^{re.escape(base)}(logs|benchmarks)/")
    writes = {k: n for k, n in _s3_writes(run["s3_log"], run["since"]["s3_log"]).items()
              if k.startswith(base) and not records.match(k)}  # not the controllers' workflow-source archives
    final = {k for k in _keys(run["s3"], base) if not records.match(k)}
    assert final <= set(writes), "\n".join(sorted(final - set(writes)))
    unwatched = {k for k in at_kill["keys"] if not records.match(k) and not _covered(k, at_kill["recorded"])}
    assert all(_covered(k, at_kill["marked"]) for k in unwatched), \
        "\n".join(sorted(k for k in unwatched if not _covered(k, at_kill["marked"])))
    twice = {k: n for k, n in writes.items() if n > 1}
    assert all(k in unwatched and n == 2 for k, n in twice.items()), \
        "\n".join(f"{k}: {n}" for k, n in sorted(twice.items()) if k not in unwatched or n != 2)
    print(f"bucket writes: {len(writes)} keys, {sum(writes.values())} writes; finished unwatched (remade "
          f"once): {len(unwatched)}; written twice: {sorted(twice)}")
    return writes


def _never_two_at_once(fk) -> None:
    """No two Jobs for one output ever had a pod at the same time, and none is left running."""
    with fk.lock:
        by_target: dict[str, list[tuple[float, float]]] = {}
        for n, b in fk.jobs.items():
            st = fk.state[n]
            assert st["exit"] is not None, f"Job {n} ({_target(b)}) still runs after the resumed run ended"
            if st.get("started_at") is not None:
                by_target.setdefault(_target(b), []).append((st["started_at"], st["ended"]))
        for target, spans in by_target.items():
            spans.sort()
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), (target, spans)
        assert not fk.unexpected and not fk.rejected, (fk.unexpected, fk.rejected)


def _resume(checkout, run: dict) -> str:
    """The README's resume line (unlock, the same command); returns its output."""
    unlock = _snakemake(checkout, run["config"], run["env"], "--unlock")
    assert unlock.returncode == 0, (unlock.stdout + unlock.stderr)[-2000:]
    res = _snakemake(checkout, run["config"], run["env"], "--retries", "0", "--latency-wait", "2", timeout=1500)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    return out


def _cancelled(out: str, fk, orphans: set, waiting: set, before: set) -> None:
    """The resumed controller said it cancels every Job of the dead one (running or waiting) and did,
    the waiting ones before they got a pod, before it created any Job of its own."""
    m = re.search(r"benchmaker: (\d+) Job\(s\) of a previous controller of this build still run in namespace "
                  r"'sage' \(([^)]*)\): cancelling them[^\n]*\(([^)]*)\)", out)
    assert m, out[-5000:]
    with fk.lock:
        cancelled = set(fk.deleted_jobs) & orphans
        assert cancelled == orphans and int(m.group(1)) == len(orphans), (m.group(0), orphans, fk.deleted_jobs)
        assert set(m.group(3).split(", ")) == orphans, (m.group(3), orphans)
        assert all(fk.state[n]["exit"] == 137 for n in cancelled)
        assert not any(fk.state[n].get("started") for n in waiting)  # cancelled before they got a pod
        resumed = {n: b for n, b in fk.jobs.items() if n not in before}
        first_new = min(fk.state[n]["created"] for n in resumed)
        assert all(fk.state[n]["ended"] <= first_new for n in orphans), "a new Job started beside an orphan"


def _same_bytes_as_uninterrupted(run: dict, checkout, tmp_path: Path):
    """The same bytes as an uninterrupted run of the same config (a local one: same inputs, same bytes
    whatever the executor): every file but the run's records (logs, timings, run_facts.json:
    benchmarks/same_bytes.py) and the staged copies of the user's files (inputs/, cluster only).
    Returns a function running Snakemake in that uninterrupted checkout."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from same_bytes import digests

    s3, base, cfg = run["s3"], run["base"], run["cfg"]
    cluster = tmp_path / "cluster-results"
    for k in _keys(s3, f"{base}/"):
        if not k[len(base) + 1:].startswith("inputs/"):
            (cluster / k[len(base) + 1:]).parent.mkdir(parents=True, exist_ok=True)
            (cluster / k[len(base) + 1:]).write_bytes(s3.get_object(Bucket=BUCKET, Key=k)["Body"].read())
    local = tmp_path / "uninterrupted"
    shutil.copytree(checkout["dir"], local, ignore=shutil.ignore_patterns(".snakemake", "results"))
    lenv = {k: v for k, v in run["env"].items() if not k.startswith(("BENCHMAKER_", "SNAKEMAKE_", "KUBECONFIG"))}
    lenv["PYTHONPATH"] = str(local / "src")

    def local_snakemake(cfg_file: Path, *args: str):
        return subprocess.run([sys.executable, "-m", "snakemake", "--configfile", str(cfg_file), *args], cwd=local,
                              env=lenv, capture_output=True, text=True, timeout=1500)

    done = local_snakemake(run["config"], "--cores", "2")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    mine, theirs = digests(cluster), digests(local / "results" / cfg["benchmark"]["name"])
    assert sorted(mine) == sorted(theirs), sorted(set(mine) ^ set(theirs))
    assert not [f for f in mine if mine[f] != theirs[f]], [f for f in mine if mine[f] != theirs[f]]
    return local_snakemake


@pytest.mark.slow
@pytest.mark.heavy
def test_controller_killed_while_pods_run_is_survivable(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip, kube):
    """kill -9 of the controller while a GPU job's pod runs and other Jobs wait for a pod (the
    namespace's pod quota is used up: their pods' creation is forbidden), then the README's resume
    line: the new controller cancels every Job the dead one left of this build, running or waiting,
    before it submits anything (and says so), never runs two Jobs for one output at a time, writes
    no output twice (but what a pod finished while no controller watched: remade once, never
    trusted), finishes with the same bytes as an uninterrupted run of the same config, and a later
    params change replans the same jobs as after the uninterrupted run (nothing finished unwatched
    is trusted)."""
    # room for 2 pods at once: of the 4 Jobs the controller submits at once, 2 wait for a pod
    run = _killable_run(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip, kube, pod_quota=2)
    fk, first = run["fk"], run["first"]
    deadline = time.monotonic() + 900
    gpu = None
    while time.monotonic() < deadline and first.poll() is None and gpu is None:
        time.sleep(0.5)
        with fk.lock:
            gpu = next((n for n, b in fk.jobs.items() if _target(b).split(":")[0] in GPU_RULES
                        and fk.state[n].get("proc") and fk.state[n]["exit"] is None), None)
            gpu = gpu if fk.waiting else None
    assert gpu is not None, (tmp_path / "first.log").read_text()[-3000:]
    orphans, waiting, before, at_kill = _kill_controller(run)
    assert waiting and orphans - waiting and any(_target(fk.jobs[n]).split(":")[0] in GPU_RULES for n in orphans), \
        (orphans, waiting)

    out = _resume(checkout, run)
    _cancelled(out, fk, orphans, waiting, before)
    _never_two_at_once(fk)
    _written_once(run, at_kill)
    assert run["s3"].head_object(Bucket=BUCKET, Key=f"{run['base']}/qrels_with_score.jsonl")["ContentLength"] > 0
    local_snakemake = _same_bytes_as_uninterrupted(run, checkout, tmp_path)

    # a params change after the resume replans the same jobs as after the uninterrupted run (every
    # shard's vision job and what follows; the controller-side staging jobs are the cluster's own)
    config2, _ = _user_files(run["home"], run["corpus"], tiny_clip,
                             vision={"clip": {"prompt_template": "a picture of {}."}})
    dry = _snakemake(checkout, config2, run["env"], "-n")
    stats = _job_stats(dry.stdout + dry.stderr)
    assert stats.get("vision") == run["cfg"]["n_shards"] and stats.get("plan") == 1, stats
    plain = local_snakemake(config2, "--cores", "2", "-n")
    assert plain.returncode == 0, (plain.stdout + plain.stderr)[-3000:]
    without_staging = {k: v for k, v in stats.items() if not k.startswith("stage_") and k != "total"}
    assert without_staging == {k: v for k, v in _job_stats(plain.stdout + plain.stderr).items() if k != "total"}


@pytest.mark.slow
@pytest.mark.heavy
def test_controller_killed_at_a_submission_is_survivable(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip,
                                                         kube):
    """kill -9 of the controller at the worst moment of a submission: the API server has stored the
    plan Job and its pod runs, but the answer to the create request has not reached the controller
    (the fake holds it). The controller never learns the Job's name, and nothing it would do once
    the call returned (Snakemake's own incomplete mark, the job's record) happens; only what it did
    before the request is there. Killed before the request nothing is in the cluster (a plain
    restart); killed after the answer, the Job is one the controller knew, as in the test above.
    Then the README's resume line: the plan's outputs were marked incomplete before the request
    (benchmaker.snakemake_compat.mark_before_submission), the new controller finds the Job it
    never heard of by this build's storage prefix and cancels it before it submits anything, the
    run finishes, writes no output twice (but what a pod finished unwatched: remade once) and ends
    with the same bytes as an uninterrupted run."""
    run = _killable_run(s3_server, checkout, tmp_path, tiny_corpus, tiny_clip, kube, hold_create=r"^plan\b")
    fk, first = run["fk"], run["first"]
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and first.poll() is None and not fk.create_held.wait(0.5):
        pass
    assert fk.create_held.is_set(), (tmp_path / "first.log").read_text()[-3000:]
    orphans, waiting, before, at_kill = _kill_controller(run)
    held = fk.held
    assert held in orphans and not waiting, (held, orphans, waiting)
    assert held not in (tmp_path / "first.log").read_text()  # the dead controller never heard of it
    plan_out = f"{run['base']}/query_plan.jsonl"
    assert _covered(plan_out, at_kill["marked"]) and not _covered(plan_out, at_kill["recorded"]), at_kill["marked"]

    out = _resume(checkout, run)
    _cancelled(out, fk, orphans, waiting, before)
    with fk.lock:
        replaced = [n for n, b in fk.jobs.items() if n not in before and _target(b) == _target(fk.jobs[held])]
        assert len(replaced) == 1 and fk.state[replaced[0]]["exit"] == 0, replaced
    _never_two_at_once(fk)
    writes = _written_once(run, at_kill)
    assert writes[plan_out] == 1, writes.get(plan_out)
    _same_bytes_as_uninterrupted(run, checkout, tmp_path)
