"""The dashboard's logic without Streamlit: form state <-> scenario files, policies, tables, figures.

`app.py` only draws widgets. Everything here is plain Python so it is unit-tested directly:

- `Form` is the dashboard's state: a base scenario mapping (every section but `variants`) and one
  override mapping per variant column. `Form.to_yaml()` is a normal scenario file, so
  `servesim compare` reproduces the dashboard's numbers exactly; `form_from_yaml` fills the form from one.
- `Policy` is what a variant column shows (batching, KV layout, preemption, prefix caching,
  speculative decoding); `policy_of` reads it from a validated scenario, `with_policy` writes it into
  a variant's override.
- The page's choice lists (batching, KV layout, router, preemption, arrival and length kinds) come from
  the schema's Literal types (`literal_choices`), and load sweeps set rates through the arrival specs'
  `with_rate`, so a kind or value added to the schema reaches the page without an edit here.
- The GPU cost model (`COST_MODEL_CHOICES`, from the schema's cost-model kinds and roofline efficiencies):
  new forms start on `BEST`, no cost_model section, so the page prices a scenario by the model `servesim run`
  would (sim/config/cost_choice.py), and `cost_model_note` names it, or says when a `measured` choice falls back;
  for a mixture of experts, the measured model's MoE routing (`MOE_ROUTINGS`, `with_moe_routing`).
- The engine (`ENGINE_CHOICES`: none or a preset of sim/config/engines/): `with_engine` names it in the base at
  a version (`default_engine_version`) and drops the form's own scheduler and KV values where its preset sets
  them (`preset_keys`), so the variant columns start from the engine's defaults.
- `verdict_markdown` is what the page opens with (sim/views/verdict.py: the report's and the CLI's verdict);
  `summary_table` puts variants side by side with deltas against the first; `sweep_figure` plots a
  load sweep. Latency, time-series and KV figures come from `sim.views.report.figures` (with a band, also the
  headline bars with error bars, and ribbons behind the curves: the report's own drawing).
- Files: the page is a server, so a scenario on it opens only files uploaded in this session (`Uploads`), never
  a path on the server (`sim.config.file_access`); uploads are stored under content-addressed names, and a
  store never replaces or deletes a file it did not create (`store_upload`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import yaml
from plotly.subplots import make_subplots

from sim.config.engines import (PRESETS, apply_engine_preset, command_served_model, fitted_versions, named_engine,
                                preset_keys)
from sim.config.file_access import confine_file_fields
from sim.config.files import (
    MAX_SCENARIO_BYTES,
    build_scenario_set,
    deep_merge,
    get_path,
    parse_yaml,
    validate_scenario,
)
from sim.config.schema import (
    DisaggregationSpec,
    HardwareSpec,
    KVCacheSpec,
    MeasuredCostSpec,
    RooflineSpec,
    Scenario,
    ScenarioSet,
    SchedulerSpec,
    literal_choices,
    union_kinds,
)
from sim.errors import ConfigError, ServeSimError
from sim.model.interconnects import INTERCONNECTS
from sim.results import Result
from sim.sched.speculative import DEFAULT_SPECULATIVE_TOKENS
from sim.views.charts import COLORS
from sim.views.report import (
    COST_MODEL_LABEL,
    DISAGGREGATION_ROWS,
    FRONTEND_ROWS,
    MEASURED_AT_KEY,
    PERCENT_KEYS,
    SUMMARY_ROWS,
    DEPLOYMENT_LABEL,
    cost_model_labels,
    deployment_label,
    format_metric,
)
from sim.views.verdict import as_number, verdict_of
from sim.workload.arrivals import ARRIVAL_KINDS, ARRIVAL_SPECS, RATE_KINDS
from sim.workload.generate import WorkloadSpec
from sim.workload.lengths import DatasetLengths, Lengths, PresetLengths

MAX_VARIANTS = 4
MAX_UPLOAD_YAML_BYTES = MAX_SCENARIO_BYTES  # the CLI's limit for scenario files (1 MiB)
MAX_UPLOAD_TRACE_BYTES = 200 << 20
# Above this many simulated requests (all variants together) the page asks before running: at roughly
# 10,000 requests per second of wall time a run this size takes several seconds per variant.
LONG_RUN_REQUESTS = 20_000
TRACE_EXTENSIONS = ("csv", "jsonl")
SCENARIO_EXTENSIONS = ("yaml", "yml")
# Files a scenario upload may bring with it: traces and length tables, Hugging Face config.json files.
COMPANION_EXTENSIONS = TRACE_EXTENSIONS + ("json",)

# Choice lists, from the schema's Literal types: a value added there reaches the page.
ROUTERS = literal_choices(HardwareSpec, "router")
KV_LAYOUTS = literal_choices(KVCacheSpec, "layout")
RESERVE_RULES = literal_choices(KVCacheSpec, "reserve")
PREEMPTION_MODES = literal_choices(KVCacheSpec, "preemption")
LENGTH_PRESETS = literal_choices(PresetLengths, "name")
LENGTH_DATASETS = literal_choices(DatasetLengths, "name")
# Arrival kinds the sidebar has inputs for: a request rate (rate_per_s, and gamma's cv) or a trace upload.
# Other kinds from a loaded file are shown as YAML.
FORM_ARRIVAL_KINDS = tuple(kind for kind, spec in zip(ARRIVAL_KINDS, ARRIVAL_SPECS)
                           if "rate_per_s" in spec.model_fields) + ("trace",)
# Length kinds the sidebar has inputs for: all but empirical (a file of lengths) and listed (every request's
# lengths), both shown as YAML.
FORM_LENGTH_KINDS = tuple(kind for kind in union_kinds(Lengths) if kind not in ("empirical", "listed"))


DEFAULT_BASE: dict = {
    "name": "dashboard",
    "description": "What-if comparison from the ServeSim dashboard.",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm", "tensor_parallel": 1, "num_replicas": 1},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 40.0},
                 "lengths": {"kind": "preset", "name": "sharegpt"}},
    "scheduler": {"batching": "continuous", "max_num_seqs": 256, "max_model_len": 4096},
    "kv_cache": {"layout": "paged", "block_size": 16},
    # no cost_model: the most accurate one available, as `servesim run` chooses it (sim/config/cost_choice.py)
    "slo": {"ttft_s": 2.0, "tpot_s": 0.1, "percentile": 99.0},
    "run": {"seed": 0, "num_requests": 800},
}
DEFAULT_VARIANTS: dict = {
    "continuous+paged": {},
    "continuous+contiguous(max_len)": {"kv_cache": {"layout": "contiguous", "reserve": "max_len"}},
}


# --------------------------------------------------------------------------------------------------
# The form


@dataclass
class Form:
    """The dashboard's settings: a base scenario and named variant overrides (one column each)."""

    base: dict = field(default_factory=lambda: copy.deepcopy(DEFAULT_BASE))
    variants: dict = field(default_factory=lambda: copy.deepcopy(DEFAULT_VARIANTS))

    def to_raw(self) -> dict:
        raw = copy.deepcopy(self.base)
        raw["variants"] = copy.deepcopy(self.variants)
        return raw

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_raw(), sort_keys=False, allow_unicode=True)

    def scenario_set(self) -> ScenarioSet:
        """Validate every variant (raises ConfigError with the one-line message)."""
        if not self.variants:
            raise ConfigError("variants: the dashboard needs at least one variant")
        return build_scenario_set(self.to_raw(), "<dashboard>")


