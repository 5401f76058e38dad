"""Weights kept in host memory (`kv_cache.weights_offload_bytes`, vLLM's and SGLang's --cpu-offload-gb): which bytes
move, the KV room they leave, the host-link reads every step pays, and the flag as each release reads it."""

from pathlib import Path

import pytest

from sim.api import load_scenario_set, make_workload
from sim.config.files import validate_scenario
from sim.config.deployment import resolve
from sim.core.step_plan import StepPlan
from sim.cost.overhead import O_WEIGHTS_STREAM, EngineOverheadCostModel, engine_overhead
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.memory import kv_capacity, offloaded_weight_bytes, weight_bytes_per_gpu
from sim.run import make_cost_model, simulate

GIB = 1 << 30
LLAMA_8B = get_model("llama-3.1-8b")
# Llama-3.1-8B's parameters in one decoder layer, bf16, in vLLM's order: qkv_proj (4,096 x 6,144), o_proj
# (4,096 x 4,096), gate_up_proj (4,096 x 28,672), down_proj (14,336 x 4,096), then the two norms (4,096 each).
QKV, O_PROJ, GATE_UP, DOWN, NORMS = 4096 * 6144 * 2, 4096 * 4096 * 2, 4096 * 28672 * 2, 14336 * 4096 * 2, 2 * 4096 * 2
LAYER = QKV + O_PROJ + GATE_UP + DOWN + NORMS  # 436,224,000


@pytest.mark.parametrize("limit, moved", [
    (0, 0),
    (1, QKV),  # whole parameters: the first one, though one byte was asked
    (QKV, QKV),
    (QKV + 1, QKV + O_PROJ),
    (LAYER, LAYER),
    (LAYER + 1, LAYER + QKV),
    (10 ** 15, 32 * LAYER),  # every layer, no more
])
def test_whole_parameters_move_from_the_first_layer_until_the_limit_is_reached(limit, moved):
    assert offloaded_weight_bytes(LLAMA_8B, limit) == moved


def test_the_embeddings_final_norm_and_lm_head_stay_and_tensor_parallel_splits_each_gpus_share():
    stays = weight_bytes_per_gpu(LLAMA_8B) - offloaded_weight_bytes(LLAMA_8B, 10 ** 15)
    assert stays == 2 * 128256 * 4096 * 2 + 4096 * 2  # embedding + LM head (untied) + final norm
    assert offloaded_weight_bytes(LLAMA_8B, 1, tensor_parallel=2) == QKV // 2


def test_the_kv_cache_gets_exactly_the_room_the_offloaded_weights_leave():
    gpu = get_gpu("h100-sxm")
    base = kv_capacity(LLAMA_8B, gpu)
    offloaded = kv_capacity(LLAMA_8B, gpu, weights_offload_bytes=3 * GIB)
    assert offloaded.weight_bytes == base.weight_bytes - offloaded_weight_bytes(LLAMA_8B, 3 * GIB)
    assert offloaded.kv_bytes - base.kv_bytes == offloaded_weight_bytes(LLAMA_8B, 3 * GIB)


def _one_request(**kv_cache) -> dict:
    return {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
            "workload": {"arrival": {"kind": "poisson", "rate_per_s": 0.01},
                         "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 11}},
            "scheduler": {"max_model_len": 4096}, "kv_cache": kv_cache, "cost_model": {"kind": "roofline"},
            "run": {"num_requests": 1, "seed": 0}}


def test_every_step_reads_the_offloaded_bytes_over_the_host_link_whatever_its_tokens():
    """One request alone: its prefill step and each decode step take offloaded / host-link bandwidth longer."""
    base = simulate(validate_scenario(_one_request())).summary
    scenario = validate_scenario(_one_request(weights_offload_bytes=2 * GIB))
    result = simulate(scenario)
    stream_s = offloaded_weight_bytes(LLAMA_8B, 2 * GIB) / get_gpu("h100-sxm").host_link_bytes_per_s
    # four whole layers and the fifth's matrices (the limit is reached before its norms), at PCIe 5.0's 64 GB/s
    assert stream_s == (4 * LAYER + QKV + O_PROJ + GATE_UP + DOWN) / 64e9
    assert result.summary["ttft_s_mean"] - base["ttft_s_mean"] == pytest.approx(stream_s, rel=1e-9)
    assert result.summary["tpot_s_mean"] - base["tpot_s_mean"] == pytest.approx(stream_s, rel=1e-9)
    assert "weights read from host memory 34.1 ms a step" in result.extras["cost_model"]


def _vllm(version: str, **flags) -> dict:
    return {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm"},
            "engine": {"name": "vllm", "version": version, "max_model_len": 8192, **flags},
            "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                         "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 20}},
            "run": {"num_requests": 5, "seed": 0}}


