"""Controller-local inputs under a remote default storage (``--profile nrp``: S3, no shared file system).

A file that the config names on the controller's disk (``paths.rights_map``, ``paths.metadata_jsonl``,
``paths.seeds_file``, a checkpoint in ``similarity.pretrained``, a ``local-dir:`` model folder, a
per-shard listing written at parse time, ...) does not exist in a Kubernetes pod. The workflow
(``rules/staging.smk``) therefore copies each such file once into the workflow's storage, as the
output of the controller-side rule ``stage_input``, and hands the copy to the jobs that need it:

    <RESULTS>/inputs/<key>/<file name>        key = sha256(path as written in the config)[:12]

The key depends on the path *as written* (not on the controller's working directory or ``$HOME``),
so the controller and every pod, which re-parse the same config, compute the same object name. A
changed source file is newer than its staged copy, so Snakemake's ``mtime`` trigger restages it and
reruns what reads it; an unchanged file is uploaded once. Storage URLs (``s3://``...) are used as
they are. Without a default storage provider (local runs, SLURM with a shared file system) nothing is
staged: the path is the input itself.

This module holds the pure parts (names, model paths inside a job, the S3 preflight check, config
files outside the working directory); it never imports Snakemake.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .config_paths import WEIGHT_SUFFIXES, looks_like_path  # one rule for "a name or a path"
from .jobpaths import LOCAL_DIR, job_paths, stage_key  # noqa: F401  (re-exported)

__all__ = [
    "LOCAL_DIR",
    "StagingError",
    "check_s3_prefix",
    "controller_configfile",
    "copy_input",
    "is_storage_url",
    "job_paths",
    "looks_like_path",
    "model_source_files",
    "relocate_configfiles",
    "stage_key",
    "staged_files",
    "staged_model",
    "valid_bucket_name",
    "volume_problems",
]

_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


class StagingError(RuntimeError):
    """A configured input cannot be staged, or the storage is not usable (message says how to fix)."""


def is_storage_url(path: str) -> bool:
    """``s3://b/k``, ``https://...``: already remote, used as is (never staged)."""
    return bool(_URL.match(str(path)))


def staged_files(path_as_written: str, *, base: str | os.PathLike | None = None) -> dict[str, str]:
    """``{file name: local source path}`` of what staging ``path_as_written`` copies.

    A file gives itself; a folder gives its regular files (not recursive: a ``local-dir:`` model
    folder is flat). ``~`` is expanded and a relative path is taken from ``base`` (default: the
    current directory, which is the workflow's working directory). A missing path is an error that
    names it: a configured input must exist on the controller.
    """
    p = Path(os.path.expanduser(str(path_as_written)))
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    if p.is_file():
        return {p.name: str(p)}
    if p.is_dir():
        files = {f.name: str(f) for f in sorted(p.iterdir()) if f.is_file() and not f.name.startswith(".")}
        if not files:
            raise StagingError(f"{path_as_written}: the folder is empty, nothing to stage")
        return files
    raise StagingError(f"{path_as_written}: no such file or folder on this machine (the controller); "
                       "fix the path in the config")


def volume_problems(paths: Sequence[Any], volumes: Sequence[Any]) -> list[str]:
    """Warnings for config paths marked ``x-path-use: volume`` (``paths.image_root``) that no pod
    volume holds: each ``volumes`` entry has ``.path`` (the mount path; the kubernetes executor's
    ``--kubernetes-persistent-volumes``, set by profiles/nrp from ``BENCHMAKER_K8S_PVC``)."""
    mounts = [Path(str(getattr(v, "path", v))) for v in volumes]
    out = []
    for p in paths:
        if is_storage_url(p.path):
            continue
        where = Path(os.path.abspath(os.path.expanduser(p.path)))
        if not any(where == m or m in where.parents for m in mounts):
            held = ", ".join(str(m) for m in mounts) or "none"
            out.append(f"{p.key} ({p.value}) is on this machine only: no volume of the pods holds it "
                       f"(mounted: {held}), so every job reading it fails. Put the folder on a "
                       "ReadWriteMany volume and export BENCHMAKER_K8S_PVC=<pvc name>:<mount path> with "
                       f"the mount path holding {p.path} (docs/clusters.md, The image volume)")
    return out