def parse_scenario_yaml(data: bytes | str, source: str = "uploaded file") -> dict:
    """Parse an uploaded scenario with the CLI's reader (data only, size limit, line-numbered errors)."""
    raw = parse_yaml(data, source)
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping of scenario sections, got {type(raw).__name__}")
    return raw


def form_from_yaml(data: bytes | str, source: str = "uploaded file",
                   uploads: Uploads | None = None) -> tuple[Form, list[str]]:
    """A validated form from a scenario file, and notes for the page (e.g. variants left out).

    The file may name only files in `uploads` (those uploaded with it, or earlier in the session): each file
    value becomes the stored upload it names, and any other is refused before anything is opened."""
    raw = parse_scenario_yaml(data, source)
    uploads = uploads if uploads is not None else Uploads()
    confine_file_fields(raw, uploads.resolve, uploads.describe())
    build_scenario_set(copy.deepcopy(raw), source)  # every error surfaces now, as one line
    variants = raw.pop("variants", None) or {}
    notes = []
    if not variants:
        variants = {str(raw.get("name", "scenario")): {}}
    names = list(variants)
    if len(names) > MAX_VARIANTS:
        notes.append(f"the dashboard compares up to {MAX_VARIANTS} variants; left out: "
                     + ", ".join(names[MAX_VARIANTS:]))
    kept = {str(name): variants[name] for name in names[:MAX_VARIANTS]}
    return Form(base=raw, variants=kept), notes


def scenario_key(scenario: Scenario) -> str:
    """Canonical JSON of a validated scenario: equal settings give equal keys (the simulation cache key)."""
    return json.dumps(scenario.model_dump(mode="json"), sort_keys=True)


def scenario_from_key(key: str) -> Scenario:
    return validate_scenario(json.loads(key))


class ResultCache:
    """Results by scenario key, least recently used dropped first; safe to share between sessions."""

    def __init__(self, max_entries: int = 128):
        self.max_entries = max_entries
        self._results: OrderedDict[str, Result] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Result | None:
        with self._lock:
            result = self._results.get(key)
            if result is not None:
                self._results.move_to_end(key)
            return result

    def put(self, key: str, result: Result) -> None:
        with self._lock:
            self._results[key] = result
            self._results.move_to_end(key)
            while len(self._results) > self.max_entries:
                self._results.popitem(last=False)

    def __len__(self) -> int:
        return len(self._results)


def estimated_requests(scenario: Scenario) -> int | None:
    """How many requests a run simulates, or None where the file does not say (a whole trace, a closed loop)."""
    run = scenario.run
    if run.num_requests is not None:
        return run.num_requests
    rate = current_rate(scenario)
    return int(math.ceil(rate * run.duration_s)) if rate and run.duration_s is not None else None


# --------------------------------------------------------------------------------------------------
# The GPU cost model (issue 12)

MEASURED, ROOFLINE = "measured", "roofline"
BEST = "best available (default)"  # no cost_model section: the scenario's default choice (sim/config/cost_choice.py)
_COST_KINDS = union_kinds(Scenario.model_fields["cost_model"].annotation)
_ROOFLINE_EFFICIENCIES = literal_choices(RooflineSpec, "efficiencies")


def _roofline_choice(efficiencies: str) -> str:
    return ROOFLINE if efficiencies == "catalog" else f"{ROOFLINE} ({efficiencies} efficiencies)"


