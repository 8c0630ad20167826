"""Pool deepening (docs/deepen.md): after ``evaluate``, the benchmark's own judge labels the images in
each evaluated system's top ``k`` that no judge has labelled yet; every run is scored again on the
deepened qrels, and leave-one-system-out measures how reusable the deepened collection is.

``pairs`` decides which (query, image) pairs each system brings in (holes, owner, budgets);
``label`` judges one system's pairs with the configured judge (rule ``deepen_system``); ``merge``
joins the labels with their provenance, evaluates every run on the deepened qrels and writes the
report (rule ``deepen``); ``reusability`` is leave-one-system-out with Kendall's tau; ``report`` puts
the result in the summary report and the dataset card. Nothing here imports torch.
"""

__all__ = ["label", "merge", "pairs", "report", "reusability"]
