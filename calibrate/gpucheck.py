"""`python -m calibrate selftest` and `python -m calibrate paged-bench`: what to run first on a GPU.

selftest: every Triton kernel (fused RMSNorm with and without the residual add, rotary of q and k,
SiLU × up, the flash-decoding paged attention on its direct and split paths) at the model's real shapes
against the float64 references, one fused decoder layer against the unfused one, and one whole fused step
captured in a CUDA graph and replayed against the same step run eagerly. Prints each check's maximum
absolute and relative error. On a CPU the Triton kernels run under TRITON_INTERPRET=1 at smaller contexts
(slow but the same code), and no graph is captured.

paged-bench: the paged decode kernel against dense SDPA over the same contexts, on the decode grid,
both timed by the CUDA-graph timer; prints the ratio table.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from sim.errors import ServeSimError


class SelfTestError(ServeSimError):
    """A kernel disagrees with its float64 reference on this device."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    shape: str
    max_abs_error: float
    relative_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.relative_error <= self.tolerance  # NaN fails


def _prepare_triton(device: str) -> None:
    if device == "cpu" and "triton" not in __import__("sys").modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: triton.jit reads it then


def selftest(spec, tp: int, dtype: str, device: str, block_size: int = 16) -> list[CheckResult]:
    _prepare_triton(device)
    import torch

    from sim.cost.calibrated import shard_shapes

    from .kernels import fused
    from .kernels import reference as ref
    from .kernels.paged_attention import paged_attention_decode
    from .steps import TORCH_DTYPES, ShardModel, StepShape

    tdtype = TORCH_DTYPES[dtype]
    tol = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 3e-2}[dtype]
    s = shard_shapes(spec, tp)
    hq, hkv, d, hidden, ffn = s["num_heads"], s["num_kv_heads"], s["head_dim"], s["hidden_size"], s["ffn_size"]
    gen = torch.Generator(device=device).manual_seed(0)
    randn = lambda *shape: torch.randn(*shape, generator=gen, device=device, dtype=tdtype)  # noqa: E731
    results: list[CheckResult] = []

    def record(name, shape, out, expected, tolerance=tol):
        out_d, exp_d = out.double().cpu(), expected.double().cpu()
        results.append(CheckResult(name, shape, float((out_d - exp_d).abs().max()), ref.relative_error(out_d, exp_d),
                                   tolerance))

    rows = (1, 7, 256) if device == "cuda" else (1, 7)
    for n in rows:
        x, w = randn(n, hidden), randn(hidden)
        record("triton rms_norm", f"{n}x{hidden}", fused.rms_norm(x, w), ref.rms_norm(x, w))
        x, r = randn(n, hidden), randn(n, hidden)
        exp_out, exp_res = ref.fused_add_rms_norm(x, r, w)
        out = fused.fused_add_rms_norm(x, r, w)
        record("triton fused_add_rms_norm (output)", f"{n}x{hidden}", out, exp_out)
        record("triton fused_add_rms_norm (residual)", f"{n}x{hidden}", r, exp_res)
        qkv = randn(n, (hq + 2 * hkv) * d)
        q, k = qkv[:, :hq * d].view(n, hq, d), qkv[:, hq * d:(hq + hkv) * d].view(n, hkv, d)
        positions = torch.randint(0, spec.max_context, (n,), generator=gen, device=device)
        exp_q, exp_k = ref.rotary(q, positions), ref.rotary(k, positions)
        fused.rotary_inplace(q, k, positions, fused.rotary_cos_sin_cache(spec.max_context, d, device))
        record("triton rotary_inplace (q)", f"{n}x{hq}x{d}", q, exp_q)
        record("triton rotary_inplace (k)", f"{n}x{hkv}x{d}", k, exp_k)
        if s["gated_mlp"]:
            x = randn(n, 2 * ffn)
            record("triton silu_and_mul", f"{n}x{2 * ffn}", fused.silu_and_mul(x), ref.silu_and_mul(x))

    # Paged decode: ragged contexts (direct path when the batch fills the GPU, split path otherwise).
    cases = ([(1, [2048]), (4, [1, 17, 1000, 8192]), (64, [512] * 63 + [33]), (256, [300] * 256)] if device == "cuda"
             else [(1, [70]), (3, [1, 17, 100])])
    for batch, lens in cases:
        for bs in (block_size, 1) if batch <= 4 else (block_size,):
            per_seq = max(math.ceil(n / bs) for n in lens)
            num_blocks = batch * per_seq
            k_cache, v_cache = randn(num_blocks, bs, hkv, d), randn(num_blocks, bs, hkv, d)
            table = torch.randperm(num_blocks, generator=gen, device=device).view(batch, per_seq).to(torch.int32)
            lens_t = torch.tensor(lens, dtype=torch.int32, device=device)
            q = randn(batch, hq, d)
            out = paged_attention_decode(q, k_cache, v_cache, table, lens_t)
            record("triton paged attention", f"B{batch} ctx {min(lens)}..{max(lens)} block {bs}", out,
                   ref.paged_decode(q, k_cache, v_cache, table, lens_t))

    if device == "cuda":
        # fp8 GEMM inputs: the Triton quantizer against its torch fallback (both round to nearest even), and an fp8
        # layer GEMM (torch._scaled_mm) against float64 on the same fp8 operands. (Triton's CPU interpreter does not
        # round to fp8 as the GPU does: neither is checked there.)
        for n in rows:
            x, inv = randn(n, hidden) * 4, torch.tensor(7.0, device=device)
            record("triton static_fp8_quant", f"{n}x{hidden}", fused.static_fp8_quant(x, inv).float(),
                   fused.static_fp8_quant_torch(x, inv).float(), 1e-6)
        model = ShardModel(spec, tp, dtype=dtype, device=device, engine="fused", num_layers=1, seed=3, weights="fp8")
        w = model.layers[0]
        x = randn(rows[-1], hidden)
        xq = fused.static_fp8_quant(x, model.inv_input_scale)
        expected = (xq.double() * model.input_scale.double()) @ (w.qkv.double() * w.scales["qkv"].double()).T
        if w.qkv_bias is not None:
            expected = expected + w.qkv_bias.double()
        record("fp8 GEMM (torch._scaled_mm) vs float64", f"{rows[-1]}x{hidden} @ {tuple(w.qkv.shape)}",
               model.linear(x, w.qkv, w.qkv_bias, w.scales["qkv"]), expected)

    # One fused layer against the unfused layer, same weights and inputs.
    shape = StepShape("mixed", 48, 80, 4, 200) if device == "cuda" else StepShape("mixed", 5, 7, 2, 20)
    layer_out = {}
    h, r = randn(shape.num_tokens, hidden), randn(shape.num_tokens, hidden)
    for engine in ("unfused", "fused"):
        model = ShardModel(spec, tp, dtype=dtype, device=device, engine=engine, num_layers=2, seed=1,
                           kernels="triton")
        inputs = model.make_inputs(shape)
        with torch.no_grad():
            out_h, out_r = model.layer(1, h.clone(), r.clone(), inputs)
        layer_out[engine] = out_h.double() + out_r.double()
    record("fused layer vs unfused layer", f"{shape.key()}", layer_out["fused"], layer_out["unfused"])

    if device == "cuda":
        # The whole fused step in one CUDA graph: replayed, it gives the eager step's hidden states.
        model = ShardModel(spec, tp, dtype=dtype, device=device, engine="fused", num_layers=2, seed=2)
        inputs = model.make_inputs(StepShape("mixed", 64, 0, 8, 300))
        final = {}
        capture = lambda: model.step(inputs)  # noqa: E731
        with torch.no_grad():
            eager = capture().clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                capture()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                final["tokens"] = capture()
            graph.replay()
            torch.cuda.synchronize()
        same = float((final["tokens"] != eager).float().mean())
        results.append(CheckResult("CUDA-graph replay of a fused step (share of sampled tokens that differ)",
                                   "2 layers, 64-token chunk + 8 decodes", same, same, 0.0))
    return results


