"""benchmaker.staging: names of staged inputs, model paths inside a job, config files outside the
working directory, bucket names. (The workflow side is exercised by tests/test_nrp_dryrun.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmaker.staging import (
    StagingError,
    copy_input,
    is_storage_url,
    model_source_files,
    relocate_configfiles,
    stage_key,
    staged_files,
    staged_model,
    valid_bucket_name,
)


def test_stage_key_depends_on_the_path_as_written_only():
    assert stage_key("~/rights.json") == stage_key("~/rights.json")
    assert stage_key("~/rights.json") != stage_key("/home/me/rights.json")
    assert len(stage_key("x")) == 12 and int(stage_key("x"), 16) >= 0


def test_staged_files_file_folder_and_missing(tmp_path, monkeypatch):
    f = tmp_path / "rights.json"
    f.write_text("{}")
    assert staged_files(str(f)) == {"rights.json": str(f)}
    d = tmp_path / "clip"
    d.mkdir()
    (d / "open_clip_config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"w")
    (d / ".hidden").write_text("x")
    assert set(staged_files(str(d))) == {"open_clip_config.json", "model.safetensors"}
    monkeypatch.setenv("HOME", str(tmp_path))
    assert staged_files("~/rights.json") == {"rights.json": str(f)}
    with pytest.raises(StagingError, match="nope.json: no such file"):
        staged_files(str(tmp_path / "nope.json"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(StagingError, match="empty"):
        staged_files(str(tmp_path / "empty"))


def test_model_source_files(tmp_path):
    ckpt = tmp_path / "m.safetensors"
    ckpt.write_bytes(b"w")
    assert model_source_files({"model": "local-dir:/models/x", "pretrained": None}) == ["/models/x"]
    assert model_source_files({"model": "ViT-B-32", "pretrained": str(ckpt)}) == [str(ckpt)]
    assert model_source_files({"model": "ViT-B-32", "pretrained": "laion2b_s34b_b79k"}) == []
    assert model_source_files({"model": "hf-hub:org/repo", "pretrained": None}) == []
    # a pod decides by the name alone (the controller's file is not there)
    assert model_source_files({"model": "ViT-B-32", "pretrained": "/gone/m.pt"}) == []
    assert model_source_files({"model": "ViT-B-32", "pretrained": "/gone/m.pt"}, by_name=True) == ["/gone/m.pt"]


def test_staged_model_points_at_the_job_copies(tmp_path):
    staged = tmp_path / ".snakemake" / "storage" / "s3" / "b" / "inputs" / "dir" / "abc" / "tiny-clip"
    staged.mkdir(parents=True)
    spec = {"model": "local-dir:/home/me/tiny-clip", "pretrained": None, "precision": "fp32"}
    assert staged_model(spec, [str(staged)]) == {**spec, "model": f"local-dir:{staged}"}
    files = ["/x/open_clip_config.json", "/x/open_clip_model.safetensors"]
    assert staged_model(spec, files)["model"] == "local-dir:/x"  # shared FS: the folder itself
    ck = {"model": "ViT-B-32", "pretrained": "~/ckpt/m.safetensors"}
    assert staged_model(ck, "/pod/inputs/file/k/m.safetensors")["pretrained"] == "/pod/inputs/file/k/m.safetensors"
    assert staged_model(ck, None) == ck
    with pytest.raises(StagingError, match="open_clip_config.json"):
        staged_model(spec, ["/x/other.bin"])


def test_copy_input_file_and_folder(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.bin"
    a.write_text("A")
    b.write_bytes(b"B")
    copy_input(source=[str(a)], staged=str(tmp_path / "out" / "a.json"))
    assert (tmp_path / "out" / "a.json").read_text() == "A"
    copy_input(source=[str(a), str(b)], staged=str(tmp_path / "dir" / "model"), folder=True)
    assert sorted(p.name for p in (tmp_path / "dir" / "model").iterdir()) == ["a.json", "b.bin"]
    with pytest.raises(StagingError):
        copy_input(source=[], staged=str(tmp_path / "x"))


def test_relocate_configfiles_only_outside_the_workdir(tmp_path):
    work = tmp_path / "checkout"
    (work / "config").mkdir(parents=True)
    inside = work / "config" / "config.yaml"
    inside.write_text("a: 1\n")
    outside = tmp_path / "home" / "my.yaml"
    outside.parent.mkdir()
    outside.write_text("b: 2\n")
    moved = relocate_configfiles([inside, outside], work)
    assert list(moved) == [str(outside)]
    target = Path(moved[str(outside)])
    assert target.parent == work / ".snakemake" / "benchmaker" / "configfiles"
    assert target.name.endswith("-my.yaml") and target.read_text() == "b: 2\n"
    assert relocate_configfiles([outside], work) == moved  # same content: same copy
    outside.write_text("b: 3\n")
    again = relocate_configfiles([outside], work)[str(outside)]
    assert again != str(target) and Path(again).read_text() == "b: 3\n"


@pytest.mark.parametrize("name,ok", [("sage-imsearch", True), ("sage_imsearch", False), ("ab", False),
                                     ("my.bucket-1", True), ("Upper", False), ("a..b", False),
                                     ("192.168.1.1", False), ("x" * 64, False)])
def test_bucket_names(name, ok):
    assert valid_bucket_name(name) is ok


def test_storage_urls():
    assert is_storage_url("s3://b/k") and is_storage_url("https://x/y")
    assert not is_storage_url("/home/me/x") and not is_storage_url("~/x") and not is_storage_url("rel/x")


def test_preflight_denied_with_wrong_keys(tmp_path):
    """A server that checks signatures (moto with auth enforced, like NRP's RGW): wrong keys give
    the one clear 'access denied' error."""
    import shutil
    import socket
    import subprocess
    import sys
    import time

    import boto3

    from benchmaker.staging import check_s3_prefix

    exe = shutil.which("moto_server") or str(Path(sys.executable).with_name("moto_server"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    env = {**__import__("os").environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"}
    with open(tmp_path / "moto.log", "w") as log:
        proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log, env=env)
    try:
        client = boto3.client("s3", endpoint_url=url, aws_access_key_id="AKIAWRONG",
                              aws_secret_access_key="wrong", region_name="us-east-1")
        for _ in range(100):
            try:
                client.list_buckets()
            except Exception as exc:  # noqa: BLE001 - up once it answers at all (403 here)
                if "Could not connect" not in str(exc) and "Connection" not in type(exc).__name__:
                    break
            else:
                break
            time.sleep(0.1)
        with pytest.raises(StagingError, match="access denied"):
            check_s3_prefix("s3://sage-imsearch/x", endpoint_url=url, access_key="AKIAWRONG",
                            secret_key="wrong")
    finally:
        proc.terminate()
        proc.wait(10)


def test_config_paths_follow_the_schema_marking():
    from benchmaker.config_paths import config_paths, path_keys

    pointers = {k.pointer: k for k in path_keys()}
    assert pointers["paths.image_root"].use == "volume" and pointers["paths.results"].use == "output"
    assert pointers["evaluate.systems[].path"].kind == "file"
    assert pointers["evaluate.systems[].model"].prefix == "local-dir:"
    cfg = {"paths": {"image_root": "/data/images", "results": "results", "rights_map": "~/r.json",
                     "seeds_file": None},
           "vision": {"clip": {"model": "ViT-B-32", "pretrained": "laion2b_s34b_b79k"}},
           "similarity": {"model": "ViT-B-32", "pretrained": "~/ckpt.safetensors"},
           "audit": {"human_labels": [{"path": "erin.csv"}], "second_judge": {"judge": {}}},
           "evaluate": {"systems": [{"name": "a", "kind": "clip", "model": "local-dir:/m"},
                                    {"name": "b", "kind": "trec_run", "path": "s3://bucket/run.trec"},
                                    {"name": "c", "kind": "trec_run", "path": "/runs/prod.trec"}]}}
    got = {(p.key, p.path, p.kind) for p in config_paths(cfg, use="stage")}
    assert got == {("paths.rights_map", "~/r.json", "file"),
                   ("similarity.pretrained", "~/ckpt.safetensors", "file"),
                   ("audit.human_labels[0].path", "erin.csv", "file"),
                   ("evaluate.systems[0].model", "/m", "dir"),
                   ("evaluate.systems[2].path", "/runs/prod.trec", "file")}
    # a schema that marks a key inside a section validated as another one (x-schema)
    schema = {"$defs": {"sec": {"type": "object", "properties": {"f": {"type": "string", "x-path": "file"}}}},
              "type": "object", "properties": {"a": {"$ref": "#/$defs/sec"},
                                               "b": {"type": "object", "x-schema": "#/$defs/sec"}}}
    assert [p.key for p in config_paths({"a": {"f": "x"}, "b": {"f": "y"}}, schema)] == ["a.f", "b.f"]
    with pytest.raises(ValueError, match="x-path must be file, dir or any"):
        path_keys({"type": "object", "properties": {"a": {"type": "string", "x-path": "folder"}}})
    # a file or a folder is checked in place, never staged (stage_file or stage_folder must be known)
    with pytest.raises(ValueError, match="x-path: any .* cannot be staged"):
        path_keys({"type": "object", "properties": {"a": {"type": "string", "x-path": "any"}}})
    assert [k.kind for k in path_keys({"type": "object", "properties": {"a": {
        "type": "string", "x-path": "any", "x-path-use": "controller"}}})] == ["any"]


def test_job_paths_map_staged_params_to_the_jobs_copies(tmp_path):
    from benchmaker.jobpaths import job_paths

    base = ".snakemake/storage/s3/bucket/prefix/results/b/inputs"
    trec = f"{base}/file/{stage_key('/home/me/prod.trec')}/prod.trec"
    model = f"{base}/dir/{stage_key('~/models/clip')}/clip"
    params = {"system": {"kind": "trec_run", "path": "/home/me/prod.trec"},
              "model": {"model": "local-dir:~/models/clip", "pretrained": None},
              "labels": [{"path": "/home/me/other.csv"}], "n": 3}
    got = job_paths(params, [trec, [model], "results/b/images.jsonl"])
    assert got["system"]["path"] == trec and got["model"]["model"] == f"local-dir:{model}"
    assert got["labels"] == [{"path": "/home/me/other.csv"}] and got["n"] == 3  # not staged: unchanged
    # no staged input (local runs, SLURM): the very same object
    assert job_paths(params, ["/home/me/prod.trec"]) is params


def test_volume_problems_and_pod_failure_summary(tmp_path):
    import os
    import time

    from benchmaker.config_paths import config_paths
    from benchmaker.podlogs import pod_failure, pod_failure_summary
    from benchmaker.staging import volume_problems

    vol = [p for p in config_paths({"paths": {"image_root": "/data/images"}}) if p.use == "volume"]
    assert volume_problems(vol, ["/data"]) == []
    (msg,) = volume_problems(vol, [])
    assert "paths.image_root" in msg and "BENCHMAKER_K8S_PVC" in msg
    log = ("Building DAG of jobs...\nrule preprocess:\n    jobid: 3\n"
           "benchmaker: rule preprocess failed:\n  FileNotFoundError: paths.image_root '/x' is not a directory\n"
           "  full log and traceback: results/b/logs/preprocess/00000.log\n")
    assert pod_failure(log) == ("preprocess", "FileNotFoundError: paths.image_root '/x' is not a directory")
    assert pod_failure("rule score:\nTraceback (most recent call last):\n  File x\nValueError: bad\n") == \
        ("score", "ValueError: bad")
    d = tmp_path / "logs"
    d.mkdir()
    for i in range(2):
        (d / f"snakejob-{i}.log").write_text(log)
    old = d / "snakejob-old.log"
    old.write_text("rule plan:\nValueError: from an earlier run\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    text = pod_failure_summary(time.time() - 60, {"paths.image_root": "export BENCHMAKER_K8S_PVC"}, d)
    assert "rule preprocess failed in its pod (2 jobs)" in text and "fix: export BENCHMAKER_K8S_PVC" in text
    assert "earlier run" not in text
    assert pod_failure_summary(time.time() - 60, {}, tmp_path / "none") is None


def test_link_staged_puts_the_copy_at_the_path_as_written(tmp_path, monkeypatch):
    from benchmaker.jobpaths import link_staged, staged_paths

    monkeypatch.chdir(tmp_path)
    written = str(tmp_path / "gone" / "home" / "prod.trec")
    copy = tmp_path / ".snakemake" / "storage" / "s3" / "b" / "inputs" / "file" / stage_key(written) / "prod.trec"
    copy.parent.mkdir(parents=True)
    copy.write_text("q Q0 d 1 1 x\n")
    folder = tmp_path / ".snakemake" / "storage" / "s3" / "b" / "inputs" / "dir" / stage_key("models/clip") / "clip"
    folder.mkdir(parents=True)
    params = {"path": written, "model": "local-dir:models/clip", "other": "/not/staged"}
    assert staged_paths(params, [str(copy), str(folder)]) == {written: str(copy), "models/clip": str(folder)}
    assert link_staged(params, [str(copy), str(folder)])
    assert Path(written).read_text() == "q Q0 d 1 1 x\n" and Path("models/clip").resolve() == folder.resolve()
    assert link_staged(params, [str(copy), str(folder)])  # again: already there
    # a path that exists and is something else: not replaced; the caller maps the param instead
    other = tmp_path / "taken.csv"
    other.write_text("x")
    c2 = copy.parent.parent / stage_key(str(other)) / "taken.csv"
    c2.parent.mkdir()
    c2.write_text("y")
    assert not link_staged({"p": str(other)}, [str(c2)]) and other.read_text() == "x"
