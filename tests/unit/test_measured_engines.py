"""Measured kernels per engine and dtype (issue 30, item 4): AIConfigurator's SGLang and TensorRT-LLM tables beside
vLLM's, fp8 GEMMs and fp8-KV attention priced from their own rows, and a dtype the tables (or a calibrated profile)
were not measured in refused with one line.

tests/fixtures/aic/h100_sxm/*/{sglang,trtllm}/ are small subsets of aiconfigurator-core 0.12.0's h100_sxm tables in
their own format (written by tests/fixtures/aic/make_subset.py); the shipped tables are
calibrate/measured/<gpu>/{sglang,trtllm}/ (`python -m calibrate.aic_import`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from calibrate.aic_import import MAX_EP_GPUS, convert_system
from helpers import one_error_line, servesim, small_scenario
from sim.core.step_plan import StepPlan
from sim.cost.measured import (
    INT4_ROWS_NOTE,
    MEASURED_DIR,
    TABLES,
    MeasuredCostModel,
    MeasuredFallback,
    load_tables,
    make_measured_cost_model,
    measured_gpus,
    measured_unsupported,
    tables_dir,
)
from sim.cost.profile_meta import check_profile_dtypes, profile_dtypes
from sim.cost.profiles import make_calibrated_cost_model
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.hf_config import load_hf_config

FIXTURE = Path(__file__).parents[1] / "fixtures" / "aic" / "h100_sxm"
VERSIONS = {"sglang": "0.5.14", "trtllm": "1.3.0rc20"}  # systems/query_versions.yaml of aiconfigurator-core 0.12.0
LLAMA, H100 = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
PROFILE = Path(__file__).parents[2] / "calibrate" / "profiles" / "h100-sxm" / "llama-3.1-8b" / "tp1" / "ops"


def _raw(framework: str, rel: str) -> pd.DataFrame:
    op, name = rel.split("/")
    return pd.read_parquet(FIXTURE / op / framework / {"vllm": "0.24.0", **VERSIONS}[framework] / name)


@pytest.fixture(scope="module", params=["sglang", "trtllm"])
def converted(request, tmp_path_factory):
    fw = request.param
    out = tmp_path_factory.mktemp(f"measured-{fw}") / "h100-sxm" / fw
    meta = convert_system(FIXTURE, VERSIONS[fw], out, "h100-sxm", "h100_sxm", "0.12.0", fw)
    return fw, out, meta


# --- the import ------------------------------------------------------------------------------------------------

def test_each_framework_is_converted_with_its_version_kernels_and_dtypes(converted):
    fw, out, meta = converted
    assert (meta["framework"], meta["framework_version"]) == (fw, VERSIONS[fw])
    for name in ("gemm", "context_attention", "generation_attention", "allreduce", "moe"):
        assert meta["tables"][name]["framework"] == fw and meta["tables"][name]["framework_version"] == VERSIONS[fw]
    assert meta["measured_dtypes"] == {"weights": ["bf16", "fp8", "fp8_block"], "kv_cache": ["bf16", "fp8"]}
    gemm = pd.read_parquet(out / "gemm.parquet")
    assert set(gemm["dtype"]) == {"bf16", "fp8", "fp8_block"}  # (block-scaled fp8: quantization.fp8_block_scales)
    raw = _raw(fw, "gemm/gemm_perf.parquet")
    assert len(gemm[gemm.dtype == "fp8"]) == len(raw[raw.gemm_dtype == "fp8"])
    # Latencies rounded to 3 significant digits (calibrate/aic_import.py LATENCY_DIGITS): within 0.5% of the raw row.
    row = raw[(raw.gemm_dtype == "fp8") & (raw.m == 512) & (raw.n == 6144) & (raw.k == 4096)]["latency"].iloc[0]
    got = gemm[(gemm.dtype == "fp8") & (gemm.m == 512) & (gemm.n == 6144) & (gemm.k == 4096)]["latency_ms"].iloc[0]
    assert got == float(f"{row:.3g}") and abs(got / row - 1) <= 0.005
    # All-reduce: SGLang's graph and eager curves; TensorRT-LLM's one curve (no backend column) kept as `graph`.
    ar = pd.read_parquet(out / "allreduce.parquet")
    assert set(ar["backend"]) == ({"graph", "eager"} if fw == "sglang" else {"graph"})


def test_fp8_kv_context_attention_is_the_kernel_and_attention_dtype_the_engine_runs(converted):
    """With an fp8 KV cache SGLang (FA3) and TensorRT-LLM compute context attention in fp8: the (kernel, attention
    dtype) with the most rows, as AIConfigurator's own default (fmha fp8 for an fp8 KV cache except on vLLM)."""
    fw, out, meta = converted
    assert meta["tables"]["context_attention"]["kernels"]["attention_dtypes"] == {"bf16": "bf16", "fp8": "fp8"}
    assert meta["tables"]["generation_attention"]["kernels"]["attention_dtypes"] == {"bf16": "bf16", "fp8": "bf16"}
    raw = _raw(fw, "attention/context_attention_perf.parquet")
    ctx = pd.read_parquet(out / "context_attention.parquet")
    want = raw[(raw.window_size == 0) & (raw.kv_cache_dtype == "fp8") & (raw.attn_dtype == "fp8")
               & (raw.kernel_source == meta["tables"]["context_attention"]["kernels"]["fp8"])
               & (raw.batch_size == 8) & (raw.isl == 1024)]["latency"]
    got = ctx[(ctx.kv_dtype == "fp8") & (ctx.batch_size == 8) & (ctx.isl == 1024)]["latency_ms"]
    assert len(want) == 1 and got.tolist() == [float(f"{want.iloc[0]:.3g}")]


def test_vllm_keeps_its_folder_and_exact_values(tmp_path):
    """vLLM's tables stay in the GPU folder, unrounded (the layout before issue 30)."""
    meta = convert_system(FIXTURE, "0.24.0", tmp_path / "h100-sxm", "h100-sxm", "h100_sxm", "0.12.0")
    assert meta["framework"] == "vllm" and (tmp_path / "h100-sxm" / "gemm.parquet").is_file()
    gemm = pd.read_parquet(tmp_path / "h100-sxm" / "gemm.parquet")
    raw = pd.read_parquet(FIXTURE / "gemm/vllm/0.24.0/gemm_perf.parquet")
    r = raw[(raw.gemm_dtype == "fp8") & (raw.m == 512) & (raw.n == 6144) & (raw.k == 4096)]["latency"].iloc[0]
    assert gemm[(gemm.dtype == "fp8") & (gemm.m == 512) & (gemm.n == 6144)]["latency_ms"].iloc[0] == r


# --- the shipped tables -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fw", TABLES)
def test_shipped_tables_of_every_engine_cover_the_nine_gpus_and_name_their_source(fw):
    assert set(measured_gpus(tables=fw)) == {"h100-sxm", "h200", "b200", "a100-80gb", "l40s", "b300", "gb200", "gb300",
                                              "rtx-pro-6000"}
    for gpu in measured_gpus(tables=fw):
        meta = load_tables(tables_dir(gpu, fw)).meta
        assert meta["framework"] == fw and meta["source"] == {
            "package": "aiconfigurator-core", "version": "0.12.0", "license": "Apache-2.0",
            "path": "aiconfigurator_core/systems/data"}
        # A100s (Ampere) have no fp8 tensor cores: AIConfigurator measured no fp8 there. Block-scaled fp8 GEMMs:
        # SGLang's and TensorRT-LLM's where measured (not SGLang's L40S and RTX PRO 6000); vLLM's rows are dropped
        # (host-bound).
        fp8 = ["bf16", "fp8"] if gpu != "a100-80gb" else ["bf16"]
        block = ["fp8_block"] if gpu != "a100-80gb" and fw != "vllm" and (fw, gpu) not in (
            ("sglang", "l40s"), ("sglang", "rtx-pro-6000")) else []
        nvfp4 = ["nvfp4"] if get_gpu(gpu).fp4_flops_per_s else []  # NVFP4 GEMMs: on Blackwell only
        # weight-only int8 / int4 GEMMs: only TensorRT-LLM's A100 tables measured them
        weight_only = ["int4", "int8"] if (fw, gpu) == ("trtllm", "a100-80gb") else []
        assert meta["measured_dtypes"] == {"weights": fp8 + block + nvfp4 + weight_only, "kv_cache": fp8}