def print_selftest(results: list[CheckResult], console) -> None:
    from rich.table import Table
    table = Table(title="selftest: Triton kernels and fused ops against float64 references")
    for col in ("check", "shape", "max abs error", "relative error", "allowed", "ok"):
        table.add_column(col, justify="left" if col in ("check", "shape") else "right")
    for r in results:
        table.add_row(r.name, r.shape, f"{r.max_abs_error:.3g}", f"{r.relative_error:.3g}", f"{r.tolerance:g}",
                      "ok" if r.ok else "FAIL")
    console.print(table)


# --- paged decode against dense SDPA ------------------------------------------------------------------

DECODE_BATCHES = (1, 4, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (512, 2048, 8192)


def paged_bench(spec, tp: int, dtype: str, device: str, block_size: int = 16, batches=DECODE_BATCHES,
                contexts=DECODE_CONTEXTS, calls: int = 10) -> list[dict]:
    """Per (batch, context): dense SDPA and paged decode seconds per call (CUDA-graph timer on a GPU)."""
    _prepare_triton(device)
    import torch
    import torch.nn.functional as F

    from sim.cost.calibrated import shard_shapes

    from .kernels import torch_ops as ops
    from .steps import TORCH_DTYPES, device_memory_bytes
    from .timing import time_cpu, time_cuda_graph

    tdtype = TORCH_DTYPES[dtype]
    s = shard_shapes(spec, tp)
    hq, hkv, d = s["num_heads"], s["num_kv_heads"], s["head_dim"]
    gen = torch.Generator(device=device).manual_seed(0)
    randn = lambda *shape: torch.randn(*shape, generator=gen, device=device, dtype=tdtype)  # noqa: E731
    budget = 0.3 * device_memory_bytes(device)
    rows = []
    for c in contexts:
        for b in batches:
            kv_bytes = 2 * 2 * b * c * hkv * d * tdtype.itemsize  # dense and paged copies
            if kv_bytes > budget:
                continue
            q = randn(b, hq, d)
            k, v = randn(b, hkv, c, d), randn(b, hkv, c, d)
            per_seq = math.ceil(c / block_size)
            num_blocks = b * per_seq
            k_cache, v_cache = randn(num_blocks, block_size, hkv, d), randn(num_blocks, block_size, hkv, d)
            table = torch.randperm(num_blocks, generator=gen, device=device).view(b, per_seq).to(torch.int32)
            lens = torch.full((b,), c, dtype=torch.int32, device=device)
            dense = lambda: F.scaled_dot_product_attention(q[:, :, None, :], k, v, enable_gqa=True)  # noqa: E731
            if device == "cuda":
                from .kernels.paged_attention import paged_attention_decode
                paged = lambda: paged_attention_decode(q, k_cache, v_cache, table, lens)  # noqa: E731
                t_dense = time_cuda_graph(dense, calls=calls, budget_s=0.05)
                t_paged = time_cuda_graph(paged, calls=calls, budget_s=0.05)
            else:
                buffers = (torch.empty_like(k_cache), torch.empty_like(v_cache))
                paged = lambda: ops.paged_decode_gather(q, k_cache, v_cache, table, lens, buffers=buffers)  # noqa: E731
                t_dense, t_paged = time_cpu(dense, 0.02), time_cpu(paged, 0.02)
            rows.append({"decode_batch": b, "decode_context": c, "dense_s": t_dense.median_s,
                         "paged_s": t_paged.median_s, "ratio": t_paged.median_s / t_dense.median_s})
            del q, k, v, k_cache, v_cache
            if device == "cuda":
                torch.cuda.empty_cache()
    return rows
