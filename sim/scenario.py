"""Scenario files: YAML validated once, at the edge, by pydantic.

A file holds a base scenario and optional `variants:`, named partial overrides deep-merged into the
base, so one file describes a comparison. Unknown keys are errors everywhere: a typo must never be
silently ignored. `--set path.to.key=value` overrides apply to the raw YAML before validation.
"""

from __future__ import annotations

import copy
import difflib
import json
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .catalog import get_gpu, get_model
from .errors import ConfigError, DoesNotFitError
from .memory import check_tensor_parallel, kv_bytes_per_token, kv_capacity, weight_bytes_per_gpu
from .specs import GPUSpec, ModelSpec
from .workload import WorkloadSpec

MAX_SCENARIO_BYTES = 1 << 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HardwareSpec(_Strict):
    gpu: str | GPUSpec = Field("h100-sxm", description="catalog GPU name, or an inline GPU definition")
    tensor_parallel: int = Field(1, ge=1, description="GPUs per replica sharing each layer")
    num_replicas: int = Field(1, ge=1)
    router: Literal["round_robin", "least_outstanding", "random"] = "round_robin"


class SchedulerSpec(_Strict):
    batching: Literal["continuous", "static"] = "continuous"
    max_num_seqs: int = Field(256, ge=1, description="continuous: most sequences in one step")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="continuous: token budget per step; default 2048 with chunked prefill, "
        "else max_model_len + max_num_seqs (a full-length prompt always fits beside a full decode batch)")
    chunked_prefill: bool = Field(False, description="continuous: split prompts to fill the token budget")
    max_model_len: int | None = Field(None, ge=1, description="default: the model's max_context")
    max_batch_size: int = Field(8, ge=1, description="static: requests per batch")
    batch_timeout_s: float = Field(0.0, ge=0, description="static: wait this long for a full batch")

    @model_validator(mode="after")
    def _consistent(self) -> "SchedulerSpec":
        if self.batching == "static" and self.chunked_prefill:
            raise ValueError("chunked_prefill needs batching 'continuous'")
        return self


class KVCacheSpec(_Strict):
    layout: Literal["paged", "contiguous"] = "paged"
    block_size: int = Field(16, ge=1, description="paged: tokens per block")
    reserve: Literal["max_len", "pow2", "oracle"] = Field("max_len", description="contiguous: region size rule")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="fraction of HBM the engine may use")
    reserve_bytes: int = Field(0, ge=0, description="extra bytes per GPU kept free")
    capacity_tokens: int | None = Field(None, ge=1, description="override the computed KV capacity (tokens)")
    enable_prefix_caching: bool = Field(False, description="paged: reuse cached blocks of shared prompt prefixes "
                                        "(hash-chained blocks, reference counts, LRU eviction)")
    preemption: Literal["recompute", "swap"] = Field(
        "recompute", description="recompute: free the victim's KV and prefill it again; swap: move it to host "
        "memory over the GPU's host link and back (recompute when swap space is full)")
    swap_space_bytes: int = Field(4 << 30, ge=0, description="swap: host memory per GPU for swapped KV (vLLM: 4 GiB)")


class QuantizationSpec(_Strict):
    weights: Literal["bf16", "fp16", "fp8", "int8", "int4"] = "bf16"
    kv_cache: Literal["bf16", "fp16", "fp8", "int8"] = "bf16"
    fp8_compute: bool = Field(False, description="matrix products run at the GPU's fp8 rate")


class RooflineSpec(_Strict):
    kind: Literal["roofline"] = "roofline"
    compute_efficiency: float | None = Field(None, gt=0, le=1, description="default: the GPU's")
    memory_efficiency: float | None = Field(None, gt=0, le=1, description="default: the GPU's")
    step_overhead_s: float | None = Field(None, ge=0, description="default: the GPU's")


class FixedCostSpec(_Strict):
    kind: Literal["fixed"]
    prefill_s: float = Field(gt=0)
    decode_s: float = Field(gt=0)


