"""Config loading: defaults, unknown keys named by path, cross-key checks, the example config."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from benchmaker.config import ConfigError, load_config, results_dir, validate_config

ROOT = Path(__file__).resolve().parents[1]


def minimal():
    return {
        "benchmark": {"name": "b1"},
        "paths": {"image_root": "imgs"},
        "facets": {"taxonomy": {"kind": ["a", "b"]}},
        "plan": {"neg_total": 3, "neg_hard": 1, "neg_nearmiss": 1, "neg_easy": 1},
    }


def test_example_config_loads_and_fills_defaults():
    cfg = load_config(ROOT / "config" / "config.yaml")
    assert cfg["vision"]["adapter"] == "clip"
    assert cfg["judge"]["adapter"] == "rules"
    assert cfg["columns"]["query_id"] == "query_id"
    assert cfg["similarity"]["batch_size"] >= 1
    assert results_dir(cfg).endswith(cfg["benchmark"]["name"])


def test_defaults_filled_in_nested_refs():
    cfg = validate_config(minimal())
    assert cfg["vision"]["openai"]["mode"] == "batch"
    assert cfg["vision"]["openai"]["api_key_env"] == "OPENAI_API_KEY"
    assert cfg["judge"]["rules"]["relevant_min_jaccard"] == 0.25
    assert cfg["n_shards"] == 1
    assert cfg["columns"]["relevance_label"] == "relevance_label"


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda c: c["plan"].__setitem__("neg_totl", 3), "plan.neg_totl"),
        (lambda c: c.__setitem__("visoin", {}), "visoin"),
        (lambda c: c.setdefault("judge", {}).setdefault("rules", {}).__setitem__("thresh", 1),
         "judge.rules.thresh"),
        (lambda c: c.setdefault("vision", {}).setdefault("openai", {}).__setitem__("api_key", "sk-x"),
         "vision.openai.api_key"),
    ],
)
def test_unknown_keys_are_named_with_their_path(mutate, needle):
    cfg = minimal()
    mutate(cfg)
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg)
    assert needle in str(exc.value)


def test_type_errors_name_the_key():
    cfg = minimal()
    cfg["n_shards"] = "four"
    with pytest.raises(ConfigError, match="n_shards"):
        validate_config(cfg)


def test_quota_sum_checked():
    cfg = minimal()
    cfg["plan"]["neg_total"] = 5
    with pytest.raises(ConfigError, match="plan.neg_total"):
        validate_config(cfg)


def test_deepen_systems_checked_when_the_config_is_validated():
    # `benchmaker validate-config` said "valid" and only `snakemake -n` refused an unknown deepen system
    cfg = minimal()
    cfg["evaluate"] = {"systems": [{"name": "bm25", "kind": "bm25"}]}
    cfg["deepen"] = {"enabled": True, "systems": ["zz"]}
    with pytest.raises(ConfigError, match=r"deepen.systems\[0\]: 'zz' is not an evaluate system"):
        validate_config(cfg)
    cfg["evaluate"] = {"systems": []}
    cfg["deepen"] = {"enabled": True}
    with pytest.raises(ConfigError, match="deepen.enabled: true needs at least one corpus-ranked system"):
        validate_config(cfg)
    cfg["evaluate"] = {"systems": [{"name": "bm25", "kind": "bm25"}]}
    assert validate_config(cfg)["deepen"]["enabled"] is True


def test_compare_metrics_checked_when_the_config_is_validated():
    # evaluate.compare.metrics took any name: a typo or a cutoff evaluate.k does not compute compared and
    # gated nothing (no column of per_query.csv has that name) and the comparison said "no regression"
    cfg = minimal()
    cfg["evaluate"] = {"k": [10, 20], "compare": {"metrics": ["ndcg@10", "mapp", "ndcg@5", "judged@20", "ndcg@010",
                                                              "diversity@10", "mrr", "recall@20"]}}
    with pytest.raises(ConfigError) as e:
        validate_config(cfg)
    bad = [line for line in str(e.value).splitlines() if "evaluate.compare.metrics" in line]
    assert len(bad) == 3, bad
    assert "'mapp' is not a metric" in bad[0] and "diversity@k, judged@k" in bad[0]
    assert "'ndcg@5'" in bad[1] and "evaluate.k is [10, 20]" in bad[1] and "add 5 to evaluate.k" in bad[1]
    assert "'ndcg@010'" in bad[2] and "ndcg@10" in bad[2]
    cfg["evaluate"]["compare"]["metrics"] = ["ndcg@10", "judged@20", "diversity@10", "map", "hit_rate@20"]
    assert validate_config(cfg)["evaluate"]["compare"]["metrics"][1] == "judged@20"


@pytest.mark.parametrize("hybrid, needle", [
    ({"method": "rrff"}, r"systems\[2\].method: 'rrff' is not a ranx fusion method .*rrf, .*wsum"),
    ({"method": "probfuse"}, r"systems\[2\].method: 'probfuse' needs parameters trained on judged queries"),
    ({"method": "wsum"}, r"systems\[2\].weights: method 'wsum' needs one weight per fused system"),
    ({"method": "rrf", "weights": [0.3, 0.7]}, r"systems\[2\].weights: method 'rrf' takes no weights .*wsum"),
    ({"norm": "minmax"}, r"systems\[2\].norm: 'minmax' is not a ranx normalisation .*min-max"),
])
def test_hybrid_fusion_checked_when_the_config_is_validated(hybrid, needle):
    # validate-config passed these and the hybrid's evaluate job failed in ranx.fuse (ValueError: not supported,
    # TypeError: missing 'weights' / unexpected 'weights'), after every system it fuses had run
    cfg = minimal()
    fused = {"name": "fused", "kind": "hybrid", "systems": ["a", "b"], **hybrid}
    cfg["evaluate"] = {"systems": [{"name": "a", "kind": "bm25"}, {"name": "b", "kind": "bm25", "k1": 1.0}, fused]}
    with pytest.raises(ConfigError, match=needle):
        validate_config(cfg)
    for ok in ({}, {"method": "wsum", "norm": "min-max", "weights": [0.3, 0.7]}, {"method": "sum", "norm": "zmuv"}):
        cfg["evaluate"]["systems"][2] = {"name": "fused", "kind": "hybrid", "systems": ["a", "b"], **ok}
        assert validate_config(cfg)["evaluate"]["systems"][2]["kind"] == "hybrid"


def test_bm25_fields_checked_when_the_config_is_validated():
    # a bm25 field that is no annotations column passed validate-config and failed the bm25 evaluate job
    # (FormatError), after upstream and the other systems ran
    cfg = minimal()
    cfg["evaluate"] = {"systems": [{"name": "b", "kind": "bm25", "fields": ["summary", "caption", "kind"]}]}
    with pytest.raises(ConfigError, match=r"evaluate.systems\[0\].fields: 'caption' is not a text column of "
                                          r"annotations.jsonl \(summary, tags, annotator, kind\)"):
        validate_config(cfg)
    cfg["evaluate"]["systems"][0]["fields"] = ["summary", "tags", "kind"]
    assert validate_config(cfg)["evaluate"]["systems"][0]["fields"] == ["summary", "tags", "kind"]


def test_metadata_facet_columns_checked_when_the_config_is_validated():
    # a facet_columns key that is no facet passed validate-config and failed every vision job of the metadata
    # adapter (benchmaker.vision.metadata's ValueError), after preprocess
    cfg = minimal()
    cfg["vision"] = {"adapter": "metadata", "metadata": {"facet_columns": {"kinds": "label_kind"}}}
    with pytest.raises(ConfigError, match=r"vision.metadata.facet_columns: 'kinds' is not a facet \(facets: kind\)"):
        validate_config(cfg)
    cfg["vision"]["metadata"]["facet_columns"] = {"kind": "label_kind"}
    assert validate_config(cfg)["vision"]["metadata"]["facet_columns"] == {"kind": "label_kind"}


@pytest.mark.parametrize("split", ["val-1", "my split", "../test", ""])
def test_export_split_is_a_name_datasets_loads(split):
    # any string passed: the dataset was published with data/<split>-*.parquet and a card whose split
    # datasets.load_dataset refuses ("Split name should match '^\\w+(\\.\\w+)*$'"), ../x written outside data/
    cfg = minimal()
    cfg["export"] = {"split": split}
    with pytest.raises(ConfigError, match=r"export.split: .* does not match .*Hugging Face datasets split name"):
        validate_config(cfg)
    cfg["export"] = {"split": "dev.v2"}
    assert validate_config(cfg)["export"]["split"] == "dev.v2"


@pytest.mark.parametrize("where", ["similarity", "vision.clip", "evaluate.systems.0"])
def test_device_is_a_torch_device_name(where):
    # any string passed (the schema said "auto | cuda | mps | cpu | cuda:N" in words only): device: gpu failed the
    # first model job in torch ("Expected one of cpu, cuda, ...") after preprocess and decode_images ran
    cfg = minimal()
    cfg["evaluate"] = {"systems": [{"name": "c", "kind": "clip", "model": "ViT-B-32"}]}
    node = {"similarity": cfg.setdefault("similarity", {}), "vision.clip": cfg.setdefault("vision", {}).setdefault(
        "clip", {}), "evaluate.systems.0": cfg["evaluate"]["systems"][0]}[where]
    node["device"] = "gpu"
    with pytest.raises(ConfigError, match=rf"{where}.device: 'gpu' does not match .*auto, cpu, mps, cuda or cuda:N"):
        validate_config(cfg)
    for ok in ("auto", "cpu", "cuda", "cuda:1", "mps", "CUDA:0"):
        node["device"] = ok
        validate_config(cfg)


def test_plan_facets_must_exist():
    cfg = minimal()
    cfg["plan"]["core_facets"] = ["nope"]
    with pytest.raises(ConfigError, match="plan.core_facets: 'nope'"):
        validate_config(cfg)


def test_facet_name_may_not_shadow_a_column():
    cfg = minimal()
    cfg["facets"]["boolean"] = ["summary"]
    with pytest.raises(ConfigError, match="summary"):
        validate_config(cfg)


def test_duplicate_column_names_rejected():
    cfg = minimal()
    cfg["columns"] = {"query_id": "qid", "image_id": "qid"}
    with pytest.raises(ConfigError, match="columns.image_id"):
        validate_config(cfg)


def test_tags_min_max():
    cfg = minimal()
    cfg["facets"]["tags"] = {"min": 5, "max": 2, "vocabulary": ["a", "b", "c", "d", "e", "f"]}
    with pytest.raises(ConfigError, match="facets.tags.min"):
        validate_config(cfg)


def test_validate_does_not_mutate_input_and_is_idempotent():
    raw = minimal()
    before = copy.deepcopy(raw)
    once = validate_config(raw)
    assert raw == before
    assert validate_config(once) == once


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("benchmark: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_schema_file_is_the_packaged_one():
    from benchmaker.config import load_schema

    assert load_schema() == yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())


def test_a_moved_key_is_named_with_its_new_place_and_value():
    from benchmaker.config import ConfigError, validate_config

    with pytest.raises(ConfigError, match=r"judge.rules.query_tags was retired: moved to queries.rules.query_tags"
                                          r".*write `queries.rules.query_tags: 3`"):
        validate_config({"judge": {"rules": {"query_tags": 3}}})
