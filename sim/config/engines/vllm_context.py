"""vLLM's longest context as its releases derive, read and check it: the context it derives from the model's config
(RoPE scaling, `--hf-overrides`, `--rope-scaling`), the human-readable numbers its parser takes (`--max-model-len
32k`), `--max-model-len auto`, and the check at start-up that the KV cache holds one request of max_model_len.

Read in the PyPI sdist of every release from 0.6.0 to 0.34.0 (vllm/engine/arg_utils.py; human_readable_int moved to
vllm/utils/argparse_utils.py by 0.20.0, read there in 0.20.0 and 0.34.0):

- **The derived context** (`_get_and_verify_max_len`, vllm/config.py, vllm/config/model.py from 0.11): the
  config's max_position_embeddings, scaled by its RoPE scaling where the type is not su, longrope or llama3 (nor
  mrope, from 0.6.1), and not for a Gemma 3: by the factor (1 without one); YaRN's from its
  original_max_position_embeddings, before 0.30.0; from 0.30.0 YaRN (yarn, deepseek_yarn, deepseek_llama_scaling) is
  taken as already in max_position_embeddings, unscaled. From 0.12.0 rope_parameters may hold one entry per layer
  type: the factor is the last scaled one's. A longer --max-model-len is refused, as vLLM refuses it unless
  VLLM_ALLOW_LONG_MAX_MODEL_LEN is set (not modelled), and so is a scenario's longer max_model_len. The config as
  served: `--hf-overrides` (0.6.4 on; rope_scaling, rope_parameters, rope_theta and max_position_embeddings, the keys
  that change only the context: `CONTEXT_OVERRIDE_KEYS`), then `--rope-scaling` (0.6.0-0.11.0, merged into the
  overrides as ModelConfig does). With the sliding window off (`--disable-sliding-window`: `attention.sliding_window`
  false), max_position_embeddings is first capped at the config's window (before any RoPE factor: YaRN's
  original_max_position_embeddings replaces it, and from 0.30.0 YaRN leaves it); 0.6.0-0.11.x refuse the window off
  beside RoPE scaling of any type but su, longrope and llama3 (NotImplementedError "Disabling sliding window is not
  supported for models with rope_scaling"), a model without a window included. 0.6.0-0.6.3 turn Gemma 2's window off
  themselves (`vllm_window_off`; from 0.6.3.post1 only where the XFORMERS or FLASHINFER backend is forced on V0, not
  modelled). Not read: the tokenizer's model_max_length, which may cut it further, and the
  config's model_max_length (Command-R), which ServeSim's config reader does not keep.
- **Human-readable numbers** (`human_readable_int`): a number with a decimal suffix, k m g (x 10**3, 10**6, 10**9) or
  a binary one, K M G (x 2**10, 2**20, 2**30), decimals allowed with a decimal suffix only ("25.6k" is 25,600); t and
  T (10**12, 2**40) from 0.13.0 (before it the pattern takes them and the number is refused). The arguments that take
  them, each from the first release whose parser reads it so: --max-model-len 0.8.4, --max-num-batched-tokens 0.9.1,
  --kv-cache-memory-bytes 0.10.2 (its first release).
- **--max-model-len auto** (or -1, `human_readable_int_or_auto`, 0.14.0 on): the engine's configuration keeps the
  model's longest context; once the KV cache is sized, max_model_len becomes the longest one request of which it
  holds, where that is shorter (vllm/v1/core/kv_cache_utils.py `_auto_fit_max_model_len`, kv_cache_planning.py from
  0.33): `scheduler.fit_max_model_len`.
- **The start-up check** (`KV_HOLDS_MAX_MODEL_LEN`): every release refuses to start where the KV cache cannot hold
  one request of max_model_len: V0's vllm/worker/worker.py `raise_if_cache_size_invalid` (0.6.0-0.10.x: "The
  model's max seq len (...) is larger than the maximum number of tokens that can be stored in KV cache"), V1's
  `check_enough_kv_cache_memory` (0.8.0 on: "To serve at least one request with the models's max seq len ...").
  sim/config/deployment.py applies it where a preset has it (`EnginePreset.kv_holds_max_len`), with the request's
  token slots as ServeSim keeps them (`sequence_slots`: a sliding window's layers hold their window) in whole
  blocks. Not modelled: V0 with pipeline parallelism checks each of its virtual engines' share of the blocks, and
  0.34.0 leaves out the null block.
"""

from __future__ import annotations

import re
from typing import Any

from sim.config.engines.base import dotted_version, json_mapping, released_before, served_config
from sim.errors import ConfigError
from sim.model.hf_config import rope_entries

