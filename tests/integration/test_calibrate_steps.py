"""Whole-step measurement (calibrate/steps.py, `python -m calibrate steps`) on the CPU with tiny models:
a decoder layer against a float64 reference layer (dense and paged KV, prefill with earlier context plus
decodes in one step), the fused and compiled engines against the unfused one (the fused engine's Triton
kernels through TRITON_INTERPRET), the profile folder's columns and meta, resuming, and bad options.

TRITON_INTERPRET must be set before triton is imported (triton.jit reads it then).
"""

from __future__ import annotations

import json
import math
import os

os.environ["TRITON_INTERPRET"] = "1"

from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import yaml  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from calibrate import steps as steps_mod  # noqa: E402
from calibrate.kernels import reference as ref  # noqa: E402
from calibrate.steps import STEP_COLUMNS, ShardModel, StepShape, step_grid  # noqa: E402
from sim.model.specs import ModelSpec  # noqa: E402
from test_calibrated import one_error_line, run_cli  # noqa: E402

TINY = dict(name="tiny-steps", num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2, head_dim=16,
            ffn_size=96, vocab_size=256, max_context=2048, attention="gqa")
MIXED = StepShape("mixed", prefill_tokens=5, prefill_context=7, decode_batch=3, decode_context=11)
META_KEYS = {"format_version", "profile_kind", "complete", "model", "tensor_parallel", "shard", "device", "device_name",
             "driver", "cuda", "torch_version", "triton_version", "dtype", "threads", "date", "engine",
             "engine_description", "op_impls", "method", "source", "includes_communication", "kv_layout"}


def _spec(**changes) -> ModelSpec:
    return ModelSpec.model_validate({**TINY, **changes})


def _model(engine="unfused", kv_layout="dense", dtype="fp32", spec=None, **kw) -> ShardModel:
    return ShardModel(spec or _spec(), 1, dtype=dtype, device="cpu", engine=engine, kv_layout=kv_layout,
                      block_size=4, seed=3, **kw)


def _layer_input(model: ShardModel, tokens: int):
    gen = torch.Generator().manual_seed(11)
    h = torch.randn(tokens, model.hidden, generator=gen).to(model.dtype)
    residual = torch.randn(tokens, model.hidden, generator=gen).to(model.dtype)
    return h, residual


def _snapshot(inputs):
    clone = lambda pair: None if pair is None else (pair[0].clone(), pair[1].clone())  # noqa: E731
    return [clone(p) for p in inputs.prefill_kv], [clone(p) for p in inputs.decode_kv]


def _reference_layer(model: ShardModel, i: int, h, residual, inputs, prefill_kv, decode_kv):
    """The layer in float64 from the references, with the caches as they were before the step."""
    w, s = model.layers[i], inputs.shape
    hq, hkv, d = model.hq, model.hkv, model.d
    P, X, B, C = s.prefill_tokens, s.prefill_context, s.decode_batch, s.decode_context
    x_in = h.double() + residual.double()
    x = ref.rms_norm(x_in, w.input_norm)
    qkv = x @ w.qkv.double().T
    T = qkv.shape[0]
    q = ref.rotary(qkv[:, :hq * d].view(T, hq, d), inputs.positions)
    k = ref.rotary(qkv[:, hq * d:(hq + hkv) * d].view(T, hkv, d), inputs.positions)
    v = qkv[:, (hq + hkv) * d:].view(T, hkv, d)
    rows = []
    if P:
        keys = torch.cat((prefill_kv[i][0][0, :, :X].double(), k[:P].transpose(0, 1)), dim=1)
        values = torch.cat((prefill_kv[i][1][0, :, :X].double(), v[:P].transpose(0, 1)), dim=1)
        mask = torch.arange(X + P)[None, :] <= torch.arange(P)[:, None] + X  # bottom-right causal
        rows.append(ref.attention(q[:P].transpose(0, 1), keys, values, mask).transpose(0, 1).reshape(P, hq * d))
    for b in range(B):
        if model.kv_layout == "dense":
            old_k, old_v = decode_kv[i][0][b, :, :C - 1], decode_kv[i][1][b, :, :C - 1]
        else:  # walk the block table: the sequence's first C - 1 slots
            blocks = inputs.block_table[b, :math.ceil(C / model.block_size)].tolist()
            old_k = torch.cat([decode_kv[i][0][blk] for blk in blocks])[:C - 1].transpose(0, 1)
            old_v = torch.cat([decode_kv[i][1][blk] for blk in blocks])[:C - 1].transpose(0, 1)
        keys = torch.cat((old_k.double(), k[P + b][:, None]), dim=1)
        values = torch.cat((old_v.double(), v[P + b][:, None]), dim=1)
        rows.append(ref.attention(q[P + b][:, None, :], keys, values).reshape(1, hq * d))
    attn = torch.cat(rows)
    after_attn = x_in + attn @ w.attn_out.double().T
    up = ref.rms_norm(after_attn, w.post_norm) @ w.up.double().T
    act = ref.silu_and_mul(up) if model.gated else up.clamp_min(0)
    return after_attn + act @ w.down.double().T


