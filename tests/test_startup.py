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


def _run(code: str, pythonpath: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]
    return r.stdout


def test_a_clip_vision_job_imports_neither_torch_dynamo_nor_the_request_engine(tmp_path, tiny_corpus, tiny_clip):
    """A model job (here the clip annotator's, which also writes an empty cost file) imports neither
    torch._dynamo (~1.2 s of CPU: torchvision's roi_align imports it for a name it calls only when
    run) nor the LLM request engine (benchmaker.providers.engine and its tables); roi_align's
    stand-in answers as the real function and then is it, and dynamo works as usual afterwards."""
    import hashlib

    import polars as pl
    import support

    from benchmaker.formats import write_table

    files = sorted(p for p in (tiny_corpus / "red").iterdir() if p.is_file())[:3]
    rows = [{"image_id": f"red/{p.name}", "image_url": None, "mime_type": "image/png", "width": 1, "height": 1,
             "file_size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "phash": None,
             "license": "CC0-1.0", "doi": None, "original_dataset_name": "tiny"} for p in files]
    write_table(pl.DataFrame(rows), "images", tmp_path / "shard.jsonl")
    settings = {"model": f"local-dir:{tiny_clip}", "pretrained": None, "device": "cpu", "batch_size": 8,
                "prompt_template": "a photo of {}.", "tag_threshold": 0.0, "num_workers": 0}
    code = f"""
import builtins, sys
hook, finders = builtins.__import__, list(sys.meta_path)
from benchmaker.vision import run
run(images={str(tmp_path / "shard.jsonl")!r}, annotations={str(tmp_path / "a.jsonl")!r},
    losses={str(tmp_path / "l.jsonl")!r}, costs={str(tmp_path / "c.jsonl")!r}, adapter="clip",
    settings={settings!r}, facets={support.TINY_FACETS!r}, image_root={str(tiny_corpus)!r}, columns={{}})
assert "open_clip" in sys.modules and "torchvision" in sys.modules
assert not [m for m in sys.modules if m.startswith("torch._dynamo")], "torch._dynamo imported"
assert "benchmaker.providers.engine" not in sys.modules, "the request engine imported"
assert open({str(tmp_path / "c.jsonl")!r}).read() == ""
assert builtins.__import__ is hook and sys.meta_path == finders
ra = sys.modules["torchvision.ops.roi_align"]
assert type(ra.__loader__).__name__ == "SourceFileLoader" and ra.__spec__.loader is ra.__loader__
stand_in = ra.is_compile_supported
got = [stand_in(d) for d in ("cpu", "cuda", "mps")]
from torch._dynamo.utils import is_compile_supported as real
assert got == [real(d) for d in ("cpu", "cuda", "mps")], got
assert ra.is_compile_supported is real and stand_in("cpu") == real("cpu")
import torch, torch._dynamo
assert torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2)).tolist() == [2.0, 2.0]
print("ok")
"""
    _run(code, str(ROOT / "src"))


_FAKE = {  # a torch and a torchvision of a few lines each: the deferral's cases without the real ones
    "torch/__init__.py": "",
    "torch/_dynamo/__init__.py": "from . import utils\n",
    "torch/_dynamo/utils.py": "def is_compile_supported(device_type):\n    return device_type == 'cpu'\n"
                              "other = 1\n",
    "torchvision/__init__.py": "from . import ops\n",
    "torchvision/ops/__init__.py": "from .roi_align import roi_align\n",
}
_ROI = "{line}\n\ndef roi_align(device_type):\n    return is_compile_supported(device_type)\n"


def test_the_dynamo_deferral_binds_only_that_name_and_steps_aside_otherwise(tmp_path):
    """The deferral (benchmaker._tvshim.dynamo_deferred) on stand-in packages: the upstream line gets
    the forwarder; a roi_align without that line (a later torchvision), a line importing more names,
    a torch._dynamo or a torchvision imported before: each runs as written."""
    for rel, text in _FAKE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    code = f"""
import builtins, importlib, sys
sys.dont_write_bytecode = True
from pathlib import Path
from benchmaker._tvshim import dynamo_deferred
hook, finders = builtins.__import__, list(sys.meta_path)
roi = Path({str(tmp_path / "torchvision/ops/roi_align.py")!r})

def case(line, before=()):
    for m in [m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision")]:
        del sys.modules[m]
    roi.write_text({_ROI!r}.format(line=line))
    importlib.invalidate_caches()
    for m in before:
        importlib.import_module(m)
    with dynamo_deferred():
        import torchvision
    assert builtins.__import__ is hook and sys.meta_path == finders
    ra = sys.modules["torchvision.ops.roi_align"]
    return "torch._dynamo" in sys.modules, ra

upstream = "from torch._dynamo.utils import is_compile_supported"
dynamo, ra = case(upstream)
assert not dynamo and ra.is_compile_supported.__module__ == "benchmaker._tvshim"
assert type(ra.__spec__.loader).__name__ == "SourceFileLoader"
assert ra.roi_align("cpu") is True and "torch._dynamo" in sys.modules
assert ra.is_compile_supported is sys.modules["torch._dynamo.utils"].is_compile_supported
assert ra.roi_align("cuda") is False
dynamo, ra = case("def is_compile_supported(device_type):\\n    return True")
assert not dynamo and ra.roi_align("mps") is True
dynamo, ra = case("from torch._dynamo.utils import is_compile_supported, other")
assert dynamo and ra.is_compile_supported.__module__ == "torch._dynamo.utils"
for before in (["torch._dynamo"], ["torchvision"]):
    dynamo, ra = case(upstream, before)
    assert dynamo and ra.is_compile_supported.__module__ == "torch._dynamo.utils", before
print("ok")
"""
    _run(code, f"{tmp_path}:{ROOT / 'src'}")
