"""Each arrival spec owns its rate: `mean_rate_per_s` and `with_rate` agree, and the generator honours them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.workload.arrivals import ARRIVAL_KINDS, RATE_KINDS, ClosedLoopArrival
from sim.workload.generate import WorkloadSpec, generate_workload

FIXED = {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}
SYNTHETIC = {
    "poisson": {"kind": "poisson", "rate_per_s": 4.0},
    "gamma": {"kind": "gamma", "rate_per_s": 4.0, "cv": 3.0},
    "constant": {"kind": "constant", "rate_per_s": 4.0},
    "schedule": {"kind": "schedule", "steps": [{"duration_s": 10, "rate_per_s": 2}, {"duration_s": 5, "rate_per_s": 0},
                                               {"duration_s": 25, "rate_per_s": 7}]},
    "diurnal": {"kind": "diurnal", "mean_rate_per_s": 4.0, "amplitude": 0.8, "period_s": 20, "phase_s": 3},
}
RATES = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    """A bursty Mooncake-style trace: 400 gamma gaps (CV 2), timestamps in ms."""
    gaps_ms = np.random.default_rng(1).gamma(0.25, 400.0, 399)
    times_ms = np.concatenate(([0.0], np.cumsum(gaps_ms))).round(3)
    path = tmp_path_factory.mktemp("trace") / "bursty.jsonl"
    rows = [{"timestamp": float(t), "input_length": 100, "output_length": 10, "hash_ids": [1]} for t in times_ms]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def arrival(raw: dict):
    lengths = None if raw["kind"] == "trace" else FIXED
    return WorkloadSpec.model_validate({"arrival": raw, "lengths": lengths}).arrival


def test_every_kind_is_covered_and_only_closed_loop_and_burst_have_no_rate():
    assert set(ARRIVAL_KINDS) == set(SYNTHETIC) | {"trace", "closed_loop", "burst"}
    assert set(RATE_KINDS) == set(ARRIVAL_KINDS) - {"closed_loop", "burst"}


@pytest.mark.parametrize("kind", list(SYNTHETIC))
@settings(max_examples=40, deadline=None)
@given(rate=RATES)
def test_with_rate_sets_the_mean_rate_of_each_synthetic_kind(kind, rate):
    moved = arrival(SYNTHETIC[kind]).with_rate(rate)
    assert moved.kind == kind
    assert moved.mean_rate_per_s == pytest.approx(rate, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(rate=RATES, time_scale=st.floats(min_value=0.1, max_value=10))
def test_with_rate_on_a_trace_rescales_it_whatever_its_time_scale(trace_path, rate, time_scale):
    spec = arrival({"kind": "trace", "path": str(trace_path), "time_scale": time_scale})
    moved = spec.with_rate(rate)
    assert moved.mean_rate_per_s == rate and moved.time_scale == 1.0


def test_a_trace_at_its_own_pace_reports_its_recorded_rate_over_time_scale(trace_path):
    times_s = np.array([json.loads(line)["timestamp"] for line in trace_path.read_text().splitlines()]) / 1000
    recorded = (len(times_s) - 1) / (times_s[-1] - times_s[0])
    assert arrival({"kind": "trace", "path": str(trace_path)}).mean_rate_per_s == pytest.approx(recorded, rel=1e-12)
    slowed = arrival({"kind": "trace", "path": str(trace_path), "time_scale": 4.0})
    assert slowed.mean_rate_per_s == pytest.approx(recorded / 4, rel=1e-12)


def test_schedules_scale_every_step_and_keep_their_shape():
    moved = arrival(SYNTHETIC["schedule"]).with_rate(10.0)
    original = arrival(SYNTHETIC["schedule"])
    ratios = [m.rate_per_s / o.rate_per_s for m, o in zip(moved.steps, original.steps) if o.rate_per_s]
    assert ratios == pytest.approx([10 / original.mean_rate_per_s] * 2)
    assert [s.duration_s for s in moved.steps] == [s.duration_s for s in original.steps]
    assert moved.steps[1].rate_per_s == 0 and moved.repeat is original.repeat


def test_diurnal_keeps_its_swing_as_a_fraction_of_the_mean():
    moved = arrival(SYNTHETIC["diurnal"]).with_rate(1.5)
    assert (moved.mean_rate_per_s, moved.amplitude, moved.period_s, moved.phase_s) == (1.5, 0.8, 20, 3)


def test_closed_loop_has_no_rate_and_says_why():
    spec = ClosedLoopArrival(num_users=4, think_time_s=1.0)
    assert not spec.has_rate
    with pytest.raises(ConfigError, match=r"^workload\.arrival\.kind: 'closed_loop' has no arrival rate .*allowed"):
        spec.mean_rate_per_s
    with pytest.raises(ConfigError, match="closed_loop"):
        spec.with_rate(3.0)


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "3"])
def test_with_rate_refuses_a_rate_that_is_not_a_positive_number(bad):
    with pytest.raises(ConfigError, match=r"^rate: .* is not allowed; allowed: a positive number"):
        arrival(SYNTHETIC["poisson"]).with_rate(bad)


@pytest.mark.parametrize("kind", list(SYNTHETIC))
def test_generated_arrivals_run_at_the_mean_rate(kind):
    """Known answer within sampling error: over 100 periods of 40 s (the schedule's, twice the diurnal's),
    the count is within 5 standard deviations of rate x duration (a renewal count has variance ~ cv^2 N)."""
    spec = arrival(SYNTHETIC[kind]).with_rate(6.0)
    duration_s = 4000.0
    workload = generate_workload(WorkloadSpec(arrival=spec, lengths=FIXED), seed=5, num_requests=None,
                                 duration_s=duration_s, max_context=1 << 20)
    expected = spec.mean_rate_per_s * duration_s
    cv = getattr(spec, "cv", 1.0) if kind != "constant" else 0.0
    assert abs(workload.num_requests - expected) <= 5 * max(cv, 0.05) * math.sqrt(expected) + 1


def test_a_replayed_trace_runs_exactly_at_the_rate_it_was_given(trace_path):
    spec = arrival({"kind": "trace", "path": str(trace_path), "time_scale": 3.0}).with_rate(2.5)
    workload = generate_workload(WorkloadSpec(arrival=spec), seed=0, num_requests=None, duration_s=1e9,
                                 max_context=1 << 20)
    times = workload.arrival_s
    assert (len(times) - 1) / (times[-1] - times[0]) == pytest.approx(2.5, rel=1e-9)
