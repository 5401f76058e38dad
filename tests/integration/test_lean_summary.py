"""The planner's lean summary (`simulate(lean_summary=True)`) holds the full summary's values, bit for bit, for
every key it keeps, and every key the planner reads (issue 15)."""

from __future__ import annotations

import math

import pytest
from helpers import small_scenario

from sim.config.files import validate_scenario
from sim.run import make_workload, simulate
from sim.tools.early_verdict import SLOMissRule
from sim.tools.planner import KEPT_METRICS

CASES = {
    # decode runs on one replica, under an SLO
    "one replica": small_scenario(workload={"arrival": {"rate_per_s": 20},
                                            "lengths": {"kind": "uniform", "input_min": 16, "input_max": 600,
                                                        "output_min": 1, "output_max": 120}},
                                  slo={"ttft_s": 0.5, "tpot_s": 0.05}, run={"num_requests": 300}),
    # several replicas, chunked prefill, a goodput floor, preemptions (a small KV cache)
    "replicas, chunked, preemptions": small_scenario(
        hardware={"num_replicas": 3, "router": "least_outstanding"},
        workload={"arrival": {"rate_per_s": 60},
                  "lengths": {"kind": "uniform", "input_min": 200, "input_max": 1500, "output_min": 20,
                              "output_max": 400}},
        scheduler={"chunked_prefill": True, "max_num_batched_tokens": 512},
        kv_cache={"capacity_tokens": 6000},
        slo={"ttft_s": 1.0, "tpot_s": 0.05, "percentile": 90, "min_goodput_fraction": 0.8},
        run={"num_requests": 400}),
    # step by step, no decode runs
    "exact steps": small_scenario(slo={"e2e_s": 2.0}, run={"num_requests": 50, "fast_decode": False}),
}


def _same(a, b) -> bool:
    return (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("stop_early", [False, True], ids=["full run", "stopped once a miss is certain"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_lean_summary_keeps_the_full_summarys_values(case, stop_early):
    scenario = validate_scenario(CASES[case])
    summaries = []
    for lean in (False, True):
        workload = make_workload(scenario)
        rule = SLOMissRule(scenario.slo, workload.num_requests) if stop_early else None
        summaries.append(simulate(scenario, workload, stop_when=rule, lean_summary=lean).summary)
    full, lean = summaries
    assert full["num_finished"] > 0
    assert set(lean) < set(full)
    assert all(_same(lean[k], full[k]) for k in lean), [k for k in lean if not _same(lean[k], full[k])]
    # everything the planner reads: its kept metrics, every SLO key, the early stop
    read = [k for k in full if k in KEPT_METRICS or k.startswith("slo_") or k == "stopped_early_s"]
    assert [k for k in read if k not in lean] == []


def test_a_lean_summary_leaves_out_what_the_planner_does_not_read():
    scenario = validate_scenario(CASES["one replica"])
    lean = simulate(scenario, lean_summary=True).summary
    assert not {"itl_p99", "queueing_s_p50", "mbu", "kv_capacity_tokens", "mean_in_system"} & set(lean)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bands_summary_keeps_every_figure_a_band_reads(case):
    from sim.bands import _band_keys
    scenario = validate_scenario(CASES[case])
    workload = make_workload(scenario)
    full = simulate(scenario, workload).summary
    band = simulate(scenario, workload, lean_summary="band").summary
    lean = simulate(scenario, workload, lean_summary=True).summary
    assert set(band) < set(lean) and "kv_token_share" not in band and "mean_batch_size" not in band
    assert all(_same(band[k], full[k]) for k in band), [k for k in band if not _same(band[k], full[k])]
    assert [k for k in _band_keys(full) if k not in band] == [] and "slo_met" in band
