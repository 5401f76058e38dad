"""The tensor-parallel all-reduce (`hardware.all_reduce`): the engine's own kernel or NCCL's, NCCL's table imported
once per GPU (calibrate/aic_import.py convert_nccl), priced by the measured model and the learned roofline, and set by
the engine presets where the engine runs NCCL (sim/config/engines/base.py `custom_all_reduce`, LMDeploy)."""

import json
import shutil

import pandas as pd
import pytest
import yaml
from helpers import one_error_line, servesim

from calibrate.aic_import import convert_nccl
from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.learned import LearnedRooflineCostModel, load_learned
from sim.cost.measured import MEASURED_DIR, MEASURED_FORMAT_VERSION, MeasuredCostModel, nccl_allreduce
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.interconnects import NCCL_ALL_REDUCE

BASE = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}
LLAMA_70B = get_model("llama-2-70b")  # 80 layers, hidden 8192
A100 = get_gpu("a100-80gb")


def _aic_nccl_table(rows: list[tuple]) -> pd.DataFrame:
    """An AIConfigurator comm/nccl table: (op_name, nccl_dtype, num_gpus, message_size, latency ms) rows."""
    return pd.DataFrame([{"framework": "TRTLLM", "version": "2.27.3", "device": "NVIDIA A100-SXM4-80GB",
                          "op_name": op, "kernel_source": "NCCL", "nccl_dtype": dtype, "num_gpus": n,
                          "message_size": size, "latency": ms} for op, dtype, n, size, ms in rows])


def test_the_import_keeps_nccls_fp16_all_reduce_at_the_version_the_system_file_names(tmp_path):
    root = tmp_path / "systems"
    (root / "data" / "a100_sxm" / "comm" / "nccl" / "2.27.3").mkdir(parents=True)
    (root / "data" / "a100_sxm" / "comm" / "nccl" / "2.23").mkdir(parents=True)
    (root / "a100_sxm.yaml").write_text(yaml.safe_dump({"misc": {"nccl_version": "2.27.3"}}))
    _aic_nccl_table([("all_reduce", "half", 4, 1024, 0.010), ("all_reduce", "half", 4, 1024, 0.014),
                     ("all_reduce", "half", 4, 1024, 0.030),  # repeats: their median is kept
                     ("all_reduce", "int8", 4, 1024, 0.001), ("all_gather", "half", 4, 1024, 0.002),
                     ("all_reduce", "half", 2, 2048, 0.020)]).to_parquet(
        root / "data" / "a100_sxm" / "comm" / "nccl" / "2.27.3" / "nccl_perf.parquet")
    _aic_nccl_table([("all_reduce", "half", 4, 1024, 0.5)]).to_parquet(  # another version: not read
        root / "data" / "a100_sxm" / "comm" / "nccl" / "2.23" / "nccl_perf.parquet")
    meta = convert_nccl(root, "a100_sxm", tmp_path / "out", "a100-80gb", "0.12.0")
    table = pd.read_parquet(tmp_path / "out" / "allreduce.parquet")
    assert table.to_dict("records") == [
        {"backend": "nccl", "num_gpus": 2, "message_elements": 2048, "latency_ms": 0.020},
        {"backend": "nccl", "num_gpus": 4, "message_elements": 1024, "latency_ms": 0.014}]
    assert (meta["nccl_version"], meta["device_name"], meta["rows"]) == ("2.27.3", "NVIDIA A100-SXM4-80GB", 2)
    assert json.loads((tmp_path / "out" / "meta.json").read_text()) == meta
    (root / "a100_sxm.yaml").write_text(yaml.safe_dump({"misc": {"nccl_version": "2.29.2"}}))
    with pytest.raises(LookupError, match="2.29.2"):
        convert_nccl(root, "a100_sxm", tmp_path / "other", "a100-80gb", "0.12.0")
    assert not (tmp_path / "other").exists()


def _decode(batch: int) -> StepPlan:
    return StepPlan(num_decode_seqs=batch, decode_context_tokens=batch * 1000, num_sampled_seqs=batch)


