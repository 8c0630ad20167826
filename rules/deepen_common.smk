# The deepen stage's wiring (docs/deepen.md), opt-in, after evaluate: its systems and the report
# it hands summary and export. Included by rules/deepen.smk; no rules here.
from benchmaker.deepen.pairs import deepen_systems

try:
    DEEPEN_SYSTEMS = deepen_systems(config.get("deepen") or {}, EVAL_SYSTEMS)
except ConfigError as exc:
    raise WorkflowError(str(exc))
DEEPEN_ON = bool(DEEPEN_SYSTEMS)
DEEPEN = f"{RESULTS}/deepen"


def deepen_report_inputs(wildcards=None):
    """{"deepen": deepen/report.json} for summary and export when deepening is on and deepen.report
    is true (the report and the card then show what deepening changed; the dataset gets the deepened
    qrels)."""
    if DEEPEN_ON and config["deepen"]["report"]:
        return {"deepen": f"{DEEPEN}/report.json"}
    return {}
