"""The presets by engine name (`PRESETS`) and how a raw scenario gets its preset's values (`apply_engine_preset`):
the command line and flags read, each derived value written under what the scenario says.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import sim.config.engines.fitted as fitted
from sim.config.checkpoint import runs_fp8_products
from sim.config.engine_command import (CommandFlags, CommandSyntax, as_command_error, command_notes, command_program,
                                       resolve_option, served_model)
from sim.config.engines.base import (Context, ENGINE_LABELS, EnginePreset, PresetResult, dotted_version, get_key,
                                     canonical_version, has_key, model_of_value, outside_versions, parse_version,
                                     set_key)
from sim.config.engines.lmdeploy import (LMDEPLOY_FLAGS, LMDEPLOY_INERT, LMDEPLOY_NEWEST, LMDEPLOY_VERSIONS,
                                         derive_lmdeploy)
from sim.config.engines.releases import (ENGINE_RELEASES, RELEASES_READ, newest_release_before,
                                         unreleased_version)
from sim.config.engines.sparse_attention import check_sparse_attention
from sim.config.engines.sglang import (SGLANG_FLAGS, SGLANG_INERT, SGLANG_NEWEST, derive_sglang, sglang_context,
                                       sglang_fp8_without_fp8_cores)
from sim.config.engines.trtllm import (TRTLLM_FLAGS, TRTLLM_INERT, TRTLLM_NEWEST, derive_trtllm,
                                       trtllm_fp8_without_fp8_cores)
from sim.config.engines.vllm import VLLM_FLAGS, VLLM_INERT, VLLM_NEWEST, derive_vllm, vllm_fp8_without_fp8_cores
from sim.config.engines.vllm_context import KV_HOLDS_MAX_MODEL_LEN, vllm_context, vllm_window_off
from sim.config.engines.vllm_speculative import VLLM_SPECULATIVE_CONFIG_READ_SINCE
from sim.config.words import allowed_words, shown, type_words, union_words
from sim.errors import ConfigError, did_you_mean
from sim.model.specs import MAX_MODEL_DIM


PRESETS: dict[str, EnginePreset] = {
    "vllm": EnginePreset("vllm", ENGINE_LABELS["vllm"], (0, 6, 0), VLLM_NEWEST,
                         "vllm/engine/arg_utils.py, vllm/config.py",
                         VLLM_FLAGS, derive_vllm, inert=VLLM_INERT,
                         syntax=CommandSyntax(underscores=True, prefixes=True, negation=True, attached=("-O",),
                                              programs=("vllm",)),
                         fp8_without_fp8_cores=vllm_fp8_without_fp8_cores, kv_holds_max_len=KV_HOLDS_MAX_MODEL_LEN,
                         context=vllm_context, window_off=vllm_window_off),
    "sglang": EnginePreset("sglang", ENGINE_LABELS["sglang"], (0, 3, 0), SGLANG_NEWEST,
                           "python/sglang/srt/server_args.py",
                           SGLANG_FLAGS, derive_sglang, inert=SGLANG_INERT,
                           syntax=CommandSyntax(prefixes=True, programs=("sglang",)),
                           decodes_within_budget=False, fp8_without_fp8_cores=sglang_fp8_without_fp8_cores,
                           context=sglang_context),
    "trtllm": EnginePreset("trtllm", ENGINE_LABELS["trtllm"], (0, 14, 0), TRTLLM_NEWEST,
                           "tensorrt_llm/llmapi/llm_args.py",
                           TRTLLM_FLAGS, derive_trtllm, inert=TRTLLM_INERT,
                           syntax=CommandSyntax(programs=("trtllm-serve", "tensorrt_llm")),
                           fp8_without_fp8_cores=trtllm_fp8_without_fp8_cores),
    "lmdeploy": EnginePreset("lmdeploy", ENGINE_LABELS["lmdeploy"], (0, 1, 0), LMDEPLOY_NEWEST,
                             "src/turbomind/models/llama/LlamaBatch.cc (0.1.0a), src/turbomind/engine/scheduler.cc",
                             LMDEPLOY_FLAGS, derive_lmdeploy, LMDEPLOY_VERSIONS, inert=LMDEPLOY_INERT,
                             syntax=CommandSyntax(prefixes=True, programs=("lmdeploy",))),
}


def named_engine(spec: Any) -> Any:
    """The engine a raw `engine` section names: its `name`, or where it gives none, the engine whose program its
    `command` starts (`vllm serve ...`: vllm). A command starting another engine's program than the name's is refused
    in one line."""
    if not isinstance(spec, dict):
        return None
    name = spec.get("name")
    program = command_program(spec.get("command"))
    runs = next((engine for engine, preset in PRESETS.items()
                 if program is not None and program[1] in preset.syntax.programs), None)
    if runs is None:
        return name
    if name is not None and name != runs:
        raise ConfigError(f"engine.command: {program[0]!r} starts {PRESETS[runs].label}, not engine.name {name!r}; "
                          f"allowed: engine.name {runs}, or a {name} command")
    return runs


def _read_section_command(spec: Any) -> CommandFlags | None:
    """An `engine` section's launch command as its preset reads it; None without one, or where the section does not
    read (apply_engine_preset refuses it in its own line)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("command"), str):
        return None
    try:
        name = named_engine(spec)
        version = parse_version(canonical_version(spec["version"])) if isinstance(spec.get("version"), str) else None
        return PRESETS[name].read_command(spec["command"], version) if name in PRESETS and version else None
    except (ConfigError, TypeError):
        return None


