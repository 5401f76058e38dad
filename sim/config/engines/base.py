"""What every engine preset is made of: its flag and option types, the version arithmetic, the raw scenario's
helpers, the groups of options accepted without effect, and the rules several engines share (the custom
all-reduce, prefix caching).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import TypeAdapter, ValidationError

from sim.config.engine_command import CommandFlags, CommandSyntax, InertOption, read_command
from sim.errors import ConfigError
from sim.model.hf_config import rope_entries
from sim.model.interconnects import CUSTOM_ALL_REDUCE, NCCL_ALL_REDUCE, interconnect_class
from sim.model.specs import MAX_MODEL_DIM


GIB = 1 << 30
_AN_INT = TypeAdapter(int)


@dataclass(frozen=True)
class Flag:
    """One engine flag: the scenario key it sets (None: the preset reads it itself) and the values it takes."""

    target: str | None
    kind: type | tuple  # the Python type(s) accepted (bool is not an int here)
    doc: str
    convert: Callable[[Any], Any] = lambda value: value
    since: tuple[int, ...] | str | None = None  # the first version that has it ("0.4.6.post2"; None: every one known)
    aliases: tuple[str, ...] = ()  # the option's other spellings on the engine's command line (vLLM's -tp)
    until: tuple[int, ...] | str | None = None  # the first release whose parser refuses it (None: none known)
    # values the engine's parser takes only in some releases: {value: (since, until)}, as `since` and `until` above
    value_versions: dict[str, tuple] = field(default_factory=dict)
    # aliases the engine's parser has only in some releases: {alias: (since, until)} (vLLM's -O: --compilation-config
    # to 0.11.x, --optimization-level from 0.12.0)
    alias_versions: dict[str, tuple] = field(default_factory=dict)
    # a flag whose value gives other flags (trtllm-serve's --extra_llm_api_options): value -> {flag: (where, value)},
    # `where` naming the part of the value that gave it; each then checked as if given itself
    expands: Callable[[Any], dict[str, tuple[str, Any]]] | None = None
    # how the release's parser reads the value as written, before its kind is checked: (value, version, version
    # text) -> the value (vLLM's human-readable numbers, "32k"); None from it: the engine's "auto", which the
    # derivation reads as given (`Context.flags`) and the flag's target does not get
    read: Callable[[Any, tuple[int, ...], str], Any] | None = None
    # scenario keys the preset derives from this flag though `target` does not name them (TensorRT-LLM's
    # --enable_chunked_prefill decides scheduler.chunked_prefill): where a message in the scheduler's words names such
    # a key, `engine_spelling` names the flag as the engine spells it
    decides: tuple[str, ...] = ()

    @property
    def option(self) -> str | None:
        """The engine's own command-line spelling of the flag: `doc` starts with it (`--max-num-seqs`); None where
        the doc names a config key instead (LMDeploy's config.ini, TensorRT-LLM's YAML options)."""
        head = self.doc.split(maxsplit=1)[0].rstrip(":")
        return head if head.startswith("--") else None


def kv_cache_dtype_flag(allowed: tuple[str, ...]) -> Callable[[str], str | None]:
    """An engine's --kv-cache-dtype as `quantization.kv_cache`: auto (the model's own dtype) sets nothing; fp8,
    fp8_e4m3 and fp8_e5m2 set fp8 (the same bytes a value); bfloat16 sets bf16; another value is refused in one
    line."""
    def convert(value: str) -> str | None:
        if value not in allowed:
            raise ConfigError(f"engine.kv_cache_dtype: {value!r} is not allowed; allowed: {', '.join(allowed)}")
        if value == "auto":
            return None
        return "fp8" if value.startswith("fp8") else "bf16"
    return convert


def gib_as_bytes(name: str) -> Callable[[int | float], int]:
    """A flag of GiB a GPU (vLLM's --swap-space, vLLM's and SGLang's --cpu-offload-gb) as bytes, as both engines
    convert it (`int(gib * 1024**3)`); a negative size, or one whose bytes a float cannot hold, refused in one line."""
    def convert(gib: int | float) -> int:
        if gib < 0 or not math.isfinite(gib * GIB):
            raise ConfigError(f"engine.{name}: {gib!r} is not allowed; allowed: a finite number of GiB >= 0")
        return int(gib * GIB)
    return convert


# how vLLM V0's maybe_offload_to_cpu (and SGLang's copy of it) brings offloaded weights to the kernels
OFFLOAD_COPIED_IN = "copied to the GPU before each offloaded layer runs"


def offload_note(engine: str, gib: float, how: str) -> str:
    """The note a preset gives --cpu-offload-gb (vLLM's, SGLang's): `how` the offloaded weights reach the kernels."""
    return (f"{engine} --cpu-offload-gb {gib:g}: that much of each GPU's decoder-layer weights (whole parameters from "
            f"the first layer on) lives in host memory, {how}: every forward pass reads it over the host link (PCIe), "
            "and the KV cache gets its room")


def at_least(name: str, least: int = 1, most: int | None = None, meaning: str = "") -> Callable[[int], int]:
    """An engine flag's whole number that must be `least` or more (and at most `most`), refused in one line
    otherwise (`meaning`: what a value means, said after the allowed range)."""
    def convert(value: int) -> int:
        if value < least or most is not None and value > most:
            upper = "" if most is None else f" and <= {most:,}"
            raise ConfigError(f"engine.{name}: {value!r} is not allowed; allowed: a whole number >= {least}"
                              f"{upper}{meaning}")
        return value
    return convert


def only_one_of(name: str, allowed: tuple, after: str = ", or leave it out") -> Callable[[Any], Any]:
    """An engine option accepted at the values modelled only (words or numbers), another refused in one line
    (`after` ends it)."""
    def convert(value):
        if value not in allowed:
            raise ConfigError(f"engine.{name}: {value!r} is not modelled; allowed: "
                              f"{', '.join(str(v) for v in allowed)}{after}")
        return value
    return convert


def sixteen_bit_dtype(allowed: tuple[str, ...]) -> Callable[[str], str]:
    """An engine's --dtype: the 16-bit activation dtypes every price here assumes are accepted (the weights priced
    are the scenario's `quantization.weights`); float32 and others are refused in one line."""
    return only_one_of("dtype", allowed, " (16-bit activations, as priced)")


def only_default(name: str, default, why: str = "") -> Callable[[Any], Any]:
    """An engine option accepted at its default value only (the engine as modelled), another value refused in one
    line (`why`: what another value would run, said after "the default")."""
    return only_one_of(name, (default,), f" (the default{why}), or leave it out")


def weights_quantization(methods: dict[str, str]) -> Callable[[str], str]:
    """An engine's --quantization as `quantization.weights` (the methods it names that ServeSim prices: fp8 as the
    engine's W8A8 where the GPU has an fp8 rate, `_derive` sets fp8_compute so, weight-only elsewhere); another
    method is refused in one line, never priced as 16-bit."""
    def convert(value: str) -> str:
        if value not in methods:
            raise ConfigError(f"engine.quantization: {value!r} is not modelled; allowed: {', '.join(methods)} (or "
                              "leave it out and set quantization.weights)")
        return methods[value]
    return convert


# How many output tokens the engine hands its front-end at once (after a prompt's first token): a value a preset
# derives for the scenario's front-end, which it only has with a `frontend:` section (`_place_frontend_value`, as
# every `frontend.` key a preset sets).
STREAM_CHUNK_KEY = "frontend.tokens_per_chunk"


@dataclass
class PresetResult:
    values: dict[str, Any]  # dotted scenario key -> the preset's default
    from_flags: dict[str, str]  # dotted scenario key -> the flag that set it
    notes: list[str] = field(default_factory=list)
    # a vLLM 0.8-0.10 setup that V1 hands to V0 (vllm.py `_vllm_v0_fallback`): the preset priced V0's server, which
    # the validated scenario keeps (`EngineSpec.v0_fallback`) for whatever prices that server again (the bands' spread)
    v0_fallback: bool = False


# Each preset's name as its labels and messages show it (`EnginePreset.label`; the fitted terms' names use it too).
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "lmdeploy": "LMDeploy (TurboMind)"}


