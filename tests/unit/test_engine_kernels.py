"""Kernel calibration through the engine's own CPU attention (calibrate/kernels/vllm_cpu.py): which
implementation prices each op, what meta.json says, and the probe against the torch stand-ins.
A fake `vllm` module (reference math, the engine's call signatures) tests the selection without
vLLM; where vLLM is importable the real kernel is checked against the float64 reference."""

import importlib.util
import math
import sys
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from calibrate.bench import TOLERANCE, ShardBench  # noqa: E402
from calibrate.kernels import vllm_cpu  # noqa: E402
from calibrate.arch import load_model  # noqa: E402

MODEL = load_model(str(Path(__file__).parents[2] / "calibrate" / "fidelity" / "model.yaml"))


def _fake_vllm(monkeypatch):
    """vllm._custom_ops with the engine's signatures, computing attention in float64."""
    calls = {"attention": 0}
    ops = types.ModuleType("vllm._custom_ops")

    def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, isa, *a, **k):
        bs = key_cache.shape[2]
        for i, slot in enumerate(slot_mapping.tolist()):
            key_cache[slot // bs, :, slot % bs] = key[i]
            value_cache[slot // bs, :, slot % bs] = value[i]

    def attention(query, key_cache, value_cache, output, query_start_loc, seq_lens, scale, causal, alibi_slopes,
                  sliding_window, block_table, softcap, scheduler_metadata, s_aux, *a, **k):
        calls["attention"] += 1
        hq, hkv = query.shape[1], key_cache.shape[1]
        for i, n in enumerate(seq_lens.tolist()):
            q = query[query_start_loc[i]:query_start_loc[i + 1]].double()
            keys = torch.cat([key_cache[b] for b in block_table[i].tolist()], dim=1)[:, :n].double()
            vals = torch.cat([value_cache[b] for b in block_table[i].tolist()], dim=1)[:, :n].double()
            keys, vals = keys.repeat_interleave(hq // hkv, 0), vals.repeat_interleave(hq // hkv, 0)
            scores = torch.einsum("qhd,hkd->hqk", q, keys) * scale
            m = q.shape[0]
            mask = torch.arange(n)[None, :] > (torch.arange(m)[:, None] + n - m)
            scores = scores.masked_fill(mask[None], float("-inf"))
            out = torch.einsum("hqk,hkd->qhd", scores.softmax(-1), vals)
            output[query_start_loc[i]:query_start_loc[i + 1]] = out.to(output.dtype)

    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        def cpu_linear(x, weight, bias):
            calls["linear"] += 1
            return torch.nn.functional.linear(x, weight, bias)
        layer.cpu_linear = cpu_linear

    calls["linear"] = 0
    utils = types.ModuleType("vllm.model_executor.layers.utils")
    utils.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm
    utils.check_cpu_sgl_kernel = lambda n, k, dtype: False
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_zen_cpu=lambda: False)
    ops._supports_onednn = True
    ops.cpu_attn_reshape_and_cache = reshape_and_cache
    ops.cpu_attn_get_scheduler_metadata = lambda **kw: torch.zeros(1)
    ops.cpu_attention_with_kv_cache = attention
    backend = types.ModuleType("vllm.v1.attention.backends.cpu_attn")
    backend._get_attn_isa = lambda dtype, block_size, head_size=None: "fake-isa"
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.0-fake"
    for name, module in (("vllm", vllm), ("vllm._custom_ops", ops), ("vllm.v1", types.ModuleType("vllm.v1")),
                         ("vllm.v1.attention", types.ModuleType("vllm.v1.attention")),
                         ("vllm.v1.attention.backends", types.ModuleType("vllm.v1.attention.backends")),
                         ("vllm.v1.attention.backends.cpu_attn", backend), ("vllm.platforms", platforms),
                         ("vllm.model_executor", types.ModuleType("vllm.model_executor")),
                         ("vllm.model_executor.layers", types.ModuleType("vllm.model_executor.layers")),
                         ("vllm.model_executor.layers.utils", utils)):
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_the_engine_kernel_prices_attention_where_it_is_importable(monkeypatch):
    calls = _fake_vllm(monkeypatch)
    bench = ShardBench(MODEL, 1, "bf16", "cpu", 32)
    impls = bench.op_impls()
    for op in ("decode_attention:paged", "prefill_attention"):
        assert impls[op].startswith("vLLM 0.0-fake CPU attention") and "isa fake-isa" in impls[op]
    assert "engine_kernels" not in impls and bench.paged_impl == impls["decode_attention:paged"]
    errors = bench.run_checks()  # the engine path, checked against the float64 reference
    assert errors["decode_attention:paged"] <= TOLERANCE["bf16"] and "prefill_attention (engine)" in errors
    assert calls["attention"] >= 2
    before = calls["attention"]
    # The timed calls go through the engine too.
    from calibrate.grids import make_grid
    points = {(p.family, tuple(p.key.values())): p for p in bench.points(make_grid("quick", MODEL.max_context))}
    points[("decode_attention", ("paged", 2, 64))].make()()
    points[("prefill_attention", (16, 256))].make()()
    assert calls["attention"] == before + 2
    # Linears: the engine's GEMM dispatch prepares each weight and prices every linear point.
    assert impls["linear"].startswith("vLLM's CPU GEMM dispatch") and "oneDNN onednn_mm" in impls["linear"]
    assert errors["linear:gate_up"] <= TOLERANCE["bf16"]
    before = calls["linear"]
    points[("linear", ("gate_up", 1024, 5632, 4))].make()()
    assert calls["linear"] == before + 1
    probe = bench.engine_probe(lambda call: _one_call_timing(call), shapes=((2, 64),), chunks=((16, 32),))
    assert [r["op"] for r in probe] == ["decode_attention:paged"] + ["linear:gate_up"] * 4 + ["linear:down"] * 4 + [
        "prefill_attention"]
    for r in probe:
        assert r["engine_s"] > 0 and r["stand_in_s"] > 0
        assert r["stand_in_over_engine"] == pytest.approx(r["stand_in_s"] / r["engine_s"])


def _one_call_timing(call):
    import time
    from calibrate.timing import Timing
    t = time.perf_counter()
    call()
    d = time.perf_counter() - t
    return Timing(d, d, d)


def test_without_the_engine_the_stand_ins_price_attention_and_meta_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    bench = ShardBench(MODEL, 1, "bf16", "cpu", 32)
    impls = bench.op_impls()
    assert impls["decode_attention:paged"].startswith("torch gather")
    assert impls["prefill_attention"].startswith("torch SDPA")
    assert impls["engine_kernels"].startswith("not used: vLLM not importable here")
    assert impls["linear"] == "torch F.linear (CPU BLAS)" and bench.engine_linear is None
    assert bench.engine_probe(_one_call_timing) == []
    engine, why = vllm_cpu.find_engine("cuda")
    assert engine is None and "CPU only" in why


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed in this venv")
def test_vllms_cpu_attention_matches_the_float64_reference():
    engine, why = vllm_cpu.find_engine("cpu")
    assert engine is not None, why
    bench = ShardBench(MODEL, 1, "bf16", "cpu", 32)
    errors = bench.run_checks()
    assert errors["decode_attention:paged"] <= TOLERANCE["bf16"]
    assert errors["prefill_attention (engine)"] <= TOLERANCE["bf16"]
    assert math.isfinite(errors["prefill_attention (engine)"])
    assert bench.engine_linear is not None and errors["linear:gate_up"] <= TOLERANCE["bf16"]