# each argument that takes a human-readable number -> the first release whose parser reads it so
VLLM_READABLE_SINCE = {"max_model_len": (0, 8, 4), "max_num_batched_tokens": (0, 9, 1),
                       "kv_cache_memory_bytes": (0, 10, 2)}
VLLM_READABLE_TERA_SINCE = (0, 13, 0)  # t and T
VLLM_MAX_MODEL_LEN_AUTO_SINCE = (0, 14, 0)  # --max-model-len auto (or -1)
READABLE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

KV_HOLDS_MAX_MODEL_LEN = ("vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory; V0: vllm/worker/worker.py "
                          "raise_if_cache_size_invalid")


def _since(version: tuple[int, ...], version_text: str, first: tuple[int, ...]) -> bool:
    return not released_before(version, version_text, first, pre_before=False)


def readable_number(name: str):
    """`Flag.read` for a vLLM argument that takes human-readable numbers (`name`: the flag): a word its release's
    parser reads becomes the number; another word is refused in one line. --max-model-len auto or -1 (0.14.0 on)
    reads as None: the derivation then fits max_model_len to the KV cache (`fits_to_kv`)."""
    def read(value: Any, version: tuple[int, ...], version_text: str) -> Any:
        auto = name == "max_model_len" and _since(version, version_text, VLLM_MAX_MODEL_LEN_AUTO_SINCE)
        if auto and (value == -1 and not isinstance(value, bool)
                     or isinstance(value, str) and value.strip().lower() in ("-1", "auto")):
            return None
        if not isinstance(value, str):
            return value
        since = VLLM_READABLE_SINCE[name]
        allowed = "a whole number" + (", or one with a suffix (32k, 1.5m, 64K)"
                                      if _since(version, version_text, since) else "")
        allowed += ", or auto" if auto else ""
        text = value.strip()
        if text.isdigit():
            return int(text)
        match = READABLE.fullmatch(text)
        tera = _since(version, version_text, VLLM_READABLE_TERA_SINCE)
        if (match and _since(version, version_text, since) and (tera or match.group(2) not in "tT")
                and not (match.group(2) in BINARY and "." in match.group(1))):
            number, suffix = match.groups()
            return int(float(number) * DECIMAL[suffix]) if suffix in DECIMAL else int(number) * BINARY[suffix]
        later = ""
        if not _since(version, version_text, since):
            later = f" (vLLM reads suffixes here from {dotted_version(since)})"
        elif match and not tera and match.group(2) in "tT":
            later = f" (t and T from vLLM {dotted_version(VLLM_READABLE_TERA_SINCE)})"
        elif name == "max_model_len" and text.lower() in ("-1", "auto"):
            later = f" (auto from vLLM {dotted_version(VLLM_MAX_MODEL_LEN_AUTO_SINCE)})"
        raise ConfigError(f"engine.{name}: {value!r} is not allowed by vLLM {version_text}; allowed: "
                          f"{allowed}{later}")
    return read


def fits_to_kv(ctx_flags: dict, version_text: str, notes: list[str]) -> dict[str, Any]:
    """The scenario values of --max-model-len auto (given: `max_model_len` read as None), noted; {} otherwise."""
    if "max_model_len" not in ctx_flags or ctx_flags["max_model_len"] is not None:
        return {}
    notes.append(f"vLLM {version_text} --max-model-len auto: max_model_len is the longest one request of which the "
                 "KV cache holds, up to the model's (scheduler.fit_max_model_len; vllm/v1/core/kv_cache_utils.py "
                 "_auto_fit_max_model_len)")
    return {"scheduler.fit_max_model_len": True}


# The RoPE types whose factor does not scale vLLM's derived context (`_get_and_verify_max_len`): su, longrope and
# llama3 in every release, mrope from 0.6.1 (its factor 1; 0.7.0 on patch it to default, without a factor), and from
# 0.30.0 the YaRN types, taken as already scaled into max_position_embeddings.
VLLM_UNSCALED_ROPE = ("su", "longrope", "llama3", "mrope")
VLLM_YARN_ROPE = ("yarn", "deepseek_yarn", "deepseek_llama_scaling")
VLLM_YARN_UNSCALED_SINCE = (0, 30, 0)
VLLM_ROPE_SCALING_UNTIL = (0, 11, 1)  # --rope-scaling and --rope-theta: in every sdist 0.6.0-0.11.0, gone in 0.11.1
VLLM_HF_OVERRIDES_SINCE = (0, 6, 4)
VLLM_WINDOW_OFF_WITH_ROPE_SINCE = (0, 12, 0)  # before: the window off beside scaled RoPE raises NotImplementedError
VLLM_WINDOW_OFF_ROPE = ("su", "longrope", "llama3")  # the types 0.6.0-0.11.x take beside the window off