@dataclass(frozen=True)
class EnginePreset:
    name: str
    label: str
    oldest: tuple[int, ...]
    newest: tuple[int, ...]  # newest minor version known; its patch releases are accepted
    source: str
    flags: dict[str, Flag]
    derive: Callable[["Context"], PresetResult]
    versions: str | None = None  # the versions modelled, where not every one from oldest to newest is
    inert: tuple[InertOption, ...] = ()  # options `engine.command` accepts without effect (engine_command.py)
    syntax: CommandSyntax = CommandSyntax()  # how the engine's parser reads its command line
    # whether the engine cuts a step's running decodes to its token budget (vLLM V1's scheduler, and its
    # SchedulerConfig refuses max_num_batched_tokens < max_num_seqs; TensorRT-LLM's MicroBatchScheduler stops at the
    # first generation request past max_num_tokens: cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp at
    # 0a949d31), which the scheduler here does not model, so the budget must hold them all; SGLang's decode batches
    # hold every running request (its max_running_requests may exceed chunked_prefill_size: 4096 against 2048 on two
    # 24 GB GPUs)
    decodes_within_budget: bool = True
    # fp8 weights on a GPU without fp8 tensor cores: `(version, block-scaled, MoE) -> None` where the engine runs them
    # (weight-only) or why it cannot, in one clause, which refuses them (`presets.refuse_unrun_fp8`); None: not read.
    # A preset that has it runs a scenario's fp8 weights W8A8 on a GPU with fp8 tensor cores (`fp8_compute`), as the
    # engine's Fp8LinearMethod does, unless the scenario says otherwise
    fp8_without_fp8_cores: Callable[[tuple[int, ...], bool, bool], str | None] | None = None
    # where the engine refuses to start a KV cache that cannot hold one request of max_model_len: the source of its
    # check, which sim/config/deployment.py's refusal of such a scenario names; None: it starts
    kv_holds_max_len: str | None = None
    # the longest context the engine derives from the model's config as it serves it (RoPE scaling, its config
    # overrides): (tokens, how, in a few words, whether a longer max_model_len is refused); its default max_model_len,
    # and a longer one refused as the engine refuses it (`presets._derive`). None: the model's max_context, checked by
    # sim/config/deployment.py
    context: Callable[["Context"], tuple[int, str, bool]] | None = None
    # where the engine turns a model's sliding window off itself: (version, version text, model) -> why, in a note, or
    # None where it keeps it; the model is then served without it (`attention.sliding_window` false) unless the
    # scenario says otherwise
    window_off: Callable[[tuple[int, ...], str, Any], str | None] | None = None

    def known_versions(self) -> str:
        return self.versions or f"{dotted_version(self.oldest)} to {dotted_version(self.newest[:2])}.x"

    def options(self, version: tuple[int, ...] | None = None) -> dict[str, tuple[str, Any]]:
        """Each command-line spelling of a flag's option (`Flag.option`, `Flag.aliases`) -> (the flag, its kind);
        with `version`, only the aliases that release's parser has (`Flag.alias_versions`)."""
        def spelled_in(flag: Flag, alias: str) -> bool:
            window = flag.alias_versions.get(alias)
            return version is None or window is None or outside_versions(version, dotted_version(version),
                                                                         *window) is None
        return {spelled: (name, _command_kind(flag)) for name, flag in self.flags.items()
                for spelled in ((flag.option,) if flag.option else ()) + flag.aliases if spelled_in(flag, spelled)}

    def inert_options(self) -> dict[str, InertOption]:
        return {option.option: option for option in self.inert}

    def read_command(self, text: Any, version: tuple[int, ...] | None = None) -> CommandFlags:
        """`engine.command`, the engine's launch command, read into this preset's flags (engine_command.py), with
        the option spellings of `version`'s parser."""
        return read_command(text, self.name, self.options(version), self.inert_options(), self.syntax)


