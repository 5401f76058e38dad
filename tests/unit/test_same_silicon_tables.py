"""A part sold with other links than a measured GPU, on the same silicon (the H800 is the H100 SXM's die, clocks and
memory with NVLink at 400 GB/s; the A800 the A100 80GB SXM's): its twin's measured tables price its kernels
(`GPUSpec.kernels_as`, `sim.cost.measured.tables_gpu`), its all-reduces on its own links."""

import pandas as pd
import pytest

from helpers import load_benchmark
from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.measured import MEASURED_DIR, MeasuredCostModel, measured_gpus, nccl_allreduce, tables_gpu
from sim.errors import ConfigError
from sim.model.catalog import GPUS, get_gpu, get_model
from sim.model.interconnects import NCCL_ALL_REDUCE
from sim.run import make_cost_model

TWINS = {"h800": "h100-sxm", "a800": "a100-80gb"}
LLAMA_70B = get_model("llama-3.1-70b")
BASE = {"model": "llama-3.1-70b",
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 20}},
        "run": {"num_requests": 10}}
PREFILL = StepPlan(prefill_request_ids=[0, 1], prefill_chunk_tokens=[2048] * 2, prefill_context_tokens=[0] * 2,
                   num_sampled_seqs=2)
DECODE = StepPlan(num_decode_seqs=32, decode_context_tokens=32 * 1000, num_sampled_seqs=32)


def test_every_kernels_as_names_a_measured_catalog_gpu_of_the_same_rates():
    named = {key: g.kernels_as for key, g in GPUS.items() if g.kernels_as}
    assert named == TWINS
    for part, twin in named.items():
        assert twin in measured_gpus() and part not in measured_gpus()
        same = ("bf16_flops_per_s", "fp8_flops_per_s", "hbm_bytes_per_s", "compute_capability")
        assert all(getattr(GPUS[part], f) == getattr(GPUS[twin], f) for f in same)
        assert GPUS[part].interconnect_bytes_per_s < GPUS[twin].interconnect_bytes_per_s
        for tables in ("vllm", "sglang", "trtllm"):
            assert tables_gpu(part, tables) == twin and tables_gpu(twin, tables) == twin
    assert tables_gpu("h20") == "h20"  # no twin: its own name, which has no tables


@pytest.mark.parametrize("part", TWINS)
def test_a_scenario_without_a_cost_model_takes_the_twins_tables_and_says_whose(part):
    for engine, version in (("vllm", "0.11.0"), ("sglang", "0.5.5"), ("trtllm", "1.2.0rc1")):
        sc = validate_scenario({**BASE, "hardware": {"gpu": part, "tensor_parallel": 4},
                                "engine": {"name": engine, "version": version}})
        assert sc.cost_model.kind == "measured", (engine, sc.cost_model_choice)
        assert sc.cost_model_choice.startswith(f"measured: {engine} kernel tables of {TWINS[part]}, the {part}'s "
                                               "kernels")


@pytest.mark.parametrize("part", TWINS)
def test_on_one_gpu_the_part_is_priced_as_its_twin(part):
    """No collective at TP 1: every kernel is the twin's measured one, so every step costs the same, exactly."""
    mine, twins = MeasuredCostModel(LLAMA_70B, get_gpu(part)), MeasuredCostModel(LLAMA_70B, get_gpu(TWINS[part]))
    for plan in (PREFILL, DECODE):
        assert mine.step_time(plan) == twins.step_time(plan)
    assert any(f"the {TWINS[part]}'s tables price the {part}'s" in note for note in mine.notes)


