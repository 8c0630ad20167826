"""The leaderboard's scopes: their names, in leaderboard order, and what each ranks and who else computes it.

The one place a scope is described in words: the evaluate stage (:mod:`.stage`) scores them, the report's
leaderboard section and the dataset card (:mod:`.report`) quote :func:`scopes_note`, docs/evaluate.md
("Metrics and scopes") has the long form.
"""

from __future__ import annotations

__all__ = ["SCOPES", "SCOPE_NOTES", "scopes_note"]

SCOPES = ("pool", "corpus", "condensed", "exported")

SCOPE_NOTES = {
    "pool": "each query's judged pool only (the images the judge labelled for it; the Sage evaluator ranks "
            "judged images too, scored its own way in the sage view)",
    "corpus": "the whole benchmark corpus, top depth; unjudged images count as not relevant (judged@k says how "
              "much of the top k was judged)",
    "condensed": "the corpus ranking with the unjudged images removed first",
    "exported": "the exported images only (every judged pool's images, each once) for every exported query, "
                "unjudged = not relevant: the number mteb (`benchmaker mteb`), BEIR and trec_eval compute on the "
                "published dataset's mteb/, beir/ and trec/ files (clip and bm25 systems)",
}


def scopes_note() -> str:
    """One sentence per scope, for the report and the card."""
    return "Scopes: " + "; ".join(f"{s}: {SCOPE_NOTES[s]}" for s in SCOPES) + "."