def test_a_70b_model_that_does_not_fit_one_h100_serves_from_it_with_80_gib_offloaded_at_pcie_speed():
    with pytest.raises(ConfigError, match="^hardware: llama-3.1-70b .* needs"):
        validate_scenario(_vllm("0.11.0"))
    scenario = validate_scenario(_vllm("0.11.0", cpu_offload_gb=80))
    assert scenario.kv_cache.weights_offload_bytes == 80 * GIB
    deployment = resolve(scenario)
    assert 80 * GIB <= deployment.weights_offloaded_bytes < 80 * GIB + 8192 * 57344 * 2  # at most one gate_up more
    stream_s = deployment.weights_offloaded_bytes / 64e9
    assert simulate(scenario).summary["tpot_s_p50"] > stream_s > 1.3  # every decode step reads 86.8 GB over PCIe


@pytest.mark.parametrize("version, how", [("0.6.0", "copied to the GPU before each offloaded layer runs (V0)"),
                                          ("0.11.0", "read by the kernels from pinned host memory (V1's UVA)")])
def test_the_flag_is_gib_a_gpu_noted_as_the_release_moves_the_weights(version, how):
    scenario = validate_scenario(_vllm(version, cpu_offload_gb=80.5))
    assert scenario.kv_cache.weights_offload_bytes == int(80.5 * GIB)
    assert any("--cpu-offload-gb 80.5: " in note and how in note for note in scenario.engine.notes)


@pytest.mark.parametrize("change, message", [
    ({"engine": {"cpu_offload_gb": -1}}, "engine.cpu_offload_gb: -1 is not allowed; allowed: a finite number of GiB "
     ">= 0"),
    ({"engine": {"cpu_offload_gb": 1e300}}, "engine.cpu_offload_gb: 1e+300 is not allowed; allowed: a finite number "
     "of GiB >= 0"),  # (its bytes overflow a float)
    ({"kv_cache": {"weights_offload_bytes": GIB}},
     "engine.cpu_offload_gb: 80 (sets kv_cache.weights_offload_bytes 85899345920) contradicts "
     "kv_cache.weights_offload_bytes 1073741824; allowed: give one of them, or the same value"),
    ({"hardware": {"pipeline_parallel": 2}}, "kv_cache.weights_offload_bytes: 85,899,345,920 with "
     "hardware.pipeline_parallel is not modelled yet; allowed with it: 0 or absent"),
    ({"speculation": {"num_speculative_tokens": 3, "draft_cost_ratio": 0.05}}, "kv_cache.weights_offload_bytes: "
     "85,899,345,920 with speculation is not modelled yet; allowed with it: 0 or absent"),
])
def test_what_offloading_cannot_be_is_refused_in_one_line(change, message):
    raw = _vllm("0.11.0", cpu_offload_gb=80)
    for section, values in change.items():
        raw[section] = {**raw.get(section, {}), **values}
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    assert str(err.value) == message


