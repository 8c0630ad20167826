"""Jobs that failed in a pod (``--profile nrp``), told in the run's final block like local failures.

A job in a pod writes its log files in the pod; the controller only gets the pod's log, which the
kubernetes executor saves as ``.snakemake/auxiliary/kubernetes-logs/<job>.log``. The terminal then
says little more than "see the cluster log". :func:`pod_failure_summary` reads those files and gives,
per failed job: the rule, the first error line of the pod's log (benchmaker's own failure block when
the stage wrote one) and the fix, when the error names a config key whose fix is known (``fixes``:
e.g. a folder marked ``x-path-use: volume`` in the schema that no pod volume holds).

A pod that Kubernetes ends (out of memory, evicted, past its deadline) writes no error line: its log
just stops. When the executor reports a failed Job, the controller records what the Kubernetes API
says ended it (:func:`pod_status`: the container's termination reason and exit code, the pod's reason
and message, the Job's ``Failed`` condition) beside the pod's log, as ``<job>.status.json``
(``benchmaker.snakemake_compat.record_pod_status``); the final block then names that reason, the
exit code and the setting that fixes it (:func:`status_fix`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = ["POD_LOG_DIR", "STATUS_SUFFIX", "pod_failure", "pod_failure_summary", "pod_status", "status_fix",
           "status_line"]

POD_LOG_DIR = ".snakemake/auxiliary/kubernetes-logs"
STATUS_SUFFIX = ".status.json"   # <job>.status.json beside <job>.log: what the Kubernetes API said
# reasons that say only "it failed" (the container exited non-zero, or its node lost track of it
# when the pod was ended; the Job's one try is used up)
_PLAIN_REASONS = frozenset({None, "", "Error", "Completed", "ContainerStatusUnknown", "BackoffLimitExceeded",
                            "PodFailurePolicy"})
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


def pod_status(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the Kubernetes API says ended a Job's pod, from the API's JSON (camelCase, as ``kubectl
    get -o json`` shows it): ``{"reason", "exit_code", "message"}``, each None when not said.

    The most specific reason wins: the ``snakemake`` container's termination reason (``OOMKilled``),
    then the pod's (``Evicted``, ``DeadlineExceeded``), then the Job's ``Failed`` condition
    (``DeadlineExceeded`` for ``activeDeadlineSeconds``); the plain ones (``Error``,
    ``BackoffLimitExceeded``) only when nothing says more."""
    out: dict[str, Any] = {"reason": None, "exit_code": None, "message": None}
    found: list[tuple[str | None, str | None]] = []
    for pod in pods:
        st = pod.get("status") or {}
        for cs in st.get("containerStatuses") or []:
            if cs.get("name") != "snakemake":
                continue
            term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
            if term:
                out["exit_code"] = term.get("exitCode")
                found.append((term.get("reason"), term.get("message")))
        found.append((st.get("reason"), st.get("message")))
    for c in ((job or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Failed" and str(c.get("status")) == "True":
            found.append((c.get("reason"), c.get("message")))
    specific = [f for f in found if f[0] not in _PLAIN_REASONS]
    plain = [f for f in found if f[0]]
    if specific or plain:
        out["reason"], out["message"] = (specific or plain)[0]
    return out


def status_line(status: Mapping[str, Any]) -> str | None:
    """``Kubernetes: OOMKilled, exit code 137 (message)``; None when the API said nothing."""
    reason, code, message = status.get("reason"), status.get("exit_code"), status.get("message")
    if not reason and code is None:
        return None
    parts = [p for p in (reason, f"exit code {code}" if code is not None else None) if p]
    return "Kubernetes: " + ", ".join(parts) + (f" ({message.strip()})" if message and message.strip() else "")


def status_fix(status: Mapping[str, Any], rule: str | None) -> str | None:
    """The setting that fixes a pod Kubernetes ended, when the reason tells it."""
    reason, code = status.get("reason") or "", status.get("exit_code")
    message = (status.get("message") or "").lower()
    r = rule or "<rule>"
    memory = (f"the pod needed more memory than its limit: give rule {r} more with --set-resources "
              f"{r}:mem_mb=<MB> (its request follows its input sizes, benchmaker/resources.py; the log's "
              "resources line shows it), or --retries 1: each retry asks for 1.5x the memory")
    if reason == "OOMKilled" or (reason == "Evicted" and "memory" in message):
        return memory
    if reason == "Evicted" and ("ephemeral" in message or "storage" in message or "disk" in message):
        return (f"the pod wrote more to its disk than it asked for: give rule {r} more with --set-resources "
                f"{r}:disk_mb=<MB> (the pod's ephemeral-storage)")
    if reason == "Evicted":
        return "the node reclaimed its resources (see the message); run again: the job is resubmitted"
    if reason == "DeadlineExceeded":
        return (f"the pod ran past its Job's activeDeadlineSeconds: set rule {r}'s time with --set-resources "
                f"{r}:runtime=<minutes> where the cluster derives the deadline from it, or use more shards "
                "(n_shards) so that each job is shorter")
    if code == 137 and reason in _PLAIN_REASONS:
        return ("the container was killed (SIGKILL, exit 137) without a reason from Kubernetes: most often "
                + memory)
    return None


def _statuses(root: Path, since: float) -> dict[str, dict]:
    """<job> -> what the API said about it (``<job>.status.json`` written since ``since``)."""
    out = {}
    for f in sorted(root.glob(f"*{STATUS_SUFFIX}")):
        try:
            if f.stat().st_mtime < since - 1:
                continue
            out[f.name[: -len(STATUS_SUFFIX)]] = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return out


def pod_failure_summary(since: float, fixes: Mapping[str, str] | None = None,
                        log_dir: str | Path = POD_LOG_DIR) -> str | None:
    """The final block for every pod log (and every recorded pod status) written since ``since``
    (None if there is none).

    ``fixes`` maps a text an error line may contain (a config key such as ``paths.image_root``) to
    the fix to print with it."""
    root = Path(log_dir)
    if not root.is_dir():
        return None
    statuses = _statuses(root, since)
    groups: dict[tuple, list[str]] = {}
    for f in sorted(root.glob("*.log")):
        try:
            if f.stat().st_mtime < since - 1:
                continue
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        rule, line = pod_failure(text)
        st = statuses.pop(f.stem, {})
        groups.setdefault((rule or st.get("rule"), line, status_line(st), status_fix(st, rule or st.get("rule"))),
                          []).append(str(f))
    for job, st in statuses.items():   # no pod log: the pod was gone (evicted, past its deadline)
        groups.setdefault((st.get("rule"), None, status_line(st), status_fix(st, st.get("rule"))),
                          []).append(str(root / f"{job}{STATUS_SUFFIX}"))
    if not groups:
        return None
    out = ["=" * 78, "jobs that failed in their pod (Kubernetes):"]
    for (rule, line, kube, kube_fix), logs in groups.items():
        out.append(f"benchmaker: rule {rule or '?'} failed in its pod"
                   + (f" ({len(logs)} jobs)" if len(logs) > 1 else "") + ":")
        if kube:
            out.append(f"  {kube}")
        if line or not kube:
            out.append(f"  {line or 'no error line in the pod log'}")
        for key, fix in (fixes or {}).items():
            if line and key in line:
                out.append(f"  fix: {fix}")
        if kube_fix:
            out.append(f"  fix: {kube_fix}")
        out.append(f"  pod log: {logs[0]}" + (f" and {len(logs) - 1} more" if len(logs) > 1 else ""))
    out.append("=" * 78)
    return "\n".join(out)
