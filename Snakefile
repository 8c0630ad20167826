# benchmaker: a folder of images -> a published image-retrieval benchmark.
# The stages live in rules/<stage>.smk; helpers and validation in rules/common.smk.


from snakemake.utils import min_version

min_version("9.0")


# the example config, unless config files are given on the command line: `--configfile my.yaml`
# then replaces it instead of being deep-merged into it (example facets would leak into yours)
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/resources.smk"
include: "rules/cluster.smk"
include: "rules/staging.smk"
include: "rules/preprocess.smk"
include: "rules/vision.smk"
include: "rules/plan.smk"
include: "rules/queries.smk"
include: "rules/judge.smk"
include: "rules/similarity.smk"
include: "rules/audit.smk"  # before summary/export: they take its optional input
include: "rules/summary.smk"
include: "rules/export.smk"
include: "rules/evaluate.smk"
include: "rules/deepen.smk"


rule all:
    default_target: True
    input:
        f"{RESULTS}/images.jsonl",
        f"{RESULTS}/annotations.jsonl",
        f"{RESULTS}/query_plan.jsonl",
        f"{RESULTS}/qrels.jsonl",
        f"{RESULTS}/qrels_with_score.jsonl",
        f"{RESULTS}/summary",
        f"{RESULTS}/hf_dataset",
        # the judge audit's labelling files (docs/audit.md)
        [f"{RESULTS}/audit/labelling"] if AUDIT_ON else [],
        # the evaluate target joins `all` only when systems are configured (docs/evaluate.md)
        f"{RESULTS}/evaluate/leaderboard.csv" if EVAL_SYSTEMS else [],
        # pool deepening, opt-in (deepen.enabled, docs/deepen.md)
        f"{RESULTS}/deepen/report.json" if DEEPEN_ON else [],


# the run's final block on failure: each failed stage's problem and fix (its <log>.error, written by
# benchmaker.logs), printed last so that it is not buried under Snakemake's job report
import time as _time

RUN_STARTED = _time.time()


onsuccess:
    # the scheduler's last re-evaluation timer would keep the process up to 1 s longer
    from benchmaker.snakemake_compat import release_scheduler_timers

    release_scheduler_timers()


onerror:
    from benchmaker.snakemake_compat import release_scheduler_timers
    from benchmaker.logs import failure_summary

    release_scheduler_timers()
    _summary = failure_summary(LOGS, RUN_STARTED)
    if _summary:
        print(_summary, file=sys.stderr)
    # jobs that failed in a pod (--profile nrp): their rule, first error line and fix
    _pods = cluster_failure_summary(RUN_STARTED)
    if _pods:
        print(_pods, file=sys.stderr)
