"""The roofline with efficiencies learned from the measured GPUs (sim/cost/learned.py, calibrate/learn_roofline.py)."""

from __future__ import annotations

import json

import pytest

from calibrate.learn_roofline import fit
from sim.config.schema import Scenario
from sim.core.step_plan import StepPlan
from sim.cost.learned import LEARNED_PATH, LearnedRooflineCostModel
from sim.model.catalog import get_gpu, get_model
from sim.run import make_cost_model

WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 1},
            "lengths": {"kind": "fixed", "input_tokens": 10, "output_tokens": 10}}
DECODE = StepPlan(num_decode_seqs=16, decode_context_tokens=16 * 1000, num_sampled_seqs=16)


def test_shipped_file_names_its_provenance_and_efficiencies_are_fractions():
    data = json.loads(LEARNED_PATH.read_text())
    assert sorted(data["fitted_on"]) == ["a100-80gb", "h100-sxm", "h200", "l40s"]
    assert "AIConfigurator" in data["source"]
    effs = [e for row in data["gemm"]["eff"] for e in row] + data["decode_attention"]["eff"]
    assert all(0 < e <= 1.5 for e in effs)


def test_leave_one_out_fit_does_not_read_the_held_out_gpu():
    a = fit(["h100-sxm", "a100-80gb", "l40s"])
    b = fit(["h100-sxm", "a100-80gb", "l40s", "h200"])
    assert a["fitted_on"] == ["h100-sxm", "a100-80gb", "l40s"]
    assert a["gemm"]["eff"] != b["gemm"]["eff"]  # adding a GPU changes the fit: it is data, not constants


def test_scenario_selects_learned_and_catalog_stays_default():
    default = make_cost_model(Scenario.model_validate({"workload": WORKLOAD, "cost_model": {"kind": "roofline"}}))
    learned = make_cost_model(Scenario.model_validate(
        {"workload": WORKLOAD, "cost_model": {"kind": "roofline", "efficiencies": "learned"}}))
    assert type(default).__name__ == "RooflineCostModel"
    assert isinstance(learned, LearnedRooflineCostModel) and "learned from" in repr(learned)
    assert learned.step_time(DECODE) != pytest.approx(default.step_time(DECODE))


def test_learned_roofline_prices_a_gpu_without_tables_and_grows_with_work():
    cost = LearnedRooflineCostModel(get_model("llama-3.1-8b"), get_gpu("l4"))
    small = cost.step_time(DECODE)
    big = cost.step_time(StepPlan(num_decode_seqs=64, decode_context_tokens=64 * 4000, num_sampled_seqs=64))
    assert 0 < small < big


def test_allreduce_is_learned_per_interconnect_class_and_falls_back_without_one():
    from sim.cost.learned import interconnect_class
    assert interconnect_class(get_gpu("h100-sxm")) == "nvlink" and interconnect_class(get_gpu("l40s")) == "pcie"
    nvlink_only = fit(["h100-sxm", "a100-80gb", "h200"])
    assert set(nvlink_only["allreduce"]) == {"nvlink"}
    pcie = LearnedRooflineCostModel(get_model("llama-3.1-8b"), get_gpu("l4"), tensor_parallel=4, learned=nvlink_only)
    assert "no measured pcie GPU: catalog all-reduce" in repr(pcie)
    shipped = json.loads(LEARNED_PATH.read_text())["allreduce"]
    # PCIe peers share the host's root complex: the measured L40S bus bandwidth falls as GPUs are added,
    # NVLink's does not (NVLink SHARP even lifts H100/H200 at 8 GPUs).
    assert shipped["pcie"]["8"]["bandwidth_fraction"] < shipped["pcie"]["2"]["bandwidth_fraction"] / 2
    assert shipped["nvlink"]["8"]["bandwidth_fraction"] >= shipped["nvlink"]["2"]["bandwidth_fraction"]


def test_pcie_tp8_step_pays_more_all_reduce_than_the_catalog_assumes():
    plan = StepPlan(prefill_request_ids=[1], prefill_chunk_tokens=[2048], prefill_context_tokens=[0],
                    num_sampled_seqs=1)
    m, g = get_model("llama-3.1-8b"), get_gpu("l4")
    tp2, tp8 = (LearnedRooflineCostModel(m, g, tensor_parallel=t).step_time(plan) for t in (2, 8))
    assert tp8 > tp2  # on PCIe the all-reduce grows faster than the GEMMs shrink