def command_served_model(spec: Any) -> str | None:
    """The model an `engine` section's launch command serves, as written (`served_model`); None without a command
    naming one, or where the section does not read."""
    read = _read_section_command(spec)
    return served_model(spec["command"], read) if read is not None else None


def model_from_command(raw: dict) -> dict:
    """The raw scenario with the model its engine's launch command serves (`vllm serve Qwen/Qwen3-32B`: qwen3-32b)
    where it names no `model`, which would otherwise price the default model for a command serving another.
    Refused in one line: a command's model the catalog lacks where the scenario names none, and a catalog model
    that is not the scenario's catalog model: another architecture, or the same in other weights
    (Qwen/Qwen3-32B-FP8 beside `model: qwen3-32b` is the scenario's architecture served in fp8: it must say
    `quantization.weights: fp8`). A name the catalog lacks (a local path) beside the scenario's model, or a
    command that does not read (apply_engine_preset refuses it), leaves the scenario as it is."""
    spec = raw.get("engine")
    read = _read_section_command(spec)
    served = served_model(spec["command"], read) if read is not None else None
    if served is None:
        return raw
    from sim.model.catalog import catalog_mismatch, catalog_model_name, named_weights_conflict
    catalog = catalog_model_name(served)
    if "model" not in raw:
        if catalog is None:
            raise ConfigError(f"engine.command: serves {served!r}, which is not a catalog model, and the scenario "
                              "names no model; allowed: a catalog model or its Hugging Face repo id (servesim "
                              "catalog models), or the scenario's model: (a catalog name, or {hf_config: "
                              "path/to/config.json})")
        return {**raw, "model": catalog}
    given = raw["model"]
    mismatch = catalog_mismatch(served, given, get_key(raw, "quantization.weights")) if isinstance(given, str) else None
    if mismatch is None:
        flags_say = "quantization" in spec or "quantization" in read.flags  # the engine's own weights flag
        conflict = (named_weights_conflict(served, given, get_key(raw, "quantization.weights"))
                    if isinstance(given, str) and not flags_say else None)
        if conflict is not None:  # a checkpoint the catalog lacks whose name says other weights (Qwen/Qwen3-8B-FP8)
            named, asked = conflict
            raise ConfigError(f"engine.command: serves {served!r}, whose name says {named} weights, not the "
                              f"scenario's {asked} (quantization.weights); allowed: quantization.weights {named}, or "
                              f"a command serving {asked} weights")
        return raw
    kind, name, weights, asked = mismatch
    if kind == "weights":
        raise ConfigError(f"engine.command: serves {served!r} ({name}, {weights} weights), not the scenario's model "
                          f"{given!r} in {asked} weights; allowed: model: {name}, or quantization.weights "
                          f"{weights.replace('16-bit', 'bf16')}")
    raise ConfigError(f"engine.command: serves {served!r} ({name}), not the scenario's model {given!r}; "
                      "allowed: the same model in both, or leave the scenario's model out")


def _resolve_gpu_and_model(raw: dict):
    from sim.model.catalog import resolve_gpu
    from sim.model.specs import GPUSpec
    from pydantic import ValidationError
    hardware = raw.get("hardware") or {}
    given = hardware.get("gpu", "h100-sxm") if isinstance(hardware, dict) else "h100-sxm"
    if not isinstance(given, (str, dict)):  # the preset derives from the GPU: it must be readable first
        raise ConfigError(f"hardware.gpu: {shown(given)} is not allowed; allowed: {union_words((str, GPUSpec))}")
    try:
        gpu = resolve_gpu(given)
    except ValidationError as err:  # (sim.config.messages imports the schema, which imports this module)
        first = err.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "missing":
            raise ConfigError(f"hardware.gpu.{where}: missing; it is required") from None
        field = GPUSpec.model_fields.get(str(first["loc"][0])) if first["loc"] else None
        allowed = allowed_words(first, field.annotation) if field is not None else None
        raise ConfigError(f"hardware.gpu.{where}: {shown(first.get('input'))} is not allowed; allowed: "
                          f"{allowed or first['msg']}") from None
    return gpu, model_of_raw(raw)


def model_of_raw(raw: dict):
    """The ModelSpec a raw scenario names, or None where it cannot be read yet (validation then reports it)."""
    return model_of_value(raw.get("model", "llama-3.1-8b"), "model")


@dataclass(frozen=True)
class AppliedPreset:
    """What `apply_engine_preset` gives: the raw scenario and what the validated scenario keeps on its engine."""
    raw: dict  # the raw scenario with the engine preset's values written under the scenario's own (a copy)
    # the preset's CPU terms: the `overhead` section it gives a cost model, which `sim.config.cost_choice` uses when
    # the scenario names no cost model
    overhead: dict | None = None
    notes: list[str] = field(default_factory=list)  # what the preset approximates, one line each: `EngineSpec.notes`
    # {scenario key a flag set: the flag as the user wrote it}, for errors about such a key: `EngineSpec.set_by`,
    # `as_flag_error`
    set_by: dict[str, str] = field(default_factory=dict)
    v0_fallback: bool = False  # `PresetResult.v0_fallback`: `EngineSpec.v0_fallback`