def test_the_added_engine_tables_stay_small():
    folders = [d for fw in ("sglang", "trtllm") for d in MEASURED_DIR.glob(f"*/{fw}") if d.is_dir()]
    added = sum(f.stat().st_size for d in folders for f in d.iterdir() if f.is_file())
    # at most 0.45 MB per GPU and engine (ten folders: 2.9 MB; eighteen with their sliding-window rows: 7.4 MB)
    assert 0 < added < 0.45e6 * len(folders)


def test_each_engines_tables_price_a_step_and_the_repr_names_framework_version_and_dtypes():
    plan = StepPlan(prefill_request_ids=[1], prefill_chunk_tokens=[300], prefill_context_tokens=[200],
                    num_decode_seqs=7, decode_context_tokens=7 * 900, num_sampled_seqs=8)
    times = {}
    for fw, version in (("vllm", "0.24.0"), *VERSIONS.items()):
        cost = make_measured_cost_model(LLAMA, H100, tensor_parallel=2, weight_dtype="fp8", kv_dtype="fp8",
                                        fp8_compute=True, tables=fw)
        times[fw] = cost.step_time(plan)
        assert 0 < times[fw] < 0.1
        attn = "bf16" if fw == "vllm" else "fp8"
        assert (f"aiconfigurator-core 0.12.0 h100_sxm {fw} {version}: gemm fp8 rows, attention fp8-KV rows "
                f"computed in {attn}") in repr(cost)
    assert len(set(times.values())) == 3  # three engines' kernels, three prices


# --- fp8 priced from fp8 rows --------------------------------------------------------------------------------------

@pytest.mark.parametrize("fw", TABLES)
def test_an_fp8_gemm_is_the_fp8_rows_value_and_a_step_moves_by_exactly_the_gemm_difference(fw):
    model = {w: MeasuredCostModel(LLAMA, H100, weight_dtype=w, fp8_compute=w == "fp8", tables=fw)
             for w in ("bf16", "fp8")}
    gemm = model["fp8"].tables.gemm
    # llama-3.1-8b's fused QKV projection (n 6144, k 4096) is a measured shape: a grid m gives the row itself.
    for dtype in ("bf16", "fp8"):
        row = gemm[(gemm.dtype == dtype) & (gemm.n == 6144) & (gemm.k == 4096) & (gemm.m == 4096)]["latency_ms"]
        assert model[dtype]._curves[(6144, 4096, dtype)](4096) == pytest.approx(row.iloc[0] * 1e-3, rel=1e-12)
    # A step with a bf16 KV cache in both: attention, norms and the (16-bit) LM head are the same, so the step
    # times differ by exactly the per-layer GEMM differences.
    tokens = 4096
    plan = StepPlan(prefill_request_ids=[1], prefill_chunk_tokens=[tokens], prefill_context_tokens=[0],
                    num_sampled_seqs=1)
    diff = 0.0
    for n_layers, mats, _ in model["fp8"]._groups:
        for mm in mats:
            key = next(k for k, c in model["fp8"]._curves.items() if c is mm.curve)
            diff += n_layers * (mm.curve(tokens) - model["bf16"]._curves[(key[0], key[1], "bf16")](tokens))
    step = {w: m.step_time(plan) for w, m in model.items()}
    assert step["fp8"] - step["bf16"] == pytest.approx(diff, rel=1e-9)
    assert step["fp8"] < step["bf16"]  # at 4096 tokens every engine's fp8 GEMMs are faster (the tables say so)


A100 = get_gpu("a100-80gb")


@pytest.mark.parametrize("weights", ["int8", "int4"])
def test_weight_only_int_gemms_are_trtllms_a100_rows_and_a_step_moves_by_exactly_the_gemm_difference(weights):
    model = {w: MeasuredCostModel(LLAMA, A100, weight_dtype=w, tables="trtllm") for w in ("bf16", weights)}
    gemm = model[weights].tables.gemm
    assert load_tables(tables_dir("a100-80gb", "trtllm")).meta["tables"]["gemm"]["kernels"][weights] == (
        "trt_flow_/weight_only_quant_matmul_L257/PLUGIN_V2_WeightOnlyQuantMatmul_0")
    # llama-3.1-8b's output projection (n 4096, k 4096) is a measured shape of both dtypes: a grid m gives the row.
    for dtype in ("bf16", weights):
        for m in (1, 64, 4096):
            row = gemm[(gemm.dtype == dtype) & (gemm.n == 4096) & (gemm.k == 4096) & (gemm.m == m)]["latency_ms"]
            assert model[dtype]._curves[(4096, 4096, dtype)](m) == pytest.approx(row.iloc[0] * 1e-3, rel=1e-12)
    # Everything but the linear layers is the same (the LM head stays 16-bit): the steps differ by the GEMMs alone.
    for tokens in (1, 4096):
        plan = StepPlan(prefill_request_ids=[1], prefill_chunk_tokens=[tokens], prefill_context_tokens=[0],
                        num_sampled_seqs=1)
        diff = 0.0
        for n_layers, mats, _ in model[weights]._groups:
            for mm in mats:
                key = next(k for k, c in model[weights]._curves.items() if c is mm.curve)
                assert key[2] == weights
                diff += n_layers * (mm.curve(tokens) - model["bf16"]._curves[(key[0], key[1], "bf16")](tokens))
        step = {w: m.step_time(plan) for w, m in model.items()}
        assert step[weights] - step["bf16"] == pytest.approx(diff, rel=1e-9)
    # one token reads the weights: the 8- and 4-bit kernels are faster there, as their rows say
    one = StepPlan(num_decode_seqs=1, decode_context_tokens=512, num_sampled_seqs=1)
    assert model[weights].step_time(one) < model["bf16"].step_time(one)
    # int4's rows are per-channel: a group-wise checkpoint's kernel was not measured, and the notes say so
    assert (INT4_ROWS_NOTE in repr(model[weights])) == (weights == "int4")


def test_weight_only_int_experts_come_from_their_own_gemm_rows_and_elsewhere_int_weights_are_refused():
    mixtral = MeasuredCostModel(get_model("mixtral-8x7b"), A100, weight_dtype="int4", tables="trtllm")
    assert mixtral._moe is None and all(key[2] in ("int4", "bf16") for key in mixtral._curves)
    assert "moe: no int4 fused-MoE table for this setup; experts priced from the int4 GEMM rows as one fused kernel" \
        in repr(mixtral)
    for tables in ("vllm", "sglang"):  # their A100 tables measured no weight-only kernel
        with pytest.raises(ConfigError) as err:
            make_measured_cost_model(LLAMA, A100, weight_dtype="int8", tables=tables)
        assert str(err.value) == (f"quantization.weights: 'int8' is not measured in the {tables} tables of a100-80gb; "
                                  "allowed: bf16, fp16, or cost_model.unmeasured_dtype: roofline")
    with pytest.raises(ConfigError):  # nor TensorRT-LLM's H100 tables
        make_measured_cost_model(LLAMA, H100, weight_dtype="int4", tables="trtllm")


def test_a_trtllm_a100_int4_scenario_takes_its_tables_by_default_and_the_compiled_core_agrees():
    pytest.importorskip("numba")
    from sim.config.files import validate_scenario
    from sim.run import simulate
    results = []
    for compiled in (False, True):
        raw = small_scenario(engine={"name": "trtllm", "version": "1.2.0rc1"}, quantization={"weights": "int4"},
                             hardware={"gpu": "a100-80gb", "tensor_parallel": 2},
                             run={"num_requests": 60, "compiled_core": compiled})
        raw.pop("cost_model", None)
        scenario = validate_scenario(raw)
        assert scenario.cost_model_choice.startswith("measured: trtllm kernel tables of a100-80gb")
        results.append(simulate(scenario))
    python, compiled = results
    assert compiled.extras["engine_core"] == "compiled"
    assert "trtllm" in python.extras["cost_model_label"] and "weights=int4" in python.extras["cost_model"]
    pd.testing.assert_frame_equal(python.steps, compiled.steps, check_exact=True)
    pd.testing.assert_frame_equal(python.requests, compiled.requests, check_exact=True)


@pytest.mark.parametrize("fw", ["sglang", "trtllm"])
def test_an_fp8_kv_cache_prices_decode_attention_from_the_fp8_kv_rows(fw):
    cost = MeasuredCostModel(LLAMA, H100, kv_dtype="fp8", tables=fw)
    gen = cost.tables.generation
    rows = gen[(gen.kv_dtype == "fp8") & (gen.num_heads == 32) & (gen.num_kv_heads == 8) & (gen.head_dim == 128)]
    bf16 = gen[(gen.kv_dtype == "bf16") & (gen.num_heads == 32) & (gen.num_kv_heads == 8) & (gen.head_dim == 128)]
    r = rows[(rows.batch_size == 64) & (rows.kv_tokens == 4096)]
    assert len(r) == 1
    assert cost._decode(64, 4096) == pytest.approx(r["latency_ms"].iloc[0] * 1e-3, rel=1e-12)
    assert r["latency_ms"].iloc[0] != bf16[(bf16.batch_size == 64) & (bf16.kv_tokens == 4096)]["latency_ms"].iloc[0]


