"""TensorRT-LLM's MoE kernel for MXFP4 experts (gpt-oss): CUTLASS by default up to 1.2, AUTO from 1.3 (TRITON on
Hopper, TRTLLM on Blackwell); the TensorRT-LLM tables' MXFP4 rows are TRITON's on Hopper and TRTLLM's on Blackwell,
so a run on another kernel is priced from them and says so (sim/config/engines/trtllm.py)."""

from pathlib import Path

import pytest

from sim.config.files import validate_scenario
from sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
GPT_OSS = {"model": {"hf_config": str(ROOT / "sim" / "model" / "configs" / "gpt-oss-20b.json")},
           "quantization": {"weights": "mxfp4"},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                        "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}},
           "run": {"num_requests": 5}}


def moe_notes(gpu: str, version: str, **flags) -> list[str]:
    sc = validate_scenario({**GPT_OSS, "hardware": {"gpu": gpu},
                            "engine": {"name": "trtllm", "version": version, **flags}})
    return [n for n in sc.engine.notes if "MXFP4 experts" in n]


@pytest.mark.parametrize("gpu, measured", [("h100-sxm", "TRITON"), ("h200", "TRITON"), ("b200", "TRTLLM"),
                                           ("gb200", "TRTLLM")])
def test_before_1_3_the_default_cutlass_kernel_is_not_the_one_measured_and_a_note_says_which_prices_it(gpu, measured):
    (note,) = moe_notes(gpu, "1.2.0rc1")
    assert note.startswith("TensorRT-LLM 1.2.0rc1: MXFP4 experts run by CUTLASS (its default moe_config.backend;")
    assert f"the tables' {measured} rows price them" in note
    (named,) = moe_notes(gpu, "1.2.0rc1", moe_backend=measured)  # the kernel the tables measured, named
    assert named == (f"TensorRT-LLM 1.2.0rc1: MXFP4 experts run by {measured} (moe_config.backend), the kernel the "
                     f"TensorRT-LLM tables of {gpu} measured")


@pytest.mark.parametrize("gpu, measured", [("h100-sxm", "TRITON"), ("b200", "TRTLLM")])
def test_from_1_3_auto_picks_the_measured_kernel(gpu, measured):
    assert moe_notes(gpu, "1.3.0rc20") == [f"TensorRT-LLM 1.3.0rc20: MXFP4 experts run by {measured} (its default "
                                           f"moe_config.backend AUTO), the kernel the TensorRT-LLM tables of {gpu} "
                                           "measured"]
    (cutlass,) = moe_notes(gpu, "1.3.0rc20", moe_backend="CUTLASS")
    assert f"the tables' {measured} rows price them" in cutlass


def test_the_kernel_changes_a_note_not_a_price():
    """No CUTLASS MXFP4 rows are measured: the same rows price either kernel, so the step times are the same."""
    from sim.api import make_workload, simulate
    runs = []
    for flags in ({}, {"moe_backend": "TRITON"}):
        sc = validate_scenario({**GPT_OSS, "hardware": {"gpu": "h100-sxm"},
                                "engine": {"name": "trtllm", "version": "1.2.0rc1", **flags}})
        runs.append(simulate(sc, make_workload(sc)).summary["ttft_s_mean"])
    assert runs[0] == runs[1]


def test_a_dense_or_bf16_model_gets_no_moe_kernel_note():
    sc = validate_scenario({**GPT_OSS, "model": "llama-3.1-8b", "quantization": {"weights": "bf16"},
                            "hardware": {"gpu": "h100-sxm"}, "engine": {"name": "trtllm", "version": "1.2.0rc1"}})
    assert not [n for n in sc.engine.notes if "MXFP4" in n]


@pytest.mark.parametrize("version, value, words", [
    ("1.2.0rc1", "AUTO", "engine.moe_backend: 'AUTO' is not a value of trtllm 1.2.0rc1's moe_backend (it came in 1.3)"),
    ("1.2.0rc1", "FAST", "engine.moe_backend: 'FAST' is not allowed; allowed: AUTO, CUTLASS, TRITON, TRTLLM"),
    ("0.17", "TRITON", "engine.moe_backend: not a flag of trtllm 0.17.0 (it came in 1.0)"),
])
def test_a_backend_the_version_does_not_have_is_refused_in_one_line(version, value, words):
    with pytest.raises(ConfigError) as err:
        moe_notes("h100-sxm", version, moe_backend=value)
    assert str(err.value).startswith(words) and "\n" not in str(err.value)


def test_auto_for_another_mxfp4_architecture_says_its_choice_was_not_read():
    sc = validate_scenario({**GPT_OSS, "model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "tensor_parallel": 2},
                            "engine": {"name": "trtllm", "version": "1.3.0rc20"}})
    (note,) = [n for n in sc.engine.notes if "MXFP4 experts" in n]
    assert note == ("TensorRT-LLM 1.3.0rc20: MXFP4 experts run by what its default moe_config.backend AUTO picks for "
                    "mixtral-8x7b (not read); the tables' MXFP4 rows price them")