def _command_kind(flag: Flag) -> type | tuple:
    """The kinds of a flag's value on the command line: a flag with a `read` takes the word as written too (32k)."""
    kinds = flag.kind if isinstance(flag.kind, tuple) else (flag.kind,)
    return kinds if flag.read is None or str in kinds else kinds + (str,)


@dataclass
class Context:
    """What a derivation reads: the version, the flags given, the GPU, TP, the model (None if unresolved)."""

    version: tuple[int, ...]
    version_text: str
    flags: dict[str, Any]
    gpu: Any
    tensor_parallel: int
    pipeline_parallel: int
    model: Any
    raw: dict

    max_model_len_flag: int | None = None  # the engine flag that sets scheduler.max_model_len, when given
    derived_context: int | None = None  # the context the engine derives (`EnginePreset.context`), where it has one
    # the model's sliding window as its config has it, where it is turned off (the scenario's
    # `attention.sliding_window` false, or the engine's own rule, `EnginePreset.window_off`: `model` is then the model
    # as served, without it); None where it is kept
    configured_window: int | None = None
    window_off: bool = False  # the sliding window is turned off so (whether or not the model has one)
    # the presets' fitted numbers, as engine_terms.json holds them (`fitted.fitted_table`); None: the shipped ones (the
    # published suite hands its own fit here, so that the preset's rules apply to it as to the stored one)
    fits: dict | None = None
    # a lockstep group's GPUs that the routed experts (`expert_gpus`) and the dense MLPs (`dense_gpus`) spread over,
    # which size a rank's KV (`sim.model.specs.ExpertGroup`); 0: its own tensor-parallel GPUs
    expert_gpus: int = 0
    dense_gpus: int = 0

    def given_max_model_len(self) -> int | None:
        """max_model_len as the scenario gives it: the engine's flag, else `scheduler.max_model_len` (None: neither, or
        a value the schema refuses, which validation then names in its own words: the derivation reads the raw
        scenario before it is validated)."""
        if self.max_model_len_flag:
            return self.max_model_len_flag
        given = get_key(self.raw, "scheduler.max_model_len")
        if given is None:
            return None
        try:
            given = _AN_INT.validate_python(given)  # as the schema's field reads it (4096.0 and "4096" are 4096)
        except ValidationError:
            return None
        return given if 1 <= given <= MAX_MODEL_DIM else None

    def max_model_len(self) -> int | None:
        given = self.given_max_model_len()
        if given is not None:
            return given
        if self.derived_context is not None:
            return self.derived_context
        return self.model.max_context if self.model is not None else None