# The choices the sidebar has inputs for: BEST (no section) first, then the kinds that need no numbers or files,
# measured first (fixed needs step times, calibrated a profile; from a loaded file they are kept and shown as YAML),
# the roofline once per `efficiencies` value.
COST_MODEL_CHOICES = (BEST,) + tuple(choice for kind in sorted(_COST_KINDS, key=lambda k: k != MEASURED)
                                     for choice in ((MEASURED,) if kind == MEASURED else
                                                    tuple(_roofline_choice(e) for e in _ROOFLINE_EFFICIENCIES)
                                                    if kind == ROOFLINE else ()))


def cost_model_choice(spec: dict | None) -> str | None:
    """The sidebar choice a scenario's cost_model section is (none: BEST), or None for a kind the sidebar has no
    inputs for."""
    if not spec:
        return BEST
    kind = spec.get("kind", ROOFLINE)
    if kind == ROOFLINE:
        return _roofline_choice(spec.get("efficiencies", "catalog"))
    return MEASURED if kind == MEASURED else None


def with_cost_model_choice(spec: dict | None, choice: str) -> dict | None:
    """The cost_model section for a sidebar choice; the section's other settings (overhead, engine...) are kept
    while the kind stays. None (BEST): no section, so the scenario gets the most accurate model available, as
    every other way in gives it."""
    if choice not in COST_MODEL_CHOICES:
        raise ConfigError(f"cost_model: {choice!r} is not a dashboard choice; allowed: {', '.join(COST_MODEL_CHOICES)}")
    if choice == BEST:
        return None
    spec = copy.deepcopy(spec or {})
    kind = MEASURED if choice == MEASURED else ROOFLINE
    if spec.get("kind", ROOFLINE) != kind:
        spec = {"kind": kind}
    if kind == ROOFLINE:
        efficiencies = next(e for e in _ROOFLINE_EFFICIENCIES if _roofline_choice(e) == choice)
        spec.pop("efficiencies", None)
        if efficiencies != "catalog":
            spec["efficiencies"] = efficiencies
        spec.setdefault("kind", ROOFLINE)
    return spec


MOE_ROUTINGS = literal_choices(MeasuredCostSpec, "moe_routing")  # auto first: the schema's default


def moe_routing_choice(spec: dict | None) -> str:
    """The measured cost model's MoE routing a cost_model section asks for (the schema's default when unset)."""
    return (spec or {}).get("moe_routing", MOE_ROUTINGS[0])


def with_moe_routing(spec: dict, routing: str) -> dict:
    """A measured cost_model section with `routing`; the default leaves the key out, so the file stays short."""
    if routing not in MOE_ROUTINGS:
        raise ConfigError(f"cost_model.moe_routing: {routing!r} is not allowed; allowed: {', '.join(MOE_ROUTINGS)}")
    if (spec or {}).get("kind") != MEASURED:
        raise ConfigError(f"cost_model.moe_routing: {routing!r} needs cost_model.kind 'measured'; allowed: the "
                          "measured choice")
    out = {k: v for k, v in spec.items() if k != "moe_routing"}
    if routing != MOE_ROUTINGS[0]:
        out["moe_routing"] = routing
    return out


def is_mixture_of_experts(model: str | dict | None) -> bool | None:
    """Whether a scenario's model routes tokens to experts: a catalog name (`get_model`) or an inline spec; None
    where the page cannot tell without reading a file (a Hugging Face config) or the model is not valid yet (the
    run then says why in its own words)."""
    from sim.model.catalog import get_model
    from sim.model.specs import ModelSpec
    try:
        if isinstance(model, str):
            return get_model(model).is_moe
        if isinstance(model, dict) and "hf_config" not in model:
            return ModelSpec.model_validate(model).is_moe
    except (ServeSimError, ValueError):  # pydantic's ValidationError is a ValueError
        pass
    return None


def _gpu_name(gpu: str | dict | None) -> str:
    return str(gpu.get("name", "")) if isinstance(gpu, dict) else str(gpu or "h100-sxm")


def cost_model_note(base: dict) -> str | None:
    """A line for the page: which model BEST picks for this scenario, and why (sim/config/cost_choice.py, the
    choice a run then makes and names); or, where a `measured` choice cannot price it, whether the run stops or is
    priced by the roofline (`measured_refusal`, the decision the run's measured model makes)."""
    spec = base.get("cost_model") or {}
    from sim.config.checkpoint import checkpoint_defaults
    overhead = None
    try:  # as validation sees the scenario: a quantized checkpoint's dtype, then the engine preset's values
        base = checkpoint_defaults(base)
        preset = apply_engine_preset(base)
        base, overhead = preset.raw, preset.overhead
    except ServeSimError:
        pass  # the run says why in its own words
    if not spec:
        from sim.config.cost_choice import default_cost_model
        return f"best available for this GPU, model, TP, engine and dtype: {default_cost_model(base, overhead)[1]}"
    if spec.get("kind") != MEASURED:
        return None
    from sim.cost.measured import measured_refusal
    from sim.model.memory import FP8_COMPUTE_DEFAULT
    q = base.get("quantization") or {}
    default = {key: MeasuredCostSpec.model_fields[key].default for key in ("on_missing", "unmeasured_dtype")}
    reason, refusal = measured_refusal(
        spec.get("gpu_data") or _gpu_name((base.get("hardware") or {}).get("gpu")), q.get("weights", "bf16"),
        q.get("kv_cache", "bf16"), q.get("fp8_compute", FP8_COMPUTE_DEFAULT), spec.get("tables", "vllm"),
        spec.get("on_missing", default["on_missing"]), spec.get("unmeasured_dtype", default["unmeasured_dtype"]),
        moe_kernel=q.get("moe_kernel"))
    if reason is None:
        return None
    if refusal is not None:
        return f"measured kernels unavailable ({reason}): the run will stop with this error"
    return f"measured kernels unavailable ({reason}): priced with the roofline (catalog efficiencies)"