def model_source_files(spec: Mapping[str, Any], *, by_name: bool = False) -> list[str]:
    """The local files a CLIP model spec (``model``/``pretrained``) loads, as written in the config.

    ``local-dir:<folder>`` gives the folder (its ``open_clip_config.json`` and weight files); a
    ``pretrained`` that is an existing checkpoint file gives that file (with ``by_name``: any value
    that looks like a path, exists or not: a job in a pod decides without the controller's disk).
    Tags (``laion2b_...``) and ``hf-hub:`` names give nothing: the job downloads those itself.
    """
    model = str(spec.get("model") or "")
    pretrained = spec.get("pretrained")
    if model.startswith(LOCAL_DIR):
        return [model[len(LOCAL_DIR):]]
    if pretrained and (Path(os.path.expanduser(str(pretrained))).is_file()
                       or (by_name and looks_like_path(str(pretrained)))):
        return [str(pretrained)]
    return []


def _is_model_file(name: str) -> bool:
    return name == "open_clip_config.json" or name.endswith(WEIGHT_SUFFIXES)


def staged_model(spec: Mapping[str, Any], weights: Sequence[str] | None) -> dict[str, Any]:
    """``spec`` with its local model paths replaced by where the job finds the files (``weights``).

    ``weights`` are the rule's ``weights`` inputs as the job sees them: the configured files
    themselves on a shared file system, or the local copies of the staged objects in a pod. The
    model identity does not change (it is computed from file contents, docs/similarity.md).
    """
    out = dict(spec)
    if isinstance(weights, (str, os.PathLike)):
        weights = [weights]
    weights = [str(w) for w in (weights or [])]
    if not weights:
        return out
    model = str(out.get("model") or "")
    if model.startswith(LOCAL_DIR):
        folders = [w for w in weights if Path(w).is_dir()]
        if folders:  # a staged copy of the whole folder
            out["model"] = LOCAL_DIR + folders[0]
            return out
        cfg = [w for w in weights if Path(w).name == "open_clip_config.json"]
        if not cfg:
            raise StagingError(f"{model}: no open_clip_config.json among the staged weights {weights}")
        out["model"] = LOCAL_DIR + str(Path(cfg[0]).parent)
    elif out.get("pretrained"):
        name = Path(os.path.expanduser(str(out["pretrained"]))).name
        match = [w for w in weights if Path(w).name == name]
        if match:
            out["pretrained"] = match[0]
    return out


def copy_input(*, source: Sequence[str] | str, staged: str, folder: bool = False) -> None:
    """Stage ``stage_file``/``stage_folder``: copy the source file(s) to ``staged`` (a file, or a
    folder holding every source file by name); Snakemake uploads it to the storage afterwards."""
    from .logs import get_logger

    sources = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not sources:
        raise StagingError(f"{staged}: nothing to stage (the source is not on this machine)")
    out = Path(staged)
    if folder:
        out.mkdir(parents=True, exist_ok=True)
        for src in sources:
            shutil.copyfile(src, out / Path(src).name)
    elif len(sources) == 1:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sources[0], out)
    else:
        raise StagingError(f"{staged}: one file expected, got {sources}")
    get_logger(__name__).info("staged %d file(s) to %s", len(sources), staged)


# ----------------------------------------------------------------------------------- config files
def relocate_configfiles(configfiles: Iterable[os.PathLike | str], workdir: os.PathLike | str,
                         dest: str = ".snakemake/benchmaker/configfiles") -> dict[str, str]:
    """Copy config files outside ``workdir`` to ``workdir/dest/<key>-<name>``; returns ``{old: new}``.

    Jobs without a shared file system get the workflow's sources (config files included) from an
    archive that holds only files below the working directory; a ``--configfile ~/my.yaml`` would be
    left out and the jobs would not find it. The copy lives below the working directory, so it is
    archived and passed to the jobs instead. Files already below ``workdir`` are left alone.
    """
    workdir = Path(workdir).resolve()
    moved: dict[str, str] = {}
    for f in configfiles:
        src = Path(f).resolve()
        try:
            src.relative_to(workdir)
            continue
        except ValueError:
            pass
        data = src.read_bytes()
        key = hashlib.sha256(str(src).encode() + b"\0" + data).hexdigest()[:12]
        target = workdir / dest / f"{key}-{src.name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_bytes() != data:
            tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
            shutil.copyfile(src, tmp)
            os.replace(tmp, target)
        moved[str(f)] = str(target)
    return moved


