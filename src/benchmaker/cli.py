"""The benchmaker command, for what is not a pipeline target.

    benchmaker validate-config CONFIG          check a config file (errors name the key)
    benchmaker estimate CONFIG [--json]        requests, tokens and dollars before anything is submitted
    benchmaker batches list CONFIG             this benchmark's batches (found by their metadata)
    benchmaker batches cancel CONFIG --yes     cancel this benchmark's unfinished batches
    benchmaker check-urls CONFIG [--out F]     every image_url of images.jsonl answers (image_transport: url)
    benchmaker install-profiles                make `snakemake --profile slurm|nrp` resolve

The pipeline itself runs with Snakemake (see README). Imports are lazy: the command starts fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

__all__ = ["main"]

API_ADAPTERS = ("openai",)


def _load(path: str) -> dict:
    from .config import load_config

    return load_config(path)


def cmd_validate(args) -> int:
    from .config import ConfigError

    try:
        cfg = _load(args.config)
    except ConfigError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 1
    print(f"{args.config}: valid (benchmark {cfg['benchmark']['name']}, vision {cfg['vision']['adapter']}, "
          f"judge {cfg['judge']['adapter']})")
    return 0


def cmd_check_urls(args) -> int:
    from .config import results_dir
    from .formats import read_table
    from .io import write_jsonl
    from .urlcheck import check_urls

    cfg = _load(args.config)
    path = Path(results_dir(cfg)) / "images.jsonl"
    if not path.exists():
        print(f"benchmaker: {path} does not exist yet: run `snakemake {path}` (preprocess) first", file=sys.stderr)
        return 2
    images = read_table("images", path, columns=cfg["columns"])
    results = check_urls(images.select("image_id", "image_url").iter_rows(), workers=args.workers,
                         timeout=args.timeout)
    bad = [r for r in results if not r.ok]
    print(f"{len(results)} image URLs checked: {len(results) - len(bad)} ok, {len(bad)} failed")
    for r in bad[:20]:
        print(f"  {r.image_id}: {r.detail} ({r.url})")
    if len(bad) > 20:
        print(f"  ... {len(bad) - 20} more")
    if args.out:
        write_jsonl(args.out, ({"image_id": r.image_id, "url": r.url, "status": r.status, "detail": r.detail}
                               for r in bad))
        print(f"failures written to {args.out}")
    return 1 if bad else 0


# -- estimate -----------------------------------------------------------------------------------------
def estimate(cfg: dict) -> list[dict]:
    """See :mod:`benchmaker.providers.estimate` (cache, quarantine, duplicates and prompt caching)."""
    from .providers.estimate import estimate as _estimate

    return _estimate(cfg)


def cmd_estimate(args) -> int:
    cfg = _load(args.config)
    lines = estimate(cfg)
    if args.json:
        print(json.dumps(lines, indent=1))
        return 0
    if not lines:
        print("no API adapter configured: nothing to pay (vision "
              f"{cfg['vision']['adapter']}, judge {cfg['judge']['adapter']})")
        return 0
    print(f"{'stage':8} {'model':18} {'mode':6} {'to send':>9} {'cached':>7} {'same':>6} {'input tok':>12} "
          f"{'(cached)':>11} {'output tok':>11} {'USD':>10}")
    for ln in lines:
        print(f"{ln['stage']:8} {ln['model'][:18]:18} {ln['mode']:6} {ln['requests']:>9,} {ln['cached']:>7,} "
              f"{ln['duplicates']:>6,} {ln['input_tokens']:>12,} {ln['cached_input_tokens']:>11,} "
              f"{ln['output_tokens']:>11,} {ln['usd']:>10.4f}"
              + ("" if ln["price_known"] else "  (no price for this model: set prices)"))
    print(f"{'total':8} {'':18} {'':6} {sum(x['requests'] for x in lines):>9,} {'':>7} {'':>6} "
          f"{sum(x['input_tokens'] for x in lines):>12,} {sum(x['cached_input_tokens'] for x in lines):>11,} "
          f"{sum(x['output_tokens'] for x in lines):>11,} {sum(x['usd'] for x in lines):>10.4f}")
    for ln in lines:
        extra = f"; {ln['quarantined']} file(s) quarantined by preprocessing, not counted" if "quarantined" in ln else ""
        print(f"{ln['stage']}: from {ln['source']}{extra}")
    print("'cached': answered by the response cache (free); 'same': identical content, sent once. Tokens: ~4 "
          "characters per text token, OpenAI's image tile rule, an allowance for reasoning tokens, the stable "
          "prompt prefix at the cached rate; actual costs are written to costs/*.jsonl.")
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
    if not seen:
        raise SystemExit("no OpenAI adapter configured in vision or judge: no batches to list")
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
        return 1
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
        return 2
    for p in paths:
        print(f"installed {p}")
    print("now `snakemake --profile slurm` / `snakemake --profile nrp` resolve from any directory")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="benchmaker", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("validate-config", help="check a config file")
    p.add_argument("config")
    p.set_defaults(fn=cmd_validate)
    p = sub.add_parser("estimate", help="requests, tokens and dollars before anything is submitted")
    p.add_argument("config")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_estimate)
    p = sub.add_parser("batches", help="list or cancel this benchmark's batches")
    p.add_argument("action", choices=["list", "cancel"])
    p.add_argument("config")
    p.add_argument("--stage", choices=["vision", "judge"], default=None)
    p.add_argument("--yes", action="store_true", help="cancel: really cancel")
    p.set_defaults(fn=cmd_batches)
    p = sub.add_parser("check-urls", help="check that every image_url of images.jsonl answers (image_transport: url)")
    p.add_argument("config")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--out", default=None, help="write the failures as JSONL")
    p.set_defaults(fn=cmd_check_urls)
    p = sub.add_parser("install-profiles",
                       help="make `snakemake --profile slurm|nrp` resolve (links into Snakemake's config dir)")
    p.add_argument("--dest", default=None, help="target folder (default: Snakemake's user config dir)")
    p.add_argument("--copy", action="store_true", help="copy instead of linking")
    p.set_defaults(fn=cmd_install_profiles)
    args = ap.parse_args(argv)
    from .config import ConfigError
    from .providers.openai import MissingKey

    try:
        return int(args.fn(args) or 0)
    except (ConfigError, MissingKey) as exc:
        print(f"benchmaker: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