@pytest.mark.parametrize("all_reduce", ["custom", NCCL_ALL_REDUCE])
@pytest.mark.parametrize("part", TWINS)
def test_its_all_reduce_is_the_twins_with_the_time_past_the_fastest_row_stretched_by_the_link_ratio(part, all_reduce):
    """At a measured message size (grid points are reproduced exactly) one all-reduce over 4 GPUs costs the 4-GPU
    rows' fastest time plus the twin's time past it x (the twin's link rate / the part's): 2.25 for the H800 (450 /
    200 GB/s a direction), 1.5 for the A800 (300 / 200). A decode step pays that difference twice a layer."""
    twin = TWINS[part]
    mine = MeasuredCostModel(LLAMA_70B, get_gpu(part), tensor_parallel=4, all_reduce=all_reduce)
    twins = MeasuredCostModel(LLAMA_70B, get_gpu(twin), tensor_parallel=4, all_reduce=all_reduce)
    if all_reduce == NCCL_ALL_REDUCE:
        rows = nccl_allreduce(MEASURED_DIR / twin)[0]
    else:
        rows = pd.read_parquet(MEASURED_DIR / twin / "allreduce.parquet")
        rows = rows[rows.backend == "graph"]
    rows = rows[rows.num_gpus == 4]
    stretch = GPUS[twin].interconnect_bytes_per_s / GPUS[part].interconnect_bytes_per_s
    assert stretch == {"h800": 2.25, "a800": 1.5}[part]
    fastest_s = rows["latency_ms"].min() * 1e-3
    elements = DECODE.num_decode_seqs * LLAMA_70B.hidden_size
    measured_s = rows[rows.message_elements == elements]["latency_ms"].iloc[0] * 1e-3
    assert twins._allreduce(elements) == pytest.approx(measured_s, rel=1e-12)
    expected_s = fastest_s + (measured_s - fastest_s) * stretch
    assert mine._allreduce(elements) == pytest.approx(expected_s, rel=1e-12)
    assert expected_s > measured_s
    slower_s = 2 * LLAMA_70B.num_layers * (expected_s - measured_s)
    assert mine.step_time(DECODE) - twins.step_time(DECODE) == pytest.approx(slower_s, rel=1e-9)
    assert any(f"scaled {stretch:g}x for the {part}'s links" in note for note in mine.notes)


def test_gpu_data_naming_another_parts_tables_prices_the_all_reduce_on_the_scenarios_gpu():
    """An H800 whose `cost_model.gpu_data` names its twin's tables is priced as by default: the all-reduce stretched
    for its own links (the H100's rows as they ran would price it too fast)."""
    default = MeasuredCostModel(LLAMA_70B, get_gpu("h800"), tensor_parallel=4)
    named = MeasuredCostModel(LLAMA_70B, get_gpu("h800"), tensor_parallel=4, gpu_data="h100-sxm")
    h100 = MeasuredCostModel(LLAMA_70B, get_gpu("h100-sxm"), tensor_parallel=4)
    assert named.step_time(DECODE) == default.step_time(DECODE) > h100.step_time(DECODE)
    # the other way round: an H100 read from the H800's name takes the H100's own tables and links
    assert MeasuredCostModel(LLAMA_70B, get_gpu("h100-sxm"), tensor_parallel=4,
                             gpu_data="h800").step_time(DECODE) == h100.step_time(DECODE)


def test_another_silicons_tables_keep_their_all_reduce_as_measured_and_say_so():
    """Across silicon the link ratio alone does not carry all-reduce rows (benchmarks/bench_link_stretch.py), so an
    H200 read from the A100's tables (`cost_model.gpu_data`) takes the A100's all-reduce as it ran, with a note."""
    elements = DECODE.num_decode_seqs * LLAMA_70B.hidden_size
    a100 = MeasuredCostModel(LLAMA_70B, get_gpu("a100-80gb"), tensor_parallel=4)
    named = MeasuredCostModel(LLAMA_70B, get_gpu("h200"), tensor_parallel=4, gpu_data="a100-80gb")
    assert named._allreduce(elements) == a100._allreduce(elements)
    assert any("the a100-80gb's measured rows as they ran on its own links, not priced for the h200's" in note
               for note in named.notes)
    assert any("the a100-80gb's tables price the h200's (cost_model.gpu_data)" in note for note in named.notes)


def test_the_link_stretch_check_prints_every_nvlink_pair(capsys):
    """benchmarks/bench_link_stretch.py (RESULTS' figures): one row a pair of NVLink GPUs with all-reduce tables, its
    stretch the catalog link ratio; a pair of one link rate has a stretch of 1 and the same figures both ways."""
    load_benchmark("bench_link_stretch").main()
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    by_pair = {row[0].lstrip("| "): row for row in rows}
    assert len(rows) == 42 and by_pair["h100-sxm -> a100-80gb"][1] == "1.5"
    same = by_pair["h100-sxm -> h200"]
    assert same[1] == "1" and same[4].rstrip(" |") == f"{same[2]} / {same[3]}"


