"""The inter-token latency's weighted percentiles: the bucketed search finds what sorting every value finds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim import results


def sorted_reference(values, weights, qs):
    """The definition: the smallest value whose cumulative weight, values in increasing order, reaches q%."""
    pairs = sorted((v, w) for v, w in zip(values.tolist(), weights.tolist()) if w > 0)
    total = sum(w for _, w in pairs)
    out = []
    for q in qs:
        running = 0
        for v, w in pairs:
            running += w
            if running >= q / 100.0 * total:
                out.append(v)
                break
        else:
            out.append(pairs[-1][0])
    return out


QS = (0, 0.5, 50, 90, 99, 99.9, 100)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.sampled_from([0.001, 0.002, 0.0025, 0.01, 0.05, 0.3, 1.0, 7.5]) | st.floats(0, 10),
                       min_size=1, max_size=60),
       data=st.data(), buckets=st.integers(2, 9))
def test_the_bucketed_search_finds_the_sorted_value(values, data, buckets, monkeypatch_module):
    values = np.asarray(values, dtype=float)
    weights = np.asarray(data.draw(st.lists(st.integers(0, 40), min_size=len(values), max_size=len(values))))
    monkeypatch_module.setattr(results, "BUCKETED_ABOVE", 0)  # every call takes the bucketed search
    monkeypatch_module.setattr(results, "PERCENTILE_BUCKETS", buckets)
    found = results.weighted_percentiles(values, weights, QS)
    if weights.sum() == 0:
        assert all(np.isnan(found))
    else:
        assert found == sorted_reference(values, weights, QS)


def test_fractional_weights_and_equal_values_take_the_sort(monkeypatch):
    monkeypatch.setattr(results, "BUCKETED_ABOVE", 0)
    values = np.array([0.3, 0.1, 0.2, 0.4])
    assert results.weighted_percentiles(values, np.array([0.5, 0.25, 0.25, 1.0]), (50, 25)) == [0.3, 0.2]
    assert results.weighted_percentiles(np.full(5, 0.2), np.arange(5), (1, 99)) == [0.2, 0.2]


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp
