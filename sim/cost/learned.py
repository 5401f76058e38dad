"""A roofline whose efficiencies were learned from the GPUs with measured kernels (issue 12).

`cost_model: {kind: roofline, efficiencies: learned}`: the same per-op sums as RooflineCostModel, but each kernel's
time is a launch plus its ideal time at the GPU catalog's peaks (FLOP/s, HBM bytes/s) divided by an efficiency read from
calibrate/measured/learned_roofline.json (written by `python -m calibrate.learn_roofline`, which also reports
its leave-one-GPU-out error):

- GEMMs: efficiency per (log2 compute-time / memory-time on this GPU, log2 weight elements) cell, the median over
  the measured GPUs of ideal / (measured − launch) time, plus a launch (`min_kernel_s`, the fastest measured
  GEMM);
- prefill attention per log2(batch × prompt tokens), decode attention per log2(batch × context tokens);
- norms/activations at the decode-attention byte efficiency of the largest cell;
- all-reduce: a fixed latency plus the message at a fraction of the catalog interconnect bandwidth, both per
  interconnect class (`interconnect_class`: NVLink or PCIe) and GPU count. A class no measured GPU belongs to
  falls back to the catalog's all-reduce (the GPU's interconnect_efficiency and allreduce_latency_s).

No step overhead: the tables are kernel times (compose with `overhead:` for the engine's time outside kernels).
Efficiencies are fractions of the catalog's peaks, so the model applies to a GPU without measured tables.

No compiled form: the compiled engine core hands runs priced by this model to the SimPy engine. Its price is
written once, here, in Python (the linear layers' FLOPs and bytes are the roofline's,
`sim.cost.roofline_kernel`); `decode_step_costs` prices a run's context-free terms once and repeats
`step_cost`'s remaining operations per step, which tests/unit/test_decode_step_costs.py checks bit for bit.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from pathlib import Path

from sim.core.step_plan import StepPlan
from sim.cost.roofline import RooflineCostModel, StepCost
from sim.errors import ConfigError
from sim.model.specs import GPUSpec

LEARNED_PATH = Path(__file__).resolve().parents[2] / "calibrate" / "measured" / "learned_roofline.json"
_ACT = 2


def interconnect_class(gpu: GPUSpec) -> str:
    """'pcie' when peers talk over a link no faster than the host's PCIe link (L40S, L4, A10G), else 'nvlink'."""
    return "pcie" if gpu.interconnect_bytes_per_s <= gpu.host_link_bytes_per_s else "nvlink"


def load_learned(path: Path | None = None) -> dict:
    p = path or LEARNED_PATH
    if not p.is_file():
        raise ConfigError(f"cost_model.efficiencies: 'learned' needs {p}; allowed: catalog, or run "
                          "`python -m calibrate.learn_roofline`")
    return json.loads(p.read_text())


def _lookup(edges: list[float], values: list[float], x: float) -> float:
    """The value of the bin holding log2(x) (bins by their lower edges; held at the ends)."""
    i = bisect_right(edges, math.log2(max(x, 1.0))) - 1
    return values[min(max(i, 0), len(values) - 1)]