def test_fp8_experts_come_from_trtllms_fused_moe_rows_else_from_the_bf16_rows_at_the_fp8_roofline():
    from sim.cost.measured_kernel import SHAPE_MOE, SHAPE_MOE_FP8, shape_at
    mixtral = get_model("mixtral-8x7b")
    trt = MeasuredCostModel(mixtral, H100, tensor_parallel=2, weight_dtype="fp8", tables="trtllm")
    assert trt._moe is not None and not any("moe:" in n and "fused-MoE" in n for n in trt.notes)
    vllm = MeasuredCostModel(mixtral, H100, tensor_parallel=2, weight_dtype="fp8")
    bf16 = MeasuredCostModel(mixtral, H100, tensor_parallel=2)
    assert vllm._moe.shape.kind == SHAPE_MOE_FP8 and bf16._moe.shape.kind == SHAPE_MOE
    assert "bf16 fused-MoE rows' ratio to their roofline, applied to the fp8 roofline" in repr(vllm)
    # at every measured token count: the bf16 time x the fp8 roofline / the bf16 roofline of the same configuration
    roof, numbers = bf16.roof, (8, 2, 4096, 14336 / 2)
    for n in bf16._moe.xs:
        ratio = (shape_at(SHAPE_MOE_FP8, *numbers, roof.flops_per_s, roof.bytes_per_s, n, 0.0)
                 / shape_at(SHAPE_MOE, *numbers, roof.flops_per_s, roof.bytes_per_s, n, 0.0))
        assert vllm._moe(n) == pytest.approx(bf16._moe(n) * ratio, rel=1e-9)
        assert 0.5 <= ratio < 1.0  # half the weight bytes, twice the tensor-core rate: between half and all


# --- MLA from the engines' own MLA tables ---------------------------------------------------------------------------

def test_mla_attention_alone_is_imported_for_sglang_and_trtllm_and_vllms_whole_modules_as_measured(converted,
                                                                                                  tmp_path):
    fw, out, meta = converted
    for name, axis in (("context_mla", "isl"), ("generation_mla", "kv_tokens")):
        assert meta["tables"][name]["status"] == "ok" and meta["tables"][name]["dtypes"] == ["bf16", "fp8"]
        raw = _raw(fw, f"mla/{name}_perf.parquet")
        got = pd.read_parquet(out / f"{name}.parquet")
        assert list(got.columns) == ["kv_dtype", "batch_size", axis, "num_heads", "latency_ms"]
        # generation: kv_tokens = AIConfigurator's step (the context before the new token) + 1
        want = raw[(raw.kv_cache_dtype == "fp8") & (raw.num_heads == 16) & (raw.batch_size == 8)
                   & ((raw.isl == 1024) if axis == "isl" else (raw.step == 1023))]["latency"]
        row = got[(got.kv_dtype == "fp8") & (got.num_heads == 16) & (got.batch_size == 8) & (got[axis] == 1024)]
        # (a point measured more than once: the median, as for the other tables)
        assert len(want) >= 1 and row["latency_ms"].tolist() == [float(f"{want.median():.3g}")]
    assert "context_mla_module" not in meta["tables"]  # (their attention-alone rows price it)
    vllm = convert_system(FIXTURE, "0.24.0", tmp_path / "h100-sxm", "h100-sxm", "h100_sxm", "0.12.0")
    assert vllm["tables"]["context_mla"] == {
        "status": "absent", "note": "no vLLM context_mla_perf.parquet for h100_sxm (MLA measured only as whole "
                                    "modules, the projections inside: *_mla_module)"}
    assert not (tmp_path / "h100-sxm" / "context_mla.parquet").exists()
    # vLLM's whole modules as measured, by KV and GEMM dtype; a decode's `step` already counts the new token
    gen = pd.read_parquet(tmp_path / "h100-sxm" / "generation_mla_module.parquet")
    raw = _raw("vllm", "mla/mla_generation_module_perf.parquet")
    assert list(gen.columns) == ["kv_dtype", "gemm_dtype", "batch_size", "kv_tokens", "num_heads", "latency_ms"]
    assert len(gen) == len(raw) and sorted(set(gen["kv_tokens"])) == [128, 1024]
    want = raw[(raw.kv_cache_dtype == "fp8") & (raw.gemm_type == "fp8_block") & (raw.batch_size == 8)
               & (raw.step == 1024)]["latency"]
    got = gen[(gen.kv_dtype == "fp8") & (gen.gemm_dtype == "fp8_block") & (gen.batch_size == 8)
              & (gen.kv_tokens == 1024)]["latency_ms"]
    assert got.tolist() == want.tolist()
    assert vllm["tables"]["generation_mla_module"]["kernels"] == {
        "bf16": {"bf16": "FLASH_ATTN_MLA", "fp8_block": "FLASH_ATTN_MLA"},
        "fp8": {"bf16": "FLASHMLA", "fp8_block": "FLASHMLA"}}
    # context: every backend vLLM ran, one row per point (a short prompt run as a decode, FLASH_ATTN_MLA)
    ctx = pd.read_parquet(tmp_path / "h100-sxm" / "context_mla_module.parquet")
    raw = _raw("vllm", "mla/mla_context_module_perf.parquet")
    assert len(ctx) == len(raw[raw.step == 0])
    assert not ctx.duplicated(["kv_dtype", "gemm_dtype", "batch_size", "isl", "num_heads"]).any()
    assert vllm["tables"]["context_mla_module"]["kernels"]["bf16"]["bf16"] == "FLASH_ATTN, FLASH_ATTN_MLA"


def test_vllms_sparse_attention_modules_are_imported_as_measured_for_deepseek_v32_alone(tmp_path):
    vllm = convert_system(FIXTURE, "0.24.0", tmp_path / "h100-sxm", "h100-sxm", "h100_sxm", "0.12.0")
    for name, axis in (("context_dsa_module", "isl"), ("generation_dsa_module", "kv_tokens")):
        got = pd.read_parquet(tmp_path / "h100-sxm" / f"{name}.parquet")
        raw = _raw("vllm", f"sparse_attention/dsa_{name.split('_')[0]}_module_perf.parquet")
        v32 = raw[raw.model == "deepseek-ai/DeepSeek-V3.2"]
        assert list(got.columns) == ["kv_dtype", "gemm_dtype", "batch_size", axis, "num_heads", "latency_ms"]
        assert (raw.model != "deepseek-ai/DeepSeek-V3.2").any()  # GLM-5's rows are in the source, not the table
        # context rows from an empty cache (step 0); a decode's `step` is its context, as the MLA modules'
        assert len(got) == (len(v32[v32.step == 0]) if axis == "isl" else len(v32))
        want = v32[(v32.gemm_type == "fp8_block") & (v32.batch_size == 8) & (v32.step == (0 if axis == "isl" else 1024))
                   & ((v32.isl == 1024) if axis == "isl" else True)]["latency"]
        row = got[(got.gemm_dtype == "fp8_block") & (got.batch_size == 8) & (got[axis] == 1024)]["latency_ms"]
        assert len(want) == 1 and row.tolist() == want.tolist()  # (vLLM's latencies kept unrounded)
        assert vllm["tables"][name]["kernels"] == {"bf16": {"bf16": "FLASHMLA_SPARSE", "fp8_block": "FLASHMLA_SPARSE"}}
    trtllm = convert_system(FIXTURE, "1.3.0rc20", tmp_path / "trtllm", "h100-sxm", "h100_sxm", "0.12.0", "trtllm")
    assert "context_dsa_module" not in trtllm["tables"]  # (not imported: TensorRT-LLM's tables do not price it)


