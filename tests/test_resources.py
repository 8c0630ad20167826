"""Resource requests follow the sizes of the inputs a job reads (benchmaker/resources.py)."""

from types import SimpleNamespace

import pytest

from benchmaker import resources as R


def _write(path, mb):
    path.write_bytes(b"x" * int(mb * R.MB))
    return str(path)


def test_requests_grow_with_inputs_and_retries(tmp_path):
    small = SimpleNamespace(qrels=_write(tmp_path / "q1", 1), query_embeddings=_write(tmp_path / "e1", 0.1),
                            image_embeddings=[_write(tmp_path / "s1", 2)])
    big = SimpleNamespace(qrels=_write(tmp_path / "q2", 100), query_embeddings=small.query_embeddings,
                          image_embeddings=[_write(tmp_path / "s2", 20), small.image_embeddings[0]])
    score = R.mem_mb("score")
    a, b = score(None, small, 1), score(None, big, 1)
    assert R.MIN_MB <= a < b
    # bounded by the pairs and one shard, not by the number of shard files
    more_shards = SimpleNamespace(**{**vars(big), "image_embeddings": big.image_embeddings * 50})
    assert score(None, more_shards, 1) == b
    assert score(None, big, 2) >= 1.5 * b - 100
    missing = SimpleNamespace(qrels=str(tmp_path / "none"), query_embeddings=str(tmp_path / "none2"),
                              image_embeddings=[])
    assert score(None, missing, 1) == R.MIN_MB  # dry run before inputs exist: the minimum
    # a clip system ranking the similarity stage's embeddings holds every image's vector (x3)
    system = R.mem_mb("evaluate_system")
    ranked = SimpleNamespace(qrels=small.qrels, images=small.qrels, query_embeddings=small.query_embeddings,
                             image_embeddings=[_write(tmp_path / "s3", 400)])
    bm25 = SimpleNamespace(qrels=small.qrels, images=small.qrels, annotations=small.qrels)
    assert system(None, ranked, 1) - system(None, bm25, 1) >= 3 * 400 - 100


def test_clip_requests_count_weights_and_loader(tmp_path):
    shard = _write(tmp_path / "shard.jsonl", 0.4)  # ~1,000 images
    weights = _write(tmp_path / "w.safetensors", 50)
    local = R.mem_mb("embed_images", batch_size=128, num_workers=2)(None, [shard, weights], 1)
    assert local < 2000  # a tiny local model: well under the 16 GB profiles used to ask for
    named_in = type("In", (list,), {})([shard])
    named_in.images = shard
    named = R.mem_mb("embed_images", batch_size=128, num_workers=2)(None, named_in, 1)
    assert named > 700 + 2 * R.NAMED_WEIGHTS_MB
    rt = R.runtime("embed_images")(None, named_in, 1)
    assert 10 <= rt <= 10 + 2 * (60 + 1000 / 20) / 60 + 1


def test_export_disk_follows_the_images_manifest(tmp_path):
    inp = type("In", (list,), {})()
    inp.images = _write(tmp_path / "images.jsonl", 4)   # ~10,000 images of ~100 KB
    inp.append(inp.images)
    assert R.disk_mb("export")(None, inp) >= 1000
    assert R.disk_mb("export")(None, inp) >= 250 * 4


def test_merge_judge_export_are_bounded_by_a_part_or_the_pairs(tmp_path):
    """merge reads one part at a time; judge, summary and export read only the planned / scored images'
    rows (summary: plus counts over blocks):
    a larger corpus (annotations, images) or more parts never raise their requests."""
    parts = [_write(tmp_path / f"p{k}", 8) for k in range(4)]
    merge = R.mem_mb("merge_annotations")
    a = merge(None, SimpleNamespace(parts=parts), 1)
    assert merge(None, SimpleNamespace(parts=parts * 64), 1) == a
    assert merge(None, SimpleNamespace(parts=parts + [_write(tmp_path / "big", 80)]), 1) > a
    plan, scored = _write(tmp_path / "plan", 50), _write(tmp_path / "scored", 120)
    small = SimpleNamespace(plan=plan, scored=scored, annotations=_write(tmp_path / "a1", 5),
                            images=_write(tmp_path / "i1", 5))
    huge = SimpleNamespace(plan=plan, scored=scored, annotations=_write(tmp_path / "a2", 500),
                           images=_write(tmp_path / "i2", 300))
    for rule in ("judge", "export", "summary"):
        assert R.mem_mb(rule)(None, huge, 1) == R.mem_mb(rule)(None, small, 1) <= 2500


def test_model_jobs_ask_for_time_at_their_device_kinds_pace(tmp_path):
    """A model job's runtime comes from its stage's pace for the device it runs on (stages.Pace):
    250,000 images (a 100 MB manifest) ask a CPU job for hours and a GPU job that reads pixel stores
    for minutes; a GPU job pinned to the CPU (``device: cpu``) asks for the CPU's time; a GPU job that
    decodes its own files (an evaluate clip system) sits between; decode_images runs on CPUs only."""
    from benchmaker.stages import STAGES, needs_gpu

    manifest = tmp_path / "shard.jsonl"
    with manifest.open("wb") as fh:
        fh.truncate(100 * R.MB)  # sizes only: a sparse file
    inp = type("In", (list,), {})([str(manifest)])
    inp.images = str(manifest)
    cpu = R.runtime("embed_images", on_gpu=False)(None, inp, 1)
    gpu = R.runtime("embed_images", on_gpu=True, device="auto")(None, inp, 1)
    assert cpu >= 2 * 250_000 / 20 / 60 >= 6 * 60  # hours: ViT-B-32 on a CPU
    assert 10 <= gpu <= 30  # minutes: the model only, at a rate far below an H200's 19,825 images/s
    assert gpu == R.runtime("vision_clip", on_gpu=True, device="cuda:1")(None, inp, 1)
    assert R.runtime("embed_images", on_gpu=True, device="cpu")(None, inp, 1) == cpu
    decoding = R.runtime("evaluate_model", on_gpu=True, device="auto")(None, inp, 1)
    assert gpu < decoding < cpu
    assert R.runtime("embed_images", on_gpu=True)(None, inp, 2) == 2 * gpu  # doubled per retry
    with pytest.raises(ValueError, match="pace only for cpu"):
        R.runtime("decode_images", on_gpu=True)
    # every rule a cluster gives a GPU has a GPU pace, every paced rule a CPU one
    assert all("cpu" in p.per_s for p in R.PACE.values())
    for name in ("embed_images", "vision_clip", "evaluate_model"):
        assert "gpu" in R.PACE[name].per_s
    gpu_rules = {r for s in STAGES.values() for r, need in s.gpu.items() if need}
    assert gpu_rules == {"vision", "embed_images", "evaluate_model"} and needs_gpu("vision", "clip")
    assert not needs_gpu("decode_images")
