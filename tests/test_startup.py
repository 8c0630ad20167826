"""A job's fixed cost before its work (issue 23): what the stages import, and the start-up line.

``benchmarks/startup.py`` measures the seconds; these tests keep the heavy imports where they
belong: torch/open_clip only in the stages that load a model (and there only when they load it),
altair only in the stages that draw charts, and only when they draw.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from benchmaker.versions import STAGE_ENTRIES

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from startup import NO_MODEL  # noqa: E402

DRAWS = {"summary", "evaluate"}  # stages whose work includes charts (altair, imported when drawing)


def _imported(modules: list[str], probe: tuple[str, ...]) -> list[str]:
    code = ("import json, sys\n" + "".join(f"import {m}\n" for m in modules)
            + f"print(json.dumps(sorted(m for m in {probe!r} if m in sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_stage_is_classified():
    assert set(NO_MODEL) <= set(STAGE_ENTRIES)
    assert set(STAGE_ENTRIES) - set(NO_MODEL) == {"vision", "embed", "evaluate_system"}


def test_stages_import_no_torch_and_only_drawing_stages_may_import_altair():
    every = ["benchmaker.runner"] + [m for s in STAGE_ENTRIES for m in STAGE_ENTRIES[s]]
    assert _imported(every, ("torch", "open_clip", "torchvision", "transformers")) == []
    quiet = ["benchmaker.runner"] + [m for s in STAGE_ENTRIES if s not in DRAWS for m in STAGE_ENTRIES[s]]
    assert _imported(quiet, ("altair",)) == []


def test_the_runner_logs_the_start_up_of_a_job(tmp_path):
    from benchmaker.runner import CPU_LINE, STARTUP_LINE, process_age, run_stage

    age = process_age()
    assert age is None or 0 < age < 3600
    log = tmp_path / "x.log"
    names = SimpleNamespace(_names={}, __len__=lambda: 0)
    smk = SimpleNamespace(rule="plan", input=names, output=names, params=names, log=[str(log)], threads=1,
                          wildcards={})

    def stage(*, threads: int = 1) -> int:
        return threads

    assert run_stage(smk, stage) == 1
    assert re.search(rf"{CPU_LINE} \d+\.\d\d s \(this process", log.read_text())
    if age is not None:
        assert re.search(rf"{STARTUP_LINE} \d+\.\d\d s \(process start", log.read_text())
