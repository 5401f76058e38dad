"""A roofline whose efficiencies were learned from the GPUs with measured kernels (issue 12).

`cost_model: {kind: roofline, efficiencies: learned}`: the same per-op sums as RooflineCostModel, but each op's
time is its ideal time at the GPU catalog's peaks (FLOP/s, HBM bytes/s) divided by an efficiency read from
calibrate/measured/learned_roofline.json (written by `python -m calibrate.learn_roofline`, which also reports
its leave-one-GPU-out error):

- GEMMs: efficiency per (log2 tokens, log2 weight elements) cell, the median over the measured GPUs of
  ideal / measured time; at least the fastest measured kernel's time (`min_kernel_s`, a launch floor);
- prefill attention per log2(batch × prompt tokens), decode attention per log2(batch × context tokens);
- norms/activations at the decode-attention byte efficiency of the largest cell;
- all-reduce: a fixed latency plus the message at a fraction of the catalog interconnect bandwidth.

No step overhead: the tables are kernel times (compose with `overhead:` for the engine's time outside kernels).
Efficiencies are fractions of the catalog's peaks, so the model applies to a GPU without measured tables.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from pathlib import Path

from sim.core.step_plan import StepPlan
from sim.cost.roofline import RooflineCostModel, StepCost
from sim.errors import ConfigError

LEARNED_PATH = Path(__file__).resolve().parents[2] / "calibrate" / "measured" / "learned_roofline.json"
_ACT = 2


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
        ar = L["allreduce"]
        self.ar_latency_s, self.ar_bw = ar["latency_s"], g.interconnect_bytes_per_s * ar["bandwidth_fraction"]

    def __repr__(self) -> str:
        return (f"LearnedRooflineCostModel({self.model.name} on {self.gpu.name} x{self.tp}, weights={self.weight_dtype}, "
                f"kv={self.kv_dtype}, efficiencies learned from {', '.join(self.learned['fitted_on'])} "
                f"({self.learned['source']}), step overhead {self.step_overhead_s * 1e3:g} ms)")

    def _ideal(self, flops: float, nbytes: float) -> float:
        return max(flops / self.peak_flops, nbytes / self.peak_bytes)

    def _gemm_eff(self, m: float, weights: float) -> float:
        g = self.learned["gemm"]
        i = bisect_right(g["m_edges"], math.log2(max(m, 1.0))) - 1
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
            attn_s += max(self.min_kernel_s, self._ideal(f, b) / eff)
            flops_total += f * self.model.num_layers  # every layer attends
            bytes_total += b * self.model.num_layers
        if plan.num_decode_seqs:
            ctx = plan.decode_context_tokens
            if window:
                ctx = min(ctx, plan.num_decode_seqs * window)
            f = ctx * plan.decode_query_tokens * self.attn_flops_per_pair
            b = ctx * kvb + plan.num_decode_seqs * plan.decode_query_tokens * self.q_bytes_per_token
            eff = _lookup(L["decode_attention"]["edges"], L["decode_attention"]["eff"], ctx)
            attn_s += max(self.min_kernel_s, self._ideal(f, b) / eff)
            flops_total += f * self.model.num_layers  # every layer attends
            bytes_total += b * self.model.num_layers
        elem_b = n * (8 * self.hidden + 3 * self.ffn_per_gpu) * _ACT
        elem_s = max(3 * self.min_kernel_s, elem_b / (self.peak_bytes * L["elementwise_bytes_efficiency"]))
        ar_s = 0.0
        if self.tp > 1:
            msg = n * self.hidden * _ACT
            ar_s = 2 * (self.ar_latency_s + 2 * (self.tp - 1) / self.tp * msg / self.ar_bw)
        for num_layers, matmuls in self.groups:
            layer_s = attn_s + elem_s + ar_s
            for mm in matmuls:
                f, b = self._linear(mm, n)
                tokens = n * mm.experts_per_token
                per_expert = mm.weight_params / mm.num_experts
                layer_s += max(self.min_kernel_s, self._ideal(f, b) / self._gemm_eff(tokens / max(
                    1.0, mm.num_experts * (1.0 - (1.0 - mm.experts_per_token / mm.num_experts) ** n))
                    if mm.num_experts > 1 else n, per_expert))
                flops_total += num_layers * f
                bytes_total += num_layers * b
            time_s += num_layers * layer_s
        rows = plan.num_sampled_seqs + plan.num_decode_seqs * (plan.decode_query_tokens - 1)
        if rows:
            f, b = self._linear(self.lm_head, rows)
            time_s += max(self.min_kernel_s, self._ideal(f, b) / self._gemm_eff(rows, self.lm_head.weight_params))
        swapped = plan.swap_in_tokens + plan.swap_out_tokens
        if swapped:
            time_s += swapped * kvb * self.model.num_layers / self.gpu.host_link_bytes_per_s
        return StepCost(time_s + self.step_overhead_s, flops_total, bytes_total)
