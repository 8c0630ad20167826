"""CLIP similarity: embeddings, cache, scoring, truncation, losses, model identity (tiny random CLIP)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import support

from benchmaker.formats import read_table, write_table
from benchmaker.losses import read_losses
from benchmaker.similarity import embed, score
from benchmaker.similarity.cache import EmbeddingCache
from benchmaker.similarity.model import ClipModel, ModelLoadError, load_clip

ROOT = Path(__file__).resolve().parents[1]


def images_table(corpus: Path, ids: list[str] | None = None) -> pl.DataFrame:
    ids = ids or sorted(str(p.relative_to(corpus)) for p in corpus.rglob("*") if p.is_file())
    rows = []
    for i in ids:
        data = (corpus / i).read_bytes()
        rows.append({
            "image_id": i, "image_url": None, "mime_type": "image/jpeg" if i.endswith(".jpg") else "image/png",
            "width": 1, "height": 1, "file_size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "phash": None, "license": "CC0-1.0", "doi": None, "original_dataset_name": "tiny",
        })
    return pl.DataFrame(rows)


def qrels_table(queries: dict[str, str], image_ids: list[str]) -> pl.DataFrame:
    rows = []
    for qid, text in queries.items():
        for k, iid in enumerate(image_ids):
            rows.append({"query_id": qid, "query_text": text, "image_id": iid, "relevance_label": k % 2,
                         "pool": "seed" if k == 0 else "hard", "is_seed": k == 0, "seed_not_relevant": False,
                         "judge": "rules"})
    return pl.DataFrame(rows)


def queries_table(queries: dict[str, str]) -> pl.DataFrame:
    return pl.DataFrame([{"query_id": qid, "query_text": text, "narrative": None, "writer": "rules"}
                         for qid, text in queries.items()], schema={"query_id": pl.String, "query_text": pl.String,
                                                                    "narrative": pl.String, "writer": pl.String})


def direct(clip_dir: Path, paths: list[Path], texts: list[str]):
    """Reference: plain open_clip, one image per forward, no project code."""
    import open_clip
    import torch
    from PIL import Image

    model, _, pre = open_clip.create_model_and_transforms(f"local-dir:{clip_dir}")
    model.eval()
    tok = open_clip.get_tokenizer(f"local-dir:{clip_dir}")
    with torch.no_grad():
        im = [model.encode_image(pre(Image.open(p).convert("RGB")).unsqueeze(0)) for p in paths]
        im = torch.cat(im) if im else torch.zeros((0, 64))
        tx = model.encode_text(tok(texts))
        scale = float(model.logit_scale.exp())
    im = im / im.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    tx = tx / tx.norm(dim=-1, keepdim=True)
    return im.numpy(), tx.numpy(), scale


@pytest.fixture()
def setup(tmp_path, tiny_corpus, tiny_clip):
    pick = [sorted((tiny_corpus / c).iterdir())[k] for c, k in (("red", 0), ("blue", 1), ("green", 2), ("yellow", 3))]
    ids = [str(p.relative_to(tiny_corpus)) for p in pick]
    ids = ids[:3] + ["broken/truncated.jpg", ids[3], "broken/not_an_image.jpg"]
    imgs = images_table(tiny_corpus, ids)
    shard_a, shard_b = tmp_path / "images_a.jsonl", tmp_path / "images_b.jsonl"
    write_table(imgs[:3], "images", shard_a)
    write_table(imgs[3:], "images", shard_b)
    long_text = " ".join(["a very long query about red circles and blue squares"] * 20)
    queries = {"q1": "a red circle", "q2": "blue square pattern", "q3": long_text}
    qrels = tmp_path / "qrels.jsonl"
    write_table(qrels_table(queries, ids), "qrels", qrels)
    # what embed_queries reads: the written queries (the judge's labels never)
    queries_file = tmp_path / "queries.jsonl"
    write_table(queries_table(queries), "queries", queries_file)
    model = {"model": f"local-dir:{tiny_clip}", "pretrained": None, "precision": "auto"}
    runtime = {"device": "cpu", "batch_size": 4, "num_workers": 0}
    return dict(tmp=tmp_path, ids=ids, shards=[shard_a, shard_b], qrels=qrels, queries=queries, model=model,
                runtime=runtime, corpus=tiny_corpus, clip=tiny_clip, queries_file=queries_file)


def run_all(s, *, cache_dir, columns=None, logit_column=None, rank_column="clip_rank"):
    t = s["tmp"]
    embs, losses = [], []
    for i, shard in enumerate(s["shards"]):
        e, lo = t / f"emb{i}.parquet", t / f"loss{i}.jsonl"
        embed.run_images(images=str(shard), embeddings=str(e), losses=str(lo), model=s["model"],
                         runtime=s["runtime"], cache_dir=str(cache_dir), image_root=str(s["corpus"]),
                         columns=columns)
        embs.append(str(e))
        losses.append(str(lo))
    embed.run_queries(queries=str(s["queries_file"]), embeddings=str(t / "q.parquet"), model=s["model"],
                      runtime=s["runtime"], columns=columns)
    score.run(qrels=str(s["qrels"]), query_embeddings=str(t / "q.parquet"), image_embeddings=embs,
              embed_losses=losses, scored=str(t / "scored.jsonl"), losses=str(t / "sim_losses.jsonl"),
              logit_column=logit_column, rank_column=rank_column, columns=columns)
    return embs, losses


def test_scores_equal_direct_open_clip(setup, tmp_path):
    s = setup
    columns = {"clip_score": "similarity", "query_text": "query"}
    run_all(s, cache_dir=tmp_path / "cache", columns=columns, logit_column="clip_logit", rank_column="rank")
    raw = pl.read_ndjson(tmp_path / "scored.jsonl")
    assert {"similarity", "query", "rank", "clip_logit"} <= set(raw.columns)
    assert "clip_score" not in raw.columns and "clip_rank" not in raw.columns
    good = [i for i in s["ids"] if not i.startswith("broken/")]
    im, tx, scale = direct(s["clip"], [s["corpus"] / i for i in good], list(s["queries"].values()))
    expected = tx @ im.T  # [query, image]
    for qi, qid in enumerate(s["queries"]):
        for ii, iid in enumerate(good):
            row = raw.filter((pl.col("query_id") == qid) & (pl.col("image_id") == iid)).row(0, named=True)
            assert row["similarity"] == pytest.approx(float(expected[qi, ii]), abs=2e-5)
            assert row["clip_logit"] == pytest.approx(scale * row["similarity"], rel=1e-9)
        # rank 1..n by score descending within the query, nulls unranked
        sub = raw.filter(pl.col("query_id") == qid)
        scored_rows = sub.filter(pl.col("similarity").is_not_null()).sort("similarity", descending=True)
        assert scored_rows["rank"].to_list() == list(range(1, len(good) + 1))
        assert sub.filter(pl.col("similarity").is_null())["rank"].null_count() == 2
    # file reads back as a valid qrels_with_score table once the rank column is named canonically
    back = read_table("qrels_with_score", _canon(tmp_path), columns=columns)
    assert back.height == len(s["ids"]) * 3


def _canon(tmp_path: Path) -> Path:
    df = pl.read_ndjson(tmp_path / "scored.jsonl").rename({"rank": "clip_rank"})
    p = tmp_path / "scored_canon.jsonl"
    df.write_ndjson(p)
    return p


def test_embedding_files_format(setup, tmp_path):
    s = setup
    embs, _ = run_all(s, cache_dir=tmp_path / "cache")
    df, meta = embed.read_embeddings(embs[0])
    assert df.columns == ["image_id", "sha256", "model_id", "embedding"]
    assert df.schema["embedding"] == pl.Array(pl.Float32, 64)
    norms = np.linalg.norm(df["embedding"].to_numpy(), axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)
    assert meta["kind"] == "image" and meta["model_id"] == df["model_id"][0]
    q, qmeta = embed.read_embeddings(tmp_path / "q.parquet")
    assert q.columns == ["query_id", "query_text", "model_id", "embedding", "truncated"]
    assert float(qmeta["logit_scale"]) == pytest.approx(1 / 0.07, rel=1e-5)
    assert q.filter(pl.col("query_id") == "q3")["truncated"].to_list() == [True]
    assert q.filter(pl.col("query_id") != "q3")["truncated"].to_list() == [False, False]


def test_corrupt_image_null_score_and_losses(setup, tmp_path):
    s = setup
    _, losses = run_all(s, cache_dir=tmp_path / "cache")
    emb_loss = read_losses(losses[1])
    assert sorted(emb_loss["item_id"].to_list()) == ["broken/not_an_image.jpg", "broken/truncated.jpg"]
    assert set(emb_loss["reason"]) == {"image_decode_error"}
    assert set(emb_loss["stage"]) == {"similarity"} and set(emb_loss["item_type"]) == {"image"}
    out = read_table("qrels_with_score", tmp_path / "scored.jsonl")
    bad = out.filter(pl.col("image_id").str.starts_with("broken/"))
    assert bad["clip_score"].null_count() == bad.height == 6
    assert bad["clip_rank"].null_count() == 6
    pair = read_losses(tmp_path / "sim_losses.jsonl")
    assert pair.height == 6 and set(pair["item_type"]) == {"pair"}
    assert set(pair["reason"]) == {"image_decode_error"}
    assert set(pair["query_id"]) == {"q1", "q2", "q3"}


def test_long_query_truncated_like_open_clip(setup, tmp_path, tiny_clip):
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    long_text = setup["queries"]["q3"]
    assert clip.count_tokens(long_text) > 77
    emb, trunc = clip.encode_texts([long_text, "short"])
    assert trunc == [True, False]
    _, tx, _ = direct(tiny_clip, [], [long_text])
    assert np.allclose(emb[0], tx[0], atol=1e-5)


def test_cache_hit_does_not_recompute(setup, tmp_path, monkeypatch):
    s = setup
    cache = tmp_path / "cache"
    embs, _ = run_all(s, cache_dir=cache)
    first = [embed.read_embeddings(e)[0] for e in embs]
    parts = list(cache.rglob("part-*.keys.npy"))
    assert len(parts) == 2  # one part per shard job (the broken images are not cached)

    def boom(self, pixels):
        raise AssertionError("encode_images called despite a full cache hit")

    monkeypatch.setattr(ClipModel, "encode_images", boom)
    out = tmp_path / "again.parquet"
    embed.run_images(images=str(s["shards"][0]), embeddings=str(out), losses=str(tmp_path / "l.jsonl"),
                     model=s["model"], runtime=s["runtime"], cache_dir=str(cache), image_root=str(s["corpus"]),
                     columns=None)
    assert embed.read_embeddings(out)[0].equals(first[0])
    assert len(list(cache.rglob("part-*.keys.npy"))) == 2  # nothing new written


def test_poisoned_cache_is_used(setup, tmp_path, tiny_clip):
    """A cache entry is returned as is: proof that lookups by sha256 replace the model."""
    s = setup
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    imgs = read_table("images", s["shards"][0])
    cache = EmbeddingCache.for_model(tmp_path / "cache", clip)
    fake = np.zeros((imgs.height, clip.embed_dim), np.float32)
    fake[:, 0] = 1.0
    cache.put(imgs["sha256"].to_list(), fake)
    before = clip.encode_image_calls
    out = tmp_path / "e.parquet"
    embed.run_images(images=str(s["shards"][0]), embeddings=str(out), losses=str(tmp_path / "l.jsonl"),
                     model=s["model"], runtime=s["runtime"], cache_dir=str(tmp_path / "cache"),
                     image_root=str(s["corpus"]))
    assert clip.encode_image_calls == before
    got = embed.read_embeddings(out)[0]["embedding"].to_numpy()
    assert np.array_equal(got, fake)


def test_workers_and_batches_give_same_embeddings(setup, tmp_path, tiny_clip):
    s = setup
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    imgs = read_table("images", s["shards"][0])
    a = embed.embed_image_table(imgs, clip, image_root=s["corpus"], cache=None, losses=None, batch_size=1,
                                num_workers=0)
    b = embed.embed_image_table(imgs, clip, image_root=s["corpus"], cache=None, losses=None, batch_size=8,
                                num_workers=2)
    assert a["image_id"].to_list() == b["image_id"].to_list()
    assert np.allclose(a["embedding"].to_numpy(), b["embedding"].to_numpy(), atol=1e-5)


def test_duplicate_images_encoded_once(tmp_path, tiny_corpus, tiny_clip):
    corpus = tmp_path / "c"
    (corpus / "x").mkdir(parents=True)
    src = sorted((tiny_corpus / "red").iterdir())[0].read_bytes()
    (corpus / "x/a.jpg").write_bytes(src)
    (corpus / "x/b.jpg").write_bytes(src)
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    imgs = images_table(corpus)
    before = clip.encode_image_calls
    out = embed.embed_image_table(imgs, clip, image_root=corpus, cache=None, losses=None, num_workers=0,
                                  batch_size=1)
    assert clip.encode_image_calls - before == 1 and out.height == 2


def test_jpeg_draft_mode_downscales_large_images(tmp_path):
    from PIL import Image

    p = tmp_path / "big.jpg"
    Image.new("RGB", (2400, 1600), (200, 30, 30)).save(p, quality=90)
    im = embed.load_image(str(p), (224, 224))
    assert im.mode == "RGB" and min(im.size) >= 224 and im.size[0] < 2400
    assert embed.load_image(str(p), None).size == (2400, 1600)


def test_model_identity_tracks_weights_and_preprocessing(tmp_path, tiny_clip):
    a = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    other = support.make_tiny_clip(tmp_path / "other", seed=1)
    b = load_clip(f"local-dir:{other}", None, device="cpu")
    assert a.model_id != b.model_id and a.cache_key != b.cache_key
    assert a.model_id.split("|")[0] == b.model_id.split("|")[0]  # same architecture config
    pp = tmp_path / "pp"
    support.make_tiny_clip(pp, seed=0)
    cfg = json.loads((pp / "open_clip_config.json").read_text())
    cfg["preprocess_cfg"]["interpolation"] = "bilinear"
    (pp / "open_clip_config.json").write_text(json.dumps(cfg))
    c = load_clip(f"local-dir:{pp}", None, device="cpu")
    assert c.model_id.split("|")[1] == a.model_id.split("|")[1]  # same weights digest
    assert c.model_id != a.model_id and "bilinear" in c.model_id
    # a checkpoint file given as `pretrained` is named by its digest
    assert "sha256:" in a.model_id


def test_clear_error_when_weights_cannot_be_fetched(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError) as exc:
        load_clip("ViT-B-32", "laion2b_s34b_b79k", device="cpu", reuse=False)
    msg = str(exc.value)
    for needle in ("ViT-B-32", "laion2b_s34b_b79k", "HF_HUB_OFFLINE", "local-dir:", "similarity.pretrained"):
        assert needle in msg
    with pytest.raises(ModelLoadError, match="not found|no weights"):
        load_clip(f"local-dir:{tmp_path}/missing", None, device="cpu", reuse=False)
    with pytest.raises(ModelLoadError, match="checkpoint file not found"):
        load_clip("ViT-B-32", str(tmp_path / "nope.safetensors"), device="cpu", reuse=False)
    with pytest.raises(ModelLoadError, match="unknown open_clip architecture"):
        load_clip("ViT-Nonexistent-99", None, device="cpu", reuse=False)


def test_random_init_warns_loudly(caplog):
    with caplog.at_level(logging.WARNING):
        clip = load_clip("ViT-S-32-alt", None, device="cpu", reuse=False)
    assert "RANDOM WEIGHTS" in caplog.text
    assert "random-init" in clip.model_id


def test_model_mismatch_between_query_and_image_embeddings(setup, tmp_path):
    s = setup
    embs, losses = run_all(s, cache_dir=tmp_path / "cache")
    df, meta = embed.read_embeddings(embs[0])
    embed.write_embeddings(df, tmp_path / "other.parquet", kind="image",
                           extra_meta={"model_id": "something-else"})
    with pytest.raises(Exception, match="rerun the embed rules"):
        score.run(qrels=str(s["qrels"]), query_embeddings=str(tmp_path / "q.parquet"),
                  image_embeddings=[str(tmp_path / "other.parquet")], embed_losses=losses,
                  scored=str(tmp_path / "s.jsonl"), losses=str(tmp_path / "sl.jsonl"))


def test_score_and_package_do_not_import_torch():
    code = ("import sys; import benchmaker.similarity, benchmaker.similarity.score, "
            "benchmaker.similarity.cache; assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------------------------------------
# loader, cache concurrency, weight sources


def test_dataloader_uses_worker_processes(setup, tmp_path, tiny_clip, monkeypatch):
    """num_workers > 0 really decodes in separate processes (not in the main process)."""
    import os

    import torch.utils.data as tud

    seen: dict = {}

    class Recording(tud.DataLoader):
        def _get_iterator(self):
            it = super()._get_iterator()
            seen["iter"] = type(it).__name__
            seen["pids"] = [w.pid for w in getattr(it, "_workers", [])]
            seen["kw"] = (self.num_workers, self.prefetch_factor, self.batch_size)
            return it

    monkeypatch.setattr(tud, "DataLoader", Recording)
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    imgs = read_table("images", setup["shards"][0])
    out = embed.embed_image_table(imgs, clip, image_root=setup["corpus"], cache=None, losses=None,
                                  batch_size=2, num_workers=2)
    assert out.height == imgs.height
    assert seen["iter"] == "_MultiProcessingDataLoaderIter"
    assert len(seen["pids"]) == 2 and os.getpid() not in seen["pids"]
    assert seen["kw"] == (2, 4, 2)


def test_pipeline_decodes_large_jpegs_in_draft_mode(tmp_path, tiny_clip, monkeypatch):
    """The embed path (not only load_image) asks libjpeg for a reduced-size decode."""
    from PIL import Image, JpegImagePlugin

    corpus = tmp_path / "c"
    corpus.mkdir()
    Image.new("RGB", (1800, 1200), (20, 120, 220)).save(corpus / "big.jpg", quality=90)
    Image.new("RGB", (1800, 1200), (20, 120, 220)).save(corpus / "big.png")
    calls = []
    real = JpegImagePlugin.JpegImageFile.draft

    def spy(self, mode, size):
        res = real(self, mode, size)
        calls.append((mode, tuple(size), self.size))
        return res

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    imgs = images_table(corpus)
    out = embed.embed_image_table(imgs, clip, image_root=corpus, cache=None, losses=None, num_workers=0)
    assert out.height == 2
    assert len(calls) == 1  # the JPEG only; PNGs have no draft mode
    mode, asked, got = calls[0]
    assert mode == "RGB" and asked == (224, 224)
    assert got == (450, 300)  # 1/4 scale: the smallest DCT scale still >= 224 on both sides
    # draft decoding changes pixels only slightly: the JPEG and the lossless PNG embed alike
    e = out["embedding"].to_numpy()
    assert float(e[0] @ e[1]) > 0.99


def _embed_shard_subprocess(shard: Path, out: Path, barrier: Path, model: dict, runtime: dict, cache: Path,
                            corpus: Path) -> subprocess.Popen:
    code = f"""
