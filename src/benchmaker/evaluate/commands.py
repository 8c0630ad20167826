"""The evaluation's commands of ``benchmaker`` (cli.py adds them to its parser): ``compare`` (an
evaluation against an earlier one), ``keep-evaluation`` (into a history folder), ``mteb`` (mteb's own
evaluation of an exported benchmark) and ``power`` (queries needed to detect a difference). Imports
are lazy: building the parser imports none of the evaluation's modules but the scopes."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, UserError


def add_compare(add) -> None:
    """The `compare` command."""
    p = add("compare", "compare an evaluation with an earlier one of the same benchmark (regressions gate a deploy)",
            cmd_compare,
            "Compare the evaluation NEW with OLD: each is a results folder (results/<benchmark>, with "
            "evaluate/leaderboard.json), its evaluate/ folder, a snapshot kept by `benchmaker keep-evaluation` "
            "(HISTORY/<tag>) or a history folder (its latest snapshot). Systems are matched by name; for each "
            "system, scope and metric the queries both evaluations scored are compared with a paired test, the "
            "p-values of each metric corrected across systems and scopes. A regression is a significant drop of "
            "a gated metric (default: ranx's metrics) by at least --min-delta. Prints the report; --out writes "
            "comparison.csv/.md/.json. Exit status 1 with --fail-on-regression when there is a regression "
            "(docs/evaluate.md, \"Comparing evaluations\").")
    p.add_argument("old", metavar="OLD", help="the earlier evaluation (results, evaluate, snapshot or history folder)")
    p.add_argument("new", metavar="NEW", help="the evaluation to check (usually results/<benchmark>)")
    p.add_argument("--fail-on-regression", action="store_true", help="exit 1 when any gated metric regressed")
    p.add_argument("--metric", action="append", default=None, metavar="M",
                   help="compare and gate only this metric (repeatable; default: every metric, ranx's gated)")
    from .scopes import SCOPES

    p.add_argument("--scope", action="append", default=None, choices=list(SCOPES),
                   help="only this scope (repeatable; default: every scope both have)")
    p.add_argument("--system", action="append", default=None, metavar="NAME", help="only this system (repeatable)")
    p.add_argument("--test", choices=["student", "wilcoxon", "fisher"], default="student",
                   help="paired test on the per-query values")
    p.add_argument("--correction", choices=["holm", "bonferroni", "fdr_bh", "none"], default="holm",
                   help="multiple-comparison correction of each metric's p-values across systems and scopes")
    p.add_argument("--max-p", type=float, default=0.05, help="significance level after correction")
    p.add_argument("--min-delta", type=float, default=0.0,
                   help="smallest drop of a mean that counts as a regression (e.g. 0.01)")
    p.add_argument("--allow-different-judgments", action="store_true",
                   help="compare although the two evaluations used different qrels (shared queries only)")
    p.add_argument("--out", default=None, metavar="DIR", help="also write comparison.csv, .md and .json to DIR")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of markdown")


def add_keep_evaluation(add) -> None:
    """The `keep-evaluation` command."""
    p = add("keep-evaluation", "keep an evaluation in a history folder (compare later ones with it)",
            cmd_keep_evaluation,
            "Copy RESULTS' evaluation (leaderboard, per-query values, drill-downs) into HISTORY/<tag>/ and "
            "append it to HISTORY/history.jsonl with each system's version; `benchmaker compare HISTORY NEW` "
            "then compares NEW with the latest kept evaluation, `compare HISTORY/<tag> NEW` with a given one.")
    p.add_argument("results", metavar="RESULTS", help="a results folder (or its evaluate/ folder)")
    p.add_argument("history", metavar="HISTORY", help="the history folder (created if missing)")
    p.add_argument("--tag", default=None, help="snapshot name (default: UTC time, plus the version if all agree)")


def add_mteb(add) -> None:
    """The `mteb` command."""
    p = add("mteb", "evaluate a model on an exported benchmark with mteb (mteb.evaluate)", cmd_mteb,
            "Run mteb's own retrieval evaluation (the task of docs/evaluate.md, subset `mteb`) on an exported "
            "hf_dataset folder (or a Hub dataset with --revision) for an open_clip model loaded as the `clip` "
            "evaluate system loads it (--model/--pretrained) or an mteb model name (--mteb-model); prints mteb's "
            "scores. Needs the `mteb` extra (pip install 'benchmaker[mteb]').")
    p.add_argument("dataset", metavar="DATASET", help="results/<name>/hf_dataset, or org/name on the Hub")
    p.add_argument("--model", default=None, help="open_clip model, as an evaluate system's `model`")
    p.add_argument("--pretrained", default=None, help="open_clip pretrained tag, as an evaluate system's")
    p.add_argument("--mteb-model", default=None, help="an mteb model name instead (mteb.get_model)")
    p.add_argument("--split", default="test", help="the split to evaluate (export.split)")
    p.add_argument("--revision", default=None, help="the Hub dataset's commit (required for a Hub dataset)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, mps or auto")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the scores as JSON to FILE")
    p.add_argument("--trec-run", default=None, metavar="FILE",
                   help="also write mteb's ranking as a TREC run file (score it with trec_eval and the export's "
                        "trec/qrels.txt: the leaderboard's `exported` scope, unrounded)")


def add_power(add) -> None:
    from ..settings_schema import default

    p = add("power", "queries needed to detect a difference between two systems (topic set size design)", cmd_power,
            "How many queries a benchmark needs so that a paired t-test detects a mean difference --delta of a "
            "metric between two systems with the given power, at --alpha corrected over the system pairs "
            "compared (Bonferroni: alpha / pairs, Holm's first step). The standard deviation of the per-query "
            "differences comes from --from (this benchmark's or a pilot's results folder or per_query.csv, or an "
            "earlier benchmark's published hf_dataset folder or evaluate/trust.json: the median over its system "
            "pairs) or --sd. With --queries N it also prints the smallest difference N queries detect "
            "(docs/trust.md, \"Power\").")
    p.add_argument("--delta", type=float, action="append", required=True, metavar="D",
                   help="the difference of the metric to detect (repeatable), e.g. 0.03 nDCG@10")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from", dest="source", default=None, metavar="PATH",
                     help="results folder, evaluate/ folder, hf_dataset folder, trust.json or per_query.csv")
    src.add_argument("--sd", type=float, default=None, help="the per-query standard deviation of the differences")
    p.add_argument("--metric", default="ndcg@10", help="the metric (a per_query.csv column)")
    p.add_argument("--scope", default="pool", choices=["pool", "corpus", "condensed"], help="the scope")
    p.add_argument("--systems", type=int, default=2, help="systems to be compared: pairs = systems*(systems-1)/2")
    p.add_argument("--correction", choices=["holm", "bonferroni", "fdr_bh", "none"],
                   default=default("evaluate.correction"), help="the correction over the pairs (evaluate.correction)")
    p.add_argument("--alpha", type=float, default=default("evaluate.max_p"),
                   help="significance level after correction (evaluate.max_p)")
    p.add_argument("--power", type=float, default=default("evaluate.power.power"),
                   help="probability of detecting --delta (evaluate.power.power)")
    p.add_argument("--queries", type=int, default=None, help="also: the smallest difference this many queries detect")
    p.add_argument("--json", action="store_true", help="print JSON")


def cmd_power(args) -> int:
    from .power import check_levels, mdd, pair_alpha, queries_needed, sd_from

    if args.systems < 2:
        raise UserError("--systems: a comparison needs at least two systems")
    if args.queries is not None and args.queries < 2:
        raise UserError(f"--queries: a paired test needs at least 2 queries (got {args.queries})")
    if args.sd is not None and not (math.isfinite(args.sd) and args.sd >= 0):
        raise UserError(f"--sd: the standard deviation of the per-query differences must be a number >= 0 "
                        f"(got {args.sd})")
    check_levels(args.alpha, args.power)
    if args.sd is not None:
        sd, n_src, origin = float(args.sd), None, "--sd"
    else:
        sd, n_src, origin = sd_from(args.source, metric=args.metric, scope=args.scope)
    pairs = args.systems * (args.systems - 1) // 2
    a = pair_alpha(args.alpha, pairs, args.correction)
    out = {"metric": args.metric, "scope": args.scope, "sd_diff": round(sd, 6), "sd_from": origin,
           "source_queries": n_src, "systems": args.systems, "pairs": pairs, "alpha": args.alpha, "alpha_pair": a,
           "power": args.power, "queries_needed": {f"{d:g}": queries_needed(d, sd, alpha=a, power=args.power)
                                                   for d in args.delta}}
    if args.queries:
        out["mdd_at_queries"] = {str(args.queries): mdd(sd, args.queries, alpha=a, power=args.power)}
    if args.json:
        print(json.dumps(out, indent=2))
        return EXIT_OK
    print(f"{args.metric} ({args.scope}): σ_d {sd:.4f} from {origin}; {args.systems} systems = {pairs} pair(s), "
          f"alpha {args.alpha} ({args.correction}) -> {a:.4g} per pair, power {args.power}")
    for d, n in out["queries_needed"].items():
        print(f"  a difference of {d} needs {n} queries")
    for n, m in (out.get("mdd_at_queries") or {}).items():
        beyond = " (beyond a metric bounded by 0 and 1: these queries detect no difference)" if m > 1 else ""
        print(f"  {n} queries detect differences of {m:.4f} or more{beyond}")
    return EXIT_OK


def cmd_compare(args) -> int:
    from .compare import check_metrics, compare, load_evaluation, report_markdown, write_comparison

    old, new = load_evaluation(args.old), load_evaluation(args.new)
    try:
        check_metrics(old, new, args.metric)
    except UserError as exc:  # a bad argument, not a regression: the usage status
        print(f"benchmaker compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    res = compare(old, new, test=args.test, correction=args.correction,
                  max_p=args.max_p, min_delta=args.min_delta, metrics=args.metric, scopes=args.scope,
                  systems=args.system, allow_different_judgments=args.allow_different_judgments)
    if args.out:
        write_comparison(res, args.out)
    if args.json:
        print(json.dumps({**{k: v for k, v in res.items() if k != "table"}, "rows": res["table"].to_dicts()},
                         indent=2, default=str))
    else:
        print(report_markdown(res), end="")
    if res["regressions"]:
        print(f"benchmaker compare: {res['regressions']} regression(s) of {res['new']} against {res['old']}",
              file=sys.stderr)
        if args.fail_on_regression:
            return EXIT_FAILURE
    return EXIT_OK


def cmd_keep_evaluation(args) -> int:
    from .compare import keep

    entry = keep(args.results, args.history, args.tag)
    print(f"kept as {Path(args.history) / entry['tag']} (systems: "
          f"{', '.join(f'{k}={v}' for k, v in entry['systems'].items()) or 'none'})")
    return EXIT_OK


def cmd_mteb(args) -> int:
    try:
        from .mteb_task import run
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise UserError(f"{exc}: install the mteb extra: pip install 'benchmaker[mteb]'") from None
    try:
        out = run(dataset=args.dataset, model=args.model, pretrained=args.pretrained, mteb_model=args.mteb_model,
                  split=args.split, revision=args.revision, output=args.out, trec_run=args.trec_run,
                  device=args.device)
    except (ValueError, ModuleNotFoundError) as exc:
        raise UserError(str(exc)) from None
    print(json.dumps({k: out[k] for k in ("task", "model", "split", "main_score")}))
    print(json.dumps({k: round(v, 5) for k, v in out["scores"].items() if k.startswith(("ndcg_at", "map_at",
                                                                                          "mrr_at", "recall_at"))}))
    return EXIT_OK