def model_of_value(value: Any, field_name: str):
    """The ModelSpec a raw scenario's model reference names (a catalog name, an inline architecture or {hf_config:
    path}) at `field_name`, or None where it cannot be read yet (validation then reports it)."""
    from sim.model.catalog import get_model
    from sim.model.hf_config import read_model_ref
    from sim.model.specs import ModelSpec
    try:
        value = read_model_ref(value, field_name)
        return value if isinstance(value, ModelSpec) else (
            ModelSpec.model_validate(value) if isinstance(value, dict) else get_model(value, field_name))
    except Exception:  # noqa: BLE001  (validation reports a bad model in its own words)
        return None


def dotted_version(version: tuple[int, ...] | str) -> str:
    return version if isinstance(version, str) else ".".join(str(v) for v in version)


_VERSION = re.compile(r"v?(\d+(?:\.\d+)+)((?:[.\-+]?(?:post|rc|dev|a|b)\d*)*)")


def parse_version(text: str) -> tuple[int, ...] | None:
    """The release numbers of a version string, at least two ("0.10.1.1", vLLM's fourth-number releases, keeps all
    four); a pre-, post- or dev-release suffix names the same release (0.5.3.post3 is 0.5.3)."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        return None
    return tuple(int(part) for part in match.group(1).split("."))


def canonical_version(text: str) -> str:
    """A version as the presets name it: no leading 'v', at least three release numbers, since PEP 440 pads with
    zeros (0.11 is 0.11.0, the release `pip install vllm==0.11` installs), the suffix as written. Text that is no
    version stays as it is."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        return text
    numbers = match.group(1).split(".")
    return ".".join(numbers + ["0"] * (3 - len(numbers))) + match.group(2)


def version_suffix(version_text: str) -> tuple[bool, int]:
    """(whether a version string names a pre- or dev-release, its post-release number or -1)."""
    match = _VERSION.fullmatch(version_text.strip())
    suffix = match.group(2) if match is not None else ""
    post = re.search(r"post(\d+)", suffix)
    return re.search(r"rc|dev|a|b", suffix) is not None, int(post.group(1)) if post else -1


def released_before(version: tuple[int, ...], version_text: str, bound: tuple[int, ...] | str,
                    pre_before: bool = True) -> bool:
    """Whether a release came out before `bound`, the release numbers of a final release or a version string that
    may name a post release ("0.4.6.post2": 0.4.6 and 0.4.6.post1 come before it): a lower version; a post release
    before the bound's; with `pre_before`, a pre- or dev-release of the bound itself (0.5.3rc0, which
    `parse_version` reads as 0.5.3)."""
    numbers = parse_version(bound) if isinstance(bound, str) else bound
    if version[:len(numbers)] != numbers:
        return version < numbers
    pre, post = version_suffix(version_text)
    return (pre_before and pre) or post < (version_suffix(bound)[1] if isinstance(bound, str) else -1)


