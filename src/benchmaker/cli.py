"""The benchmaker command, for what is not a pipeline target.

    benchmaker validate-config CONFIG...       check config files merged like `--configfile A B` (keys,
                                               paths, API key variables, YAML syntax with file:line)
    benchmaker estimate CONFIG... [--json] [--pilot [N]] [--record]
                                               requests, tokens and dollars before anything is submitted
    benchmaker batches list CONFIG...          this benchmark's batches (found by their metadata)
    benchmaker batches cancel CONFIG... --yes  cancel this benchmark's unfinished batches
    benchmaker check-urls CONFIG... [--out F]  every image_url of images.jsonl answers (image_transport: url)
    benchmaker install-profiles                make `snakemake --profile slurm|nrp` resolve
    benchmaker import-upstream CONFIG.toml     an imsearch_benchmaker config (and outputs) -> benchmaker
    benchmaker compare OLD NEW [--fail-on-regression]
                                               an evaluation against an earlier one: per-metric differences,
                                               paired tests, regressions (exit 1 with --fail-on-regression)
    benchmaker keep-evaluation RESULTS HISTORY [--tag T]
                                               keep an evaluation in a history folder, to compare with later
    benchmaker power --delta D (--from PATH | --sd S) [--systems N]
                                               queries needed to detect a difference D between two systems
                                               (σ_d from this benchmark, a pilot or an earlier one)

Several CONFIG files are merged left to right exactly as `snakemake --configfile A B` merges them.
Exit status: 0 success (also: nothing to do or list), 1 failure (invalid config, failed check, API or
file error), 2 usage error (bad arguments, or a destructive action without --yes).
The pipeline itself runs with Snakemake (see README). Imports are lazy: the command starts fast.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Sequence

__all__ = ["main"]

API_ADAPTERS = ("openai",)


EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _load(paths: str | Sequence[str]) -> dict:
    """Config files merged as `snakemake --configfile A B` merges them, validated, defaults filled."""
    from .preflight import load_config_files

    return load_config_files([paths] if isinstance(paths, str) else paths, check_paths=False, check_env=False)


def cmd_validate(args) -> int:
    from .config import ConfigError
    from .preflight import load_config_files

    names = " + ".join(args.config)
    try:
        cfg = load_config_files(args.config, check_paths=not args.no_paths, check_env=not args.no_env)
    except ConfigError as exc:
        print(f"{names}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    checked = ["schema"] + (["paths"] if not args.no_paths else []) + (["API key variables"] if not args.no_env else [])
    print(f"{names}: valid (benchmark {cfg['benchmark']['name']}, vision {cfg['vision']['adapter']}, "
          f"judge {cfg['judge']['adapter']}; checked: {', '.join(checked)})")
    return EXIT_OK


def cmd_check_urls(args) -> int:
    from .config import results_dir
    from .formats import read_table
    from .io import write_jsonl
    from .urlcheck import check_urls

    cfg = _load(args.config)
    path = Path(results_dir(cfg)) / "images.jsonl"
    if not path.exists():
        print(f"benchmaker: {path} does not exist yet: run `snakemake {path}` (preprocess) first", file=sys.stderr)
        return EXIT_FAILURE
    images = read_table("images", path, columns=cfg["columns"])
    results = check_urls(images.select("image_id", "image_url").iter_rows(), workers=args.workers,
                         timeout=args.timeout)
    bad = [r for r in results if not r.ok]
    print(f"{len(results)} image URLs checked: {len(results) - len(bad)} ok, {len(bad)} failed")
    for r in bad[:20]:
        detail = r.detail or (f"HTTP {r.status}" if r.status else "failed")
        print(f"  {r.image_id}: {detail}" + (f" ({r.url})" if r.url else ""))
    if len(bad) > 20:
        print(f"  ... {len(bad) - 20} more")
    if args.out:
        write_jsonl(args.out, ({"image_id": r.image_id, "url": r.url, "status": r.status, "detail": r.detail}
                               for r in bad))
        print(f"failures written to {args.out}")
    return 1 if bad else 0


# -- estimate -----------------------------------------------------------------------------------------
def estimate(cfg: dict, *, pilot: int | None = None, record: bool = False) -> list[dict]:
    """See :mod:`benchmaker.estimate` (cache, quarantine, duplicates, prompt caching, ranges, pilot)."""
    from .estimate import PILOT_MIN, append_pilot_costs
    from .estimate import estimate as _estimate
    from .estimate import record as _record

    if pilot is not None and pilot <= 0:      # --pilot without N
        pilot = PILOT_MIN
    lines = _estimate(cfg, pilot=pilot, on_pilot=lambda rows: append_pilot_costs(cfg, rows))
    if record or pilot is not None:
        _record(cfg, lines)
    return lines


def _print_estimate(lines: list[dict]) -> None:
    print(f"{'stage':12} {'model':18} {'mode':6} {'to send':>8} {'cached':>7} {'same':>5} {'input tok':>11} "
          f"{'(cached)':>10} {'output tok':>10} {'USD':>10} {'USD low..high':>22}")
    for ln in lines:
        print(f"{ln['stage'][:12]:12} {ln['model'][:18]:18} {ln['mode']:6} {ln['requests']:>8,} {ln['cached']:>7,} "
              f"{ln['duplicates']:>5,} {ln['input_tokens']:>11,} {ln['cached_input_tokens']:>10,} "
              f"{ln['output_tokens']:>10,} {ln['usd']:>10.4f} {ln['low_usd']:>10.4f}..{ln['high_usd']:<10.4f}"
              + ("" if ln["price_known"] else "  (no price for this model: set prices)"))
    tot = {k: sum(x[k] for x in lines) for k in ("requests", "input_tokens", "cached_input_tokens", "output_tokens",
                                                 "usd", "low_usd", "high_usd")}
    print(f"{'total':12} {'':18} {'':6} {tot['requests']:>8,} {'':>7} {'':>5} {tot['input_tokens']:>11,} "
          f"{tot['cached_input_tokens']:>10,} {tot['output_tokens']:>10,} {tot['usd']:>10.4f} "
          f"{tot['low_usd']:>10.4f}..{tot['high_usd']:<10.4f}")
    for ln in lines:
        extra = (f"; {ln['quarantined']} file(s) quarantined by preprocessing, not counted"
                 if ln.get("quarantined") else "")
        print(f"{ln['stage']}: from {ln['source']}{extra}; output tokens from {ln['output_from']}")
        print(f"{ln['stage']}: the range assumes " + "; ".join(ln["assumes"]))
        if ln.get("pilot", {}).get("requests"):
            p = ln["pilot"]
            sync = (f", sent sync: USD {p['over_batch_usd']:.4f} more than in the batch"
                    if p.get("over_batch_usd") else "")
            print(f"{ln['stage']}: the pilot sent {p['requests']} requests (USD {p['usd']:.4f}{sync}; cached for the "
                  f"run); the stage in all: USD {ln['total_usd']:.4f} ({ln['total_low_usd']:.4f}.."
                  f"{ln['total_high_usd']:.4f})")
        elif (nxt := ln.get("next_pilot") or {}).get("requests"):
            sync = (f"; sent sync, USD {nxt['over_batch_usd']:.4f} more than the same requests in the batch"
                    if nxt["over_batch_usd"] else "")
            print(f"{ln['stage']}: `--pilot` would send {nxt['requests']} of these requests now, cached for the run: "
                  f"USD {nxt['usd']:.4f} ({nxt['low_usd']:.4f}..{nxt['high_usd']:.4f}){sync}")
        if ln["stage"] == "deepen":
            print(f"deepen: {ln['pairs']:,} new (query, image) pairs; budget max_pairs {ln['max_pairs']}, max_usd "
                  f"{ln['max_usd']}: " + ("within budget" if ln["within_budget"] else
                                          "OVER budget: the run judges only the shallowest pairs that fit"))
        if ln.get("reused"):
            print(f"{ln['stage']}: {ln['reused']} quer{'y' if ln['reused'] == 1 else 'ies'} answered by "
                  "paths.judge_reuse_file (labels already paid for): never sent, free, not counted above")
        if ln.get("labelling_modes"):    # the judge priced both ways (docs/judge-rules.md, Method)
            t, i = ln["labelling_modes"]["text_only"], ln["labelling_modes"]["with_images"]
            print(f"{ln['stage']}: labelling text-only {t['input_tokens']:,} input tokens, {t['usd']:.4f} USD; with "
                  f"images (send_thumbnails: one low-detail image per candidate) {i['input_tokens']:,} input tokens, "
                  f"{i['usd']:.4f} USD (both before the cache)")


def cmd_estimate(args) -> int:
    cfg = _load(args.config)
    lines = estimate(cfg, pilot=args.pilot, record=args.record)
    if args.json:
        print(json.dumps(lines, indent=1))
        return 0
    from .estimate import not_priced

    if not lines:
        print(f"no API adapter configured for the benchmark: nothing to pay (vision {cfg['vision']['adapter']}, "
              f"judge {cfg['judge']['adapter']})")
    else:
        _print_estimate(lines)
    for note in not_priced(cfg):       # paid, but not priced: never read the total as the whole bill
        print(note)
    if not lines:
        return 0
    print("'cached': answered by the response cache (free); 'same': identical content, sent once. Tokens: ~4 "
          "characters per text token, each provider's image-token rule, the stable prompt prefix at the cached "
          "rate; output: until answers of a stage are cached its reasoning is unknown, so USD is a range "
          "(low..high, with what it assumes); `--pilot` sends a small sample of each stage's real requests (cached "
          "for the run) and measures it. How far to trust it: docs/openai.md (Estimate); actual costs are written "
          "to costs/*.jsonl." + (" Recorded in <results>/estimate/estimate.json (the summary shows it beside the "
                                 "bill)." if args.record or args.pilot is not None else ""))
    return 0


# -- batches ------------------------------------------------------------------------------------------
def _clients(cfg: dict):
    from .providers.openai import make_client

    seen = {}
    for stage in ("vision", "judge"):
        ad = cfg[stage]["adapter"]
        if ad in API_ADAPTERS:
            s = cfg[stage][ad]
            key = (s.get("base_url"), s.get("api_key_env"))
            if key not in seen:
                seen[key] = make_client(s)
    return list(seen.values())


def _ours(cfg: dict, args) -> list[tuple[Any, dict]]:
    from .providers.openai import iter_batches

    name = cfg["benchmark"]["name"]
    out = []
    for client in _clients(cfg):
        for b in iter_batches(client):
            md = b.get("metadata") or {}
            if md.get("benchmaker") != name:
                continue
            if args.stage and md.get("bm_stage") != args.stage:
                continue
            out.append((client, b))
    return out


def cmd_batches(args) -> int:
    from .providers.batch import TERMINAL
    from .providers.openai import cancel_batch

    cfg = _load(args.config)
    if not any(cfg[stage]["adapter"] in API_ADAPTERS for stage in ("vision", "judge")):
        print(f"no OpenAI adapter configured (vision {cfg['vision']['adapter']}, judge {cfg['judge']['adapter']}): "
              "this benchmark has no batches")
        return EXIT_OK
    rows = _ours(cfg, args)
    if args.action == "list":
        print(f"{'batch':32} {'stage':7} {'shard':6} {'round':5} {'status':12} {'done/total':>12} failed")
        for _, b in rows:
            md, rc = b.get("metadata") or {}, b.get("request_counts") or {}
            print(f"{b['id']:32} {md.get('bm_stage', ''):7} {md.get('bm_shard', ''):6} {md.get('bm_round', ''):5} "
                  f"{b.get('status', ''):12} {rc.get('completed', 0):>5}/{rc.get('total', 0):<6} {rc.get('failed', 0)}")
        print(f"{len(rows)} batch(es) of benchmark {cfg['benchmark']['name']}")
        return 0
    open_ = [(c, b) for c, b in rows if b.get("status") not in TERMINAL and b.get("status") != "cancelling"]
    if not open_:
        print("no unfinished batch to cancel")
        return 0
    if not args.yes:
        for _, b in open_:
            print(f"would cancel {b['id']} ({b.get('status')})")
        print("add --yes to cancel them")
        return EXIT_USAGE
    for c, b in open_:
        r = cancel_batch(c, b["id"])
        print(f"cancelled {b['id']}: {r.get('status')}")
    return 0


def cmd_install_profiles(args) -> int:
    from .profiles import ProfileInstallError, install_profiles

    try:
        paths = install_profiles(Path(args.dest) if args.dest else None, copy=args.copy)
    except (ProfileInstallError, FileNotFoundError) as exc:
        print(f"benchmaker: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    for p in paths:
        print(f"installed {p}")
    print("now `snakemake --profile slurm` / `snakemake --profile nrp` resolve from any directory")
    return 0


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the layout of descriptions and shows every option's default (flags: off unless given)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or not action.option_strings or action.default is argparse.SUPPRESS:
            return text
        if isinstance(action, argparse._StoreTrueAction):
            return text + " (default: off)"
        return text + " (default: %(default)s)"


CONFIG_HELP = ("benchmaker config file(s) (YAML); several are merged left to right exactly as "
               "`snakemake --configfile A B` merges them")


def _parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    ap = argparse.ArgumentParser(prog="benchmaker", description=doc.split("\n\n")[0], formatter_class=_Formatter,
                                 epilog=doc.split("\n\n", 1)[1] if "\n\n" in doc else None)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def add(name: str, help: str, fn, description: str | None = None) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=description or help, formatter_class=_Formatter)
        p.set_defaults(fn=fn)
        return p

    p = add("validate-config", "check config files: schema, every named path, API key variables", cmd_validate,
            "Merge the files like `snakemake --configfile A B`, validate them against the schema (unknown or "
            "misspelt keys are named by their path), check that every path they name exists and is readable, "
            "and that the environment variables of the configured API adapters are set. A YAML syntax error "
            "names the file and line. The workflow runs the same path checks before planning.")
    p.add_argument("config", nargs="+", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--no-paths", action="store_true", help="skip the path checks (e.g. checking on another machine)")
    p.add_argument("--no-env", action="store_true", help="skip the API key variable checks")
    p = add("estimate", "requests, tokens and dollars before anything is submitted", cmd_estimate)
    p.add_argument("config", nargs="+", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--json", action="store_true", help="print the estimate as JSON lines instead of a table")
    p.add_argument("--pilot", type=int, nargs="?", const=0, default=None, metavar="N",
                   help="first send a pilot: a stratified sample of at least N (default: estimate.PILOT_MIN, 20; "
                        "and at least estimate.PILOT_SHARE, 2 %%) of "
                        "each paid stage's real requests, cached for the run, and measure them (the judge's once "
                        "every image's annotation is known: run it again after vision). Implies --record")
    p.add_argument("--record", action="store_true",
                   help="write the estimate to <results>/estimate/estimate.json: the summary shows it beside the bill")
    p = add("batches", "list or cancel this benchmark's provider batches (found by their metadata)", cmd_batches)
    p.add_argument("action", choices=["list", "cancel"], help="list: show them; cancel: cancel the unfinished ones")
    p.add_argument("config", nargs="+", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--stage", choices=["vision", "queries", "judge"], default=None,
                   help="only this stage's batches (default: all; the query writer's run on the judge's client)")
    p.add_argument("--yes", action="store_true",
                   help="cancel: really cancel (without it: show what would be cancelled, exit 2)")
    p = add("check-urls", "check that every image_url of images.jsonl answers (image_transport: url)",
            cmd_check_urls)
    p.add_argument("config", nargs="+", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--workers", type=int, default=16, help="parallel requests")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    p.add_argument("--out", default=None, metavar="FILE", help="also write the failures as JSONL to FILE")
    p = add("install-profiles", "make `snakemake --profile slurm|nrp` resolve (links into Snakemake's config dir)",
            cmd_install_profiles)
    p.add_argument("--dest", default=None, help="target folder (default: Snakemake's user config dir)")
    p.add_argument("--copy", action="store_true", help="copy the profiles instead of linking them")
    p = add("import-upstream", "convert an imsearch_benchmaker config.toml (and its outputs) to benchmaker",
            cmd_import_upstream,
            "Write a benchmaker config from an imsearch_benchmaker config.toml (unknown keys listed, secrets "
            "dropped with a warning) and, with --outputs, convert upstream's images.jsonl, annotations.jsonl, "
            "query_plan.jsonl and qrels.jsonl into this project's files and response caches, so that running "
            "the workflow pays nothing for what upstream already paid. See docs/upstream.md.")
    p.add_argument("toml", metavar="CONFIG.toml", help="the upstream config file")
    p.add_argument("--outputs", default=None, metavar="DIR",
                   help="upstream's output folder (images.jsonl, annotations.jsonl, query_plan.jsonl, qrels.jsonl)")
    p.add_argument("--out", default="config/imported.yaml", metavar="FILE", help="the benchmaker config to write")
    p.add_argument("--results", default="results", metavar="DIR",
                   help="paths.results of the new config; converted files go to DIR/<name>/imported")
    p.add_argument("--force", action="store_true", help="overwrite FILE and converted outputs that exist")
    _add_compare(add)
    p = add("keep-evaluation", "keep an evaluation in a history folder (compare later ones with it)",
            cmd_keep_evaluation,
            "Copy RESULTS' evaluation (leaderboard, per-query values, drill-downs) into HISTORY/<tag>/ and "
            "append it to HISTORY/history.jsonl with each system's version; `benchmaker compare HISTORY NEW` "
            "then compares NEW with the latest kept evaluation, `compare HISTORY/<tag> NEW` with a given one.")
    p.add_argument("results", metavar="RESULTS", help="a results folder (or its evaluate/ folder)")
    p.add_argument("history", metavar="HISTORY", help="the history folder (created if missing)")
    p.add_argument("--tag", default=None, help="snapshot name (default: UTC time, plus the version if all agree)")
    _add_mteb(add)
    _add_power(add)
    return ap


def _add_compare(add) -> None:
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
    from .evaluate.scopes import SCOPES

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


def _add_mteb(add) -> None:
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


def _add_power(add) -> None:
    from .settings_schema import default

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
    from .errors import UserError
    from .evaluate.power import check_levels, mdd, pair_alpha, queries_needed, sd_from

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
    from .evaluate.compare import compare, load_evaluation, report_markdown, write_comparison

    res = compare(load_evaluation(args.old), load_evaluation(args.new), test=args.test, correction=args.correction,
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
    from .evaluate.compare import keep

    entry = keep(args.results, args.history, args.tag)
    print(f"kept as {Path(args.history) / entry['tag']} (systems: "
          f"{', '.join(f'{k}={v}' for k, v in entry['systems'].items()) or 'none'})")
    return EXIT_OK


def cmd_mteb(args) -> int:
    import json

    from .errors import UserError

    try:
        from .evaluate.mteb_task import run
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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .config import ConfigError
    from .errors import UserError
    from .providers.openai import MissingKey

    try:
        return int(args.fn(args) or 0)
    except (ConfigError, MissingKey, UserError) as exc:
        print(f"benchmaker: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def cmd_import_upstream(args) -> int:
    from .upstream import import_upstream

    report = import_upstream(args.toml, outputs=args.outputs, out=args.out, results=args.results, force=args.force)
    for line in report.lines():
        print(line)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