@pytest.mark.parametrize("batch", [1, 8])
def test_nccl_replaces_the_engines_all_reduce_and_nothing_else(batch):
    # A decode step all-reduces batch x hidden elements twice per layer: at measured message sizes (8192 and 65536
    # elements, grid points reproduced exactly) the step differs by 2 x layers x (NCCL's time - the custom kernel's).
    custom = MeasuredCostModel(LLAMA_70B, A100, tensor_parallel=4)
    nccl = MeasuredCostModel(LLAMA_70B, A100, tensor_parallel=4, all_reduce=NCCL_ALL_REDUCE)
    elements = batch * LLAMA_70B.hidden_size
    ours = pd.read_parquet(MEASURED_DIR / "a100-80gb" / "allreduce.parquet")
    ours = ours[(ours.backend == "graph") & (ours.num_gpus == 4) & (ours.message_elements == elements)]
    theirs, meta = nccl_allreduce(MEASURED_DIR / "a100-80gb")
    theirs = theirs[(theirs.num_gpus == 4) & (theirs.message_elements == elements)]
    assert nccl._allreduce(elements) == pytest.approx(theirs["latency_ms"].iloc[0] * 1e-3, rel=1e-12)
    expected = 2 * LLAMA_70B.num_layers * (theirs["latency_ms"].iloc[0] - ours["latency_ms"].iloc[0]) * 1e-3
    assert expected > 0  # NCCL is the slower one for a decode step's message on an A100
    assert nccl.step_time(_decode(batch)) - custom.step_time(_decode(batch)) == pytest.approx(expected, rel=1e-9)
    assert f"NCCL {meta['nccl_version']}" in repr(nccl) and "all-reduce nccl" in repr(nccl)


def test_one_gpu_has_no_all_reduce_to_change():
    one = MeasuredCostModel(get_model("llama-3.1-8b"), A100, all_reduce=NCCL_ALL_REDUCE)
    assert one.step_time(_decode(8)) == MeasuredCostModel(get_model("llama-3.1-8b"), A100).step_time(_decode(8))


def test_a_gpu_without_nccls_table_is_refused_in_one_line(tmp_path):
    shutil.copytree(MEASURED_DIR / "a100-80gb", tmp_path / "a100-80gb", ignore=shutil.ignore_patterns("nccl"))
    with pytest.raises(ConfigError) as err:
        MeasuredCostModel(LLAMA_70B, A100, tensor_parallel=4, root=tmp_path, all_reduce=NCCL_ALL_REDUCE)
    line = str(err.value)
    assert "\n" not in line and line.startswith("hardware.all_reduce: 'nccl' is not measured for 'a100-80gb'")
    assert line.endswith("allowed: custom")


def test_the_learned_roofline_prices_nccl_from_its_own_learned_curve():
    learned = load_learned()
    nccl = LearnedRooflineCostModel(LLAMA_70B, A100, tensor_parallel=4, all_reduce=NCCL_ALL_REDUCE)
    custom = LearnedRooflineCostModel(LLAMA_70B, A100, tensor_parallel=4)
    assert nccl.ar_latency_s == learned["allreduce_nccl"]["nvlink"]["4"]["latency_s"]
    assert custom.ar_latency_s == learned["allreduce"]["nvlink"]["4"]["latency_s"]
    assert nccl.step_time(_decode(1)) > custom.step_time(_decode(1))
    old = {k: v for k, v in learned.items() if k != "allreduce_nccl"}  # a file written before NCCL was learned
    with pytest.raises(ConfigError, match="hardware.all_reduce: 'nccl' is not in this learned_roofline.json"):
        LearnedRooflineCostModel(LLAMA_70B, A100, tensor_parallel=4, learned=old, all_reduce=NCCL_ALL_REDUCE)


def _scenario(engine: dict | None, gpu: str, tp: int, **hardware):
    raw = {**BASE, "model": "llama-3.1-8b", "hardware": {"gpu": gpu, "tensor_parallel": tp, **hardware}}
    return validate_scenario({**raw, "engine": engine} if engine else raw)


