# benchmaker: a folder of images -> a published image-retrieval benchmark.
# The stages live in rules/<stage>.smk; helpers and validation in rules/common.smk.


import sys
from pathlib import Path

from snakemake.utils import min_version

# the library is importable from an installed environment; the checkout's src/ wins so that the
# workflow always runs the library version it ships with (shared file systems, k8s source archives)
sys.path.insert(0, str(Path(workflow.basedir) / "src"))

# the lower bound of the supported range (benchmaker.snakemake_compat.SUPPORTED, pyproject.toml)
min_version("9.27")

from benchmaker.snakemake_compat import (
    CompatError,
    check_snakemake,
    configfiles_given,
    ignore_unawaited_input_sizes,
    is_main_process,
)

try:  # the supported Snakemake, its internals as the workflow uses them: one clear error otherwise
    check_snakemake()
except CompatError as exc:
    raise WorkflowError(str(exc))
# an upstream warning, harmless (snakemake/snakemake#4280): filtered exactly (benchmaker.snakemake_compat)
ignore_unawaited_input_sizes()


# the example config, unless config files are given on the command line: `--configfile my.yaml`
# then replaces it instead of being deep-merged into it (example facets would leak into yours)
if not configfiles_given(workflow):

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
# evaluate, deepen and the audit before summary/export: they take their optional inputs and count
# their losses and costs
include: "rules/evaluate.smk"
include: "rules/deepen.smk"
include: "rules/audit.smk"
include: "rules/summary.smk"
include: "rules/export.smk"


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
from benchmaker.logs import final_block_only

RUN_STARTED = _time.time()
# a failed stage's fix is printed once, in that block (not also when the job fails, nor Snakemake's wrappers);
# with a default storage provider (--profile nrp) a pod's <log>.error stays in the pod: it prints its block
if is_main_process(workflow):
    final_block_only(jobs_write_here=not STAGING)


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