# --------------------------------------------------------------------------------------------------
# The engine: a preset (sim/config/engines/) that sets the scheduler, KV, CPU terms and front-end as it runs

NO_ENGINE = "none"  # no engine section: ServeSim's own defaults, no front-end
ENGINE_CHOICES = (NO_ENGINE, *PRESETS)
ENDPOINTS = literal_choices(WorkloadSpec, "endpoint")
# The sections whose keys in the form's base an engine's own defaults replace: the policy a variant column shows.
ENGINE_DECIDES = ("scheduler.", "kv_cache.")


def engine_label(name: str) -> str:
    return "none: ServeSim's own defaults" if name == NO_ENGINE else PRESETS[name].label


def engine_of(base: dict) -> tuple[str, str | None]:
    """The engine a form's base names (its name, or its launch command's program: `named_engine`) and its version
    (NO_ENGINE, None without one)."""
    spec = base.get("engine")
    if not isinstance(spec, dict):
        return NO_ENGINE, None
    version = spec.get("version")
    try:
        name = named_engine(spec)
    except ConfigError:  # a command starting another engine than the name: validation says so
        name = spec.get("name")
    return str(name), None if version is None else str(version)


def default_engine_version(name: str) -> str:
    """The version a new engine choice starts at: the newest with a fit of its own on published runs
    (`fitted_versions`), else the newest the preset knows."""
    fitted = fitted_versions(name)
    return fitted[-1] if fitted else ".".join(map(str, PRESETS[name].newest))


_MISSING = object()


def with_engine(base: dict, name: str, version: str | None = None) -> tuple[dict, list[str]]:
    """(the base for this engine choice, the form's keys it dropped). NO_ENGINE removes the section; the same
    engine keeps its flags, another starts without. Where the preset sets a scheduler or KV key the base also
    gives (the form's defaults, or a loaded file's), the base's is dropped, so the engine's own default applies,
    as in a scenario that names the engine alone; a variant column can set it again."""
    out = copy.deepcopy(base)
    if name == NO_ENGINE:
        out.pop("engine", None)
        return out, []
    if name not in PRESETS:
        raise ConfigError(f"engine.name: {name!r} is not an engine preset; allowed: {', '.join(PRESETS)}")
    old_name, _ = engine_of(base)
    flags = {k: v for k, v in base["engine"].items() if k not in ("name", "version")} if old_name == name else {}
    out["engine"] = {"name": name, "version": version or default_engine_version(name), **flags}
    dropped = []
    for dotted in sorted(preset_keys(out)):
        given = get_path(out, dotted, _MISSING)
        if dotted.startswith(ENGINE_DECIDES) and given is not _MISSING:
            dropped.append(f"{dotted} {given!r}")
            out = _without(out, tuple(dotted.split(".")))
    return out, dropped


def with_command(base: dict, command: str) -> tuple[dict, list[str]]:
    """(the base with this launch command as its engine's `engine.command`, the form's keys it dropped); an empty
    command removes it. A command starting another engine's program (`python -m sglang.launch_server` while the form
    names vLLM) chooses that engine, at the version a new choice starts at, and a catalog model it serves
    (`vllm serve Qwen/Qwen3-32B`) the form's model. The keys the command's flags set drop out of the form as an
    engine choice's do (`with_engine`), so the command's values apply."""
    out, dropped = copy.deepcopy(base), []
    name, version = engine_of(out)
    runs = named_engine({"command": command})
    if runs is not None and runs != name:
        out, dropped = with_engine(out, runs)
        name, version = runs, None
    if command:
        out["engine"]["command"] = command
    else:
        out["engine"].pop("command", None)
    out, more = with_engine(out, name, version)
    from sim.model.catalog import catalog_model_name
    served, given = catalog_model_name(command_served_model(out["engine"]) or ""), out.get("model", "llama-3.1-8b")
    if served is not None and isinstance(given, str) and catalog_model_name(given) != served:
        more.append(f"model {given!r}")  # the command's model, as in a file naming none (an inline one stays)
        out["model"] = served
    return out, dropped + more


# --------------------------------------------------------------------------------------------------
# Policies: what a variant column edits

CHUNKED_PREFILL = "chunked prefill"  # continuous batching with chunked prefill: one choice on the page
BATCHING_MODES = tuple(mode for batching in literal_choices(SchedulerSpec, "batching")
                       for mode in ((batching, CHUNKED_PREFILL) if batching == "continuous" else (batching,)))


INTERCONNECT_NAMES = tuple(INTERCONNECTS)  # the links a disaggregated variant can pick
OVERLAP_MODES = literal_choices(DisaggregationSpec, "overlap")


