"""What a token costs: priced at the load a deployment serves, not at the whole run's rate, whose time includes the
drain (sim/results.py load_and_sustained_rates, sim/tools/sweep.py served_tokens_per_s)."""

from __future__ import annotations

import copy

import pytest

from helpers import small_scenario
from sim.config.files import validate_scenario
from sim.run import simulate
from sim.tools.planner import plan_settings, run_plan
from sim.tools.sweep import cost_figures, served_tokens_per_s
from sim.views.plan_report import candidates_frame

STEP_S = 0.01  # every step, prefill or decode, takes this long: a known service rate


def _fixed(rate_per_s: float, output_tokens: int, num_requests: int, **scheduler) -> dict:
    return small_scenario(cost_model={"kind": "fixed", "prefill_s": STEP_S, "decode_s": STEP_S},
                          workload={"arrival": {"kind": "constant", "rate_per_s": rate_per_s},
                                    "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": output_tokens}},
                          scheduler=scheduler, run={"num_requests": num_requests})


def test_where_the_deployment_keeps_up_it_sustains_the_load_which_the_drained_rate_understates():
    # 10 requests a second of 64 + 400 tokens, each 4 s long: the load is 4,640 tokens a second, exactly
    summary = simulate(validate_scenario(_fixed(10.0, 400, 200))).summary
    assert summary["offered_tokens_per_s"] == pytest.approx(10 * 464, rel=1e-12)
    assert summary["admitted_tokens_per_s"] == summary["offered_tokens_per_s"]  # none refused
    assert summary["offered_output_tokens_per_s"] == pytest.approx(10 * 400, rel=1e-12)
    # past the warm-up every step decodes the 40 requests in flight: the load, to a step at either edge
    assert summary["sustained_tokens_per_s"] == pytest.approx(10 * 464, rel=0.01)
    assert summary["sustained_output_tokens_per_s"] == pytest.approx(10 * 400, rel=0.01)
    # the 20 s of arrivals and the 4 s drain: 200 x 464 tokens over 24 s
    assert summary["total_tokens_per_s"] == pytest.approx(200 * 464 / 24.0, rel=0.01)


def test_a_steady_state_window_the_run_sets_is_where_it_sustains():
    raw = _fixed(10.0, 400, 200)
    raw["run"].update(warmup_s=5.0, cooldown_s=2.0)  # past the first requests' 4 s: the steady state from the start
    summary = simulate(validate_scenario(raw)).summary
    assert (summary["window_start_s"], summary["window_end_s"]) == (5.0, 18.0)  # arrivals at 0.1, 0.2 ... 20 s
    assert summary["sustained_tokens_per_s"] == pytest.approx(10 * 464, rel=0.005)
    assert summary["sustained_output_tokens_per_s"] == pytest.approx(summary["window_output_tokens_per_s"])
    raw["run"].update(warmup_s=0.0, cooldown_s=10.0)  # a window over the warm-up: its output ramps up for 4 s
    summary = simulate(validate_scenario(raw)).summary
    assert summary["sustained_output_tokens_per_s"] == pytest.approx(summary["window_output_tokens_per_s"])
    # the 10 requests a second that would have arrived in the 4 s before it: 100 tokens a second each, over 0-4 s
    missing = 10 * 100 * 4.0 ** 2 / 2
    assert summary["sustained_output_tokens_per_s"] == pytest.approx(10 * 400 - missing / 10.0, rel=0.01)


def test_where_it_cannot_keep_up_it_sustains_its_capacity():
    # 4 sequences a step, each of 8 tokens: 4 tokens a step (the new request's first among them), 50 requests a
    # second, at twice that offered
    summary = simulate(validate_scenario(_fixed(100.0, 8, 2000, max_num_seqs=4))).summary
    assert summary["offered_tokens_per_s"] == pytest.approx(100 * 72, rel=1e-12)
    assert summary["sustained_output_tokens_per_s"] == pytest.approx(4 / STEP_S, rel=0.005)
    assert summary["sustained_tokens_per_s"] == pytest.approx(4 / STEP_S + 50 * 64, rel=0.005)


def test_a_burst_has_no_steady_state_and_takes_the_whole_runs_rates():
    raw = _fixed(10.0, 8, 50)
    raw["workload"]["arrival"] = {"kind": "burst"}
    s = simulate(validate_scenario(raw)).summary
    assert s["sustained_tokens_per_s"] == s["offered_tokens_per_s"] == s["admitted_tokens_per_s"] == s[
        "total_tokens_per_s"]
    assert s["sustained_output_tokens_per_s"] == s["offered_output_tokens_per_s"] == s["output_tokens_per_s"]


def test_a_run_within_its_slos_is_priced_at_the_load_and_one_outside_at_what_it_sustained():
    # the load less the requests the deployment refused (tests/integration/test_refused_requests.py)
    rates = {"offered_tokens_per_s": 11.0, "offered_output_tokens_per_s": 5.0, "admitted_tokens_per_s": 10.0,
             "admitted_output_tokens_per_s": 4.0, "sustained_tokens_per_s": 6.0,
             "sustained_output_tokens_per_s": 3.0, "total_tokens_per_s": 1.0, "output_tokens_per_s": 0.5}
    assert served_tokens_per_s(rates | {"slo_met": True}) == (10.0, 4.0)
    assert served_tokens_per_s(rates | {"slo_met": False}) == (6.0, 3.0)
    assert served_tokens_per_s(rates | {"slo_met": None}) == (6.0, 3.0)  # no SLOs: what it sustained
    scenario = validate_scenario(small_scenario())
    costs = cost_figures(scenario, rates | {"slo_met": True})
    assert costs["cost_per_million_tokens"] == pytest.approx(costs["cost_per_hour"] / (10.0 * 3600) * 1e6)
    assert costs["cost_per_million_output_tokens"] == pytest.approx(costs["cost_per_hour"] / (4.0 * 3600) * 1e6)


def test_a_plans_cost_per_token_and_goodput_are_those_of_the_target_load():
    raw = _fixed(20.0, 400, 200)
    raw.update(slo={"ttft_s": 0.5, "tpot_s": 0.05, "percentile": 99},
               search={"gpus": ["h100-sxm", "a100-80gb"], "tensor_parallel": [1], "max_replicas": 2,
                       "num_seeds": 1, "min_window_s": 10})
    result = run_plan(copy.deepcopy(raw), plan_settings(raw), backend="serial")
    feasible = [o for o in result.outcomes if o.status == "feasible"]
    assert len(feasible) == 2
    for outcome in feasible:  # 20 requests a second of 464 tokens, whatever serves them
        per_hour = outcome.costs["cost_per_hour"]
        assert outcome.costs["cost_per_million_tokens"] == pytest.approx(per_hour / (20 * 464 * 3600) * 1e6,
                                                                         rel=1e-9)
        assert outcome.at_target["slo_fraction_ok"] == 1.0 and outcome.at_target["goodput_rps"] < 19
    # the table's goodput is the target's: every request within every limit, 20 a second (the run's own goodput_rps
    # divides by its time, the drain included)
    frame = candidates_frame(result)
    assert list(frame.loc[frame["status"] == "feasible", "goodput_rps"]) == [20.0, 20.0]
