"""Any Hugging Face model: a `config.json` read into a ModelSpec.

Handled architectures (by `model_type`, else by `architectures[0]`): Llama, Mistral, Mixtral, Qwen2 /
Qwen2.5, Qwen3 (dense and MoE; Qwen3-VL's language model), DeepSeek-V2 / V3 (MLA, routed + shared experts, leading dense
layers), GLM-4.5 / 4.6 (GQA, DeepSeek-V3's experts), gpt-oss (MoE on every layer), MiniMax-M2, Gemma / Gemma 2 /
Gemma 3 (text), OPT. Each reader takes the keys that architecture's `transformers` config class defines, with that
class's defaults where a file leaves a key out.

What a ModelSpec cannot express is said, not silently approximated: an MoE layer pattern other than
"the first k layers dense, the rest MoE" is refused. Interleaved local/global attention (Gemma 2/3, gpt-oss) is read
as how many layers slide (`sliding_window_layers`, from `layer_types` or the class's own pattern); which layers they
are does not change a step's price or its KV.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sim.errors import ConfigError
from sim.model.checkpoint_quant import CheckpointQuantization, checkpoint_quantization
from sim.model.specs import MAX_MODEL_DIM, ModelSpec

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KB; anything larger is not one

# What the import does not model, per model_type (printed by `servesim catalog import`).
IGNORED: dict[str, str] = {
    "gemma2": "the logits' soft-capping and the extra pre/post-feed-forward norms are not priced",
    "gemma3_text": "per-head q/k RMSNorm weights and the extra pre/post-feed-forward norms are not counted",
    "qwen3": "per-head q/k RMSNorm weights are not counted (2 * head_dim per layer)",
    "qwen3_moe": "per-head q/k RMSNorm weights are not counted (2 * head_dim per layer)",
    "qwen3_vl_text": "the vision encoder and image tokens (requests are text only); per-head q/k RMSNorm weights",
    "qwen3_vl_moe_text": "the vision encoder and image tokens (requests are text only); per-head q/k RMSNorm weights",
    "minimax_m2": "the multi-token-prediction modules (use_mtp), the q/k RMSNorm weights and the router's score biases "
                  "are not counted",
    "deepseek_v3": "the multi-token-prediction layer (num_nextn_predict_layers) and router score biases are not counted",
    "deepseek_v32": "the multi-token-prediction layer (num_nextn_predict_layers) and router score biases are not "
                    "counted; the indexer's top-k selection and its norm price nothing (its projections, scores and "
                    "key cache do)",
    "gpt_oss": "attention sinks and the experts' biases are not counted",
    "glm4_moe": "the multi-token-prediction layer (num_nextn_predict_layers), the q/k RMSNorm weights (use_qk_norm) "
                "and the router's score biases are not counted; the rotary embedding's share of each head "
                "(partial_rotary_factor) prices nothing",
}


# JSON integers longer than this are kept as _LongInteger, never converted: Python refuses to convert one of more
# than 4,300 digits (a traceback), and one of 20 digits is already far beyond MAX_MODEL_DIM.
_MAX_JSON_INT_DIGITS = 100


class _LongInteger:
    """A JSON integer of more than _MAX_JSON_INT_DIGITS digits, as json.loads keeps it (any key that reads it
    refuses it, naming the key)."""

    def __init__(self, text: str):
        self.digits = sum(ch.isdigit() for ch in text)

    def __repr__(self) -> str:
        return f"<an integer of {self.digits:,} digits>"


def _parse_int(text: str) -> int | _LongInteger:
    return _LongInteger(text) if len(text) > _MAX_JSON_INT_DIGITS else int(text)


def _shown(value: Any) -> str:
    """A value as an error line shows it: a huge integer in powers of ten, long text cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"{float(value):.3g}" if value.bit_length() < 1000 else f"<an integer of {len(str(value)):,} digits>"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Reader:
    """Typed access to one config mapping; every error is one line naming the file and the key."""

    def __init__(self, data: dict, source: str):
        self.data, self.source = data, source

    def _fail(self, key: str, value: Any, allowed: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key} = {_shown(value)} is not allowed; allowed: {allowed}")

    def int(self, key: str, default: Any = ..., minimum: int = 1) -> int:
        """A required (no default) or optional integer in [minimum, MAX_MODEL_DIM]; JSON null counts as absent."""
        value = self.data.get(key)
        if value is None:
            if default is ...:
                raise ConfigError(f"{self.source}: missing field {key!r} (needed for model_type "
                                  f"{self.data.get('model_type')!r})")
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_MODEL_DIM:
            raise self._fail(key, value, f"an integer >= {minimum} and <= {MAX_MODEL_DIM:,} (MAX_MODEL_DIM)")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(key, value, "true or false")
        return value


