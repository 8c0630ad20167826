"""The one bridge from a rule's ``script:`` to its stage, imported by every script in this folder.

Snakemake puts the folder of a local script on ``sys.path``, so a script needs only
``from benchmaker_bridge import run_stage`` and one ``run_stage(snakemake, "benchmaker.x:run")``; most
rules share ``stage.py``, which runs the function ``benchmaker.stages`` declares for the rule
(``rule_target``).
Importing this module puts the checkout's ``src/`` first on ``sys.path``: the workflow always runs the
library version it ships with, even where another benchmaker is installed (shared file systems, the
source archives of Kubernetes jobs). ``run_stage`` is benchmaker.runner's (named inputs, outputs and
params become keyword arguments, checked against the stage function); ``staged_model`` maps a CLIP
spec to the weights a job was given (benchmaker.staging).
"""

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent.parent / "src")
if _SRC not in sys.path[:1]:
    sys.path.insert(0, _SRC)

from benchmaker.runner import run_stage  # noqa: E402
from benchmaker.stages import rule_target  # noqa: E402
from benchmaker.staging import staged_model  # noqa: E402

__all__ = ["rule_target", "run_stage", "staged_model"]
