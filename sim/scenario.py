"""Scenario files: YAML validated once, at the edge, by pydantic.

A file holds a base scenario and optional `variants:`, named partial overrides deep-merged into the
base, so one file describes a comparison. Unknown keys are errors everywhere: a typo must never be
silently ignored. `--set path.to.key=value` overrides apply to the raw YAML before validation.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .catalog import get_gpu, get_model
from .errors import ConfigError
from .memory import check_tensor_parallel
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
        "else max_model_len (as vLLM)")
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
    preemption: Literal["recompute"] = "recompute"


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


class SLOSpec(_Strict):
    ttft_s: float | None = Field(None, gt=0)
    tpot_s: float | None = Field(None, gt=0)
    e2e_s: float | None = Field(None, gt=0)
    percentile: float = Field(99.0, gt=0, le=100, description="the percentile each limit applies to")


class RunSpec(_Strict):
    seed: int = Field(0, ge=0)
    num_requests: int | None = Field(None, ge=1)
    duration_s: float | None = Field(None, gt=0, description="arrival window; also the horizon unless horizon_s")
    horizon_s: float | None = Field(None, gt=0, description="stop here; requests in flight are unfinished")

    @model_validator(mode="after")
    def _bounded(self) -> "RunSpec":
        if self.num_requests is None and self.duration_s is None:
            raise ValueError("set num_requests or duration_s")
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
    cost_model: RooflineSpec | FixedCostSpec = Field(RooflineSpec(), discriminator="kind")
    slo: SLOSpec = SLOSpec()
    run: RunSpec = RunSpec(num_requests=1000)

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
        return self

    def max_model_len(self) -> int:
        return self.scheduler.max_model_len or self.model_spec().max_context

    def max_num_batched_tokens(self) -> int:
        s = self.scheduler
        if s.max_num_batched_tokens is not None:
            return s.max_num_batched_tokens
        return 2048 if s.chunked_prefill else max(self.max_model_len(), s.max_num_seqs)

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


def _format_loc(loc: tuple) -> str:
    parts = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in _UNION_TAGS or "[" in str(item) or str(item).startswith("function-"):
            continue  # pydantic's union-member tags are not keys the user wrote
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "(top level)"


_UNION_TAGS = {"str", "ModelSpec", "GPUSpec", "int", "float", "bool", "none", "is-instance[ModelSpec]"}


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line: field path, the value given, what is allowed."""
    errors = err.errors(include_url=False)
    # Prefer an error on a field the user wrote over "not a string" noise from str|Model unions.
    errors.sort(key=lambda e: e["type"] in ("string_type", "model_type", "dict_type", "is_instance_of"))
    first = errors[0]
    loc = _format_loc(first["loc"])
    field = f"{prefix}{loc}" if prefix else loc
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        return f"{field}: unknown key (check the spelling; `servesim schema` lists the allowed keys)"
    value = first.get("input")
    shown = json.dumps(value, default=str) if not isinstance(value, dict) else "{...}"
    if len(shown) > 60:
        shown = shown[:57] + "..."
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{field}: {shown} is invalid: {msg}{more}"


def _deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
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


def validate_scenario(raw: Any, prefix: str = "") -> Scenario:
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'scenario'}: expected a mapping of sections, got {type(raw).__name__}")
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix)) from None
    except ConfigError as err:
        raise ConfigError(f"{prefix}{err}") from None
    try:
        return scenario.resolved()
    except ConfigError as err:
        raise ConfigError(f"{prefix}{err}") from None


def build_scenario_set(raw: Any, source: str = "<scenario>", overrides: list[str] | None = None) -> ScenarioSet:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a YAML mapping at the top level")
    raw = apply_overrides(raw, overrides or [])
    variants_raw = raw.pop("variants", None) or {}
    if not isinstance(variants_raw, dict):
        raise ConfigError(f"variants: expected a mapping of name -> overrides, got {type(variants_raw).__name__}")
    base = validate_scenario(raw)
    variants: dict[str, Scenario] = {}
    for name, override in variants_raw.items():
        if not isinstance(override, dict):
            raise ConfigError(f"variants.{name}: expected a mapping of overrides, got {type(override).__name__}")
        merged = _deep_merge(raw, override)
        merged.setdefault("name", str(name))
        if "name" not in override:
            merged["name"] = str(name)
        variants[str(name)] = validate_scenario(merged, prefix=f"variants.{name}.")
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