def apply_engine_preset(raw: dict, value_problem: Callable[[str, Any, str], str | None] | None = None,
                        fits: dict | None = None) -> AppliedPreset:
    """The engine preset applied to a raw scenario (`AppliedPreset`); the scenario as it is without an engine.
    `value_problem(scenario key, value, flag)` (the schema's
    `field_value_problem`) says in one line when a flag's value is not allowed in the key it sets. `fits`: the
    fitted numbers to read, as engine_terms.json holds them (None: the shipped ones)."""
    spec = raw.get("engine")
    if spec is None:
        return AppliedPreset(raw)
    if not isinstance(spec, dict):
        raise ConfigError(f"engine: {spec!r} is not allowed; allowed: a mapping with name, version and the "
                          "engine's flags")
    name = named_engine(spec)
    if "name" not in spec and name is not None:
        spec = {**spec, "name": name}
    if not isinstance(name, str) or name not in PRESETS:  # (a list or a mapping is not hashable)
        given = "missing" if name is None else f"{name!r} is not an engine preset{_engine_meant(name)}"
        raise ConfigError(f"engine.name: {given}; allowed: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    version_text = spec.get("version")
    if not isinstance(version_text, str):
        given = "missing" if version_text is None else f"{version_text!r} is not allowed"
        raise ConfigError(f"engine.version: {given}; allowed: a quoted version string of "
                          f"{name}, {preset.known_versions()} (e.g. \"{ENGINE_RELEASES[name][-1]}\")")
    written, version_text = version_text, canonical_version(version_text)
    version = parse_version(version_text)
    if version is None or not (preset.oldest <= version < preset.newest[:2] + (1 << 30,)):
        raise ConfigError(f"engine.version: {written!r} is not a {name} version the preset knows; allowed: "
                          f"{preset.known_versions()}")
    around = unreleased_version(name, version_text)
    if around is not None:
        raise ConfigError(f"engine.version: {written!r} is not a {name} release ({RELEASES_READ}); allowed: a release "
                          f"of {preset.known_versions()}, the nearest {' and '.join(around)}")
    # every rule, fit and label reads the release as named in full ("0.11" took 0.10's side of a 0.11.0 bound)
    spec = {**spec, "version": version_text}
    raw = {**raw, "engine": spec}
    newest = newest_release_before(name, version_text)
    unlisted = [f"{preset.label} {version_text}: newer than every release the preset lists ({RELEASES_READ}, to "
                f"{newest}), so modelled by the rules of the releases before it"] if newest else []
    given, command = _given_flags(spec, preset, version, version_text)
    written = raw
    if command is None:
        raw, overhead, result, set_by = _apply_flags(raw, name, preset, version, version_text, given, value_problem,
                                                     fits)
        _refuse_brought_to_disaggregation(written, raw, f"{preset.label} {version_text}")
        return AppliedPreset(raw, overhead, unlisted + result.notes,
                             {dotted: f"engine.{flag}" for dotted, flag in set_by.items()}, result.v0_fallback)
    apart = set(spec) - {"name", "version", "command"}
    _refuse_speculation_not_launched(raw, name, given, version, f"{preset.label} {version_text}")
    try:
        raw, overhead, result, set_by = _apply_flags(raw, name, preset, version, version_text, given, value_problem,
                                                     fits)
    except ConfigError as err:
        raise as_command_error(err, command, apart) from None
    _refuse_brought_to_disaggregation(written, raw, f"{preset.label} {version_text}")
    return AppliedPreset(raw, overhead, unlisted + result.notes + command_notes(command), {
        dotted: (f"engine.command {command.written[flag]!r}" if flag in command.written and flag not in apart
                 else f"engine.{flag}") for dotted, flag in set_by.items()}, result.v0_fallback)


# The flag an engine speculates only with, by preset (vllm/engine/arg_utils.py, sglang/srt/server_args.py)
SPECULATION_FLAGS = {"vllm": "speculative_config", "sglang": "speculative_algorithm"}


def _refuse_speculation_not_launched(raw: dict, name: str, given: dict, version: tuple[int, ...],
                                     engine: str) -> None:
    """A speculation section beside a launch command that does not speculate (vLLM's without --speculative-config,
    SGLang's without --speculative-algorithm) is refused in one line: that command starts an engine that does not
    speculate, where the section was taken as the drafter it describes. Without a command (the engine's flags as
    keys) the section alone still is, as the preset notes."""
    flag = SPECULATION_FLAGS.get(name)
    if flag is None or raw.get("speculation") is None or given.get(flag) is not None:
        return
    option = "--" + flag.replace("_", "-")
    launch = f"{option} in the command (the section then prices its drafter), "
    if name == "vllm" and version < VLLM_SPECULATIVE_CONFIG_READ_SINCE:
        launch = f"(its {option} is read from vLLM {dotted_version(VLLM_SPECULATIVE_CONFIG_READ_SINCE)}) "
    raise ConfigError(f"speculation: engine.command has no {option}, so the {engine} it starts does not speculate; "
                      f"allowed: {launch}the engine's flags as keys in place of the command (the section then taken "
                      "as its drafter), or no speculation section (speculation: null in a variant)")


# What a colocated deployment may have and a disaggregated one does not model yet (the scenario's checks refuse each:
# Scenario._frontend_fits, sim/config/disaggregation.py), an engine preset bringing both: (key, in words, its fix)
COLOCATED_ONLY = (("frontend", "its API front-end", "frontend: null"),
                  ("kv_cache.enable_prefix_caching", "prefix caching", "kv_cache.enable_prefix_caching: false"))


def colocated_only(raw: dict) -> list[tuple[str, str, str]]:
    """The COLOCATED_ONLY entries a raw (or dumped) scenario has on."""
    return [entry for entry in COLOCATED_ONLY if get_key(raw, entry[0])]


def _refuse_brought_to_disaggregation(written: dict, raw: dict, engine: str) -> None:
    """What a preset brings that a disaggregated deployment does not model yet (`COLOCATED_ONLY`), where the scenario
    did not write it: refused in one line naming both and how to leave them out, where the scenario's checks would
    name a key the user never wrote ("frontend: not allowed"), one at a time."""
    hardware = raw.get("hardware")
    if not isinstance(hardware, dict) or hardware.get("disaggregation") is None:
        return
    brought = [(words, fix) for key, words, fix in colocated_only(raw) if not has_key(written, key)]
    if brought:
        them = "them" if len(brought) > 1 else "it"
        raise ConfigError(f"hardware.disaggregation: engine {engine} brings {' and '.join(b[0] for b in brought)}, "
                          "not modelled with a disaggregated deployment yet; allowed: "
                          f"{' and '.join(b[1] for b in brought)} (simulated without {them}), or a colocated "
                          "deployment")


def _flag_meant(key: str, name: str) -> str:
    """What a flag the preset does not have most likely meant, in words for its error: the flag as the command line
    spells it ('max-num-seqs'), the closest spelling ('max_num_seq'), or another engine's flag; '' if none."""
    flags, underscored = PRESETS[name].flags, str(key).replace("-", "_")
    if underscored in flags:
        return did_you_mean(underscored)
    close = difflib.get_close_matches(str(key), list(flags), n=1)
    if close:
        return did_you_mean(*close)
    elsewhere = [other for other, preset in PRESETS.items() if other != name and key in preset.flags]
    return f" (a flag of the {' and '.join(elsewhere)} preset{'s' * (len(elsewhere) > 1)})" if elsewhere else ""


def _engine_meant(name) -> str:
    """' (did you mean ...?)' for an engine named as its project spells it ('TensorRT-LLM', 'trt-llm', 'vLLM'),
    or ''."""
    def letters(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())
    if not isinstance(name, str):
        return ""
    found = [key for key in PRESETS if letters(name) in (letters(key), letters(ENGINE_LABELS[key].split(" (")[0]))]
    return did_you_mean(*found[:1])


def _given_flags(spec: dict, preset: EnginePreset, version: tuple[int, ...],
                 version_text: str) -> tuple[dict, CommandFlags | None]:
    """(the flags an engine section gives: its `engine.<flag>` keys and its command's, the command as read, or None
    without one). A flag given both ways must agree, and an option accepted without effect must be one the
    version's parser still has; refused in one line otherwise."""
    given = {key: value for key, value in spec.items() if key not in ("name", "version", "command")}
    if "command" not in spec:
        return given, None
    command = preset.read_command(spec["command"], version)
    for written, option in command.inert:
        outside = outside_versions(version, version_text, option.since, option.until)
        if outside:
            raise ConfigError(f"engine.command {written!r}: not an option of {preset.name} {version_text} "
                              f"({outside[0]}); allowed: leave it out, or {outside[1]}")
    for key, value in command.flags.items():
        if key in given and given[key] != value:
            raise ConfigError(f"engine.command {command.written[key]!r}: contradicts engine.{key} {given[key]!r}; "
                              "allowed: give one of them, or the same value")
        given[key] = value
    return given, command


def _apply_flags(raw: dict, name: str, preset: EnginePreset, version: tuple[int, ...], version_text: str, given: dict,
                 value_problem, fits: dict | None = None) -> tuple[dict, dict | None, PresetResult, dict[str, str]]:
    """apply_engine_preset once the engine's name, version and flags (`given`) are known: (the raw scenario, the
    preset's CPU terms, what the preset derived, {scenario key: flag}), the last naming each flag by its key, or by
    the part of an expanding flag's value that gave it."""
    flags = {}
    given, origins = _expand_flags(given, name, preset, version, version_text)
    for key, value in given.items():
        try:
            flags[key] = _checked_flag(key, value, name, preset, version, version_text)
        except ConfigError as err:
            raise _from_origin(err, origins) from None
    if get_key(raw, "scheduler.batching") == "static":
        raise ConfigError(f"scheduler.batching: 'static' contradicts engine {name} (it batches continuously); "
                          "allowed: continuous, or leave engine out")
    # a flag's value is checked as the user's would be: before the derivation reads it (a TP of 0, a block of 0 tokens)
    # and, as the derivation wrote it, before any contradiction
    for key, value in flags.items():
        target = preset.flags[key].target
        if target is not None and value is not None and not (target == "hardware.expert_parallel"
                                                             and isinstance(value, bool)):  # (True: the whole TP)
            _refuse_flag_value(value_problem, target, value, origins.get(key, key))
    raw = copy.deepcopy(raw)
    try:
        result = _derive(raw, name, preset, version, version_text, flags, fits)
    except ConfigError as err:
        raise _from_origin(err, origins) from None
    for dotted, flag in result.from_flags.items():
        _refuse_flag_value(value_problem, dotted, result.values[dotted], origins.get(flag, flag))
    # (a key the scenario gives too must agree with its flag, below: the flag is named for it alike)
    set_by = {dotted: origins.get(flag, flag) for dotted, flag in result.from_flags.items() if flag is not None}
    for dotted, value in result.values.items():
        if dotted.startswith("frontend."):
            continue  # placed below, once the scenario's front-end is known
        if has_key(raw, dotted):
            flag = result.from_flags.get(dotted)
            _check_flag_agrees(flag, dotted, value, get_key(raw, dotted), given.get(flag, value))
            continue  # the scenario's own value wins over the preset's default
        if dotted.startswith("cost_model."):
            continue  # handled below: only a cost model that takes engine terms gets them
        set_key(raw, dotted, value)
    overhead = result.values.get("cost_model.overhead")
    _apply_cost_terms(raw, overhead)
    for dotted, value in result.values.items():
        if dotted.startswith("frontend."):
            _place_frontend_value(raw, dotted, value, result.from_flags.get(dotted), result.notes)
    return raw, overhead, result, set_by


def as_flag_error(err: ConfigError, scenario) -> ConfigError:
    """An error about a scenario key that an engine flag set, not the scenario (`scheduler.max_model_len: ...` from
    the deployment's checks, where TensorRT-LLM's --max_seq_len gave it), as one about the flag the user wrote
    (`EngineSpec.set_by`): `engine.max_seq_len (sets scheduler.max_model_len): ...`, or `engine.command
    '--max_seq_len 1000000' (sets ...)`. Errors about the scenario's own keys as they are."""
    text = str(err)
    dotted = text.split(":", 1)[0]
    flag = scenario.engine.set_by.get(dotted) if scenario.engine is not None else None
    return err if flag is None else ConfigError(f"{flag} (sets {dotted}):{text[len(dotted) + 1:]}")


# The words of the scheduler's rejection reasons (`SchedulerBase.rejection_reason`) that name scenario keys: {word:
# (the keys, how the note says the engine's flags for them, how it says the flag the scenario gave)}
REASON_KEYS = {
    "max_num_batched_tokens": (("scheduler.max_num_batched_tokens",), "max_num_batched_tokens is {}",
                               "max_num_batched_tokens is set by {}"),
    "chunked_prefill": (("scheduler.chunked_prefill",), "chunked_prefill is {}", "chunked_prefill is set by {}"),
    "max_model_len": (("scheduler.max_model_len",), "max_model_len is {}", "max_model_len is set by {}"),
    "cache": (("kv_cache.capacity_tokens", "kv_cache.gpu_memory_utilization"), "the cache is sized by {}",
              "the cache is sized by {}"),
}


def engine_spelling(text: str, scenario) -> str:
    """Where `text`, in the scheduler's words (a rejected request's reason: `SchedulerBase.rejection_reason`), names
    a scheduler key that the scenario's engine sets from its own flags, those flags as the engine spells them:
    "under TensorRT-LLM 1.2.0rc1, max_num_batched_tokens is --max_num_tokens (engine.max_num_tokens) and
    chunked_prefill is --enable_chunked_prefill (engine.enable_chunked_prefill)"; the flag the scenario gave where it
    gave one (`EngineSpec.set_by`). "" without an engine, or where no such key is named."""
    engine = scenario.engine
    if engine is None:
        return ""
    preset = PRESETS[engine.name]
    version = parse_version(engine.version)
    parts = []
    for word, (keys, by_flags, by_given) in REASON_KEYS.items():
        if not re.search(rf"\b{word}\b", text):
            continue
        given = [engine.set_by[dotted] for dotted in keys if dotted in engine.set_by]
        if given:
            parts.append(by_given.format(given[0]))
            continue
        flags = [f"{flag.option} (engine.{key})" if flag.option else f"engine.{key}"
                 for key, flag in preset.flags.items()
                 if (flag.target in keys or set(keys) & set(flag.decides))
                 and not outside_versions(version, engine.version, flag.since, flag.until)]
        if flags:
            parts.append(by_flags.format(" or ".join(flags)))
    if not parts:
        return ""
    listed = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return f"under {preset.label} {engine.version}, {listed}"


def _checked_flag(key: str, value, name: str, preset: EnginePreset, version: tuple[int, ...], version_text: str):
    """A flag's value as its preset takes it (converted), refused in one line where the preset has no such flag, the
    value is of the wrong kind, or the version does not have the flag or the value."""
    flag = preset.flags.get(key)
    if flag is None:
        raise ConfigError(f"engine.{key}: not a flag of the {name} preset{_flag_meant(key, name)}; allowed: "
                          f"{', '.join(sorted(preset.flags))}")
    outside = outside_versions(version, version_text, flag.since, flag.until)
    if outside:
        raise ConfigError(f"engine.{key}: not a flag of {name} {version_text} ({outside[0]}); allowed: leave it "
                          f"out, or {outside[1]}")
    if flag.read is not None:
        value = flag.read(value, version, version_text)
        if value is None:
            return None
    kinds = flag.kind if isinstance(flag.kind, tuple) else (flag.kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        raise ConfigError(f"engine.{key}: {value!r} is not allowed; allowed: {type_words(kinds)}")
    if isinstance(value, float) and not math.isfinite(value):  # no engine flag means anything by inf or nan
        raise ConfigError(f"engine.{key}: {value!r} is not allowed; allowed: a finite number")
    by_value = flag.value_versions.get(value) if isinstance(value, str) else None
    outside = by_value and outside_versions(version, version_text, *by_value)
    if outside:
        raise ConfigError(f"engine.{key}: {value!r} is not a value of {name} {version_text}'s {flag.option or key} "
                          f"({outside[0]}); allowed: another value, or {outside[1]}")
    return flag.convert(value)


def _expand_flags(given: dict, name: str, preset: EnginePreset, version: tuple[int, ...],
                  version_text: str) -> tuple[dict, dict[str, str]]:
    """(`given` with each expanding flag (`Flag.expands`) replaced by the flags its value gives, {such a flag: where
    it came from, `<expanding flag>.<part>`}). A flag given both ways must agree; refused in one line otherwise."""
    out, origins = dict(given), {}
    for key, value in given.items():
        flag = preset.flags.get(key)
        if flag is None or flag.expands is None:
            continue
        _checked_flag(key, value, name, preset, version, version_text)  # its kind and versions, before its parts
        del out[key]
        for sub, (where, sub_value) in flag.expands(value).items():
            origin = f"{key}.{where}"
            if sub in out and out[sub] != sub_value:
                raise ConfigError(f"engine.{origin}: {sub_value!r} contradicts engine.{sub} {out[sub]!r}; allowed: "
                                  "give one of them, or the same value")
            out[sub], origins[sub] = sub_value, origin
    return out, origins


def _from_origin(err: ConfigError, origins: dict[str, str]) -> ConfigError:
    """An error about a flag an expanding flag gave (`engine.<flag>: ...`), as one about the part of its value that
    gave it; other errors as they are."""
    text = str(err)
    for key, origin in origins.items():
        if text.startswith(f"engine.{key}:"):
            return ConfigError(f"engine.{origin}:{text[len(f'engine.{key}:'):]}")
    return err


def _refuse_flag_value(value_problem, dotted: str, value, flag: str) -> None:
    """`value_problem` (the schema's, in one line) for an engine flag's value in the scenario key it sets."""
    problem = value_problem(dotted, value, f"engine.{flag}") if value_problem else None
    if problem:
        raise ConfigError(problem)


def refuse_unrun_fp8(ctx: Context, preset: EnginePreset, flag: str | None) -> None:
    """fp8 weights on a GPU without fp8 tensor cores, refused in one line where this version of the engine does not
    run them (`EnginePreset.fp8_without_fp8_cores`), never priced as if it did. `flag`: the engine flag that set the
    weights' dtype, if one did."""
    rule = preset.fp8_without_fp8_cores
    if rule is None or runs_fp8_products(ctx.gpu):
        return
    block_scaled = bool(get_key(ctx.raw, "quantization.fp8_block_scales"))
    why = rule(ctx.version, block_scaled, ctx.model is not None and ctx.model.is_moe)
    if why is None:
        return
    where = f"engine.{flag}" if flag else "quantization.weights"
    kind = "block-scaled " if block_scaled else ""
    raise ConfigError(f"{where}: {kind}fp8 weights on {ctx.gpu.name}, which has no fp8 tensor cores, are not run by "
                      f"{preset.label} {ctx.version_text}: {why}; allowed: bf16 weights, or a GPU with an fp8 rate "
                      f"({', '.join(fp8_gpu_names())})")


def fp8_gpu_names() -> list[str]:
    """The catalog's GPUs with an fp8 rate (fp8 tensor cores)."""
    from sim.model.catalog import GPUS
    return [name for name, gpu in GPUS.items() if runs_fp8_products(gpu)]


def option_flag_name(engine: str, option: str) -> str | None:
    """The preset flag a command-line option sets, spelled as the engine's parser reads it (`engine.command`: its
    aliases, vLLM's underscores, argparse's unambiguous prefixes), or None where it sets none (an option accepted
    without effect, an ambiguous prefix, one the preset does not know)."""
    preset = PRESETS[engine]
    options = preset.options()
    try:
        spelled, _ = resolve_option(option.partition("=")[0], options, preset.inert_options(), preset.syntax)
    except ConfigError:
        return None
    return options[spelled][0] if spelled in options else None


def _place_frontend_value(raw: dict, dotted: str, value, flag: str | None, notes: list[str]) -> None:
    """A front-end value of the preset's (`frontend.<key>`: the engine's streamed chunk size, its API server count)
    into the scenario's front-end (the preset's or its own) where it has one and does not give its own; the engine's
    flag for it (`flag`, e.g. SGLang's stream_interval) and a different value of the scenario's contradict each
    other. Without a front-end nothing reaches a client through one: nothing is set (a flag that asked is noted)."""
    front = raw.get("frontend")
    key = dotted.split(".", 1)[1]
    if not isinstance(front, dict):
        if flag is not None and front is None:
            notes.append(f"engine.{flag} {value}: the scenario has no front-end, so it changes nothing (add a "
                         "frontend: section to model one)")
        return
    given = front.get(key)
    if given is None:
        front[key] = value
    else:
        _check_flag_agrees(flag, dotted, value, given)


def _check_flag_agrees(flag: str | None, dotted: str, value, given, as_written=None) -> None:
    """The value an engine flag (`flag`; None: a preset default, which the scenario's own overrides) set for `dotted`
    and the scenario's own `given` there: different, they contradict each other, refused in one line naming the flag's
    value `as_written` and, where it differs, the value it sets (--disable-sliding-window true sets
    attention.sliding_window false)."""
    if flag is not None and given != value:
        shown = repr(value)
        if as_written is not None and as_written != value:
            shown = f"{as_written!r} (sets {dotted} {value!r})"
        raise ConfigError(f"engine.{flag}: {shown} contradicts {dotted} {given!r}; allowed: give one of them, or "
                          "the same value")


def _unvalidated_derivation(raw: dict) -> PresetResult | None:
    """The preset's derivation for a raw scenario that is not validated, or None without an engine, or with a name,
    version or command the preset refuses (validation says why)."""
    spec = raw.get("engine")
    if not isinstance(spec, dict) or spec.get("name") not in PRESETS:
        return None
    version_text = canonical_version(str(spec.get("version", "")))
    version = parse_version(version_text)
    if version is None:
        return None
    preset = PRESETS[spec["name"]]
    try:
        flags, command = _given_flags(spec, preset, version, version_text)
    except ConfigError:
        return None
    result = _derive(copy.deepcopy(raw), spec["name"], preset, version, version_text, flags)
    if command is not None:
        result.notes.extend(command_notes(command))
    return result


def preset_notes(raw: dict) -> list[str]:
    """What the preset of a raw scenario's engine approximates (a default read at another version than the one
    named, a term not yet fitted), one line each; [] without an engine. For a raw scenario that is not validated
    (the published suite's cases); a validated scenario keeps the notes of its one derivation: `EngineSpec.notes`."""
    result = _unvalidated_derivation(raw)
    return result.notes if result is not None else []


def preset_keys(raw: dict) -> set[str]:
    """The scenario keys (dotted) the preset of a raw scenario's engine sets: where the scenario's own value would
    win over the engine's default (the dashboard drops its form's defaults there when an engine is chosen); empty
    without an engine, or with a name or version the preset refuses."""
    result = _unvalidated_derivation(raw)
    return set(result.values) if result is not None else set()


def fitted_versions(name: str) -> list[str]:
    """The versions of an engine with a fit of their own on published runs (engine_terms.json), oldest first. A term
    such a fit left at a bound or did not pin is not used (`usable_terms`): the preset's notes say which."""
    table = fitted.fitted_table().get("engines", {}).get(name, {})
    return sorted((v for v in table if parse_version(v) is not None), key=parse_version)


# Scenario keys the derivation reads (the GPUs a model is split over, the KV bytes memory is sized with): an engine
# flag that sets one is written into the scenario before deriving, where the scenario gives none (a different own
# value is a contradiction, refused after the derivation).
DERIVATION_INPUTS = ("hardware.tensor_parallel", "hardware.pipeline_parallel", "quantization.kv_cache",
                     "attention.sliding_window", "kv_cache.weights_offload_bytes")


def _derive(raw: dict, name: str, preset: EnginePreset, version: tuple[int, ...], version_text: str,
            flags: dict, fits: dict | None = None) -> PresetResult:
    gpu, model = _resolve_gpu_and_model(raw)
    written = []  # the derivation inputs written from a flag
    for key, flag in preset.flags.items():
        if flag.target in DERIVATION_INPUTS and flags.get(key) is not None and not has_key(raw, flag.target):
            set_key(raw, flag.target, flags[key])
            written.append(flag.target)
    hardware = raw.get("hardware") or {}
    tp = hardware.get("tensor_parallel", 1) if isinstance(hardware, dict) else 1
    pp = hardware.get("pipeline_parallel", 1) if isinstance(hardware, dict) else 1
    length_flag = next((key for key, flag in preset.flags.items() if flag.target == "scheduler.max_model_len"), None)
    length = flags.get(length_flag)
    forced = None  # the engine's own rule turns the window off (`EnginePreset.window_off`), the scenario silent
    if preset.window_off is not None and model is not None and not has_key(raw, "attention.sliding_window"):
        forced = preset.window_off(version, version_text, model)
    window_off = forced is not None or get_key(raw, "attention.sliding_window") is False
    served = model.served(not window_off) if model is not None else None  # the rules read the model as served
    ctx = Context(version, version_text, flags, gpu, tp if isinstance(tp, int) else 1,
                  pp if isinstance(pp, int) else 1, served, raw, length if isinstance(length, int) else None,
                  configured_window=model.sliding_window if window_off and model is not None else None,
                  window_off=window_off, fits=fits)
    how = _derived_context(ctx, preset, length_flag)
    check_sparse_attention(ctx, name, preset.label)
    result = preset.derive(ctx)
    if forced is not None:
        result.values["attention.sliding_window"] = False
        result.notes.append(forced)
    if how is not None and ctx.given_max_model_len() is None and ctx.derived_context != model.max_context:
        result.values["scheduler.max_model_len"] = ctx.derived_context
        result.notes.append(f"{preset.label} {version_text}: max_model_len {ctx.derived_context:,}, the context it "
                            f"derives from {model.name}'s config ({how})")
    for target in written:  # a flag's input the derivation sets otherwise (SGLang's --tp under data-parallel attention)
        if result.from_flags.get(target) is not None and target in result.values:
            set_key(raw, target, result.values[target])
    for key, flag in preset.flags.items():
        if flag.target is not None and key in flags and flags[key] is not None:  # None: the engine's "auto"
            if result.from_flags.get(flag.target) == key and flag.target in result.values:
                continue  # the derivation set the flag's target from it itself
            value = flags[key]
            if flag.target == "hardware.expert_parallel" and isinstance(value, bool):
                if not value:
                    continue
                # the engine splits the experts over its whole TP group, or over the GPUs its derivation spreads
                # them over (vLLM's data-parallel ranks: vllm_data_parallel.py)
                value = result.values.get(flag.target, ctx.tensor_parallel)
            result.values[flag.target] = value
            result.from_flags[flag.target] = key
    # fp8 weights run as the engine runs them, or are refused where it cannot (`refuse_unrun_fp8`): W8A8 where the GPU
    # has fp8 tensor cores, weight-only elsewhere, for weights its --quantization flag asked for and, where the
    # engine's fp8 handling was read (`EnginePreset.fp8_without_fp8_cores`), the scenario's own; its fp8_compute wins
    flag = result.from_flags.get("quantization.weights")
    weights = result.values["quantization.weights"] if flag else get_key(raw, "quantization.weights")
    if weights == "fp8":
        refuse_unrun_fp8(ctx, preset, flag)
        if (flag or preset.fp8_without_fp8_cores is not None) and not has_key(raw, "quantization.fp8_compute"):
            result.values["quantization.fp8_compute"] = runs_fp8_products(gpu)
    return result


def _derived_context(ctx: Context, preset: EnginePreset, length_flag: str | None) -> str | None:
    """How the engine derives its longest context (`EnginePreset.context`), set on `ctx.derived_context`; None where
    it has no rule or the model is not resolved. A longer max_model_len is refused in one line, as the engine refuses
    it (vLLM's _get_and_verify_max_len, SGLang's _derive_context_length: both unless an environment variable allows
    it, which is not modelled)."""
    if preset.context is None or ctx.model is None:
        return None
    ctx.derived_context, how, refuses = preset.context(ctx)
    if not 1 <= ctx.derived_context <= MAX_MODEL_DIM:  # a RoPE factor of 1e6 or 1e-300: no model's context
        tokens = ctx.derived_context
        raise ConfigError(f"model: {ctx.model.name}'s config ({how}) gives {preset.label} {ctx.version_text} a context "
                          f"of {f'{tokens:,}' if tokens < 10 ** 12 else f'{float(tokens):.3g}'} tokens; allowed: 1 to "
                          f"{MAX_MODEL_DIM:,} (MAX_MODEL_DIM)")
    given = ctx.given_max_model_len()
    if refuses and isinstance(given, int) and not isinstance(given, bool) and given > ctx.derived_context:
        where = f"engine.{length_flag}" if ctx.max_model_len_flag else "scheduler.max_model_len"
        raise ConfigError(f"{where}: {given:,} is above the {ctx.derived_context:,} tokens {preset.label} "
                          f"{ctx.version_text} derives from {ctx.model.name}'s config ({how}), which it refuses; "
                          f"allowed: at most {ctx.derived_context:,}, or RoPE scaling that extends it (the engine's "
                          "config overrides)")
    return how


def _apply_cost_terms(raw: dict, overhead: dict | None) -> None:
    """The preset's CPU terms go to the scenario's cost model where it prices kernels only, unless it says its own
    (`overhead:`, or the roofline's fixed `step_overhead_s`). No cost model: `sim.config.cost_choice` picks one."""
    cost_model = raw.get("cost_model")
    if overhead is None or cost_model is None:
        return
    if not isinstance(cost_model, dict) or cost_model.get("kind", "roofline") == "fixed":
        return
    if "overhead" in cost_model or "step_overhead_s" in cost_model:
        return
    cost_model["overhead"] = dict(overhead)
