"""CLIP job start-up vs encoding on this machine: what a shard pays once and what it pays per image.

    PYTHONPATH=src python benchmarks/clip_startup.py [--model ViT-B-32] [--images 256] [--threads 2]

In a fresh interpreter (as a Snakemake job starts): the time to import torch + open_clip, to build
the model (random weights: no download; loading real weights from a local disk adds their read
time), then the encode rate of ``--images`` generated 640x480 JPEGs through ``embed_image_table``
(DataLoader, draft decoding, batches), after one warm-up batch. Prints one JSON line and the shard
size at which encoding is 90 % of a job's time, which is the input to docs/clusters.md's sizing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile, time
t0 = time.perf_counter()
sys.path.insert(0, {src!r})
import torch
from benchmaker import _tvshim
_tvshim.install()
import open_clip
t_import = time.perf_counter() - t0
torch.set_num_threads({threads})
from pathlib import Path
import polars as pl
from PIL import Image
import numpy as np
from benchmaker.similarity.loads import load_counted
from benchmaker.similarity.embed import embed_image_table
t1 = time.perf_counter()
clip = load_counted({model!r}, None, device="cpu", precision="fp32", purpose="benchmark")
t_load = time.perf_counter() - t1
d = Path(tempfile.mkdtemp())
rng = np.random.default_rng(0)
ids = []
for k in range({n} + 16):
    arr = (rng.random((48, 64, 3)) * 255).astype("uint8")
    Image.fromarray(arr).resize((640, 480)).save(d / f"{{k}}.jpg", quality=85)
    ids.append(f"{{k}}.jpg")
tbl = pl.DataFrame({{"image_id": ids, "sha256": ids}})
embed_image_table(tbl.head(16), clip, image_root=d, cache=None, losses=None, batch_size=16, num_workers={workers})
t2 = time.perf_counter()
embed_image_table(tbl.tail({n}), clip, image_root=d, cache=None, losses=None, batch_size=64, num_workers={workers})
t_enc = time.perf_counter() - t2
print(json.dumps({{"import_s": round(t_import, 2), "model_s": round(t_load, 2), "images": {n},
                  "encode_s": round(t_enc, 2), "images_per_s": round({n} / t_enc, 2)}}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="ViT-B-32")
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    code = CHILD.format(src=str(ROOT / "src"), model=a.model, n=a.images, threads=a.threads, workers=a.workers)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                       env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    if r.returncode:
        print(r.stderr[-3000:])
        return 1
    m = json.loads(r.stdout.strip().splitlines()[-1])
    start = m["import_s"] + m["model_s"]
    m["model"] = a.model
    m["startup_s"] = round(start, 2)
    m["images_for_90pct_encoding"] = int(9 * start * m["images_per_s"])
    print(json.dumps(m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