@pytest.mark.parametrize("kv_layout", ["dense", "paged"])
@pytest.mark.parametrize("gated", [True, False])
def test_a_layer_matches_the_float64_reference_layer(kv_layout, gated):
    model = _model(kv_layout=kv_layout, spec=_spec(gated_mlp=gated))
    inputs = model.make_inputs(MIXED)
    prefill_kv, decode_kv = _snapshot(inputs)
    h, residual = _layer_input(model, MIXED.num_tokens)
    expected = _reference_layer(model, 1, h, residual, inputs, prefill_kv, decode_kv)
    with torch.no_grad():
        out_h, out_residual = model.layer(1, h, residual, inputs)
    assert ref.relative_error(out_h + out_residual, expected) < 1e-5
    # The new tokens' K/V landed in the caches (the layer wrote them in place).
    if kv_layout == "dense":
        assert not torch.equal(inputs.decode_kv[1][0][:, :, -1], decode_kv[1][0][:, :, -1])
        assert torch.equal(inputs.decode_kv[1][0][:, :, :-1], decode_kv[1][0][:, :, :-1])
    assert not torch.equal(inputs.prefill_kv[1][0][0, :, MIXED.prefill_context:],
                           prefill_kv[1][0][0, :, MIXED.prefill_context:])


@pytest.mark.parametrize("dtype, tolerance", [("fp32", 1e-5), ("bf16", 3e-2)])
def test_the_fused_engine_with_triton_kernels_matches_the_unfused_layer(dtype, tolerance):
    """Same seed, same weights and inputs: the Triton kernels (interpreted) give the unfused layer's output."""
    outputs = {}
    for engine, kernels in (("unfused", None), ("fused", "triton")):
        model = _model(engine=engine, dtype=dtype, kernels=kernels)
        inputs = model.make_inputs(MIXED)
        h, residual = _layer_input(model, MIXED.num_tokens)
        with torch.no_grad():
            out_h, out_residual = model.layer(1, h, residual, inputs)
        outputs[engine] = out_h.double() + out_residual.double()
    assert ref.relative_error(outputs["fused"], outputs["unfused"]) < tolerance


def test_the_fused_engine_first_layer_and_whole_step_match_the_unfused_engine():
    """Layer 0 (no residual yet) and the final fused add-norm: the whole step picks the same tokens."""
    logits = {}
    for engine in ("unfused", "fused"):
        model = _model(engine=engine)  # torch fallbacks of the fused ops on a CPU
        inputs = model.make_inputs(MIXED)
        with torch.no_grad():
            h, residual = F_embedding(model, inputs), None
            for i in range(model.num_layers):
                h, residual = model.layer(i, h, residual, inputs)
            logits[engine] = (h + residual).double()
            tokens = model.step(model.make_inputs(MIXED))
        assert tokens.shape == (MIXED.sampled_rows,) and int(tokens.max()) < model.vocab_shard
    assert ref.relative_error(logits["fused"], logits["unfused"]) < 1e-5


def F_embedding(model, inputs):
    return torch.nn.functional.embedding(inputs.token_ids, model.embedding)


def test_the_compiled_engine_matches_the_unfused_layer():
    shape = StepShape("decode", 0, 0, 2, 9)
    outputs = {}
    for engine in ("unfused", "compiled"):
        model = _model(engine=engine)
        inputs = model.make_inputs(shape)
        h, residual = _layer_input(model, shape.num_tokens)
        with torch.no_grad():
            out_h, out_residual = model.layer(1, h, residual, inputs)
        outputs[engine] = out_h.double() + out_residual.double()
    assert ref.relative_error(outputs["compiled"], outputs["unfused"]) < 1e-5


def test_layers_may_share_weights_but_each_runs_as_its_own_call():
    shared, distinct = _model(distinct_weights=False), _model(distinct_weights=True)
    assert shared.layers[0] is shared.layers[1]
    assert distinct.layers[0] is not distinct.layers[1]
    assert shared.weight_bytes() < distinct.weight_bytes()


