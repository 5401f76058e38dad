"""What a serving engine spends outside its kernels each step (issue 12).

Kernel times are not step times. Around the kernels of every step vLLM schedules (Python), prepares
the inputs (token ids, positions, slot mappings, block tables: work per scheduled sequence and per
prompt token), samples and processes the outputs (per sequence), and in eager mode launches every
kernel from Python one by one. `EngineOverhead` prices this with named, linear terms:

    step = max(kernels + weights_stream_s, launch_per_layer_s × layers) + per_step_s + per_seq_s × sequences
           + per_prefill_token_s × prefill tokens

The launch term overlaps the kernels (the CPU enqueues kernels asynchronously: a step is launch-bound
only when enqueueing them takes longer than running them); the other terms are serial CPU work between
steps (vLLM V1 overlaps some of it with async scheduling; the terms then come out smaller when fitted).
A step an engine replays as a CUDA graph launches once, so it has no launch term: a decode-only step of at
most `graph_max_seqs` sequences, and a step with prompt tokens where `graph_prefill` (0 and false, the
defaults: every step launches its kernels). SGLang captures its decode batches up to `--cuda-graph-max-bs`
and runs larger ones eagerly (model_executor/cuda_graph_runner.py `can_run`), its prefill steps too before
its prefill graphs (0.5.10); its preset sets these.

Defaults per engine, and where they come from (none of them is a measurement of this project's engine;
fit your own with `python -m calibrate fit-engine`):

- `vllm-cudagraph`: per_step_s 0.5 ms, per_seq_s 10 µs, per_prefill_token_s 0, launch_per_layer_s 0.
  Sources: the vLLM v0.6.0 performance update (blog.vllm.ai/2024/09/05/perf-update.html) profiled
  Llama-3-8B on one H100 and found scheduling and input preparation took 29% of the time and GPU execution
  38% (V0, before the V1 rewrite); Srivatsa et al., "Can scheduling overhead dominate LLM inference
  performance?" (mlsys.wuklab.io/posts/scheduling_overhead, 2024) found vLLM's scheduling overhead can exceed
  half of inference time, mostly tensor pre/post-processing that grows with the batch. The values themselves
  are ESTIMATES for V1 with async output processing (a few hundred µs of Python per step plus some µs per
  sequence), chosen to sit below those V0 shares; no published table gives them. Under CUDA graphs the decode
  step is one graph launch (docs.vllm.ai/en/latest/design/cuda_graphs/), so no per-layer launch term.
- `vllm-eager`: the same CPU terms plus launch_per_layer_s 60 µs. ESTIMATE: a Llama decoder layer runs ~12
  kernels in vLLM's eager path (2 norms, QKV, rotary, cache write, attention, O-proj, gate-up, activation,
  down, 2 residual adds), at ~5 µs of PyTorch dispatch + CUDA launch each (typical host cost of one eager op);
  CUDA graphs exist in vLLM to remove exactly this (the design doc above).
- `none`: all terms 0 (the kernel model alone).

`weights_stream_s` is GPU time, not the engine's CPU: where the deployment keeps some layers' weights in host
memory (`kv_cache.weights_offload_bytes`, vLLM's --cpu-offload-gb), every forward pass reads them over the host
link, offloaded bytes / `GPUSpec.host_link_bytes_per_s` a step whatever its tokens. vLLM 0.6-0.7 (and V0 after)
copy them in before each offloaded layer runs, on the stream its kernels run on; V1 (0.8 on) lets the kernels read
them from pinned host memory (UVA): either way each byte crosses the link once a pass. Not modelled: a MoE layer's
kernels under UVA read only the experts some token routes to (fewer bytes: this is their upper bound), and a long
prefill's GEMM tiles may read a weight more than once (more).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import cached_property

import numpy as np

from sim.core.step_plan import StepPlan
from sim.core.step_plan import decode_step_costs
from sim.cost.roofline import StepCost
from sim.errors import ConfigError
from sim.jit import njit

TERMS = ("per_step_s", "per_seq_s", "per_prefill_token_s", "launch_per_layer_s")
# The pack the compiled form carries (`EngineOverhead.pack`): these four numbers, the launch term already times
# the layers, then 1.0 where the engine overlaps its CPU work with the GPU (`overlap`), the largest decode batch
# replayed as a CUDA graph (`graph_max_seqs`), 1.0 where steps with prompt tokens are too (`graph_prefill`), and the
# GPU's time reading weights from host memory (`weights_stream_s`).
(O_PER_STEP, O_PER_SEQ, O_PER_PREFILL_TOKEN, O_LAUNCH, O_OVERLAP, O_GRAPH_MAX_SEQS, O_GRAPH_PREFILL,
 O_WEIGHTS_STREAM) = range(8)


@njit(cache=True, inline="always")
def with_overhead(terms, kernels_s, num_seqs, num_prefill_tokens, num_tokens, num_padding_tokens):
    """A step's time: its kernels' time `kernels_s` plus the engine's time outside them (the one definition of
    the formula in this module's docstring, called by `EngineOverhead.step_time` and inlined into the compiled
    core). `terms`: the pack; empty: no overhead. A step with no tokens costs its kernels' time alone. A lockstep
    rank's padding tokens (`StepPlan.num_padding_tokens`, in `num_tokens`) are no sequences' work, but its CUDA
    graph is captured for the padded batch: a decode step replays one only where its sequences and padding fit."""
    if terms.shape[0] == 0 or num_tokens == 0:
        return kernels_s
    launch_s = terms[O_LAUNCH]
    if ((num_seqs + num_padding_tokens <= terms[O_GRAPH_MAX_SEQS]) if num_prefill_tokens == 0
            else (terms[O_GRAPH_PREFILL] != 0.0)):
        launch_s = 0.0  # a step replayed as one CUDA graph launches once
    kernels_s += terms[O_WEIGHTS_STREAM]  # NaN stays NaN
    busy_s = kernels_s if kernels_s >= launch_s or kernels_s != kernels_s else launch_s
    serial_s = terms[O_PER_STEP] + terms[O_PER_SEQ] * num_seqs + terms[O_PER_PREFILL_TOKEN] * num_prefill_tokens
    if terms[O_OVERLAP] != 0.0:
        # The next step is scheduled and its inputs prepared while the GPU runs this one (SGLang's overlap
        # scheduler, vLLM's async scheduling): the step takes the longer of the two.
        return busy_s if busy_s >= serial_s or busy_s != busy_s else serial_s
    return busy_s + serial_s


@dataclass(frozen=True)
class EngineOverhead:
    """Named overhead terms of one engine, and where each value came from."""

    engine: str  # vllm-cudagraph, vllm-eager, none, or fitted
    per_step_s: float = 0.0  # schedule + prepare inputs + process outputs, once per step
    per_seq_s: float = 0.0  # input preparation, sampling and output processing per scheduled sequence
    per_prefill_token_s: float = 0.0  # input preparation per prompt token scheduled (positions, slot mapping)
    launch_per_layer_s: float = 0.0  # eager: host time to launch one layer's kernels (overlaps the kernels)
    graph_max_seqs: int = 0  # decode-only steps of at most this many sequences replay a CUDA graph: no launch term
    graph_prefill: bool = False  # steps with prompt tokens replay CUDA graphs too: no launch term
    source: str = ""  # where the values came from: defaults (estimates, see module docstring) or a fit
    overlap: bool = False  # the CPU terms run while the GPU runs the previous step (a step: the longer of the two)
    fitted_for: str = ""  # the engine version(s) whose fit gave the terms, for labels and the repr: prices nothing
    # GPU time, not CPU: the weights an engine keeps in host memory (`kv_cache.weights_offload_bytes`), read over the
    # host link at every forward pass, before the kernels that use them finish; set by the deployment, not a fit
    weights_stream_s: float = 0.0

    def __post_init__(self):
        for name in TERMS:
            value = getattr(self, name)
            if not value >= 0.0:  # also refuses NaN
                raise ConfigError(f"cost_model.overhead.{name}: {value!r} is not allowed; allowed: a number >= 0")
        if not self.weights_stream_s >= 0.0:
            raise ValueError(f"weights_stream_s: {self.weights_stream_s!r}; allowed: a number >= 0")
        if isinstance(self.graph_max_seqs, bool) or not isinstance(self.graph_max_seqs, int) or self.graph_max_seqs < 0:
            raise ConfigError(f"cost_model.overhead.graph_max_seqs: {self.graph_max_seqs!r} is not allowed; allowed: "
                              "a whole number >= 0")

    def terms(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in TERMS}

    def describe(self) -> str:
        parts = [f"{name}={value * 1e6:g}us" for name, value in self.terms().items() if value]
        parts += ["overlapped with the GPU"] if self.overlap else []
        parts += [graphs] if (graphs := self.graphs_described()) else []
        parts += [f"weights read from host memory {self.weights_stream_s * 1e3:.3g} ms a step"] \
            if self.weights_stream_s else []
        return f"overhead {self.engine}: " + (", ".join(parts) or "none") + (f" [{self.source}]" if self.source else "")

    def graphs_described(self) -> str:
        """Which steps skip the launch term, in a few words ('' where every step pays it, or none has one)."""
        if not self.launch_per_layer_s or not (self.graph_max_seqs or self.graph_prefill):
            return ""
        decode = f"decode batches up to {self.graph_max_seqs}" if self.graph_max_seqs else ""
        return "CUDA graphs for " + " and ".join(part for part in (decode, "prefill" * self.graph_prefill) if part)

    def pack(self, num_layers: int) -> np.ndarray:
        """The terms as `with_overhead` takes them."""
        terms = np.zeros(8)
        terms[O_PER_STEP], terms[O_PER_SEQ] = self.per_step_s, self.per_seq_s
        terms[O_PER_PREFILL_TOKEN], terms[O_LAUNCH] = self.per_prefill_token_s, self.launch_per_layer_s * num_layers
        terms[O_OVERLAP] = 1.0 if self.overlap else 0.0
        terms[O_GRAPH_MAX_SEQS], terms[O_GRAPH_PREFILL] = self.graph_max_seqs, 1.0 if self.graph_prefill else 0.0
        terms[O_WEIGHTS_STREAM] = self.weights_stream_s
        return terms

    @cached_property
    def _serial_terms(self) -> np.ndarray:
        return replace(self, launch_per_layer_s=0.0, overlap=False, weights_stream_s=0.0).pack(0)

    def serial_s(self, plan: StepPlan) -> float:
        """The CPU time between steps (not overlapped with kernels): a pipelined replica's driver time, per step."""
        return float(with_overhead(self._serial_terms, 0.0, plan.num_seqs, plan.num_prefill_tokens, plan.num_tokens,
                                   plan.num_padding_tokens))

    def step_time(self, kernels_s: float, plan: StepPlan, num_layers: int) -> float:
        return float(with_overhead(self.pack(num_layers), kernels_s, plan.num_seqs, plan.num_prefill_tokens,
                                   plan.num_tokens, plan.num_padding_tokens))