import os, sys, time
from pathlib import Path
os.environ["HF_HUB_OFFLINE"] = "1"
from benchmaker.similarity import embed
barrier = Path({str(barrier)!r})
while not barrier.exists():
    time.sleep(0.01)
embed.run_images(images={str(shard)!r}, embeddings={str(out)!r}, losses={str(out) + '.losses.jsonl'!r},
                 model={model!r}, runtime={runtime!r}, cache_dir={str(cache)!r}, image_root={str(corpus)!r})
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HF_HUB_OFFLINE="1")
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_two_shards_write_the_cache_concurrently(tmp_path, tiny_corpus, tiny_clip, monkeypatch):
    """Two embed_images jobs at once, on overlapping shards, one fresh cache directory."""
    ids = sorted(str(p.relative_to(tiny_corpus)) for p in tiny_corpus.rglob("*.jpg")
                 if not str(p).startswith(str(tiny_corpus / "broken")))
    assert len(ids) >= 8
    imgs = images_table(tiny_corpus, ids)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_table(imgs[: 2 * len(ids) // 3], "images", a)  # overlap: the middle third is in both
    write_table(imgs[len(ids) // 3:], "images", b)
    model = {"model": f"local-dir:{tiny_clip}", "pretrained": None, "precision": "auto"}
    runtime = {"device": "cpu", "batch_size": 2, "num_workers": 0}
    cache, barrier = tmp_path / "cache", tmp_path / "go"
    procs = [_embed_shard_subprocess(s, tmp_path / f"{s.stem}.parquet", barrier, model, runtime, cache,
                                     tiny_corpus) for s in (a, b)]
    barrier.touch()
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    # both outputs equal an uncached computation
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    ref = embed.embed_image_table(imgs, clip, image_root=tiny_corpus, cache=None, losses=None, num_workers=0)
    ref_by_id = dict(zip(ref["image_id"].to_list(), ref["embedding"].to_numpy()))
    for shard in (a, b):
        got = embed.read_embeddings(tmp_path / f"{shard.stem}.parquet")[0]
        assert got["image_id"].to_list() == read_table("images", shard)["image_id"].to_list()
        for iid, vec in zip(got["image_id"].to_list(), got["embedding"].to_numpy()):
            assert np.allclose(vec, ref_by_id[iid], atol=1e-5), iid
    # one model folder, one model.json, every part file complete and readable, no temporary left
    (model_dir,) = [d for d in cache.iterdir() if d.is_dir()]
    assert json.loads((model_dir / "model.json").read_text())["model_id"] == clip.model_id
    parts = sorted(model_dir.glob("part-*.keys.npy"))
    assert len(parts) == 2 and not list(model_dir.glob(".*"))
    rows = [k.decode() for p in parts for k in np.load(p)]
    assert set(rows) == set(imgs["sha256"])
    # a third job finds everything in the cache and encodes nothing
    cached = EmbeddingCache.for_model(cache, clip)
    hit = cached.lookup(imgs["sha256"])
    assert hit.height == imgs.height and cached.misses == 0


_HAMMER = """
import sys
import numpy as np
from benchmaker.similarity.cache import EmbeddingCache
root, worker, n, barrier = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
import os, time
while not os.path.exists(barrier):
    time.sleep(0.005)
c = EmbeddingCache(root, model_id="m|w|p", cache_key="m-123", dim=8)
for i in range(n):
    sha = [f"{worker}-{i}-{j}" for j in range(3)] + [f"shared-{i}"]
    c.put(sha, np.full((4, 8), worker * 1000 + i, np.float32))
    found = c.lookup([f"shared-{k}" for k in range(i + 1)])  # reads while the other one writes
    assert found.height == i + 1, (i, found.height)
"""


def test_cache_put_and_lookup_from_two_processes(tmp_path):
    """Two processes create the same cache folder and put/lookup at once (separate interpreters:
    polars' thread pool does not survive fork)."""
    barrier = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    procs = [subprocess.Popen([sys.executable, "-c", _HAMMER, str(tmp_path / "c"), str(w), "25", str(barrier)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for w in (1, 2)]
    barrier.touch()
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
    c = EmbeddingCache(tmp_path / "c", model_id="m|w|p", cache_key="m-123", dim=8)
    assert len(c.parts()) == 50
    own = c.lookup([f"{w}-{i}-{j}" for w in (1, 2) for i in range(25) for j in range(3)])
    assert own.height == 150
    for sha, vec in own.iter_rows():
        w, i, _ = sha.split("-")
        assert vec == [float(int(w) * 1000 + int(i))] * 8
    shared = c.lookup([f"shared-{i}" for i in range(25)])
    assert shared.height == 25  # written by both; one row each, the first part file wins
    with pytest.raises(Exception, match="belongs to"):
        EmbeddingCache(tmp_path / "c", model_id="other", cache_key="m-123", dim=8)


def test_checkpoint_file_as_pretrained(tmp_path, tiny_clip):
    """`model: <architecture>, pretrained: /path/file.safetensors` loads those weights."""
    from benchmaker import _tvshim
    from benchmaker.tinyclip import TINY_CLIP_CFG

    _tvshim.install()
    import open_clip

    cfg_dir = tmp_path / "arch"
    cfg_dir.mkdir()
    (cfg_dir / "bm-tiny-test.json").write_text(json.dumps(TINY_CLIP_CFG))
    open_clip.add_model_config(cfg_dir)
    ckpt = tiny_clip / "open_clip_model.safetensors"
    by_file = load_clip("bm-tiny-test", str(ckpt), device="cpu", reuse=False)
    by_dir = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    assert by_file.weights == f"file:sha256:{by_dir.weights.split(':')[-1]}"
    assert by_file.model_id.startswith("bm-tiny-test|file:sha256:")
    texts = ["a red circle", "blue"]
    assert np.allclose(by_file.encode_texts(texts)[0], by_dir.encode_texts(texts)[0], atol=1e-6)


def test_hf_hub_model_from_local_hub_cache(tmp_path, tiny_clip, monkeypatch):
    """`model: hf-hub:org/repo` resolves through huggingface_hub (here: offline, from its cache)."""
    import shutil

    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--bm-test--tiny-clip"
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for f in ("open_clip_config.json", "open_clip_model.safetensors"):
        shutil.copy(tiny_clip / f, snap / f)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub = load_clip("hf-hub:bm-test/tiny-clip", None, device="cpu", reuse=False)
    assert hub.weights == f"hf-hub:bm-test/tiny-clip@{commit[:12]}"
    ref = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    assert np.allclose(hub.encode_texts(["a red circle"])[0], ref.encode_texts(["a red circle"])[0], atol=1e-6)
    with pytest.raises(ModelLoadError, match="hf-hub:bm-test/missing"):
        load_clip("hf-hub:bm-test/missing", None, device="cpu", reuse=False)


def test_loader_fits_small_dev_shm(setup, tiny_clip, monkeypatch, caplog):
    """A Kubernetes pod's 64 MB /dev/shm cannot hold 2 workers x 4 prefetched batches of 128 images:
    the loader shrinks its prefetch / workers instead of dying with SIGBUS."""
    mb = 1_000_000
    batch = 128 * 3 * 224 * 224  # uint8 bytes of one default batch: 19.3 MB
    monkeypatch.setattr(embed, "_shm_free", lambda: 64 * mb)
    with caplog.at_level(logging.WARNING):
        assert embed.fit_loader_to_shm(2, 4, batch) == (2, 1)
    assert "/dev/shm" in caplog.text and "medium: Memory" in caplog.text
    assert embed.fit_loader_to_shm(8, 4, batch) == (2, 1)
    assert embed.fit_loader_to_shm(2, 4, 8 * mb) == (2, 3)  # 51.2 MB usable // 8 MB = 6 batches
    assert embed.fit_loader_to_shm(2, 4, 60 * mb) == (0, 1)
    monkeypatch.setattr(embed, "_shm_free", lambda: 10_000 * mb)
    assert embed.fit_loader_to_shm(8, 4, batch) == (8, 4)
    monkeypatch.setattr(embed, "_shm_free", lambda: None)  # no /dev/shm (macOS)
    assert embed.fit_loader_to_shm(8, 4, batch) == (8, 4)
    # end to end: no room at all -> decoding in the main process, same embeddings
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu")
    imgs = read_table("images", setup["shards"][0])
    ref = embed.embed_image_table(imgs, clip, image_root=setup["corpus"], cache=None, losses=None, num_workers=0)
    monkeypatch.setattr(embed, "_shm_free", lambda: 1000)
    got = embed.embed_image_table(imgs, clip, image_root=setup["corpus"], cache=None, losses=None, num_workers=2)
    assert np.allclose(ref["embedding"].to_numpy(), got["embedding"].to_numpy(), atol=1e-6)


def test_device_auto_and_precision(monkeypatch):
    import torch

    from benchmaker.similarity.model import resolve_device, resolve_precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == "cuda" and resolve_device(None) == "cuda"
    assert resolve_precision("auto", "cuda") == torch.float16
    assert resolve_precision("bf16", "cuda:1") == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == "mps"
    assert resolve_precision("auto", "mps") is None
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("AUTO") == "cpu"
    assert resolve_precision("auto", "cpu") is None
    with pytest.raises(ModelLoadError, match="CUDA is not available"):
        resolve_device("cuda")
    with pytest.raises(ModelLoadError, match="unknown precision"):
        resolve_precision("fp8", "cpu")


def test_autocast_is_applied_when_asked(setup, tiny_clip):
    """precision bf16 really runs the encoders under autocast (results differ slightly from fp32)."""
    fp32 = load_clip(f"local-dir:{tiny_clip}", None, device="cpu", precision="fp32", reuse=False)
    bf16 = load_clip(f"local-dir:{tiny_clip}", None, device="cpu", precision="bf16", reuse=False)
    assert fp32.model_id == bf16.model_id and bf16.precision == "bfloat16"
    imgs = read_table("images", setup["shards"][0])
    a = embed.embed_image_table(imgs, fp32, image_root=setup["corpus"], cache=None, losses=None, num_workers=0)
    b = embed.embed_image_table(imgs, bf16, image_root=setup["corpus"], cache=None, losses=None, num_workers=0)
    ea, eb = a["embedding"].to_numpy(), b["embedding"].to_numpy()
    assert eb.dtype == np.float32 and np.allclose(np.linalg.norm(eb, axis=1), 1.0, atol=1e-5)
    assert not np.array_equal(ea, eb)
    assert (ea * eb).sum(axis=1).min() > 0.98


def test_score_gathers_only_the_embeddings_its_pairs_use(tmp_path):
    """Images no pair uses are never loaded; the gathered matrix is float32; scores equal a float64
    reference computed on the whole matrix."""
    rng = np.random.default_rng(3)
    dim = 8
    shards = []
    for s in range(3):
        ids = [f"img{s}-{i}" for i in range(50)]
        df = pl.DataFrame({"image_id": ids, "sha256": ids, "model_id": ["m"] * 50,
                           "embedding": pl.Series(rng.standard_normal((50, dim), dtype=np.float32),
                                                  dtype=pl.Array(pl.Float32, dim))})
        p = tmp_path / f"e{s}.parquet"
        embed.write_embeddings(df, p, kind="image", extra_meta={"model_id": "m"})
        shards.append(str(p))
    used = ["img0-3", "img2-49", "img1-0"]
    got = score.gather_image_embeddings(shards, pl.Series(used + ["img0-3", "missing"]), model_id="m")
    assert sorted(got["image_id"].to_list()) == sorted(used)
    assert score._matrix(got, "x").dtype == np.float32
    every = pl.concat([embed.read_embeddings(p)[0] for p in shards])
    q = pl.DataFrame({"query_id": ["q"], "embedding": pl.Series(rng.standard_normal((1, dim), dtype=np.float32),
                                                               dtype=pl.Array(pl.Float32, dim))})
    qrels = pl.DataFrame({"query_id": ["q"] * 3, "image_id": used})
    out = score.score_pairs(qrels, q, got)["clip_score"].to_numpy()
    ref = {}
    qv = q["embedding"].to_numpy()[0].astype(np.float64)
    for iid, v in zip(every["image_id"], every["embedding"].to_numpy()):
        v = v.astype(np.float64)
        ref[iid] = float(np.dot(qv / np.linalg.norm(qv), v / np.linalg.norm(v)))
    assert np.allclose(out, [ref[i] for i in used], atol=1e-12)
    with pytest.raises(Exception, match="rerun the embed rules"):
        score.gather_image_embeddings(shards, pl.Series(used), model_id="other")


def test_loading_a_clip_without_hf_text_tower_skips_transformers(tiny_clip):
    """open_clip imports transformers (~0.7 s of CPU) only for HF text towers, timm (~0.3 s) only
    for timm vision towers and the Hugging Face Hub client (~0.13 s) only for weights it may download;
    a model without them (a local-dir: folder, a checkpoint file) is loaded without them, the pixel
    spec of a pretrained tag is read without the Hub client, and a later model that needs one in the
    same process still gets it (issue #33: a model job's fixed cost)."""
    code = f"""
import sys
from benchmaker.logs import stage_logging
from benchmaker.similarity import model, pixels
with stage_logging(None):  # as a job: it imports huggingface_hub's (lazy) package for its logger
    assert "huggingface_hub" in sys.modules
    clip = model.load_clip("local-dir:{tiny_clip}", None, device="cpu", precision="fp32")
    assert pixels.pixel_spec("ViT-B-32", "laion2b_s34b_b79k").size == (224, 224)
for name in ("transformers", "timm", "huggingface_hub.file_download", "httpx"):
    assert name not in sys.modules, name + " imported"
import open_clip.hf_model
import open_clip.timm_model
import open_clip.pretrained
assert open_clip.hf_model.transformers is None
assert open_clip.timm_model.timm is None
assert not open_clip.pretrained.has_hf_hub()
assert model._needs_hf_text("xlm-roberta-base-ViT-B-32") and not model._needs_hf_text("ViT-B-32")
assert model._needs_timm("ViT-B-16-SigLIP") and not model._needs_timm("ViT-B-32")
assert not model._needs_timm("local-dir:{tiny_clip}") and model._needs_timm("hf-hub:org/repo")
assert model._needs_hf_hub("ViT-B-32", "laion2b_s34b_b79k") and model._needs_hf_hub("hf-hub:org/repo", None)
assert not model._needs_hf_hub("local-dir:{tiny_clip}", None) and not model._needs_hf_hub("ViT-B-32", None)
assert not model._needs_hf_hub("ViT-B-32", "{tiny_clip}/open_clip_model.safetensors")
model._enable_tower("hf_text")
model._enable_tower("timm")
model._enable_tower("hf_hub")
import open_clip.model
from open_clip.factory import download_pretrained
assert open_clip.hf_model.transformers is not None
assert open_clip.model.HFTextEncoder is open_clip.hf_model.HFTextEncoder
assert open_clip.timm_model.timm is not None
assert open_clip.model.TimmModel is open_clip.timm_model.TimmModel
assert open_clip.pretrained.has_hf_hub() and download_pretrained.__globals__["_has_hf_hub"]
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_a_checkpoint_is_loaded_without_random_init_into_open_clips_weights(tmp_path, tiny_clip):
    """A model with a checkpoint is built without the random initialisation the checkpoint overwrites
    and takes the checkpoint's tensors in place (similarity.checkpoint._checkpoint_only): every weight is
    open_clip's own load's, bit for bit; a fp16 checkpoint is still copied into the fp32 model; the
    initialisers are restored; the tokenizer is built on first use only, with the context length given."""
    import hashlib

    import torch
    from safetensors.torch import load_file, save_file

    from benchmaker import _tvshim
    from benchmaker.similarity import model as m
    from benchmaker.tinyclip import TINY_CLIP_CFG

    _tvshim.install()
    import open_clip

    inits, load_checkpoint = dict(vars(torch.nn.init)), open_clip.factory.load_checkpoint
    clip = load_clip(f"local-dir:{tiny_clip}", None, device="cpu", reuse=False)
    assert dict(vars(torch.nn.init)) == inits and open_clip.factory.load_checkpoint is load_checkpoint
    ref = open_clip.create_model(f"local-dir:{tiny_clip}")
    mine, theirs = clip.model.state_dict(), ref.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(mine[k].dtype == theirs[k].dtype and torch.equal(mine[k], theirs[k]) for k in mine)
    assert clip._tokenizer is None and clip.context_length == 77
    assert clip.tokenizer.context_length == clip.context_length and clip._tokenizer is not None

    cfg_dir = tmp_path / "arch"
    cfg_dir.mkdir()
    (cfg_dir / "bm-tiny-half.json").write_text(json.dumps(TINY_CLIP_CFG))
    open_clip.add_model_config(cfg_dir)
    half = tmp_path / "half.safetensors"
    save_file({k: v.half() for k, v in load_file(str(tiny_clip / "open_clip_model.safetensors")).items()}, str(half))
    m.prefetch_digest(half)  # hashed in the background; the identity waits for that one computation
    by_half = load_clip("bm-tiny-half", str(half), device="cpu", reuse=False)
    assert by_half.weights == f"file:sha256:{hashlib.sha256(half.read_bytes()).hexdigest()[:16]}"
    ref = open_clip.create_model("bm-tiny-half", pretrained=str(half))
    mine, theirs = by_half.model.state_dict(), ref.state_dict()
    assert all(v.dtype == torch.float32 for v in mine.values())
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