def _attention_kind(heads: int, kv_heads: int) -> str:
    if kv_heads == heads:
        return "mha"
    return "mqa" if kv_heads == 1 else "gqa"


def _dense_fields(r: _Reader, *, tie_default: bool, attention_bias: bool | None = None) -> dict:
    """The keys every Llama-like decoder shares (LlamaConfig and its descendants)."""
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    kv_heads = r.int("num_key_value_heads", heads)
    return {
        "num_layers": r.int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": r.int("head_dim", hidden // heads),  # explicit in Llama 3.1, Qwen3, Gemma; else hidden / heads
        "ffn_size": r.int("intermediate_size"),
        "vocab_size": r.int("vocab_size"),
        "max_context": r.int("max_position_embeddings"),
        "attention": _attention_kind(heads, kv_heads),
        "tie_word_embeddings": r.bool("tie_word_embeddings", tie_default),
        "attention_bias": r.bool("attention_bias", False) if attention_bias is None else attention_bias,
    }


def _llama(r: _Reader) -> dict:
    if r.bool("mlp_bias", False):
        raise r._fail("mlp_bias", True, "false (biases on the MLP are not modelled)")
    return _dense_fields(r, tie_default=False)


def _mistral(r: _Reader) -> dict:
    return _dense_fields(r, tie_default=False) | {"sliding_window": r.int("sliding_window", None)}


def _mixtral(r: _Reader) -> dict:
    return _mistral(r) | {
        "num_experts": r.int("num_local_experts"),
        "num_experts_per_token": r.int("num_experts_per_tok"),
    }


def _qwen_window(r: _Reader) -> int | None:
    # Qwen2/3 configs carry a sliding_window even when it is off; it applies only with use_sliding_window.
    return r.int("sliding_window", None) if r.bool("use_sliding_window", False) else None


def _qwen2(r: _Reader) -> dict:
    # HF Qwen2Attention: q/k/v_proj always have biases (there is no attention_bias key).
    return _dense_fields(r, tie_default=False, attention_bias=True) | {"sliding_window": _qwen_window(r)}


def _qwen3(r: _Reader) -> dict:
    return _dense_fields(r, tie_default=False) | {"sliding_window": _qwen_window(r)}


def _qwen3_moe(r: _Reader) -> dict:
    if r.int("decoder_sparse_step", 1) != 1 or r.data.get("mlp_only_layers"):
        raise ConfigError(f"{r.source}: decoder_sparse_step/mlp_only_layers: only every layer MoE is modelled; "
                          "allowed: decoder_sparse_step 1 and no mlp_only_layers")
    return _qwen3(r) | {
        "ffn_size": r.int("moe_intermediate_size"),
        "num_experts": r.int("num_experts"),
        "num_experts_per_token": r.int("num_experts_per_tok"),
    }


def _window_layers(r: _Reader, window_default: int, every: int) -> dict:
    """`sliding_window` and `sliding_window_layers` of a model whose layers alternate between a sliding window and
    full attention: `layer_types` where the file lists them, else the class's own pattern (transformers: layer i
    slides unless (i + 1) % `every` == 0). No sliding layer: no window; every layer: a window on all of them."""
    num_layers = r.int("num_hidden_layers")
    kinds = r.data.get("layer_types")
    if kinds is None:
        kinds = ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(num_layers)]
    elif (not isinstance(kinds, list) or len(kinds) != num_layers
          or not set(kinds) <= {"sliding_attention", "full_attention"}):
        raise r._fail("layer_types", kinds, f"a list of num_hidden_layers ({num_layers}) 'sliding_attention' and "
                      "'full_attention'")
    sliding = kinds.count("sliding_attention")
    if sliding == 0:
        return {}
    window = r.int("sliding_window", window_default)
    return {"sliding_window": window, "sliding_window_layers": None if sliding == num_layers else sliding}


