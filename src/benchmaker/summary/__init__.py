"""Summary stage: statistics (CSV), charts (PNG), a contact sheet, report.md/.html and summary.json.

The stage itself is :func:`benchmaker.summary.stage.run`; ``inputs`` and ``stats`` are also used by
the export stage. The page, chart and output-folder helpers the summary shares with the evaluate,
audit and deepen stages live below every stage, in :mod:`benchmaker.pages`. This file imports
nothing, so a stage that imports one module here does not depend on the summary stage's code (its
version, ``benchmaker.versions``, covers only what it imports).
"""