def outside_versions(version: tuple[int, ...], version_text: str, since: tuple[int, ...] | str | None,
                     until: tuple[int, ...] | str | None) -> tuple[str, str] | None:
    """Why a flag or option is not one of this release's (`since`: the first release that has it, a pre-release of
    it counted as it; `until`: the first whose parser refuses it; either may name a post release, "0.4.6.post2"),
    and the versions allowed instead; None where it is."""
    if since is not None and released_before(version, version_text, since, pre_before=False):
        return f"it came in {dotted_version(since)}", f"engine.version {dotted_version(since)} or later"
    if until is not None and not released_before(version, version_text, until):
        return f"its parser refuses it from {dotted_version(until)}", f"engine.version before {dotted_version(until)}"
    return None


def refuse_model_before(ctx: "Context", since: dict[str, tuple[int, ...]], engine: str, where: str) -> None:
    """One-line ConfigError where the engine release predates its support of the model's type: `since` maps a model
    type to the first release whose `where` (the engine's model registry) has it, a pre-release of it counted as it."""
    first = since.get(ctx.model.model_type) if ctx.model is not None else None
    if first is not None and released_before(ctx.version, ctx.version_text, first, pre_before=False):
        raise ConfigError(f"engine.version: {engine} {ctx.version_text} has no {ctx.model.model_type} model (its "
                          f"{where} gained it in {dotted_version(first)}); allowed: {dotted_version(first)} or later")


_ABSENT = object()


def _lookup(raw: dict, dotted: str):
    """The value at a dotted key of a raw scenario, or _ABSENT."""
    node = raw
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def get_key(raw: dict, dotted: str):
    value = _lookup(raw, dotted)
    return None if value is _ABSENT else value


def has_key(raw: dict, dotted: str) -> bool:
    return _lookup(raw, dotted) is not _ABSENT


def set_key(raw: dict, dotted: str, value) -> None:
    node = raw
    keys = dotted.split(".")
    for key in keys[:-1]:
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
        if not isinstance(node, dict):
            return  # a malformed section: validation reports it
    node[keys[-1]] = value


# vLLM's custom all-reduce (vllm/distributed/device_communicators/custom_all_reduce.py, CustomAllreduce, read in the
# stored vLLM source): _SUPPORTED_WORLD_SIZES [2, 4, 6, 8]; off on more than two GPUs that NVLink does not join all
# together ("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs"); off with
# --disable-custom-all-reduce. Its all-reduces are then NCCL's. SGLang's copy (python/sglang/srt/distributed/
# device_communicators/custom_all_reduce.py, "Adapted from" vLLM v0.6.4's) keeps the sizes, and its should_custom_ar
# runs the kernel only on 2 GPUs or full NVLink.
CUSTOM_ALL_REDUCE_WORLD_SIZES = (2, 4, 6, 8)


def custom_all_reduce(ctx: Context, engine: str) -> dict[str, Any]:
    """`hardware.all_reduce` nccl where vLLM's custom all-reduce (or SGLang's copy) turns itself off or is turned
    off (the flag `disable_custom_all_reduce`); {} where it runs (the default, custom)."""
    tp, off = ctx.tensor_parallel, ctx.flags.get("disable_custom_all_reduce")
    if off and get_key(ctx.raw, "hardware.all_reduce") == CUSTOM_ALL_REDUCE:
        raise ConfigError(f"engine.disable_custom_all_reduce: true contradicts hardware.all_reduce 'custom'; allowed: "
                          f"give one of them, or hardware.all_reduce '{NCCL_ALL_REDUCE}' ({engine})")
    pcie_only = interconnect_class(ctx.gpu) == "pcie"
    if off or (tp > 1 and tp not in CUSTOM_ALL_REDUCE_WORLD_SIZES) or (tp > 2 and pcie_only):
        return {"hardware.all_reduce": NCCL_ALL_REDUCE}
    return {}


# What each group of options accepted without effect sets (`engine.command`'s note names them).
SERVER_ADDRESS = "the server's address, HTTP and access settings"
MODEL_FILES = "where the model's files come from and what it is called: the scenario's model is priced"
LOGGING = "logging, whose cost is not modelled"
PARSING = "chat-template and tool-call parsing settings"
SEED = "the sampler's seed (run.seed draws the workload)"
USAGE_REPORTS = "what the responses and endpoints report (token usage, load counters): not priced"
REQUEST_LIMITS = "limits on what a request may ask (logprobs, structured output), which the workload does not ask"