class LearnedRooflineCostModel(RooflineCostModel):
    def __init__(self, *args, learned: dict | None = None, **kwargs):
        kwargs.setdefault("step_overhead_s", 0.0)
        super().__init__(*args, **kwargs)
        self.learned = learned or load_learned()
        g = self.gpu
        peak = g.fp8_flops_per_s if (kwargs.get("fp8_compute") and g.fp8_flops_per_s) else g.bf16_flops_per_s
        self.peak_flops, self.peak_bytes = peak, g.hbm_bytes_per_s
        L = self.learned
        self.min_kernel_s = L["min_kernel_s"]
        if L.get("format_version") != 2:
            raise ConfigError(f"cost_model.efficiencies: 'learned' reads format_version 2, got "
                              f"{L.get('format_version')!r}; rerun `python -m calibrate.learn_roofline`")
        self.interconnect = interconnect_class(g)
        by_count = L["allreduce"].get(self.interconnect)
        if by_count:
            # The measured GPU count nearest in log2 (TP 16 reads 8, TP 3 reads 2 or 4).
            n = min(by_count, key=lambda c: (abs(math.log2(int(c)) - math.log2(max(self.tp, 2))), int(c)))
            ar = by_count[n]
            self.ar_latency_s, self.ar_bw = ar["latency_s"], g.interconnect_bytes_per_s * ar["bandwidth_fraction"]
            self.ar_source = f"{self.interconnect} all-reduce learned at {n} GPUs"
        else:
            self.ar_latency_s, self.ar_bw = g.allreduce_latency_s, g.interconnect_bytes_per_s * g.interconnect_efficiency
            self.ar_source = f"no measured {self.interconnect} GPU: catalog all-reduce"
        # What depends on a count alone: batch size -> the context-free parts of a decode-only step; ("linear",
        # tokens) / ("head", rows) -> the linear layers' / LM head's FLOPs and bytes (a call into the roofline's
        # compiled arithmetic costs more than this model's own arithmetic per step). One dict, not three: CPython
        # 3.11 reads the attributes of an instance that has 30 or more of them more slowly.
        self._memo: dict = {}

    def __repr__(self) -> str:
        return (f"LearnedRooflineCostModel({self.model.name} on {self.gpu.name} x{self.tp}, weights={self.weight_dtype}, "
                f"kv={self.kv_dtype}, efficiencies learned from {', '.join(self.learned['fitted_on'])} "
                f"({self.learned['source']}), {self.ar_source}, step overhead {self.step_overhead_s * 1e3:g} ms)")

    def _ideal(self, flops: float, nbytes: float) -> float:
        return max(flops / self.peak_flops, nbytes / self.peak_bytes)

    def _kernel(self, work_s: float) -> float:
        """A launch plus the work (the efficiencies were learned on time beyond the launch)."""
        return self.min_kernel_s + work_s

    def _gemm_eff(self, flops: float, nbytes: float, weights: float) -> float:
        g = self.learned["gemm"]
        i = bisect_right(g["r_edges"], math.log2((flops / self.peak_flops) / (nbytes / self.peak_bytes))) - 1
        i = min(max(i, 0), len(g["eff"]) - 1)
        return _lookup(g["w_edges"], g["eff"][i], weights)

    def step_cost(self, plan: StepPlan) -> StepCost:
        n = plan.num_tokens
        if n == 0:
            return StepCost(self.step_overhead_s, 0.0, 0.0)
        L = self.learned
        window = self.model.sliding_window
        flops_total = bytes_total = time_s = 0.0
        attn_s = 0.0
        kvb = self.kv_bytes_per_token_layer
        for chunk, context in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens):
            pairs = chunk * (min(context + (chunk + 1) / 2, window) if window else context + (chunk + 1) / 2)
            f = pairs * self.attn_flops_per_pair
            b = (min(context + chunk, window) if window else context + chunk) * kvb + chunk * self.q_bytes_per_token
            eff = _lookup(L["prefill_attention"]["edges"], L["prefill_attention"]["eff"], chunk * (context + chunk))
            attn_s += self._kernel(self._ideal(f, b) / eff)
            flops_total += f * self.model.num_layers  # every layer attends
            bytes_total += b * self.model.num_layers
        if plan.num_decode_seqs:
            ctx = plan.decode_context_tokens
            if window:
                ctx = min(ctx, plan.num_decode_seqs * window)
            f = ctx * plan.decode_query_tokens * self.attn_flops_per_pair
            b = ctx * kvb + plan.num_decode_seqs * plan.decode_query_tokens * self.q_bytes_per_token
            eff = _lookup(L["decode_attention"]["edges"], L["decode_attention"]["eff"], ctx)
            attn_s += self._kernel(self._ideal(f, b) / eff)
            flops_total += f * self.model.num_layers  # every layer attends
            bytes_total += b * self.model.num_layers
        elem_s, ar_s = self._elementwise_and_allreduce_s(n)
        counts = iter(self._memo.get(("linear", n)) or self._remember(("linear", n), self.linear_counts(n)))
        for num_layers, matmuls in self.groups:
            layer_s = attn_s + elem_s + ar_s
            for mm in matmuls:
                f, b = next(counts)
                per_expert = mm.weight_params / mm.num_experts
                layer_s += self._kernel(self._ideal(f, b) / self._gemm_eff(f, b, per_expert))
                flops_total += num_layers * f
                bytes_total += num_layers * b
            time_s += num_layers * layer_s
        rows = plan.num_sampled_seqs + plan.num_decode_seqs * (plan.decode_query_tokens - 1)
        if rows:
            f, b = self._memo.get(("head", rows)) or self._remember(("head", rows), self.lm_head_counts(rows))
            time_s += self._kernel(self._ideal(f, b) / self._gemm_eff(f, b, self.lm_head.weight_params))
        swapped = plan.swap_in_tokens + plan.swap_out_tokens
        if swapped:
            time_s += swapped * kvb * self.model.num_layers / self.gpu.host_link_bytes_per_s
        return StepCost(time_s + self.step_overhead_s, flops_total, bytes_total)

    def _remember(self, key, value):
        if len(self._memo) < 65536:
            self._memo[key] = value
        return value

    def _elementwise_and_allreduce_s(self, n: int) -> tuple[float, float]:
        """Per layer, for `n` tokens: the elementwise kernels' time and the TP all-reduces' time (0 at TP 1)."""
        elem_b = n * (8 * self.hidden + 3 * self.ffn_per_gpu) * _ACT
        elem_s = max(3 * self.min_kernel_s, elem_b / (self.peak_bytes * self.learned["elementwise_bytes_efficiency"]))
        ar_s = 0.0
        if self.tp > 1:
            msg = n * self.hidden * _ACT
            ar_s = 2 * (self.ar_latency_s + 2 * (self.tp - 1) / self.tp * msg / self.ar_bw)
        return elem_s, ar_s

    def _learned_decode_constants(self, n: int) -> tuple:
        """The context-free parts of a decode-only step of `n` sequences, as `step_cost` computes them: the
        elementwise and all-reduce times, per layer group its layers and per linear layer (kernel s, FLOPs
        and bytes of all its layers), and the LM head's kernel time."""
        elem_s, ar_s = self._elementwise_and_allreduce_s(n)
        groups = []
        counts = iter(self.linear_counts(n))
        for num_layers, matmuls in self.groups:
            terms = []
            for mm in matmuls:
                f, b = next(counts)
                per_expert = mm.weight_params / mm.num_experts
                terms.append((self._kernel(self._ideal(f, b) / self._gemm_eff(f, b, per_expert)),
                              num_layers * f, num_layers * b))
            groups.append((num_layers, terms))
        f, b = self.lm_head_counts(n)  # one sampled row per decoding sequence
        head_s = self._kernel(self._ideal(f, b) / self._gemm_eff(f, b, self.lm_head.weight_params))
        return elem_s, ar_s, groups, head_s

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`), bit-identical to `step_cost` of
        each (this overrides the catalog roofline's, whose kernel times are not these): the linear layers'
        kernels, elementwise ops, all-reduces and LM head are priced once; per step the decode attention,
        and the sums in `step_cost`'s order (attention's FLOPs and bytes first, then each linear layer's)."""
        n = num_seqs
        L = self.learned
        window = self.model.sliding_window
        kvb, afpp, q_bytes = self.kv_bytes_per_token_layer, self.attn_flops_per_pair, self.q_bytes_per_token
        edges, effs = L["decode_attention"]["edges"], L["decode_attention"]["eff"]
        model_layers = self.model.num_layers
        elem_s, ar_s, groups, head_s = self._memo.get(n) or self._remember(n, self._learned_decode_constants(n))
        out = []
        context = context_tokens
        for _ in range(num_steps):
            ctx = min(context, n * window) if window else context
            f = ctx * 1 * afpp
            b = ctx * kvb + n * 1 * q_bytes
            eff = _lookup(edges, effs, ctx)
            attn_s = 0.0
            attn_s += self._kernel(self._ideal(f, b) / eff)
            flops_total = bytes_total = time_s = 0.0
            flops_total += f * model_layers
            bytes_total += b * model_layers
            for num_layers, terms in groups:
                layer_s = attn_s + elem_s + ar_s
                for kernel_s, layer_f, layer_b in terms:
                    layer_s += kernel_s
                    flops_total += layer_f
                    bytes_total += layer_b
                time_s += num_layers * layer_s
            time_s += head_s
            out.append(StepCost(time_s + self.step_overhead_s, flops_total, bytes_total))
            context += n
        return out