class CalibratedCostSpec(_Strict):
    """Measured kernel times (`python -m calibrate run`); see sim/calibrated.py."""

    kind: Literal["calibrated"]
    profile: str | None = Field(None, description="profile folder; relative paths are relative to the scenario file")
    profile_device: str | None = Field(
        None, description="without profile: the shipped calibrate/profiles/<profile_device>/<model>/tp<N>/ "
        "(default: hardware.gpu)")
    engine: str | None = Field(
        None, description="which shipped profile: a whole-step engine under tp<N>/steps/<engine>/ (fused, compiled, "
        "unfused, ...) or 'ops' for per-op kernels; default: the first shipped of fused, compiled, unfused, ops")


class FixedAcceptance(_Strict):
    kind: Literal["fixed"] = "fixed"
    alpha: float = Field(ge=0, le=1, description="probability that each drafted token is accepted")


class BetaAcceptance(_Strict):
    """Acceptance differs between prompts: each request draws its own α from a Beta distribution."""

    kind: Literal["beta"]
    mean: float = Field(gt=0, lt=1)
    concentration: float = Field(10.0, gt=0, description="a + b of the Beta; larger = less spread")


class SpeculationSpec(_Strict):
    draft_model: str | ModelSpec | None = Field(None, description="catalog name or inline architecture")
    draft_cost_ratio: float | None = Field(None, gt=0, description="c = draft step time / target step time")
    num_speculative_tokens: int = Field(4, ge=1, description="γ: tokens drafted per step")
    acceptance: FixedAcceptance | BetaAcceptance = Field(FixedAcceptance(alpha=0.7), discriminator="kind")
    ragged: Literal["per_request", "rollback_to_min"] = Field(
        "per_request", description="per_request: each request keeps its own accepted tokens (vLLM); "
        "rollback_to_min: the whole batch advances by its minimum")
    sync_overhead_fraction: float = Field(0.0, ge=0, description="extra verification time for padded schemes")

    @model_validator(mode="after")
    def _one_draft(self) -> "SpeculationSpec":
        if (self.draft_model is None) == (self.draft_cost_ratio is None):
            raise ValueError("give exactly one of draft_model and draft_cost_ratio")
        return self

    def draft_spec(self) -> ModelSpec | None:
        if self.draft_model is None or isinstance(self.draft_model, ModelSpec):
            return self.draft_model
        return get_model(self.draft_model, "speculation.draft_model")


class SLOSpec(_Strict):
    ttft_s: float | None = Field(None, gt=0)
    tpot_s: float | None = Field(None, gt=0)
    e2e_s: float | None = Field(None, gt=0)
    percentile: float = Field(99.0, gt=0, le=100, description="the percentile each limit applies to")
    min_goodput_fraction: float | None = Field(
        None, gt=0, le=1, description="also require this share of requests to meet every limit (goodput SLO)")

    def has_limits(self) -> bool:
        return any(x is not None for x in (self.ttft_s, self.tpot_s, self.e2e_s))


class SearchSpec(_Strict):
    """The planner's search space (`servesim plan`); run and compare ignore it."""

    gpus: list[str | GPUSpec] | None = Field(None, description="candidate GPUs; default: hardware.gpu")
    tensor_parallel: list[int] | None = Field(None, description="candidate TP degrees; default: hardware.tensor_parallel")
    policies: list[str] | None = Field(None, description="variant names to try; default: every variant")
    target_rate_per_s: float | None = Field(None, gt=0, description="the load to serve; default: the workload's rate")
    max_replicas: int = Field(16, ge=1, description="largest deployment considered per candidate")
    min_window_s: float = Field(
        60.0, ge=0, description="each simulation spans at least this many seconds of arrivals, so an overload "
        "shows as a growing queue instead of a burst the system absorbs")
    rate_tolerance: float = Field(0.02, gt=0, lt=1, description="binary search stops when hi/lo <= 1 + this")
    num_seeds: int = Field(5, ge=1, description="seeds the recommendation is repeated with (uncertainty)")
    prices_per_gpu_hour: dict[str, float] = Field(default_factory=dict, description="USD per GPU-hour overrides")
    top_k: int = Field(3, ge=1, description="candidates that get a throughput-latency curve")
    prefer_calibrated: bool = Field(
        True, description="a candidate with a shipped calibrated profile (calibrate/profiles/<gpu>/<model>/tp<N>) "
        "uses it instead of the roofline")

    @model_validator(mode="after")
    def _positive(self) -> "SearchSpec":
        for tp in self.tensor_parallel or []:
            if tp < 1:
                raise ValueError(f"tensor_parallel values must be >= 1, got {tp}")
        for gpu, price in self.prices_per_gpu_hour.items():
            if price < 0:
                raise ValueError(f"prices_per_gpu_hour.{gpu} must be >= 0, got {price}")
        return self


