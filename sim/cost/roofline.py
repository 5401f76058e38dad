"""Cost models: how long one engine step takes.

All share one interface, `step_time(plan) -> seconds`, plus `step_cost(plan) -> StepCost` with the
FLOPs and bytes behind it (for utilization figures). The engine is handed an object; it never
picks a cost model by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sim.core.step_plan import StepPlan
from sim.model.memory import DTYPE_BYTES, kv_bytes_per_token
from sim.model.shapes import layer_groups, lm_head_shape
from sim.model.specs import GPUSpec, ModelSpec

_ACT_BYTES = 2  # activations are bf16/fp16


class StepCost(NamedTuple):
    """One step's price. A named tuple, not a dataclass: decode runs build one per step, and a frozen
    dataclass takes ~3x longer to construct."""

    time_s: float  # wall time of the step on one replica
    flops: float  # floating-point operations per GPU
    bytes: float  # HBM bytes moved per GPU


@dataclass(frozen=True, slots=True)
class _Matmul:
    """A weight matrix group of one layer, per GPU: params read per step, params each token multiplies."""

    weight_params: float  # parameters stored on one GPU (all experts)
    params_per_token: float  # parameters one token multiplies on one GPU
    num_experts: int  # >1: mixture of experts; only the experts some token routes to are read
    experts_per_token: float
    in_features: int
    out_features: int


class RooflineCostModel:
    """Analytical roofline per op: max(FLOPs / (peak × efficiency), bytes / (bandwidth × efficiency)).

    Per layer: the linear layers (weights read once per step, 2 FLOPs per parameter per token),
    attention for prefill chunks (causal FLOPs against their context) and decodes (reading each
    request's KV), norms and activations, and under tensor parallelism two all-reduces over the
    interconnect; then the LM head for sampled rows, plus a fixed per-step overhead.
    """

    def __init__(self, model: ModelSpec, gpu: GPUSpec, *, tensor_parallel: int = 1,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", fp8_compute: bool = False,
                 compute_efficiency: float | None = None, memory_efficiency: float | None = None,
                 step_overhead_s: float | None = None):
        self.model, self.gpu, self.tp = model, gpu, tensor_parallel
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        peak = gpu.fp8_flops_per_s if (fp8_compute and gpu.fp8_flops_per_s) else gpu.bf16_flops_per_s
        self.flops_per_s = peak * (compute_efficiency or gpu.compute_efficiency)
        self.bytes_per_s = gpu.hbm_bytes_per_s * (memory_efficiency or gpu.memory_efficiency)
        self.link_bytes_per_s = gpu.interconnect_bytes_per_s * gpu.interconnect_efficiency
        self.step_overhead_s = gpu.step_overhead_s if step_overhead_s is None else step_overhead_s
        self.weight_bytes_per_param = DTYPE_BYTES[weight_dtype]
        self.kv_bytes_per_token_layer = kv_bytes_per_token(model, kv_dtype, tensor_parallel) / model.num_layers
        heads_per_gpu = model.num_attention_heads // tensor_parallel
        if model.attention == "mla":
            qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
            v_dim = model.v_head_dim
        else:
            qk_dim = v_dim = model.head_dim
        # Per (query, key) pair: QK^T and PV, 2 FLOPs per multiply-add.
        self.attn_flops_per_pair = 2.0 * heads_per_gpu * (qk_dim + v_dim)
        self.q_bytes_per_token = heads_per_gpu * (qk_dim + v_dim) * _ACT_BYTES
        self.groups = [(n, [self._matmul(s) for s in shapes]) for n, shapes in layer_groups(model)]
        self.lm_head = self._matmul(lm_head_shape(model))
        self.hidden = model.hidden_size
        self.ffn_per_gpu = model.ffn_size / tensor_parallel
        self._decode_cache: dict[int, tuple] = {}  # batch size -> context-free parts of a decode-only step
        self.include_lm_head = True  # False for a pipeline stage before the last: the LM head runs on the last

    def _matmul(self, shape) -> _Matmul:
        split = 1 if shape.tp_split == "replicated" else self.tp
        params = shape.in_features * shape.out_features / split
        return _Matmul(params * shape.count, params * shape.active_per_token, shape.count,
                       shape.active_per_token, shape.in_features, shape.out_features)

    def __repr__(self) -> str:
        return (f"RooflineCostModel({self.model.name} on {self.gpu.name} x{self.tp}, "
                f"weights={self.weight_dtype}, kv={self.kv_dtype})")

    def _op(self, flops: float, nbytes: float) -> float:
        return max(flops / self.flops_per_s, nbytes / self.bytes_per_s)

    def _linear(self, mm: _Matmul, num_tokens: int) -> tuple[float, float]:
        flops = 2.0 * num_tokens * mm.params_per_token
        if mm.num_experts > 1:
            # Experts some token in the step routes to, in expectation under uniform routing.
            frac = mm.experts_per_token / mm.num_experts
            touched = mm.num_experts * (1.0 - (1.0 - frac) ** num_tokens)
            weight_params = mm.weight_params / mm.num_experts * touched
        else:
            weight_params = mm.weight_params
        act = num_tokens * mm.experts_per_token * (mm.in_features + mm.out_features) * _ACT_BYTES
        return flops, weight_params * self.weight_bytes_per_param + act

    def step_cost(self, plan: StepPlan) -> StepCost:
        num_tokens = plan.num_tokens
        if num_tokens == 0:
            return StepCost(self.step_overhead_s, 0.0, 0.0)
        time_s = flops_total = bytes_total = 0.0
        window = self.model.sliding_window

        # Attention: prefill chunks against their context (causal), decodes reading their KV.
        attn_pairs = 0.0
        attn_kv_tokens = 0.0
        for chunk, context in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens):
            if window:
                attn_pairs += chunk * min(context + (chunk + 1) / 2, window)
            else:
                attn_pairs += chunk * (context + (chunk + 1) / 2)
            attn_kv_tokens += min(context + chunk, window) if window else context + chunk
        decode_ctx = plan.decode_context_tokens
        if window:
            decode_ctx = min(decode_ctx, plan.num_decode_seqs * window)
        prefill_attn = (attn_pairs * self.attn_flops_per_pair,
                        attn_kv_tokens * self.kv_bytes_per_token_layer
                        + plan.num_prefill_tokens * self.q_bytes_per_token)
        # Each of a sequence's query tokens (γ+1 when verifying drafts) attends to its context; the KV is read once.
        decode_queries = plan.num_decode_seqs * plan.decode_query_tokens
        decode_attn = (decode_ctx * plan.decode_query_tokens * self.attn_flops_per_pair,
                       decode_ctx * self.kv_bytes_per_token_layer + decode_queries * self.q_bytes_per_token)
        # Norms, residual adds, rotary, activation: memory-bound streams over the hidden states.
        elementwise_bytes = num_tokens * (8 * self.hidden + 3 * self.ffn_per_gpu) * _ACT_BYTES
        allreduce_s = 0.0
        if self.tp > 1:
            message = num_tokens * self.hidden * _ACT_BYTES
            ring = 2.0 * (self.tp - 1) / self.tp * message / self.link_bytes_per_s
            allreduce_s = 2 * (self.gpu.allreduce_latency_s + ring)

        for num_layers, matmuls in self.groups:
            layer_s = layer_flops = layer_bytes = 0.0
            for mm in matmuls:
                f, b = self._linear(mm, num_tokens)
                layer_s += self._op(f, b)
                layer_flops += f
                layer_bytes += b
            for f, b in (prefill_attn, decode_attn):
                if f or b:
                    layer_s += self._op(f, b)
                    layer_flops += f
                    layer_bytes += b
            layer_s += elementwise_bytes / self.bytes_per_s + allreduce_s
            layer_bytes += elementwise_bytes
            time_s += num_layers * layer_s
            flops_total += num_layers * layer_flops
            bytes_total += num_layers * layer_bytes

        lm_head_rows = plan.num_sampled_seqs + plan.num_decode_seqs * (plan.decode_query_tokens - 1)
        if lm_head_rows and self.include_lm_head:
            f, b = self._linear(self.lm_head, lm_head_rows)
            time_s += self._op(f, b)
            flops_total += f
            bytes_total += b
        swapped_tokens = plan.swap_in_tokens + plan.swap_out_tokens
        if swapped_tokens:
            # Each GPU moves its own shard of the KV over its own host link.
            time_s += swapped_tokens * self.kv_bytes_per_token_layer * self.model.num_layers / self.gpu.host_link_bytes_per_s
        return StepCost(time_s + self.step_overhead_s, flops_total, bytes_total)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    # True: `compiled_params` builds one pack and returns it on every call, its memos (terms by token count)
    # filled from run to run, as a planner that prices hundreds of runs with one model wants. Only for a model
    # nobody changes after that first call (the pack holds its numbers as they were then).
    reuse_compiled_pack = False

    def compiled_params(self) -> tuple | None:
        """This model's numbers for `sim.cost.roofline_kernel.step_cost` (numba, bit-identical to `step_cost`),
        packed by `sim.cost.compiled_pricing.pricer`, which the compiled engine core (`sim.compiled`) prices
        steps with; None where that form does not cover this model (mixture of experts, sliding window, a
        pipeline stage without the LM head) or numba is missing."""
        same_prices = type(self) is RooflineCostModel or type(self).__dict__.get("PRICES_AS_ROOFLINE", False)
        if (not same_prices or self.model.sliding_window or not self.include_lm_head
                or any(mm.num_experts != 1 for _, mms in self.groups for mm in mms)):
            return None
        try:
            from sim.cost import compiled_pricing, roofline_kernel
        except ImportError:  # numba is an optional extra
            return None
        return compiled_pricing.reused_pack(self, lambda: compiled_pricing.pricer(roofline_kernel.pack(self)))

    def _decode_constants(self, num_seqs: int) -> tuple:
        """The parts of a decode-only step of `num_seqs` single-token decodes that do not depend on the
        context: per layer group the linear layers' time, FLOPs and bytes (added in `step_cost`'s order),
        the elementwise and all-reduce terms, and the LM head."""
        cached = self._decode_cache.get(num_seqs)
        if cached is not None:
            return cached
        n = num_seqs
        elementwise_bytes = n * (8 * self.hidden + 3 * self.ffn_per_gpu) * _ACT_BYTES
        allreduce_s = 0.0
        if self.tp > 1:
            message = n * self.hidden * _ACT_BYTES
            ring = 2.0 * (self.tp - 1) / self.tp * message / self.link_bytes_per_s
            allreduce_s = 2 * (self.gpu.allreduce_latency_s + ring)
        groups = []
        for num_layers, matmuls in self.groups:
            layer_s = layer_flops = layer_bytes = 0.0
            for mm in matmuls:
                f, b = self._linear(mm, n)
                layer_s += self._op(f, b)
                layer_flops += f
                layer_bytes += b
            groups.append((num_layers, layer_s, layer_flops, layer_bytes))
        f, b = self._linear(self.lm_head, n)
        cached = (groups, elementwise_bytes / self.bytes_per_s + allreduce_s, elementwise_bytes,
                  self._op(f, b), f, b, n * self.q_bytes_per_token)
        self._decode_cache[num_seqs] = cached
        return cached

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of `num_steps` consecutive decode-only steps of `num_seqs` single-token decodes, the first
        attending `context_tokens` KV tokens (new ones included), each next one `num_seqs` more. The same
        floating-point operations in the same order as `step_cost` of each such plan, so the times are
        bit-identical: only the context-free part is computed once."""
        groups, tail_s, elementwise_bytes, lm_s, lm_f, lm_b, q_bytes = self._decode_constants(num_seqs)
        if not self.include_lm_head:
            lm_s = lm_f = lm_b = 0.0
        window = self.model.sliding_window
        afpp, kvb = self.attn_flops_per_pair, self.kv_bytes_per_token_layer
        fps, bps, overhead = self.flops_per_s, self.bytes_per_s, self.step_overhead_s
        out = []
        ctx = context_tokens
        if len(groups) == 1 and not window:
            # One layer group (dense models): the loop below with its inner loop unrolled, the same operations.
            ((num_layers, layer_s0, layer_flops0, layer_bytes0),) = groups
            for _ in range(num_steps):
                fa = ctx * 1 * afpp
                ba = ctx * kvb + q_bytes
                if fa or ba:
                    layer_s = layer_s0 + max(fa / fps, ba / bps)
                    layer_flops, layer_bytes = layer_flops0 + fa, layer_bytes0 + ba
                else:
                    layer_s, layer_flops, layer_bytes = layer_s0, layer_flops0, layer_bytes0
                out.append(StepCost(0.0 + num_layers * (layer_s + tail_s) + lm_s + overhead,
                                    0.0 + num_layers * layer_flops + lm_f,
                                    0.0 + num_layers * (layer_bytes + elementwise_bytes) + lm_b))
                ctx += num_seqs
            return out
        for _ in range(num_steps):
            decode_ctx = min(ctx, num_seqs * window) if window else ctx
            fa = decode_ctx * 1 * afpp
            ba = decode_ctx * kvb + q_bytes
            attn_s = max(fa / fps, ba / bps)
            time_s = flops_total = bytes_total = 0.0
            for num_layers, layer_s, layer_flops, layer_bytes in groups:
                if fa or ba:
                    layer_s += attn_s
                    layer_flops += fa
                    layer_bytes += ba
                layer_s += tail_s
                layer_bytes += elementwise_bytes
                time_s += num_layers * layer_s
                flops_total += num_layers * layer_flops
                bytes_total += num_layers * layer_bytes
            time_s += lm_s
            out.append(StepCost(time_s + overhead, flops_total + lm_f, bytes_total + lm_b))
            ctx += num_seqs
        return out


