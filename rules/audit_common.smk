# Settings, validation and input functions of the judge audit (rules in rules/audit.smk). No rules here.

from benchmaker.config import deep_merge

AUDIT = config["audit"]
AUDIT_ON = AUDIT["enabled"]
AUDIT_REPORT = f"{RESULTS}/audit/report"
AUDIT_SAMPLE_KEYS = (
    "sample_size",
    "seed",
    "strata",
    "min_per_stratum",
    "allocation",
    "rank_bands",
)

# audit.strata and audit.facets are checked with the config (benchmaker.audit.settings)


def second_judge_config():
    """The judge section of the second judge (config judge + audit.second_judge.judge), validated."""
    sj = AUDIT["second_judge"]
    if sj["judge"] is None:
        return None
    merged = deep_merge(
        {k: v for k, v in config.items() if not str(k).startswith("_")},
        {"judge": sj["judge"]},
    )
    try:
        judge = validate_config(merged)["judge"]
    except ConfigError as exc:
        raise WorkflowError(f"audit.second_judge.judge: {exc}")
    if judge["adapter"] in API_ADAPTERS:
        # the second judge runs as one sync job (no build/submit/collect rules)
        judge[judge["adapter"]]["mode"] = "sync"
    return judge


JUDGE2 = second_judge_config()
JUDGE2_DIR = (
    f"{RESULTS}/audit/judge2/{AUDIT['second_judge']['name']}" if JUDGE2 else None
)


def evaluate_systems():
    """Names of the evaluate stage's systems (config evaluate.systems), when that stage exists."""
    return [s["name"] for s in (config.get("evaluate") or {}).get("systems") or []]


def audit_sample_systems():
    """The systems whose runs the sample's rank stratum reads: the evaluated systems when audit.strata has
    `rank`; none otherwise (then the rank settings are not the job's: a benchmark without systems draws
    and names the same sample as before the stratum existed)."""
    return evaluate_systems() if "rank" in AUDIT["strata"] else []


def audit_sample_runs(wildcards):
    """The evaluate stage's runs behind the rank stratum (the evaluate stage reads nothing of the audit:
    no cycle)."""
    return [f"{RESULTS}/evaluate/runs/{n}.trec" for n in audit_sample_systems()]


def audit_sample_settings():
    """The settings that decide the sample (AUDIT_SAMPLE_KEYS), without the rank stratum when no system ranks."""
    out = {k: AUDIT[k] for k in AUDIT_SAMPLE_KEYS}
    if not audit_sample_systems():
        out["strata"] = [s for s in out["strata"] if s != "rank"]
        del out["rank_bands"]
    return out


def audit_report_inputs(wildcards):
    out = {
        "sample": f"{RESULTS}/audit/sample.jsonl",
        "sample_meta": f"{RESULTS}/audit/sample.json",
        "qrels": f"{RESULTS}/qrels.jsonl",
        "human": [workflow_input(h["path"]) for h in AUDIT["human_labels"]],
        "runs": [f"{RESULTS}/evaluate/runs/{n}.trec" for n in evaluate_systems()],
    }
    if JUDGE2:
        out["judge2"] = f"{JUDGE2_DIR}/qrels.jsonl"
    return out


def judge2_inputs(wildcards):
    """The second judge labels under the queries the judge labelled under (queries.jsonl); it reads
    the sample only when it judges the sample (scope: sample)."""
    out = {
        "plan": f"{RESULTS}/query_plan.jsonl",
        "queries": f"{RESULTS}/queries.jsonl",
        "annotations": f"{RESULTS}/annotations.jsonl",
        "images": f"{RESULTS}/images.jsonl",
    }
    if AUDIT["second_judge"]["scope"] == "sample":
        out["sample"] = f"{RESULTS}/audit/sample.jsonl"
    return out


def audit_input(wildcards=None):
    """The optional `audit` input of the summary and export rules."""
    return {"audit": AUDIT_REPORT} if AUDIT_ON else {}
