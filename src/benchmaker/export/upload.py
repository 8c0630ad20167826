"""Upload the exported dataset folder to the Hugging Face Hub (explicit target ``upload``, never in ``all``).

The token comes only from the environment variable named by ``export.token_env`` (default HF_TOKEN);
it is never logged, written to the receipt, or persisted (no ``login()``).
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from ..io import atomic_write_text
from ..logs import get_logger
from .scrub import find_secrets

__all__ = ["run", "UploadError"]

log = get_logger("upload")


class UploadError(RuntimeError):
    """The upload cannot start or failed; the message names the config key or env var to fix."""


def _files(folder: Path) -> list[dict]:
    return [{"path": p.relative_to(folder).as_posix(), "bytes": p.stat().st_size}
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not any(s.startswith(".") for s in p.relative_to(folder).parts)]


def run(*, dataset: str, receipt: str, settings: Mapping[str, Any],
        commit_message: str | None = None) -> dict[str, Any]:
    from ..settings_schema import filled

    settings = filled("export", settings)
    folder = Path(dataset)
    repo_id = settings.get("repo_id")
    if not repo_id:
        raise UploadError("export.repo_id is not set: put the target dataset repo (e.g. 'me/my-bench') under "
                          "export.repo_id in the config")
    env = settings["token_env"]
    token = os.environ.get(env)
    if not token:
        raise UploadError(f"environment variable {env} is not set (export.token_env = {env!r}); export a Hugging "
                          "Face write token in it")
    if not (folder / "README.md").is_file() or not (folder / "data").is_dir():
        raise UploadError(f"{folder} is not an exported dataset (no README.md or data/); run the export target")
    leaked = find_secrets(folder, [token])
    if leaked:
        raise UploadError(f"the token in {env} appears in {leaked}; refusing to upload")
    from huggingface_hub import HfApi, constants

    if constants.HF_HUB_OFFLINE:
        raise UploadError("HF_HUB_OFFLINE is set, which blocks uploads; unset it for the upload target")
    endpoint = settings.get("endpoint") or None
    api = HfApi(endpoint=endpoint, token=token)
    private = bool(settings["private"])
    t0 = time.perf_counter()
    files = _files(folder)
    log.info("upload: %d files (%.1f MB) to dataset %s (private=%s)", len(files),
             sum(f["bytes"] for f in files) / 1e6, repo_id, private)
    try:
        repo_url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        meta = {}
        if (folder / "dataset_metadata.json").is_file():
            meta = json.loads((folder / "dataset_metadata.json").read_text())
        msg = commit_message or f"benchmaker export of {meta.get('benchmark') or repo_id} " \
                                f"(version {meta.get('version')}, {meta.get('counts', {}).get('rows', '?')} rows)"
        info = api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="dataset",
                                 commit_message=msg, ignore_patterns=[".*", "**/.*", "__pycache__"])
    except Exception as exc:
        text = str(exc).replace(token, "<redacted>")
        raise UploadError(f"upload to {repo_id} failed: {type(exc).__name__}: {text}") from None
    out = {
        "repo_id": repo_id, "repo_type": "dataset", "private": private,
        "repo_url": str(repo_url), "endpoint": endpoint or constants.ENDPOINT,
        "commit_url": getattr(info, "commit_url", None), "commit_oid": getattr(info, "oid", None),
        "commit_message": msg, "files": files, "seconds": round(time.perf_counter() - t0, 2),
        "uploaded_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    text = json.dumps(out, indent=2, ensure_ascii=False) + "\n"
    if token in text:  # defensive: never write the token
        raise UploadError("refusing to write a receipt that contains the token")
    atomic_write_text(receipt, text)
    log.info("upload: commit %s (%s)", out["commit_oid"], out["commit_url"])
    return out
