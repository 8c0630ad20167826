"""Snakemake script of every rule whose job only hands snakemake.* to its stage function: the function
that benchmaker.stages.STAGES declares for the rule (a rule with more to do has its own script)."""

from benchmaker_bridge import rule_target, run_stage

run_stage(snakemake, rule_target(snakemake.rule))  # noqa: F821