@dataclass(frozen=True)
class Policy:
    """The serving policy of one variant, as the dashboard's columns show it."""

    batching: str = "continuous"  # one of BATCHING_MODES
    max_num_seqs: int = 256  # continuous: sequences per step
    max_num_batched_tokens: int | None = None  # continuous: token budget per step (None: the engine default)
    max_batch_size: int = 8  # static: requests per batch
    layout: str = "paged"  # one of KV_LAYOUTS
    block_size: int = 16  # paged: tokens per block
    reserve: str = "max_len"  # contiguous: one of RESERVE_RULES
    preemption: str = "recompute"  # one of PREEMPTION_MODES
    enable_prefix_caching: bool = False  # paged only
    speculation: bool = False
    draft_model: str | dict | None = None  # catalog name or inline architecture; None: a draft_cost_ratio draft
    draft_cost_ratio: float | None = 0.1  # draft step time / target step time, without a draft model
    num_speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS  # γ
    alpha: float = 0.7  # acceptance probability (the mean, for a per-request Beta)
    acceptance_concentration: float | None = None  # None: fixed α; else a Beta with this a + b
    accept_length: float | None = None  # the engine's logged tokens a verification, in place of α; None: α
    disaggregated: bool = False  # prefill and decode on separate pools (hardware.disaggregation)
    prefill_replicas: int = 1  # disaggregated: prefill pool replicas
    decode_replicas: int = 1  # disaggregated: decode pool replicas
    link: str | dict = "nvlink4"  # disaggregated: catalog interconnect, or an inline {bandwidth_bytes_per_s, latency_s}
    overlap: str = "none"  # disaggregated: KV sent after the prefill ("none") or layer by layer ("layerwise")


def draft_choices(target: Any) -> list[str]:
    """Catalog models a speculative draft may be for `target` (a catalog name, or an inline architecture): those
    with the target's vocabulary, the one rule a draft must meet (sim.config.deployment refuses the others). An
    unknown target (a custom config not yet valid) offers every model, and the run names the mismatch."""
    from sim.model.catalog import catalog_models, get_model
    models = catalog_models()
    try:
        vocab = get_model(target).vocab_size if isinstance(target, str) else int(target["vocab_size"])
    except (ServeSimError, KeyError, TypeError, ValueError):
        return list(models)
    return [name for name, spec in models.items() if spec.vocab_size == vocab and name != target]


def policy_of(scenario: Scenario) -> Policy:
    s, kv, spec = scenario.scheduler, scenario.kv_cache, scenario.speculation
    batching = "static" if s.batching == "static" else CHUNKED_PREFILL if s.chunked_prefill else "continuous"
    policy = Policy(batching=batching, max_num_seqs=s.max_num_seqs, max_num_batched_tokens=s.max_num_batched_tokens,
                    max_batch_size=s.max_batch_size, layout=kv.layout, block_size=kv.block_size,
                    reserve=kv.reserve, preemption=s.preemption.mode, enable_prefix_caching=kv.enable_prefix_caching)
    hw = scenario.hardware
    if hw.disaggregation is not None:
        d = hw.disaggregation
        policy = replace(policy, disaggregated=True, prefill_replicas=d.prefill.num_replicas or hw.num_replicas,
                         decode_replicas=d.decode.num_replicas or hw.num_replicas,
                         link=d.link if isinstance(d.link, str) else d.link.model_dump(mode="json"), overlap=d.overlap)
    if spec is None:
        return policy
    draft = spec.draft_model
    acc = spec.acceptance
    return replace(policy, speculation=True,
                   draft_model=draft if draft is None or isinstance(draft, str)
                   else draft.model_dump(mode="json", exclude_none=True),
                   draft_cost_ratio=spec.draft_cost_ratio, num_speculative_tokens=spec.num_speculative_tokens,
                   alpha=acc.mean if acc.kind == "beta" else spec.alpha(),
                   acceptance_concentration=acc.concentration if acc.kind == "beta" else None,
                   accept_length=acc.tokens_per_step if acc.kind == "accept_length" else None)


def _policy_sections(policy: Policy) -> dict:
    """The scheduler/kv_cache/speculation keys a policy sets (None: back to the engine default)."""
    if policy.batching == "static":
        scheduler = {"batching": "static", "chunked_prefill": False, "max_batch_size": policy.max_batch_size}
    else:
        scheduler = {"batching": "continuous", "chunked_prefill": policy.batching == CHUNKED_PREFILL,
                     "max_num_seqs": policy.max_num_seqs, "max_num_batched_tokens": policy.max_num_batched_tokens}
    scheduler["preemption"] = {"mode": policy.preemption}
    kv: dict = {"layout": policy.layout}
    if policy.layout == "paged":
        kv.update(block_size=policy.block_size, enable_prefix_caching=policy.enable_prefix_caching)
    else:
        kv.update(reserve=policy.reserve, enable_prefix_caching=False)
    speculation = None
    if policy.speculation:
        acceptance = ({"kind": "fixed", "alpha": policy.alpha} if policy.acceptance_concentration is None else
                      {"kind": "beta", "mean": policy.alpha, "concentration": policy.acceptance_concentration})
        if policy.accept_length is not None:
            acceptance = {"kind": "accept_length", "tokens_per_step": policy.accept_length}
        speculation = {"draft_model": policy.draft_model,
                       "draft_cost_ratio": None if policy.draft_model else policy.draft_cost_ratio,
                       "num_speculative_tokens": policy.num_speculative_tokens, "acceptance": acceptance}
    disaggregation = None
    if policy.disaggregated:
        disaggregation = {"prefill": {"num_replicas": policy.prefill_replicas},
                          "decode": {"num_replicas": policy.decode_replicas},
                          "link": policy.link, "overlap": policy.overlap}
    return {"scheduler": scheduler, "kv_cache": kv, "speculation": speculation,
            "hardware": {"disaggregation": disaggregation}}


def merged(base: dict, override: dict) -> dict:
    """A variant's full scenario mapping: its override deep-merged into the base, as scenario files do."""
    return deep_merge(base, override)