def _gpt_oss(r: _Reader) -> dict:
    """gpt-oss (transformers GptOssConfig): every layer a mixture of num_local_experts SwiGLU experts of
    intermediate_size, num_experts_per_tok of them per token, no shared expert; biased attention projections with
    an explicit head_dim (64 on a 2880-wide model); every other layer slides over 128 tokens."""
    return _dense_fields(r, tie_default=False, attention_bias=r.bool("attention_bias", True)) | {
        "num_experts": r.int("num_local_experts"),
        "num_experts_per_token": r.int("num_experts_per_tok", None) or r.int("experts_per_token", 4),
    } | _window_layers(r, 128, 2)


def _minimax_m2(r: _Reader) -> dict:
    """MiniMax-M2 (its own MiniMaxM2Config): num_local_experts SwiGLU experts of intermediate_size on every layer,
    num_experts_per_tok of them per token; softmax attention on every layer (attn_type_list all 1: MiniMax-M1's
    lightning-attention layers, 0, are not modelled)."""
    kinds = r.data.get("attn_type_list")
    if kinds is not None and (not isinstance(kinds, list) or set(kinds) != {1}):
        raise r._fail("attn_type_list", kinds, "1 on every layer (softmax attention; linear attention layers are not "
                      "modelled)")
    if r.int("shared_intermediate_size", 0, minimum=0):
        raise r._fail("shared_intermediate_size", r.data["shared_intermediate_size"],
                      "0 (a shared expert of its own width is not modelled)")
    return _dense_fields(r, tie_default=False) | {
        "num_experts": r.int("num_local_experts"),
        "num_experts_per_token": r.int("num_experts_per_tok"),
    }


def _deepseek(r: _Reader) -> dict:
    """DeepSeek-V2/V3: multi-head latent attention; routed + shared experts after k dense layers."""
    fields = _dense_fields(r, tie_default=False)
    rope, nope = r.int("qk_rope_head_dim"), r.int("qk_nope_head_dim")
    fields |= {
        "attention": "mla",
        "head_dim": nope + rope,  # the query/key head width
        "kv_lora_rank": r.int("kv_lora_rank"),
        "q_lora_rank": r.int("q_lora_rank", 0),  # null: queries are not compressed
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": nope,
        "v_head_dim": r.int("v_head_dim"),
    }
    if "index_topk" in r.data:  # DeepSeek-V3.2's sparse attention (DSA): an indexer picks the keys MLA attends
        fields |= {"index_topk": r.int("index_topk"), "index_n_heads": r.int("index_n_heads"),
                   "index_head_dim": r.int("index_head_dim")}
    experts = r.int("n_routed_experts", 0, minimum=0)
    if experts == 0:
        return fields  # a dense DeepSeek: intermediate_size on every layer
    return fields | _routed_and_shared_experts(r, fields, experts)


def _routed_and_shared_experts(r: _Reader, fields: dict, experts: int, defaults: dict | None = None) -> dict:
    """DeepSeek-V2/V3's MoE layout, which GLM-4.5's keeps: `first_k_dense_replace` dense layers of
    intermediate_size, then on every layer `n_routed_experts` routed experts (`num_experts_per_tok` of them a
    token) and `n_shared_experts` shared ones, each of moe_intermediate_size. `defaults`: the config class's own
    for keys a file leaves out (none: the dense layers and shared experts 0, the other two required)."""
    default = defaults or {}
    if r.int("moe_layer_freq", 1) != 1:
        raise r._fail("moe_layer_freq", r.data["moe_layer_freq"],
                      "1 (MoE on every layer after first_k_dense_replace; other patterns are not modelled)")
    dense_layers = r.int("first_k_dense_replace", default.get("first_k_dense_replace", 0), minimum=0)
    if dense_layers >= fields["num_layers"]:
        raise r._fail("first_k_dense_replace", dense_layers, f"an integer below num_hidden_layers "
                      f"({fields['num_layers']})")
    return {
        "dense_ffn_size": fields["ffn_size"],  # intermediate_size: the leading dense layers' MLP
        "ffn_size": r.int("moe_intermediate_size", default.get("moe_intermediate_size", ...)),  # routed and shared
        "num_experts": experts,
        "num_experts_per_token": r.int("num_experts_per_tok", default.get("num_experts_per_tok", ...)),
        "num_shared_experts": r.int("n_shared_experts", default.get("n_shared_experts", 0), minimum=0),
        "num_dense_layers": dense_layers,
    }


