"""The Blackwell GPUs whose kernel tables AIConfigurator 0.12.0 measured beside the B200 (B300, GB200, GB300, RTX PRO
6000 Blackwell Server Edition): each in the catalog, each engine's tables shipped and read, and chosen by default."""

import pytest

from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.measured import MeasuredCostModel, attention_kernel, load_tables, tables_dir
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.interconnects import interconnect_class

ADDED = {  # catalog name -> (AIConfigurator system, the device name its tables were measured on)
    "b300": ("b300_sxm", "NVIDIA B300 SXM6 AC"),
    "gb200": ("gb200", "NVIDIA GB200"),
    "gb300": ("gb300", "NVIDIA GB300"),
    "rtx-pro-6000": ("rtx_pro_6000_server", "NVIDIA RTX PRO 6000 Blackwell Server Edition"),
}
BASE = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 20}},
        "run": {"num_requests": 10}}
PREFILL = StepPlan(prefill_request_ids=[0, 1, 2, 3], prefill_chunk_tokens=[2048] * 4, prefill_context_tokens=[0] * 4,
                   num_sampled_seqs=4)


@pytest.mark.parametrize("gpu", ADDED)
@pytest.mark.parametrize("tables", ["vllm", "sglang", "trtllm"])
def test_each_engines_tables_are_the_gpus_own(gpu, tables):
    meta = load_tables(tables_dir(gpu, tables)).meta
    assert (meta["system"], meta["device_name"]) == ADDED[gpu]
    assert meta["framework"] == tables and meta["gpu"] == gpu


@pytest.mark.parametrize("gpu", ADDED)
def test_a_scenario_without_a_cost_model_is_priced_by_the_gpus_own_tables(gpu):
    for engine, version in (("vllm", "0.11.0"), ("sglang", "0.5.5"), ("trtllm", "1.2.0rc1")):
        sc = validate_scenario({**BASE, "hardware": {"gpu": gpu}, "engine": {"name": engine, "version": version}})
        assert sc.cost_model.kind == "measured", (engine, sc.cost_model_choice)
        assert sc.cost_model_choice.startswith(f"measured: {engine} kernel tables of {gpu}")


def test_the_measured_steps_follow_the_catalog_rates():
    """A compute-bound prefill step (four 2,048-token prompts of Llama-3.1-8B), priced from each GPU's own vLLM rows:
    the RTX PRO 6000 slower than the B300 by about their catalog bf16 rates' ratio (4.8x; the tables and the catalog
    rates were measured and read apart), the GB200 within 10% of the B200, the same silicon."""
    model = get_model("llama-3.1-8b")
    step = {gpu: MeasuredCostModel(model, get_gpu(gpu)).step_time(PREFILL) for gpu in [*ADDED, "b200"]}
    ratio = get_gpu("b300").bf16_flops_per_s / get_gpu("rtx-pro-6000").bf16_flops_per_s
    assert 0.67 * ratio < step["rtx-pro-6000"] / step["b300"] < 1.5 * ratio
    assert abs(step["gb200"] / step["b200"] - 1) < 0.1


def test_the_rtx_pro_6000_has_no_nvlink_and_the_engines_custom_all_reduce_stays_off_above_two_gpus():
    assert interconnect_class(get_gpu("rtx-pro-6000")) == "pcie"
    assert interconnect_class(get_gpu("gb200")) == "nvlink"
    for tp, expected in ((2, "custom"), (4, "nccl")):
        sc = validate_scenario({**BASE, "hardware": {"gpu": "rtx-pro-6000", "tensor_parallel": tp},
                                "engine": {"name": "vllm", "version": "0.11.0"}})
        assert sc.hardware.all_reduce == expected


def test_sglangs_attention_backend_is_the_kernel_its_tables_measured():
    assert [attention_kernel(gpu, "sglang") for gpu in ADDED] == ["trtllm_mha"] * 3 + ["flashinfer"]
    for gpu, backend in (("b300", "trtllm_mha"), ("rtx-pro-6000", "flashinfer")):
        sc = validate_scenario({**BASE, "hardware": {"gpu": gpu},
                                "engine": {"name": "sglang", "version": "0.5.14", "attention_backend": backend}})
        assert any(f"--attention-backend {backend}" in note for note in sc.engine.notes)
    with pytest.raises(ConfigError, match="^engine.attention_backend"):
        validate_scenario({**BASE, "hardware": {"gpu": "rtx-pro-6000"},
                           "engine": {"name": "sglang", "version": "0.5.14", "attention_backend": "trtllm_mha"}})


@pytest.mark.parametrize("tables", ["vllm", "sglang", "trtllm"])
def test_nvfp4_runs_on_each_added_gpu_from_its_fp4_rows(tables):
    for gpu in ADDED:
        sc = validate_scenario({**BASE, "model": "llama-3.1-70b", "hardware": {"gpu": gpu, "tensor_parallel": 2},
                                "quantization": {"weights": "nvfp4"}})
        assert sc.cost_model.kind == "measured", sc.cost_model_choice
        # a mixture of experts: its GEMMs and its fused experts from the GPU's own NVFP4 rows, no fallback noted
        cost = MeasuredCostModel(get_model("mixtral-8x7b"), get_gpu(gpu), tensor_parallel=2, weight_dtype="nvfp4",
                                 tables=tables)
        assert cost.gemm_rows == "nvfp4" and cost.step_time(PREFILL) > 0
        assert not [note for note in cost.notes if "no nvfp4" in note], dict(cost.notes)