def _leaf_paths(node: dict, prefix: tuple = ()) -> list[tuple]:
    paths = []
    for key, value in node.items():
        if isinstance(value, dict) and value:
            paths += _leaf_paths(value, prefix + (key,))
        else:
            paths.append(prefix + (key,))
    return paths


def _without(node: dict, path: tuple) -> dict:
    """A copy of `node` without the key at `path`, and without mappings that become empty."""
    out = copy.deepcopy(node)
    parents = [out]
    for key in path[:-1]:
        parents.append(parents[-1][key])
    parents[-1].pop(path[-1], None)
    for parent, key in zip(reversed(parents[:-1]), reversed(path[:-1])):
        if parent[key] == {}:
            parent.pop(key)
    return out


def with_policy(base: dict, override: dict, policy: Policy) -> dict:
    """A variant's override with its policy set; other keys in it (workload, quantization...) are kept.

    Keys that do not change the merged scenario (they repeat the base or a default) are left out, so
    the downloaded file reads like a hand-written one.
    """
    full = deep_merge(override, _policy_sections(policy))
    target = _validated_dump(merged(base, full))
    if isinstance(target, str):  # invalid: keep every key, validation will name the problem
        return full
    small = full
    for path in _leaf_paths(full):
        trial = _without(small, path)
        if _validated_dump(merged(base, trial)) == target:
            small = trial
    return small


def _validated_dump(raw: dict) -> dict | str:
    try:
        return Scenario.model_validate(raw).model_dump(mode="json")
    except Exception as err:  # noqa: BLE001 - both sides fail alike, or they differ
        return f"invalid: {err}"


def new_variant_name(existing: list[str]) -> str:
    n = len(existing) + 1
    while f"variant {n}" in existing:
        n += 1
    return f"variant {n}"


# --------------------------------------------------------------------------------------------------
# Uploaded files


def _base_name(name: str) -> str:
    """The last part of a file name as any client spells it ('C:\\a\\t.csv', '../t.csv', 'file:///t.csv')."""
    return name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


@dataclass
class Uploads:
    """The files uploaded in this session: the only files a scenario on the page may open.

    A scenario names one by its uploaded name (`path: conv.csv`, whatever folder precedes it: the folder was on
    the user's machine) or by its stored path (what a downloaded scenario holds); either way the value is only a
    key, and what is opened is the stored file, which this dashboard wrote under its content's hash."""

    files: dict[str, Path] = field(default_factory=dict)  # uploaded name, and stored name -> stored file

    def add(self, name: str, stored: Path) -> None:
        for key in (_base_name(name), stored.name):
            if key not in ("", ".", ".."):
                self.files[key] = stored

    def resolve(self, value: str) -> Path | None:
        """The stored file `value` names, or None (then the scenario may not open it)."""
        stored = {str(p): p for p in self.files.values()}
        found = stored.get(value) or self.files.get(_base_name(value))
        # Only a regular file the store wrote: a symlink put there since would lead elsewhere.
        return found if found is not None and found.is_file() and not found.is_symlink() else None

    def describe(self) -> str:
        stored = {p.name for p in self.files.values()}
        names = sorted(k for k in self.files if k not in stored) or sorted(stored)
        return f"uploaded: {', '.join(names)}" if names else "none uploaded yet"

    def copy(self) -> "Uploads":
        return Uploads(dict(self.files))


def _extension(filename: str) -> str:
    name = _base_name(filename)
    return name.rsplit(".", 1)[1].lower() if "." in name else ""


def store_upload(data: bytes, filename: str, folder: str | Path, *, extensions: tuple[str, ...] = TRACE_EXTENSIONS,
                 what: str = "trace upload") -> tuple[Path, bool]:
    """Store an uploaded file as `<sha256[:16]>.<ext>` in `folder`: (its resolved path, whether this call created it).

    Never replaces or changes a file it did not create: where that name is taken, a regular file with the same
    bytes is used as it is, and anything else (other bytes, a symlink, a folder) is refused with one line. The
    name is claimed with a hard link from a private temporary file, which fails if anything appeared there."""
    if len(data) > MAX_UPLOAD_TRACE_BYTES:
        raise ConfigError(f"{what}: {len(data):,} bytes is larger than the limit of "
                          f"{MAX_UPLOAD_TRACE_BYTES:,} bytes")
    ext = _extension(filename)
    if ext not in extensions:
        raise ConfigError(f"{what}: '{filename}' has extension {ext!r}; allowed: " + ", ".join(extensions))
    folder = Path(folder)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.{ext}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        created = _claim(path, data)
    except OSError as err:
        raise ConfigError(f"{what}: cannot store it in '{folder}' ({err.strerror or err}); "
                          "allowed: SERVESIM_UPLOAD_DIR set to a writable folder") from None
    if not created:
        if path.is_symlink() or not path.is_file():
            raise ConfigError(f"{what}: '{path}' exists and is not a file this dashboard stored; it is left as it "
                              "is; allowed: SERVESIM_UPLOAD_DIR set to a folder of the dashboard's own")
        if path.stat().st_size != len(data) or path.read_bytes() != data:
            raise ConfigError(f"{what}: '{path}' already holds other bytes; the dashboard never replaces a file "
                              "it did not write; allowed: SERVESIM_UPLOAD_DIR set to a folder of the dashboard's own")
    return path.resolve(), created


def _claim(path: Path, data: bytes) -> bool:
    """Write `data` at `path` if nothing is there (True), never over anything (False: something is there)."""
    if path.exists() or path.is_symlink():
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, path)  # atomic, and fails where anything (even a dangling symlink) has the name
            return True
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: exclusive creation, still never over a file
            try:
                with open(path, "xb") as f:
                    f.write(data)
                return True
            except FileExistsError:
                return False
    finally:
        Path(tmp).unlink(missing_ok=True)


