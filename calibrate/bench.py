"""The benchmarks: every op of one layer of a model's per-GPU shard, checked then timed over a grid.

Inputs are random normal (never zeros), made once per point from a seeded generator. Each kernel is
first checked against a float64 reference at the model's real head/feature sizes; a kernel that
disagrees stops the run before anything is timed.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from sim.cost.calibrated import shard_shapes
from sim.errors import ServeSimError
from sim.model.specs import ModelSpec

from .grids import Grid
from .kernels import reference as ref
from .kernels import torch_ops as ops

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Largest relative error ‖out − ref‖ / ‖ref‖ a kernel may show against the float64 reference.
TOLERANCE = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 3e-2}
_SAMPLING_TEMPERATURE = 0.8
# Back-to-back calls of an op captured in one CUDA graph by the GPU timer (calibrate/timing.py).
GRAPH_CALLS = 16


class KernelCheckError(ServeSimError):
    """A kernel disagrees with its reference: its timings would mean nothing."""


@dataclass(frozen=True)
class Point:
    family: str  # profile CSV it belongs to
    key: dict  # its shape columns
    make: Callable[[], Callable[[], object]]  # builds the inputs; returns the call to time


class ShardBench:
    """One GPU's share of one layer (plus LM head, sampling and the engine loop) of `model` at `tp`."""

    def __init__(self, model: ModelSpec, tensor_parallel: int, dtype: str, device: str, block_size: int):
        self.model, self.tp, self.dtype_name, self.device = model, tensor_parallel, dtype, device
        self.dtype = TORCH_DTYPES[dtype]
        self.block_size = block_size
        self.shard = shard_shapes(model, tensor_parallel)
        self.gen = torch.Generator(device=device).manual_seed(0)
        self._weights: dict[str, torch.Tensor] = {}
        # The engine's own attention kernel where it can be imported (vLLM on CPU), else the stand-ins.
        from .kernels.vllm_cpu import EngineAttention, EngineElementwise, EngineLinear, find_engine
        engine, self.engine_missing = find_engine(device)
        self.engine_attn = (EngineAttention(engine, self.shard["num_heads"], self.shard["num_kv_heads"],
                                            self.shard["head_dim"], self.dtype, block_size) if engine else None)
        # ... and its own GEMM dispatch for the linear layers (oneDNN / sgl-kernel / zentorch, not F.linear).
        self.engine_linear = EngineLinear.find()[0] if engine else None
        # ... and its own norm, rotary and activation layers, dispatched as its Llama dispatches them.
        self.engine_elem, self.engine_elem_missing = (EngineElementwise.find(model, self.dtype) if engine else
                                                      (None, self.engine_missing))
        self._engine_linears: dict[str, Callable] = {}
        self.paged_impl = ("triton flash-decoding paged attention (calibrate/kernels/paged_attention.py)"
                           if device == "cuda" else self.engine_attn.describe() if self.engine_attn else
                           "torch gather: index_select of each sequence's blocks by block id, then SDPA "
                           "(the Triton kernel runs on CPU only under TRITON_INTERPRET=1, too slow to time)")
        self.prefill_impl = (self.engine_attn.describe() if self.engine_attn else
                             "torch SDPA, bottom-right causal" + (" (flash attention where supported)"
                                                                  if device == "cuda" else ""))
        self._l2_bytes = (getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
                          if device == "cuda" else 0)

    def op_impls(self) -> dict[str, str]:
        """Which implementation priced each op (meta.json `op_impls`)."""
        gpu = self.device == "cuda"
        fused_file = "calibrate/kernels/fused.py"
        impls = {
            "linear": ("torch F.linear (cuBLAS)" if gpu else
                       self.engine_linear.describe(self.shard["linear"], self.dtype) if self.engine_linear else
                       "torch F.linear (CPU BLAS)"),
            "rmsnorm": (f"triton fused_add_rms_norm ({fused_file}): the residual add fused into the norm, as vLLM"
                        if gpu else "torch eager rms_norm (float32 math)"),
            "residual_add": ("torch x + residual: the one residual add an engine with fused norms leaves unfused "
                             "(the others are inside rmsnorm)" if gpu else "torch eager x + residual"),
            "rotary": (f"triton rotary_inplace, q and k in one launch from positions and a cos|sin cache ({fused_file})"
                       if gpu else "torch eager: cos/sin gathered by position, neox halves rotated, q then k"),
            "decode_attention:contiguous": "torch SDPA over a dense KV cache" + (" (flash attention)" if gpu else ""),
            "decode_attention:paged": self.paged_impl,
            "prefill_attention": self.prefill_impl,
            "sampling": "torch softmax, exponential race, argmax (fp32 logits)",
            "step_overhead": "host Python engine loop, wall clock",
        }
        if self.activation == "silu_mul":
            impls["silu_mul"] = f"triton silu_and_mul ({fused_file})" if gpu else "torch eager silu(gate) * up"
        else:
            impls["relu"] = "torch F.relu"
        if self.engine_elem is not None:
            impls.update({op: how for op, how in self.engine_elem.describe().items() if op in impls})
        elif self.engine_attn is not None:
            impls["engine_elementwise"] = f"not used: {self.engine_elem_missing}"
        if self.engine_attn is None and not gpu:
            impls["engine_kernels"] = f"not used: {self.engine_missing}"
        return impls

    def elementwise_per_layer(self) -> dict[str, int]:
        """How many times one layer runs each elementwise row (meta.json `elementwise_per_layer`, which the
        cost model sums by): two norms, rotary, the activation, two residual adds -- none where the engine's
        norm adds the residual itself (vLLM's RMSNorm(x, residual), as its Llama calls every norm but the first)."""
        return {"rmsnorm": 2, "rotary": 1, self.activation: 1, "residual_add": 0 if self.engine_elem is not None else 2}

    def engine_probe(self, timer, shapes=((1, 256), (16, 256), (32, 1024)), chunks=((128, 0), (512, 512)),
                     elementwise_tokens=(1, 16, 256)) -> list[dict]:
        """How far the torch stand-ins are from the engine's kernel: both timed on the same shapes
        (meta.json `engine_probe`, and a table in `calibrate run`'s output). Empty without the engine."""
        if self.engine_attn is None:
            return []
        rows = []
        for b, x in shapes:
            inputs = self._paged_inputs([x] * b)
            buffers = (torch.empty_like(inputs[1]), torch.empty_like(inputs[1]))
            engine = timer(self.engine_attn.decode_call(*inputs)).median_s
            stand_in = timer(lambda: ops.paged_decode_gather(*inputs, buffers=buffers)).median_s
            rows.append({"op": "decode_attention:paged", "shape": f"batch {b} x context {x}", "engine_s": engine,
                         "stand_in_s": stand_in, "stand_in_over_engine": stand_in / engine})
        s = self.shard
        if self.engine_linear is not None:
            for op in ("gate_up", "down") if "gate_up" in s["linear"] else tuple(s["linear"])[:2]:
                for n in (1, 4, 16, 256):
                    x, w = self.randn(n, s["linear"][op][0]), self.weight(op)
                    engine = timer(lambda: self.linear_call(op)(x)).median_s
                    stand_in = timer(lambda: F.linear(x, w)).median_s
                    rows.append({"op": f"linear:{op}", "shape": f"{n} tokens", "engine_s": engine,
                                 "stand_in_s": stand_in, "stand_in_over_engine": stand_in / engine})
        if self.engine_elem is not None:
            rows += self._elementwise_probe(timer, elementwise_tokens)
        for c, x in chunks:
            engine = timer(self.engine_attn.prefill_call(c, x, self.randn)).median_s
            q, k, v = (self.randn(1, s["num_heads"], c, s["head_dim"]), self.randn(1, s["num_kv_heads"], x + c, s["head_dim"]),
                       self.randn(1, s["num_kv_heads"], x + c, s["head_dim"]))
            stand_in = timer(lambda: ops.prefill_attention(q, k, v)).median_s
            rows.append({"op": "prefill_attention", "shape": f"chunk {c} after {x}", "engine_s": engine,
                         "stand_in_s": stand_in, "stand_in_over_engine": stand_in / engine})
        return rows

    def _elementwise_probe(self, timer, tokens) -> list[dict]:
        """The engine's norm (with and without the residual), rotary and activation against the stand-ins
        the profile would otherwise time (the fused norm against the stand-ins' norm + residual add)."""
        rows = []
        for n in tokens:
            calls = self._elementwise_calls(n)
            for op, (engine_call, stand_in_call) in calls.items():
                engine, stand_in = timer(engine_call).median_s, timer(stand_in_call).median_s
                rows.append({"op": op, "shape": f"{n} tokens", "engine_s": engine, "stand_in_s": stand_in,
                             "stand_in_over_engine": stand_in / engine})
        return rows

    def _elementwise_calls(self, n: int) -> dict[str, tuple[Callable, Callable]]:
        """op -> (the engine's call, the torch stand-in's) on the same inputs of n tokens."""
        s, e = self.shard, self.engine_elem
        hidden, w = s["hidden_size"], e.norm.weight.data
        x, r = self.randn(n, hidden), self.randn(n, hidden)
        q, k, positions = self._rotary_inputs(n)
        q_e, k_e = self._engine_qk(n)
        cos_cache, sin_cache = ops.rotary_cos_sin(torch.arange(self.model.max_context, device=self.device), s["head_dim"])

        def rotary_stand_in():
            cos, sin = cos_cache[positions], sin_cache[positions]
            return ops.apply_rotary(q, cos, sin), ops.apply_rotary(k, cos, sin)
        calls = {
            "elementwise:rmsnorm+residual_add": (e.rmsnorm_call(x, r), lambda: ops.rms_norm(ops.residual_add(x, r), w)),
            "elementwise:rmsnorm (no residual)": (e.rmsnorm_call(x), lambda: ops.rms_norm(x, w)),
            "elementwise:rotary": (e.rotary_call(positions, q_e, k_e), rotary_stand_in),
        }
        if self.activation == "silu_mul":
            g = self.randn(n, 2 * s["ffn_size"])
            calls["elementwise:silu_mul"] = (e.silu_mul_call(g), lambda: ops.silu_and_mul(g))
        return calls

    def _engine_qk(self, n: int):
        """q and k of n tokens as views of one qkv projection output, as vLLM's Llama hands them to rotary."""
        s = self.shard
        hq, hkv, d = s["num_heads"], s["num_kv_heads"], s["head_dim"]
        return self.engine_elem.qkv_views(self.randn(n, (hq + 2 * hkv) * d), hq, hkv, d)

    def cold_copies(self, nbytes: int) -> int:
        """Copies of a per-layer input (weights, KV) to rotate among the GPU timer's back-to-back calls, so
        that together they exceed twice the L2 and each call reads its input from HBM, as a step's layers
        each read their own. Activations are not copied: in a step the previous kernel just wrote them."""
        if self.device != "cuda" or nbytes <= 0:
            return 1
        return int(min(GRAPH_CALLS, max(1, math.ceil(2 * self._l2_bytes / nbytes))))


    # --- inputs ---------------------------------------------------------------------------------
    def randn(self, *shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen, device=self.device, dtype=dtype or self.dtype)

    def weight(self, op: str) -> torch.Tensor:
        if op not in self._weights:
            in_f, out_f = self.shard["linear"][op]
            self._weights[op] = self.randn(out_f, in_f) * in_f ** -0.5
        return self._weights[op]

    def linear_call(self, op: str) -> Callable:
        """x -> x @ W.T for the op's weight: through the engine's GEMM dispatch where it is, else F.linear."""
        if self.engine_linear is None:
            w = self.weight(op)
            return lambda x: F.linear(x, w)
        if op not in self._engine_linears:
            self._engine_linears[op] = self.engine_linear.prepare(self.weight(op))
        return self._engine_linears[op]

    def _paged_inputs(self, context_lens: list[int]):
        s, bs = self.shard, self.block_size
        per_seq = max(math.ceil(n / bs) for n in context_lens)
        num_blocks = len(context_lens) * per_seq
        k_cache = self.randn(num_blocks, bs, s["num_kv_heads"], s["head_dim"])
        v_cache = self.randn(num_blocks, bs, s["num_kv_heads"], s["head_dim"])
        # Scattered block ids, as a cache that has been allocating and freeing for a while.
        table = torch.randperm(num_blocks, generator=self.gen, device=self.device).view(len(context_lens), per_seq)
        lens = torch.tensor(context_lens, dtype=torch.int32, device=self.device)
        q = self.randn(len(context_lens), s["num_heads"], s["head_dim"])
        return q, k_cache, v_cache, table.to(torch.int32), lens

    def paged_decode(self, q, k_cache, v_cache, table, lens):
        if self.device == "cuda":
            from .kernels.paged_attention import paged_attention_decode
            return paged_attention_decode(q, k_cache, v_cache, table, lens)
        if self.engine_attn is not None:
            return self.engine_attn.decode(q, k_cache, v_cache, table, lens)
        return ops.paged_decode_gather(q, k_cache, v_cache, table, lens)

    def _rotary_inputs(self, n: int):
        s = self.shard
        positions = torch.randint(0, self.model.max_context, (n,), generator=self.gen, device=self.device)
        return (self.randn(n, s["num_heads"], s["head_dim"]), self.randn(n, s["num_kv_heads"], s["head_dim"]),
                positions)

    @property
    def activation(self) -> str:
        return "silu_mul" if self.shard["gated_mlp"] else "relu"

    # --- checks against the references ------------------------------------------------------------
    def checks(self) -> Iterator[tuple[str, Callable[[], float]]]:
        """(op name, a function returning its relative error against the float64 reference)."""
        s = self.shard
        hq, hkv, d = s["num_heads"], s["num_kv_heads"], s["head_dim"]
        for op in s["linear"]:
            def linear_err(op=op):
                x, w = self.randn(3, s["linear"][op][0]), self.weight(op)
                return ref.relative_error(self.linear_call(op)(x), x.double() @ w.double().T)
            yield f"linear:{op}", linear_err

        def prefill_err():
            q, k, v = self.randn(1, hq, 24, d), self.randn(1, hkv, 40, d), self.randn(1, hkv, 40, d)
            return ref.relative_error(ops.prefill_attention(q, k, v), ref.prefill_attention(q, k, v))
        yield "prefill_attention", prefill_err

        if self.engine_attn is not None:
            def engine_prefill_err():
                bs, c, x = self.block_size, 24, 40
                blocks = math.ceil((c + x) / bs)
                kc, vc = self.randn(blocks, bs, hkv, d), self.randn(blocks, bs, hkv, d)
                key_cache, value_cache = self.engine_attn.to_engine_cache(kc, vc)
                q = self.randn(c, hq, d)
                table = torch.arange(blocks, dtype=torch.int32).view(1, blocks)
                out = self.engine_attn.call(q, key_cache, value_cache, table, [c], [c + x])
                k = kc.reshape(-1, hkv, d)[:c + x].transpose(0, 1)[None]
                v = vc.reshape(-1, hkv, d)[:c + x].transpose(0, 1)[None]
                return ref.relative_error(out.transpose(0, 1)[None], ref.prefill_attention(q.transpose(0, 1)[None], k, v))
            yield "prefill_attention (engine)", engine_prefill_err

        def contiguous_err():
            q, k, v = self.randn(3, hq, 1, d), self.randn(3, hkv, 37, d), self.randn(3, hkv, 37, d)
            expected = torch.stack([ref.attention(q[i].cpu(), k[i].cpu(), v[i].cpu()) for i in range(3)])
            return ref.relative_error(ops.decode_attention_contiguous(q, k, v), expected)
        yield "decode_attention:contiguous", contiguous_err

        def paged_err():
            bs = self.block_size
            inputs = self._paged_inputs([1, bs + 1, 3 * bs - 1, 2 * bs])  # ragged, partly filled last blocks
            return ref.relative_error(self.paged_decode(*inputs), ref.paged_decode(*inputs))
        yield "decode_attention:paged", paged_err

        if self.engine_elem is not None:  # the engine's layers, before anything is timed through them
            yield from self._engine_elementwise_checks()

        def rmsnorm_err():
            x, w = self.randn(5, s["hidden_size"]), self.randn(s["hidden_size"])
            return ref.relative_error(ops.rms_norm(x, w), ref.rms_norm(x, w))
        yield "elementwise:rmsnorm", rmsnorm_err

        def rotary_err():
            q, _, positions = self._rotary_inputs(5)
            cos, sin = ops.rotary_cos_sin(positions, d)
            return ref.relative_error(ops.apply_rotary(q, cos, sin), ref.rotary(q, positions))
        yield "elementwise:rotary", rotary_err

        def activation_err():
            ffn = s["ffn_size"]
            if self.activation == "silu_mul":
                x = self.randn(5, 2 * ffn)
                return ref.relative_error(ops.silu_and_mul(x), ref.silu_and_mul(x))
            x = self.randn(5, ffn)
            return ref.relative_error(F.relu(x), x.double().clamp_min(0))
        yield f"elementwise:{self.activation}", activation_err

        def residual_err():
            x, r = self.randn(5, s["hidden_size"]), self.randn(5, s["hidden_size"])
            return ref.relative_error(ops.residual_add(x, r), x.double() + r.double())
        yield "elementwise:residual_add", residual_err

        if self.device == "cuda":  # the Triton kernels this device times
            from .kernels import fused

            def fused_add_norm_err():
                x, r, w = self.randn(5, s["hidden_size"]), self.randn(5, s["hidden_size"]), self.randn(s["hidden_size"])
                expected, _ = ref.fused_add_rms_norm(x, r, w)
                return ref.relative_error(fused.fused_add_rms_norm(x, r, w), expected)
            yield "elementwise:rmsnorm (triton fused_add_rms_norm)", fused_add_norm_err

            def fused_rotary_err():
                q, k, positions = self._rotary_inputs(5)
                expected = ref.rotary(q, positions)
                fused.rotary_inplace(q, k, positions, self._cos_sin())
                return ref.relative_error(q, expected)
            yield "elementwise:rotary (triton rotary_inplace)", fused_rotary_err

            if self.activation == "silu_mul":
                def fused_silu_err():
                    x = self.randn(5, 2 * s["ffn_size"])
                    return ref.relative_error(fused.silu_and_mul(x), ref.silu_and_mul(x))
                yield "elementwise:silu_mul (triton silu_and_mul)", fused_silu_err

        def sampling_err():
            # A logit far above the rest must be drawn every time; the others never.
            logits = self.randn(4, s["vocab_size"], dtype=torch.float32)
            winners = torch.randint(0, s["vocab_size"], (4,), generator=self.gen, device=self.device)
            logits[torch.arange(4, device=self.device), winners] += 1000.0
            drawn = ops.sample(logits, _SAMPLING_TEMPERATURE, self.gen)
            return float((drawn != winners).float().mean())
        yield "sampling", sampling_err

    def _engine_elementwise_checks(self) -> Iterator[tuple[str, Callable[[], float]]]:
        s, e = self.shard, self.engine_elem
        hidden = s["hidden_size"]

        def fused_norm_err():
            x, r = self.randn(5, hidden), self.randn(5, hidden)
            expected_out, expected_residual = ref.fused_add_rms_norm(x, r, e.norm.weight.data, e.norm.variance_epsilon)
            x_in, r_in = x.clone(), r.clone()  # an in-place kernel overwrites its inputs
            out, residual = e.rmsnorm_call(x_in, r_in)()
            return max(ref.relative_error(out, expected_out), ref.relative_error(residual, expected_residual))
        yield "elementwise:rmsnorm (engine, with residual)", fused_norm_err

        def plain_norm_err():
            x = self.randn(5, hidden)
            return ref.relative_error(e.rmsnorm_call(x.clone())(), ref.rms_norm(x, e.norm.weight.data, e.norm.variance_epsilon))
        yield "elementwise:rmsnorm (engine, no residual)", plain_norm_err

        def rotary_err():
            hq, hkv, d = s["num_heads"], s["num_kv_heads"], s["head_dim"]
            q, k = self._engine_qk(5)
            positions = torch.randint(0, self.model.max_context, (5,), generator=self.gen, device=self.device)
            expected_q = ref.rotary(q.reshape(5, hq, d), positions)
            expected_k = ref.rotary(k.reshape(5, hkv, d), positions)
            q_out, k_out = e.rotary_call(positions, q, k)()
            return max(ref.relative_error(q_out.reshape(5, hq, d), expected_q),
                       ref.relative_error(k_out.reshape(5, hkv, d), expected_k))
        yield "elementwise:rotary (engine)", rotary_err

        if self.activation == "silu_mul":
            def silu_err():
                x = self.randn(5, 2 * s["ffn_size"])
                return ref.relative_error(e.silu_mul_call(x)(), ref.silu_and_mul(x))
            yield "elementwise:silu_mul (engine)", silu_err

    def _cos_sin(self):
        if not hasattr(self, "_cos_sin_cache"):
            from .kernels.fused import rotary_cos_sin_cache
            self._cos_sin_cache = rotary_cos_sin_cache(self.model.max_context, self.shard["head_dim"], self.device)
        return self._cos_sin_cache

    def run_checks(self) -> dict[str, float]:
        tol = TOLERANCE[self.dtype_name]
        errors = {}
        for name, err_fn in self.checks():
            err = err_fn()
            if not err <= tol:
                raise KernelCheckError(f"check: {name} differs from its float64 reference by {err:.3g} "
                                       f"(relative); allowed: <= {tol:g} for {self.dtype_name}")
            errors[name] = err
        return errors

    # --- the points to time ------------------------------------------------------------------------
    def points(self, grid: Grid) -> Iterator[Point]:
        s = self.shard
        hq, hkv, d, hidden, ffn = s["num_heads"], s["num_kv_heads"], s["head_dim"], s["hidden_size"], s["ffn_size"]
        for op, (in_f, out_f) in s["linear"].items():
            for n in grid.num_tokens:
                def make(op=op, n=n, in_f=in_f):
                    x, w = self.randn(n, in_f), self.weight(op)
                    if self.engine_linear is not None:  # the engine's prepared weight (a CPU: no cold copies)
                        linear = self.linear_call(op)
                        return lambda: linear(x)
                    weights = itertools.cycle([w] + [w.clone() for _ in range(self.cold_copies(w.numel() * w.element_size()) - 1)])
                    return lambda: F.linear(x, next(weights))
                yield Point("linear", {"op": op, "in_features": in_f, "out_features": out_f, "num_tokens": n}, make)

        gpu = self.device == "cuda"
        if gpu:
            from .kernels import fused

        engine = self.engine_elem

        def rmsnorm(n):
            x, w = self.randn(n, hidden), self.randn(hidden)
            if engine is not None:  # vLLM's RMSNorm(x, residual): the residual add inside, as llama.py calls it
                return engine.rmsnorm_call(x, self.randn(n, hidden))
            if gpu:  # as the engine runs it: the residual add fused into the norm
                residual = self.randn(n, hidden)
                return lambda: fused.fused_add_rms_norm(x, residual, w)
            return lambda: ops.rms_norm(x, w)

        cos_cache, sin_cache = ops.rotary_cos_sin(torch.arange(self.model.max_context, device=self.device), d)

        def rotary(n):
            q, k, positions = self._rotary_inputs(n)
            if engine is not None:  # vLLM's rotary_emb(positions, q, k) on views of one qkv output
                return engine.rotary_call(positions, *self._engine_qk(n))
            if gpu:  # in place: rotating again each call keeps the values' norms
                cos_sin = self._cos_sin()
                return lambda: fused.rotary_inplace(q, k, positions, cos_sin)
            def call():
                cos, sin = cos_cache[positions], sin_cache[positions]
                return ops.apply_rotary(q, cos, sin), ops.apply_rotary(k, cos, sin)
            return call

        def activation(n):
            if self.activation == "silu_mul":
                x = self.randn(n, 2 * ffn)
                if engine is not None:
                    return engine.silu_mul_call(x)
                return lambda: (fused.silu_and_mul(x) if gpu else ops.silu_and_mul(x))
            x = self.randn(n, ffn)
            return lambda: F.relu(x)

        def residual(n):
            x, r = self.randn(n, hidden), self.randn(n, hidden)
            return lambda: ops.residual_add(x, r)

        for op, maker in (("rmsnorm", rmsnorm), ("rotary", rotary), (self.activation, activation),
                          ("residual_add", residual)):
            for n in grid.num_tokens:
                yield Point("elementwise", {"op": op, "num_tokens": n}, lambda maker=maker, n=n: maker(n))

        for rows in grid.sample_rows:
            def make_sampling(rows=rows):
                logits = self.randn(rows, s["vocab_size"], dtype=torch.float32)
                # On a GPU the default generator: CUDA-graph capture supports its RNG state.
                gen = None if self.device == "cuda" else self.gen
                return lambda: ops.sample(logits, _SAMPLING_TEMPERATURE, gen)
            yield Point("sampling", {"num_rows": rows}, make_sampling)

        for seqs in grid.overhead_seqs:
            yield Point("step_overhead", {"num_seqs": seqs}, lambda seqs=seqs: self._engine_loop(seqs))

        for layout in ("contiguous", "paged"):
            for b in grid.decode_batches:
                for x in grid.decode_contexts:
                    yield Point("decode_attention", {"layout": layout, "batch": b, "context_tokens": x},
                                lambda layout=layout, b=b, x=x: self._decode_call(layout, b, x))

        for c in grid.prefill_chunks:
            for x in grid.prefill_contexts:
                def make_prefill(c=c, x=x):
                    if self.engine_attn is not None:
                        return self.engine_attn.prefill_call(c, x, self.randn)
                    q = self.randn(1, hq, c, d)
                    copies = self.cold_copies(2 * (x + c) * hkv * d * self.dtype.itemsize)
                    kvs = itertools.cycle([(self.randn(1, hkv, x + c, d), self.randn(1, hkv, x + c, d))
                                           for _ in range(copies)])
                    return lambda: self._prefill(q, *next(kvs))
                yield Point("prefill_attention", {"chunk_tokens": c, "context_tokens": x}, make_prefill)

    def _prefill(self, q, k, v):
        if self.device == "cuda":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            # Flash attention where it supports the shapes; PyTorch falls back to the next backend listed.
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
                return ops.prefill_attention(q, k, v)
        return ops.prefill_attention(q, k, v)

    def _decode_call(self, layout: str, batch: int, context: int):
        s = self.shard
        copies = self.cold_copies(2 * batch * context * s["num_kv_heads"] * s["head_dim"] * self.dtype.itemsize)
        if layout == "contiguous":
            q = self.randn(batch, s["num_heads"], 1, s["head_dim"])
            kvs = itertools.cycle([(self.randn(batch, s["num_kv_heads"], context, s["head_dim"]),
                                    self.randn(batch, s["num_kv_heads"], context, s["head_dim"])) for _ in range(copies)])
            return lambda: ops.decode_attention_contiguous(q, *next(kvs))
        if self.device == "cuda":
            cases = itertools.cycle([self._paged_inputs([context] * batch) for _ in range(copies)])
            return lambda: self.paged_decode(*next(cases))
        inputs = self._paged_inputs([context] * batch)
        if self.engine_attn is not None:
            return self.engine_attn.decode_call(*inputs)
        k_cache = inputs[1]
        buffers = (torch.empty_like(k_cache), torch.empty_like(k_cache))
        return lambda: ops.paged_decode_gather(*inputs, buffers=buffers)

    def _engine_loop(self, num_seqs: int):
        """A minimal engine iteration around the model: inputs built from Python lists, an embedding
        lookup, a token picked per sequence and handed back to Python, bookkeeping per sequence."""
        blocks_per_seq = 8
        vocab = min(self.shard["vocab_size"], 32768)
        embedding = self.randn(vocab, 64)
        token_ids = [i % vocab for i in range(num_seqs)]
        positions = list(range(num_seqs))
        block_tables = [[i * blocks_per_seq + j for j in range(blocks_per_seq)] for i in range(num_seqs)]
        outputs: list[list[int]] = [[] for _ in range(num_seqs)]

        def step():
            ids = torch.tensor(token_ids, device=self.device)
            torch.tensor(positions, device=self.device)
            torch.tensor(block_tables, dtype=torch.int32, device=self.device)
            next_ids = embedding[ids].argmax(-1).tolist()  # .tolist() waits for the device
            for out, tok in zip(outputs, next_ids):
                out.append(tok)
                if len(out) > 64:
                    out.clear()
        return step
