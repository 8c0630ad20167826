"""The ``evaluate`` target: score retrieval systems on the benchmark (docs/evaluate.md).

``systems`` builds one system's TREC run (rules ``evaluate_model`` / ``evaluate_system``), ``stage``
scores every run and writes the leaderboard, drill-downs and significance tests (rule ``evaluate``)
with the ranx metrics of ``metrics``; ``runs`` reads and writes TREC run files. Importing this
package never imports torch.
"""

__all__ = ["data", "metrics", "runs", "stage", "systems"]
