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
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from .evaluate.commands import add_compare, add_keep_evaluation, add_mteb, add_power

__all__ = ["main"]

API_ADAPTERS = ("openai",)


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
    from .providers.backend import TERMINAL
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
    add_compare(add)
    add_keep_evaluation(add)
    add_mteb(add)
    add_power(add)
    return ap


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
