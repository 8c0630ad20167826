"""Jobs that failed in a pod (``--profile nrp``), told in the run's final block like local failures.

A job in a pod writes its log files in the pod; the controller only gets the pod's log, which the
kubernetes executor saves as ``.snakemake/auxiliary/kubernetes-logs/<job>.log``. The terminal then
says little more than "see the cluster log". :func:`pod_failure_summary` reads those files and gives,
per failed job: the rule, the first error line of the pod's log (benchmaker's own failure block when
the stage wrote one) and the fix, when the error names a config key whose fix is known (``fixes``:
e.g. a folder marked ``x-path-use: volume`` in the schema that no pod volume holds).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

__all__ = ["POD_LOG_DIR", "pod_failure", "pod_failure_summary"]

POD_LOG_DIR = ".snakemake/auxiliary/kubernetes-logs"
_BLOCK = re.compile(r"^benchmaker: rule (\w+) failed:\s*$")
_RULE = re.compile(r"^(?:local)?rule (\w+):\s*$")
_ERROR = re.compile(r"(Error|Exception|error:|failed|not found|No such file|denied)", re.IGNORECASE)
_NOISE = re.compile(r"^(Traceback|  File |\s*\^|Shutting down|Complete log|Exiting because|Will exit|"
                    r"Removing output files|Error in rule \w+:\s*$|jobid:|input:|output:|log:|"
                    r"conda-env:|shell:|wildcards:|resources:)")


def pod_failure(text: str) -> tuple[str | None, str | None]:
    """(rule, first error line) of one pod's log."""
    lines = [ln.rstrip() for ln in text.splitlines()]
    rule = None
    for i, ln in enumerate(lines):
        m = _BLOCK.match(ln)
        if m:  # the stage's own block: its first line of text is the problem
            body = next((x.strip() for x in lines[i + 1:] if x.strip()), None)
            return m.group(1), body
    for ln in lines:
        m = _RULE.match(ln)
        if m:
            rule = m.group(1)
    for ln in lines:
        s = ln.strip()
        if s and _ERROR.search(s) and not _NOISE.match(s):
            return rule, s
    return rule, None


def pod_failure_summary(since: float, fixes: Mapping[str, str] | None = None,
                        log_dir: str | Path = POD_LOG_DIR) -> str | None:
    """The final block for every pod log written since ``since`` (None if there is none).

    ``fixes`` maps a text an error line may contain (a config key such as ``paths.image_root``) to
    the fix to print with it."""
    root = Path(log_dir)
    if not root.is_dir():
        return None
    groups: dict[tuple[str | None, str | None], list[str]] = {}
    for f in sorted(root.glob("*.log")):
        try:
            if f.stat().st_mtime < since - 1:
                continue
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        groups.setdefault(pod_failure(text), []).append(str(f))
    if not groups:
        return None
    out = ["=" * 78, "jobs that failed in their pod (Kubernetes):"]
    for (rule, line), logs in groups.items():
        out.append(f"benchmaker: rule {rule or '?'} failed in its pod"
                   + (f" ({len(logs)} jobs)" if len(logs) > 1 else "") + ":")
        out.append(f"  {line or 'no error line in the pod log'}")
        for key, fix in (fixes or {}).items():
            if line and key in line:
                out.append(f"  fix: {fix}")
        out.append(f"  pod log: {logs[0]}" + (f" and {len(logs) - 1} more" if len(logs) > 1 else ""))
    out.append("=" * 78)
    return "\n".join(out)