def controller_configfile(overlay: Mapping[str, Any], workdir: os.PathLike | str,
                          dest: str = ".snakemake/benchmaker/configfiles") -> str:
    """Write ``overlay`` (config keys the controller decided from its own disk, e.g. the smoke-test
    verdict, benchmaker.smoke) as ``workdir/dest/controller-<sha256[:12]>.yaml`` and return its path.

    The workflow appends it to the config files the jobs get (rules/cluster.smk), so that a job that
    re-validates the config without the controller's disk (a pod) ends with the controller's config,
    not one of its own. Named by its content, written only when missing."""
    import yaml

    data = yaml.safe_dump(dict(overlay), sort_keys=True).encode()
    target = Path(workdir).resolve() / dest / f"controller-{hashlib.sha256(data).hexdigest()[:12]}.yaml"
    if not target.is_file() or target.read_bytes() != data:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + f".tmp-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return str(target)


# ------------------------------------------------------------------------------------ S3 preflight
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def valid_bucket_name(name: str) -> bool:
    """S3's bucket naming rules (3-63 chars of a-z 0-9 . -, no '..', not an IP address)."""
    return (bool(_BUCKET.match(name)) and ".." not in name and ".-" not in name and "-." not in name
            and not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name))


def check_s3_prefix(prefix: str, *, endpoint_url: str | None, access_key: str | None,
                    secret_key: str | None, region: str | None = None, timeout: float = 20) -> None:
    """Fail with one clear :class:`StagingError` unless the bucket of ``s3://bucket/...`` is usable.

    Checks, in order: the prefix is an ``s3://`` URL with a valid bucket name and no ``//``;
    credentials are there; the endpoint answers; the bucket exists and these credentials may list it
    (``HeadBucket``). Nothing is written. The message names the variable or setting that fixes it.
    """
    m = re.match(r"^s3://([^/]+)(/.*)?$", prefix or "")
    if not m:
        raise StagingError(f"default storage prefix {prefix!r} is not s3://BUCKET/PREFIX "
                           "(profiles/nrp: BENCHMAKER_S3_BUCKET, BENCHMAKER_S3_PREFIX)")
    bucket, rest = m.group(1), m.group(2) or ""
    if not valid_bucket_name(bucket):
        raise StagingError(f"S3 bucket name {bucket!r} is not valid (3-63 characters: lower-case letters, "
                           "digits, '-' and '.'; no '_'); set BENCHMAKER_S3_BUCKET")
    if "//" in rest:
        raise StagingError(f"default storage prefix {prefix!r} contains '//' (an absolute path joined "
                           "to the prefix?); set BENCHMAKER_S3_PREFIX without leading/trailing '/'")
    import boto3
    import botocore.config
    import botocore.exceptions as bex

    session = boto3.session.Session(aws_access_key_id=access_key or None,
                                    aws_secret_access_key=secret_key or None,
                                    region_name=region or None)
    if session.get_credentials() is None:
        raise StagingError("no S3 credentials: export SNAKEMAKE_STORAGE_S3_ACCESS_KEY and "
                           "SNAKEMAKE_STORAGE_S3_SECRET_KEY (or configure ~/.aws/credentials)")
    client = session.client("s3", endpoint_url=endpoint_url or None, config=botocore.config.Config(
        connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 2}))
    where = f"bucket {bucket!r} at {endpoint_url or 'AWS S3'}"
    try:
        client.head_bucket(Bucket=bucket)
    except bex.EndpointConnectionError as exc:
        raise StagingError(f"S3 endpoint not reachable: {exc}; set BENCHMAKER_S3_ENDPOINT (from outside "
                           "NRP: https://s3-west.nrp-nautilus.io)") from None
    except bex.ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("404", "NoSuchBucket") or status == 404:
            raise StagingError(f"{where} does not exist: create it (e.g. `aws s3 mb s3://{bucket} "
                               f"--endpoint-url {endpoint_url}`) or set BENCHMAKER_S3_BUCKET") from None
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch") or status in (401, 403):
            raise StagingError(f"{where}: access denied ({code or status}); check "
                               "SNAKEMAKE_STORAGE_S3_ACCESS_KEY / SNAKEMAKE_STORAGE_S3_SECRET_KEY") from None
        raise StagingError(f"{where}: {exc}") from None
    except bex.BotoCoreError as exc:
        raise StagingError(f"{where}: {exc}") from None
