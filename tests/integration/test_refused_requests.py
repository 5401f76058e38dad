"""A request a deployment can never run (rejected: `SchedulerBase.rejection_reason`) counts over every SLO limit,
as a request that never gets a token: a deployment refusing 1 request in 200 can meet p99 TTFT, one refusing 3
cannot, and the planner says which of its candidates refuse requests and why."""

from __future__ import annotations

import copy
import datetime
import math

import numpy as np
import pytest
from helpers import small_scenario

from sim.config.files import validate_scenario
from sim.results import percentile_with_refused
from sim.run import make_workload, simulate
from sim.tools.early_verdict import SLOMissRule
from sim.tools.planner import plan_settings, run_plan
from sim.tools.sweep import served_tokens_per_s
from sim.views.plan_report import candidates_frame, recommendation_text


@pytest.mark.parametrize(("values", "refused", "q", "expected"), [
    ([1.0, 2.0, 3.0], 1, 50, 2.5),          # 4 values, index 1.5: between 2 and 3
    ([1.0, 2.0, 3.0], 1, 75, math.inf),     # index 2.25: between 3 and the refused one
    ([1.0, 2.0, 3.0, 4.0], 1, 75, 4.0),     # index 3 exactly: the last value served
    ([1.0, 2.0, 3.0, 4.0], 1, 100, math.inf),
    ([1.0, 2.0, 3.0, 4.0], 1, 0, 1.0),
    ([], 2, 50, math.inf),                  # every request refused
    ([], 0, 50, math.nan),                  # none ended
])
def test_a_refused_request_is_above_every_value_known_answers(values, refused, q, expected):
    got = percentile_with_refused(np.array(values), refused, q)
    assert got == expected or (math.isnan(expected) and math.isnan(got))


def test_without_refusals_it_is_numpys_percentile_to_the_bit():
    values = np.random.default_rng(0).lognormal(0.0, 1.0, 1001)
    for q in (50, 90, 99, 99.9):
        assert percentile_with_refused(values, 0, q) == float(np.percentile(values, q))


def _trace(path, refused_at: tuple[int, ...], num_requests: int = 200) -> str:
    """An Azure-format trace: a short request every 0.1 s, those at `refused_at` with a 3,000-token prompt."""
    start = datetime.datetime(2023, 11, 16, 18, 0, 0)
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(num_requests):
        at = start + datetime.timedelta(seconds=0.1 * i)
        rows.append(f"{at:%Y-%m-%d %H:%M:%S.%f},{3000 if i in refused_at else 64},8")
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _spec(trace: str, percentile: float = 99) -> dict:
    # Without chunked prefill a 3,000-token prompt never fits the 2,048-token step: it is rejected on arrival.
    return small_scenario(workload={"arrival": {"kind": "trace", "path": trace, "format": "azure"},
                                    "lengths": {"kind": "trace"}},
                          scheduler={"max_model_len": 4096, "chunked_prefill": False, "max_num_batched_tokens": 2048},
                          slo={"ttft_s": 1.0, "e2e_s": 5.0, "percentile": percentile},
                          run={"seed": 0, "num_requests": 200})


@pytest.mark.parametrize("compiled", [False, True])
def test_one_refusal_in_200_meets_p99_and_three_do_not(tmp_path, compiled):
    summaries = {}
    for refused_at in ((50,), (50, 90, 120)):
        spec = _spec(_trace(tmp_path / f"{len(refused_at)}.csv", refused_at))
        spec["run"]["compiled_core"] = compiled
        summaries[len(refused_at)] = simulate(validate_scenario(spec)).summary
    one, three = summaries[1], summaries[3]
    assert one["num_rejected"] == 1 and three["num_rejected"] == 3
    # p99 of 200: numpy's index 197.01 lies between the 198th and 199th smallest, served requests when one is
    # refused (its TTFT is the largest), the refused ones when three are.
    assert one["slo_met"] is True and math.isfinite(one["slo_ttft_p99"]) and one["slo_ttft_p99"] <= 1.0
    assert three["slo_met"] is False
    assert three["slo_ttft_p99"] == math.inf and three["slo_e2e_p99"] == math.inf
    assert three["slo_ttft_met"] is False and three["slo_e2e_met"] is False
    # The share within every limit counts the refused ones as missing it; the goodput share too.
    assert one["slo_fraction_ok"] == 199 / 200 and three["slo_fraction_ok"] == 197 / 200
    # A token's price counts the tokens served: the offered load less the refused request's 3,000 + 8 tokens, at the
    # offered rate's count of the 200 arrivals over their 19.9 s.
    per_s = 199 / 200 / 19.9
    assert one["offered_tokens_per_s"] == pytest.approx((199 * 72 + 3008) * per_s, rel=1e-12)
    assert one["admitted_tokens_per_s"] == pytest.approx(199 * 72 * per_s, rel=1e-12)
    assert one["admitted_output_tokens_per_s"] == pytest.approx(199 * 8 * per_s, rel=1e-12)
    assert served_tokens_per_s(one) == (one["admitted_tokens_per_s"], one["admitted_output_tokens_per_s"])