@pytest.mark.parametrize("engine, gpu, tp, expected", [
    (None, "a100-80gb", 4, "custom"),  # no engine: the default
    ({"name": "lmdeploy", "version": "0.1.0a1"}, "a100-80gb", 4, "nccl"),  # TurboMind calls NCCL only
    ({"name": "vllm", "version": "0.11.0"}, "a100-80gb", 4, "custom"),
    ({"name": "vllm", "version": "0.11.0", "disable_custom_all_reduce": True}, "a100-80gb", 4, "nccl"),
    ({"name": "vllm", "version": "0.11.0"}, "l40s", 2, "custom"),  # two PCIe GPUs: the custom kernel runs
    ({"name": "vllm", "version": "0.11.0"}, "l40s", 4, "nccl"),  # more than two PCIe-only GPUs: off
    ({"name": "vllm", "version": "0.6.0"}, "l40s", 8, "nccl"),
    ({"name": "sglang", "version": "0.5.3"}, "l40s", 4, "nccl"),
    ({"name": "sglang", "version": "0.5.3"}, "h100-sxm", 8, "custom"),
    ({"name": "sglang", "version": "0.3.0", "disable_custom_all_reduce": True}, "h100-sxm", 4, "nccl"),
    ({"name": "trtllm", "version": "1.2.0rc1"}, "l40s", 4, "custom"),  # its own kernel: not read, unchanged
])
def test_the_presets_choose_the_all_reduce_their_engine_runs(engine, gpu, tp, expected):
    assert _scenario(engine, gpu, tp).hardware.all_reduce == expected


def test_a_scenarios_own_all_reduce_wins_over_the_engines_rule():
    assert _scenario({"name": "vllm", "version": "0.11.0"}, "l40s", 4, all_reduce="custom").hardware.all_reduce \
        == "custom"
    custom = _scenario({"name": "lmdeploy", "version": "0.1.0a1"}, "a100-80gb", 4, all_reduce="custom")
    assert custom.hardware.all_reduce == "custom"
    assert not any("NCCL" in note for note in custom.engine.notes)  # the preset's note goes with its value only


def test_a_flag_that_contradicts_the_scenarios_all_reduce_is_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "model": "llama-3.1-8b",
                                    "hardware": {"gpu": "a100-80gb", "tensor_parallel": 4, "all_reduce": "custom"},
                                    "engine": {"name": "vllm", "version": "0.11.0",
                                               "disable_custom_all_reduce": True}}))
    out = tmp_path / "out"
    line = one_error_line(servesim("run", str(path), "--out", str(out)))
    assert line == ("error: engine.disable_custom_all_reduce: true contradicts hardware.all_reduce 'custom'; "
                    "allowed: give one of them, or hardware.all_reduce 'nccl' (vLLM)")
    assert not out.exists()
    with pytest.raises(ConfigError) as err:
        _scenario(None, "a100-80gb", 4, all_reduce="ring")
    assert str(err.value) == """hardware.all_reduce: "ring" is not allowed; allowed: 'custom' or 'nccl'"""


def test_the_lmdeploy_preset_runs_its_tp4_steps_with_nccls_all_reduce():
    sc = _scenario({"name": "lmdeploy", "version": "0.1.0a1"}, "a100-80gb", 4)
    from sim.run import make_cost_model
    assert "all-reduce: NCCL's" in repr(make_cost_model(sc))
    assert any("NCCL's all-reduce priced from the NCCL version AIConfigurator measured" in n for n in sc.engine.notes)


def test_the_label_names_nccls_all_reduce_where_it_prices_a_step():
    from sim.cost.labels import cost_model_label
    nccl = MeasuredCostModel(LLAMA_70B, A100, tensor_parallel=4, all_reduce=NCCL_ALL_REDUCE)
    assert cost_model_label(nccl) == "measured (AIConfigurator a100_sxm vllm 0.14.0, NCCL all-reduce)"
    assert cost_model_label(MeasuredCostModel(LLAMA_70B, A100, tensor_parallel=4)) == \
        "measured (AIConfigurator a100_sxm vllm 0.14.0)"
    learned = LearnedRooflineCostModel(LLAMA_70B, A100, tensor_parallel=4, all_reduce=NCCL_ALL_REDUCE)
    assert cost_model_label(learned) == "learned roofline (NCCL all-reduce)"
    one = LearnedRooflineCostModel(get_model("llama-3.1-8b"), A100, all_reduce=NCCL_ALL_REDUCE)
    assert cost_model_label(one) == "learned roofline"  # one GPU: no all-reduce to name


def test_an_nccl_table_of_another_format_is_refused_in_one_line(tmp_path):
    shutil.copytree(MEASURED_DIR / "a100-80gb", tmp_path / "a100-80gb")
    meta_path = tmp_path / "a100-80gb" / "nccl" / "meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "format_version": 9}))
    with pytest.raises(ConfigError) as err:
        nccl_allreduce(tmp_path / "a100-80gb")
    assert str(err.value) == (f"hardware.all_reduce: '{meta_path}' has format_version 9; allowed: "
                              f"{MEASURED_FORMAT_VERSION}")