class RunSpec(_Strict):
    seed: int = Field(0, ge=0)
    num_requests: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0, description="arrival window; also the horizon unless horizon_s")
    horizon_s: float | None = Field(None, gt=0, description="stop here; requests in flight are unfinished")

    @model_validator(mode="after")
    def _bounded(self) -> "RunSpec":
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("neither num_requests nor duration_s is set; give at least one of them")
        return self


class Scenario(_Strict):
    name: str = "scenario"
    description: str = ""
    model: str | ModelSpec = Field("llama-3.1-8b", description="catalog model name, or an inline architecture")
    hardware: HardwareSpec = HardwareSpec()
    workload: WorkloadSpec
    scheduler: SchedulerSpec = SchedulerSpec()
    kv_cache: KVCacheSpec = KVCacheSpec()
    quantization: QuantizationSpec = QuantizationSpec()
    cost_model: RooflineSpec | FixedCostSpec | CalibratedCostSpec = Field(RooflineSpec(), discriminator="kind")
    speculation: SpeculationSpec | None = Field(None, description="speculative decoding; absent = off")
    slo: SLOSpec = SLOSpec()
    run: RunSpec = RunSpec(num_requests=1000)
    search: SearchSpec | None = Field(None, description="the planner's search space (servesim plan)")

    def model_spec(self) -> ModelSpec:
        return self.model if isinstance(self.model, ModelSpec) else get_model(self.model, "model")

    def gpu_spec(self) -> GPUSpec:
        gpu = self.hardware.gpu
        return gpu if isinstance(gpu, GPUSpec) else get_gpu(gpu, "hardware.gpu")

    def resolved(self) -> "Scenario":
        """Check the cross-section rules that need the catalogs; returns self."""
        model = self.model_spec()
        self.gpu_spec()
        check_tensor_parallel(model, self.hardware.tensor_parallel)
        s = self.scheduler
        max_len = s.max_model_len or model.max_context
        if max_len > model.max_context:
            raise ConfigError(f"scheduler.max_model_len: {max_len} exceeds {model.name}'s max_context "
                              f"{model.max_context}")
        if s.batching == "continuous" and self.max_num_batched_tokens() < s.max_num_seqs:
            raise ConfigError(f"scheduler.max_num_batched_tokens: {self.max_num_batched_tokens()} must be "
                              f">= max_num_seqs ({s.max_num_seqs}) so every running decode fits a step")
        w = self.workload
        if w.samples_per_prompt > 1 and w.beam_width > 1:
            raise ConfigError("workload.beam_width: set samples_per_prompt or beam_width, not both")
        if self.sequences_per_request() > 1 and (self.kv_cache.layout != "paged" or s.batching != "continuous"):
            raise ConfigError("workload.samples_per_prompt/beam_width: several sequences per prompt share blocks, "
                              "which needs kv_cache.layout 'paged' and scheduler.batching 'continuous'")
        if self.kv_cache.enable_prefix_caching and self.kv_cache.layout != "paged":
            raise ConfigError("kv_cache.enable_prefix_caching: needs layout 'paged'")
        if self.speculation is not None:
            if s.batching != "continuous":
                raise ConfigError("speculation: needs scheduler.batching 'continuous'")
            draft = self.speculation.draft_spec()
            if draft is not None:
                check_tensor_parallel(draft, self.hardware.tensor_parallel, field="speculation.draft_model")
        try:
            self.kv_capacity_tokens()
        except DoesNotFitError as err:
            raise ConfigError(f"hardware: {err}") from None
        if self.cost_model.kind == "calibrated":
            from .profile_kinds import check_profile_matches, profile_engine
            path = self.calibrated_profile_dir()
            check_profile_matches(path, model, self.hardware.tensor_parallel)
            engine = self.cost_model.engine
            if self.cost_model.profile is not None and engine is not None and engine != profile_engine(path):
                raise ConfigError(f"cost_model.engine: {engine!r} is not the engine of cost_model.profile "
                                  f"'{self.cost_model.profile}'; allowed: {profile_engine(path)!r} or leave it out")
        return self

    def calibrated_profile_dir(self) -> Path:
        """The profile a calibrated cost model reads: the given folder, or the shipped one for this setup."""
        from .calibrated import resolve_profile_dir
        spec = self.cost_model
        device = spec.profile_device or self.gpu_spec().name
        return resolve_profile_dir(spec.profile, device, self.model_spec().name, self.hardware.tensor_parallel,
                                   spec.engine)

    def kv_bytes_per_token_per_gpu(self) -> int:
        """Bytes one token's KV takes on each GPU of a replica (the draft model's included)."""
        q, tp = self.quantization, self.hardware.tensor_parallel
        draft = self.speculation.draft_spec() if self.speculation else None
        return (kv_bytes_per_token(self.model_spec(), q.kv_cache, tp)
                + (kv_bytes_per_token(draft, q.kv_cache, tp) if draft is not None else 0))

    def kv_capacity_tokens(self) -> int:
        """KV token slots per replica: from the memory arithmetic, unless the scenario pins it."""
        if self.kv_cache.capacity_tokens is not None:
            return self.kv_cache.capacity_tokens
        s, q, tp = self.scheduler, self.quantization, self.hardware.tensor_parallel
        cap = kv_capacity(self.model_spec(), self.gpu_spec(), tensor_parallel=tp,
                          weight_dtype=q.weights, kv_dtype=q.kv_cache,
                          gpu_memory_utilization=self.kv_cache.gpu_memory_utilization,
                          reserve_bytes=self.kv_cache.reserve_bytes,
                          max_num_batched_tokens=self.max_num_batched_tokens(),
                          max_num_seqs=s.max_num_seqs if s.batching == "continuous" else s.max_batch_size)
        draft = self.speculation.draft_spec() if self.speculation else None
        if draft is None:
            return cap.num_tokens
        # The draft model's weights share the GPU, and every token also keeps the draft's KV.
        kv_bytes = cap.kv_bytes - weight_bytes_per_gpu(draft, q.weights, tp)
        per_token = cap.kv_bytes_per_token + kv_bytes_per_token(draft, q.kv_cache, tp)
        if kv_bytes < per_token:
            raise DoesNotFitError(f"{self.model_spec().name} with draft {draft.name} leaves "
                                  f"{max(kv_bytes, 0):,} bytes per GPU for KV, less than one token's {per_token:,}")
        return kv_bytes // per_token

    def sequences_per_request(self) -> int:
        return max(self.workload.samples_per_prompt, self.workload.beam_width)

    def max_model_len(self) -> int:
        return self.scheduler.max_model_len or self.model_spec().max_context

    def max_num_batched_tokens(self) -> int:
        s = self.scheduler
        if s.max_num_batched_tokens is not None:
            return s.max_num_batched_tokens
        # Unchunked, a full-length prompt must fit beside a full batch of decodes, or it would block
        # the head of the queue until the running batch drains.
        return 2048 if s.chunked_prefill else self.max_model_len() + s.max_num_seqs

    def to_yaml(self) -> str:
        data = self.model_dump(mode="json", exclude_none=True)
        return yaml.safe_dump(data, sort_keys=False)