class FixedCostModel:
    """Step times that ignore the batch: `prefill_s` if any prefill is in the step, else `decode_s`.

    For queueing-theory checks and for speculative-decoding known answers, where a deterministic
    service time is the point.
    """

    def __init__(self, prefill_s: float, decode_s: float):
        self.prefill_s, self.decode_s = prefill_s, decode_s

    def __repr__(self) -> str:
        return f"FixedCostModel(prefill_s={self.prefill_s}, decode_s={self.decode_s})"

    def step_cost(self, plan: StepPlan) -> StepCost:
        return StepCost(self.prefill_s if plan.prefill_request_ids else self.decode_s, 0.0, 0.0)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s


class SpeculativeCostModel:
    """A target cost model plus the draft model's work: γ draft decode steps per speculative step,
    and the draft's own prefill of every prompt chunk. The draft is either a cost model (a catalog
    model through the same roofline) or a ratio c = draft step time / target step time.
    """

    def __init__(self, target, *, draft=None, draft_cost_ratio: float | None = None,
                 sync_overhead_fraction: float = 0.0):
        if (draft is None) == (draft_cost_ratio is None):
            raise ValueError("give exactly one of draft and draft_cost_ratio")
        self.target, self.draft, self.ratio = target, draft, draft_cost_ratio
        self.sync_overhead_fraction = sync_overhead_fraction

    def __repr__(self) -> str:
        draft = repr(self.draft) if self.draft is not None else f"c={self.ratio}"
        return f"SpeculativeCostModel(target={self.target!r}, draft={draft})"

    def _draft_cost(self, plan: StepPlan) -> StepCost:
        """The draft's prefill of this step's chunks plus its γ single-token decode steps."""
        gamma = plan.num_draft_tokens
        prefill = StepPlan(prefill_request_ids=plan.prefill_request_ids, prefill_chunk_tokens=plan.prefill_chunk_tokens,
                           prefill_context_tokens=plan.prefill_context_tokens, num_sampled_seqs=0)
        parts = [prefill] if plan.prefill_request_ids else []
        n = plan.num_decode_seqs
        base_ctx = plan.decode_context_tokens - n * plan.decode_query_tokens
        for i in range(gamma):
            parts.append(StepPlan(num_decode_seqs=n, decode_context_tokens=base_ctx + n * (i + 1), num_sampled_seqs=n))
        if self.draft is not None:
            costs = [self.draft.step_cost(p) for p in parts]
            return StepCost(sum(c.time_s for c in costs), sum(c.flops for c in costs), sum(c.bytes for c in costs))
        # A bare cost ratio says how long the draft takes, not what it computes or reads.
        return StepCost(self.ratio * sum(self.target.step_time(p) for p in parts), 0.0, 0.0)

    def step_cost(self, plan: StepPlan) -> StepCost:
        verify = self.target.step_cost(plan)
        if not plan.num_draft_tokens:
            return verify
        draft = self._draft_cost(plan)
        time_s = verify.time_s * (1.0 + self.sync_overhead_fraction) + draft.time_s
        return StepCost(time_s, verify.flops + draft.flops, verify.bytes + draft.bytes)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s
