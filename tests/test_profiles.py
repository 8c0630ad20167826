"""The Snakemake profiles: keys are real options, resources name real rules, GPU requests are there,
profiles/default combines safely with --profile, and bare names resolve after install_profiles()."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import support
import yaml

from benchmaker.local_gpus import gpu_slots
from benchmaker.profiles import ProfileInstallError, install_profiles, user_profile_dir

ROOT = support.ROOT
PROFILES = ROOT / "profiles"
CLUSTER = ("slurm", "nrp")
GPU_RULE = "embed_images"
ENV_KNOBS = re.compile(r"^BENCHMAKER_(SLURM|K8S|S3)_|^BENCHMAKER_IMAGE$")


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not ENV_KNOBS.match(k)}
    env.update(extra)
    return env


def load(name: str, env: dict | None = None) -> dict:
    """A profile as Snakemake sees it (YTE templates evaluated with the given environment)."""
    import yte

    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(clean_env(**(env or {})))
        with open(PROFILES / name / "profile.yaml") as fh:
            return yte.process_yaml(fh, require_use_yte=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def rule_names() -> set[str]:
    names = set()
    for smk in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]:
        names |= set(re.findall(r"^\s*rule (\w+):", smk.read_text(), flags=re.M))
    return names


def snakemake_options() -> set[str]:
    """Every long option of snakemake's own CLI parser, executor and storage plugins included."""
    from snakemake.cli import get_argument_parser

    parser = get_argument_parser()
    return {s[2:] for a in parser._actions for s in a.option_strings if s.startswith("--")}


def test_profiles_exist_and_are_plain_yaml_mappings():
    for name in ("default", *CLUSTER):
        path = PROFILES / name / "profile.yaml"
        raw = yaml.safe_load(path.read_text())
        assert isinstance(raw, dict) and raw, path
        assert isinstance(load(name), dict)


@pytest.mark.parametrize("name", ["default", *CLUSTER])
def test_profile_keys_are_snakemake_options(name):
    options = snakemake_options()
    prof = load(name, {"BENCHMAKER_SLURM_STATUS": "squeue", "BENCHMAKER_K8S_PVC": "imgs:/data"})
    unknown = sorted(set(prof) - options)
    assert not unknown, f"profiles/{name}: not snakemake options: {unknown}"


@pytest.mark.parametrize("name", CLUSTER)
def test_no_per_rule_resources_in_cluster_profiles(name):
    """GPU requests follow the adapter (rules' gpu_resources), sizes come from the rules: a
    set-resources entry keyed on a rule name would override both (issue #10)."""
    prof = load(name, {"BENCHMAKER_SLURM_GPU_FLAG": "gres", "BENCHMAKER_SLURM_GPU_MODEL": "a100"})
    assert "set-resources" not in prof and "set-threads" not in prof
    assert not any("gpu" in k for k in prof["default-resources"] if k != "gpu_manufacturer")


def test_gpu_rules_ask_through_gpu_resources():
    """Every rule that can run a model asks for its GPU through gpu_resources(needs_gpu(<rule>)): what
    its stage declares (benchmaker.stages, ``gpu=``)."""
    from benchmaker.stages import needs_gpu

    sim = (ROOT / "rules" / "similarity.smk").read_text()
    block = sim.split(f"rule {GPU_RULE}:")[1].split("\nrule ")[0]
    assert f'**gpu_resources(needs_gpu("{GPU_RULE}"))' in block and needs_gpu(GPU_RULE)
    vision = (ROOT / "rules" / "vision.smk").read_text()
    block = vision.split("rule vision:")[1].split("\nrule ")[0]
    assert '**gpu_resources(needs_gpu("vision", VISION_ADAPTER))' in block
    assert needs_gpu("vision", "clip") and not needs_gpu("vision", "openai") and not needs_gpu("vision", "metadata")
    evaluate = (ROOT / "rules" / "evaluate.smk").read_text()
    assert '**gpu_resources(needs_gpu("evaluate_model"))' in evaluate.split("rule evaluate_model:")[1].split(
        "\nrule ")[0] and needs_gpu("evaluate_model")
    assert '**gpu_resources(needs_gpu("evaluate_system"))' in evaluate.split("rule evaluate_system:")[1].split(
        "\nrule ")[0] and not needs_gpu("evaluate_system")
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        text = smk.read_text()
        assert not re.search(r"^\s+gpu\s*=", text, flags=re.M), f"{smk.name}: a literal gpu= resource"