@dataclass(frozen=True)
class ScenarioSet:
    """A scenario file: the base and its variants, each fully validated."""

    base: Scenario
    variants: dict[str, Scenario]  # name -> merged scenario; {"base": base} when the file has none
    source: str

    def items(self) -> list[tuple[str, Scenario]]:
        return list(self.variants.items())


@dataclass(frozen=True)
class _Where:
    """Where a pydantic error points, in the words of the scenario file."""

    path: str  # dotted keys the user wrote, e.g. "workload.arrival.rate_per_s" ("" for the top level)
    container: type[BaseModel] | None  # the model whose key is the path's last part
    kind: str | None  # the `kind` of the union member chosen on the way (e.g. "trace"), if any
    annotation: Any  # the declared type at the path (before any union member is chosen)
    ends_in_tag: bool  # the loc ends in a union-member tag: an "it is not this member" error


def _members(tp: Any) -> list:
    """The alternatives of an annotation: Optional, Union and Annotated unwrapped."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _members(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in get_args(tp) for m in _members(arg)]
    return [tp]


def _model_class(tp: Any) -> type[BaseModel] | None:
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _kind_of(cls: type[BaseModel]) -> str | None:
    field = cls.model_fields.get("kind")
    if field is None or get_origin(field.annotation) is not Literal:
        return None
    return get_args(field.annotation)[0]


def _union_member(members: list, item: str) -> Any:
    """The member a pydantic loc tag names: "poisson", "str", "function-after[_check(), ModelSpec]"."""
    name = item
    if "[" in item and item.endswith("]"):
        name = item[item.index("[") + 1:-1].rsplit(",", 1)[-1].strip()
    for member in members:
        cls = _model_class(member)
        if cls is not None and name in (cls.__name__, _kind_of(cls)):
            return member
        if isinstance(member, type) and name in (member.__name__, "none" if member is type(None) else None):
            return member
    return None


def _locate(loc: tuple) -> _Where:
    """Follow a pydantic loc through the Scenario model, dropping the union tags pydantic inserts."""
    parts: list[str] = []
    tp: Any = Scenario
    container, kind, annotation, tag_last = None, None, Scenario, False
    for item in loc:
        members = _members(tp)
        tag_last = False
        if isinstance(item, int):
            parts.append(f"[{item}]")
            seq = next((m for m in members if get_origin(m) in (list, tuple)), None)
            tp = get_args(seq)[0] if seq is not None and get_args(seq) else Any
            annotation = tp
            continue
        item = str(item)
        member = _union_member(members, item) if len(members) > 1 else None
        if member is None and "[" in item:  # a validator wrapper around a single model
            member = _union_member(members, item) or tp
        if member is not None:
            tp, tag_last = member, True
            cls = _model_class(member)
            if cls is not None and _kind_of(cls) is not None:
                kind = _kind_of(cls)
            continue
        parts.append(("." if parts else "") + item)
        models = [c for c in map(_model_class, members) if c is not None]
        container = next((c for c in models if item in c.model_fields), models[0] if models else None)
        field = container.model_fields.get(item) if container is not None else None
        tp = annotation = field.annotation if field is not None else Any
    return _Where("".join(parts), container, kind, annotation, tag_last)


# Errors that only say "the value is not this member of a str | Model union".
_UNION_NOISE = {"string_type", "model_type", "model_attributes_type", "dict_type", "is_instance_of"}

_EXPECTED = {  # pydantic error type -> what is allowed, in words
    "int_parsing": "an integer", "int_type": "an integer", "int_from_float": "an integer",
    "float_parsing": "a number", "float_type": "a number", "bool_parsing": "true or false",
    "bool_type": "true or false", "string_type": "a string", "list_type": "a list",
    "dict_type": "a mapping of keys", "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
}
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="),
           "less_than": ("lt", "<"), "less_than_equal": ("le", "<=")}


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _allowed(error: dict, where: _Where) -> str | None:
    """What the field accepts, from the error's context, or None when pydantic does not say."""
    etype, ctx = error["type"], error.get("ctx") or {}
    if etype in _BOUNDS:
        key, op = _BOUNDS[etype]
        return f"{op} {_number(ctx[key])}"
    if etype == "literal_error":
        return str(ctx.get("expected"))
    if etype in ("too_short", "too_long"):
        bound = ctx.get("min_length") if etype == "too_short" else ctx.get("max_length")
        return f"{'at least' if etype == 'too_short' else 'at most'} {bound} item(s)"
    if etype in _UNION_NOISE or etype in _EXPECTED:
        members = [m for m in _members(where.annotation) if m is not type(None)]
        if len(members) > 1 and any(map(_model_class, members)):  # e.g. model: str | ModelSpec
            words = ["a catalog name" if m is str else f"an inline {m.__name__} mapping" if _model_class(m)
                     else _TYPE_WORDS.get(m, getattr(m, "__name__", str(m))) for m in members]
            return " or ".join(words)
        return _EXPECTED.get(etype)
    return None


