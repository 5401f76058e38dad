"""Expert parallelism (`hardware.expert_parallel`): the one rule that splits a matrix over a GPU group
(`sim.model.shapes.gpu_linear`), what it leaves unchanged (the bytes a GPU holds; under uniform routing a GPU's
expected FLOPs and weight reads), what it changes (the measured fused-MoE rows, the block-scale check), the engines'
flags that set it, and the bad input refused in one line."""

from pathlib import Path

import pytest
from helpers import load_benchmark, one_error_line, servesim

from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.hf_config import read_model_ref
from sim.model.shapes import gpu_layer_groups, gpu_linear
from sim.model.specs import LinearShape

REPO = Path(__file__).resolve().parents[2]
QWEN3_235B = {"hf_config": str(REPO / "sim" / "model" / "configs" / "qwen3-235b-a22b.json")}
BASE = {"workload": {"arrival": {"kind": "burst"},
                     "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}},
        "run": {"num_requests": 4}}


def scenario(**sections):
    return validate_scenario({**BASE, **sections})


def test_a_gpu_holds_whole_experts_under_expert_parallelism():
    experts = LinearShape("experts_gate_up", 4096, 2 * 1536, 128, "column", 8)
    tp_only, ep8, ep2 = gpu_linear(experts, 8), gpu_linear(experts, 8, 8), gpu_linear(experts, 8, 2)
    assert (tp_only.count, tp_only.active_per_token, tp_only.out_features) == (128, 8, 384)
    assert (ep8.count, ep8.active_per_token, ep8.out_features, ep8.split) == (16, 1.0, 3072, 1)
    assert (ep2.count, ep2.active_per_token, ep2.out_features, ep2.split) == (64, 4.0, 768, 4)
    # Everything but the routed experts is split by TP as before: attention, shared experts, the router.
    for shape in (LinearShape("qkv", 4096, 6144, 1, "column", 1), LinearShape("shared_down", 2048, 4096, 1, "row", 1),
                  LinearShape("router", 4096, 128, 1, "replicated", 1)):
        assert gpu_linear(shape, 8, 8) == gpu_linear(shape, 8)


@pytest.mark.parametrize("model, tp, ep", [("mixtral-8x7b", 8, 8), ("mixtral-8x7b", 4, 2),
                                           ("deepseek-v2-lite", 8, 8), ("deepseek-v2-lite", 8, 4)])
def test_expert_parallelism_keeps_each_gpus_bytes_and_expected_work(model, tp, ep):
    # Known answer: E experts, top-k, each of P parameters. TP: every GPU holds all E at P / tp; EP: E / ep whole
    # experts at P / (tp / ep) -> the same bytes. A step of n tokens reads, in expectation, the experts some token
    # routes to, E (1 - (1 - k / E)^n) of them under TP and E / ep of that share under EP -> the same weight bytes;
    # and multiplies n k P / tp parameters either way -> the same FLOPs.
    from sim.cost.roofline import RooflineCostModel
    from sim.model.memory import _gpu_matrix_bytes  # the bytes the memory budget counts per GPU
    from sim.cost.roofline_kernel import linear_flops_bytes, touched_experts
    m, gpu = get_model(model), get_gpu("h100-sxm")
    for (_, by_tp), (_, by_ep) in zip(gpu_layer_groups(m, tp), gpu_layer_groups(m, tp, ep)):
        for a, b in zip(by_tp, by_ep):
            bytes_a, bytes_b = (_gpu_matrix_bytes(g, 1, "bf16", 128) for g in (a, b))
            assert bytes_a == pytest.approx(bytes_b, rel=1e-15)
            assert a.active_per_token / a.split == pytest.approx(b.active_per_token / b.split, rel=1e-15)
    roof_tp = RooflineCostModel(m, gpu, tensor_parallel=tp)
    roof_ep = RooflineCostModel(m, gpu, tensor_parallel=tp, expert_parallel=ep)
    for (_, mms_tp), (_, mms_ep) in zip(roof_tp.groups, roof_ep.groups):
        for a, b in zip(mms_tp, mms_ep):
            for n in (1, 7, 64, 4096):
                # the kernel's FLOPs and weight bytes (activations left out: in and out features 0)
                flops_a, read_a = linear_flops_bytes(a.weight_params, a.params_per_token, a.num_experts,
                                                     a.experts_per_token, 0, 0, n, 1.0)
                flops_b, read_b = linear_flops_bytes(b.weight_params, b.params_per_token, b.num_experts,
                                                     b.experts_per_token, 0, 0, n, 1.0)
                assert (flops_a, read_a) == pytest.approx((flops_b, read_b), rel=1e-9)
                if a.num_experts > a.experts_per_token:
                    expected = a.weight_params / a.num_experts * touched_experts(a.num_experts, a.experts_per_token, n)
                    assert read_b == pytest.approx(expected, rel=1e-9)
    assert "ep8" in repr(RooflineCostModel(m, gpu, tensor_parallel=8, expert_parallel=8))


@pytest.mark.parametrize("routing", ["balanced", "power_law_1.2"])
def test_measured_model_prices_expert_parallel_rows_where_the_table_has_them(routing):
    # Qwen3-235B-A22B (hidden 4096, moe_intermediate 1536, top 8 of 128) is a configuration of vLLM's H200 table at
    # moe tp 1 x ep 8: the fused-MoE curve reproduces its rows of the routing asked for, which differ from the TP 8
    # rows.
    import pandas as pd

    from sim.cost.measured import MeasuredCostModel, tables_dir
    model, gpu = read_model_ref(QWEN3_235B, "model"), get_gpu("h200")
    moe = pd.read_parquet(tables_dir("h200", "vllm") / "moe.parquet")
    key = ((moe["dtype"] == "bf16") & (moe["hidden_size"] == 4096) & (moe["inter_size"] == 1536)
           & (moe["topk"] == 8) & (moe["num_experts"] == 128) & (moe["distribution"] == routing))
    ep_rows = moe[key & (moe["moe_tp_size"] == 1) & (moe["moe_ep_size"] == 8)]
    tp_rows = moe[key & (moe["moe_tp_size"] == 8) & (moe["moe_ep_size"] == 1)]
    assert len(ep_rows) > 10 and len(tp_rows) > 10
    ep = MeasuredCostModel(model, gpu, tensor_parallel=8, expert_parallel=8, moe_routing=routing)
    expected = [] if routing == "balanced" else [f"moe: {routing} routing"]
    assert [n for n in ep.notes if n.startswith("moe:")] == expected
    for n, ms in zip(ep_rows["num_tokens"], ep_rows["latency_ms"]):
        assert ep._moe(float(n)) == pytest.approx(ms * 1e-3, rel=1e-9)
    tp_ms = dict(zip(tp_rows["num_tokens"], tp_rows["latency_ms"]))
    assert any(abs(ms - tp_ms[n]) > 0.05 * ms for n, ms in zip(ep_rows["num_tokens"], ep_rows["latency_ms"])
               if n in tp_ms)
    assert "x8 ep8" in repr(ep)


def test_ep_to_single_gpu_is_the_median_over_configurations_of_ep_over_one_gpu_at_many_tokens():
    import pandas as pd

    from sim.cost.measured import UNSPLIT_EP_TOKENS, ep_to_single_gpu

    def rows(inter, ep, scale):
        return [{"dtype": "bf16", "hidden_size": 4096, "inter_size": inter, "topk": 8, "num_experts": 128,
                 "moe_tp_size": 1, "moe_ep_size": ep, "num_tokens": n, "latency_ms": scale * n / 1000}
                for n in (16, UNSPLIT_EP_TOKENS, 2 * UNSPLIT_EP_TOKENS)]
    # Three configurations at ep 2: 0.5, 0.6 and 0.9 of one GPU (the small token count, where every ratio is 1, is
    # not read): the median is 0.6
    frame = pd.DataFrame([r for inter, ratio in ((1536, 0.5), (1408, 0.6), (768, 0.9))
                          for r in rows(inter, 1, 1.0) + [dict(x, latency_ms=x["latency_ms"] * (ratio if
                          x["num_tokens"] >= UNSPLIT_EP_TOKENS else 1.0)) for x in rows(inter, 2, 1.0)]])
    assert ep_to_single_gpu(frame) == {("bf16", 2): pytest.approx(0.6)}


def test_expert_parallel_rows_that_do_not_split_the_work_are_priced_as_tensor_parallelism_and_say_so():
    """The A100's SGLang bf16 fused-MoE rows cost an EP rank about a single GPU's time at many tokens (median over
    configurations 0.92-1.09 of the single-GPU rows, where other tables give at most 0.71); the H100's SGLang rows
    split the work. GLM-4.5-Air's EP 4 on four A100s is then priced exactly as its TP 4; on H100s from the EP rows."""
    from sim.core.step_plan import StepPlan
    from sim.cost.measured import UNSPLIT_EP_RATIO, MeasuredCostModel, ep_to_single_gpu, load_tables, tables_dir
    a100, h100 = load_tables(tables_dir("a100-80gb", "sglang")), load_tables(tables_dir("h100-sxm", "sglang"))
    assert min(r for (d, _), r in ep_to_single_gpu(a100.moe).items() if d == "bf16") >= UNSPLIT_EP_RATIO
    assert max(r for (d, _), r in ep_to_single_gpu(h100.moe).items() if d == "bf16") < UNSPLIT_EP_RATIO
    model = get_model("glm-4.5-air")
    prefill = StepPlan(prefill_request_ids=[0, 1, 2, 3], prefill_chunk_tokens=[2048] * 4,
                       prefill_context_tokens=[0] * 4, num_sampled_seqs=4)
    for gpu, same in (("a100-80gb", True), ("h100-sxm", False)):
        tp4 = MeasuredCostModel(model, get_gpu(gpu), tensor_parallel=4, tables="sglang")
        ep4 = MeasuredCostModel(model, get_gpu(gpu), tensor_parallel=4, expert_parallel=4, tables="sglang")
        assert (ep4.step_time(prefill) == tp4.step_time(prefill)) is same
        said = [n for n in ep4.notes if "do not split the work" in n]
        assert said == ([f"moe: the sglang tables' expert-parallel bf16 rows of {gpu} cost a rank about a single GPU's "
                         "time at many tokens (they do not split the work: sim/cost/measured.py UNSPLIT_EP_RATIO); "
                         "expert parallelism 4 priced as tensor parallelism over 4 GPUs"] if same else [])


def test_expert_parallel_rows_missing_for_a_dtype_fall_back_to_the_nearest_split_and_say_so():
    # vLLM's H200 table holds block-scaled fp8 fused-MoE rows at ep 1 only, and Qwen3-235B's at tp 1-4 only (its
    # 1,536-wide experts split 8 ways are not whole 128-blocks): nothing to take a ratio against
    from sim.cost.measured import MeasuredCostModel
    model, gpu = read_model_ref(QWEN3_235B, "model"), get_gpu("h200")
    cost = MeasuredCostModel(model, gpu, tensor_parallel=8, expert_parallel=8, weight_dtype="fp8", fp8_block=True)
    note = next(n for n in cost.notes if n.startswith("moe:") and "fused-MoE" in n)
    assert "tp 1 ep 8) not in the fused-MoE table" in note and "scaled by the roofline" in note


def test_expert_parallel_rows_missing_for_a_dtype_take_another_dtypes_ep_over_tp_ratio_and_say_so():
    # DeepSeek-R1's block-scaled fp8 rows in vLLM's H200 table are at ep 1 only (tp 1-16), and bf16 rows of other
    # configurations hold both splits: each point is the fp8 TP 8 row times the named bf16 EP 8 / TP 8 rows
    import re

    import pandas as pd

    from sim.cost.measured import MeasuredCostModel, tables_dir
    cost = MeasuredCostModel(get_model("deepseek-r1"), get_gpu("h200"), tensor_parallel=8, expert_parallel=8,
                             weight_dtype="fp8", fp8_block=True, fp8_compute=True)
    note = next(n for n in cost.notes if n.startswith("moe: no expert-parallel"))
    found = re.fullmatch(r"moe: no expert-parallel fp8_block rows at ep 8; this model's tp 8 rows times the (\w+) "
                         r"rows' EP / TP ratio of \((\d+), (\d+), top(\d+) of (\d+), tp 1 ep 8 against tp 8\)", note)
    assert found, note
    dtype, (h, inter, k, e) = found[1], map(int, found.groups()[1:])
    moe = pd.read_parquet(tables_dir("h200", "vllm") / "moe.parquet")
    moe = moe[moe["distribution"] == "power_law_1.01"]  # DeepSeek's default routing (moe_routing_of)

    def ms(dtype, config):
        mask = ((moe["dtype"] == dtype) & (moe["hidden_size"] == config[0]) & (moe["inter_size"] == config[1])
                & (moe["topk"] == config[2]) & (moe["num_experts"] == config[3]) & (moe["moe_tp_size"] == config[4])
                & (moe["moe_ep_size"] == config[5]))
        return dict(zip(moe.loc[mask, "num_tokens"], moe.loc[mask, "latency_ms"]))
    own_tp = ms("fp8_block", (7168, 2048, 8, 256, 8, 1))
    near_ep, near_tp = ms(dtype, (h, inter, k, e, 1, 8)), ms(dtype, (h, inter, k, e, 8, 1))
    points = sorted(set(own_tp) & set(near_ep) & set(near_tp))
    assert len(points) > 10 and not ms("fp8_block", (7168, 2048, 8, 256, 1, 8))
    for n in points:
        assert cost._moe(float(n)) == pytest.approx(own_tp[n] * near_ep[n] / near_tp[n] * 1e-3, rel=1e-9)


def test_ep_rows_from_another_dtype_take_the_nearest_configuration_at_the_split_else_none():
    import pandas as pd

    from sim.cost.measured import ep_rows_from_another_dtype

    def rows(dtype, config, times):
        h, inter, k, e, tp, ep = config
        return pd.DataFrame({"dtype": dtype, "num_tokens": [1, 16, 256], "hidden_size": h, "inter_size": inter,
                             "topk": k, "num_experts": e, "moe_tp_size": tp, "moe_ep_size": ep, "latency_ms": times})
    own_tp = rows("fp8_block", (7168, 2048, 8, 256, 4, 1), [1.0, 2.0, 4.0])
    table = pd.concat([own_tp,
                       rows("bf16", (4096, 2048, 8, 256, 1, 4), [3.0, 3.0, 9.0]),  # near: ratio 1.5, 1.0, 1.5
                       rows("bf16", (4096, 2048, 8, 256, 4, 1), [2.0, 3.0, 6.0]),
                       rows("bf16", (1024, 512, 8, 256, 1, 4), [9.0, 9.0, 9.0]),  # farther
                       rows("bf16", (1024, 512, 8, 256, 4, 1), [1.0, 1.0, 1.0]),
                       rows("bf16", (7168, 2048, 8, 256, 2, 2), [1.0, 1.0, 1.0])])  # another split
    derived, dtype, near = ep_rows_from_another_dtype(own_tp, table, (7168, 2048, 8, 256, 1, 4))
    assert (dtype, near) == ("bf16", (4096, 2048, 8, 256, 1, 4))
    assert derived["latency_ms"].tolist() == [1.5, 2.0, 6.0]
    assert set(derived["moe_tp_size"]) == {1} and set(derived["moe_ep_size"]) == {4}
    assert set(derived["dtype"]) == {"fp8_block"} and derived["num_tokens"].tolist() == [1, 16, 256]
    assert ep_rows_from_another_dtype(own_tp, table, (7168, 2048, 8, 256, 1, 8)) is None  # no dtype has ep 8
    assert ep_rows_from_another_dtype(own_tp.iloc[:0], table, (7168, 2048, 8, 256, 1, 4)) is None  # no own TP rows


def test_block_scaled_fp8_shards_with_expert_parallelism_where_tp_alone_cannot():
    # GPUStack's page on Qwen3-235B-A22B-FP8: "TP8 only is not compatible for the model weight. Use EP as well."
    fp8 = {"weights": "fp8", "fp8_block_scales": True}
    with pytest.raises(ConfigError, match=r"allowed: 1, 2, 4, hardware\.expert_parallel 2 or 4 or 8, or "):
        scenario(model=QWEN3_235B, hardware={"gpu": "h100-sxm", "tensor_parallel": 8}, quantization=fp8)
    for ep in (2, 8):  # moe tp 4: 384 = 3 x 128 per GPU; moe tp 1: the whole 1536
        sc = scenario(model=QWEN3_235B, hardware={"gpu": "h100-sxm", "tensor_parallel": 8, "expert_parallel": ep},
                      quantization=fp8)
        assert sc.hardware.expert_parallel == ep


@pytest.mark.parametrize("model, hardware, message", [
    ("llama-3.1-8b", {"tensor_parallel": 2, "expert_parallel": 2},
     r"^hardware\.expert_parallel: 2 needs routed experts, and llama-3\.1-8b has none; allowed: 1$"),
    ("mixtral-8x7b", {"tensor_parallel": 8, "expert_parallel": 3},
     r"^hardware\.expert_parallel: 3 cannot split mixtral-8x7b's 8 experts over tensor_parallel 8 GPUs \(it must "
     r"divide both\); allowed: 1, 2, 4, 8$"),
    ("mixtral-8x7b", {"tensor_parallel": 2, "expert_parallel": 4}, r"allowed: 1, 2$"),
])
def test_an_expert_split_the_model_or_group_cannot_take_is_refused_in_one_line(model, hardware, message):
    with pytest.raises(ConfigError, match=message):
        scenario(model=model, hardware=hardware)


def test_a_whole_step_or_per_op_profile_refuses_expert_parallelism():
    with pytest.raises(ConfigError, match=r"^hardware\.expert_parallel: 8 is not allowed with cost_model calibrated"):
        scenario(model="mixtral-8x7b", hardware={"tensor_parallel": 8, "expert_parallel": 8},
                 cost_model={"kind": "calibrated", "profile": "h100-sxm"})


@pytest.mark.parametrize("engine, expected", [
    ({"name": "vllm", "version": "0.11.0", "enable_expert_parallel": True}, 8),  # EP = TP x DP, DP 1
    ({"name": "vllm", "version": "0.11.0", "enable_expert_parallel": False}, 1),
    ({"name": "sglang", "version": "0.5.3", "ep_size": 4}, 4),
    ({"name": "sglang", "version": "0.4.9", "enable_ep_moe": True}, 8),  # ep_size = tp_size
    ({"name": "sglang", "version": "0.5.3rc0", "enable_ep_moe": True}, 8),  # the last release that takes it
    ({"name": "trtllm", "version": "1.0.0", "ep_size": 8}, 8),
])
def test_engine_flags_set_expert_parallelism_as_the_engine_does(engine, expected):
    sc = scenario(model="mixtral-8x7b", hardware={"gpu": "h100-sxm", "tensor_parallel": 8}, engine=engine)
    assert sc.hardware.expert_parallel == expected


@pytest.mark.parametrize("engine, hardware, message", [
    ({"name": "vllm", "version": "0.7.3", "enable_expert_parallel": True}, {},
     r"^engine\.enable_expert_parallel: not a flag of vllm 0\.7\.3 \(it came in 0\.8\.0\); allowed: leave it out, or "
     r"engine\.version 0\.8\.0 or later$"),
    ({"name": "sglang", "version": "0.4.9", "ep_size": 4}, {}, r"^engine\.ep_size: not a flag of sglang 0\.4\.9"),
    ({"name": "sglang", "version": "0.5.3", "enable_ep_moe": True}, {},  # SGLang raises on it from 0.5.3
     r"^engine\.enable_ep_moe: not a flag of sglang 0\.5\.3 \(its parser refuses it from 0\.5\.3\); allowed: leave "
     r"it out, or engine\.version before 0\.5\.3$"),
    ({"name": "vllm", "version": "0.11.0", "enable_expert_parallel": True}, {"expert_parallel": 2},
     r"^engine\.enable_expert_parallel: True \(sets hardware\.expert_parallel 8\) contradicts "
     r"hardware\.expert_parallel 2; allowed: give one of them"),
])
def test_an_expert_parallel_flag_the_engine_lacks_or_the_scenario_contradicts_is_refused(engine, hardware, message):
    with pytest.raises(ConfigError, match=message):
        scenario(model="mixtral-8x7b", hardware={"gpu": "h100-sxm", "tensor_parallel": 8, **hardware}, engine=engine)


def test_a_disaggregated_pool_takes_its_own_expert_split():
    from sim.config.disaggregation import pool_scenario
    sc = scenario(model="mixtral-8x7b", hardware={"gpu": "h100-sxm", "tensor_parallel": 8, "expert_parallel": 8,
                                                  "disaggregation": {"decode": {"expert_parallel": 2}}})
    assert pool_scenario(sc, "prefill").hardware.expert_parallel == 8
    assert pool_scenario(sc, "decode").hardware.expert_parallel == 2


def test_the_cli_refuses_a_bad_expert_split_in_one_line_and_writes_nothing(tmp_path):
    import yaml
    path = tmp_path / "ep.yaml"
    path.write_text(yaml.safe_dump({**BASE, "model": "mixtral-8x7b",
                                    "hardware": {"tensor_parallel": 8, "expert_parallel": 16}}))
    out = tmp_path / "out"
    line = one_error_line(servesim("run", str(path), "--out", str(out)))
    assert "hardware.expert_parallel: 16" in line
    assert not out.exists()


def test_the_unsplit_rows_are_four_tables_dtypes_and_a_gap_keeps_them_from_the_rest():
    """benchmarks/bench_moe.py's check (RESULTS' figures): every shipped table's EP medians, the ones past
    UNSPLIT_EP_RATIO in four dtypes, and no median within 0.03 of the threshold on either side."""
    from sim.cost.measured import UNSPLIT_EP_RATIO
    found = load_benchmark("bench_moe").unsplit_ep_rows()
    unsplit = {(gpu, tables, dtype) for ratio, gpu, tables, _, dtype, _ in found if ratio >= UNSPLIT_EP_RATIO}
    assert unsplit == {("a100-80gb", "sglang", "bf16"), ("a100-80gb", "vllm", "mxfp4_marlin"),
                       ("rtx-pro-6000", "sglang", "mxfp4"), ("rtx-pro-6000", "trtllm", "fp8_block")}
    assert not [f for f in found if abs(f[0] - UNSPLIT_EP_RATIO) < 0.03]
    assert len(found) == 882
