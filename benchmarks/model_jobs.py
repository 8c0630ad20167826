"""The share of each model job's seconds that is not work, from a finished run's own records.

    python benchmarks/model_jobs.py RESULTS_DIR      # e.g. results/tiny

For every job that loads a CLIP model (``embed_images``, ``embed_queries``, ``vision`` with the clip
adapter, ``evaluate_model``) and for ``decode_images``: its wall seconds (Snakemake's ``benchmark:``
file, process start to exit, so Python start, imports, the model load and writing the outputs are
included) and its work seconds (the encode loops its log reports: ``encoded N images in X s``,
``encoded N texts in X s``; for ``decode_images`` the decoding is the work: ``decode`` lines are not
timed, so it is listed with its wall only). Prints one line per job and per rule the median share of
the wall that is not work. A job whose images were all in the embedding cache did no work (share 100 %).
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

RULES = ("embed_images", "embed_queries", "vision", "evaluate", "decode_images")
WORK = re.compile(r"encoded (\d+) (images|texts) in ([\d.]+) s")


def main() -> int:
    res = Path(sys.argv[1])
    by_rule: dict[str, list[float]] = {}
    for rule in RULES:
        for tsv in sorted((res / "benchmarks" / rule).glob("*.tsv")):
            lines = tsv.read_text().splitlines()
            wall = float(lines[1].split("\t")[0])
            log = res / "logs" / rule / f"{tsv.stem}.log"
            text = log.read_text() if log.exists() else ""
            work = sum(float(m.group(3)) for m in WORK.finditer(text))
            items = sum(int(m.group(1)) for m in WORK.finditer(text))
            share = 1 - work / wall if wall else 0.0
            by_rule.setdefault(rule, []).append(share)
            print(f"{rule:<14} {tsv.stem:<14} wall {wall:7.2f} s  work {work:6.2f} s ({items} items)  "
                  f"not work {100 * share:5.1f} %")
    for rule, shares in by_rule.items():
        print(f"{rule:<14} median share not work {100 * statistics.median(shares):5.1f} % of {len(shares)} jobs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