def test_slurm_profile_settings():
    plain = load("slurm")
    assert plain["executor"] == "slurm"
    assert plain["default-resources"]["mem_mb"] > 0 and plain["default-resources"]["runtime"] > 0
    assert "slurm_account" not in plain["default-resources"]

    tuned = load("slurm", {
        "BENCHMAKER_SLURM_GPU_MODEL": "a100", "BENCHMAKER_SLURM_GPU_PARTITION": "gpu",
        "BENCHMAKER_SLURM_PARTITION": "cpu", "BENCHMAKER_SLURM_ACCOUNT": "proj1",
        "BENCHMAKER_SLURM_JOBS": "7",
    })
    assert tuned["jobs"] == 7
    assert tuned["default-resources"]["slurm_partition"] == "cpu"
    assert tuned["default-resources"]["slurm_account"] == "proj1"


def test_nrp_kubernetes_gpu_and_storage():
    prof = load("nrp")
    assert prof["executor"] == "kubernetes"
    assert prof["default-resources"]["scale"] == 0  # limits = requests (needed for nvidia.com/gpu)
    assert float(prof["kubernetes-cpu-scalar"]) == 1.0
    # read by the executor only for jobs with a gpu resource (those that run a model)
    assert prof["default-resources"]["gpu_manufacturer"] == "nvidia"
    assert "gpu" not in prof["default-resources"]
    assert prof["default-storage-provider"] == "s3"
    assert prof["storage-s3-endpoint-url"] == "http://rook-ceph-rgw-nautiluss3.rook"
    assert prof["default-storage-prefix"] == "s3://sage-imsearch/benchmaker"
    # the namespace: the kubeconfig context's (as kubectl uses it), else "default"
    assert load("nrp", {"KUBECONFIG": "/nonexistent/kubeconfig"})["kubernetes-namespace"] == "default"
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json") as kc:
        json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "nrp",
                   "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                   "users": [{"name": "u", "user": {"token": "t"}}],
                   "contexts": [{"name": "nrp", "context": {"cluster": "c", "user": "u", "namespace": "my-ns"}}]}, kc)
        kc.flush()
        assert load("nrp", {"KUBECONFIG": kc.name})["kubernetes-namespace"] == "my-ns"
        assert load("nrp", {"KUBECONFIG": kc.name, "BENCHMAKER_K8S_NAMESPACE": "me"})["kubernetes-namespace"] == "me"
    assert prof["container-image"].startswith("gitlab-registry.nrp-nautilus.io/")
    assert "kubernetes-persistent-volumes" not in prof
    text = (PROFILES / "nrp" / "profile.yaml").read_text().lower()
    for secret_key in ("access-key:", "secret-key:", "access_key:", "secret_key:", "token:"):
        assert secret_key not in text, "credentials must come from the environment only"

    custom = load("nrp", {"BENCHMAKER_S3_ENDPOINT": "http://127.0.0.1:9000",
                          "BENCHMAKER_S3_BUCKET": "b1", "BENCHMAKER_S3_PREFIX": "/runs/x/",
                          "BENCHMAKER_K8S_NAMESPACE": "me", "BENCHMAKER_IMAGE": "reg/img:1",
                          "BENCHMAKER_K8S_PVC": "imgs:/data"})
    assert custom["default-storage-prefix"] == "s3://b1/runs/x"
    assert custom["storage-s3-endpoint-url"] == "http://127.0.0.1:9000"
    assert custom["kubernetes-namespace"] == "me" and custom["container-image"] == "reg/img:1"
    assert custom["kubernetes-persistent-volumes"] == ["imgs:/data"]


def test_default_profile_is_safe_to_combine():
    """profiles/default is loaded as the workflow profile under every --profile and replaces the
    same top-level keys: it must not set anything a cluster profile sets differently."""
    default = load("default")
    for forbidden in ("executor", "jobs", "cores", "set-resources", "default-resources",
                      "set-threads", "default-storage-provider"):
        assert forbidden not in default, forbidden
    assert default["resources"] == {"gpu": gpu_slots()}  # 1 where this host has a GPU
    assert default["set-resource-scopes"] == {"gpu": "local"}
    for name in CLUSTER:
        prof = load(name)
        assert "resources" not in prof and "set-resource-scopes" not in prof, name
        for key in set(default) & set(prof):
            assert default[key] == prof[key], f"{name}:{key} differs from profiles/default"



@pytest.mark.parametrize("name", ["default", *CLUSTER])
def test_no_profile_prints_whole_logs_on_failure(name):
    """The README: a failure prints one short block (problem, fix, log path); tracebacks stay in the
    rule's log. `show-failed-logs` would print every failed rule's whole log on the terminal."""
    prof = load(name, {"BENCHMAKER_SLURM_STATUS": "squeue", "BENCHMAKER_K8S_PVC": "imgs:/data"})
    assert "show-failed-logs" not in prof
    assert "rerun-incomplete" in prof  # the check reads the keys the profile does set

