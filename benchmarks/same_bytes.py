"""Behaviour did not change: build the offline example (config/config.yaml + config/offline.yaml,
the random tiny CLIP) at two git revisions and compare every data file byte for byte.

    python benchmarks/same_bytes.py BASE_REV [NEW_REV]      # NEW_REV default: the working tree
    python benchmarks/same_bytes.py --compare DIR_A DIR_B   # two finished results/<name>/ folders
    python benchmarks/same_bytes.py --keep DIR BASE_REV     # build in DIR/base, DIR/new and keep them

Each revision is exported with ``git archive`` into a temporary folder (the checkout is not touched)
and built there with ``snakemake --cores 1`` and ``SOURCE_DATE_EPOCH`` fixed, sharing one tiny CLIP
(``python -m benchmaker.tinyclip``, built once by the base revision). Data files are every file of
``results/<name>/`` but logs/, benchmarks/ (timings), shard listings (they hold the image files'
modification times, which differ between two copies), the dataset's ``run_facts.json`` (its one file
of timings, docs/export.md) and the evaluate timing columns. Prints the
files that differ; exit status 1 when a data file differs.

Expected differences between revisions are stage versions (recorded in the outputs' metadata)
where code changed, and the recorded config (hf_dataset/config.yaml, the card) where the config
schema changed; they are listed separately, never silently ignored.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# run_facts.json: the dataset's one file of what varies between two builds (timings; docs/export.md)
VOLATILE = re.compile(r"(^|/)(logs|benchmarks)/|^shards/listing/|\.snakemake_timestamp$|(^|/)run_facts\.json$")
# files that record code versions, timings or the config itself (reported, not failed on)
RECORDS = re.compile(r"(^|/)(config\.yaml|README\.md|report\.(md|html)|summary\.json|config_values\.csv|"
                     r"dataset_metadata\.json|audit\.json|sample\.json|labelling\.json|leaderboard\.(csv|json)|"
                     r"runs/[^/]+\.json|quality_vs_latency\.png|run_facts\.json)$")


def digests(folder: Path) -> dict[str, str]:
    return {f.relative_to(folder).as_posix(): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(folder.rglob("*")) if f.is_file() and not VOLATILE.search(f.relative_to(folder).as_posix())}


def build(rev: str | None, where: Path, clip: Path | None) -> Path:
    where.mkdir(parents=True)
    if rev is None:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.split()
        for f in files:
            if (ROOT / f).is_file():
                (where / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, where / f)
    else:
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    env = dict(os.environ, PYTHONPATH=str(where / "src"), HF_HUB_OFFLINE="1", SOURCE_DATE_EPOCH="1700000000")
    if clip is None:
        subprocess.run([sys.executable, "-m", "benchmaker.tinyclip", ".cache/tiny-clip"], cwd=where, env=env,
                       check=True)
    else:
        shutil.copytree(clip, where / ".cache" / "tiny-clip")
    subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "config/config.yaml",
                    "config/offline.yaml"], cwd=where, env=env, check=True, capture_output=True)
    return where


def compare(a: Path, b: Path) -> int:
    da, db = digests(a), digests(b)
    only = sorted(set(da) ^ set(db))
    differ = sorted(k for k in set(da) & set(db) if da[k] != db[k])
    data = [k for k in differ if not RECORDS.search(k)]
    print(f"{len(da)} files compared; {len(differ) - len(data)} records differ (versions, timings, config): "
          f"{[k for k in differ if RECORDS.search(k)]}")
    if only:
        print(f"in one folder only: {only}")
    if data:
        print(f"DATA FILES DIFFER: {data}")
    else:
        print("data files: byte-identical")
    return 1 if data or only else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("revs", nargs="*")
    ap.add_argument("--compare", nargs=2, metavar="DIR")
    ap.add_argument("--keep", metavar="DIR", help="build in DIR/base, DIR/new and keep them")
    args = ap.parse_args()
    if args.compare:
        return compare(Path(args.compare[0]), Path(args.compare[1]))
    if not 1 <= len(args.revs) <= 2:
        ap.error("give BASE_REV [NEW_REV], or --compare DIR_A DIR_B")
    with tempfile.TemporaryDirectory(prefix="same-bytes-") as tmp:
        tmp = args.keep or tmp
        base = build(args.revs[0], Path(tmp) / "base", None)
        new = build(args.revs[1] if len(args.revs) > 1 else None, Path(tmp) / "new", base / ".cache" / "tiny-clip")
        name = "example-bench-offline"
        return compare(base / "results" / name, new / "results" / name)


if __name__ == "__main__":
    sys.exit(main())