def test_sglangs_sparse_attention_modules_keep_each_kernel_it_ran_and_only_its_graphed_decodes(tmp_path):
    sglang = convert_system(FIXTURE, "0.5.14", tmp_path / "sglang", "h100-sxm", "h100_sxm", "0.12.0", "sglang")
    raw = _raw("sglang", "sparse_attention/dsa_context_module_perf.parquet")
    assert {"dsa_context_module_skip_indexer"} <= set(raw.op_name) and (raw.model != "deepseek-ai/DeepSeek-V3.2").any()
    v32 = raw[(raw.model == "deepseek-ai/DeepSeek-V3.2") & (raw.step == 0)]
    ctx = pd.read_parquet(tmp_path / "sglang" / "context_dsa_module.parquet")
    # from an empty cache, dense MHA up to the top-k's 2,048 tokens and the indexer's sparse kernel past it
    assert sorted(set(ctx["isl"])) == [128, 1024, 4096] and len(ctx) == len(v32.drop_duplicates(["batch_size", "isl"]))
    assert sglang["tables"]["context_dsa_module"]["kernels"] == {
        "bf16": {"fp8_block": "sglang_dsa_dense_mha_fa3, sglang_dsa_indexer_flashmla_sparse"}}
    for isl in (1024, 4096):  # (a point measured twice: the median, rounded as SGLang's tables are)
        want = v32[(v32.batch_size == 1) & (v32.isl == isl)]["latency"]
        assert ctx[(ctx.batch_size == 1) & (ctx.isl == isl)]["latency_ms"].tolist() == [float(f"{want.median():.3g}")]
    gen = pd.read_parquet(tmp_path / "sglang" / "generation_dsa_module.parquet")
    raw = _raw("sglang", "sparse_attention/dsa_generation_module_perf.parquet")
    raw = raw[raw.model == "deepseek-ai/DeepSeek-V3.2"]
    # the collector graphed batches up to 256 on the H100 and ran 512 eagerly (~9x the time): left out
    assert raw.batch_size.max() == 512 and gen.batch_size.max() == 256
    # a decode's `step` is its past KV: the context counts the new token too
    want = raw[(raw.batch_size == 8) & (raw.step == 1024)]["latency"]
    got = gen[(gen.batch_size == 8) & (gen.kv_tokens == 1025)]["latency_ms"]
    assert got.tolist() == [float(f"{want.median():.3g}")] and 1024 not in set(gen["kv_tokens"])


DSV2_LITE, H200 = get_model("deepseek-v2-lite"), get_gpu("h200")  # 16 heads; DeepSeek-V3's latent sizes


@pytest.mark.parametrize(("fw", "kv"), [("sglang", "bf16"), ("sglang", "fp8"), ("trtllm", "bf16"), ("trtllm", "fp8")])
def test_mla_attention_is_the_engines_mla_rows_and_a_decode_step_moves_by_exactly_their_difference(fw, kv):
    cost = MeasuredCostModel(DSV2_LITE, H200, tensor_parallel=2, kv_dtype=kv, tables=fw)  # 8 heads per GPU
    assert not cost.mla_by_roofline and f"MLA attention {kv}-KV rows computed in bf16" in repr(cost)
    assert not any("MLA" in n and "not" in n for n in cost.notes)
    ctx, gen = cost.tables.context_mla, cost.tables.generation_mla
    ctx, gen = ctx[(ctx.kv_dtype == kv) & (ctx.num_heads == 8)], gen[(gen.kv_dtype == kv) & (gen.num_heads == 8)]

    def row(df, axis, batch, x):
        return df[(df.batch_size == batch) & (df[axis] == x)]["latency_ms"].iloc[0] * 1e-3
    assert cost._prefill(4, 2048) == pytest.approx(row(ctx, "isl", 4, 2048), rel=1e-12)
    for batch, tokens in ((8, 1024), (64, 4096)):
        assert cost._decode(batch, tokens) == pytest.approx(row(gen, "kv_tokens", batch, tokens), rel=1e-12)
    # Decode steps of the same batch differ only in attention: by exactly the layers x the two rows' difference.
    step = {k: cost.step_time(StepPlan(num_decode_seqs=64, decode_context_tokens=64 * k, num_sampled_seqs=64))
            for k in (1024, 4096)}
    want = DSV2_LITE.num_layers * (row(gen, "kv_tokens", 64, 4096) - row(gen, "kv_tokens", 64, 1024))
    assert step[4096] - step[1024] == pytest.approx(want, rel=1e-9)


def test_vllms_mla_modules_price_only_deepseek_v3s_sizes_and_say_why_not():
    cost = MeasuredCostModel(DSV2_LITE, H200, tensor_parallel=2)  # hidden 2048, no q_lora: not the modules' model
    assert cost.mla_by_roofline and "MLA attention by the device roofline" in cost.source
    assert ("attention: vLLM's MLA modules in the vllm tables of h200 were measured at DeepSeek-V3's sizes (hidden, "
            "q_lora, nope, rope, v, kv_lora) (7168, 1536, 128, 64, 128, 512), not (2048, 0, 128, 64, 128, 512); priced "
            "by the device roofline") in repr(cost)
    a100 = MeasuredCostModel(DEEPSEEK_R1, get_gpu("a100-80gb"), tensor_parallel=8)  # no module rows there
    assert a100.mla_by_roofline and "attention: MLA is not in the vllm tables of a100-80gb" in repr(a100)


DEEPSEEK_R1 = load_hf_config(Path(__file__).parents[2] / "sim" / "model" / "configs" / "deepseek-r1.json")


@pytest.mark.parametrize(("weights", "block", "kv"), [("bf16", False, "bf16"), ("fp8", True, "bf16"),
                                                      ("fp8", True, "fp8")])
def test_vllms_mla_block_costs_its_measured_module_at_every_measured_point(weights, block, kv):
    """Known answer: vLLM's MLA attention is its whole-module rows less this model's own prices of the module's
    projections, so at a measured point the projections plus the attention are the module's measured time."""
    from sim.cost.measured import MLA_MODULE_PROJECTIONS
    cost = MeasuredCostModel(DEEPSEEK_R1, H200, tensor_parallel=8, weight_dtype=weights, fp8_block=block,
                             kv_dtype=kv)
    assert not cost.mla_by_roofline and "whole-module rows" in repr(cost)
    gemm = "fp8_block" if block else "bf16"
    projections = lambda tokens: sum(cost._linear_by_name[p](tokens) for p in MLA_MODULE_PROJECTIONS)  # noqa: E731
    t = cost.tables
    gen = t.generation_mla_module
    gen = gen[(gen.kv_dtype == kv) & (gen.gemm_dtype == gemm) & (gen.num_heads == 16)]
    for batch, tokens in ((1, 131072), (4, 16384), (256, 1024)):
        want = gen[(gen.batch_size == batch) & (gen.kv_tokens == tokens)]["latency_ms"].iloc[0] * 1e-3
        assert projections(batch) + cost._decode(batch, tokens) == pytest.approx(want, rel=1e-12)
    ctx = t.context_mla_module
    ctx = ctx[(ctx.kv_dtype == kv) & (ctx.gemm_dtype == gemm) & (ctx.num_heads == 16)]
    for batch, isl in ((4, 2048), (64, 1536)):
        want = ctx[(ctx.batch_size == batch) & (ctx.isl == isl)]["latency_ms"].iloc[0] * 1e-3
        assert projections(batch * isl) + cost._prefill(batch, isl) == pytest.approx(want, rel=1e-12)
    # Decode steps of the same batch differ only in attention: by the layers x the two modules' difference.
    step = {k: cost.step_time(StepPlan(num_decode_seqs=4, decode_context_tokens=4 * k, num_sampled_seqs=4))
            for k in (1024, 16384)}
    row = {k: gen[(gen.batch_size == 4) & (gen.kv_tokens == k)]["latency_ms"].iloc[0] * 1e-3 for k in (1024, 16384)}
    assert step[16384] - step[1024] == pytest.approx(DEEPSEEK_R1.num_layers * (row[16384] - row[1024]), rel=1e-9)


def test_vllms_mla_modules_measured_below_their_projections_price_are_not_taken_over_the_gemm_rows():
    """The B200's fp8 GEMM rows price the projections above many of its fp8 modules' whole time (113 of 306 at 16
    heads): no attention is left to derive, so the device roofline prices it, said, rather than a clamp."""
    cost = MeasuredCostModel(DEEPSEEK_R1, get_gpu("b200"), tensor_parallel=8, weight_dtype="fp8", fp8_block=True)
    assert cost.mla_by_roofline
    assert ("attention: 113 of vLLM's 306 MLA module rows in the vllm tables of b200 (fp8_block projections, 16 heads, "
            "bf16 KV) measured at or below this model's price of their projections (the GEMM rows and the modules "
            "disagree); priced by the device roofline") in repr(cost)


def test_vllms_mla_modules_at_heads_they_lack_fall_back_to_the_roofline():
    wide = DEEPSEEK_R1.model_copy(update={"num_attention_heads": 96})  # 12 per GPU at TP8: not measured
    cost = MeasuredCostModel(wide, H200, tensor_parallel=8)
    assert cost.mla_by_roofline
    assert ("attention: vLLM's MLA modules with 12 heads per GPU, bf16 projections and a bf16 KV cache are not in "
            "the vllm tables of h200; priced by the device roofline") in repr(cost)


