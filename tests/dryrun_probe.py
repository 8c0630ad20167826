"""Dry runs of the real workflow for many config files in one process (Snakemake's API), for
tests/test_triggers.py: ``python dryrun_probe.py ROOT WORKDIR REQUESTS.json`` prints one JSON object
{name: {"planned": {rule: count}, "reasons": {rule: reason}} | {"error": message}}.

A request named ``create`` makes every output of the planned jobs (empty files, folders for
``directory()`` outputs) instead, so that ``snakemake --touch`` can then record them as made by this
config. Parsing the Snakefile rewrites a shard's listing when the image selection changes
(preprocess.extensions, ...): the listings are put back as they were (bytes and times) after each
request, so that one request's change never shows up in the next one's plan.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from snakemake.api import SnakemakeApi
from snakemake.io import is_flagged
from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, ResourceSettings, StorageSettings


def snapshot(workdir: Path) -> dict[Path, tuple[bytes, int]]:
    return {f: (f.read_bytes(), f.stat().st_mtime_ns) for f in workdir.glob("results/*/shards/listing/*.tsv")}


def restore(workdir: Path, snap: dict[Path, tuple[bytes, int]]) -> None:
    for f in workdir.glob("results/*/shards/listing/*.tsv"):
        if f not in snap:
            f.unlink()
    for f, (data, mtime) in snap.items():
        if not f.exists() or f.read_bytes() != data:
            f.write_bytes(data)
        os.utime(f, ns=(mtime, mtime))


def dry_run(root: Path, workdir: Path, config: str, create: bool = False) -> dict:
    with SnakemakeApi(OutputSettings(quiet=None)) as api:
        wf = api.workflow(resource_settings=ResourceSettings(cores=1),
                          config_settings=ConfigSettings(configfiles=[Path(config)]),
                          storage_settings=StorageSettings(), snakefile=root / "Snakefile", workdir=workdir)
        wf.dag(DAGSettings(targets={"all"})).execute_workflow(executor="local", pseudo_executor="dryrun")
        dag = wf._workflow.dag
        jobs = list(dag.needrun_jobs(exclude_finished=False))
        if create:
            for job in jobs:
                for f in job.output:
                    p = workdir / str(f)
                    if is_flagged(f, "directory"):
                        p.mkdir(parents=True, exist_ok=True)
                    else:
                        p.parent.mkdir(parents=True, exist_ok=True)
                        p.touch()
        planned: dict[str, int] = {}
        reasons: dict[str, str] = {}
        for job in jobs:
            planned[job.rule.name] = planned.get(job.rule.name, 0) + 1
            reasons.setdefault(job.rule.name, str(dag.reason(job)))
        return {"planned": planned, "reasons": reasons}


def main() -> None:
    root, workdir, requests = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(Path(sys.argv[3]).read_text())
    os.chdir(workdir)
    out = {}
    for name, config in requests.items():
        snap = snapshot(workdir)
        try:
            out[name] = dry_run(root, workdir, config, create=(name == "create"))
        except Exception as exc:  # a variant the workflow rejects: reported, the test decides
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        if name != "create":
            restore(workdir, snap)
    print("\n" + json.dumps(out))


if __name__ == "__main__":
    main()
