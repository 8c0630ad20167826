"""The power calculator at its edges (docs/trust.md, "Power"): statsmodels' solver gives NaN or stops at a
bound for large standardised differences and for few queries at a small per-pair level; the stated
figures must still be the noncentral-t answer, and bad input to `benchmaker power` one clear error."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from benchmaker.cli import main
from benchmaker.evaluate.power import _power, mdd, power_doc, queries_needed


@pytest.mark.parametrize("sd", [0.001, 0.0025, 0.00625, 0.008, 0.01, 0.04])
@pytest.mark.parametrize("alpha", [0.05, 0.05 / 3, 0.05 / 6])
def test_queries_needed_is_the_smallest_n_that_reaches_the_power(sd, alpha):
    # σ_d 0.00625 and Δ 0.05 (effect 8) made statsmodels return NaN: the evaluate job crashed
    for delta in (0.02, 0.05):
        n = queries_needed(delta, sd, alpha=alpha)
        assert _power(delta / sd, n, alpha) >= 0.8 - 1e-6
        assert n == 2 or _power(delta / sd, n - 1, alpha) < 0.8


def test_power_doc_of_two_almost_identical_systems():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 50)
    rows = [{"scope": "pool", "system": s, "query_id": f"q{q}", "ndcg@10": base[q] + (rng.normal(0, 0.006) if s == "b"
                                                                                      else 0.0)}
            for q in range(50) for s in ("a", "b")]
    doc, _ = power_doc(pl.DataFrame(rows), alpha=0.05, correction="holm", stat_test="student")
    (row,) = doc["rows"]
    # 2 queries reach only ~0.64 power at the effect of 8 for 0.05 (statsmodels said 2, or NaN nearby)
    assert row["queries_needed"] == {"0.02": 3, "0.05": 3}
    assert _power(0.05 / row["sd_diff_median"], 2, 0.05) < 0.8 <= _power(0.05 / row["sd_diff_median"], 3, 0.05)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 10])
@pytest.mark.parametrize("pairs", [1, 45])
def test_mdd_reaches_exactly_the_power(n, pairs):
    # with 45 pairs, 2-4 queries: the solver stopped at its bound (MDD 2.0, 1.1, 0.68 at σ_d 0.2), not monotone
    alpha = 0.05 / pairs
    m = mdd(0.2, n, alpha=alpha)
    assert _power(m / 0.2, n, alpha) == pytest.approx(0.8, abs=1e-5)
    if n > 2:
        assert m < mdd(0.2, n - 1, alpha=alpha)


def test_known_values_unchanged():
    # the noncentral-t solution, rounded up (tests/test_trust.py's values) and the example card's MDD
    assert [queries_needed(d, 1.0, alpha=0.05) for d in (0.5, 0.2, 0.8)] == [34, 199, 15]
    assert mdd(0.181922, 8, alpha=0.05) == pytest.approx(0.210308, abs=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--sd", "-1"], "--sd: the standard deviation"),
    (["--sd", "nan"], "--sd: the standard deviation"),
    (["--sd", "0.2", "--queries", "1"], "--queries: a paired test needs at least 2 queries"),
    (["--sd", "0.2", "--power", "1.5"], "power must be between 0 and 1"),
    (["--sd", "0.2", "--alpha", "0"], "alpha must be between 0 and 1"),
])
def test_power_command_refuses_bad_numbers(args, message, capsys):
    assert main(["power", "--delta", "0.05", *args]) == 1
    assert message in capsys.readouterr().err


def test_power_command_large_difference_and_few_queries(capsys):
    assert main(["power", "--delta", "5", "--sd", "0.2"]) == 0
    assert "a difference of 5 needs 2 queries" in capsys.readouterr().out
    assert main(["power", "--delta", "0.05", "--sd", "0.2", "--systems", "10", "--queries", "3"]) == 0
    out = capsys.readouterr()
    assert "3 queries detect differences of 4.39" in out.out and "detect no difference" in out.out
    assert "ConvergenceWarning" not in out.err