def _glm4_moe(r: _Reader) -> dict:
    """GLM-4.5, GLM-4.5-Air and GLM-4.6 (transformers' Glm4MoeConfig): grouped-query attention with an explicit
    head_dim and biased q/k/v projections (`attention_bias`), and DeepSeek-V3's MoE layout (routed and shared
    experts after `first_k_dense_replace` dense layers)."""
    fields = _dense_fields(r, tie_default=False)
    # Glm4MoeConfig's defaults (transformers' models/glm4_moe): GLM-4.5-Air's layout
    defaults = {"first_k_dense_replace": 1, "n_shared_experts": 1, "moe_intermediate_size": 1408,
                "num_experts_per_tok": 8}
    return fields | _routed_and_shared_experts(r, fields, r.int("n_routed_experts", 128), defaults)


def _gemma(r: _Reader) -> dict:
    # Gemma: explicit head_dim (256 on Gemma 7B, not hidden / heads), GeGLU MLP, tied embeddings.
    return _dense_fields(r, tie_default=True)


def _gemma2(r: _Reader) -> dict:
    """Gemma 2 (transformers Gemma2Config): as Gemma, with every other layer sliding over 4,096 tokens."""
    return _gemma(r) | _window_layers(r, 4096, 2)


def _gemma3(r: _Reader) -> dict:
    """Gemma 3 text (Gemma3TextConfig): as Gemma, five of every sliding_window_pattern (6) layers sliding."""
    return _gemma(r) | _window_layers(r, 4096, r.int("sliding_window_pattern", 6))


def _opt(r: _Reader) -> dict:
    hidden = r.int("hidden_size")
    if r.int("word_embed_proj_dim", hidden) != hidden:
        raise r._fail("word_embed_proj_dim", r.data["word_embed_proj_dim"],
                      f"hidden_size ({hidden}); the projection in/out of the embeddings is not modelled")
    heads = r.int("num_attention_heads")
    positions = r.int("max_position_embeddings")
    return {
        "num_layers": r.int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "head_dim": hidden // heads,
        "ffn_size": r.int("ffn_dim"),
        "vocab_size": r.int("vocab_size"),
        "max_context": positions,
        "attention": "mha",
        "gated_mlp": False,  # fc1 -> ReLU -> fc2
        "tie_word_embeddings": r.bool("tie_word_embeddings", True),
        "linear_bias": r.bool("enable_bias", True),
        "learned_position_embeddings": positions + 2,  # HF OPTLearnedPositionalEmbedding: offset 2
    }


READERS: dict[str, Callable[[_Reader], dict]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "qwen3_vl_text": _qwen3,  # Qwen3-VL's language model (its text_config): Qwen3's
    "qwen3_vl_moe_text": _qwen3_moe,
    "minimax_m2": _minimax_m2,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "deepseek_v32": _deepseek,
    "glm4_moe": _glm4_moe,
    "gpt_oss": _gpt_oss,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3_text": _gemma3,
    "opt": _opt,
}
# `architectures[0]` -> model_type, for configs without a model_type.
ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "DeepseekV32ForCausalLM": "deepseek_v32", "Glm4MoeForCausalLM": "glm4_moe",
    "GptOssForCausalLM": "gpt_oss",
    "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_text",
    "OPTForCausalLM": "opt", "MiniMaxM2ForCausalLM": "minimax_m2",
}


def model_type_of(config: dict, source: str) -> str:
    """The handled model_type of a config, or a one-line error naming what it says and what is handled."""
    model_type = config.get("model_type")
    archs = config.get("architectures")
    if isinstance(model_type, str) and model_type.lower() in READERS:
        return model_type.lower()
    if isinstance(archs, list) and archs and isinstance(archs[0], str) and archs[0] in ARCHITECTURES:
        return ARCHITECTURES[archs[0]]
    if model_type is None and not archs:
        raise ConfigError(f"{source}: missing field 'model_type' (and no 'architectures'); "
                          f"allowed model_type: {', '.join(READERS)}")
    said = f"model_type {model_type!r}" if model_type is not None else f"architectures {archs!r}"
    raise ConfigError(f"{source}: {said} is not a handled architecture; allowed model_type: {', '.join(READERS)}")