def test_mla_heads_the_tables_lack_take_the_nearest_measured_heads_scaled_by_the_roofline():
    from sim.cost.measured_kernel import SHAPE_MLA_DECODE, shape_at
    wide = DSV2_LITE.model_copy(update={"num_attention_heads": 24, "num_kv_heads": 24})  # 24 per GPU: not measured
    cost = MeasuredCostModel(wide, H200, tables="trtllm")
    assert "MLA attention: 24 heads per GPU not measured; nearest 32 scaled by the roofline" in repr(cost)
    gen = cost.tables.generation_mla
    r = gen[(gen.kv_dtype == "bf16") & (gen.num_heads == 32) & (gen.batch_size == 64) & (gen.kv_tokens == 4096)]
    roof = cost.roof
    ratio = (shape_at(SHAPE_MLA_DECODE, 24, 576, 512, 2, roof.flops_per_s, roof.bytes_per_s, 64, 4096)
             / shape_at(SHAPE_MLA_DECODE, 32, 576, 512, 2, roof.flops_per_s, roof.bytes_per_s, 64, 4096))
    assert 0.75 <= ratio < 1.0  # fewer heads: no more work, at most the heads' share less (the latent is shared)
    assert cost._decode(64, 4096) == pytest.approx(r["latency_ms"].iloc[0] * 1e-3 * ratio, rel=1e-12)


# --- block-scaled fp8 -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fw", ["sglang", "trtllm"])
def test_block_scaled_fp8_gemms_are_the_block_rows_and_priced_apart_from_per_tensor_ones(fw):
    cost = {b: MeasuredCostModel(LLAMA, H100, weight_dtype="fp8", fp8_compute=True, tables=fw, fp8_block=b)
            for b in (False, True)}
    assert cost[True].gemm_rows == "fp8_block" and "gemm fp8_block rows" in repr(cost[True])
    gemm = cost[True].tables.gemm
    block = gemm[gemm.dtype == "fp8_block"]
    n, k = 4096, 4096  # llama-3.1-8b's o_proj, a measured block-scaled shape
    rows = block[(block.n == n) & (block.k == k)].set_index("m")["latency_ms"]
    assert len(rows) > 5
    m = int(rows.index[len(rows) // 2])
    assert cost[True]._curves[(n, k, "fp8_block")](m) == pytest.approx(rows[m] * 1e-3, rel=1e-12)
    plan = StepPlan(prefill_request_ids=[1], prefill_chunk_tokens=[m], prefill_context_tokens=[0], num_sampled_seqs=1)
    assert cost[True].step_time(plan) != cost[False].step_time(plan)


def test_vllms_block_scaled_gemms_come_from_its_per_tensor_rows_and_its_experts_from_its_block_rows():
    from sim.model.hf_config import load_hf_config
    r1 = load_hf_config(Path(__file__).parents[2] / "sim" / "model" / "configs" / "deepseek-r1.json")
    cost = MeasuredCostModel(r1, H200, tensor_parallel=8, weight_dtype="fp8", fp8_compute=True, fp8_block=True)
    assert cost.gemm_rows == "fp8"
    assert ("gemm: no block-scaled fp8 rows in the vllm tables of h200; block-scaled GEMMs priced from the per-tensor "
            "fp8 rows") in repr(cost)
    assert "dropped" in cost.tables.meta["tables"]["gemm"]  # why: meta.json says
    moe, routing = cost.tables.moe_rows(cost.moe_routing)  # DeepSeek's: power_law_1.01 (`moe_routing_of`)
    assert routing == cost.moe_routing == "power_law_1.01"
    row = moe[(moe.dtype == "fp8_block") & (moe.hidden_size == 7168) & (moe.inter_size == 2048) & (moe.topk == 8)
              & (moe.num_experts == 256) & (moe.moe_tp_size == 8) & (moe.num_tokens == 64)]["latency_ms"]
    assert len(row) == 1 and not any("fused-MoE" in n for n in cost.notes)  # DeepSeek's own configuration, measured
    assert cost._moe(64) == pytest.approx(row.iloc[0] * 1e-3, rel=1e-12)


def test_vllms_host_bound_block_gemm_rows_are_left_out_of_the_import(tmp_path):
    meta = convert_system(FIXTURE, "0.24.0", tmp_path / "h100-sxm", "h100-sxm", "h100_sxm", "0.12.0")
    assert "fp8_block" not in set(pd.read_parquet(tmp_path / "h100-sxm" / "gemm.parquet")["dtype"])
    assert set(meta["tables"]["gemm"]["dropped"]) == {"fp8_block"}
    raw = pd.read_parquet(FIXTURE / "gemm/vllm/0.24.0/gemm_perf.parquet")
    assert "fp8_block" in set(raw["gemm_dtype"])  # (the fixture holds such rows: the drop is exercised)


# --- refusals ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "line"), [
    ({"gpu": "a100-80gb", "tables": "trtllm", "weight_dtype": "fp8", "fp8_compute": True},
     "quantization.weights: 'fp8' is not measured in the trtllm tables of a100-80gb; allowed: bf16, fp16, int8, int4, "
     "or cost_model.unmeasured_dtype: roofline"),
    ({"gpu": "a100-80gb", "tables": "sglang", "kv_dtype": "fp8"},
     "quantization.kv_cache: 'fp8' is not measured in the sglang tables of a100-80gb; allowed: bf16, fp16, "
     "or cost_model.unmeasured_dtype: roofline"),
    ({"weight_dtype": "int4"},
     "quantization.weights: 'int4' is not measured in the vllm tables of h100-sxm; allowed: bf16, fp16, "
     "fp8 (with fp8_compute: true), mxfp4, or cost_model.unmeasured_dtype: roofline"),
    ({"kv_dtype": "int8", "tables": "trtllm"},
     "quantization.kv_cache: 'int8' is not measured in the trtllm tables of h100-sxm; allowed: bf16, fp16, fp8, "
     "or cost_model.unmeasured_dtype: roofline"),
    ({"weight_dtype": "fp8", "fp8_compute": False, "tables": "sglang"},
     "quantization.fp8_compute: false with weights 'fp8' (weight-only fp8) is not measured in the sglang tables of "
     "h100-sxm; allowed: true (W8A8, the fp8 GEMM rows), or cost_model.unmeasured_dtype: roofline"),
    ({"fp8_compute": True},
     "quantization.fp8_compute: true with weights 'bf16' is not measured in the vllm tables of h100-sxm; allowed: "
     "false, or weights 'fp8', or cost_model.unmeasured_dtype: roofline"),
])
def test_a_dtype_the_tables_lack_is_refused_with_one_line_never_priced_as_bf16(kwargs, line):
    gpu = get_gpu(kwargs.pop("gpu", "h100-sxm"))
    with pytest.raises(ConfigError) as err:
        make_measured_cost_model(LLAMA, gpu, **kwargs)
    assert str(err.value) == line and "\n" not in line
    # Asked for by name, the roofline prices the whole step instead, and its repr says why.
    fallback = make_measured_cost_model(LLAMA, gpu, unmeasured_dtype="roofline", **kwargs)
    assert isinstance(fallback, MeasuredFallback) and line in repr(fallback)
    # `on_missing: roofline` (the default) covers a missing GPU only: still refused without unmeasured_dtype.
    with pytest.raises(ConfigError):
        make_measured_cost_model(LLAMA, gpu, on_missing="roofline", **kwargs)


def test_a_gpu_without_an_engines_tables_follows_on_missing():
    fallback = make_measured_cost_model(LLAMA, get_gpu("l4"), tables="trtllm")
    assert ("no measured trtllm kernel tables for gpu 'l4'; measured: a100-80gb, b200, b300, gb200, gb300, h100-sxm, "
            "h200, l40s, rtx-pro-6000" in repr(fallback))
    with pytest.raises(ConfigError, match="^cost_model: no measured trtllm kernel tables for gpu 'l4'"):
        make_measured_cost_model(LLAMA, get_gpu("l4"), tables="trtllm", on_missing="error")
    with pytest.raises(ConfigError, match="^cost_model.tables: 'tgi' is not allowed; allowed: vllm, sglang, trtllm$"):
        make_measured_cost_model(LLAMA, H100, tables="tgi")
    assert measured_unsupported("h100-sxm", "fp8", "fp8", tables="trtllm") is None
    assert measured_unsupported("a100-80gb", "fp8", tables="trtllm").startswith("quantization.weights: 'fp8'")


