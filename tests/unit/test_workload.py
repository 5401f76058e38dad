"""Workload generation: arrival rates and burstiness, length distributions, seeding, clipping, replay."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sim.errors import ConfigError, TraceError
from sim.workload.arrivals import ClosedLoopArrival
from sim.workload.generate import Workload, WorkloadSpec, generate_workload, summarize
from sim.workload.lengths import (SHAREGPT_BENCH_FILTER, SHAREGPT_FIRST_TURNS, LognormalLengths, kept_lognormal_mus,
                                  kept_pairs)

TRACES = Path(__file__).parents[3] / "shared" / "traces"
FIXED = {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}


def spec(arrival: dict, lengths: dict | None = FIXED) -> WorkloadSpec:
    return WorkloadSpec.model_validate({"arrival": arrival, "lengths": lengths})


def generate(s: WorkloadSpec, *, seed=0, num_requests=None, duration_s=None, max_context=1 << 20) -> Workload:
    return generate_workload(s, seed=seed, num_requests=num_requests, duration_s=duration_s, max_context=max_context)


def _shared(name: str) -> Path:
    path = TRACES / name
    if not path.is_file():
        pytest.skip(f"shared trace {path} is not available")
    return path


# --------------------------------------------------------------------------------------------------
# Arrival processes


def test_poisson_rate_and_cv():
    stats = summarize(generate(spec({"kind": "poisson", "rate_per_s": 20}), num_requests=200_000))
    assert stats["mean_rate_per_s"] == pytest.approx(20, rel=0.01)
    assert stats["interarrival_cv"] == pytest.approx(1.0, rel=0.02)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_cv_as_asked(cv):
    stats = summarize(generate(spec({"kind": "gamma", "rate_per_s": 5, "cv": cv}), num_requests=200_000))
    assert stats["mean_rate_per_s"] == pytest.approx(5, rel=0.02)
    assert stats["interarrival_cv"] == pytest.approx(cv, rel=0.03)


def test_constant_is_exactly_regular():
    w = generate(spec({"kind": "constant", "rate_per_s": 4}), duration_s=10)
    np.testing.assert_allclose(w.arrival_s, np.arange(1, 40) / 4)  # [0, 10): 0.25 ... 9.75
    stats = summarize(w)
    assert stats["mean_rate_per_s"] == pytest.approx(4) and stats["interarrival_cv"] == pytest.approx(0, abs=1e-9)


def test_schedule_follows_each_step_rate():
    steps = [
        {"duration_s": 10, "rate_per_s": 2},
        {"duration_s": 20, "rate_per_s": 10},
        {"duration_s": 5, "rate_per_s": 0},
    ]
    w = generate(spec({"kind": "schedule", "steps": steps}), duration_s=35 * 400)
    phase = w.arrival_s % 35
    assert np.mean(phase < 10) * len(phase) / (10 * 400) == pytest.approx(2, rel=0.03)
    assert np.mean((phase >= 10) & (phase < 30)) * len(phase) / (20 * 400) == pytest.approx(10, rel=0.03)
    assert not np.any(phase >= 30)  # the zero-rate step gets nothing
    assert w.arrival_s.max() < 35 * 400


def test_schedule_without_repeat_holds_or_ends():
    ramp = [{"duration_s": 100, "rate_per_s": 1}, {"duration_s": 100, "rate_per_s": 5}]
    w = generate(spec({"kind": "schedule", "steps": ramp, "repeat": False}), duration_s=10_200)
    late = w.arrival_s[w.arrival_s >= 200]
    assert len(late) / 10_000 == pytest.approx(5, rel=0.03)  # the last rate holds after the schedule
    burst = [{"duration_s": 100, "rate_per_s": 3}, {"duration_s": 1, "rate_per_s": 0}]
    w = generate(spec({"kind": "schedule", "steps": burst, "repeat": False}), num_requests=10_000)
    assert 200 < w.num_requests < 400 and w.arrival_s.max() < 100  # ends with the schedule


def test_diurnal_mean_rate_and_swing():
    period = 1000.0
    w = generate(
        spec({"kind": "diurnal", "mean_rate_per_s": 5, "amplitude": 0.8, "period_s": period}), duration_s=100 * period
    )
    assert w.num_requests / (100 * period) == pytest.approx(5, rel=0.02)
    phase = (w.arrival_s % period) / period
    rising, falling = np.sum(phase < 0.5), np.sum(phase >= 0.5)  # sin > 0 on the first half-period
    # Half-period means: 5 * (1 +/- 0.8 * 2/pi).
    assert rising / falling == pytest.approx((1 + 1.6 / np.pi) / (1 - 1.6 / np.pi), rel=0.03)


def test_num_requests_and_duration_whichever_ends_first():
    poisson = spec({"kind": "poisson", "rate_per_s": 10})
    assert generate(poisson, num_requests=50, duration_s=1000).num_requests == 50
    short = generate(poisson, num_requests=10_000, duration_s=10)
    assert 50 < short.num_requests < 150 and short.arrival_s.max() < 10
    only_duration = generate(poisson, duration_s=10)
    np.testing.assert_array_equal(short.arrival_s, only_duration.arrival_s)


# --------------------------------------------------------------------------------------------------
# Seeds


def test_same_seed_same_workload_and_different_seed_differs():
    s = spec({"kind": "gamma", "rate_per_s": 3, "cv": 2}, {"kind": "preset", "name": "sharegpt"})
    a, b, c = (generate(s, seed=seed, num_requests=1000) for seed in (7, 7, 8))
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.input_tokens, b.input_tokens)
    assert not np.array_equal(a.arrival_s, c.arrival_s) and not np.array_equal(a.input_tokens, c.input_tokens)


def test_lengths_do_not_depend_on_the_arrival_process():
    lengths = {"kind": "lognormal", "input_mean": 500, "input_sigma": 1, "output_mean": 100, "output_sigma": 0.5}
    poisson = generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), seed=3, num_requests=500)
    diurnal_arrival = {"kind": "diurnal", "mean_rate_per_s": 9, "amplitude": 0.5, "period_s": 60}
    diurnal = generate(spec(diurnal_arrival, lengths), seed=3, num_requests=500)
    np.testing.assert_array_equal(poisson.input_tokens, diurnal.input_tokens)
    np.testing.assert_array_equal(poisson.output_tokens, diurnal.output_tokens)


@pytest.mark.parametrize(
    "arrival",
    [
        {"kind": "poisson", "rate_per_s": 5},
        {"kind": "diurnal", "mean_rate_per_s": 5, "amplitude": 0.9, "period_s": 30},
        {"kind": "schedule", "steps": [{"duration_s": 3, "rate_per_s": 0}, {"duration_s": 2, "rate_per_s": 9}]},
    ],
)
def test_more_requests_extend_the_same_workload(arrival):
    s = spec(arrival, {"kind": "uniform", "input_min": 1, "input_max": 900, "output_min": 5, "output_max": 50})
    small, large = generate(s, seed=11, num_requests=300), generate(s, seed=11, num_requests=5000)
    np.testing.assert_array_equal(small.arrival_s, large.arrival_s[:300])
    np.testing.assert_array_equal(small.output_tokens, large.output_tokens[:300])


# --------------------------------------------------------------------------------------------------
# Lengths


def test_lengths_are_clipped_to_the_context():
    huge = {"kind": "lognormal", "input_mean": 3000, "input_sigma": 1.5, "output_mean": 2000, "output_sigma": 1.5}
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, huge), num_requests=20_000, max_context=4096)
    assert w.input_tokens.min() >= 1 and w.input_tokens.max() == 4095
    assert w.output_tokens.min() >= 1 and np.all(w.input_tokens + w.output_tokens <= 4096)
    assert w.input_tokens.dtype == np.int64 and w.output_tokens.dtype == np.int64


def test_lognormal_means():
    lengths = {"kind": "lognormal", "input_mean": 800, "input_sigma": 1.0, "output_mean": 120, "output_sigma": 0.7}
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), num_requests=400_000)
    assert w.input_tokens.mean() == pytest.approx(800, rel=0.02)
    assert w.output_tokens.mean() == pytest.approx(120, rel=0.02)


@pytest.mark.parametrize("name, means", [("sharegpt", (161.31, 337.99)), ("alpaca", (19.31, 58.45))])
def test_preset_means_match_the_vllm_paper(name, means):
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, {"kind": "preset", "name": name}), num_requests=400_000)
    assert w.input_tokens.mean() == pytest.approx(means[0], rel=0.02)
    assert w.output_tokens.mean() == pytest.approx(means[1], rel=0.02)


# A ShareGPT-like lognormal kept by the benchmark client's filter, at a published client's kept means
SHAREGPT_LIKE = {"kind": "lognormal", "input_mean": 217.393, "input_sigma": 1.0, "output_mean": 201.648,
                 "output_sigma": 0.9, **SHAREGPT_BENCH_FILTER}


def test_a_filtered_lognormal_keeps_only_what_the_client_keeps_at_the_asked_means():
    # vLLM's ShareGPT sampler keeps prompt and output >= 4 tokens, prompt <= 1024, both <= 2048 (SHAREGPT_BENCH_FILTER)
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, SHAREGPT_LIKE), num_requests=400_000)
    x, y = w.input_tokens, w.output_tokens
    assert x.min() >= 4 and y.min() >= 4 and x.max() <= 1024 and (x + y).max() <= 2048
    assert x.max() > 900 and (x + y).max() > 1900  # the filter's bounds are reached, not a narrower shape
    assert x.mean() == pytest.approx(217.393, rel=0.01) and y.mean() == pytest.approx(201.648, rel=0.01)
    # the means are solved for: the lognormals at the asked means keep requests 13% / 2% shorter on average
    mu_in, mu_out, kept_share = kept_lognormal_mus(LognormalLengths.model_validate(SHAREGPT_LIKE))
    assert mu_in > math.log(217.393) - 1.0**2 / 2 + 0.1 and mu_out > math.log(201.648) - 0.9**2 / 2 + 0.01
    assert 0.9 < kept_share < 1.0


def test_a_filter_that_cuts_nothing_leaves_the_lognormal_as_it_was():
    # Known answers: sigma 0 is a point inside the bounds; bounds far in the tails keep mu = ln(mean) - sigma^2 / 2.
    point = LognormalLengths(input_mean=100, input_sigma=0, output_mean=50, output_sigma=0, **SHAREGPT_BENCH_FILTER)
    assert kept_lognormal_mus(point) == (pytest.approx(math.log(100)), pytest.approx(math.log(50)), 1.0)
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, point.model_dump()), num_requests=50)
    assert set(w.input_tokens) == {100} and set(w.output_tokens) == {50}
    wide = LognormalLengths(input_mean=100, input_sigma=0.5, output_mean=50, output_sigma=0.5, min_tokens=1,
                            total_max=10**7)
    mu_in, mu_out, kept_share = kept_lognormal_mus(wide)
    assert (mu_in, mu_out) == (pytest.approx(math.log(100) - 0.125, abs=1e-4),
                               pytest.approx(math.log(50) - 0.125, abs=1e-4))
    assert kept_share == pytest.approx(1.0)


def test_a_sigma_of_minus_zero_is_a_sigma_of_zero():
    # -0.0 passes the schema's sigma >= 0; numpy's lognormal refuses it: the sampler reads it as 0 (hypothesis
    # found it, tests/integration/test_no_traceback.py)
    lengths = {"kind": "lognormal", "input_mean": 100, "input_sigma": -0.0, "output_mean": 50, "output_sigma": -0.0}
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), num_requests=5)
    assert w.input_tokens.tolist() == [100] * 5 and w.output_tokens.tolist() == [50] * 5


def test_a_filtered_lognormal_is_the_same_for_the_same_seed():
    s = spec({"kind": "poisson", "rate_per_s": 1}, SHAREGPT_LIKE)
    a, b, c = generate(s, seed=3, num_requests=5000), generate(s, seed=3, num_requests=5000), generate(
        s, seed=4, num_requests=5000)
    np.testing.assert_array_equal(a.input_tokens, b.input_tokens)
    np.testing.assert_array_equal(a.output_tokens, b.output_tokens)
    assert not np.array_equal(a.output_tokens, c.output_tokens)


def _table() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(SHAREGPT_FIRST_TURNS, dtype=np.int64, delimiter=",", skiprows=1)
    return table[:, 0], table[:, 1]


def test_sharegpt_bench_draws_the_datasets_own_pairs_that_the_client_keeps():
    # Known answer: a draw of as many requests as the filter keeps is the kept table itself, shuffled, pairs intact
    x, y = _table()
    keep = (x >= 4) & (y >= 4) & (x <= 1024) & (x + y <= 2048)
    assert (len(x), keep.sum()) == (17_400, 15_822)  # the table data/README.md describes
    for lengths in ({"kind": "preset", "name": "sharegpt_bench"}, {"kind": "dataset", "name": "sharegpt"}):
        w = generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), num_requests=int(keep.sum()))
        drawn = sorted(zip(w.input_tokens.tolist(), w.output_tokens.tolist()))
        assert drawn == sorted(zip(x[keep].tolist(), y[keep].tolist()))
        assert not np.array_equal(w.input_tokens, x[keep])  # shuffled, not the file's order
    # twice the table: each kept pair exactly twice (a new shuffle for the second pass)
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, {"kind": "dataset"}), num_requests=2 * int(keep.sum()))
    pairs, counts = np.unique(np.stack([w.input_tokens, w.output_tokens]), axis=1, return_counts=True)
    kept_pairs, kept_counts = np.unique(np.stack([x[keep], y[keep]]), axis=1, return_counts=True)
    np.testing.assert_array_equal(pairs, kept_pairs)
    np.testing.assert_array_equal(counts, 2 * kept_counts)


def test_a_dataset_scaled_to_other_means_keeps_its_shape_at_those_means():
    x, y = kept_pairs("sharegpt")
    n = len(x)
    lengths = {"kind": "dataset", "name": "sharegpt", "input_mean": 2 * x.mean(), "output_mean": y.mean() / 2}
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), seed=5, num_requests=n)
    # every length doubled (exact) or halved (rounded to even, at least 1): the whole table at exactly those means
    assert sorted(w.input_tokens.tolist()) == sorted((2 * x).tolist())
    assert sorted(w.output_tokens.tolist()) == sorted(np.maximum(1, np.rint(y / 2)).astype(int).tolist())
    assert w.input_tokens.mean() == pytest.approx(2 * x.mean(), rel=1e-12)
    assert abs(w.output_tokens.mean() - y.mean() / 2) < 0.5
    a = generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), seed=5, num_requests=100)
    b = generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), seed=6, num_requests=100)
    np.testing.assert_array_equal(a.input_tokens, w.input_tokens[:100])  # the same seed, the same draws
    assert not np.array_equal(a.input_tokens, b.input_tokens)
    with pytest.raises(ValidationError, match="input_mean"):
        spec({"kind": "poisson", "rate_per_s": 1}, {"kind": "dataset", "input_mean": 0})


@pytest.mark.parametrize("means", [(900, 900), (5, 5), (1000, 50)])
def test_means_a_filter_cannot_keep_are_refused_in_one_line(means):
    lengths = {"kind": "lognormal", "input_mean": means[0], "input_sigma": 1.0, "output_mean": means[1],
               "output_sigma": 0.9, **SHAREGPT_BENCH_FILTER}
    with pytest.raises(ValidationError, match=rf"input_mean={means[0]} and output_mean={means[1]}: no lognormal"):
        spec({"kind": "poisson", "rate_per_s": 1}, lengths)


def test_uniform_and_fixed_lengths():
    uniform = {"kind": "uniform", "input_min": 10, "input_max": 12, "output_min": 3, "output_max": 3}
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, uniform), num_requests=3000)
    assert set(np.unique(w.input_tokens)) == {10, 11, 12} and set(np.unique(w.output_tokens)) == {3}
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}), num_requests=5)
    assert w.input_tokens.tolist() == [100] * 5 and w.output_tokens.tolist() == [10] * 5


def test_empirical_resamples_pairs(tmp_path):
    path = tmp_path / "lengths.csv"
    path.write_text("p,d,other\n10,1,x\n20,2,y\n30,3,z\n")
    lengths = {"kind": "empirical", "path": str(path), "input_column": "p", "output_column": "d"}
    w = generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), num_requests=3000)
    np.testing.assert_array_equal(w.input_tokens, 10 * w.output_tokens)  # pairs stay together
    assert set(np.unique(w.output_tokens)) == {1, 2, 3}


def test_one_million_requests():
    s = spec({"kind": "poisson", "rate_per_s": 100}, {"kind": "preset", "name": "sharegpt"})
    w = generate(s, num_requests=1_000_000, max_context=4096)
    assert w.num_requests == 1_000_000 and np.all(np.diff(w.arrival_s) >= 0)
    assert len(w.to_frame()) == 1_000_000


# --------------------------------------------------------------------------------------------------
# Closed loop and trace replay


def test_closed_loop_generates_lengths_only():
    s = spec({"kind": "closed_loop", "num_users": 8, "think_time_s": 1.5})
    w = generate(s, num_requests=100)
    assert w.num_requests == 100 and len(w.arrival_s) == 0
    assert w.closed_loop == ClosedLoopArrival(num_users=8, think_time_s=1.5)
    stats = summarize(w)
    assert stats["mean_rate_per_s"] is None and stats["interarrival_cv"] is None and "closed loop" in stats["note"]
    assert w.to_frame()["arrival_s"].isna().all()
    with pytest.raises(ConfigError, match="num_requests"):
        generate(s, duration_s=60)


def test_trace_replay_keeps_lengths_and_hash_ids():
    path = _shared("mooncake_synthetic.jsonl")
    w = generate(spec({"kind": "trace", "path": str(path)}, None), num_requests=100, max_context=1 << 20)
    assert w.num_requests == 100 and w.arrival_s[0] == 0.0
    assert w.input_tokens[0] == 40160 and len(w.hash_ids) == 100 and len(w.hash_ids[0]) == -(-40160 // 512)
    w = generate(spec({"kind": "trace", "path": str(path)}, None), duration_s=60)
    assert w.arrival_s.max() < 60 and w.num_requests == np.searchsorted(w.arrival_s, 60)


def test_trace_with_synthetic_lengths_drops_hash_ids():
    path = _shared("mooncake_synthetic.jsonl")
    w = generate(spec({"kind": "trace", "path": str(path)}), num_requests=50)
    assert w.hash_ids is None and np.all(w.input_tokens == 100)


def test_trace_target_rate_and_time_scale():
    path = str(_shared("AzureLLMInferenceTrace_conv.csv"))
    whole = dict(duration_s=1e9)
    original = summarize(generate(spec({"kind": "trace", "path": path}, None), **whole))
    rescaled = summarize(generate(spec({"kind": "trace", "path": path, "target_rate_per_s": 12.5}, None), **whole))
    assert rescaled["mean_rate_per_s"] == pytest.approx(12.5, rel=1e-9)
    assert rescaled["interarrival_cv"] == pytest.approx(original["interarrival_cv"], rel=1e-9)
    halved = summarize(generate(spec({"kind": "trace", "path": path, "time_scale": 0.5}, None), **whole))
    assert halved["span_s"] == pytest.approx(original["span_s"] / 2, rel=1e-12)
    assert halved["count"] == original["count"] == 19366


def test_trace_errors_are_one_line(tmp_path):
    with pytest.raises(TraceError, match=r"^workload\.arrival\.path: file '.*nope\.csv' not found$"):
        generate(spec({"kind": "trace", "path": str(tmp_path / "nope.csv")}, None), num_requests=5)
    lengths_only = tmp_path / "lengths.csv"
    lengths_only.write_text("num_prefill_tokens,num_decode_tokens\n5,6\n")
    with pytest.raises(ConfigError, match="no arrival column"):
        generate(spec({"kind": "trace", "path": str(lengths_only)}, None), num_requests=5)
    bad = tmp_path / "bad.csv"
    bad.write_text("p,d\n1,2\n3,oops\n")
    lengths = {"kind": "empirical", "path": str(bad), "input_column": "p", "output_column": "d"}
    with pytest.raises(TraceError, match=r"^workload\.lengths\.path: '.*bad\.csv' line 3: d='oops'"):
        generate(spec({"kind": "poisson", "rate_per_s": 1}, lengths), num_requests=5)


# --------------------------------------------------------------------------------------------------
# Validation


@pytest.mark.parametrize(
    "arrival, lengths",
    [
        ({"kind": "poisson", "rate_per_s": 0}, FIXED),
        ({"kind": "poisson", "rate_per_s": 1, "rate": 2}, FIXED),  # unknown key
        ({"kind": "gamma", "rate_per_s": 1}, FIXED),  # cv missing
        ({"kind": "diurnal", "mean_rate_per_s": 1, "amplitude": 1.0, "period_s": 10}, FIXED),
        ({"kind": "schedule", "steps": []}, FIXED),
        ({"kind": "schedule", "steps": [{"duration_s": 5, "rate_per_s": 0}]}, FIXED),
        ({"kind": "closed_loop", "num_users": 0, "think_time_s": 1}, FIXED),
        ({"kind": "trace", "path": "x.csv", "time_scale": 2, "target_rate_per_s": 3}, None),
        ({"kind": "trace", "path": "x.csv", "format": "parquet"}, None),
        ({"kind": "trace", "path": "x.csv", "columns": {"input": "a", "output": "b", "bogus": "c"}}, None),
        ({"kind": "warp", "rate_per_s": 1}, FIXED),
        (
            {"kind": "poisson", "rate_per_s": 1},
            {"kind": "uniform", "input_min": 9, "input_max": 3, "output_min": 1, "output_max": 1},
        ),
        ({"kind": "poisson", "rate_per_s": 1}, {"kind": "preset", "name": "dolly"}),
        ({"kind": "poisson", "rate_per_s": 1}, {"kind": "fixed", "input_tokens": 0, "output_tokens": 1}),
    ],
)
def test_bad_values_are_validation_errors(arrival, lengths):
    with pytest.raises(ValidationError):
        spec(arrival, lengths)


def test_cross_field_problems_are_config_errors():
    with pytest.raises(ConfigError, match=r"^workload\.lengths: kind 'trace' needs workload\.arrival\.kind 'trace'"):
        spec({"kind": "poisson", "rate_per_s": 1}, {"kind": "trace"})
    with pytest.raises(ConfigError, match=r"^workload\.lengths: missing"):
        spec({"kind": "poisson", "rate_per_s": 1}, None)
    s = spec({"kind": "poisson", "rate_per_s": 1})
    with pytest.raises(ConfigError, match="num_requests/duration_s"):
        generate(s)
    with pytest.raises(ConfigError, match="max_context"):
        generate(s, num_requests=3, max_context=1)


def test_summarize_reports_lengths():
    w = generate(spec({"kind": "constant", "rate_per_s": 2}), num_requests=11)
    stats = summarize(w)
    assert stats["count"] == 11 and stats["span_s"] == pytest.approx(5.0)
    assert (stats["input_mean"], stats["input_p50"], stats["input_p99"]) == (100.0, 100.0, 100.0)
    assert stats["note"] is None
    frame = w.to_frame()
    assert list(frame.columns) == ["arrival_s", "input_tokens", "output_tokens"] and frame.index.name == "request_id"


@settings(max_examples=60, deadline=None)
@given(
    max_context=st.integers(2, 5000),
    input_mean=st.floats(1, 1e5),
    output_mean=st.floats(1, 1e5),
    sigma=st.floats(0, 3),
    seed=st.integers(0, 2**32),
)
def test_every_request_fits_the_context(max_context, input_mean, output_mean, sigma, seed):
    lengths = {
        "kind": "lognormal",
        "input_mean": input_mean,
        "input_sigma": sigma,
        "output_mean": output_mean,
        "output_sigma": sigma,
    }
    poisson = spec({"kind": "poisson", "rate_per_s": 1}, lengths)
    w = generate(poisson, seed=seed, num_requests=200, max_context=max_context)
    assert np.all(w.input_tokens >= 1) and np.all(w.output_tokens >= 1)
    assert np.all(w.input_tokens + w.output_tokens <= max_context)


def test_listed_lengths_replay_every_request_in_order_and_repeat_from_the_start():
    from sim.workload.lengths import ListedLengths, sample_lengths
    spec = ListedLengths(input_tokens=[13, 25, 329], output_tokens=[120, 1, 7])
    inputs, outputs = sample_lengths(spec, np.random.SeedSequence(0), 7)
    assert inputs.tolist() == [13, 25, 329, 13, 25, 329, 13] and outputs.tolist() == [120, 1, 7, 120, 1, 7, 120]
    # Not drawn: another seed gives the same lengths
    again = sample_lengths(spec, np.random.SeedSequence(99), 7)
    assert again[0].tolist() == inputs.tolist() and again[1].tolist() == outputs.tolist()


@pytest.mark.parametrize("lists, problem", [
    ({"input_tokens": [10, 20], "output_tokens": [5]}, "2 input_tokens and 1 output_tokens"),
    ({"input_tokens": [10, 0], "output_tokens": [5, 5]}, "greater than or equal to 1"),
    ({"input_tokens": [], "output_tokens": []}, "at least 1"),
])
def test_listed_lengths_refuse_unpaired_or_empty_lists(lists, problem):
    from sim.workload.lengths import ListedLengths
    with pytest.raises(ValidationError, match=problem):
        ListedLengths(**lists)