def default_name(config: dict, path: str | Path | None = None) -> str:
    """`_name_or_path`'s last part, else the file's name (its folder's for a plain config.json)."""
    name = config.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return catalog_name(name.strip().rstrip("/").rsplit("/", 1)[-1])
    if path is not None:
        p = Path(path)
        return catalog_name(p.parent.name if p.stem == "config" and p.parent.name else p.stem)
    return "hf-model"


def rope_entries(config: dict, source: str, key: str | None = None) -> tuple[dict, ...]:
    """config.json's RoPE scaling as `ModelSpec.rope_scaling` entries: `rope_scaling`, or transformers v5's
    `rope_parameters`, flat or one per layer type; the type as `rope_type` (or the older `type`), its factor and
    YaRN's original_max_position_embeddings (`key`: the one key to read). An entry without a type is refused in one
    line, as vLLM refuses it (patch_rope_scaling_dict: "rope_scaling should have a 'rope_type' key")."""
    keys = (key,) if key else ("rope_scaling", "rope_parameters")
    value = next((config[k] for k in keys if config.get(k) is not None), None)
    where = next((k for k in keys if config.get(k) is not None), keys[0])
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {where}: {_shown(value)} is not allowed; allowed: a mapping of RoPE settings")
    nested = bool(value) and all(isinstance(v, dict) or v is None for v in value.values())
    entries = [v for v in value.values() if v is not None] if nested else [value]
    out = []
    for entry in entries:
        rope_type = entry.get("rope_type", entry.get("type"))
        if not isinstance(rope_type, str):
            raise ConfigError(f"{source}: {where}: {_shown(entry)} has no rope_type; allowed: a mapping with "
                              "rope_type (default, linear, dynamic, yarn, llama3, longrope, ...)")
        factor, original = entry.get("factor"), entry.get("original_max_position_embeddings")
        for name, number, kind in (("factor", factor, (int, float)), ("original_max_position_embeddings", original,
                                                                       (int,))):
            if number is not None and (isinstance(number, bool) or not isinstance(number, kind) or number <= 0):
                raise ConfigError(f"{source}: {where}.{name}: {_shown(number)} is not allowed; allowed: a number > 0")
        out.append({"rope_type": rope_type, "factor": factor, "original_max_position_embeddings": original})
    return tuple(out)


def spec_from_config(config: Any, name: str | None = None, source: str = "config.json") -> ModelSpec:
    """A ModelSpec from a parsed config.json mapping; every bad input is one ConfigError line."""
    return _convert(config, name, source)[0]


def _convert(config: Any, name: str | None, source: str) -> tuple[ModelSpec, str]:
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: expected a JSON object of config keys, got {type(config).__name__}")
    model_type = config.get("model_type")
    handled = isinstance(model_type, str) and model_type.lower() in READERS  # as model_type_of reads it
    if not handled and isinstance(config.get("text_config"), dict):
        # A multimodal wrapper (e.g. Gemma 3, Mistral 3): the language model is its text_config.
        return _convert(config["text_config"], name or default_name(config), f"{source} text_config")
    model_type = model_type_of(config, source)
    fields = READERS[model_type](_Reader(config, source))
    fields["rope_scaling"] = rope_entries(config, source)
    try:
        return ModelSpec(name=name or default_name(config), not_modelled=IGNORED.get(model_type),
                         model_type=model_type, **fields), model_type
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = first["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{source}: {where + ': ' if where else ''}{msg}") from None


def read_hf_config(path: str | Path, name: str | None = None,
                   field: str = "hf_config") -> tuple[ModelSpec, str, CheckpointQuantization | None]:
    """Read a Hugging Face `config.json` file: (its ModelSpec, the model_type read, the quantization its
    `quantization_config` declares: `sim.model.checkpoint_quant`). Errors are one line that starts with `field` and
    the file."""
    p = Path(path).expanduser()
    where = f"{field}: '{path}'"
    if not p.is_file():
        what = "is a folder" if p.is_dir() else "not found"
        raise ConfigError(f"{where} {what}; allowed: a Hugging Face config.json file")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_CONFIG_BYTES} bytes; allowed: a config.json")
    try:
        config = json.loads(p.read_text(encoding="utf-8"), parse_int=_parse_int)
    except UnicodeDecodeError:
        raise ConfigError(f"{where} is not UTF-8 text; allowed: a JSON config.json") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{where} line {err.lineno}: not JSON ({err.msg})") from None
    except OSError as err:
        raise ConfigError(f"{where} cannot be read ({err.strerror or err})") from None
    if isinstance(config, dict) and name is None:
        name = default_name(config, p)
    return (*_convert(config, name, where), checkpoint_quantization(_with_modelopt_file(config, p, field)))