def _remove_created(path: Path) -> None:
    """Remove a file `store_upload` created just now, unless something else has taken its place since (its
    bytes no longer hash to its name)."""
    try:
        if (path.is_file() and not path.is_symlink()
                and hashlib.sha256(path.read_bytes()).hexdigest()[:16] == path.stem):
            path.unlink()
    except OSError:
        pass


def save_uploaded_trace(data: bytes, filename: str, folder: str | Path) -> Path:
    """Store an uploaded trace under a content-addressed name (a scenario can point at it later)."""
    from sim.workload.traces import load_trace

    path, created = store_upload(data, filename, folder)
    try:
        load_trace(path, field="trace upload")  # a malformed file fails here with its line number
    except ServeSimError:
        if created:
            _remove_created(path)  # a refused upload leaves nothing behind
        raise
    return path


def load_scenario_upload(files: list[tuple[str, bytes]], folder: str | Path,
                         uploads: Uploads) -> tuple[Form, list[str]]:
    """A scenario uploaded with the files it names: one YAML, and traces, length tables or config.json files.

    The files are stored (`store_upload`) and the scenario may open them and `uploads` (this session's), nothing
    else. On success the files join `uploads`; on any error the files this call stored are removed again."""
    scenarios = [(name, data) for name, data in files if _extension(name) in SCENARIO_EXTENSIONS]
    if len(scenarios) != 1:
        given = ", ".join(name for name, _ in scenarios) or "none"
        raise ConfigError(f"scenario upload: {len(scenarios)} scenario files ({given}); allowed: one "
                          f"{' or '.join('.' + e for e in SCENARIO_EXTENSIONS)} file, with the "
                          f"{', '.join(COMPANION_EXTENSIONS)} files it names")
    batch, created, seen = uploads.copy(), [], {}
    try:
        for name, data in files:
            if _extension(name) in SCENARIO_EXTENSIONS:
                continue
            key = _base_name(name)
            path, fresh = store_upload(data, name, folder, extensions=COMPANION_EXTENSIONS, what="scenario upload")
            if fresh:
                created.append(path)
            if seen.get(key, path) != path:
                raise ConfigError(f"scenario upload: two files named '{key}' with different contents; allowed: "
                                  "one file per name")
            seen[key] = path
            batch.add(name, path)
        form, notes = form_from_yaml(scenarios[0][1], scenarios[0][0], batch)
    except ServeSimError:
        for path in created:
            _remove_created(path)
        raise
    uploads.files.update(batch.files)
    return form, notes


def confined_form(form: Form, uploads: Uploads) -> Form:
    """The form with every file value checked against this session's uploads (the sidebar's custom model YAML
    can name a config.json too); one ConfigError line for the first that is not one."""
    raw = form.to_raw()
    confine_file_fields(raw, uploads.resolve, uploads.describe())
    variants = raw.pop("variants")
    return Form(base=raw, variants=variants)


# --------------------------------------------------------------------------------------------------
# Results side by side

# One list of rows for every view; deltas are against the first variant. Rows no result has are not shown. The
# front-end's rows are numbers but the first, which says where TTFT, TPOT and E2E are measured: the caption says it
# (`measured_at_caption`), the table holds numbers only.
SUMMARY_METRICS = SUMMARY_ROWS + [row for row in FRONTEND_ROWS if row[0] != MEASURED_AT_KEY] + DISAGGREGATION_ROWS
_KEY_OF_LABEL = {label: key for key, label in SUMMARY_METRICS}


def _points(value: float, reference: float) -> str:
    """Change of a percentage, in percentage points."""
    if math.isnan(value) or math.isnan(reference):
        return "-"
    return "=" if value == reference else f"{(value - reference) * 100:+.3g} pp"


def summary_numbers(results: list[Result]) -> pd.DataFrame:
    """Metric rows (labels as index) by variant columns, as numbers (NaN where a metric does not apply)."""
    rows = [(label, [as_number(r.summary.get(key)) for r in results]) for key, label in SUMMARY_METRICS
            if any(key in r.summary for r in results)]
    return pd.DataFrame([v for _, v in rows], index=[label for label, _ in rows], columns=[r.name for r in results])


def delta_text(value: float, reference: float) -> str:
    """Change from the reference: relative where the reference is non-zero, else absolute."""
    if math.isnan(value) or math.isnan(reference):
        return "-"
    if value == reference:
        return "="
    if reference == 0:
        return f"{value - reference:+,.4g}"
    return f"{(value - reference) / abs(reference) * 100:+.1f}%"


def summary_table(results: list[Result]) -> pd.DataFrame:
    """The table the page shows: each variant's value, and after every variant but the first its change
    from the first variant (column "Δ name")."""
    numbers = summary_numbers(results)
    keys = [_KEY_OF_LABEL[label] for label in numbers.index]
    table = pd.DataFrame(index=numbers.index)
    first = numbers.columns[0]
    for i, column in enumerate(numbers.columns):
        table[column] = [format_metric(k, v) if not math.isnan(v) else "-" for k, v in zip(keys, numbers[column])]
        if i > 0:
            table[f"Δ {column}"] = [_points(v, ref) if k in PERCENT_KEYS else delta_text(v, ref)
                                    for k, v, ref in zip(keys, numbers[column], numbers[first])]
    table.index.name = "metric"
    return table