_DEFAULT_SOURCE = "defaults: estimates (sim/cost/overhead.py names the sources)"
ENGINE_DEFAULTS: dict[str, EngineOverhead] = {
    "vllm-cudagraph": EngineOverhead("vllm-cudagraph", per_step_s=500e-6, per_seq_s=10e-6, source=_DEFAULT_SOURCE),
    "vllm-eager": EngineOverhead("vllm-eager", per_step_s=500e-6, per_seq_s=10e-6, launch_per_layer_s=60e-6,
                                 source=_DEFAULT_SOURCE),
    "none": EngineOverhead("none", source="no engine overhead"),
}


def engine_overhead(engine: str, fitted_for: str | None = None, **overrides: float | bool | None) -> EngineOverhead:
    """An engine's default terms, with any given term (or `overlap`, `graph_max_seqs`, `graph_prefill`) replaced
    (the repr then names it as given);
    `fitted_for`: whose fitted terms the given ones are (named in the repr and the label)."""
    if engine not in ENGINE_DEFAULTS:
        raise ConfigError(f"cost_model.overhead.engine: {engine!r} is not allowed; allowed: {', '.join(ENGINE_DEFAULTS)}")
    given = {k: v for k, v in overrides.items() if v is not None}
    unknown = sorted(set(given) - set(TERMS) - {"overlap", "graph_max_seqs", "graph_prefill"})
    if unknown:
        raise ConfigError(f"cost_model.overhead: {unknown[0]!r} is not a term; allowed: {', '.join(TERMS)}")
    base = ENGINE_DEFAULTS[engine]
    if not given and not fitted_for:
        return base
    source = base.source + ("; given: " + ", ".join(sorted(given)) if given else "")
    if fitted_for:
        source += f"; fit: {fitted_for}"
    return replace(base, source=source, fitted_for=fitted_for or "", **given)


