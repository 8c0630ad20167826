"""Summary stage: statistics (CSV), charts (PNG), a contact sheet, report.md/.html and summary.json.

The stage itself is :func:`benchmaker.summary.stage.run`; the other modules (``report``, ``outdir``,
``inputs``, ...) are also used by the evaluate, audit and deepen stages. This file imports nothing,
so a stage that imports one of them does not depend on the summary stage's code (its version,
``benchmaker.versions``, covers only what it imports).
"""
