"""Measured kernel costs (issue 12): the AIConfigurator import, interpolation, the shipped tables, TP scaling,
the roofline fallback, the scenario kind and the planner's choice.

tests/fixtures/aic/h100_sxm is a 45 KB subset of aiconfigurator-core 0.12.0's h100_sxm vLLM 0.24.0 tables in
their own format (written by tests/fixtures/aic/make_subset.py)."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate.aic_import import convert_system
from sim.core.step_plan import StepPlan
from sim.cost.measured import (
    MEASURED_DIR,
    Grid2D,
    MeasuredCostModel,
    MeasuredFallback,
    Shape,
    device_roofline,
    gemm_curve,
    load_tables,
    make_measured_cost_model,
    measured_gpus,
)
from sim.cost.measured_kernel import SHAPE_DECODE
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model

FIXTURE = Path(__file__).parents[1] / "fixtures" / "aic" / "h100_sxm"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("measured") / "h100-sxm"
    meta = convert_system(FIXTURE, "0.24.0", out, "h100-sxm", "h100_sxm", "0.12.0")
    return out, meta


def _raw(rel: str) -> pd.DataFrame:
    return pd.read_parquet(FIXTURE / rel)


def test_conversion_keeps_one_kernel_per_dtype_and_records_its_source(converted):
    out, meta = converted
    gemm = pd.read_parquet(out / "gemm.parquet")
    raw = _raw("gemm/vllm/0.24.0/gemm_perf.parquet")
    assert set(gemm["dtype"]) == {"bf16", "fp8"}  # fp8_block kernels dropped
    bf16 = raw[(raw.gemm_dtype == "bfloat16")]
    assert len(gemm[gemm.dtype == "bf16"]) == len(bf16)
    assert meta["tables"]["gemm"]["kernels"] == {"bf16": "torch.nn.functional.linear",
                                                 "fp8": "CutlassFP8ScaledMMLinearKernel"}
    assert meta["source"] == {"package": "aiconfigurator-core", "version": "0.12.0", "license": "Apache-2.0",
                              "path": "aiconfigurator_core/systems/data"}
    assert (meta["framework"], meta["framework_version"], meta["system"]) == ("vllm", "0.24.0", "h100_sxm")
    assert meta["device_name"] == "NVIDIA H100 80GB HBM3"
    # Sliding-window rows are kept apart; AIConfigurator's decode `step` is the context before the new token.
    gen = pd.read_parquet(out / "generation_attention.parquet")
    raw_gen = _raw("attention/vllm/0.24.0/generation_attention_perf.parquet")
    assert len(raw_gen[raw_gen.window_size == 128]) > 0
    assert sorted(set(gen["kv_tokens"])) == [128, 1024]
    row = raw_gen[(raw_gen.window_size == 0) & (raw_gen.kv_cache_dtype == "bfloat16") & (raw_gen.batch_size == 8)
                  & (raw_gen.step == 1023)]
    got = gen[(gen.kv_dtype == "bf16") & (gen.batch_size == 8) & (gen.kv_tokens == 1024)]
    assert got["latency_ms"].iloc[0] == row["latency"].iloc[0]
    for name, raw_name in (("generation", "generation"), ("context", "context")):
        window = pd.read_parquet(out / f"{name}_window_attention.parquet")
        raw = _raw(f"attention/vllm/0.24.0/{raw_name}_attention_perf.parquet")
        raw = raw[raw.window_size > 0]
        assert len(window) == len(raw) and set(window["window"]) == {128}
        entry = meta["tables"][f"{name}_window_attention"]
        assert entry["kernels"]["bf16"] == meta["tables"][f"{name}_attention"]["kernels"]["bf16"]
        assert entry["kernels"]["windows"] == [128] and entry["latency_digits"] == 3
        r = raw[raw.kv_cache_dtype == "bfloat16"].iloc[0]
        key = ("kv_tokens", r.step + 1) if name == "generation" else ("isl", r.isl)
        got = window[(window.kv_dtype == "bf16") & (window.batch_size == r.batch_size) & (window[key[0]] == key[1])]
        assert got["latency_ms"].iloc[0] == float(f"{r.latency:.3g}")
    ar = pd.read_parquet(out / "allreduce.parquet")
    assert set(ar["backend"]) == {"graph", "eager"} and set(ar["num_gpus"]) == {2, 4, 8}


def test_a_system_without_tables_is_refused(tmp_path):
    with pytest.raises(LookupError, match="gemm"):
        convert_system(tmp_path, "0.24.0", tmp_path / "out", "l4", "l4", "0.12.0")


def test_gemm_grid_points_are_reproduced_and_between_them_interpolated(converted):
    out, _ = converted
    tables = load_tables(out)
    roof = device_roofline(tables.gemm)
    notes = Counter()
    curve = gemm_curve(tables.gemm, "bf16", 6144, 4096, roof, notes, "qkv")
    raw = _raw("gemm/vllm/0.24.0/gemm_perf.parquet")
    raw = raw[(raw.gemm_dtype == "bfloat16") & (raw.n == 6144) & (raw.k == 4096)].set_index("m")["latency"]
    for m, ms in raw.items():
        assert curve(m) == pytest.approx(ms * 1e-3, rel=1e-12)
    lo, hi = sorted((curve(64), curve(512)))
    assert lo <= curve(200) <= hi
    # Between measured n = 4096 and 6144 at a grid m: between the two measured times.
    a, b = (gemm_curve(tables.gemm, "bf16", n, 4096, roof, notes, "x")(512) for n in (4096, 6144))
    mid = gemm_curve(tables.gemm, "bf16", 5120, 4096, roof, notes, "x")(512)
    assert min(a, b) <= mid <= max(a, b)
    assert not notes  # nothing so far was outside the grid
    curve(100_000)
    assert any("outside measured" in n for n in notes)  # said, not silent


def test_attention_grid_points_are_reproduced(converted):
    out, _ = converted
    tables = load_tables(out)
    roof = device_roofline(tables.gemm)
    rows = tables.generation[tables.generation.kv_dtype == "bf16"]

    shape = Shape(SHAPE_DECODE, (32, 8, 128, 2), roof)  # 32 query heads, 8 KV heads of 128, 2 bytes an element
    grid = Grid2D(rows, "batch_size", "kv_tokens", shape, "decode", Counter())
    for r in rows.itertuples():
        assert grid(r.batch_size, r.kv_tokens) == pytest.approx(r.latency_ms * 1e-3, rel=1e-12)


def test_shipped_tables_cover_the_catalog_gpus_and_load_fast_enough_to_ship():
    assert {"h100-sxm", "h200", "a100-80gb", "l40s"} <= set(measured_gpus())
    total = sum(f.stat().st_size for f in MEASURED_DIR.rglob("*") if f.is_file())
    assert total < 16.5e6  # 14.6 MB before the sliding-window rows (12-03), 16.1 MB with them
    for gpu in measured_gpus():
        meta = load_tables(MEASURED_DIR / gpu).meta
        assert meta["source"]["package"] == "aiconfigurator-core" and meta["framework"] == "vllm"


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb"])
def test_shipped_gemm_tables_are_mostly_monotone_in_tokens(gpu):
    """Reported, not required: at launch-bound sizes a bigger m can be measured faster (noise, another
    kernel); at most 10% of neighbouring rows drop by more than 10%."""
    g = load_tables(MEASURED_DIR / gpu).gemm.sort_values(["dtype", "n", "k", "m"])
    drops = g.groupby(["dtype", "n", "k"])["latency_ms"].apply(lambda s: int((s.values[1:] < 0.9 * s.values[:-1]).sum()))
    pairs = len(g) - len(drops)
    print(f"{gpu}: {int(drops.sum())} of {pairs} neighbouring GEMM rows drop >10% as m grows")
    assert drops.sum() / pairs < 0.10
    # Large GEMMs are compute-bound: 4x the tokens never takes less time there.
    big = g[(g.n == 8192) & (g.k == 8192) & (g.dtype == "bf16")].set_index("m")["latency_ms"]
    assert big[4096] > big[1024] > 0


def test_every_catalog_model_builds_at_every_allowed_tp_on_h100():
    gpu = get_gpu("h100-sxm")
    plan = StepPlan(prefill_request_ids=[1], prefill_chunk_tokens=[300], prefill_context_tokens=[200],
                    num_decode_seqs=7, decode_context_tokens=7 * 900, num_sampled_seqs=8)
    for name in ("llama-3.1-8b", "opt-13b", "mixtral-8x7b", "deepseek-v2-lite", "qwen2.5-7b", "mistral-7b-v0.1"):
        model = get_model(name)
        for tp in (1, 2, 4, 8):
            if model.num_attention_heads % tp:
                continue
            cost = MeasuredCostModel(model, gpu, tensor_parallel=tp)
            t = cost.step_time(plan)
            assert 0 < t < 1.0, (name, tp, t)
            assert "aiconfigurator-core 0.12.0 h100_sxm vllm 0.24.0" in repr(cost)
    lite = MeasuredCostModel(get_model("deepseek-v2-lite"), gpu)  # not DeepSeek-V3's sizes, vLLM's MLA modules'
    assert lite.mla_by_roofline and "vLLM's MLA modules in the vllm tables of h100-sxm were measured" in repr(lite)


def test_all_reduce_grows_with_tp_and_batch_1_decode_stops_halving():
    """The roofline halves a batch-1 decode from TP4 to TP8; measured kernels (launch-bound GEMMs,
    all-reduce latency growing with the GPU count) do not."""
    model, gpu = get_model("llama-3.1-70b"), get_gpu("h100-sxm")
    costs = {tp: MeasuredCostModel(model, gpu, tensor_parallel=tp) for tp in (2, 4, 8)}
    ar = [costs[tp]._allreduce(model.hidden_size) for tp in (2, 4, 8)]  # one token's hidden state
    assert ar[0] < ar[1] < ar[2]
    plan = StepPlan(num_decode_seqs=1, decode_context_tokens=1024, num_sampled_seqs=1)
    speedup = costs[4].step_time(plan) / costs[8].step_time(plan)
    assert 1.0 < speedup < 1.8


def test_a_gpu_without_tables_falls_back_to_the_roofline_and_says_so():
    model, gpu = get_model("llama-3.1-8b"), get_gpu("l4")
    cost = make_measured_cost_model(model, gpu)
    assert isinstance(cost, MeasuredFallback)
    assert "measured kernels unavailable: no measured kernel tables for gpu 'l4'" in repr(cost)
    with pytest.raises(ConfigError, match="cost_model: no measured kernel tables for gpu 'l4'"):
        make_measured_cost_model(model, gpu, on_missing="error")
    # A dtype the tables lack is refused (issue 30), unless the roofline is asked for by name.
    with pytest.raises(ConfigError, match="^quantization.weights: 'int4' is not measured in the vllm tables of "
                                          "h100-sxm"):
        make_measured_cost_model(model, get_gpu("h100-sxm"), weight_dtype="int4")
    int4 = make_measured_cost_model(model, get_gpu("h100-sxm"), weight_dtype="int4", unmeasured_dtype="roofline")
    assert isinstance(int4, MeasuredFallback) and "quantization.weights: 'int4' is not measured" in repr(int4)


def test_fp8_weights_and_kv_use_the_fp8_tables_where_measured():
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    plan = StepPlan(prefill_request_ids=[1], prefill_chunk_tokens=[4096], prefill_context_tokens=[0],
                    num_sampled_seqs=1)
    bf16 = MeasuredCostModel(model, gpu).step_time(plan)
    fp8 = MeasuredCostModel(model, gpu, weight_dtype="fp8", kv_dtype="fp8").step_time(plan)
    assert fp8 < 0.9 * bf16
    with pytest.raises(ConfigError, match="^quantization.weights: 'fp8' is not measured in the vllm tables of "
                                          "a100-80gb"):
        make_measured_cost_model(model, get_gpu("a100-80gb"), weight_dtype="fp8", fp8_compute=True)


def test_a_scenario_selects_measured_costs_and_the_result_names_the_source():
    from sim.config.schema import Scenario
    from sim.run import simulate
    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "tensor_parallel": 2},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                        "lengths": {"kind": "preset", "name": "sharegpt"}},
           "scheduler": {"max_model_len": 4096}, "cost_model": {"kind": "measured"}, "run": {"num_requests": 20}}
    result = simulate(Scenario.model_validate(raw))
    assert result.summary["num_finished"] == 20
    assert "MeasuredCostModel(llama-3.1-8b on h100-sxm x2" in result.extras["cost_model"]
    assert "vllm 0.24.0" in result.extras["cost_model"]
    raw["hardware"]["gpu"] = "l4"
    result = simulate(Scenario.model_validate(raw))
    assert "measured kernels unavailable" in result.extras["cost_model"]


def test_a_plan_candidate_gets_the_cost_model_run_would_choose():
    # sim/tools/planner.py candidate_raw leaves the choice to sim/config/cost_choice.py, as `run` does; a bare roofline
    # gives way to it too (search.prefer_calibrated), and prefer_calibrated false keeps the catalog roofline
    from sim.config.files import validate_scenario
    from sim.tools.planner import Candidate, candidate_raw
    raw = {"model": "llama-3.1-8b", "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                                                 "lengths": {"kind": "fixed", "input_tokens": 200,
                                                             "output_tokens": 20}}}

    def kind(gpu, tp, prefer=True, **sections):
        sc = validate_scenario(candidate_raw({**raw, **sections}, Candidate(gpu, tp, None), prefer_calibrated=prefer))
        return sc.cost_model.kind, sc.cost_model.efficiencies if sc.cost_model.kind == "roofline" else None
    assert kind("h100-sxm", 1) == ("calibrated", None)  # calibrate/profiles/h100-sxm/llama-3.1-8b/tp1
    assert kind("h100-sxm", 2) == ("measured", None)
    assert kind("l4", 1, quantization={"weights": "fp8"}) == ("roofline", "learned")  # no L4 tables; fp8 to fit
    assert kind("h100-sxm", 1, cost_model={"kind": "roofline"}) == ("calibrated", None)
    assert kind("h100-sxm", 1, prefer=False) == ("roofline", "catalog")
    # fp8 weights alone (weight-only): not the bf16 profile, nor the tables' W8A8 rows
    assert kind("h100-sxm", 1, quantization={"weights": "fp8"}) == ("roofline", "learned")
    assert kind("h100-sxm", 1, quantization={"weights": "fp8", "fp8_compute": True}) == ("measured", None)
    # an engine's own tables, as its run gets them
    sc = validate_scenario(candidate_raw({**raw, "engine": {"name": "sglang", "version": "0.5.3.post3"}},
                                         Candidate("a100-80gb", 1, None), prefer_calibrated=True))
    assert sc.cost_model.kind == "measured" and sc.cost_model.tables == "sglang"


def test_a_plans_policies_on_one_hardware_share_a_cost_model_tier():
    # as `compare` gives a file's variants (sim/config/files.py): a speculative policy cannot have the bf16 whole-step
    # profile, so the plain policy on the same GPU and TP is priced by the kernel tables too, and says why
    from sim.config.files import validate_scenario
    from sim.tools.planner import Candidate, _share_cost_tiers, candidate_raw
    speculation = {"num_speculative_tokens": 3, "draft_cost_ratio": 0.1, "acceptance": {"kind": "fixed", "alpha": 0.7}}
    raw = {"model": "llama-3.1-8b", "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                                                 "lengths": {"kind": "fixed", "input_tokens": 200,
                                                             "output_tokens": 20}},
           "variants": {"plain": {}, "speculative": {"speculation": speculation}}}
    cands = [Candidate(gpu, 1, policy) for gpu in ("h100-sxm", "a100-80gb") for policy in ("plain", "speculative")]
    raws = {c.name: candidate_raw(raw, c, prefer_calibrated=True) for c in cands}
    alone = validate_scenario(dict(raws["h100-sxm TP1 · plain"])).cost_model.kind
    _share_cost_tiers(raws, cands)
    kinds = {name: validate_scenario(r).cost_model for name, r in raws.items()}
    assert alone == "calibrated" and {cm.kind for cm in kinds.values()} == {"measured"}
    plain = validate_scenario(raws["h100-sxm TP1 · plain"])
    assert plain.cost_model_choice.endswith("(the tier every scenario compared with it can have)")


def test_measured_step_times_track_the_measured_h100_whole_steps():
    """Against whole CUDA-graphed llama-3.1-8b steps measured on an H100 (compiled engine, shipped profile
    rows): the kernel sum is within 25% on every prefill, decode and mixed row. Chunked prefills over earlier
    context are left out: AIConfigurator's context-attention table has no prefix rows, so they are priced by
    scaling (documented in sim/cost/measured.py) and come out up to 32-39% low (benchmarks/results/gpu-steps.md)."""
    steps = pd.read_csv(Path(__file__).parents[2] / "calibrate/profiles/h100-sxm/llama-3.1-8b/tp1/steps/compiled/steps.csv")
    steps = steps[steps["prefill_context"] == 0]
    cost = MeasuredCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    errors = []
    for r in steps.itertuples():
        plan = _plan_from_row(r)
        errors.append(cost.step_time(plan) / r.step_s - 1)
    assert max(abs(e) for e in errors) < 0.25, errors
    assert not math.isnan(sum(errors))


def _plan_from_row(r) -> StepPlan:
    from sim.cost.steps import plan_for_row  # the same step the whole-step check prices: prefill, decode or both
    return plan_for_row(r.kind, int(r.prefill_tokens), int(r.prefill_context), int(r.decode_batch),
                        int(r.decode_context))

def _gpt_oss_20b():
    from sim.model.hf_config import load_hf_config
    return load_hf_config(Path(__file__).parents[2] / "sim" / "model" / "configs" / "gpt-oss-20b.json")


def test_a_sliding_window_layer_is_priced_from_the_window_rows_where_measured_and_said_where_not():
    gpt_oss = _gpt_oss_20b()
    on_h100 = MeasuredCostModel(gpt_oss, get_gpu("h100-sxm"), weight_dtype="mxfp4")
    assert on_h100._window_prefill is not None and on_h100._window_decode is not None
    assert any(n.startswith("attention: sliding-window layers (128 tokens) priced from the window rows of the vllm "
                            "tables of h100-sxm")
               for n in on_h100.note_lines())
    on_a100 = MeasuredCostModel(gpt_oss, get_gpu("a100-80gb"), weight_dtype="mxfp4", moe_kernel="marlin")
    said = [n for n in on_a100.note_lines() if n.startswith("attention: a sliding-window layer priced from the full")]
    assert on_a100._window_prefill is None and said
    assert "the vllm tables of a100-80gb measured no sliding window" in said[0]
    assert not any(n.startswith(("attention: a sliding-window", "attention: sliding-window")) for n in
                   MeasuredCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm")).note_lines())


def test_window_grids_reproduce_the_window_rows_and_a_step_prices_its_window_layers_from_them():
    """Known answers: at every window row measured at gpt-oss-20b's heads the grids give the row's time, and a decode
    step's attention is the layers' share-weighted mean of the window row and the full-attention row."""
    from sim.cost import measured_kernel as mk
    gpt_oss = _gpt_oss_20b()
    cm = MeasuredCostModel(gpt_oss, get_gpu("h100-sxm"), weight_dtype="mxfp4")
    tables = load_tables(MEASURED_DIR / "h100-sxm")
    heads = dict(num_heads=64, num_kv_heads=8, head_dim=64)
    for df, grid, axis in ((tables.context_window, cm._window_prefill, "isl"),
                           (tables.generation_window, cm._window_decode, "kv_tokens")):
        rows = df[(df.window == 128) & (df.kv_dtype == "bf16")]
        rows = rows[(rows[list(heads)] == pd.Series(heads)).all(axis=1)]
        assert len(rows) > 100
        for r in rows.itertuples():
            assert grid(r.batch_size, getattr(r, axis)) == pytest.approx(r.latency_ms * 1e-3, rel=1e-12)
    packed, _ = mk.pack(cm)
    s, log, count = packed[0], packed[-2], packed[-1]
    full, window = packed[7:13], packed[13:19]
    assert s[mk.P_WINDOW_GRIDS] == 1.0 and gpt_oss.window_layer_share == 0.5
    none = np.zeros(1)
    for batch, context in ((64, 1024), (256, 512), (8, 32768)):
        got = mk._attention(s, *full, *window, log, count, 0, none, none, batch, float(batch * context), 1.0)
        want = 0.5 * cm._window_decode(batch, context) + 0.5 * cm._decode(batch, context)
        assert got == pytest.approx(want, rel=1e-12)
        # the window layer: more than the full-attention row at the window's context (the rows measured it so)
        assert cm._window_decode(batch, context) > cm._decode(batch, 128)
    # a fresh prompt of a batch: its window rows (the chunk alone; its KV's one read is cheaper)
    chunk = np.array([2048.0, 2048.0])
    got = mk._layer_attention(s, *window, log, count, 128.0, True, 2, chunk, np.zeros(2), 0, 0.0, 1.0)
    assert got == pytest.approx(cm._window_prefill(2, 2048), rel=1e-12)
    assert count[0] == 0


def test_a_chunk_longer_than_the_window_is_priced_as_a_batch_of_two_window_prompts():
    """Without window rows (the A100's tables), a sliding layer's long chunk from the full-attention rows."""
    from sim.cost import measured_kernel as mk
    gpt_oss = _gpt_oss_20b()
    cm = MeasuredCostModel(gpt_oss, get_gpu("a100-80gb"), weight_dtype="mxfp4", moe_kernel="marlin")
    packed, _ = mk.pack(cm)
    s, pf_ga, pf_gb, pf_r, log, count = packed[0], *packed[7:10], packed[-2], packed[-1]
    window = gpt_oss.sliding_window
    assert window == 128
    for same, chunk, context in ((1, 8192, 0), (2, 2048, 128), (1, 4096, 100)):
        blocks = same * (context + chunk) / window
        pairs = chunk * min(context + (chunk + 1) / 2, window)
        want = cm._prefill(blocks, 2 * window) * same * pairs / (blocks * 2 * window * (2 * window + 1) / 2)
        got = mk._windowed_chunk(s, pf_ga, pf_gb, pf_r, log, count, float(same), float(chunk), float(context),
                                 float(window))
        assert got == pytest.approx(want, rel=1e-9)
        # far below full causal attention over the chunk, the price before (2-14x AIConfigurator's window rows)
        assert got < 0.5 * cm._prefill(same, chunk + min(context, window))


def test_decode_attention_at_unmeasured_heads_is_the_nearest_rows_at_the_context_of_equal_kv_bytes():
    """Known answer: llama-2-7b's 32 KV heads of 128 (multi-head) were not measured in the A100's tables; its decode
    attention at context c is the nearest configuration's (32 query heads, 8 KV heads of 128) measured at 4c, the
    context that reads as many KV bytes per sequence, at every measured point."""
    cm = MeasuredCostModel(get_model("llama-2-7b"), get_gpu("a100-80gb"), weight_dtype="fp16", kv_dtype="fp16")
    gen = load_tables(MEASURED_DIR / "a100-80gb").generation
    assert gen[(gen.num_kv_heads == 32)].empty
    rows = gen[(gen.kv_dtype == "bf16") & (gen.num_heads == 32) & (gen.num_kv_heads == 8) & (gen.head_dim == 128)]
    assert len(rows) > 100
    for r in rows.itertuples():
        assert cm._decode(r.batch_size, r.kv_tokens / 4) == pytest.approx(r.latency_ms * 1e-3, rel=1e-12)
    assert any(n.startswith("decode attention: heads 32/32/128 (q/kv/dim) not measured; nearest 32/8/128 at the "
                            "context whose KV bytes per sequence match") for n in cm.note_lines())
    # a launch-bound decode (one sequence, 256 tokens) costs about what the kernel measured at 32/8/128 with 1,024:
    # the roofline ratio carried over before priced it at 3.6x that
    measured = rows[(rows.batch_size == 1) & (rows.kv_tokens == 1024)].latency_ms.iloc[0] * 1e-3
    assert cm._decode(1, 256) == pytest.approx(measured, rel=1e-12)


def test_a_plan_asked_for_one_shared_cost_model_prices_every_hardware_by_the_tier_all_can_have():
    # by default each hardware its own best (the H100 at TP 1 its whole-step profile, the A100 its kernel tables);
    # search.shared_cost_model (--shared-cost-model) gives every candidate the kind all of them can have
    from sim.config.files import validate_scenario
    from sim.tools.planner import Candidate, _share_cost_tiers, candidate_raw, plan_settings
    raw = {"model": "llama-3.1-8b", "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                                                 "lengths": {"kind": "fixed", "input_tokens": 200,
                                                             "output_tokens": 20}},
           "slo": {"ttft_s": 2.0}}
    cands = [Candidate(gpu, 1, None) for gpu in ("h100-sxm", "a100-80gb")]
    kinds = {}
    for across in (False, True):
        raws = {c.name: candidate_raw(raw, c, prefer_calibrated=True) for c in cands}
        _share_cost_tiers(raws, cands, across)
        kinds[across] = [validate_scenario(raws[c.name]).cost_model.kind for c in cands]
    assert kinds == {False: ["calibrated", "measured"], True: ["measured", "measured"]}
    assert plan_settings(raw).shared_cost_model is False
    assert plan_settings({**raw, "search": {"shared_cost_model": True}}).shared_cost_model is True
    assert plan_settings(raw, shared_cost_model=True).shared_cost_model is True
    # a candidate that cannot run decides nothing: Llama-3.1-70B does not fit one A100, so the H100 TP 8 keeps its
    # whole-step profile
    big = {**raw, "model": "llama-3.1-70b"}
    cands = [Candidate("h100-sxm", 8, None), Candidate("a100-80gb", 1, None)]
    raws = {c.name: candidate_raw(big, c, prefer_calibrated=True) for c in cands}
    _share_cost_tiers(raws, cands, True)
    assert validate_scenario(raws[cands[0].name]).cost_model.kind == "calibrated"
    # --own-cost-models over a file that asks for one
    assert plan_settings({**raw, "search": {"shared_cost_model": True}}, shared_cost_model=False).shared_cost_model \
        is False