def _parse(argv: list[str], monkeypatch, env: dict | None = None):
    from snakemake.cli import parse_args

    monkeypatch.chdir(ROOT)
    for k in list(os.environ):
        if ENV_KNOBS.match(k):
            monkeypatch.delenv(k)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    _parser, args = parse_args(argv)
    return args


@pytest.mark.parametrize("name", CLUSTER)
def test_combined_parse_keeps_cluster_settings(name, monkeypatch):
    """`--profile profiles/<name>` + the automatic workflow profile: the cluster's set-resources and
    default-resources survive, the default's local GPU cap is there but local-scoped."""
    args = _parse(["--profile", f"profiles/{name}", "-n"], monkeypatch)
    assert args.executor == ("slurm" if name == "slurm" else "kubernetes")
    assert not args.set_resources  # GPUs and sizes come from the rules
    assert args.default_resources["mem_mb"].value == 4000
    assert args.resources["gpu"].value == gpu_slots() and args.set_resource_scopes == {"gpu": "local"}
    alone = _parse(["--workflow-profile", f"profiles/{name}", "-n"], monkeypatch)

    def flat(res):
        return {(r, k, repr(v)) for r, d in res.items() for k, v in d.items()}

    assert flat(alone.set_resources) == flat(args.set_resources)
    assert {k: repr(v) for k, v in alone.default_resources.items()} == {
        k: repr(v) for k, v in args.default_resources.items()}


def _dry_run(tmp_path: Path, args: list[str], env: dict) -> subprocess.CompletedProcess:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "images").mkdir(exist_ok=True)  # listed at parse time (change detection): must exist
    cfg = support.tiny_config(tmp_path, tmp_path / "images", tmp_path / "clip")
    config = support.write_config(tmp_path / "config.yaml", cfg)
    cmd = [sys.executable, "-m", "snakemake", "-d", str(tmp_path), "--configfile", str(config),
           "-n", *args]
    env = clean_env(HF_HUB_OFFLINE="1", **env)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = support.no_slurm_path(env.get("PATH", ""))
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def _job_resources(out: str, rule: str) -> list[str]:
    return re.findall(rf"rule {rule}:\n(?:    .*\n)*?    resources: (.*)", out)


def test_slurm_dry_run_with_default_workflow_profile(tmp_path):
    res = _dry_run(tmp_path, ["--profile", "profiles/slurm"],
                   {"BENCHMAKER_SLURM_GPU_PARTITION": "gpu", "BENCHMAKER_SLURM_GPU_MODEL": "a100"})
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "workflow specific profile profiles/default" in out
    # upstream snakemake/snakemake#4280, filtered by the Snakefile (snakemake_compat.ignore_unawaited_input_sizes)
    assert "never awaited" not in out, out[-3000:]
    gpu_jobs = _job_resources(out, GPU_RULE)
    assert len(gpu_jobs) == 2  # n_shards = 2
    for r in gpu_jobs:
        assert "gpu=1" in r and "gpu_model=a100" in r and "slurm_partition=gpu" in r
        assert "mem_mb=" in r and "runtime=" in r  # the rule's own size (rules/similarity.smk)
    for r in _job_resources(out, "plan"):
        assert "mem_mb=" in r and "gpu" not in r and "slurm_partition" not in r
    # the GPU knobs reach exactly the jobs that run a model: vision with the clip adapter too
    for r in _job_resources(out, "vision"):
        assert "gpu=1" in r and "gpu_model=a100" in r and "slurm_partition=gpu" in r


