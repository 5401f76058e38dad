"""NVFP4 weights (`quantization.weights: nvfp4`): 4-bit floats with an FP8 scale per 16, W4A4 products on FP4 tensor
cores (Blackwell's), every linear layer but the LM head and the MoE router 4-bit (sim/model/memory.py); priced by the
roofline at the FP4 rate and by the measured tables from each engine's own NVFP4 rows on the B200 (issue 30, item 4:
a dtype is priced from its own measurements or refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers import one_error_line, servesim
from sim.config.cost_choice import default_cost_model
from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.measured import MeasuredCostModel, load_tables, quantization_unmeasured, tables_dir
from sim.cost.measured_kernel import SHAPE_MOE_NVFP4
from sim.cost.roofline import RooflineCostModel
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.hf_config import load_hf_config
from sim.model.memory import NVFP4_PARAM_BYTES, weight_bytes
from sim.model.shapes import layer_groups

REPO = Path(__file__).resolve().parents[2]
B200, H100 = get_gpu("b200"), get_gpu("h100-sxm")
LLAMA_70B = get_model("llama-3.1-70b")
QWEN3_235B = REPO / "sim" / "model" / "configs" / "qwen3-235b-a22b.json"
LLAMA_8B_CONFIG = json.loads((REPO / "tests" / "fixtures" / "hf" / "llama-3.1-8b.json").read_text())
FP4_GROUP = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
NVFP4_CONFIG = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                "config_groups": {"group_0": {"targets": ["Linear"], "weights": FP4_GROUP,
                                              "input_activations": {**FP4_GROUP, "dynamic": "local"}}},
                "ignore": ["lm_head"]}


def _raw() -> dict:
    return {"model": "llama-3.1-70b", "hardware": {"gpu": "b200"}, "quantization": {"weights": "nvfp4"},
            "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                         "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}},
            "run": {"num_requests": 5}}


def test_a_weight_takes_half_a_byte_and_its_share_of_one_fp8_scale_per_16():
    assert NVFP4_PARAM_BYTES == 0.5 + 1 / 16
    # Known answer: the 16-bit weights less (2 - 0.5625) bytes for every parameter of every linear layer but the LM
    # head (a dense model has no router); embeddings, norms and the LM head stay 16-bit.
    linear = sum(n * s.in_features * s.out_features * s.count for n, shapes in layer_groups(LLAMA_70B)
                 for s in shapes)
    expected = weight_bytes(LLAMA_70B, "bf16") - linear * (2 - NVFP4_PARAM_BYTES)
    assert weight_bytes(LLAMA_70B, "nvfp4") == pytest.approx(expected, rel=1e-12)


def test_the_moe_router_stays_16_bit():
    qwen = load_hf_config(QWEN3_235B)
    routers = sum(n * s.in_features * s.out_features for n, shapes in layer_groups(qwen) for s in shapes
                  if s.name == "router")
    others = sum(n * s.in_features * s.out_features * s.count for n, shapes in layer_groups(qwen) for s in shapes
                 if s.name != "router")
    assert routers > 0
    expected = weight_bytes(qwen, "bf16") - others * (2 - NVFP4_PARAM_BYTES)
    assert weight_bytes(qwen, "nvfp4") == pytest.approx(expected, rel=1e-12)


def test_the_roofline_runs_nvfp4_products_at_the_fp4_rate_and_reads_its_bytes():
    fp4 = RooflineCostModel(LLAMA_70B, B200, weight_dtype="nvfp4")
    fp8 = RooflineCostModel(LLAMA_70B, B200, weight_dtype="fp8", fp8_compute=True)
    assert fp4.flops_per_s == pytest.approx(9000e12 * B200.compute_efficiency)
    assert fp8.flops_per_s == pytest.approx(4500e12 * B200.compute_efficiency)
    # A long prefill is compute-bound in its linear layers: the same FLOPs, the FP4 step shorter; a small decode
    # step is bound by the weights' bytes: 0.5625 against 1 byte a weight.
    prefill = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[8192], prefill_context_tokens=[0],
                       num_sampled_seqs=1)
    a, b = fp4.step_cost(prefill), fp8.step_cost(prefill)
    assert a.flops == pytest.approx(b.flops, rel=1e-12) and a.time_s < b.time_s
    decode = StepPlan(num_decode_seqs=1, decode_context_tokens=100)
    assert fp4.step_cost(decode).bytes < 0.6 * fp8.step_cost(decode).bytes


def test_a_gpu_without_fp4_tensor_cores_refuses_nvfp4_in_one_line():
    with pytest.raises(ConfigError) as err:
        RooflineCostModel(LLAMA_70B, H100, tensor_parallel=2, weight_dtype="nvfp4")
    message = str(err.value)
    assert "\n" not in message and message.startswith(
        "quantization.weights: 'nvfp4' runs its products on FP4 tensor cores, which h100-sxm lacks")
    assert message.endswith("allowed: a GPU with an FP4 rate (b200), or weights bf16, fp16, fp8, int8, int4, mxfp4")
    with pytest.raises(ConfigError, match="fp8_compute: true with weights 'nvfp4'"):
        validate_scenario({**_raw(), "quantization": {"weights": "nvfp4", "fp8_compute": True}})


@pytest.mark.parametrize("fw", ["vllm", "sglang", "trtllm"])
def test_the_b200_tables_price_nvfp4_gemms_from_their_own_rows(fw):
    cost = MeasuredCostModel(LLAMA_70B, B200, weight_dtype="nvfp4", tables=fw)
    assert cost.gemm_rows == "nvfp4"
    gemm = cost.tables.gemm
    # Llama-3.1-70B's fused QKV projection (n 10240, k 8192) is a measured NVFP4 shape: every grid m gives its row,
    # in the model's own curve and not the fp8 or bf16 rows'
    grid = gemm[(gemm.dtype == "nvfp4") & (gemm.n == 10240) & (gemm.k == 8192)]
    other = gemm[(gemm.dtype == "fp8") & (gemm.n == 10240) & (gemm.k == 8192)].set_index("m")["latency_ms"]
    assert len(grid) > 10
    for m, ms in zip(grid.m, grid.latency_ms):
        assert cost._curves[(10240, 8192, "nvfp4")](float(m)) == pytest.approx(ms * 1e-3, rel=1e-9)
        assert m not in other.index or other[m] != ms
    # the LM head stays 16-bit: priced from the bf16 rows, as under fp8
    assert any(key[2] == "bf16" for key in cost._curves) and any(key[2] == "nvfp4" for key in cost._curves)
    bf16 = MeasuredCostModel(LLAMA_70B, B200, tables=fw)
    plan = StepPlan(num_decode_seqs=64, decode_context_tokens=64 * 1000)
    assert cost.step_time(plan) < bf16.step_time(plan)


@pytest.mark.parametrize("fw", ["vllm", "sglang", "trtllm"])
def test_nvfp4_experts_come_from_each_engines_nvfp4_fused_moe_rows(fw):
    qwen = load_hf_config(QWEN3_235B)
    cost = MeasuredCostModel(qwen, B200, weight_dtype="nvfp4", tables=fw, moe_routing="balanced")
    assert cost._moe.shape.kind == SHAPE_MOE_NVFP4
    rows, _ = cost.tables.moe_rows("balanced")
    rows = rows[(rows.dtype == "nvfp4") & (rows.hidden_size == 4096) & (rows.inter_size == 1536)
                & (rows.topk == 8) & (rows.num_experts == 128) & (rows.moe_tp_size == 1) & (rows.moe_ep_size == 1)]
    assert len(rows) > 5  # Qwen3-235B-A22B's experts on one GPU: a measured configuration
    for n, ms in zip(rows.num_tokens, rows.latency_ms):
        assert cost._moe(float(n)) == pytest.approx(ms * 1e-3, rel=1e-9)
    # the router is priced from the bf16 GEMM rows (it stays 16-bit)
    router = next(s for s in layer_groups(qwen)[0][1] if s.name == "router")
    assert (router.out_features, router.in_features, "bf16") in cost._curves


def test_tables_without_nvfp4_rows_refuse_it_and_the_default_choice_takes_the_b200s():
    why = quantization_unmeasured("h100-sxm", "nvfp4")
    assert why.startswith("quantization.weights: 'nvfp4' is not measured in the vllm tables of h100-sxm; allowed:")
    assert quantization_unmeasured("b200", "nvfp4") is None
    meta = load_tables(tables_dir("b200", "vllm")).meta
    assert meta["tables"]["gemm"]["kernels"]["nvfp4"] == "FlashInferCuteDslNvFp4LinearKernel"
    cm, choice = default_cost_model(_raw())
    assert cm["kind"] == "measured" and choice.startswith("measured: vllm kernel tables of b200")


def _scenario(tmp_path: Path, gpu: str, tp: int = 1) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**LLAMA_8B_CONFIG, "quantization_config": NVFP4_CONFIG}))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "model": {"hf_config": str(config)}, "hardware": {"gpu": gpu, "tensor_parallel": tp},
        "workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 64,
                                                                "output_tokens": 8}},
        "run": {"num_requests": 4}}))
    return path


def test_an_nvfp4_checkpoint_runs_as_stored_on_a_b200_and_is_refused_on_an_h100(tmp_path):
    assert validate_scenario(yaml.safe_load(_scenario(tmp_path, "b200").read_text())).quantization.weights == "nvfp4"
    ok = servesim("run", _scenario(tmp_path, "b200"), "--out", tmp_path / "b200", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    steps = pd.read_parquet(tmp_path / "b200" / "steps.parquet")
    assert len(steps) > 0
    line = one_error_line(servesim("run", _scenario(tmp_path, "h100-sxm"), "--out", tmp_path / "h100", cwd=tmp_path))
    assert "quantization.weights: 'nvfp4' runs its products on FP4 tensor cores, which h100-sxm lacks" in line
    assert not (tmp_path / "h100").exists()


@pytest.mark.parametrize("engine, weights", [
    ({"name": "vllm", "version": "0.11.0", "quantization": "modelopt_fp4"}, "nvfp4"),
    ({"name": "vllm", "version": "0.8.5", "quantization": "nvfp4"}, "nvfp4"),
    ({"name": "sglang", "version": "0.5.5.post1", "quantization": "modelopt_fp4"}, "nvfp4"),
    ({"name": "vllm", "version": "0.11.0", "command": "vllm serve nvidia/Llama-3.3-70B-Instruct-FP4 -q modelopt_fp4"},
     "nvfp4"),
    ({"name": "vllm", "version": "0.8.5", "quantization": "modelopt_fp4"},
     "engine.quantization: 'modelopt_fp4' is not a value of vllm 0.8.5's --quantization (it came in 0.9.0); allowed: "
     "another value, or engine.version 0.9.0 or later"),
    ({"name": "vllm", "version": "0.11.0", "quantization": "nvfp4"},
     "engine.quantization: 'nvfp4' is not a value of vllm 0.11.0's --quantization (its parser refuses it from 0.9.0); "
     "allowed: another value, or engine.version before 0.9.0"),
    ({"name": "sglang", "version": "0.4.5", "quantization": "modelopt_fp4"},
     "engine.quantization: 'modelopt_fp4' is not a value of sglang 0.4.5's --quantization (it came in 0.4.5.post1); "
     "allowed: another value, or engine.version 0.4.5.post1 or later"),
])
def test_the_engines_nvfp4_method_names_in_the_releases_that_have_them(engine, weights):
    raw = {**_raw(), "engine": engine}
    del raw["quantization"]
    if weights == "nvfp4":
        q = validate_scenario(raw).quantization
        assert (q.weights, q.fp8_compute) == ("nvfp4", False)
    else:
        with pytest.raises(ConfigError) as err:
            validate_scenario(raw)
        assert str(err.value) == weights