def test_trtllm_has_no_eager_all_reduce_and_says_so():
    with pytest.raises(ConfigError, match="^cost_model.engine: 'vllm-eager' has no eager all-reduce in the trtllm "
                                          "tables of h100-sxm; allowed: vllm-cudagraph$"):
        MeasuredCostModel(LLAMA, H100, tensor_parallel=2, engine="vllm-eager", tables="trtllm")
    MeasuredCostModel(LLAMA, H100, tensor_parallel=1, engine="vllm-eager", tables="trtllm")  # no all-reduce at TP 1


# --- the calibrated cost model ------------------------------------------------------------------------------------

def test_a_profile_without_a_dtype_record_is_bf16_and_quantized_dtypes_must_be_recorded():
    assert profile_dtypes({}) == ("bf16", "bf16")
    assert profile_dtypes({"dtype": "fp32"}) == ("fp32", "fp32")
    assert profile_dtypes({"dtype": "bf16", "weight_dtype": "fp8", "kv_dtype": "fp8"}) == ("fp8", "fp8")
    check_profile_dtypes({"dtype": "fp32"}, "p", "bf16", "fp16")  # unquantized: the profile's own dtype prices it
    check_profile_dtypes({"weight_dtype": "fp8"}, "p", "fp8", "bf16", fp8_compute=True)
    with pytest.raises(ConfigError, match=r"^quantization.kv_cache: 'fp8' is not measured in profile 'p' "
                                          r"\(measured in fp8 weights, bf16 KV cache\); allowed: bf16, fp16, "
                                          r"or cost_model.kind roofline$"):
        check_profile_dtypes({"weight_dtype": "fp8"}, "p", "fp8", "fp8")


@pytest.mark.parametrize(("quant", "field"), [({"weight_dtype": "fp8", "fp8_compute": True}, "weights: 'fp8'"),
                                              ({"weight_dtype": "int4"}, "weights: 'int4'"),
                                              ({"kv_dtype": "fp8"}, "kv_cache: 'fp8'"),
                                              ({"fp8_compute": True}, "fp8_compute: true")])
def test_a_bf16_profile_refuses_a_quantization_it_was_not_measured_in(quant, field):
    with pytest.raises(ConfigError) as err:
        make_calibrated_cost_model(PROFILE, LLAMA, **quant)
    line = str(err.value)
    assert line.startswith(f"quantization.{field}") and f"in profile '{PROFILE}' (measured in bf16 weights, bf16 " \
        "KV cache)" in line and "\n" not in line
    assert make_calibrated_cost_model(PROFILE, LLAMA, weight_dtype="fp16", kv_dtype="fp16").step_time(
        StepPlan(num_decode_seqs=4, decode_context_tokens=4000, num_sampled_seqs=4)) > 0


# --- the scenario and the command line ---------------------------------------------------------------------------

def test_a_scenario_picks_an_engines_tables_and_the_result_names_them():
    from sim.config.schema import Scenario
    from sim.cost.labels import cost_model_label
    from sim.run import make_cost_model, simulate
    raw = small_scenario(cost_model={"kind": "measured", "tables": "trtllm"},
                         quantization={"weights": "fp8", "fp8_compute": True, "kv_cache": "fp8"})
    scenario = Scenario.model_validate(raw)
    assert cost_model_label(make_cost_model(scenario)) == "measured (AIConfigurator h100_sxm trtllm 1.3.0rc20)"
    result = simulate(scenario)
    assert result.summary["num_finished"] == 20
    assert "trtllm 1.3.0rc20: gemm fp8 rows, attention fp8-KV rows computed in fp8" in result.extras["cost_model"]
    assert Scenario.model_validate(small_scenario(cost_model={"kind": "measured"})).cost_model.tables == "vllm"


def test_the_compiled_core_prices_an_engines_fp8_tables_as_the_python_engine_does():
    pytest.importorskip("numba")
    from sim.config.files import validate_scenario
    from sim.run import simulate
    results = []
    for compiled in (False, True):
        raw = small_scenario(cost_model={"kind": "measured", "tables": "sglang"},
                             quantization={"weights": "fp8", "fp8_compute": True, "kv_cache": "fp8"},
                             hardware={"tensor_parallel": 2},
                             workload={"arrival": {"kind": "poisson", "rate_per_s": 40},
                                       "lengths": {"kind": "lognormal", "input_mean": 300, "input_sigma": 1.0,
                                                   "output_mean": 60, "output_sigma": 1.0}},
                             run={"num_requests": 80, "compiled_core": compiled})
        results.append(simulate(validate_scenario(raw)))
    python, compiled = results
    assert compiled.extras["engine_core"] == "compiled"
    pd.testing.assert_frame_equal(python.steps, compiled.steps, check_exact=True)
    pd.testing.assert_frame_equal(python.requests, compiled.requests, check_exact=True)
    assert python.extras["cost_model"] == compiled.extras["cost_model"]


@pytest.mark.parametrize(("changes", "want"), [
    ({"hardware": {"gpu": "a100-80gb"}, "cost_model": {"kind": "measured", "tables": "trtllm"},
      "quantization": {"weights": "fp8", "fp8_compute": True}},
     "error: quantization.weights: 'fp8' is not measured in the trtllm tables of a100-80gb; allowed: bf16, fp16, "
     "int8, int4, or cost_model.unmeasured_dtype: roofline"),
    ({"cost_model": {"kind": "calibrated"}, "quantization": {"kv_cache": "fp8"}},
     "error: quantization.kv_cache: 'fp8' is not measured in profile"),
    ({"quantization": {"weights": "bf16", "fp8_block_scales": True}},
     "error: quantization: fp8_block_scales: true with weights 'bf16'; allowed: weights 'fp8', or fp8_block_scales "
     "false"),
    ({"quantization": {"weights": "bf16", "moe_kernel": "marlin"}},
     "error: quantization: moe_kernel: 'marlin' with weights 'bf16' (the tables keep Marlin's rows of MXFP4 experts "
     "only); allowed: weights 'mxfp4', or moe_kernel null"),
])
def test_servesim_run_with_an_unmeasured_dtype_exits_2_with_one_line(tmp_path, changes, want):
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(small_scenario(changes), sort_keys=False))
    line = one_error_line(servesim("run", path, "-q", cwd=tmp_path))
    assert line.startswith(want), line
    # with its progress bar too: the refusal comes before the bar's first line
    assert one_error_line(servesim("run", path, "--out", tmp_path / "out", cwd=tmp_path)) == line
    assert not (tmp_path / "out").exists()


# --- routing: balanced or skewed fused-MoE rows ----------------------------------------------------------------------

def test_the_import_keeps_every_routing_each_as_measured(converted):
    fw, out, meta = converted
    moe = pd.read_parquet(out / "moe.parquet")
    raw = _raw(fw, "moe/moe_perf.parquet")
    assert sorted(set(moe["distribution"])) == sorted(set(raw["distribution"])) == meta["tables"]["moe"]["kernels"][
        "distributions"]
    assert meta["tables"]["moe"]["kernels"]["distribution"] == "balanced"  # what `moe` (the default rows) holds
    keys = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
    kept = (raw["moe_ep_size"] == 1) | (raw["moe_ep_size"] * raw["moe_tp_size"] <= MAX_EP_GPUS)
    for routing, rows in moe.groupby("distribution"):  # each routing's rows: its own measurements, medians of repeats
        src = raw[kept & (raw["distribution"] == routing) & (raw["moe_dtype"] == "bfloat16")]
        src = src[src["kernel_source"] == meta["tables"]["moe"]["kernels"]["bf16"]]
        mine = rows[rows["dtype"] == "bf16"].sort_values(keys)
        medians = src.groupby(keys, as_index=False)["latency"].median().sort_values(keys)
        assert len(mine) == len(medians) > 0
        # (written to 3 significant digits for this framework: LATENCY_DIGITS)
        assert list(mine["latency_ms"]) == pytest.approx(list(medians["latency"]), rel=5e-3)


