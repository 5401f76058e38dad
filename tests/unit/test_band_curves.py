"""The ribbons' arithmetic (sim/band_curves.py, issue 31): the band's order-statistic rule point by point, known
answers on hand-made curves, and one probability grid for the drawn CDFs and the ribbons."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import band_curves
from sim.band_curves import CDF_PROBS, pointwise_edges, ribbon
from sim.bands import edges

SIM = Path(__file__).resolve().parents[2] / "sim"

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, width=32)


@st.composite
def curve_sets(draw, nan=False):
    """R curves of n points each (R >= 2), optionally with NaN points."""
    R, n = draw(st.integers(2, 25)), draw(st.integers(1, 12))
    values = st.one_of(finite, st.just(math.nan)) if nan else finite
    return [draw(st.lists(values, min_size=n, max_size=n)) for _ in range(R)]


@settings(max_examples=200, deadline=None)
@given(curve_sets())
def test_with_k_1_the_ribbon_holds_every_curve_point_by_point(curves):
    lo, hi = pointwise_edges(curves, 1)
    a = np.asarray(curves, dtype=float)
    assert (lo <= a).all() and (a <= hi).all()
    np.testing.assert_array_equal(lo, a.min(axis=0))
    np.testing.assert_array_equal(hi, a.max(axis=0))


@settings(max_examples=200, deadline=None)
@given(curve_sets(nan=True), st.data())
def test_each_point_is_the_bands_own_rule(curves, data):
    # sim.bands.edges (a headline figure's band) of each point's R values: [k-th smallest, k-th largest], and
    # no band where a replication lacks the value.
    k = data.draw(st.integers(1, (len(curves) + 1) // 2))
    lo, hi = pointwise_edges(curves, k)
    for j in range(len(curves[0])):
        want = edges([c[j] for c in curves], k)
        if want is None:
            assert math.isnan(lo[j]) and math.isnan(hi[j])
        else:
            assert [lo[j], hi[j]] == want


def test_known_answers_on_hand_made_curves():
    curves = [{"makespan_s": 10.0, "cdf": {"ttft_s": [1.0, 2.0, 3.0]}, "series": {"q": [0.0, 5.0]}},
              {"makespan_s": 12.0, "cdf": {"ttft_s": [2.0, 1.0, 4.0], "e2e_s": [9.0]}, "series": {"q": [1.0, np.nan]}},
              {"makespan_s": 11.0, "cdf": {"ttft_s": [0.5, 3.0, 3.5]}, "series": {"q": [2.0, 4.0]}}]
    band = ribbon(curves, 1)
    assert band["replications"] == 3 and band["k"] == 1 and band["makespan_s"] == (10.0, 12.0)
    assert set(band["cdf"]) == {"ttft_s"}  # e2e_s: one run lacks it
    np.testing.assert_array_equal(band["cdf"]["ttft_s"][0], [0.5, 1.0, 3.0])
    np.testing.assert_array_equal(band["cdf"]["ttft_s"][1], [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(band["series"]["q"][0], [0.0, np.nan])  # a point one run lacks: no band
    np.testing.assert_array_equal(band["series"]["q"][1], [2.0, np.nan])
    median = ribbon(curves, 2)  # k = 2 of 3: both edges the median
    np.testing.assert_array_equal(median["cdf"]["ttft_s"][0], [1.0, 2.0, 3.5])
    np.testing.assert_array_equal(median["cdf"]["ttft_s"][1], [1.0, 2.0, 3.5])
    # two edge runs (run.band_method: edges): k = 1, their min and max
    two = ribbon(curves[:2], 1)
    np.testing.assert_array_equal(two["cdf"]["ttft_s"][0], [1.0, 1.0, 3.0])
    np.testing.assert_array_equal(two["cdf"]["ttft_s"][1], [2.0, 2.0, 4.0])
    for k in (0, 3):
        with pytest.raises(ValueError, match="allowed: 1 <= k <= 2"):
            ribbon(curves, k)


def test_the_cdf_grid_is_one_definition():
    from sim.views import charts
    assert charts.CDF_PROBS is CDF_PROBS and charts.CDF_POINTS == band_curves.CDF_POINTS
    assert charts.time_bins is band_curves.time_bins and charts.TIME_BINS == band_curves.TIME_BINS
    # a drawn CDF of more than CDF_POINTS values is read at the ribbons' probabilities
    values = np.random.default_rng(5).lognormal(size=5000)
    x, y = charts.cdf_points(values)
    np.testing.assert_array_equal(y, np.maximum(CDF_PROBS, 1 / len(values)).astype(np.float32))
    np.testing.assert_array_equal(x, band_curves.cdf_quantiles(values).astype(np.float32))
    assert CDF_PROBS[0] == 0 and CDF_PROBS[-1] == 1 and (np.diff(CDF_PROBS) > 0).all()
    assert len(CDF_PROBS) <= band_curves.CDF_POINTS + 1
    # no other module under sim/ assigns a grid of its own
    for path in SIM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                assert not names & {"CDF_POINTS", "CDF_PROBS", "TIME_BINS"} or path.name == "band_curves.py", path
