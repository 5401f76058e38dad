"""vLLM 0.10.x-0.11.x run their Triton attention backend on an sm_80+ GPU other than sm_90 for a model with attention
sinks (gpt-oss) or, from 0.11.0, an fp8 KV cache (vllm/platforms/cuda.py): the preset sets `attention.backend:
triton`, and the measured model prices it as FlashAttention-2's context rows times the Triton / FA2 ratio measured
where both kernels were (calibrate/measured/vllm_triton_prefill.json, calibrate/aic_import.py)."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate.aic_import import kernel_ratios
from sim.config.files import validate_scenario
from sim.cost.measured import (
    FA2_ATTENTION,
    MEASURED_DIR,
    TRITON_ATTENTION,
    TRITON_PREFILL_FILE,
    MeasuredCostModel,
    triton_prefill_ratio,
)
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.run import make_cost_model, simulate

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
            "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}}
GPT_OSS = {"model": {"hf_config": str(ROOT / "sim" / "model" / "configs" / "gpt-oss-20b.json")},
           "quantization": {"weights": "mxfp4"}, "workload": WORKLOAD}


def preset(raw: dict, gpu: str, version: str):
    sc = validate_scenario({**raw, "hardware": {"gpu": gpu}, "engine": {"name": "vllm", "version": version}})
    return sc, [n for n in sc.engine.notes if "Triton backend" in n]


# --- the preset -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu, sm", [("a100-80gb", "sm_80"), ("l40s", "sm_89"), ("rtx-pro-6000", "sm_120")])
@pytest.mark.parametrize("version", ["0.10.2", "0.11.0", "0.12.0", "0.14.0", "0.24.0"])
def test_gpt_oss_off_hopper_and_blackwell_dc_runs_the_triton_backend(gpu, sm, version):
    sc, (note,) = preset(GPT_OSS, gpu, version)
    assert sc.attention.backend == "triton"
    assert note == (f"vLLM {version}: attention run by its Triton backend (its attention sinks, on {sm}: "
                    "vllm/platforms/cuda.py): attention.backend triton")


def test_an_sm_103_gpu_takes_triton_until_flashinfer_gains_sinks_on_every_sm_10x_at_0_13():
    for version in ("0.10.2", "0.11.0", "0.12.0"):  # FlashInfer's TRT-LLM kernels on sm_100 exactly
        assert preset(GPT_OSS, "b300", version)[0].attention.backend == "triton"
    for version in ("0.13.0", "0.14.0"):
        assert preset(GPT_OSS, "b300", version)[0].attention.backend is None


def test_a_release_past_the_newest_read_keeps_its_rule_and_says_so():
    sc, (note,) = preset(GPT_OSS, "a100-80gb", "0.30.0")
    assert sc.attention.backend == "triton"
    assert "vllm/platforms/cuda.py; read to 0.24.0, taken for 0.30.0)" in note


@pytest.mark.parametrize("gpu, version", [("h100-sxm", "0.11.0"),  # sm_90: FlashAttention 3, which has sinks
                                          ("h100-sxm", "0.24.0"),
                                          ("b200", "0.11.0"),  # sm_100 exactly: FlashInfer first
                                          ("b200", "0.24.0")])
def test_no_triton_backend_where_the_rule_does_not_apply(gpu, version):
    """(Before 0.10.1 vLLM has no gpt-oss, which it refuses: tests/unit/test_vllm_v0_fallback.py.)"""
    sc, notes = preset(GPT_OSS, gpu, version)
    assert sc.attention.backend is None and notes == []


def test_an_fp8_kv_cache_takes_triton_in_0_11_only():
    llama = {"model": "llama-3.1-8b", "quantization": {"kv_cache": "fp8"}, "workload": WORKLOAD}
    sc, (note,) = preset(llama, "l40s", "0.11.0")
    assert sc.attention.backend == "triton" and "(an fp8 KV cache, on sm_89: " in note
    assert preset(llama, "l40s", "0.10.2")[0].attention.backend is None  # 0.10.2 takes Triton for sinks only
    assert preset(llama, "l40s", "0.12.0")[0].attention.backend is None  # 0.12.0: FlashInfer first
    assert preset({**llama, "quantization": {"kv_cache": "bf16"}}, "l40s", "0.11.0")[0].attention.backend is None


def test_an_mla_model_takes_vllms_mla_backends_not_this_rule():
    deepseek = {"model": {"hf_config": str(ROOT / "sim" / "model" / "configs" / "deepseek-r1.json")},
                "quantization": {"kv_cache": "fp8"}, "workload": WORKLOAD}
    sc = validate_scenario({**deepseek, "hardware": {"gpu": "b300", "tensor_parallel": 8},  # sm_103: the rule's
                            "engine": {"name": "vllm", "version": "0.11.0"}})
    assert sc.attention.backend is None


def test_the_scenarios_own_backend_wins_over_the_presets():
    sc, _ = preset({**GPT_OSS, "attention": {"backend": None}}, "a100-80gb", "0.11.0")
    assert sc.attention.backend is None


# --- the ratio ------------------------------------------------------------------------------------------------

def _rows(kernel: str, latency: float, window: int = 0, isl: int = 1024, heads: int = 32) -> dict:
    return {"kernel_source": kernel, "latency": latency, "window_size": window, "batch_size": 1, "isl": isl,
            "num_heads": heads, "num_key_value_heads": 8, "head_dim": 128, "step": 0}


def test_kernel_ratios_pairs_full_attention_shapes_both_kernels_measured():
    rows = pd.DataFrame([_rows(FA2_ATTENTION, 1.0), _rows(TRITON_ATTENTION, 2.0),
                         _rows(FA2_ATTENTION, 3.0, isl=4096), _rows(TRITON_ATTENTION, 7.5, isl=4096),
                         _rows(TRITON_ATTENTION, 9.0, window=128),  # a sliding window's row: not full attention
                         _rows(TRITON_ATTENTION, 5.0, heads=64)])  # a shape FA2 was not measured at
    ratios = kernel_ratios(rows, TRITON_ATTENTION, FA2_ATTENTION)
    assert sorted(ratios.tolist()) == [2.0, 2.5]


def test_the_ratio_is_the_log_mean_over_the_gpus_at_the_lengths_all_measured(tmp_path):
    data = {"gpus": {"a": {"isl": [1, 1000, 4000], "ratio": [1.0, 2.0, 3.0], "framework_version": "0.24.0"},
                     "b": {"isl": [1, 1000], "ratio": [1.0, 8.0], "framework_version": "0.24.0"}}}
    (tmp_path / TRITON_PREFILL_FILE).write_text(json.dumps(data))
    isl, log_ratio, _ = triton_prefill_ratio(tmp_path)
    assert isl.tolist() == [1.0, 1000.0] and np.exp(log_ratio) == pytest.approx([1.0, 4.0], rel=1e-12)
    (tmp_path / TRITON_PREFILL_FILE).write_text(json.dumps({"gpus": {}}))
    with pytest.raises(ConfigError, match=r"^attention.backend: 'triton' has no ratio"):
        triton_prefill_ratio(tmp_path)


def test_the_shipped_ratio_comes_from_the_two_gpus_that_measured_both_and_grows_with_the_prompt():
    shipped = json.loads((MEASURED_DIR / TRITON_PREFILL_FILE).read_text())
    assert set(shipped["gpus"]) == {"l40s", "rtx-pro-6000"}
    assert shipped["kernel"] == TRITON_ATTENTION and shipped["against"] == FA2_ATTENTION
    isl, log_ratio, _ = triton_prefill_ratio()
    ratio = dict(zip(isl.tolist(), np.exp(log_ratio).tolist()))
    assert ratio[16384] > ratio[4096] > ratio[1024] > 1.5 > ratio[128]  # Triton falls behind as prompts grow


# --- the price ------------------------------------------------------------------------------------------------

def _model(gpu: str, backend: str | None, tables: str = "vllm") -> MeasuredCostModel:
    return MeasuredCostModel(get_model("llama-3.1-8b"), get_gpu(gpu), tables=tables, attention_backend=backend)


def test_on_fa2_tables_context_attention_is_fa2s_times_the_ratio_and_decode_is_fa2s():
    fa2, triton = _model("a100-80gb", None), _model("a100-80gb", "triton")
    isl, log_ratio, _ = triton_prefill_ratio()
    ratio = dict(zip(isl.tolist(), np.exp(log_ratio).tolist()))
    for tokens in (128, 1024, 16384):  # measured prompt lengths: the ratio exactly
        for batch in (1, 8):
            assert triton._prefill(batch, tokens) == pytest.approx(fa2._prefill(batch, tokens) * ratio[tokens],
                                                                   rel=1e-9)
    assert triton._prefill(1, 65536) == pytest.approx(fa2._prefill(1, 65536) * ratio[16384], rel=1e-9)  # held past
    between = triton._prefill(1, 2500) / fa2._prefill(1, 2500)
    assert ratio[2048] < between < ratio[3072]
    assert triton._decode(8, 4096) == fa2._decode(8, 4096)
    (note,) = [n for n in triton.note_lines() if n.startswith("attention.backend triton")]
    assert "priced as vllm_flash_attn's rows (FlashAttention-2) x vLLM's Triton / FA2 ratio" in note
    assert f"({ratio[16384]:.2f}x at 16,384 tokens, held past)" in note
    assert triton.source.endswith("(context x Triton / FA2)") and "Triton" not in fa2.source


def test_tables_of_another_kernel_price_triton_with_their_own_rows_and_say_so():
    fa3, triton = _model("h100-sxm", None), _model("h100-sxm", "triton")
    assert triton._prefill(1, 4096) == fa3._prefill(1, 4096)
    assert any(n.startswith("attention.backend triton: the vLLM tables of h100-sxm measured vllm_flash_attn_fa3 at "
                            "bf16 KV, not FlashAttention-2") for n in triton.note_lines())


def test_another_engines_tables_refuse_vllms_triton_backend():
    with pytest.raises(ConfigError, match=r"^attention.backend: 'triton' \(vLLM's Triton backend\) is priced from "
                                          r"vLLM's tables only, not cost_model.tables 'sglang'"):
        _model("h100-sxm", "triton", tables="sglang")


def test_the_default_choice_skips_a_profile_that_ran_another_backend_and_an_explicit_one_is_refused():
    base = {"workload": WORKLOAD, "attention": {"backend": "triton"}, "run": {"num_requests": 5}}
    sc = validate_scenario(base)  # the H100 8B quickstart setup: its whole-step profile ran FlashAttention
    assert sc.cost_model.kind == "measured"
    sc = validate_scenario({**base, "cost_model": {"kind": "calibrated"}})
    with pytest.raises(ConfigError, match=r"^attention.backend: 'triton' is not the backend profile .* was measured "
                                          r"with; allowed: null, or cost_model.kind 'measured'"):
        make_cost_model(sc)


def test_a_materialized_kernel_has_no_backend():
    with pytest.raises(ConfigError, match="backend: 'triton' with kernel 'materialized'"):
        validate_scenario({"workload": WORKLOAD, "attention": {"kernel": "materialized", "backend": "triton"}})


def test_a_gpt_oss_run_on_an_a100_is_slower_and_its_notes_say_how_triton_was_priced():
    raw = {**GPT_OSS, "hardware": {"gpu": "a100-80gb"}, "run": {"num_requests": 20, "seed": 1},
           "workload": {**WORKLOAD, "arrival": {"kind": "burst"},
                        "lengths": {"kind": "fixed", "input_tokens": 8000, "output_tokens": 4}}}
    runs = {}
    for backend in ("triton", None):
        res = simulate(validate_scenario({**raw, "attention": {"backend": backend},
                                          "engine": {"name": "vllm", "version": "0.11.0"}}))
        runs[backend] = res
    assert runs["triton"].summary["ttft_s_mean"] > runs[None].summary["ttft_s_mean"]
    assert any("Triton / FA2" in n for n in runs["triton"].extras["cost_model_notes"])
    assert not any("Triton / FA2" in n for n in runs[None].extras["cost_model_notes"])
    assert math.isfinite(runs["triton"].summary["ttft_s_mean"])