def test_an_inline_gpu_may_name_its_twin_and_an_unknown_twin_is_refused_in_one_line():
    inline = {**GPUS["h800"].model_dump(), "name": "my-h800"}
    scenario = {**BASE, "hardware": {"gpu": inline, "tensor_parallel": 4}, "cost_model": {"kind": "measured"}}
    cost = make_cost_model(validate_scenario(scenario))
    assert cost.source.startswith("aiconfigurator-core 0.12.0 h100_sxm vllm")
    assert any("the h100-sxm's tables price the my-h800's" in note for note in cost.notes)
    inline["kernels_as"] = "h100"
    with pytest.raises(ConfigError) as refused:
        validate_scenario({**scenario, "hardware": {"gpu": inline}})
    message = str(refused.value)
    assert "\n" not in message and message.startswith("hardware.gpu: kernels_as: unknown gpu 'h100' (did you mean "
                                                      "'h100-sxm'")


def test_at_tp_1_the_part_takes_its_twins_whole_step_profile_and_its_runs_are_the_twins():
    """One GPU crosses no link, so the H800 at TP 1 runs the H100's profiled steps in the same time (`profile_gpu`):
    the same default model and the same latencies, where a plan once priced the H100 by its profile and the H800 by
    kernel tables and told them apart. At TP 4 the profile's all-reduces ran on the H100's links: tables, stretched."""
    from sim.cost.calibrated import profile_gpu
    from sim.run import simulate
    assert (profile_gpu("h800", 1), profile_gpu("h800", 2), profile_gpu("h100-sxm", 1)) == ("h100-sxm", "h800",
                                                                                             "h100-sxm")
    # no profile ships for the part or its twin: its own name, as tables_gpu says (sim/model/catalog.py data_owner)
    assert profile_gpu("a800", 1) == "a800" and profile_gpu("h20", 1) == "h20"
    one = {**BASE, "model": "llama-3.1-8b", "run": {"num_requests": 200}}
    h100, h800 = (validate_scenario({**one, "hardware": {"gpu": gpu}}) for gpu in ("h100-sxm", "h800"))
    assert h100.cost_model.kind == h800.cost_model.kind == "calibrated"
    assert h800.cost_model_choice.startswith("calibrated: shipped whole-step profile h100-sxm/llama-3.1-8b/tp1 (the "
                                             "h800's kernels, and one GPU crosses no link)")
    for spelled in ("H800", "h100_sxm"):  # as the catalog reads a name (sim/model/catalog.py canonical_name)
        choice = validate_scenario({**one, "hardware": {"gpu": spelled}}).cost_model_choice
        assert choice.startswith("calibrated: shipped whole-step profile h100-sxm/llama-3.1-8b/tp1"), choice
        assert ("the h800's kernels" in choice) is (spelled == "H800")
    a, b = simulate(h100).summary, simulate(h800).summary
    for key in ("ttft_s_p50", "tpot_s_p99", "e2e_s_mean", "throughput_rps", "num_finished"):
        assert a[key] == b[key], key
    named = [simulate(validate_scenario({**one, "hardware": {"gpu": gpu}, "cost_model": {"kind": "calibrated"}}))
             for gpu in ("h100-sxm", "h800")]  # (named: no CPU terms)
    assert named[0].summary["tpot_s_p99"] == named[1].summary["tpot_s_p99"] != a["tpot_s_p99"]
    four = validate_scenario({**BASE, "hardware": {"gpu": "h800", "tensor_parallel": 4}})
    assert four.cost_model.kind == "measured"  # (the H100 ships a TP 4 whole-step profile of this model)
    with pytest.raises(ConfigError, match="no shipped profile for h800/llama-3.1-70b/tp4"):
        simulate(validate_scenario({**BASE, "hardware": {"gpu": "h800", "tensor_parallel": 4},
                                    "cost_model": {"kind": "calibrated"}}))