# NVIDIA's ModelOpt exports may keep their quantization beside config.json, in hf_quant_config.json
# ({"quantization": {"quant_algo": "FP8" | "NVFP4", "exclude_modules": [...]}}), which TensorRT-LLM and vLLM's
# ModelOpt methods read (vLLM's ModelOptFp8Config.get_config_filenames); without it the weights would read as bf16.
MODELOPT_FILE = "hf_quant_config.json"


def _with_modelopt_file(config: Any, path: Path, field: str) -> Any:
    """The config, with the quantization of a ModelOpt `hf_quant_config.json` beside it as its `quantization_config`
    (quant_method modelopt) where the config declares none."""
    beside = path.parent / MODELOPT_FILE
    if not isinstance(config, dict) or config.get("quantization_config") is not None or not beside.is_file():
        return config
    where = f"{field}: '{beside}'"
    if beside.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where} is larger than {MAX_CONFIG_BYTES} bytes; allowed: a ModelOpt {MODELOPT_FILE}")
    try:
        quant = json.loads(beside.read_text(encoding="utf-8")).get("quantization")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, OSError):
        raise ConfigError(f"{where} is not a ModelOpt {MODELOPT_FILE} (a JSON object with a 'quantization' object); "
                          "allowed: that, or no such file beside the config") from None
    if not isinstance(quant, dict):
        raise ConfigError(f"{where} has no 'quantization' object; allowed: a ModelOpt {MODELOPT_FILE}, or no such "
                          "file beside the config")
    return {**config, "quantization_config": {"quant_method": "modelopt", **quant}}


def load_hf_config(path: str | Path, name: str | None = None, field: str = "hf_config") -> ModelSpec:
    """Read a Hugging Face `config.json` file into a ModelSpec (see the module docstring)."""
    return read_hf_config(path, name, field)[0]


class HFConfigModel(BaseModel):
    """A scenario's `model: {hf_config: path}`: the architecture read from a Hugging Face config.json."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    hf_config: str = Field(description="path to a Hugging Face config.json; relative paths are relative to "
                                       "the scenario file")
    name: str | None = Field(None, description="default: the config's _name_or_path, else the file name")

    def load(self, field: str = "model.hf_config") -> ModelSpec:
        return load_hf_config(self.hf_config, self.name, field)


def read_model_ref(value: Any, field: str = "model") -> Any:
    """A scenario's model value with `{hf_config: path, name?}` read into a ModelSpec; anything else as it is.

    Called before pydantic tries the model union, so a bad `hf_config` mapping is one line about its own
    keys instead of the union's errors about every ModelSpec field."""
    return read_model_and_quantization(value, field)[0]


def read_model_and_quantization(value: Any, field: str = "model") -> tuple[Any, CheckpointQuantization | None]:
    """`read_model_ref`, with the quantization the config declares (None for anything but `{hf_config: ...}`)."""
    if not (isinstance(value, dict) and "hf_config" in value):
        return value, None
    unknown = sorted(set(value) - set(HFConfigModel.model_fields))
    if unknown:
        raise ConfigError(f"{field}.{unknown[0]}: unknown key beside hf_config; allowed: hf_config, name")
    for key in ("hf_config", "name"):
        if key in value and not (isinstance(value[key], str) and value[key].strip()) and not (
                key == "name" and value[key] is None):
            raise ConfigError(f"{field}.{key}: {value[key]!r} is not allowed; allowed: "
                              + ("a path to a config.json" if key == "hf_config" else "a non-empty name"))
    ref = HFConfigModel(**value)
    spec, _, quant = read_hf_config(ref.hf_config, ref.name, f"{field}.hf_config")
    return spec, quant


_SAFE_NAME = re.compile(r"[^a-z0-9._+-]+")


def catalog_name(text: str) -> str:
    """A name in the catalog's style: lower case, '-' between words."""
    return _SAFE_NAME.sub("-", text.strip().lower()).strip("-") or "hf-model"