class EngineOverheadCostModel:
    """A kernel cost model (measured, calibrated, roofline) plus the engine's overhead outside its kernels."""

    def __init__(self, kernels, overhead: EngineOverhead, num_layers: int):
        if isinstance(kernels, EngineOverheadCostModel) and not any(kernels.overhead.terms().values()):
            # Kernels that carry only the reads of offloaded weights (`sim.run._with_overhead`; a fit wraps them
            # with its own terms): one overhead with both, as the compiled form takes one
            overhead = replace(overhead, weights_stream_s=overhead.weights_stream_s + kernels.overhead.weights_stream_s)
            kernels = kernels.kernels
        self.kernels, self.overhead, self.num_layers = kernels, overhead, num_layers
        self._terms = overhead.pack(num_layers)

    def __repr__(self) -> str:
        return f"EngineOverheadCostModel({self.kernels!r} + {self.overhead.describe()})"

    def step_cost(self, plan: StepPlan) -> StepCost:
        inner = self.kernels.step_cost(plan)
        time_s = with_overhead(self._terms, inner.time_s, plan.num_seqs, plan.num_prefill_tokens, plan.num_tokens,
                               plan.num_padding_tokens)
        return StepCost(float(time_s), inner.flops, inner.bytes)

    def compiled_params(self) -> tuple | None:
        """The kernels' compiled form with these terms added (`compiled_pricing.pricer`), or None."""
        form = getattr(self.kernels, "compiled_params", None)
        inner = form() if form is not None else None
        if inner is None:
            return None
        return inner[:4] + (self._terms,)

    def note_compiled_outside(self, points) -> None:
        note = getattr(self.kernels, "note_compiled_outside", None)
        if note is not None:
            note(points)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`): the kernels' (their closed form
        where they have one), each plus the overhead, which does not depend on the context."""
        terms = self._terms
        return [StepCost(float(with_overhead(terms, c.time_s, num_seqs, 0, num_seqs, 0)), c.flops, c.bytes)
                for c in decode_step_costs(self.kernels, num_seqs, context_tokens, num_steps)]


def overhead_fields() -> tuple[str, ...]:
    return tuple(f.name for f in fields(EngineOverhead))
