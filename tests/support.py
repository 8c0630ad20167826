"""Test support: tiny image corpora, tiny random open_clip checkpoints, configs. Imported by tests."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

from benchmaker.tinyclip import TINY_CLIP_CFG  # noqa: E402,F401

COLORS = {
    "red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "yellow": (235, 210, 40),
    "gray": (128, 128, 128),
}
SHAPES = ("circle", "square", "stripes")


def make_tiny_clip(dest: Path, seed: int = 0) -> Path:
    """A random tiny open_clip model as a ``local-dir:`` folder (see benchmaker.tinyclip)."""
    from benchmaker.tinyclip import make_tiny_clip as _make

    return _make(dest, seed=seed)


def draw_image(color: tuple[int, int, int], shape: str, size: int, seed: int):
    from PIL import Image, ImageDraw

    rnd = random.Random(seed)
    bg = tuple(rnd.randint(200, 255) for _ in range(3))
    img = Image.new("RGB", (size, int(size * rnd.uniform(0.7, 1.3))), bg)
    d = ImageDraw.Draw(img)
    w, h = img.size
    if shape == "circle":
        r = rnd.randint(size // 5, size // 3)
        cx, cy = rnd.randint(r, w - r), rnd.randint(r, h - r)
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=color)
    elif shape == "square":
        s = rnd.randint(size // 4, size // 2)
        x, y = rnd.randint(0, w - s), rnd.randint(0, h - s)
        d.rectangle([x, y, x + s, y + s], fill=color)
    else:
        step = rnd.randint(8, 16)
        for x in range(0, w, step * 2):
            d.rectangle([x, 0, x + step, h], fill=color)
    for _ in range(30):  # texture so that hashes differ
        x, y = rnd.randrange(w), rnd.randrange(h)
        d.point((x, y), fill=tuple(rnd.randrange(256) for _ in range(3)))
    return img


def make_corpus(root: Path, n_per: int = 2, with_bad: bool = True) -> Path:
    """A tiny corpus: <color>/<shape>_<i>.(jpg|png) plus, optionally, bad files under broken/."""
    root.mkdir(parents=True, exist_ok=True)
    k = 0
    for color, rgb in COLORS.items():
        for shape in SHAPES:
            for i in range(n_per):
                img = draw_image(rgb, shape, 96 + 16 * (k % 5), seed=k)
                ext = "jpg" if k % 2 == 0 else "png"
                p = root / color / f"{shape}_{i}.{ext}"
                p.parent.mkdir(parents=True, exist_ok=True)
                img.save(p, quality=90) if ext == "jpg" else img.save(p)
                k += 1
    if with_bad:
        bad = root / "broken"
        bad.mkdir(exist_ok=True)
        good = next(root.glob("red/*.jpg")).read_bytes()
        (bad / "truncated.jpg").write_bytes(good[: len(good) // 2])
        (bad / "not_an_image.jpg").write_text("this is text, not a JPEG\n")
        (bad / "empty.png").write_bytes(b"")
    return root


def add_duplicates(root: Path, folder: str = "dups") -> dict[str, str]:
    """Real duplicates in ``root/folder``: a photo of the example corpus (skimage's chelsea, CC0), a
    byte-identical copy and a resized, re-encoded copy (a near-duplicate). Returns role -> image_id."""
    from PIL import Image

    src = ROOT / "example" / "images" / "skimage" / "chelsea_cat.jpg"
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    ids = {"original": f"{folder}/chelsea.jpg", "copy": f"{folder}/dup_of_chelsea.jpg",
           "resized": f"{folder}/near_dup_chelsea_resized.jpg"}
    shutil.copyfile(src, root / ids["original"])
    shutil.copyfile(src, root / ids["copy"])
    with Image.open(src) as im:
        im.convert("RGB").resize((im.width // 2, im.height // 2)).save(root / ids["resized"], quality=70)
    return ids


def rights_map(path: Path) -> Path:
    path.write_text(json.dumps({
        "default": {"license": "CC0-1.0", "doi": None, "dataset_name": None},
        "prefixes": [{"prefix": "red/", "license": "CC-BY-4.0", "doi": "10.0000/red", "dataset_name": "reds"}],
        "files": {"blue/circle_0.jpg": {"license": "CC-BY-SA-4.0"}},
    }, indent=2))
    return path


TINY_FACETS = {
    "taxonomy": {
        "color": ["red", "green", "blue", "yellow", "gray", "unknown"],
        "shape": ["circle", "square", "stripes", "unknown"],
    },
    "boolean": ["is_bright"],
    "tags": {
        "min": 2,
        "max": 4,
        "vocabulary": ["red", "green", "blue", "yellow", "gray", "circle", "square", "stripes",
                       "round", "angular", "pattern", "bright", "dark", "texture"],
    },
}


def tiny_config(tmp: Path, corpus: Path, clip_dir: Path, **overrides) -> dict:
    """A complete config for the tiny corpus and tiny CLIP (no network)."""
    from benchmaker.config import deep_merge

    cfg = {
        "benchmark": {"name": "tiny", "description": "tiny test benchmark", "authors": [{"name": "tests"}]},
        "paths": {"image_root": str(corpus), "results": str(tmp / "results"),
                  "rights_map": str(rights_map(tmp / "rights_map.json"))},
        "facets": TINY_FACETS,
        "n_shards": 2,
        "vision": {"adapter": "clip", "clip": {"model": f"local-dir:{clip_dir}", "pretrained": None,
                                               "batch_size": 8}},
        "plan": {"num_seeds": 4, "core_facets": ["color"], "off_facets": ["color", "shape"],
                 "diversity_facets": [], "pos_total": 1, "neutral_total": 1, "neg_total": 3,
                 "neg_hard": 1, "neg_nearmiss": 1, "neg_easy": 1, "max_image_reuse": 5},
        "judge": {"adapter": "rules"},
        "similarity": {"model": f"local-dir:{clip_dir}", "pretrained": None, "batch_size": 8,
                       "num_workers": 0, "device": "cpu"},
        "summary": {"sample_grid": 6, "scale_factor": 1.0},
        "export": {"rows_per_file": 20},
    }
    return deep_merge(cfg, overrides)


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


_NO_SLURM_BIN: Path | None = None
NO_SLURM_PREFIX = "noslurm-"


def _no_slurm_bin() -> Path:
    """A PATH entry whose `scontrol` fails at once.

    The SLURM executor plugin runs `scontrol show config` whenever Snakemake builds its argument
    parser; on a machine with SLURM's client installed but no controller running (after
    tests/test_slurm.py stopped its cluster) that retries for 10 s per call. Local test runs never
    need SLURM, so they get this stand-in.
    """
    global _NO_SLURM_BIN
    if _NO_SLURM_BIN is None:
        import tempfile

        d = Path(tempfile.mkdtemp(prefix=NO_SLURM_PREFIX))
        (d / "scontrol").write_text("#!/bin/sh\necho 'no SLURM controller in local tests' >&2\nexit 1\n")
        (d / "scontrol").chmod(0o755)
        _NO_SLURM_BIN = d
    return _NO_SLURM_BIN


def no_slurm_path(path: str | None = None) -> str:
    """PATH with the failing `scontrol` stand-in first (see _no_slurm_bin); tests/conftest.py sets it
    for the whole test session."""
    path = os.environ.get("PATH", "") if path is None else path
    return os.pathsep.join([str(_no_slurm_bin()), *real_path(path).split(os.pathsep)])


def real_path(path: str | None = None) -> str:
    """PATH without any `scontrol` stand-in (this process's, or the one an xdist worker inherited from
    the controller's conftest): for the tests that talk to a real SLURM (tests/test_slurm.py)."""
    path = os.environ.get("PATH", "") if path is None else path
    return os.pathsep.join(p for p in path.split(os.pathsep) if not _is_stand_in(p))


def _is_stand_in(entry: str) -> bool:
    d = Path(entry)
    return d.name.startswith(NO_SLURM_PREFIX) and (d / "scontrol").is_file()


def snakemake(args: list[str], workdir: Path, config: Path, env: dict | None = None,
              timeout: int = 900) -> subprocess.CompletedProcess:
    """Run the real workflow in a subprocess on a config file."""
    e = dict(os.environ)
    e.setdefault("HF_HUB_OFFLINE", "1")
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    e["PATH"] = no_slurm_path(e.get("PATH", ""))  # one stand-in entry, whatever PATH held
    if env:
        e.update(env)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(workdir),
           "--configfile", str(config), "--workflow-profile", "none", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def serve(handler) -> ThreadingHTTPServer:
    """Start a stdlib HTTP server for ``handler`` on 127.0.0.1 (ephemeral port) in a daemon thread."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def shutdown(srv) -> None:
    if srv is not None:
        srv.shutdown()
        srv.server_close()


def job_stats(output: str) -> dict[str, int]:
    """Parse Snakemake's 'Job stats' table into {rule: count}."""
    stats: dict[str, int] = {}
    lines = output.splitlines()
    try:
        start = max(i for i, line in enumerate(lines) if line.strip() == "Job stats:")
    except ValueError:
        return stats
    for line in lines[start + 1:]:
        m = re.match(r"^(\S+)\s+(\d+)\s*$", line.strip())
        if m:
            if m.group(1) == "total":
                break
            stats[m.group(1)] = int(m.group(2))
        elif stats and not line.strip():
            break
    return stats


# -- what a model writes, for the token-counting fakes (tests/fake_openai.py, tests/fake_gemini.py) ------
_WORDS = ("smoke rising above the forested ridge under a hazy sky with distant mountains and scattered trees "
          "near a road in daylight seen from a fixed camera looking across the valley toward low clouds").split()


def typical_answer(schema: dict, seed: str, keys: list[str] | None = None, *, wordiness: float = 1.0) -> object:
    """A valid answer of the length a model typically writes, varying per request (``seed``): a string
    whose description says "at most N words" has 60-100 % of N words, other strings 6-14 words (both
    times ``wordiness``, a model's own habit: :class:`LengthModel`); an array of enum values holds
    between minItems and maxItems distinct values; numbers are two-decimal confidences (an integer of
    maximum 100: a percentage of two digits); a judge's ``judgments`` list holds one entry per candidate
    key (``keys``), an object one per key of its schema."""
    rnd = random.Random(seed)

    def words(n: int) -> str:
        n = max(1, round(n * wordiness))
        return " ".join(rnd.choice(_WORDS) for _ in range(n)).capitalize() + "."

    def one(s: dict, name: str) -> object:
        t = str(s.get("type", "")).lower()
        if "enum" in s:
            return rnd.choice(s["enum"])
        if t == "object":
            return {k: one(v, k) for k, v in (s.get("properties") or {}).items()}
        if t == "array":
            lo = int(s.get("minItems", s.get("min_items", 1)))
            hi = int(s.get("maxItems", s.get("max_items", lo + 4)))
            n = rnd.randint(lo, max(lo, hi))
            items = s.get("items") or {"type": "string"}
            if "enum" in items:
                return rnd.sample(list(items["enum"]), min(n, len(items["enum"])))
            return [one(items, name) for _ in range(n)]
        if t == "boolean":
            return rnd.random() < 0.5
        if t == "integer":       # a percentage (0..100) is a two-digit confidence; else the maximum
            hi = int(s.get("maximum", 1))
            return rnd.randint(hi // 2, hi - 1) if hi >= 10 else hi
        if t == "number":
            return round(rnd.uniform(0.5, 1.0), 2)
        m = re.search(r"at most (\d+) words", str(s.get("description", "")))
        return words(rnd.randint(max(1, int(m.group(1)) * 6 // 10), int(m.group(1))) if m else rnd.randint(6, 14))

    obj = one(schema, "")
    j = (schema.get("properties") or {}).get("judgments")
    if isinstance(obj, dict) and j is not None and keys is not None and str(j.get("type", "")).lower() == "array":
        obj["judgments"] = [{**one(j["items"], "judgments"), "key": k} for k in keys]
    return obj


class LengthModel:
    """How long a fake model answers and how much it reasons, drawn from seeded distributions that
    nothing in ``benchmaker`` knows (never derived from its allowances): per ``reasoning_effort`` a
    mean number of reasoning tokens per request (``means``; the ones not given drawn log-uniformly
    between 20 and 6,000 from ``seed``), growing by ``per_key`` of it per candidate of a judge request,
    varying per request log-normally with ``spread`` (sigma); the free-text answers' length times
    ``wordiness``. :meth:`drawn` draws all of it from a seed: different means and spreads per run
    (sigma 0.05..0.5: a coefficient of variation up to 0.53 per request).
    The fakes use it when set (``fake.lengths``) in their token-counting mode."""

    def __init__(self, seed: int, *, means: dict | None = None, spread: float = 0.3, per_key: float = 0.0,
                 wordiness: float = 1.0):
        self.seed, self.spread, self.per_key = int(seed), float(spread), float(per_key)
        self.wordiness = float(wordiness)
        self.means = dict(means or {})

    @classmethod
    def drawn(cls, seed: int, *, lo: float = 20.0, hi: float = 6000.0) -> "LengthModel":
        r = random.Random(f"lengths-{seed}")
        return cls(seed, spread=r.uniform(0.05, 0.5), per_key=r.choice([0.0, r.uniform(0.0, 0.1)]),
                   wordiness=r.uniform(0.5, 1.6), means={e: lo * (hi / lo) ** r.random()
                                                         for e in ("minimal", "low", "medium", "high", None)})

    @classmethod
    def within(cls, seed: int, means: dict, *, spread: tuple[float, float] = (0.05, 0.29)) -> "LengthModel":
        """A model whose mean reasoning per ``reasoning_effort`` is drawn log-uniformly in ``means``
        ({effort: (least, most)} tokens per request) and its spread in ``spread``, from ``seed``."""
        r = random.Random(f"within-{seed}")
        return cls(seed, spread=r.uniform(*spread),
                   means={e: lo * (hi / lo) ** r.random() for e, (lo, hi) in means.items()})

    def mean(self, effort: str | None) -> float:
        if effort not in self.means:
            r = random.Random(f"lengths-{self.seed}-{effort}")
            self.means[effort] = 20.0 * 300.0 ** r.random()
        return self.means[effort]

    def reasoning(self, effort: str | None, request_key: str, n_keys: int = 0) -> int:
        """Reasoning tokens of one request (``request_key``: a digest of its body)."""
        r = random.Random(f"{self.seed}-{request_key}")
        # log-normal of mean 1 (mu = -sigma^2 / 2): ``means`` are means, not medians
        noise = r.lognormvariate(-self.spread ** 2 / 2, self.spread)
        return max(0, round(self.mean(effort) * (1 + self.per_key * n_keys) * noise))

    def __repr__(self) -> str:
        means = ", ".join(f"{k}: {v:.0f}" for k, v in self.means.items())
        return (f"LengthModel(seed={self.seed}, reasoning means {{{means}}}, spread {self.spread:.2f}, "
                f"per_key {self.per_key:.3f}, wordiness {self.wordiness:.2f})")