def test_grids_stay_within_the_context_and_full_matches_the_brief():
    full = step_grid("full", 131072)
    kinds = {s.kind for s in full}
    assert kinds == {"prefill", "decode", "mixed"}
    assert StepShape("decode", 0, 0, 256, 8192) in full and StepShape("prefill", 512, 8192, 0, 0) in full
    assert all(s.prefill_context + s.prefill_tokens <= 4096 and s.decode_context <= 4096 for s in step_grid("full", 4096))


def test_points_whose_kv_does_not_fit_are_skipped_with_a_reason(monkeypatch):
    monkeypatch.setattr(steps_mod, "KV_MEMORY_SHARE", 1e-12)
    seen = []
    steps_mod.measure_steps(_model(), step_grid("quick", 2048)[:2], reps=1, on_point=lambda *a: seen.append(a))
    assert len(seen) == 2 and all(timing is None and "KV caches need" in why for _, timing, why in seen)


# --- the command line --------------------------------------------------------------------------------

def _arch_file(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "arch.yaml"
    path.write_text(yaml.safe_dump({**TINY, **changes}))
    return path


@pytest.mark.parametrize("engine, kv", [("unfused", "dense"), ("fused", "dense"), ("fused", "paged")])
def test_steps_cli_writes_a_complete_profile(tmp_path, engine, kv):
    out = tmp_path / "prof"
    result = run_cli("calibrate", "steps", "--model", str(_arch_file(tmp_path)), "--engine", engine, "--kv", kv,
                     "--dtype", "fp32", "--reps", "3", "--layers", "1", "--out", str(out), "-q", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(out / "steps.csv")
    assert tuple(table.columns) == STEP_COLUMNS
    assert len(table) == len(step_grid("quick", TINY["max_context"]))
    assert set(table["kind"]) == {"prefill", "decode", "mixed"}
    assert (table["step_s"] > 0).all() and (table["p20_s"] <= table["p80_s"]).all()
    meta = json.loads((out / "meta.json").read_text())
    assert META_KEYS <= set(meta)
    assert meta["profile_kind"] == "steps" and meta["complete"] is True and meta["format_version"] == 1
    assert meta["engine"] == engine and meta["kv_layout"] == kv and meta["device"] == "cpu"
    assert meta["includes_communication"] is False and meta["layers"] == 1
    assert meta["model"]["name"] == "tiny-steps" and meta["shard"]["num_heads"] == 4
    assert "SDPA" in meta["op_impls"]["prefill_attention"]
    if engine == "fused":
        assert "fused" in meta["op_impls"]["residual_add"]


def test_an_interrupted_steps_run_resumes_where_it_stopped(tmp_path):
    out, arch = tmp_path / "prof", _arch_file(tmp_path)
    args = ["calibrate", "steps", "--model", str(arch), "--dtype", "fp32", "--reps", "2", "--out", str(out), "-q"]
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    full = pd.read_csv(out / "steps.csv")
    full.head(3).to_csv(out / "steps.csv", index=False, float_format="%.6e")
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps({**meta, "complete": False}))
    assert run_cli(*args, cwd=tmp_path).returncode == 0
    resumed = pd.read_csv(out / "steps.csv")
    assert len(resumed) == len(full)
    pd.testing.assert_frame_equal(resumed.head(3), full.head(3))  # kept, not measured again
    assert json.loads((out / "meta.json").read_text())["complete"] is True
    # Into the same folder with another engine: refused, one line.
    line = one_error_line(run_cli(*args, "--engine", "unfused", cwd=tmp_path))
    assert "--out:" in line and "engine" in line


def test_an_fp8_gemm_is_the_product_of_its_fp8_operands():
    """W8A8: e4m3 weights with a per-tensor scale; the input quantized with the static scale, saturated at ±448."""
    model = _model(dtype="bf16", weights="fp8", spec=_spec(attention_bias=True))
    w = model.layers[0]
    assert w.qkv.dtype == torch.float8_e4m3fn and w.down.dtype == torch.float8_e4m3fn
    assert w.input_norm.dtype == torch.bfloat16 and model.lm_head.dtype == torch.bfloat16  # kept in 16 bits
    assert float(w.qkv.float().abs().max()) == 448.0  # the scale is the weight's amax / 448
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(6, model.hidden, generator=gen) * 4).to(torch.bfloat16)
    x[0, 0] = 1000.0  # beyond the static range: saturates, never inf or NaN
    scale = steps_mod.FP8_INPUT_SCALE
    xq = (x.double() / scale).clamp(-448, 448).to(torch.float8_e4m3fn).double() * scale
    expected = xq @ (w.qkv.double() * w.scales["qkv"].double()).T + w.qkv_bias.double()
    for engine in ("unfused", "fused"):  # three torch ops, or the fused quantizer (its torch fallback on a CPU)
        model.engine = engine
        out = model.linear(x, w.qkv, w.qkv_bias, w.scales["qkv"])
        assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
        assert ref.relative_error(out.double(), expected) < 1e-2


