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


# --- norms, rotary and SiLU-and-mul through vLLM's own layers (EngineElementwise) ---------------------

def _fake_vllm_layers(monkeypatch, rotary_sign: float = 1.0):
    """vLLM's layer modules as its Llama builds them (RMSNorm, get_rope, SiluAndMul), each dispatching
    to a `forward_cpu` that counts its calls; reference math (rotary_sign -1: a wrong rotary kernel)."""
    import contextlib

    calls = {"rmsnorm": 0, "rmsnorm+residual": 0, "rotary": 0, "silu_mul": 0, "config": 0, "priority": 0, "wrap": []}

    class RMSNorm(torch.nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps
            self._forward_method = self.forward_cpu

        def forward(self, x, residual=None):
            return self._forward_method(x, residual)

        def forward_cpu(self, x, residual=None):
            if residual is not None:
                calls["rmsnorm+residual"] += 1
                x = x + residual
                residual = x
            else:
                calls["rmsnorm"] += 1
            out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight.data
            return out if residual is None else (out, residual)

    class SiluAndMul(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self._forward_method = self.forward_cpu

        def forward(self, x):
            return self._forward_method(x)

        def forward_cpu(self, x):
            calls["silu_mul"] += 1
            d = x.shape[-1] // 2
            return torch.nn.functional.silu(x[..., :d]) * x[..., d:]

    class RotaryEmbedding(torch.nn.Module):
        def __init__(self, head_size, max_position, base):
            super().__init__()
            self.head_size, self.base = head_size, base
            self._forward_method = self.forward_cpu

        def forward(self, positions, query, key):
            return self._forward_method(positions, query, key)

        def forward_cpu(self, positions, query, key):  # in place, as vllm._custom_ops.rotary_embedding
            calls["rotary"] += 1
            d, half = self.head_size, self.head_size // 2
            inv = self.base ** (-torch.arange(half, dtype=torch.float64) * 2 / d)
            angle = rotary_sign * positions.double()[:, None] * inv
            cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
            for t in (query, key):
                v = t.view(t.shape[0], -1, d)
                x1, x2 = v[..., :half].double(), v[..., half:].double()
                v.copy_(torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(t.dtype))
            return query, key

    def get_rope(head_size, max_position, rope_parameters=None, is_neox_style=True):
        assert is_neox_style
        return RotaryEmbedding(head_size, max_position, (rope_parameters or {}).get("rope_theta", 10000))

    class EngineArgs:
        def __init__(self, model, **kwargs):
            assert kwargs["enforce_eager"] is True  # the recorder's setting
            self.kwargs = kwargs

        def create_engine_config(self):
            calls["config"] += 1
            priority = types.SimpleNamespace(set_default=lambda: calls.__setitem__("priority", calls["priority"] + 1))
            return types.SimpleNamespace(
                kernel_config=types.SimpleNamespace(ir_op_priority=priority),
                compilation_config=types.SimpleNamespace(ir_enable_torch_wrap=False),
                model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(rope_parameters={"rope_theta": 10000.0})))

    native = types.SimpleNamespace(dispatch=lambda *args: types.SimpleNamespace(provider="native"))
    ir = types.ModuleType("vllm.ir")
    ir.ops = types.SimpleNamespace(rms_norm=native, fused_add_rms_norm=native)
    ir.set_default_torch_wrap = lambda enable: calls["wrap"].append(enable)
    modules = {
        "vllm.engine": types.ModuleType("vllm.engine"), "vllm.engine.arg_utils": types.ModuleType("vllm.engine.arg_utils"),
        "vllm.config": types.ModuleType("vllm.config"), "vllm.ir": ir,
        "vllm.model_executor.layers.layernorm": types.ModuleType("vllm.model_executor.layers.layernorm"),
        "vllm.model_executor.layers.activation": types.ModuleType("vllm.model_executor.layers.activation"),
        "vllm.model_executor.layers.rotary_embedding": types.ModuleType("vllm.model_executor.layers.rotary_embedding"),
    }
    modules["vllm.engine.arg_utils"].EngineArgs = EngineArgs
    modules["vllm.config"].set_current_vllm_config = lambda config: contextlib.nullcontext()
    modules["vllm.model_executor.layers.layernorm"].RMSNorm = RMSNorm
    modules["vllm.model_executor.layers.activation"].SiluAndMul = SiluAndMul
    modules["vllm.model_executor.layers.rotary_embedding"].get_rope = get_rope
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_the_engine_layers_price_norms_rotary_and_silu_where_vllm_has_them(monkeypatch):
    _fake_vllm(monkeypatch)
    calls = _fake_vllm_layers(monkeypatch)
    bench = ShardBench(MODEL, 1, "fp32", "cpu", 32)
    assert bench.engine_elem is not None
    # Built under the recorder's config, with the worker's IR priority and torch-wrap state applied.
    assert calls["config"] == 1 and calls["priority"] == 1 and calls["wrap"] == [False]
    impls = bench.op_impls()
    assert impls["rmsnorm"].startswith("vLLM 0.0-fake RMSNorm(x, residual)")
    assert "RMSNorm.forward_cpu" in impls["rmsnorm"] and "fused_add_rms_norm [native]" in impls["rmsnorm"]
    assert "RotaryEmbedding.forward_cpu -> the C++ vllm._custom_ops.rotary_embedding" in impls["rotary"]
    assert "SiluAndMul.forward_cpu" in impls["silu_mul"]
    assert impls["residual_add"].startswith("none left") and "engine_elementwise" not in impls
    # The residual add is inside the engine's norm: the profile counts none per layer.
    assert bench.elementwise_per_layer() == {"rmsnorm": 2, "rotary": 1, "silu_mul": 1, "residual_add": 0}

    errors = bench.run_checks()  # the engine's layers, checked against the float64 references first
    for name in ("rmsnorm (engine, with residual)", "rmsnorm (engine, no residual)", "rotary (engine)",
                 "silu_mul (engine)"):
        assert errors[f"elementwise:{name}"] <= TOLERANCE["fp32"]
    assert calls["rmsnorm+residual"] >= 1 and calls["rmsnorm"] >= 1 and calls["rotary"] >= 1

    # The timed points go through the layers' dispatched forward.
    from calibrate.grids import make_grid
    points = {(p.family, tuple(p.key.values())): p for p in bench.points(make_grid("quick", MODEL.max_context))}
    before = dict(calls)
    for op in ("rmsnorm", "rotary", "silu_mul"):
        points[("elementwise", (op, 16))].make()()
    assert calls["rmsnorm+residual"] == before["rmsnorm+residual"] + 1  # with the residual, as llama.py calls it
    assert calls["rotary"] == before["rotary"] + 1 and calls["silu_mul"] == before["silu_mul"] + 1

    probe = bench.engine_probe(_one_call_timing, shapes=((2, 64),), chunks=((16, 32),), elementwise_tokens=(1, 16))
    elementwise = [(r["op"], r["shape"]) for r in probe if r["op"].startswith("elementwise:")]
    assert elementwise == [(op, f"{n} tokens") for n in (1, 16) for op in (
        "elementwise:rmsnorm+residual_add", "elementwise:rmsnorm (no residual)", "elementwise:rotary",
        "elementwise:silu_mul")]
    assert all(r["engine_s"] > 0 and r["stand_in_s"] > 0 for r in probe)


def test_a_wrong_engine_rotary_stops_the_run_before_timing(monkeypatch):
    from calibrate.bench import KernelCheckError

    _fake_vllm(monkeypatch)
    _fake_vllm_layers(monkeypatch, rotary_sign=-1.0)  # rotates the wrong way
    bench = ShardBench(MODEL, 1, "fp32", "cpu", 32)
    with pytest.raises(KernelCheckError, match=r"elementwise:rotary \(engine\) differs"):
        bench.run_checks()


def test_without_the_engine_layers_the_stand_ins_price_the_elementwise_ops(monkeypatch):
    _fake_vllm(monkeypatch)  # attention and GEMMs, but no layer modules
    for name in ("vllm.engine", "vllm.engine.arg_utils"):  # also where a real vLLM was imported before
        monkeypatch.setitem(sys.modules, name, None)
    bench = ShardBench(MODEL, 1, "fp32", "cpu", 32)
    assert bench.engine_elem is None and bench.engine_attn is not None
    impls = bench.op_impls()
    assert impls["rmsnorm"] == "torch eager rms_norm (float32 math)" and impls["residual_add"] == "torch eager x + residual"
    assert impls["engine_elementwise"].startswith("not used: vLLM's layers not importable here")
    assert bench.elementwise_per_layer()["residual_add"] == 2
    assert not [r for r in bench.engine_probe(_one_call_timing, shapes=((2, 64),), chunks=((16, 32),))
                if r["op"].startswith("elementwise:")]


def test_the_cost_model_sums_elementwise_rows_by_the_profiles_counts(tmp_path):
    import json
    import shutil

    from sim.core.step_plan import StepPlan
    from sim.cost.calibrated import CalibratedCostModel

    fixture = Path(__file__).parents[1] / "fixtures" / "fidelity" / "profile-kernels"
    fused = tmp_path / "fused"
    shutil.copytree(fixture, fused)
    meta = json.loads((fused / "meta.json").read_text())
    meta["elementwise_per_layer"] = {"rmsnorm": 2, "rotary": 1, "silu_mul": 1, "residual_add": 0}
    (fused / "meta.json").write_text(json.dumps(meta))
    plan = StepPlan(num_decode_seqs=4, decode_context_tokens=4 * 300, num_sampled_seqs=4)
    two_adds = CalibratedCostModel(fixture, MODEL, block_size=32)
    no_adds = CalibratedCostModel(fused, MODEL, block_size=32)
    add_s = dict((f.name, f) for _, f in two_adds._elementwise)["elementwise:residual_add"](4)
    assert two_adds.step_time(plan) - no_adds.step_time(plan) == pytest.approx(2 * MODEL.num_layers * add_s)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed in this venv")
def test_vllms_cpu_norm_rotary_and_silu_match_the_float64_reference():
    from calibrate.kernels.vllm_cpu import EngineElementwise

    layers, why = EngineElementwise.find(MODEL, torch.float32)
    assert layers is not None, why
    bench = ShardBench(MODEL, 1, "fp32", "cpu", 32)
    errors = bench.run_checks()
    for name in ("rmsnorm (engine, with residual)", "rmsnorm (engine, no residual)", "rotary (engine)",
                 "silu_mul (engine)"):
        assert errors[f"elementwise:{name}"] <= TOLERANCE["fp32"]
    impls = bench.op_impls()
    assert "vllm._custom_ops.rotary_embedding" in impls["rotary"]  # vLLM 0.32's CPU rotary: the C++ kernel
    assert bench.elementwise_per_layer()["residual_add"] == 0