def measured_at_caption(results: list[Result]) -> str | None:
    """A line above the summary table where a variant's front-end runs (an engine preset's, or its own
    `frontend:`): its TTFT, TPOT and E2E are then the client's, and the front-end rows split them."""
    at_client = [r.name for r in results if r.summary.get(MEASURED_AT_KEY) == "client"]
    if not at_client:
        return None
    return (f"TTFT, TPOT and E2E as the client measures them (send to streamed token, through the API front-end) for "
            f"{', '.join(at_client)}; the front-end and engine rows below split them")


def cost_model_caption(results: list[Result]) -> str:
    """One line above the summary table: which cost model priced each variant (the same words as the CLI's
    and the report's "cost model" row). Not a table row: the table holds the summary's numbers only, so a
    summary.json from `servesim compare` rebuilds it exactly."""
    labels = cost_model_labels(results)
    if len(set(labels)) == 1:
        return f"{COST_MODEL_LABEL}: {labels[0]}"
    return f"{COST_MODEL_LABEL}: " + "; ".join(f"{r.name}: {label}" for r, label in zip(results, labels))


def deployment_caption(results: list[Result]) -> str:
    """One line above the summary table: what each variant deployed (the CLI's and the report's "deployment" row),
    once where they all deployed the same."""
    labels = [deployment_label(r.scenario) for r in results]
    if len(set(labels)) == 1:
        return f"{DEPLOYMENT_LABEL}: {labels[0]}"
    return f"{DEPLOYMENT_LABEL}: " + "; ".join(f"{r.name}: {label}" for r, label in zip(results, labels))


def slo_verdicts(results: list[Result]) -> dict[str, bool | None]:
    return {r.name: r.summary.get("slo_met") for r in results}


def verdict_markdown(results: list[Result]) -> str:
    """What the page opens with: the verdict (sim/views/verdict.py, the same as the report's and the CLI's),
    as Streamlit markdown."""
    return verdict_of(results).markdown()


# --------------------------------------------------------------------------------------------------
# Load sweep


def sweepable(scenario: Scenario) -> bool:
    return scenario.workload.arrival.has_rate


def current_rate(scenario: Scenario) -> float | None:
    """The workload's mean arrival rate (a trace at its own pace: read from the file); None without one."""
    arrival = scenario.workload.arrival
    return arrival.mean_rate_per_s if arrival.has_rate else None


def sweep_rates(low: float, high: float, num_points: int) -> list[float]:
    low, high = min(low, high), max(low, high)
    return [round(float(x), 3) for x in np.linspace(low, high, num_points)]


def default_sweep_rates(scenario: Scenario, num_points: int = 6) -> list[float]:
    """From a quarter to one and a half times the current rate (10 req/s where the workload has none)."""
    rate = current_rate(scenario) or 10.0
    return sweep_rates(0.25 * rate, 1.5 * rate, num_points)


def at_rate(scenario: Scenario, rate_per_s: float, num_requests: int | None = None) -> Scenario:
    """The same scenario at another mean arrival rate, the arrival process's shape kept (and optionally
    another request count)."""
    arrival = scenario.workload.arrival
    if not arrival.has_rate:
        raise ConfigError(f"workload.arrival.kind: a load sweep sets the rate of {', '.join(RATE_KINDS)} "
                          f"arrivals, not {arrival.kind!r}")
    raw = scenario.model_dump(mode="json", exclude_none=True)
    raw["workload"]["arrival"] = arrival.with_rate(float(rate_per_s)).model_dump(mode="json", exclude_none=True)
    if num_requests is not None:
        raw["run"]["num_requests"] = int(num_requests)
    return validate_scenario(raw)


def sweep_row(name: str, rate_per_s: float, result: Result) -> dict:
    s = result.summary
    return {"variant": name, "rate_per_s": rate_per_s, "throughput_rps": s["throughput_rps"],
            "goodput_rps": s["goodput_rps"], "ttft_s_p99": s["ttft_s_p99"], "e2e_s_p99": s["e2e_s_p99"]}


def run_sweep(scenarios: dict[str, Scenario], rates: list[float], num_requests: int,
              simulate: Callable[[Scenario], Result]) -> pd.DataFrame:
    """Every variant at every rate, through `simulate` (the page passes its cached simulation)."""
    rows = [sweep_row(name, rate, simulate(at_rate(sc, rate, num_requests)))
            for name, sc in scenarios.items() for rate in rates]
    return pd.DataFrame(rows)


def sweep_figure(sweep: pd.DataFrame) -> go.Figure:
    fig = make_subplots(rows=1, cols=3, subplot_titles=("throughput incl. drain (req/s)", "p99 TTFT (s)",
                                                       "p99 end-to-end (s)"))
    for i, (name, part) in enumerate(sweep.groupby("variant", sort=False)):
        color = COLORS[i % len(COLORS)]
        for col, metric in enumerate(("throughput_rps", "ttft_s_p99", "e2e_s_p99"), start=1):
            fig.add_trace(go.Scatter(x=part["rate_per_s"], y=part[metric], mode="lines+markers", name=name,
                                     legendgroup=name, showlegend=col == 1, line=dict(color=color)), row=1, col=col)
    top = float(sweep["rate_per_s"].max()) if len(sweep) else 1.0
    fig.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="offered load", showlegend=True,
                             line=dict(color="#999", dash="dot")), row=1, col=1)
    fig.update_xaxes(title_text="request rate (req/s)")
    fig.update_layout(title="Load sweep", height=380)
    return fig