def rope_scaling_override(value: Any) -> dict:
    """--rope-scaling as given (a JSON object on the command line): the RoPE scaling vLLM serves the model with."""
    value = json_mapping(value, "rope_scaling", "RoPE settings")
    rope_entries({"rope_scaling": value}, "engine.rope_scaling", "rope_scaling")
    return value


def vllm_context(ctx) -> tuple[int, str, bool]:
    """The context vLLM derives from the model's config as served (the module's docstring): (tokens, how, True: a
    longer max_model_len is refused)."""
    overrides = dict(ctx.flags.get("hf_overrides") or {})
    if ctx.flags.get("rope_scaling") is not None:
        overrides["rope_scaling"] = ctx.flags["rope_scaling"]
    positions, entries = served_config(ctx, overrides)
    if "gemma3" in (ctx.model.model_type or ""):
        entries = ()  # its max_position_embeddings is already scaled: vLLM skips the RoPE rule (and the check below)
    yarn_unscaled = _since(ctx.version, ctx.version_text, VLLM_YARN_UNSCALED_SINCE)
    unscaled = VLLM_UNSCALED_ROPE + (VLLM_YARN_ROPE if yarn_unscaled else ())
    derived, factor, how = positions, 1.0, f"max_position_embeddings {positions:,}"
    if ctx.window_off:
        derived, how = _window_capped(ctx, entries, derived, how)
    for entry in entries:
        if entry["rope_type"] in unscaled:
            continue
        factor = entry["factor"] if entry["factor"] is not None else factor
        if entry["rope_type"] == "yarn":
            original = entry["original_max_position_embeddings"]
            if original is None:
                raise ConfigError("engine: a yarn RoPE scaling without original_max_position_embeddings, which "
                                  f"vLLM {ctx.version_text} reads (KeyError); allowed: a yarn entry with it")
            derived, how = original, f"YaRN's original_max_position_embeddings {original:,}"
    if factor != 1:
        how += f" x its RoPE factor {factor:g}"
    return int(derived * factor), how, True


VLLM_GEMMA2_WINDOW_KEPT_SINCE = "0.6.3.post1"  # before it ModelConfig turns Gemma 2's sliding window off


def vllm_window_off(version: tuple[int, ...], version_text: str, model) -> str | None:
    """`EnginePreset.window_off`: vLLM 0.6.0-0.6.3 turn a Gemma 2's sliding window off and cap max_model_len at it
    (ModelConfig: "Gemma 2 uses sliding window attention for every odd layer, which is currently not supported by
    vLLM"); None for any other model or release."""
    if (model.model_type != "gemma2" or model.sliding_window is None
            or not released_before(version, version_text, VLLM_GEMMA2_WINDOW_KEPT_SINCE)):
        return None
    return (f"vLLM {version_text}: {model.name}'s sliding window turned off, every layer attending to every token "
            "(attention.sliding_window: false), as ModelConfig turns Gemma 2's off before 0.6.3.post1")


def _window_capped(ctx, entries: tuple[dict, ...], positions: int, how: str) -> tuple[int, str]:
    """The context before RoPE scaling with the sliding window off (the module's docstring): capped at the config's
    window; refused where the release refuses the window off beside the config's RoPE scaling."""
    scaled = [e["rope_type"] for e in entries if e["rope_type"] not in VLLM_WINDOW_OFF_ROPE]
    if scaled and not _since(ctx.version, ctx.version_text, VLLM_WINDOW_OFF_WITH_ROPE_SINCE):
        flag_given = ctx.flags.get("disable_sliding_window") is False  # (the flag's value as its target takes it)
        where = "engine.disable_sliding_window: true" if flag_given else "attention.sliding_window: false"
        raise ConfigError(f"{where} is refused by vLLM {ctx.version_text} beside {ctx.model.name}'s RoPE scaling "
                          f"({scaled[0]}): \"Disabling sliding window is not supported for models with rope_scaling\" "
                          f"(_get_and_verify_max_len); allowed: keep the window, or vLLM "
                          f"{dotted_version(VLLM_WINDOW_OFF_WITH_ROPE_SINCE)} or later")
    window = ctx.configured_window
    if window is None or window >= positions:
        return positions, how
    return window, f"its sliding window {window:,}, turned off, caps max_position_embeddings {positions:,}"