@pytest.mark.parametrize("engine", ["unfused", "fused"])
def test_an_fp8_layer_stays_within_fp8_rounding_of_the_bf16_layer(engine):
    """Same seed, same weights before quantization: the fp8 layer differs from the bf16 one by fp8's rounding
    (3 mantissa bits), not more; and the whole fp8 step runs."""
    outputs = {}
    for weights in (None, "fp8"):
        model = _model(engine=engine, dtype="bf16", weights=weights)
        inputs = model.make_inputs(MIXED)
        h, residual = _layer_input(model, MIXED.num_tokens)
        with torch.no_grad():
            out_h, out_residual = model.layer(1, h, residual, inputs)
            assert model.step(inputs).shape == (MIXED.sampled_rows,)
        outputs[weights] = out_h.double() + out_residual.double()
    error = ref.relative_error(outputs["fp8"], outputs[None])
    assert 1e-3 < error < 0.1  # fp8 did change the GEMMs, by about its rounding


def test_steps_cli_writes_an_fp8_profile_that_says_so(tmp_path):
    out = tmp_path / "prof"
    result = run_cli("calibrate", "steps", "--model", str(_arch_file(tmp_path)), "--engine", "fused", "--weights",
                     "fp8", "--reps", "2", "--layers", "1", "--out", str(out), "-q", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["dtype"] == "bf16" and meta["weight_dtype"] == "fp8" and meta["fp8_compute"] is True
    assert "static" in meta["activation_scales"] and "_scaled_mm" in meta["op_impls"]["linear"]
    assert "_scaled_mm" not in meta["op_impls"]["lm_head"]
    assert len(pd.read_csv(out / "steps.csv")) == len(step_grid("quick", TINY["max_context"]))
    # The same folder in 16 bits: refused (a rerun resumes only the same measurement), one line.
    line = one_error_line(run_cli("calibrate", "steps", "--model", str(_arch_file(tmp_path)), "--engine", "fused",
                                  "--reps", "2", "--layers", "1", "--out", str(out), "-q", cwd=tmp_path))
    assert "--out:" in line and "weight_dtype" in line


STEPS_BAD_ARGS = [
    ("bad-engine", ["--engine", "turbo"], ["--engine:", "'turbo'", "unfused, fused, compiled"]),
    ("bad-kv", ["--kv", "sparse"], ["--kv:", "'sparse'", "dense, paged"]),
    ("bad-grid", ["--grid", "huge"], ["--grid:", "'huge'", "quick, full"]),
    ("negative-layers", ["--layers", "-1"], ["--layers:", "-1", ">= 1"]),
    ("zero-reps", ["--reps", "0"], ["--reps:", "0", ">= 1"]),
    ("bad-tp", ["--tp", "3"], ["--tp:", "3"]),
    ("moe", ["--model", "mixtral-8x7b"], ["--model:", "mixtral-8x7b", "mixture-of-experts", "dense"]),
    ("cuda-without-cuda", ["--device", "cuda"], ["--device:", "'cuda'", "allowed here: cpu"]),
    ("bad-weights", ["--weights", "int4"], ["--weights:", "'int4'", "fp8"]),
    ("fp8-compiled", ["--weights", "fp8", "--engine", "compiled"], ["--weights:", "'fp8'", "compiled",
                                                                    "unfused or fused"]),
]


@pytest.mark.parametrize("args, needles", [c[1:] for c in STEPS_BAD_ARGS], ids=[c[0] for c in STEPS_BAD_ARGS])
def test_steps_bad_options_give_one_line(tmp_path, args, needles):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    base = {"--model": str(_arch_file(tmp_path)), "--out": str(tmp_path / "p")}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    line = one_error_line(run_cli("calibrate", "steps", *[x for kv in base.items() for x in kv], cwd=tmp_path))
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "p" / "steps.csv").exists()
