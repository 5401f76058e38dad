"""vLLM 0.10.x-0.11.x run their Triton attention backend on an sm_80+ GPU other than sm_90 for a model with attention
sinks (gpt-oss) or, from 0.11.0, an fp8 KV cache (vllm/platforms/cuda.py); where the GPU's vLLM tables measured
another kernel the preset says so (sim/config/engines/vllm.py)."""

from pathlib import Path

import pytest

from sim.config.files import validate_scenario

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
            "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}}
GPT_OSS = {"model": {"hf_config": str(ROOT / "benchmarks" / "published" / "gpt-oss-20b.json")},
           "quantization": {"weights": "mxfp4"}, "workload": WORKLOAD}


def triton_notes(raw: dict, gpu: str, version: str) -> list[str]:
    sc = validate_scenario({**raw, "hardware": {"gpu": gpu}, "engine": {"name": "vllm", "version": version}})
    return [n for n in sc.engine.notes if "Triton backend" in n]


@pytest.mark.parametrize("gpu, sm, kernel", [("a100-80gb", "sm_80", "vllm_flash_attn"),
                                             ("l40s", "sm_89", "vllm_flash_attn_fa2"),
                                             ("b300", "sm_103", "vllm_flashinfer_trtllmprefill (prefill) and "
                                              "vllm_flashinfer_trtllmdecode (decode)")])  # sm_103: not sm_100's branch
@pytest.mark.parametrize("version", ["0.10.2", "0.11.0"])
def test_gpt_oss_off_hopper_runs_triton_attention_priced_by_the_measured_kernels_rows(gpu, sm, kernel, version):
    (note,) = triton_notes(GPT_OSS, gpu, version)
    assert note.startswith(f"vLLM {version}: attention run by its Triton backend (its attention sinks, on {sm}: ")
    assert f"the vLLM tables of {gpu} measured {kernel} at bf16 KV, whose rows price it" in note


@pytest.mark.parametrize("gpu, version", [("h100-sxm", "0.11.0"),  # sm_90: FlashAttention 3, which has sinks
                                          ("b200", "0.11.0"),  # sm_100 exactly: FlashInfer first
                                          ("a100-80gb", "0.12.0")])  # a priority list from 0.12.0, not read here
def test_no_note_where_the_rule_does_not_apply_or_was_not_read(gpu, version):
    assert triton_notes(GPT_OSS, gpu, version) == []


def test_an_fp8_kv_cache_takes_triton_from_0_11_and_the_note_names_the_fp8_rows_kernel():
    llama = {"model": "llama-3.1-8b", "quantization": {"kv_cache": "fp8"}, "workload": WORKLOAD}
    (note,) = triton_notes(llama, "l40s", "0.11.0")
    assert "(an fp8 KV cache, on sm_89: " in note
    assert ("measured vllm_flashinfer_fiprefill (prefill) and vllm_flashinfer_fidecode (decode) at fp8 KV, whose "
            "rows price it") in note
    assert triton_notes(llama, "l40s", "0.10.2") == []  # 0.10.2 takes Triton for sinks only
    assert triton_notes({**llama, "quantization": {"kv_cache": "bf16"}}, "l40s", "0.11.0") == []