def test_the_import_keeps_each_engines_mxfp4_expert_rows_as_measured(converted):
    fw, out, meta = converted
    moe = pd.read_parquet(out / "moe.parquet")
    raw = _raw(fw, "moe/moe_perf.parquet")
    kernel = meta["tables"]["moe"]["kernels"]["mxfp4"]  # the engine's gpt-oss kernel
    assert "mxfp4" in meta["tables"]["moe"]["dtypes"] and kernel == {"sglang": "sglang_fused_moe_triton",
                                                                      "trtllm": "moe_torch_flow"}[fw]
    assert meta["measured_dtypes"]["weights"] == ["bf16", "fp8", "fp8_block"]  # GEMM dtypes: no MXFP4 GEMM rows
    keys = ["distribution", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
            "moe_ep_size"]
    kept = (raw["moe_ep_size"] == 1) | (raw["moe_ep_size"] * raw["moe_tp_size"] <= MAX_EP_GPUS)
    src = raw[kept & (raw["moe_dtype"] == "w4a16_mxfp4") & (raw["kernel_source"] == kernel)]
    medians = src.groupby(keys, as_index=False)["latency"].median().sort_values(keys)
    mine = moe[moe["dtype"] == "mxfp4"].sort_values(keys)
    assert len(mine) == len(medians) > 0 and set(mine["hidden_size"]) == {2880}
    assert list(mine["latency_ms"]) == pytest.approx(list(medians["latency"]), rel=5e-3)  # 3 significant digits


def test_auto_routing_is_aiconfigurators_own_and_each_routing_prices_from_its_rows():
    from sim.cost.measured import moe_routing_of
    mixtral = get_model("mixtral-8x7b")
    assert moe_routing_of(get_model("deepseek-v2-lite"), "auto") == "power_law_1.01"  # MLA: DeepSeek's family
    assert moe_routing_of(mixtral, "auto") == "power_law_1.2"
    assert moe_routing_of(mixtral, "balanced") == "balanced"
    t = load_tables(tables_dir("h100-sxm", "vllm"))
    for routing in ("balanced", "power_law_1.01", "power_law_1.2"):
        cost = MeasuredCostModel(mixtral, H100, tensor_parallel=2, moe_routing=routing)
        rows, used = t.moe_rows(routing)
        assert used == routing
        rows = rows[(rows["dtype"] == "bf16") & (rows["hidden_size"] == 4096) & (rows["inter_size"] == 14336)
                    & (rows["topk"] == 2) & (rows["num_experts"] == 8) & (rows["moe_tp_size"] == 2)
                    & (rows["moe_ep_size"] == 1)]
        assert len(rows) > 10
        for n, ms in zip(rows["num_tokens"], rows["latency_ms"]):  # Mixtral at TP 2 is a measured configuration
            assert cost._moe(float(n)) == pytest.approx(ms * 1e-3, rel=1e-9)
    auto = MeasuredCostModel(mixtral, H100, tensor_parallel=2)
    assert "moe: power_law_1.2 routing" in repr(auto)
    from sim.cost.labels import cost_model_label
    assert cost_model_label(auto) == "measured (AIConfigurator h100_sxm vllm 0.24.0, power_law_1.2 MoE routing)"
    assert cost_model_label(MeasuredCostModel(LLAMA, H100)) == "measured (AIConfigurator h100_sxm vllm 0.24.0)"


def test_a_routing_the_tables_lack_is_said_or_refused_in_one_line():
    import dataclasses
    # vLLM's A100 table measured skewed routing only: balanced is priced from its mildest skew, and says so.
    a100 = MeasuredCostModel(get_model("mixtral-8x7b"), get_gpu("a100-80gb"), tensor_parallel=2, moe_routing="balanced")
    assert "moe: no balanced routing in these tables; their power_law_1.01 rows" in a100.notes
    t = load_tables(tables_dir("h100-sxm", "vllm"))
    fewer = dataclasses.replace(t, moe_by_routing={k: v for k, v in t.moe_by_routing.items() if k != "power_law_1.2"})
    with pytest.raises(ConfigError) as err:
        fewer.moe_rows("power_law_1.2")
    assert str(err.value) == ("cost_model.moe_routing: 'power_law_1.2' was not measured in the vllm tables of "
                              "h100-sxm; allowed: balanced, power_law_1.01")


# --- MXFP4 experts (gpt-oss) ---------------------------------------------------------------------------------

def _gpt_oss():
    from sim.model.hf_config import load_hf_config
    return load_hf_config(Path(__file__).parents[2] / "sim" / "model" / "configs" / "gpt-oss-120b.json")


@pytest.mark.parametrize("tables", ["vllm", "sglang"])
def test_mxfp4_experts_come_from_each_engines_own_mxfp4_rows_and_the_rest_from_its_bf16_gemms(tables):
    from sim.cost.measured_kernel import SHAPE_MOE_MXFP4
    oss = _gpt_oss()
    cost = MeasuredCostModel(oss, H100, weight_dtype="mxfp4", tables=tables, moe_routing="balanced")
    assert cost._moe.shape.kind == SHAPE_MOE_MXFP4 and cost.gemm_rows == "bf16"
    assert not any("fused-MoE" in n for n in cost.notes)  # gpt-oss's own configuration, measured
    rows, _ = cost.tables.moe_rows("balanced")
    rows = rows[(rows.dtype == "mxfp4") & (rows.hidden_size == 2880) & (rows.num_experts == 128)
                & (rows.moe_tp_size == 1) & (rows.moe_ep_size == 1)]
    assert len(rows) > 10
    for n, ms in zip(rows["num_tokens"], rows["latency_ms"]):
        assert cost._moe(float(n)) == pytest.approx(ms * 1e-3, rel=1e-9)
    # the attention projections are priced as the bf16 GEMMs they are, not at 4 bits
    bf16 = MeasuredCostModel(oss, H100, tables=tables, moe_routing="balanced")
    plan = StepPlan(num_decode_seqs=8, decode_context_tokens=8 * 1000, num_sampled_seqs=8)
    assert [lin.curve(8.0) for lin in bf16._groups[0][1]] == [lin.curve(8.0) for lin in cost._groups[0][1]]
    assert cost.step_time(plan) != bf16.step_time(plan)


def test_marlin_mxfp4_experts_come_from_the_marlin_kernels_rows_where_the_engine_runs_it():
    """`quantization.moe_kernel: marlin` (vLLM before 0.12.0): vLLM's H100 tables keep OpenAI's Triton MXFP4 kernel as
    their main one and Marlin's rows beside it (measured at another model's expert shapes): the experts come from
    Marlin's rows, scaled to gpt-oss's shapes by the roofline, and the model says so. Tables without Marlin rows price
    the experts from their own MXFP4 kernel and say that."""
    oss = _gpt_oss()
    rows, _ = load_tables(tables_dir("h100-sxm", "vllm")).moe_rows("balanced")
    marlin_rows = rows[rows.dtype == "mxfp4_marlin"]
    assert len(marlin_rows) > 10 and 2880 not in set(marlin_rows.hidden_size)  # not measured at gpt-oss's shapes
    triton = MeasuredCostModel(oss, H100, weight_dtype="mxfp4", moe_routing="balanced")
    marlin = MeasuredCostModel(oss, H100, weight_dtype="mxfp4", moe_routing="balanced", moe_kernel="marlin")
    assert "moe: MXFP4 experts from the Marlin kernel's rows (quantization.moe_kernel: marlin)" in marlin.notes
    assert any("scaled by the roofline" in n for n in marlin.notes) and not any("Marlin" in n for n in triton.notes)
    for n in (1.0, 64.0, 8192.0):
        assert marlin._moe(n) != triton._moe(n)
    plan = StepPlan(num_decode_seqs=64, decode_context_tokens=64 * 1000, num_sampled_seqs=64)
    assert marlin.step_time(plan) != triton.step_time(plan)
    # SGLang's tables keep no Marlin rows apart: their own MXFP4 kernel prices the experts, said
    sglang = MeasuredCostModel(oss, H100, weight_dtype="mxfp4", tables="sglang", moe_routing="balanced",
                               moe_kernel="marlin")
    assert any(n.startswith("moe: Marlin's MXFP4 kernel is not in the sglang tables of h100-sxm") for n in sglang.notes)
    plain = MeasuredCostModel(oss, H100, weight_dtype="mxfp4", tables="sglang", moe_routing="balanced")
    assert sglang._moe(64.0) == plain._moe(64.0)


def test_the_import_keeps_a_second_moe_kernel_apart_only_where_it_is_not_the_main_one():
    from calibrate.aic_import import _moe
    def rows(kernel, n, latency):
        return {"moe_dtype": "w4a16_mxfp4", "kernel_source": kernel, "distribution": "balanced", "num_tokens": n,
                "hidden_size": 2880, "inter_size": 2880, "topk": 4, "num_experts": 32, "moe_tp_size": 1,
                "moe_ep_size": 1, "latency": latency}
    raw = pd.DataFrame([rows("oai_triton", n, 0.1 * n) for n in (1, 2, 4)] + [rows("x_marlin_y", n, 0.3 * n)
                                                                             for n in (1, 2)])
    df, kernels = _moe(raw, ("w4a16_mxfp4",), {"w4a16_mxfp4": ("marlin", "mxfp4_marlin")})
    assert kernels["mxfp4"] == "oai_triton" and kernels["mxfp4_marlin"] == "x_marlin_y"
    assert sorted(df[df.dtype == "mxfp4_marlin"].latency_ms) == pytest.approx([0.3, 0.6])
    assert len(df[df.dtype == "mxfp4"]) == 3
    main_is_marlin = raw[raw.kernel_source == "x_marlin_y"]
    df, kernels = _moe(main_is_marlin, ("w4a16_mxfp4",), {"w4a16_mxfp4": ("marlin", "mxfp4_marlin")})
    assert set(df.dtype) == {"mxfp4"} and "mxfp4_marlin" not in kernels