def _shown(value: Any) -> str:
    shown = json.dumps(value, default=str) if not isinstance(value, dict) else "{...}"
    return shown if len(shown) <= 60 else shown[:57] + "..."


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line: field path, the value given, what is allowed."""
    errors = err.errors(include_url=False)
    located = [(e, _locate(e["loc"])) for e in errors]
    # Prefer an error on a field the user wrote over "not a string" noise from str | Model unions, and
    # an unknown key over a missing one (a misspelt key causes both).
    located.sort(key=lambda pair: (pair[0]["type"] in _UNION_NOISE and pair[1].ends_in_tag,
                                   pair[0]["type"] != "extra_forbidden"))
    first, where = located[0]
    rest = [(e, w) for e, w in located[1:] if not (e["type"] in _UNION_NOISE and w.ends_in_tag)]
    field = prefix + where.path if where.path else (prefix.rstrip(".") or "(top level)")
    for_kind = f" for kind {where.kind!r}" if where.kind else ""
    etype = first["type"]

    if etype == "extra_forbidden":
        line = f"{field}: unknown key{for_kind}"
        if where.container is not None:
            allowed = list(where.container.model_fields)
            if where.container is Scenario and not prefix:
                allowed.append("variants")
            key = where.path.rsplit(".", 1)[-1]
            close = difflib.get_close_matches(key, allowed, n=1)
            line += (f" (did you mean {close[0]!r}?)" if close else "") + f"; allowed: {', '.join(allowed)}"
        else:
            line += " (check the spelling; `servesim schema` lists the allowed keys)"
    elif etype == "missing":
        parent = where.path.rsplit(".", 1)[0] if "." in where.path else ""
        siblings = [w for e, w in rest if e["type"] == "missing" and w.path.rsplit(".", 1)[0] == parent
                    and "." in w.path]
        if siblings and parent:
            names = [where.path.rsplit(".", 1)[-1]] + [w.path.rsplit(".", 1)[-1] for w in siblings]
            rest = [(e, w) for e, w in rest if not any(w is s for s in siblings)]
            line = f"{prefix}{parent}: missing required keys{for_kind}: {', '.join(names)}"
        else:
            line = f"{field}: missing{for_kind}; it is required"
    elif etype in ("union_tag_invalid", "union_tag_not_found"):
        ctx = first.get("ctx") or {}
        discriminator = str(ctx.get("discriminator", "kind")).strip("'")
        tags = [k for k in (_kind_of(m) for m in _members(where.annotation) if _model_class(m)) if k]
        allowed = ", ".join(tags) or str(ctx.get("expected_tags", ""))
        if etype == "union_tag_invalid":
            line = f"{field}.{discriminator}: {_shown(ctx.get('tag'))} is not allowed; allowed: {allowed}"
        else:
            line = f"{field}.{discriminator}: missing; allowed: {allowed}"
    elif etype in ("value_error", "assertion_error"):
        msg = first["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        value = first.get("input")
        line = f"{field}: {msg}" if isinstance(value, dict) else f"{field}: {_shown(value)} is not allowed: {msg}"
    else:
        allowed = _allowed(first, where)
        shown = _shown(first.get("input"))
        line = (f"{field}: {shown} is not allowed{for_kind}; allowed: {allowed}" if allowed
                else f"{field}: {shown} is invalid: {first['msg']}")
    if rest:
        line += f" (and {len(rest)} more error{'s' if len(rest) > 1 else ''})"
    return line


def _deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        # A mapping that switches `kind` (e.g. poisson -> trace) replaces the base's: the old kind's
        # keys would be unknown keys of the new one.
        switches_kind = (isinstance(value, dict) and isinstance(out.get(key), dict)
                         and "kind" in value and value["kind"] != out[key].get("kind"))
        if isinstance(value, dict) and isinstance(out.get(key), dict) and not switches_kind:
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ConfigError(f"--set: {text!r} is not of the form path.to.key=value")
    path, raw = text.split("=", 1)
    keys = [k for k in path.strip().split(".") if k]
    if not keys:
        raise ConfigError(f"--set: {text!r} has an empty key path")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return keys, value


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    raw = copy.deepcopy(raw)
    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {} if child is None or not isinstance(child, dict) else child
                node[key] = child
            node = child
        node[keys[-1]] = value
    return raw


def validate_scenario(raw: Any, prefix: str = "", resolve: bool = True) -> Scenario:
    """Validate one scenario; `resolve=False` checks the schema only, not that the hardware holds the model
    (the planner's base hardware is only a default: its candidates bring their own)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'scenario'}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix)) from None
    except ConfigError as err:
        raise ConfigError(f"{prefix}{err}") from None
    if not resolve:
        return scenario
    try:
        return scenario.resolved()
    except ConfigError as err:
        raise ConfigError(f"{prefix}{err}") from None


def build_scenario_set(raw: Any, source: str = "<scenario>", overrides: list[str] | None = None,
                       resolve: bool = True) -> ScenarioSet:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a YAML mapping at the top level")
    raw = apply_overrides(raw, overrides or [])
    variants_raw = raw.pop("variants", None) or {}
    if not isinstance(variants_raw, dict):
        raise ConfigError(f"variants: expected a mapping of name -> overrides, got {type(variants_raw).__name__}")
    base = validate_scenario(raw, resolve=resolve)
    variants: dict[str, Scenario] = {}
    for name, override in variants_raw.items():
        if not isinstance(override, dict):
            raise ConfigError(f"variants.{name}: expected a mapping of overrides, got {type(override).__name__}")
        merged = _deep_merge(raw, override)
        merged.setdefault("name", str(name))
        if "name" not in override:
            merged["name"] = str(name)
        variants[str(name)] = validate_scenario(merged, prefix=f"variants.{name}.", resolve=resolve)
    return ScenarioSet(base, variants or {base.name: base}, source)


def read_yaml(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"scenario: file '{path}' not found")
    if p.stat().st_size > MAX_SCENARIO_BYTES:
        raise ConfigError(f"scenario: file '{path}' is larger than {MAX_SCENARIO_BYTES} bytes")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise ConfigError(f"scenario: '{path}'{where}: {problem}") from None


def _anchor_paths(raw: Any, base_dir: Path) -> None:
    """Relative trace/length file paths are relative to the scenario file, not the working directory."""
    if not isinstance(raw, dict):
        return
    sections = [raw.get("workload")] + [v.get("workload") for v in (raw.get("variants") or {}).values()
                                         if isinstance(v, dict)]
    for workload in sections:
        if not isinstance(workload, dict):
            continue
        for part in (workload.get("arrival"), workload.get("lengths")):
            if isinstance(part, dict) and isinstance(part.get("path"), str):
                p = Path(part["path"]).expanduser()
                if not p.is_absolute() and (base_dir / p).exists():
                    part["path"] = str((base_dir / p).resolve())
    # Calibrated cost-model profiles likewise.
    for section in [raw] + [v for v in (raw.get("variants") or {}).values() if isinstance(v, dict)]:
        cost = section.get("cost_model")
        if isinstance(cost, dict) and isinstance(cost.get("profile"), str):
            p = Path(cost["profile"]).expanduser()
            if not p.is_absolute() and (base_dir / p).exists():
                cost["profile"] = str((base_dir / p).resolve())


def load_scenario_set(path: str | Path, overrides: list[str] | None = None) -> ScenarioSet:
    raw = read_yaml(path)
    _anchor_paths(raw, Path(path).resolve().parent)
    scenario_set = build_scenario_set(raw, str(path), overrides)
    return scenario_set


def json_schema() -> dict:
    schema = Scenario.model_json_schema()
    schema["properties"]["variants"] = {
        "type": "object", "description": "named partial overrides of the sections above",
        "additionalProperties": {"type": "object"},
    }
    return schema
