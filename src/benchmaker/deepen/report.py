"""Pool deepening in the summary report and the dataset card (docs/deepen.md): per system judged@k
before and after, pairs added and their relevant share, the main metric before and after, the cost;
leave-one-system-out with Kendall's tau and the number of systems it rests on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl

__all__ = ["RESULT_FILES", "load", "system_table", "loo_table", "summary_sections", "card_markdown", "copy_results",
           "run_facts"]

RESULT_FILES = ("report.json", "report.csv", "leave_one_out.csv", "qrels.jsonl", "evaluate/leaderboard.csv")
# read beside report.json but not copied: the deepened evaluation's timings, for run_facts.json (:func:`run_facts`)
RUN_FACT_FILES = ("evaluate/leaderboard.json",)
NOTE = ("Pool deepening: the benchmark's own judge (same prompts, cache and ledger) labelled the images in each "
        "evaluated system's top k that no judge had labelled, and every run was scored again on the deepened qrels "
        "(docs/deepen.md). A system that finds relevant images outside the planner's pools gains.")
LOO_NOTE = ("Leave-one-system-out (Zobel 1998): the pairs only that system brought in are removed and it is scored "
            "again; Kendall's tau compares the ranking of all systems with and without them (tau >= 0.9 is the "
            "usual bar for a reusable collection; with few systems tau is coarse).")


def load(report_json: str | Path) -> dict:
    p = Path(report_json)
    return json.loads(p.read_text()) if p.is_file() and p.stat().st_size else {}


def system_table(rep: dict) -> pl.DataFrame:
    rows = rep.get("per_system") or []
    k = rep.get("k")
    m = rep.get("metric", "metric")
    out = [{"system": r["system"], f"judged@{k} before": r["judged_before"], f"judged@{k} after": r["judged_after"],
            "pairs added": r["pairs_added"], "relevant share": r["relevant_share"],
            f"{m} before": r["score_before"], f"{m} after": r["score_after"], f"{m} change": r["score_change"],
            "cost USD": r["cost_usd"]} for r in rows]
    return pl.DataFrame(out) if out else pl.DataFrame({"system": []})


def loo_table(rep: dict) -> pl.DataFrame:
    loo = rep.get("leave_one_out") or {}
    rows = loo.get("per_system") or []
    out = [{"system left out": r["system"], "pairs only it brought": r["pairs_only_it_contributed"],
            "score": r["score_full"], "score left out": r["score_left_out"], "change": r["score_change"],
            "rank": r["rank_full"], "rank left out": r["rank_left_out"], "Kendall tau": r["kendall_tau"]}
           for r in rows]
    return pl.DataFrame(out) if out else pl.DataFrame({"system left out": []})


def _headline(rep: dict) -> str:
    loo = rep.get("leave_one_out") or {}
    n = loo.get("systems_ranked", 0)
    tau = loo.get("min_kendall_tau")
    share = rep.get("relevant_share")
    verdict = ("" if tau is None else
               f" Lowest Kendall tau {tau:.3f} over {n} systems: "
               + ("meets" if tau >= loo.get("tau_bar", 0.9) else "below") + " the 0.9 bar.")
    skipped = rep.get("duplicate_members_skipped") or 0
    dups = ("" if not skipped else
            f" {skipped} image(s) in a top k were not judged: another member of their duplicate group is judged "
            f"for that query (a group counts once), so judged@k after deepening can stay below 1.")
    return (f"Depth k = {rep.get('k')}, {len(rep.get('systems') or [])} systems deepened: "
            f"{rep.get('pairs_added', 0)} pairs added, "
            f"{'' if share is None else f'{share:.1%} of them relevant, '}cost {rep.get('cost_usd', 0):.4f} USD "
            f"(metric {rep.get('metric')}, corpus scope).{dups}{verdict}")


def summary_sections(report_json: str | Path, out_dir: Path) -> list:
    """The report's sections "Pool deepening" and "Reusability"; copies the result files to
    ``out_dir/deepen``."""
    from ..pages.report import Section

    rep = load(report_json)
    copy_results(report_json, out_dir / "deepen")
    return [Section("Pool deepening", text=NOTE + " " + _headline(rep), table=system_table(rep),
                    files=[f"deepen/{f}" for f in RESULT_FILES], max_rows=60,
                    empty="No system was deepened."),
            Section("Reusability: leave-one-system-out", text=LOO_NOTE
                    + f" Systems ranked: {(rep.get('leave_one_out') or {}).get('systems_ranked', 0)}.",
                    table=loo_table(rep), files=["deepen/leave_one_out.csv"], max_rows=60,
                    empty="Fewer than one deepened system with evaluated queries: nothing to leave out.")]


def card_markdown(report_json: str | Path) -> str:
    from ..pages.report import md_table

    rep = load(report_json)
    if not rep:
        return ""
    loo = rep.get("leave_one_out") or {}
    return ("\n## Pool deepening\n\n" + NOTE + " " + _headline(rep) + "\n\n" + md_table(system_table(rep), 60)
            + "\n### Reusability (leave-one-system-out)\n\n" + LOO_NOTE
            + f" Systems ranked: {loo.get('systems_ranked', 0)}.\n\n" + md_table(loo_table(rep), 60)
            + "\nThe deepened qrels are `deepen/qrels.jsonl`: every judged pair, with `deepened` = true for the pairs "
              "deepening added (pool `deepen`; `deepen_system` and `deepen_depth` say which system's run brought "
              "each in and at which rank; `deepen_systems` lists every system whose top k held it). Filter "
              "`deepened == false` for the planner's pools only. The flat table (`data/`) and the mteb/BEIR/TREC "
              "views hold the planner's pools only. Files: `deepen/report.csv`, `deepen/leave_one_out.csv`, "
              "`deepen/evaluate/leaderboard.csv`.\n")


def copy_results(report_json: str | Path, dest: Path) -> list[str]:
    """The deepening files beside ``report_json`` into ``dest`` (the summary's or dataset's deepen/); the
    deepened leaderboard without its run facts (timings, as the main leaderboard's copies: they are in
    the dataset's run_facts.json, :func:`run_facts`), so the copies are the same bytes on every build.
    The deepen rule writes them all: a missing one is an error naming it, never a copy with less (a job
    that reads them must declare them: rules/deepen_common.smk ``deepen_report_inputs``)."""
    from ..evaluate.report import RUN_FACT_COLUMNS

    src = _beside(report_json, RESULT_FILES)
    out = []
    for f in RESULT_FILES:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        if f == "evaluate/leaderboard.csv" and (src / f).stat().st_size:
            board = pl.read_csv(src / f)
            board.drop([c for c in RUN_FACT_COLUMNS if c in board.columns]).write_csv(dest / f)
        else:
            shutil.copyfile(src / f, dest / f)
        out.append(f)
    return out


def run_facts(report_json: str | Path) -> dict:
    """The timings of the evaluation on the deepened qrels (what :func:`copy_results` leaves out), per
    system, as :func:`benchmaker.evaluate.report.run_facts` gives them for the main leaderboard."""
    from ..evaluate.report import run_facts as evaluate_facts

    return evaluate_facts(_beside(report_json, RUN_FACT_FILES) / "evaluate" / "leaderboard.csv")


def _beside(report_json: str | Path, names) -> Path:
    """The folder of ``report_json``, once every one of ``names`` is in it: the deepen rule writes them
    all, so a missing one is an error naming it (a job that reads it must declare it), never less."""
    from ..errors import UserError

    src = Path(report_json).parent
    missing = [f for f in names if not (src / f).is_file()]
    if missing:
        raise UserError(f"{src}: {', '.join(missing)} missing beside {Path(report_json).name}: the deepen rule "
                        "writes them; a job that reads them must declare them as inputs (rules/deepen_common.smk "
                        "deepen_report_inputs), or rerun the deepen target")
    return src