def test_the_early_verdict_counts_a_refusal_as_a_violation_in_both_engines(tmp_path):
    stops = {}
    for refused_at in ((50,), (10, 20, 30)):
        spec = _spec(_trace(tmp_path / f"{len(refused_at)}.csv", refused_at))
        for compiled in (False, True):
            spec["run"]["compiled_core"] = compiled
            scenario = validate_scenario(spec)
            workload = make_workload(scenario)
            rule = SLOMissRule(scenario.slo, workload.num_requests, check_every_s=0.25)
            summary = simulate(scenario, workload, stop_when=rule).summary
            stops[len(refused_at), compiled] = summary.get("stopped_early_s")
    # One refusal of 200 is within the p99 allowance: the runs go to their end. Three (violations_to_miss(200, 99)
    # is 3) make the miss certain at the first check after the third, at 3 s.
    assert stops[1, False] is None and stops[1, True] is None
    assert stops[3, False] == stops[3, True]
    assert 3.0 <= stops[3, False] <= 3.0 + 0.25 + 0.1


def _plan_raw(percentile: float) -> dict:
    # One candidate whose token budget refuses about 2% of the requests (prompt + output - 1 > 1,400 tokens,
    # without chunked prefill): within a p90 SLO's allowance, never within p99's.
    return small_scenario({"name": "refusing", "workload": {"arrival": {"rate_per_s": 20},
                                                            "lengths": {"kind": "uniform", "input_min": 200,
                                                                        "input_max": 1200, "output_min": 50,
                                                                        "output_max": 300}},
                           "scheduler": {"max_model_len": 4096, "chunked_prefill": False,
                                         "max_num_batched_tokens": 1400},
                           "slo": {"ttft_s": 0.5, "percentile": percentile},
                           "run": {"num_requests": 150},
                           "search": {"gpus": ["a100-80gb"], "tensor_parallel": [1], "max_replicas": 4,
                                      "num_seeds": 1, "min_window_s": 5, "rate_tolerance": 0.05}})


def test_a_plan_takes_a_candidate_refusing_within_the_allowance_and_says_what_it_refuses():
    raw = _plan_raw(90)
    result = run_plan(copy.deepcopy(raw), plan_settings(raw), backend="serial")
    (outcome,) = result.outcomes
    assert outcome.status == "feasible", outcome.reason
    refused = outcome.at_target["num_rejected"]
    assert refused > 0  # the premise: the run at the target drew requests over the budget
    frame = candidates_frame(result)
    assert frame.loc[0, "num_rejected"] == refused
    assert "max_num_batched_tokens is 1400" in frame.loc[0, "reject_reason"]
    text = recommendation_text(result)
    assert f"It refuses {refused:,} of the" in text and "max_num_batched_tokens is 1400" in text
    # The same candidate held to p99: no number of replicas serves the refused ones, so none is enough.
    raw = _plan_raw(99)
    (strict,) = run_plan(copy.deepcopy(raw), plan_settings(raw), backend="serial").outcomes
    assert strict.status == "infeasible"
    assert "falls on a rejected request" in strict.reason and "max_num_batched_tokens is 1400" in strict.reason


def test_a_band_whose_batch_figure_falls_on_a_refused_request_is_unbounded_never_nan():
    from sim.bands import difference_band, pessimistic_misses, sampling_halfwidth, widened
    from sim.config.schema import SLOSpec
    # numpy's std over an infinite value is NaN, and a NaN edge compared with a limit passed it
    assert sampling_halfwidth([0.4, math.inf, 0.5], 1.6) == math.inf
    assert widened([0.5, 0.6], [0.4, math.inf, 0.5], 1.6) == [-math.inf, math.inf]
    assert widened([0.5, math.inf], None, 1.6) == [0.5, math.inf]
    slo = SLOSpec(ttft_s=1.0, percentile=99, min_goodput_fraction=0.9)
    misses = pessimistic_misses({"slo_ttft_p99": [math.nan, math.nan], "slo_goodput_share": [math.nan, 1.0],
                                 "replications": 19, "slo_met_replications": 19}, slo)
    assert len(misses) == 2  # an edge that cannot be told is not within the limit
    assert difference_band([math.inf, 1.0], [math.inf, 2.0], 1) is None  # inf - inf: no band, not a NaN one
