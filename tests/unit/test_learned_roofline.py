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
    # Fitted on the named training GPUs, each of which ships its tables (a list changed without a refit leaves the
    # file stale); the other measured GPUs are held out from it.
    from calibrate.learn_roofline import TRAINING_GPUS
    from sim.cost.measured import measured_gpus
    assert data["fitted_on"] == list(TRAINING_GPUS) == ["a100-80gb", "b200", "h100-sxm", "h200", "l40s"]
    assert set(TRAINING_GPUS) < set(measured_gpus())
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
    from sim.model.interconnects import interconnect_class
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


def test_the_compiled_form_prices_as_step_cost_with_a_pack_of_the_cores_one_type():
    # One definition (sim/cost/learned_kernel.py): step_cost and the compiled core call the same function; the
    # learned pack rides in the whole-step profile's slot, so the core's pack keeps one numba type.
    numba = pytest.importorskip("numba")
    from sim.cost.compiled_pricing import KIND_LEARNED, price_parts
    from sim.cost.roofline import RooflineCostModel
    from sim.cost.step_args import step_args
    cost = LearnedRooflineCostModel(get_model("mixtral-8x7b"), get_gpu("l40s"), tensor_parallel=2)
    pack = cost.compiled_params()
    roofline = RooflineCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm")).compiled_params()
    assert pack[0] == KIND_LEARNED and numba.typeof(pack) == numba.typeof(roofline)
    plan = StepPlan(prefill_request_ids=[1, 2], prefill_chunk_tokens=[700, 3], prefill_context_tokens=[0, 5000],
                    num_decode_seqs=30, decode_context_tokens=30 * 900, num_sampled_seqs=31, swap_in_tokens=64)
    for p in (plan, DECODE, StepPlan()):
        assert price_parts(*pack[:4], *step_args(p)) == tuple(cost.step_cost(p))
    assert cost.step_cost(StepPlan()).time_s == 0.0  # no tokens: the step overhead (none by default)


def test_a_changed_number_repacks_and_a_subclass_has_no_compiled_form():
    cost = LearnedRooflineCostModel(get_model("llama-3.1-8b"), get_gpu("l4"))
    before = cost.step_time(DECODE)
    assert cost._packs()[1] is cost._packs()[1]  # packed once
    cost.min_kernel_s *= 2
    assert cost.step_time(DECODE) > before
    cost.step_overhead_s = 1e-3
    assert cost.step_cost(StepPlan()).time_s == 1e-3

    class Tweaked(LearnedRooflineCostModel):
        pass
    assert Tweaked(get_model("llama-3.1-8b"), get_gpu("l4")).compiled_params() is None


_WITHOUT_JIT = """
import json, sys
from sim.core.step_plan import StepPlan
from sim.cost.learned import LearnedRooflineCostModel
from sim.model.catalog import get_gpu, get_model
cost = LearnedRooflineCostModel(get_model("mistral-7b-v0.1"), get_gpu("l4"), tensor_parallel=2)
plans = [StepPlan(prefill_request_ids=[0, 1], prefill_chunk_tokens=[300, 1], prefill_context_tokens=[0, 7000],
                  num_decode_seqs=9, decode_context_tokens=9 * 700, num_sampled_seqs=10),
         StepPlan(num_decode_seqs=300, decode_context_tokens=300 * 100_000, num_sampled_seqs=300)]
json.dump([list(cost.step_cost(p)) for p in plans] + [list(map(list, cost.decode_step_costs(5, 50, 3)))],
          sys.stdout)
"""


def test_without_the_jit_the_same_function_gives_the_same_prices():
    # NUMBA_DISABLE_JIT=1 runs learned_kernel as Python (to step through a price): the same numbers to the bit.
    import os
    import subprocess
    import sys

    def prices(disable: bool):
        env = dict(os.environ, NUMBA_DISABLE_JIT="1" if disable else "0")
        out = subprocess.run([sys.executable, "-c", _WITHOUT_JIT], cwd=LEARNED_PATH.parents[2], env=env,
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)
    assert prices(True) == prices(False)


def test_decode_attention_pays_its_own_launch_once_and_scales_only_its_work():
    # Two batch-1 decode steps in one bin of log2(batch x context) (600 and 1000 tokens: [2^8, 2^10)): everything but
    # the attention's KV read is the same, so they differ by layers x the extra KV bytes at the bin's efficiency; the
    # attention's launch floor (decode_attention.min_kernel_s) is in both, not scaled by the KV bytes.
    learned = json.loads(LEARNED_PATH.read_text())
    model, gpu = get_model("llama-2-7b"), get_gpu("a100-80gb")  # multi-head: 4x the KV bytes of the tables' GQA rows
    cost = LearnedRooflineCostModel(model, gpu, learned=learned)

    def decode(context: int) -> float:
        return cost.step_time(StepPlan(num_decode_seqs=1, decode_context_tokens=context, num_sampled_seqs=1))
    kv_bytes = 2 * model.num_kv_heads * model.head_dim * 2  # per token per layer, bf16
    eff = learned["decode_attention"]["eff"][1]
    expected = model.num_layers * 400 * kv_bytes / gpu.hbm_bytes_per_s / eff
    assert decode(1000) - decode(600) == pytest.approx(expected, rel=1e-9)
    floor = learned["decode_attention"]["min_kernel_s"]
    assert 5e-6 < floor < 15e-6 and floor > learned["min_kernel_s"]  # an attention call's floor, above a GEMM's
    # the floor itself is paid once a layer: 1 us more of it is layers x 1 us more a step, whatever the context
    later = {**learned, "decode_attention": {**learned["decode_attention"], "min_kernel_s": floor + 1e-6}}
    slower = LearnedRooflineCostModel(model, gpu, learned=later)
    for context in (600, 1000):
        plan = StepPlan(num_decode_seqs=1, decode_context_tokens=context, num_sampled_seqs=1)
        assert slower.step_time(plan) - cost.step_time(plan) == pytest.approx(model.num_layers * 1e-6, rel=1e-6)


def test_a_learned_file_of_another_format_is_refused_in_one_line():
    old = {**json.loads(LEARNED_PATH.read_text()), "format_version": 2}
    from sim.errors import ConfigError
    with pytest.raises(ConfigError) as err:
        LearnedRooflineCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), learned=old)
    assert str(err.value) == ("cost_model.efficiencies: 'learned' reads format_version 3, got 2; rerun "
                              "`python -m calibrate.learn_roofline`")
