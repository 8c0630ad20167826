# The deepen stage's wiring (docs/deepen.md), opt-in, after evaluate: its systems and the report
# it hands summary and export. Included by rules/deepen.smk; no rules here.
from benchmaker.evaluate_settings import deepen_systems
from benchmaker.deepen.report import RESULT_FILES as DEEPEN_RESULT_FILES
from benchmaker.deepen.report import RUN_FACT_FILES as DEEPEN_RUN_FACT_FILES

try:
    DEEPEN_SYSTEMS = deepen_systems(config.get("deepen") or {}, EVAL_SYSTEMS)
except ConfigError as exc:
    raise WorkflowError(str(exc))
DEEPEN_ON = bool(DEEPEN_SYSTEMS)
DEEPEN = f"{RESULTS}/deepen"


def deepen_report_inputs(wildcards=None):
    """{"deepen": deepen/report.json, "deepen_files": its siblings} for summary and export when deepening is on and deepen.report
    is true (the report and the card then show what deepening changed; the dataset gets the deepened
    qrels)."""
    if DEEPEN_ON and config["deepen"]["report"]:
        # the files beside report.json that both copy (benchmaker.deepen.report RESULT_FILES) and the export
        # reads for run_facts.json (RUN_FACT_FILES), declared so that a pod is given them
        # (runner.TRIGGER_ONLY: not passed to the stage)
        return {
            "deepen": f"{DEEPEN}/report.json",
            "deepen_files": [
                f"{DEEPEN}/{name}"
                for name in DEEPEN_RESULT_FILES + DEEPEN_RUN_FACT_FILES
                if name != "report.json"
            ],
        }
    return {}