def test_the_shipped_scenario_offloading_pays_the_host_link_at_every_step_and_two_gpus_win():
    """scenarios/cpu_offload.yaml (README's table): each offloading variant's p50 TPOT is at least its reads' time,
    and the one without reads is an order of magnitude faster."""
    scenarios = dict(load_scenario_set(Path(__file__).resolve().parents[2] / "scenarios" / "cpu_offload.yaml").items())
    tpot = {}
    for name, scenario in scenarios.items():
        deployment = resolve(scenario)
        stream_s = deployment.weights_offloaded_bytes / deployment.gpu.host_link_bytes_per_s
        tpot[name] = simulate(scenario, make_workload(scenario)).summary["tpot_s_p50"]
        assert tpot[name] > stream_s
    assert resolve(scenarios["2xh100-tp2"]).weights_offloaded_bytes == 0
    assert tpot["2xh100-tp2"] * 10 < tpot["h200-offload-20gib"] < tpot["h100-offload-80gib"]


def _sglang(version: str, **flags) -> dict:
    return {**_vllm(version), "engine": {"name": "sglang", "version": version, "context_length": 8192, **flags}}


@pytest.mark.parametrize("version, prefill_graphs", [("0.4.0", False), ("0.5.11", False), ("0.5.14", False),
                                                     ("0.5.15", True), ("0.5.23", True)])
def test_sglang_offloads_as_vllm_v0_and_its_torch_compile_prefill_graphs_go_with_it(version, prefill_graphs):
    """SGLang's --cpu-offload-gb: whole GiB a GPU, copied in at every pass; 0.5.10-0.5.14's prefill graphs
    (torch.compile's piecewise ones) are turned off by it, 0.5.15's breakable ones are not (0.4.0 has none)."""
    scenario = validate_scenario(_sglang(version, cpu_offload_gb=80))
    assert scenario.kv_cache.weights_offload_bytes == 80 * GIB
    assert scenario.cost_model.overhead.graph_prefill is prefill_graphs
    assert any(f"SGLang {version} --cpu-offload-gb 80: " in note and "copied to the GPU" in note
               for note in scenario.engine.notes)
    off = [note for note in scenario.engine.notes if "off with weights in host memory before 0.5.15" in note]
    assert bool(off) is ((0, 5, 10) <= tuple(map(int, version.split("."))) < (0, 5, 15))


@pytest.mark.parametrize("flags, message", [
    ({"version": "0.3.6", "cpu_offload_gb": 80}, "engine.cpu_offload_gb: not a flag of sglang 0.3.6 (it came in "
     "0.3.6.post1); allowed: leave it out, or engine.version 0.3.6.post1 or later"),
    ({"version": "0.5.11", "cpu_offload_gb": 80.5}, "engine.cpu_offload_gb: 80.5 is not allowed; allowed: an integer"),
])
def test_sglangs_flag_is_a_whole_number_of_gib_from_0_3_6_post1(flags, message):
    flags = dict(flags)
    raw = _sglang(flags.pop("version"), **flags)
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    assert str(err.value) == message


def test_a_fit_wrapping_kernels_that_carry_the_reads_prices_one_overhead_with_both():
    """calibrate fit-engine wraps the scenario's kernels (the reads included, sim/run.py `_with_overhead`) with its own
    terms: one overhead results, so that the compiled pack, which has one slot, keeps the reads."""
    scenario = validate_scenario(_one_request(weights_offload_bytes=2 * GIB))
    kernels = make_cost_model(scenario)
    assert isinstance(kernels, EngineOverheadCostModel)
    stream_s = kernels.overhead.weights_stream_s
    fitted = EngineOverheadCostModel(kernels, engine_overhead("vllm-cudagraph"), 32)
    assert fitted.kernels is kernels.kernels and fitted.overhead.weights_stream_s == stream_s
    assert fitted.compiled_params()[4][O_WEIGHTS_STREAM] == stream_s
    plan = StepPlan(num_decode_seqs=8, decode_context_tokens=8 * 500, num_sampled_seqs=8)
    roofline_s = kernels.kernels.step_cost(plan).time_s
    assert fitted.step_cost(plan).time_s == pytest.approx(roofline_s + stream_s + 500e-6 + 8 * 10e-6, rel=1e-12)
