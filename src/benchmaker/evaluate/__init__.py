"""The ``evaluate`` target: score retrieval systems on the benchmark (docs/evaluate.md).

``systems`` builds one system's TREC run (rules ``evaluate_model`` / ``evaluate_system``), ``metrics``
scores every run with ranx and writes the leaderboard, drill-downs and significance tests (rule
``evaluate``); ``runs`` reads and writes TREC run files. Importing this package never imports torch.
"""

__all__ = ["data", "metrics", "runs", "systems"]
