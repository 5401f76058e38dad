"""How a Hugging Face checkpoint stores its weights: its config.json's `quantization_config`, read into the
scenario's `quantization` terms (weights dtype, fp8 block scales, fp8 activations).

A scenario that points `model: {hf_config: ...}` at a quantized checkpoint (DeepSeek-V3/R1, Qwen's -FP8 releases,
an AWQ or GPTQ export) and says nothing about `quantization.weights` is priced as the checkpoint is stored, as the
engines load it (`sim.config.schema.checkpoint_defaults`); without this it was priced in bf16, which for DeepSeek-R1
doubles the weights' bytes. The formats read, as their writers spell them:

- `quant_method: fp8` (DeepSeek, Qwen; transformers' FineGrainedFP8Config): fp8 weights, scaled per block where
  `weight_block_size` is given; `activation_scheme` dynamic or static: fp8 activations (W8A8).
- `quant_method: compressed-tensors` (llm-compressor): each of `config_groups`' `weights` (`num_bits`, `type`,
  `strategy`: `block` for block scales) and `input_activations`; every group must agree.
- `quant_method: modelopt` (NVIDIA ModelOpt) with `quant_algo: FP8`: fp8 weights and activations, per tensor (also
  read from a ModelOpt `hf_quant_config.json` beside a config that declares none: `sim.model.hf_config`).
- `quant_method: awq | gptq` with `bits` 4 or 8, and bitsandbytes' `load_in_4bit` / `load_in_8bit`: int4 / int8
  weights only.
- `quant_method: mxfp4` (gpt-oss): the routed experts' weights in MXFP4, the rest 16-bit.
- NVFP4 (`quant_method: modelopt` with `quant_algo: NVFP4`, or compressed-tensors groups of 4-bit float weights and
  activations in groups of 16): nvfp4, where the modules it leaves unquantized (`exclude_modules`, `ignore`) are at
  most the LM head, the MoE router gates, the embeddings and what is not simulated (multi-token-prediction layers, a
  vision encoder), as ModelOpt's NVFP4 recipe leaves them.
  A checkpoint that also keeps attention or other layers in 16 bits (NVIDIA's DeepSeek-V3.1 and MiniMax-M2.5 NVFP4
  releases) is not read: nvfp4 would price those layers 4-bit.

Anything else (mixed groups, ...) is not a ServeSim dtype: it is reported as unread, and the scenario
must then say how the weights are stored (`quantization.weights`), never silently bf16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CheckpointQuantization:
    """A checkpoint's quantization as ServeSim prices it; `weights` None: the config's method is not read (`why`)."""

    method: str  # quant_method as the config spells it
    weights: str | None = None  # fp8, int8, int4, mxfp4, nvfp4
    fp8_block_scales: bool = False
    fp8_activations: bool = False  # W8A8: the engines run fp8 matrix products where the GPU has them
    why: str = ""

    def describe(self) -> str:
        """One phrase for notes and `servesim catalog import`."""
        if self.weights is None:
            return f"quantization_config {self.method!r} not read ({self.why})"
        parts = [f"{self.weights} weights"]
        if self.fp8_block_scales:
            parts.append("block scales")
        if self.fp8_activations:
            parts.append("fp8 activations")
        return f"{', '.join(parts)} (quantization_config {self.method!r})"


def _unread(method: str, why: str) -> CheckpointQuantization:
    return CheckpointQuantization(method=method, why=why)


def _int_weights(method: str, bits: Any) -> CheckpointQuantization:
    if bits in (4, 8):
        return CheckpointQuantization(method=method, weights=f"int{bits}")
    return _unread(method, f"bits {bits!r}; read: 4 or 8")


# Module names an NVFP4 checkpoint may leave unquantized and still be nvfp4 as ServeSim prices it (a pattern's last
# dotted part, its wildcards and layer numbers dropped): the LM head, the MoE router gates (Qwen3-MoE's and
# DeepSeek's `mlp.gate`, Mixtral's and MiniMax's `block_sparse_moe.gate`), the embeddings (never quantized here);
# and any pattern naming a multi-token-prediction layer (`mtp`) or a vision encoder, neither of which is simulated.
NVFP4_KEPT_16BIT = ("lm_head", "gate", "shared_expert_gate", "embed_tokens")
_NOT_SIMULATED = ("mtp", "vision", "visual")


def _nvfp4(method: str, excluded: Any) -> CheckpointQuantization:
    """nvfp4, unless the checkpoint keeps more than NVFP4_KEPT_16BIT in 16 bits (then not read, naming one)."""
    if not isinstance(excluded, list):
        excluded = []
    for pattern in excluded:
        parts = [p for p in str(pattern).replace("*", "").split(".") if p and not p.isdigit()]
        if parts and parts[-1] not in NVFP4_KEPT_16BIT and not any(w in p for p in parts for w in _NOT_SIMULATED):
            return _unread(method, f"NVFP4 that keeps {pattern!r} unquantized; read: NVFP4 with at most the LM head, "
                                   "router gates, embeddings, MTP layers and a vision encoder unquantized")
    return CheckpointQuantization(method=method, weights="nvfp4")


def _is_nvfp4_group(group: dict) -> bool:
    """A compressed-tensors config group of NVFP4: 4-bit float weights and input activations in groups of 16."""
    w, a = group.get("weights"), group.get("input_activations")
    return all(isinstance(x, dict) and x.get("type") == "float" and x.get("num_bits") == 4 and x.get("group_size") == 16
               for x in (w, a))


def _compressed_tensors(q: dict, method: str = "compressed-tensors") -> CheckpointQuantization:
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return _unread(method, "no config_groups")
    read = set()
    for group in groups.values():
        w = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(w, dict):
            return _unread(method, "a config group without weights")
        a = group.get("input_activations")
        fp8_in = isinstance(a, dict) and a.get("type") == "float" and a.get("num_bits") == 8
        if _is_nvfp4_group(group):
            read.add(("nvfp4", False, False))
        elif w.get("type") == "float" and w.get("num_bits") == 8:
            read.add(("fp8", w.get("strategy") == "block", fp8_in))
        elif w.get("type") == "int" and w.get("num_bits") in (4, 8):
            read.add((f"int{w['num_bits']}", False, False))
        else:
            return _unread(method, f"weights of {w.get('num_bits')!r} bits of type {w.get('type')!r}; read: "
                                   "8-bit float, 4- or 8-bit int, NVFP4")
    if len(read) > 1:
        return _unread(method, "its config groups store weights differently")
    weights, block, fp8_in = read.pop()
    if weights == "nvfp4":
        return _nvfp4(method, q.get("ignore"))
    return CheckpointQuantization(method=method, weights=weights, fp8_block_scales=block, fp8_activations=fp8_in)


def checkpoint_quantization(config: Any) -> CheckpointQuantization | None:
    """The quantization a config.json mapping declares (its top-level `quantization_config`, as the engines read
    it), or None where it declares none (the checkpoint's own dtype: bf16/fp16 weights)."""
    q = config.get("quantization_config") if isinstance(config, dict) else None
    if q is None:
        return None
    if not isinstance(q, dict):
        return _unread(repr(q)[:40], "not a mapping")
    method = str(q.get("quant_method", "")).lower()
    if method == "fp8":
        block = q.get("weight_block_size") is not None
        return CheckpointQuantization(method=method, weights="fp8", fp8_block_scales=block,
                                      fp8_activations=q.get("activation_scheme", "dynamic") in ("dynamic", "static"))
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        if algo == "FP8":
            return CheckpointQuantization(method=method, weights="fp8", fp8_activations=True)
        if algo == "NVFP4":
            if q.get("config_groups") is not None:  # ModelOpt's newer exports: compressed-tensors' groups as well
                return _compressed_tensors({**q, "ignore": q.get("ignore", q.get("exclude_modules"))}, method)
            return _nvfp4(method, q.get("exclude_modules", q.get("ignore")))
        return _unread(method, f"quant_algo {q.get('quant_algo')!r}; read: FP8, NVFP4")
    if method in ("awq", "gptq"):
        return _int_weights(method, q.get("bits", q.get("w_bit")))
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return CheckpointQuantization(method=method, weights="int4")
        if q.get("load_in_8bit"):
            return CheckpointQuantization(method=method, weights="int8")
        return _unread(method, "neither load_in_4bit nor load_in_8bit")
    if method == "mxfp4":  # gpt-oss: its experts' weights; modules_to_not_convert (attention, router) stay 16-bit
        return CheckpointQuantization(method=method, weights="mxfp4")
    return _unread(method or "(no quant_method)", "a format ServeSim has no dtype for")