@pytest.mark.parametrize("adapter", ["clip", "metadata"])
def test_slurm_gres_mode_follows_the_adapter(tmp_path, adapter):
    """BENCHMAKER_SLURM_GPU_FLAG=gres: --gres=gpu[:model]:1 for the jobs that run a model, and
    nothing GPU-related for the others (vision with the metadata adapter included)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    meta = tmp_path / "metadata.jsonl"
    meta.write_text("")
    (tmp_path / "images").mkdir(exist_ok=True)  # listed at parse time (change detection): must exist
    cfg = support.tiny_config(tmp_path, tmp_path / "images", tmp_path / "clip",
                              vision={"adapter": adapter}, paths={"metadata_jsonl": str(meta)})
    config = support.write_config(tmp_path / "config.yaml", cfg)
    env = clean_env(HF_HUB_OFFLINE="1", BENCHMAKER_SLURM_GPU_FLAG="gres",
                    BENCHMAKER_SLURM_GPU_MODEL="a100", BENCHMAKER_SLURM_GPU_PARTITION="gpu")
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = support.no_slurm_path(env.get("PATH", ""))
    res = subprocess.run([sys.executable, "-m", "snakemake", "-d", str(tmp_path), "--configfile",
                          str(config), "-n", "--profile", "profiles/slurm"], cwd=ROOT,
                         capture_output=True, text=True, env=env, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    for r in _job_resources(out, GPU_RULE):
        assert "gres=gpu:a100:1" in r and "slurm_partition=gpu" in r and not re.search(r"\bgpu=", r)
    vision = _job_resources(out, "vision")
    assert len(vision) == 2
    for r in vision:
        if adapter == "clip":
            assert "gres=gpu:a100:1" in r and "slurm_partition=gpu" in r
        else:
            assert "gres" not in r and "gpu" not in r and "slurm_partition" not in r, r


def test_bare_profile_name_resolves_after_install(tmp_path, monkeypatch):
    home = tmp_path / "xdg"
    env = {"XDG_CONFIG_HOME": str(home)}
    before = _dry_run(tmp_path / "w1", ["--profile", "slurm"], env)
    assert before.returncode != 0 and "profile" in (before.stdout + before.stderr)

    saved = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(home)
    try:
        import platformdirs

        dest = Path(platformdirs.AppDirs("snakemake", "snakemake").user_config_dir)
        assert dest == user_profile_dir() == home / "snakemake"
    finally:
        if saved is None:
            os.environ.pop("XDG_CONFIG_HOME")
        else:
            os.environ["XDG_CONFIG_HOME"] = saved
    # the documented one-time step, as the user types it (the console script benchmaker.cli:main)
    cli = subprocess.run(
        [sys.executable, "-c", "import sys; from benchmaker.cli import main; sys.exit(main())",
         "install-profiles"], capture_output=True, text=True, timeout=120,
        env=clean_env(XDG_CONFIG_HOME=str(home), PYTHONPATH=str(ROOT / "src")), cwd=tmp_path)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    paths = [dest / "slurm", dest / "nrp"]
    assert all(p.is_symlink() and (p / "profile.yaml").is_file() for p in paths)
    assert [Path(os.path.realpath(p)) for p in paths] == [PROFILES / "slurm", PROFILES / "nrp"]
    assert install_profiles(dest) == paths  # idempotent

    after = _dry_run(tmp_path / "w2", ["--profile", "slurm"], env)
    out = after.stdout + after.stderr
    assert after.returncode == 0, out[-3000:]
    assert "Using profiles slurm and workflow specific profile profiles/default" in out
    assert all("gpu=1" in r for r in _job_resources(out, GPU_RULE))
    # `snakemake --profile nrp` resolves the same way (its dry run needs S3: test_nrp_dryrun.py)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    args = _parse(["--profile", "nrp", "-n"], monkeypatch)
    assert args.executor == "kubernetes" and "gpu_manufacturer" in args.default_resources
    assert args.default_storage_provider == "s3"


def test_install_never_replaces_foreign_entries(tmp_path):
    dest = tmp_path / "cfg"
    (dest / "nrp").mkdir(parents=True)
    (dest / "nrp" / "profile.yaml").write_text("jobs: 1\n")
    with pytest.raises(ProfileInstallError, match="nrp"):
        install_profiles(dest)
    assert (dest / "nrp" / "profile.yaml").read_text() == "jobs: 1\n"
    assert (dest / "slurm").is_symlink()  # the free name was still installed

    copies = install_profiles(tmp_path / "copies", copy=True, names=["nrp"])
    assert not copies[0].is_symlink()
    assert (copies[0] / "profile.yaml").read_bytes() == (PROFILES / "nrp" / "profile.yaml").read_bytes()


def test_local_gpu_slots_one_with_a_gpu_the_cpu_count_without(monkeypatch):
    """Model jobs take turns on a GPU; without one they run on the CPU, side by side as --cores allows
    (a cap of 1 made the example's two vision shards wait for each other on an idle core)."""
    import benchmaker.local_gpus as lg

    monkeypatch.setattr(lg.sys, "platform", "linux")
    monkeypatch.setattr(lg.os.path, "exists", lambda p: False)
    monkeypatch.setattr(lg.os, "cpu_count", lambda: 6)
    assert not lg.has_gpu() and lg.gpu_slots() == 6
    for dev in ("/dev/nvidia0", "/dev/kfd"):
        monkeypatch.setattr(lg.os.path, "exists", lambda p, dev=dev: p == dev)
        assert lg.has_gpu() and lg.gpu_slots() == 1
    monkeypatch.setattr(lg.sys, "platform", "darwin")
    monkeypatch.setattr(lg.platform, "machine", lambda: "arm64")
    assert lg.gpu_slots() == 1
