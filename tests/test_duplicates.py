"""Duplicate groups (item 5 of issue 21): byte-identical and near-duplicate images share a
``duplicate_group`` in images.jsonl (decided over the whole corpus in merge_images), a query's pools
hold one member per group, the summary counts groups. On a corpus with real duplicates: a photo, its
byte-identical copy and a resized, re-encoded copy (tests/support.add_duplicates)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import support

from benchmaker.formats import read_table, write_table
from benchmaker.preprocess import merge, run, run_shard
from benchmaker.preprocess.duplicates import _near_pairs, duplicate_groups, group_counts
from benchmaker.preprocess.listing import write_listings
from benchmaker.preprocess.stage import DEFAULTS
from benchmaker.sharding import shard_names, shard_of


@pytest.mark.parametrize("t", [0, 3, 6, 10])
def test_near_pairs_equal_brute_force(t):
    """Multi-index hashing finds exactly the pairs within t bits (brute force over all pairs)."""
    rng = np.random.default_rng(t)
    base = rng.integers(0, 2**63, size=600, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    src = base[rng.integers(0, base.size, 600)]
    flips = np.array([sum(1 << int(b) for b in rng.choice(64, int(rng.integers(0, t + 3)), replace=False))
                      for _ in range(600)], dtype=np.uint64)
    codes = np.concatenate([base, src ^ flips])
    i, j = _near_pairs(codes, t)
    dist = np.bitwise_count(codes[:, None] ^ codes[None, :])
    want = set(zip(*[a.tolist() for a in np.nonzero(np.triu(dist <= t, 1))]))
    assert set(zip(i.tolist(), j.tolist())) == want and len(want) > 100


def test_groups_are_transitive_and_named_by_their_first_member():
    df = pl.DataFrame({"image_id": ["d", "a", "c", "b", "e", "f"],
                       "sha256": ["x", "y", "x", "z", "w", "v"],
                       # a-b 3 bits apart, b-e 3 bits apart (a-e 6): one group through b; f has no pHash
                       "phash": ["f0f0f0f0f0f0f0f0", "0000000000000000", "ffffffffffffffff", "0000000000000007",
                                 "000000000000003f", None],
                       # one colour signature for all (mid grey cells, lightness deviation 32): pHash decides
                       "color_signature": ["800000" * 16 + "20"] * 6})
    g = duplicate_groups(df, 3)
    assert g.to_list() == ["c", "a", "c", "a", "a", "f"]  # d = c (same bytes), a-b-e (near), f alone
    assert group_counts(g) == {"groups": 2, "images_in_groups": 5, "extra_copies": 3}
    assert duplicate_groups(df, None).to_list() == ["c", "a", "c", "b", "e", "f"]  # byte-identical only
    assert duplicate_groups(df, 2).to_list() == ["c", "a", "c", "b", "e", "f"]
    # without colour signatures (an older images table) pHash alone links nothing: bytes only
    assert duplicate_groups(df.drop("color_signature"), 3).to_list() == ["c", "a", "c", "b", "e", "f"]
    # a signature that differs in colour (one cell reddened) breaks the near link: a-b-e no longer joins b
    red = df.with_columns(pl.when(pl.col("image_id") == "b").then(pl.lit("80" + "3000" + "800000" * 15 + "20"))
                          .otherwise(pl.col("color_signature")).alias("color_signature"))
    assert duplicate_groups(red, 3).to_list() == ["c", "a", "c", "b", "e", "f"]


def _corpus(tmp_path):
    root = support.copy_tree(support.make_corpus(tmp_path / "src", with_bad=False), tmp_path / "images")
    return root, support.add_duplicates(root)


def test_preprocess_groups_real_duplicates_across_shards(tmp_path):
    """The per-shard jobs + merge_images give the groups (and the bytes) of the one-job run, although the
    members of the group sit in different shards."""
    root, dup = _corpus(tmp_path)
    n = 3
    assert len({shard_of(i, n) for i in dup.values()}) > 1  # the group spans shards
    whole = tmp_path / "whole"
    run(images=str(whole / "images.jsonl"), quarantine=str(whole / "quarantine.jsonl"),
        shards=[str(whole / f"{s}.jsonl") for s in shard_names(n)], image_root=str(root), n_shards=n)
    df = read_table("images", whole / "images.jsonl")
    group = dict(df.select("image_id", "duplicate_group").iter_rows())
    assert {group[i] for i in dup.values()} == {dup["original"]}
    assert sum(g != i for i, g in group.items()) == 2  # nothing else is grouped
    assert df.columns.index("duplicate_group") == df.columns.index("phash") + 1
    write_listings(root, tmp_path / "listing", DEFAULTS, n)
    sh = tmp_path / "sharded"
    for s in shard_names(n):
        run_shard(listing=str(tmp_path / "listing" / f"{s}.tsv"), images=str(sh / "images" / f"{s}.jsonl"),
                  quarantine=str(sh / "quarantine" / f"{s}.jsonl"), image_root=str(root), shard=s, n_shards=n)
    kw = dict(parts=[str(sh / "images" / f"{s}.jsonl") for s in shard_names(n)],
              quarantine_parts=[str(sh / "quarantine" / f"{s}.jsonl") for s in shard_names(n)],
              quarantine=str(sh / "quarantine.jsonl"))
    merge(images=str(sh / "images.jsonl"), **kw)
    assert (sh / "images.jsonl").read_bytes() == (whole / "images.jsonl").read_bytes()
    # the threshold decides the near-duplicate; null = byte-identical copies only
    merge(images=str(sh / "bytes_only.jsonl"), near_duplicate_threshold=None, **kw)
    g = dict(read_table("images", sh / "bytes_only.jsonl").select("image_id", "duplicate_group").iter_rows())
    assert g[dup["copy"]] == dup["original"] and g[dup["resized"]] == dup["resized"]


def _annotate(images: pl.DataFrame) -> pl.DataFrame:
    """Annotations as a good annotator writes them: the three cat photos get the same facets and tags."""
    rows = []
    for iid in images["image_id"].to_list():
        if iid.startswith("dups/"):
            color, shape, tags = "gray", "circle", ["gray", "circle"]
        else:
            color, shape = iid.split("/")[0], iid.split("/")[1].split("_")[0]
            tags = [color, shape]
        rows.append({"image_id": iid, "summary": iid, "tags": tags, "annotator": "hand",
                     "confidence": {"color": 1.0, "shape": 1.0, "is_bright": 1.0}, "color": color, "shape": shape,
                     "is_bright": False})
    return pl.DataFrame(rows)


def test_pools_hold_one_member_per_group_and_summary_counts_groups(tmp_path):
    from benchmaker.formats import FacetModel
    from benchmaker.plan import run as plan_run
    from benchmaker.summary.inputs import corpus_profile

    root, dup = _corpus(tmp_path)
    out = tmp_path / "out"
    run(images=str(out / "images.jsonl"), quarantine=str(out / "q.jsonl"), shards=[str(out / "s.jsonl")],
        image_root=str(root), n_shards=1)
    images = read_table("images", out / "images.jsonl")
    write_table(_annotate(images), "annotations", out / "annotations.jsonl", facets=FacetModel.from_config(
        support.TINY_FACETS))
    seeds = out / "seeds.jsonl"
    seed = next(i for i in images["image_id"] if i.startswith("gray/circle_0"))
    seeds.write_text(json.dumps({"seed_image_ids": [seed]}) + "\n")
    settings = {"core_facets": ["color"], "off_facets": ["color", "shape"], "pos_total": 3, "neutral_total": 0,
                "neg_total": 1, "neg_hard": 0, "neg_nearmiss": 1, "neg_easy": 0, "num_seeds": 1}

    def plan(name, **extra):
        plan_run(annotations=str(out / "annotations.jsonl"), images=str(images_path), plan=str(out / name),
                 losses=str(out / f"{name}.losses"), settings=settings | extra, facets=support.TINY_FACETS,
                 benchmark_name="dup", columns={}, seeds_file=str(seeds))
        return read_table("query_plan", out / name).row(0, named=True)

    images_path = out / "images.jsonl"
    free = plan("free.jsonl", one_per_duplicate_group=False)
    cats = [c for c in free["candidates"] if c["image_id"] in dup.values()]
    assert len(cats) == 3 and {c["pool"] for c in cats} == {"positive"}  # what the rule is for
    row = plan("plan.jsonl")
    kept = [c for c in row["candidates"] if c["image_id"] in dup.values()]
    assert kept == cats[:1]  # the first member in plan order stays, the copies go
    assert row["candidate_image_ids"] == [c["image_id"] for c in row["candidates"]]
    assert row["difficulty"]["positive"] == free["difficulty"]["positive"] - 2
    short = [s for s in row["shortfall"] if s["pool"] == "positive"]
    assert short and short[0]["got"] == row["difficulty"]["positive"]
    assert "2 candidate(s) removed: shares a duplicate group" in short[0]["reason"]
    # without duplicate_group (an older images.jsonl) or without duplicates: the plan is the same bytes
    images_path = out / "no_groups.jsonl"
    write_table(images.drop("duplicate_group"), "images", images_path)
    plan("a.jsonl")
    images_path = out / "images.jsonl"
    assert (out / "a.jsonl").read_bytes() == (out / "free.jsonl").read_bytes()
    # the summary counts the groups
    c = corpus_profile(images=str(out / "images.jsonl"), annotations=str(out / "annotations.jsonl"),
                       facets=FacetModel.from_config(support.TINY_FACETS), columns={}, block_bytes=2000)
    assert (c.duplicate_groups, c.duplicate_copies) == (1, 2)


def test_threshold_reruns_merge_images_only(tmp_path, tiny_clip):
    """In the workflow: the groups span shards and are decided by merge_images, so changing
    preprocess.near_duplicate_threshold reruns that one job (no per-shard preprocess job)."""
    from benchmaker.config import validate_config

    corpus = support.make_corpus(tmp_path / "images", n_per=1, with_bad=False)
    dup = support.add_duplicates(corpus)
    cfg = support.tiny_config(tmp_path, corpus, tiny_clip, n_shards=3)
    cfg_path = support.write_config(tmp_path / "config.yaml", cfg)
    res = Path(validate_config(cfg)["paths"]["results"]) / "tiny"
    target = str(res / "images.jsonl")
    r = support.snakemake(["-c2", target], tmp_path, cfg_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    g = dict(read_table("images", res / "images.jsonl").select("image_id", "duplicate_group").iter_rows())
    assert {g[i] for i in dup.values()} == {dup["original"]}
    cfg["preprocess"] = {"near_duplicate_threshold": None}
    support.write_config(cfg_path, cfg)
    r = support.snakemake(["-n", "-c1", target], tmp_path, cfg_path)
    assert support.job_stats(r.stdout + r.stderr) == {"merge_images": 1}, (r.stdout + r.stderr)[-3000:]
    r = support.snakemake(["-c1", target], tmp_path, cfg_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    g = dict(read_table("images", res / "images.jsonl").select("image_id", "duplicate_group").iter_rows())
    assert g[dup["copy"]] == dup["original"] and g[dup["resized"]] == dup["resized"]


def test_deepening_counts_a_group_once(tmp_path):
    """#30 item 4: a corpus with a byte copy and a resized copy of a photo (and a second photo with a
    cropped copy, a near-duplicate of another kind) that every evaluated system ranks at the top. The
    planner's pools hold one member per group; deepening (the rules judge, then the merge: deepened
    qrels, deepen/evaluate, leave-one-out) adds no second member of a group to any query."""
    from PIL import Image

    from benchmaker.deepen import label
    from benchmaker.deepen import merge as deepen_merge
    from benchmaker.deepen.pairs import group_extras, read_group_members
    from benchmaker.evaluate.runs import write_run
    from benchmaker.formats import FacetModel
    from benchmaker.judge import run as judge_run
    from benchmaker.plan import run as plan_run
    from benchmaker.queries import run as write_queries

    root, dup = _corpus(tmp_path)
    src = root / "gray" / sorted(p.name for p in (root / "gray").iterdir())[0]
    with Image.open(src) as im:
        w, h = im.size
        im.convert("RGB").crop((1, 1, w - 1, h - 1)).save(root / "dups" / "cropped_gray.jpg", quality=85)
    out = tmp_path / "out"
    run(images=str(out / "images.jsonl"), quarantine=str(out / "q.jsonl"), shards=[str(out / "s.jsonl")],
        image_root=str(root), n_shards=1)
    images = read_table("images", out / "images.jsonl")
    groups = read_group_members(str(out / "images.jsonl"))
    assert groups.height >= 3 and set(dup.values()) <= set(groups["image_id"])
    fm = FacetModel.from_config(support.TINY_FACETS)
    write_table(_annotate(images), "annotations", out / "annotations.jsonl", facets=fm)
    settings = {"core_facets": ["color"], "off_facets": ["color", "shape"], "pos_total": 2, "neutral_total": 0,
                "neg_total": 1, "neg_hard": 0, "neg_nearmiss": 1, "neg_easy": 0, "num_seeds": 4}
    p = {k: str(out / f"{k}.jsonl") for k in ("plan", "qrels", "images", "annotations")}
    plan_run(annotations=p["annotations"], images=p["images"], plan=p["plan"], losses=str(out / "pl.losses"),
             settings=settings, facets=support.TINY_FACETS, benchmark_name="dup", columns={})
    write_queries(plan=p["plan"], annotations=p["annotations"], images=p["images"], queries=str(out / "queries.jsonl"),
                  losses=str(out / "w.losses"), adapter="rules", settings={}, facets=support.TINY_FACETS,
                  image_root=str(root), columns={})
    judge_run(plan=p["plan"], queries=str(out / "queries.jsonl"), annotations=p["annotations"], images=p["images"],
              qrels=p["qrels"], losses=str(out / "j.losses"), adapter="rules", settings={},
              facets=support.TINY_FACETS, image_root=str(root), columns={})
    q = read_table("qrels", p["qrels"])
    assert group_extras(q, groups) == 0
    # every system ranks every member of every group first, then the corpus in its own order
    members = groups.sort("duplicate_group", "image_id")["image_id"].to_list()
    rest = [i for i in sorted(images["image_id"]) if i not in members]
    runs = out / "runs"
    for name, order in (("A", members + rest), ("B", members[::-1] + rest[::-1])):
        rows = [(qid, i, float(100 - n)) for qid in q["query_id"].unique().sort() for n, i in enumerate(order)]
        write_run(pl.DataFrame(rows, schema=["query_id", "image_id", "score"], orient="row"),
                  runs / f"{name}.trec", name)
        (runs / f"{name}.json").write_text(json.dumps({"name": name, "kind": "trec_run", "scopes": ["pool", "corpus"],
                                                       "depth": 100, "sees_judge_text": False}))
    deepen = {"systems": ["A", "B"], "k": 8, "max_pairs": None, "max_usd": None}
    trecs = [str(runs / f"{n}.trec") for n in ("A", "B")]
    for name in ("A", "B"):
        label.run(qrels=p["qrels"], plan=p["plan"], annotations=p["annotations"], images=p["images"], runs=trecs,
                  system=name, labels=str(out / "labels" / f"{name}.jsonl"), losses=str(out / f"{name}.losses"),
                  costs=str(out / f"{name}.costs"), adapter="rules", settings={}, deepen=deepen,
                  facets=support.TINY_FACETS, image_root=str(root), columns={})
    d = out / "deepen"
    ev = {f: str(d / "evaluate" / f) for f in ("leaderboard.csv", "leaderboard.json", "drilldown.csv",
                                                 "significance.csv", "per_query.csv", "sage_leaderboard.csv")}
    kw = dict(qrels=p["qrels"], labels=[str(out / "labels" / f"{n}.jsonl") for n in ("A", "B")], runs=trecs,
              metas=[str(runs / f"{n}.json") for n in ("A", "B")], images=p["images"], annotations=p["annotations"],
              deepened=str(d / "qrels.jsonl"), report_json=str(d / "report.json"), report_csv=str(d / "report.csv"),
              leave_one_out=str(d / "leave_one_out.csv"), leaderboard_csv=ev["leaderboard.csv"],
              leaderboard_json=ev["leaderboard.json"], drilldown=ev["drilldown.csv"],
              significance_csv=ev["significance.csv"], per_query=ev["per_query.csv"],
              sage_leaderboard=ev["sage_leaderboard.csv"], settings={"k": [5]}, deepen=deepen,
              facets=support.TINY_FACETS)
    rep = deepen_merge.run(**kw)
    deep = read_table("deepened_qrels", d / "qrels.jsonl")
    assert deep.filter(pl.col("deepened")).height > 0
    # the systems did bring the copies: without the rule they would have been judged
    assert rep["duplicate_members_skipped"] > 0 and rep["duplicate_members_in_qrels"] == 0
    assert group_extras(deep, groups) == 0   # what deepen/evaluate and leave-one-out score
    # a label for a second member (an older assignment) is refused, never scored twice
    extra = deep.join(groups, on="image_id").join(
        groups.rename({"image_id": "copy"}), on="duplicate_group").filter(pl.col("copy") != pl.col("image_id"))
    lab = read_table("deepen_labels", out / "labels" / "A.jsonl")
    bad = pl.concat([lab, lab.head(1).with_columns(pl.lit(extra["query_id"][0]).alias("query_id"),
                                                   pl.lit(extra["copy"][0]).alias("image_id"))])
    write_table(bad, "deepen_labels", out / "labels" / "A.jsonl")
    with pytest.raises(ValueError, match="duplicate group already has a member"):
        deepen_merge.run(**kw)


def _near_blank_and_colour_variants(root: Path) -> dict[str, list[str]]:
    """#30 item 5's corpus: blank and near-blank images that differ (pHash is degenerate on all of
    them), a red and a green version of one drawing (same grey levels), and true copies of a photo:
    resized, re-encoded, cropped by 1 %. Returns "copies" (one group) and "distinct" (singletons)."""
    from PIL import Image, ImageDraw

    d = root / "item5"
    d.mkdir(parents=True, exist_ok=True)
    made = {}

    def save(name, im):
        im.save(d / name)
        made[name] = f"item5/{name}"

    save("blank.png", Image.new("RGB", (240, 180), "white"))
    faint = Image.new("RGBA", (240, 180), (255, 255, 255, 0))           # faint blue bands, alpha 8/255
    for x in range(0, 240, 20):
        ImageDraw.Draw(faint).rectangle((x, 0, x + 9, 180), fill=(0, 0, 255, 8))
    save("faint_bands.png", faint)
    lines = Image.new("RGBA", (240, 180), (0, 0, 0, 0))                  # semi-transparent red lines
    for x in range(0, 240, 30):
        ImageDraw.Draw(lines).line((x, 0, x, 180), fill=(200, 0, 0, 40), width=3)
    save("semi_lines.png", lines)
    stripes = Image.new("RGB", (240, 180), "white")                     # 1 px stripes: uniform at 32 x 32
    for y in range(0, 180, 2):
        ImageDraw.Draw(stripes).line((0, y, 240, y), fill=(120, 120, 120))
    save("fine_stripes.png", stripes)
    save("tint.png", Image.new("RGB", (240, 180), (250, 246, 255)))
    for name, ink in (("drawing_red.png", (255, 0, 0)), ("drawing_green.png", (0, 128, 0))):  # grey 76 / 75
        im = Image.new("RGB", (240, 180), "white")
        dr = ImageDraw.Draw(im)
        dr.ellipse((20, 20, 120, 120), fill=ink)
        dr.rectangle((140, 60, 220, 160), fill=ink)
        dr.polygon([(30, 170), (90, 130), (130, 170)], fill=ink)
        save(name, im)
    src = support.ROOT / "example" / "images" / "skimage" / "chelsea_cat.jpg"
    with Image.open(src) as im:
        photo = im.convert("RGB")
    w, h = photo.size
    photo.save(d / "cat.jpg", quality=95)
    made["cat.jpg"] = "item5/cat.jpg"
    photo.resize((w // 2, h // 2)).save(d / "cat_resized.jpg", quality=90)
    photo.save(d / "cat_reencoded.jpg", quality=60)
    photo.crop((w // 100, h // 100, w - w // 100, h - h // 100)).save(d / "cat_cropped.jpg", quality=90)
    copies = ["cat.jpg", "cat_resized.jpg", "cat_reencoded.jpg", "cat_cropped.jpg"]
    return {"copies": [f"item5/{n}" for n in copies],
            "distinct": [v for k, v in made.items() if k not in copies]}


def test_groups_hold_real_duplicates_only(tmp_path):
    """#30 item 5: only the true copies are grouped; the blank and near-blank images (all with pHash
    8000000000000000 or within the threshold of it) and the red / green drawings stay apart."""
    from benchmaker.preprocess.duplicates import color_distance, phash_codes, signatures

    root = tmp_path / "images"
    sets = _near_blank_and_colour_variants(root)
    out = tmp_path / "out"
    run(images=str(out / "images.jsonl"), quarantine=str(out / "q.jsonl"), shards=[str(out / "s.jsonl")],
        image_root=str(root), n_shards=1)
    df = read_table("images", out / "images.jsonl")
    group = dict(df.select("image_id", "duplicate_group").iter_rows())
    assert {group[i] for i in sets["copies"]} == {"item5/cat.jpg"}
    assert all(group[i] == i for i in sets["distinct"]), {i: group[i] for i in sets["distinct"]}
    # what pHash alone would have grouped: the near-blank ones hash alike, and so do the two drawings
    codes, _ = phash_codes(df["phash"])
    pos = {i: n for n, i in enumerate(df["image_id"])}
    ph = {i: codes[pos[i]] for i in pos}
    assert {int(ph[f"item5/{n}"]) for n in ("blank.png", "faint_bands.png", "fine_stripes.png", "tint.png")} == {
        0x8000000000000000}
    red, green = ph["item5/drawing_red.png"], ph["item5/drawing_green.png"]
    assert int(np.bitwise_count(red ^ green)) <= 6
    lab, spread, known = signatures(df["color_signature"])
    assert known.all()
    i, j = np.array([pos["item5/drawing_red.png"]]), np.array([pos["item5/drawing_green.png"]])
    assert color_distance(lab, spread, i, j)[0] > 20
