"""Pages: what every stage that publishes a report writes it with.

``report`` (report.md and report.html from :class:`~benchmaker.pages.report.Section` s and Markdown
tables), ``charts`` (a chart to PNG in the house style) and ``outdir`` (a folder output written whole).
The summary, evaluate, audit, deepen and export stages use them; this package imports no stage, so
the stages stay in one order (``tests/test_imports.py``). This file imports nothing, so a stage that
uses one module depends on that module's code only (``benchmaker.versions``).
"""