def graph_terms(graph_max_seqs: int, graph_prefill: bool = False) -> dict[str, Any]:
    """The overhead terms of an engine that replays CUDA graphs for decode batches of up to `graph_max_seqs` (0: none)
    and, with `graph_prefill`, for steps with prompt tokens: every other step pays the eager launch term, an estimate
    (sim/cost/overhead.py `vllm-eager`)."""
    from sim.cost.overhead import ENGINE_DEFAULTS
    return {"launch_per_layer_s": ENGINE_DEFAULTS["vllm-eager"].launch_per_layer_s, "graph_max_seqs": graph_max_seqs,
            "graph_prefill": graph_prefill}


# The config.json keys an engine's override option may set (vLLM's --hf-overrides, SGLang's
# --json-model-override-args): those that change only the context the engine derives (RoPE's base and scaling, the
# position count); any other would change the model priced, which the scenario's `model` says.
CONTEXT_OVERRIDE_KEYS = ("rope_scaling", "rope_parameters", "rope_theta", "max_position_embeddings")


def json_mapping(value: Any, name: str, what: str) -> dict:
    """An engine option's mapping as given: a mapping in the scenario, a JSON object on the command line; anything
    else refused in one line (`what`: what its keys are)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if not isinstance(value, dict):
        raise ConfigError(f"engine.{name}: {value!r} is not allowed; allowed: a mapping of {what} (a JSON object on "
                          "the command line)")
    return value


def config_overrides(name: str, keys: tuple[str, ...] = CONTEXT_OVERRIDE_KEYS) -> Callable[[Any], dict]:
    """An engine option that overrides config.json keys (a JSON object on the command line, a mapping in the
    scenario) as the mapping it gives, each key one of `keys` and its value readable; refused in one line otherwise."""
    def convert(value: Any) -> dict:
        value = json_mapping(value, name, "config.json keys")
        for key, item in value.items():
            if key not in keys:
                raise ConfigError(f"engine.{name}: {key!r} is not modelled (it changes the model priced: the "
                                  f"scenario's model says it); allowed: {', '.join(keys)}")
            if key in ("rope_scaling", "rope_parameters") and item is not None:
                rope_entries({key: item}, f"engine.{name}", key)
            if key == "max_position_embeddings" and (isinstance(item, bool) or not isinstance(item, int) or item < 1):
                raise ConfigError(f"engine.{name}.max_position_embeddings: {item!r} is not allowed; allowed: a whole "
                                  "number >= 1")
        return value
    return convert


def served_config(ctx: "Context", overrides: dict) -> tuple[int, tuple[dict, ...]]:
    """(max_position_embeddings, the RoPE scaling entries) of the model's config as the engine serves it, after
    `overrides` (`config_overrides`'s mapping): an override's rope_scaling (else rope_parameters) replaces the
    model's."""
    positions = overrides.get("max_position_embeddings", ctx.model.max_context)
    key = next((k for k in ("rope_scaling", "rope_parameters") if k in overrides), None)
    if key is None:
        return positions, tuple(entry.model_dump() for entry in ctx.model.rope_scaling)
    return positions, rope_entries({key: overrides[key]}, "overrides", key) if overrides[key] is not None else ()


def inert_group(about: str, takes: str, *options: str) -> tuple[InertOption, ...]:
    return tuple(InertOption(option, takes, about) for option in options)


def caches_prefixes(ctx: Context, notes: list[str], engine: str) -> bool:
    """Whether the preset turns on `kv_cache.enable_prefix_caching`, as an engine that caches prefixes by default:
    yes, but for a model whose every layer slides, where ServeSim keeps a sequence's windowed blocks under prefix
    caching (docs/scenarios.md, sliding windows) that the engine frees: there the window's freeing is kept, noted."""
    model = ctx.model
    if model is not None and model.sliding_window is not None and not model.hybrid_window:
        notes.append(f"{engine}: prefix caching left off for {model.name}, whose every layer slides (ServeSim frees "
                     "no windowed blocks under prefix caching); kv_cache.enable_prefix_caching turns it on")
        return False
    return True