def test_mxfp4_is_refused_where_the_tables_hold_no_mxfp4_rows_and_never_priced_from_another_dtype():
    oss = _gpt_oss()
    why = measured_unsupported("a100-80gb", "mxfp4", tables="sglang")
    assert why.startswith("quantization.weights: 'mxfp4' is not measured in the sglang tables of a100-80gb (no MXFP4 "
                          "fused-MoE rows); allowed: bf16, fp16")
    assert why.endswith("cost_model.unmeasured_dtype: roofline") and "\n" not in why
    assert measured_unsupported("h100-sxm", "mxfp4", tables="trtllm") is None
    with pytest.raises(ConfigError, match="^quantization.weights: 'mxfp4' is not measured"):
        MeasuredCostModel(oss, get_gpu("a100-80gb"), weight_dtype="mxfp4", tables="sglang", moe_kernel="marlin")
    # vLLM's A100 tables hold Marlin's rows alone (borrowed, below): MXFP4 experts only where Marlin runs them
    why = measured_unsupported("a100-80gb", "mxfp4", tables="vllm")
    assert why.startswith("quantization.weights: 'mxfp4' is not measured in the vllm tables of a100-80gb (only "
                          "Marlin's MXFP4 fused-MoE rows); allowed: bf16, fp16, quantization.moe_kernel: marlin, ")
    assert measured_unsupported("a100-80gb", "mxfp4", tables="vllm", moe_kernel="marlin") is None
    with pytest.raises(ConfigError, match="^quantization.weights: 'mxfp4' is not measured"):
        MeasuredCostModel(oss, get_gpu("a100-80gb"), weight_dtype="mxfp4")
    assert "mxfp4" in measured_unsupported("h100-sxm", "int8").split("allowed: ")[1]  # listed where measured


@pytest.mark.parametrize("tables", ["vllm", "roofline"])
def test_the_compiled_core_prices_mxfp4_experts_as_the_python_engine_does(tables):
    pytest.importorskip("numba")
    from sim.config.files import validate_scenario
    from sim.run import simulate
    oss = str(Path(__file__).parents[2] / "sim" / "model" / "configs" / "gpt-oss-120b.json")
    cost_model = {"kind": "measured", "tables": "vllm"} if tables == "vllm" else {"kind": "roofline"}
    results = []
    for compiled in (False, True):
        raw = small_scenario(model={"hf_config": oss}, cost_model=cost_model,  # mxfp4: the checkpoint's own
                             workload={"arrival": {"kind": "poisson", "rate_per_s": 40},
                                       "lengths": {"kind": "lognormal", "input_mean": 300, "input_sigma": 1.0,
                                                   "output_mean": 60, "output_sigma": 1.0}},
                             run={"num_requests": 80, "compiled_core": compiled})
        spec = validate_scenario(raw)
        assert spec.quantization.weights == "mxfp4"
        results.append(simulate(spec))
    python, compiled = results
    assert compiled.extras["engine_core"] == "compiled"
    pd.testing.assert_frame_equal(python.steps, compiled.steps, check_exact=True)
    pd.testing.assert_frame_equal(python.requests, compiled.requests, check_exact=True)


def test_vllms_a100_marlin_experts_come_from_sglangs_marlin_rows_borrowed_and_said():
    """AIConfigurator measured no Marlin MXFP4 kernel for vLLM on A100, where vLLM runs gpt-oss's experts with it:
    the import borrows SGLang's A100 Marlin MoE rows (int4 weights, the same kernel family), meta.json names them,
    and the measured model prices from them only with `moe_kernel: marlin`, saying whose rows they are."""
    oss = _gpt_oss()
    tables = load_tables(tables_dir("a100-80gb", "vllm"))
    lent = tables.meta["tables"]["moe"]["borrowed"]["mxfp4_marlin"]
    assert (lent["framework"], lent["moe_dtype"]) == ("sglang", "int4_wo") and "marlin" in lent["kernel"]
    assert tables.meta["tables"]["moe"]["kernels"]["mxfp4_marlin"] == lent["kernel"]
    rows, routing = tables.moe_rows("power_law_1.2")
    assert routing == "power_law_1.2" and len(rows[rows.dtype == "mxfp4_marlin"]) > 100
    marlin = MeasuredCostModel(oss, get_gpu("a100-80gb"), weight_dtype="mxfp4", moe_kernel="marlin",
                               moe_routing="power_law_1.2")
    assert any(n.startswith(f"moe: MXFP4 experts from sglang {lent['framework_version']}'s Marlin fused-MoE rows")
               for n in marlin.notes)
    assert any("scaled by the roofline" in n for n in marlin.notes)  # gpt-oss's shapes were not measured there
    # Marlin at a prefill chunk's tokens runs well under the roofline the experts' bytes and FLOPs give
    roof = marlin._moe.shape
    assert marlin._moe(2048.0) > 2 * roof(2048.0)


def _moe_raw(dtype, kernel, distribution, n, latency, hidden=2048):
    return {"moe_dtype": dtype, "kernel_source": kernel, "distribution": distribution, "num_tokens": n,
            "hidden_size": hidden, "inter_size": 768, "topk": 8, "num_experts": 128, "moe_tp_size": 1,
            "moe_ep_size": 1, "latency": latency, "device": "X", "op_name": "moe", "framework": "f",
            "version": "v"}


def test_the_import_borrows_another_engines_marlin_rows_only_where_its_own_hold_no_marlin_kernel(tmp_path):
    from calibrate.aic_import import _borrow_moe, _moe
    system = tmp_path / "data" / "a100_sxm"
    own = pd.DataFrame([_moe_raw("bfloat16", "own_fused", "power_law_1.01", n, 0.1 * n) for n in (1, 2)])
    lender = pd.DataFrame([_moe_raw("int4_wo", "sglang_marlin_moe", d, n, 0.5 * n)
                           for d in ("balanced", "power_law_1.01") for n in (1, 2)]
                          + [_moe_raw("int4_wo", "other_int4", "power_law_1.01", 1, 9.0)]
                          + [_moe_raw("bfloat16", "sglang_fused", "power_law_1.01", 1, 7.0)])
    (system / "moe" / "sglang" / "0.5.10").mkdir(parents=True)
    lender.to_parquet(system / "moe" / "sglang" / "0.5.10" / "moe_perf.parquet")
    df, kernels = _moe(own, ("bfloat16", "w4a16_mxfp4"), {"w4a16_mxfp4": ("marlin", "mxfp4_marlin")})
    out, kernels, borrowed = _borrow_moe(df, kernels, system, "vllm", {"sglang": "0.5.10", "trtllm": "1.0.0"})
    lent = out[out.dtype == "mxfp4_marlin"]
    # the lender's Marlin int4 rows, under the routing the engine's own rows were measured with only
    assert sorted(lent.latency_ms) == pytest.approx([0.5, 1.0]) and set(lent.distribution) == {"power_law_1.01"}
    assert len(out[out.dtype == "bf16"]) == 2 and kernels["mxfp4_marlin"] == "sglang_marlin_moe"
    assert borrowed["mxfp4_marlin"]["framework"] == "sglang" and borrowed["mxfp4_marlin"]["framework_version"] == (
        "0.5.10")
    # none borrowed where the engine's own tables hold a Marlin MXFP4 kernel, or from a framework not lending
    for own_kernels in ({**kernels, "mxfp4": "x_marlin_y"}, {"mxfp4_marlin": "own_marlin"}):
        assert _borrow_moe(df, {k: v for k, v in own_kernels.items()}, system, "vllm", {"sglang": "0.5.10"})[2] == {}
    assert _borrow_moe(df, {"bf16": "own_fused"}, system, "vllm", {"trtllm": "1.0.0"})[2] == {}
    assert _borrow_moe(df, {"bf16": "own_fused"}, system, "sglang", {"vllm": "0.14.0"})[2] == {}
