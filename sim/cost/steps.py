"""A cost model priced from whole measured steps: a profile written by `calibrate steps` or
`calibrate import-steps` (`meta.json` + `steps.csv`).

Why whole steps: a step's time is what the engine runs (fused kernels, no launch gaps under a CUDA
graph, overlap), which a sum of per-op timings misses. The same model and kernels on one H100 gave
steps 23% apart with and without fusion (../shared/gpu/README.md).

A table holds pure prefill rows and pure decode rows (mixed rows optional), yet the simulator asks
for any step: several chunks with context, decode batches, both at once, speculative verification.
So a step is split into parts a GPU runs one after the other, each priced by the roofline of the
table's own device (the fastest FLOP rate and the fastest byte rate any measured step reached; a
smooth maximum of compute and memory time, see `Rates`), scaled by a measured ratio:

    step = ρ_T(T) · [body(T) + head(rows)]          linear layers, norms, rotary, activation (weights read
                                                    once) at T tokens; LM head + argmax at the sampled rows
         + Σ_chunks ρ_P(c) · prefill_attention(c, x)  causal FLOPs of a chunk of c tokens after x in the cache
         + ρ_D(B) · decode_attention(B, ΣC)           B sequences reading ΣC cached tokens (KV bytes)

- ρ_D(B) is the slope of measured time against decode-attention time among decode rows of the same
  batch at different contexts (the body is the same in those rows, so the slope is the attention's
  alone); interpolated in log B, held past the measured batches.
- ρ_P(c) likewise from prefill rows of the same chunk at different contexts. A table without such rows
  (the shared H100 tables measure prefill from an empty cache) cannot separate attention from the body;
  the attention is then priced at the step's own ratio ρ_T (it runs as efficiently as the rest).
- ρ_T(T) is what remains of each row once its identified attention is taken out, divided by the body's
  roofline; interpolated in log T, held past the edges. Decode rows give it at T = batch, prefill rows
  at T = chunk, on one axis: that is what lets a table of pure rows price mixed steps.

Rows sharing a T (decode rows of one batch at several contexts, a decode batch of 128 and a prefill
chunk of 128) set one ratio together (geometric mean); a row alone at its T is reproduced exactly.
When rows that share a T disagree, or a slope comes out non-positive, the fit says so (`notes`, and a
warning); when attention alone exceeds a measured step the fit refuses with the numbers.

Rows sample: 1 row for a prefill row (its last token), B for a decode row, B + 1 for a mixed row.

What one GPU's shard cannot measure, the tensor-parallel all-reduces (two per layer) and swap copies
over the host link, comes from the scenario GPU's catalog entry, as in sim/calibrated.py. numpy and
pandas only: simulating never needs torch.

The arithmetic of all of the above is `sim.cost.steps_kernel`'s (numba), written once: the fit and the
cost model here call it, and so does the compiled engine core.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from sim.core.step_plan import StepPlan
from sim.cost import compiled_pricing, steps_kernel
from sim.cost.calibrated import profile_model, shard_shapes
from sim.cost.compiled_pricing import KIND_STEPS
from sim.cost.packed import PackedCostModel
from sim.cost.profile_meta import MAX_STEP_S, count_cell, count_words, read_meta
from sim.cost.roofline import RooflineCostModel, StepCost, decode_run_costs
from sim.cost.step_args import step_args
from sim.errors import ConfigError
from sim.jit import HAVE_NUMBA
from sim.model.catalog import get_gpu
from sim.model.shapes import gpu_layer_groups
from sim.model.specs import GPUSpec, ModelSpec

PROFILE_KIND = "steps"
KINDS = ("prefill", "decode", "mixed")
SHAPE_COLUMNS = ("kind", "prefill_tokens", "prefill_context", "decode_batch", "decode_context")
REQUIRED_COLUMNS = ("kind", "prefill_tokens", "decode_batch", "decode_context", "step_s")
OPTIONAL_COLUMNS = ("prefill_context", "p20_s", "p80_s")
STEPS_COLUMNS = ("kind", "prefill_tokens", "prefill_context", "decode_batch", "decode_context", "step_s",
                 "p20_s", "p80_s")
_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
DISAGREEMENT_NOTE_FRACTION = 0.05  # rows sharing a token count whose ratios differ more than this get a note
# A decode step reads the weights and the KV cache once: the slowest shipped one takes 49 ms (Llama-3.1-70B, 256
# sequences on 4 H200s). On a GPU (device cuda) one of a second is a table in milliseconds.
MAX_GPU_DECODE_STEP_S = 1.0


class StepFitWarning(UserWarning):
    """A whole-step fit that explains its rows only approximately (see the message)."""


# --- reading a table --------------------------------------------------------------------------------

def _fail(field: str, path, line: int | None, what: str) -> ConfigError:
    where = f"'{path}'" + (f" line {line}" if line is not None else "")
    return ConfigError(f"{field}: {where}: {what}")


def read_steps_table(path: str | Path, field: str = "TABLE", model: ModelSpec | None = None,
                     device: str | None = None) -> pd.DataFrame:
    """Read and check a whole-step table; every problem is one line naming the file (and line).

    Times must be plausible seconds (MAX_STEP_S; on `device` cuda, MAX_GPU_DECODE_STEP_S for a decode step), and
    with `model`, every row's sequences must fit its max_context.
    Returns the columns STEPS_COLUMNS: shapes as int, times as float (p20_s/p80_s NaN where absent)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"{field}: '{path}' is not a file; allowed: a CSV with columns "
                          f"{', '.join(REQUIRED_COLUMNS)} (and optionally {', '.join(OPTIONAL_COLUMNS)})")
    data = p.read_bytes()
    if not data.strip():
        raise _fail(field, path, None, "is empty; allowed: a CSV with a header and at least one row")
    if b"\x00" in data:
        raise _fail(field, path, None, "is binary (holds NUL bytes); allowed: a UTF-8 CSV text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise _fail(field, path, None, f"is not UTF-8 text (byte {err.start}); allowed: a UTF-8 CSV") from None
    lines = text.splitlines()
    header = [c.strip() for c in lines[0].split(",")]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    unknown = [c for c in header if c not in STEPS_COLUMNS]
    if missing or unknown:
        what = f"lacks columns {', '.join(missing)}" if missing else f"has unknown columns {', '.join(unknown)}"
        raise _fail(field, path, 1, f"{what}; allowed: {', '.join(STEPS_COLUMNS)} "
                                    f"({', '.join(OPTIONAL_COLUMNS)} optional)")
    if len(set(header)) != len(header):
        raise _fail(field, path, 1, "names a column twice")
    body = [(i + 1, ln) for i, ln in enumerate(lines) if i > 0 and ln.strip()]
    if not body:
        raise _fail(field, path, None, "has a header but no rows")
    records, seen = [], {}
    for line_no, ln in body:
        cells = [c.strip() for c in ln.split(",")]
        if len(cells) != len(header):
            raise _fail(field, path, line_no, f"has {len(cells)} cells, the header {len(header)}")
        raw = dict(zip(header, cells))
        kind = raw["kind"]
        if kind not in KINDS:
            raise _fail(field, path, line_no, f"kind {kind!r} is not allowed; allowed: {', '.join(KINDS)}")
        rec: dict = {"kind": kind}
        for col in ("prefill_tokens", "prefill_context", "decode_batch", "decode_context"):
            value = raw.get(col, "0")
            number = count_cell(value, 0)
            if number is None:
                raise _fail(field, path, line_no, f"{col} {value!r} is not allowed; allowed: {count_words(0)}")
            rec[col] = number
        for col in ("step_s", "p20_s", "p80_s"):
            value = raw.get(col, "")
            if col != "step_s" and value == "":
                rec[col] = float("nan")
                continue
            try:
                number = float(value)
            except ValueError:
                number = float("nan")
            if not (math.isfinite(number) and number > 0):
                raise _fail(field, path, line_no, f"{col} {value!r} is not allowed; allowed: seconds > 0 (finite)")
            rec[col] = number
        if not (math.isnan(rec["p20_s"]) or rec["p20_s"] <= rec["step_s"]) or \
                not (math.isnan(rec["p80_s"]) or rec["step_s"] <= rec["p80_s"]):
            raise _fail(field, path, line_no, f"needs p20_s <= step_s <= p80_s, got {rec['p20_s']}, "
                                              f"{rec['step_s']}, {rec['p80_s']}")
        _check_sane(rec, model, device, field, path, line_no)
        has_prefill, has_decode = rec["prefill_tokens"] > 0, rec["decode_batch"] > 0
        if has_decode != (rec["decode_context"] > 0):
            raise _fail(field, path, line_no, "decode_batch and decode_context must both be > 0 or both 0")
        if not has_prefill and rec["prefill_context"]:
            raise _fail(field, path, line_no, "prefill_context > 0 needs prefill_tokens > 0")
        want = {"prefill": (True, False), "decode": (False, True), "mixed": (True, True)}[kind]
        if (has_prefill, has_decode) != want:
            need = {"prefill": "prefill_tokens > 0 and decode_batch 0", "decode": "prefill_tokens 0 and decode_batch > 0",
                    "mixed": "prefill_tokens > 0 and decode_batch > 0"}[kind]
            raise _fail(field, path, line_no, f"kind {kind} needs {need}")
        key = tuple(rec[c] for c in SHAPE_COLUMNS)
        if key in seen:
            raise _fail(field, path, line_no, f"repeats the shape of line {seen[key]} "
                                              f"({', '.join(f'{c}={v}' for c, v in zip(SHAPE_COLUMNS, key))})")
        seen[key] = line_no
        records.append(rec)
    return pd.DataFrame.from_records(records, columns=list(STEPS_COLUMNS))


def _check_sane(rec: dict, model: ModelSpec | None, device: str | None, field: str, path, line_no: int) -> None:
    """One row's times in plausible seconds and, with a model, its sequences within the model's context."""
    unit = "allowed: seconds (a table in milliseconds or microseconds: divide its times by 1,000 or 1,000,000)"
    if rec["step_s"] > MAX_STEP_S:
        raise _fail(field, path, line_no, f"step_s {rec['step_s']:g} is more than {MAX_STEP_S:g} s for one step "
                                          f"(MAX_STEP_S); {unit}")
    if device == "cuda" and rec["kind"] == "decode" and rec["step_s"] > MAX_GPU_DECODE_STEP_S:
        raise _fail(field, path, line_no, f"step_s {rec['step_s']:g} is more than {MAX_GPU_DECODE_STEP_S:g} s for "
                                          f"a GPU decode step of {rec['decode_batch']} sequence(s) "
                                          f"(MAX_GPU_DECODE_STEP_S; the slowest shipped: 0.049 s); {unit}")
    if model is None:
        return
    prefill_end = rec["prefill_context"] + rec["prefill_tokens"]
    for col, tokens in (("prefill_context + prefill_tokens", prefill_end), ("decode_context", rec["decode_context"])):
        if tokens > model.max_context:
            raise _fail(field, path, line_no, f"{col} {tokens} is beyond {model.name}'s max_context "
                                              f"{model.max_context}; allowed: rows within the model's context "
                                              "(is the table this model's?)")


def plan_for_row(kind: str, prefill_tokens: int, prefill_context: int, decode_batch: int,
                 decode_context: int) -> StepPlan:
    """The StepPlan a table row measured: one chunk of `prefill_tokens` after `prefill_context` cached
    tokens, and/or `decode_batch` sequences each attending to `decode_context` tokens (its new one
    included); sampling 1 row per prefill chunk and one per decoding sequence."""
    plan = StepPlan()
    if kind in ("prefill", "mixed"):
        plan.prefill_request_ids = [0]
        plan.prefill_chunk_tokens = [int(prefill_tokens)]
        plan.prefill_context_tokens = [int(prefill_context)]
        plan.num_sampled_seqs += 1
    if kind in ("decode", "mixed"):
        plan.num_decode_seqs = int(decode_batch)
        plan.decode_context_tokens = int(decode_batch) * int(decode_context)
        plan.num_sampled_seqs += int(decode_batch)
    return plan


def row_plans(rows: pd.DataFrame) -> list[StepPlan]:
    return [plan_for_row(r.kind, r.prefill_tokens, r.prefill_context, r.decode_batch, r.decode_context)
            for r in rows.itertuples(index=False)]


def describe_row(kind: str, prefill_tokens: int, prefill_context: int, decode_batch: int, decode_context: int) -> str:
    parts = []
    if kind in ("prefill", "mixed"):
        parts.append(f"prefill {prefill_tokens}" + (f"@{prefill_context}" if prefill_context else ""))
    if kind in ("decode", "mixed"):
        parts.append(f"decode {decode_batch}x{decode_context}")
    return " + ".join(parts)


# --- the physics: roofline counts of a step's parts ---------------------------------------------------

@dataclass(frozen=True)
class Rates:
    """A device's roofline: the fastest FLOP rate and byte rate a measured step reached.

    An op's time is the 2-norm of its compute time and its memory time, a smooth maximum: near the
    ridge point a real GEMM reaches neither bound (tile waves, partial overlap of loads and math), and
    the measured steps bend smoothly there. With a hard max, the H100 table's 512-token prefill held
    out is predicted 14% high (its neighbours sit on either side of the ridge); with the 2-norm, 5.5%.
    """

    flops_per_s: float
    bytes_per_s: float

    def time(self, flops: float, nbytes: float) -> float:
        return steps_kernel.rate_time(flops, nbytes, self.flops_per_s, self.bytes_per_s)


class StepPhysics:
    """FLOPs and HBM bytes of a step's parts on one GPU of a tensor-parallel group (all layers).

    The model's shapes as arrays (`scalars`, `linear`: `sim.cost.steps_kernel`'s layout), priced by that module's
    functions."""

    def __init__(self, model: ModelSpec, tensor_parallel: int, elem_bytes: int):
        shard = shard_shapes(model, tensor_parallel)  # raises for MLA
        tp, eb = tensor_parallel, elem_bytes
        self.eb, self.num_layers = eb, model.num_layers
        self.window = model.sliding_window
        self.window_layers = model.num_window_layers
        self.hq, self.hkv, self.d = shard["num_heads"], shard["num_kv_heads"], shard["head_dim"]
        # Per layer group: (layers, [(in, out, experts, experts each token routes to)]) per GPU.
        self.groups = [(n, [(g.in_features, g.out_features, g.count, g.active_per_token) for g in gpu_shapes])
                       for n, gpu_shapes in gpu_layer_groups(model, tp)]
        self.head_in, self.head_out = shard["linear"]["lm_head"]
        h, ffn = shard["hidden_size"], shard["ffn_size"]
        act = 3 * ffn if model.gated_mlp else 2 * ffn
        # Two norms, two residual adds, rotary on q and k, the activation: bytes per token per layer.
        self.elementwise_bytes = (2 * 2 * h + 2 * 3 * h + 2 * (self.hq + self.hkv) * self.d + act) * eb
        self.scalars = np.zeros(steps_kernel.NUM_PHYSICS)
        k = steps_kernel
        self.scalars[[k.Q_HQ, k.Q_HKV, k.Q_HEAD_DIM, k.Q_ELEM_BYTES, k.Q_NUM_LAYERS, k.Q_ELEMENTWISE_BYTES,
                      k.Q_HEAD_IN, k.Q_HEAD_OUT, k.Q_SLIDING_WINDOW, k.Q_WINDOW_LAYERS]] = (
            self.hq, self.hkv, self.d, eb, self.num_layers, self.elementwise_bytes, self.head_in, self.head_out,
            self.window or 0, self.window_layers)
        self.linear = np.array([[n, k_in, m, experts, active] for n, mats in self.groups
                                for k_in, m, experts, active in mats], dtype=np.float64).reshape(-1, 5)

    def body(self, num_tokens: int) -> list[tuple[float, float]]:
        """(FLOPs, bytes) of each linear layer (all layers of its kind) and of the elementwise ops."""
        return list(map(tuple, steps_kernel.body_counts(self.scalars, self.linear, num_tokens).tolist()))

    def head(self, rows: int) -> list[tuple[float, float]]:
        """LM head GEMM at the sampled rows, then argmax reading the logits."""
        return list(map(tuple, steps_kernel.head_counts(self.scalars, rows).tolist()))

    def prefill_attention(self, chunk: int, context: int) -> tuple[float, float]:
        """Causal attention of a chunk after `context` cached tokens, all layers."""
        return steps_kernel.prefill_attention(self.scalars, chunk, context)

    def decode_attention(self, batch: int, context_tokens: float, query_tokens: int = 1) -> tuple[float, float]:
        """`batch` sequences, `query_tokens` each, reading `context_tokens` cached tokens in all, all layers."""
        return steps_kernel.decode_attention(self.scalars, batch, context_tokens, query_tokens)

    @staticmethod
    def head_rows(plan: StepPlan) -> int:
        return plan.num_sampled_seqs + plan.num_decode_seqs * (plan.decode_query_tokens - 1)

    def counts(self, plan: StepPlan) -> tuple[float, float]:
        """Total (FLOPs, bytes) of a step."""
        ops = self.body(plan.num_tokens) + self.head(self.head_rows(plan))
        ops += [self.prefill_attention(c, x) for c, x in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens)]
        if plan.num_decode_seqs:
            ops.append(self.decode_attention(plan.num_decode_seqs, plan.decode_context_tokens, plan.decode_query_tokens))
        return sum(f for f, _ in ops), sum(b for _, b in ops)


# --- the fit ------------------------------------------------------------------------------------------

class LogRatio:
    """A ratio known at points x, interpolated linearly in (log x, log ratio), held past the edges."""

    def __init__(self, xs, ratios):
        order = np.argsort(np.asarray(xs, float))
        self.xs = [float(np.asarray(xs, float)[i]) for i in order]
        self.u = np.array([math.log(x) for x in self.xs], dtype=np.float64)
        self.v = np.array([math.log(float(np.asarray(ratios, float)[i])) for i in order], dtype=np.float64)

    def __bool__(self) -> bool:
        return len(self.u) > 0

    def __call__(self, x: float) -> float:
        return steps_kernel.log_ratio(self.u, self.v, x)

    def as_dict(self) -> dict[int, float]:
        return {int(x): round(math.exp(v), 6) for x, v in zip(self.xs, self.v.tolist())}


@dataclass
class StepFit:
    """The fitted ratios of a whole-step table, and how well they reproduce its own rows."""

    physics: StepPhysics
    rates: Rates
    token_ratio: LogRatio  # ρ_T by tokens through the linear layers
    prefill_ratio: LogRatio  # ρ_P by chunk tokens; empty: prefill attention at the step's ρ_T
    decode_ratio: LogRatio  # ρ_D by decoding sequences; empty: decode attention at the step's ρ_T
    notes: list[str] = field(default_factory=list)  # what the fit could only approximately explain

    def body_s(self, num_tokens: int, rows: int) -> float:
        """Roofline seconds of the linear layers, elementwise ops and LM head (before ρ_T)."""
        return steps_kernel.body_s(self.physics.scalars, self.physics.linear, self.rates.flops_per_s,
                                   self.rates.bytes_per_s, num_tokens, rows)

    def ratio_arrays(self) -> tuple:
        """(log x, log ratio) of the token, prefill and decode ratios, as `steps_kernel` reads them."""
        return (self.token_ratio.u, self.token_ratio.v, self.prefill_ratio.u, self.prefill_ratio.v,
                self.decode_ratio.u, self.decode_ratio.v)

    def _args(self, plan: StepPlan) -> tuple:
        return (self.physics.scalars, self.physics.linear, self.rates.flops_per_s, self.rates.bytes_per_s,
                *self.ratio_arrays(), *step_args(plan)[:-2])  # (the fit prices no swaps, no group's experts)

    def parts(self, plan: StepPlan) -> dict[str, float]:
        """Seconds of each part of a step: token (body + head), prefill_attention, decode_attention."""
        return dict(zip(("token", "prefill_attention", "decode_attention"), steps_kernel.fit_parts(*self._args(plan))))

    def time_s(self, plan: StepPlan) -> float:
        return steps_kernel.fit_time(*self._args(plan))

    def describe(self) -> dict:
        return {"flops_per_s": self.rates.flops_per_s, "bytes_per_s": self.rates.bytes_per_s,
                "token_ratio": self.token_ratio.as_dict(), "prefill_attention_ratio": self.prefill_ratio.as_dict(),
                "decode_attention_ratio": self.decode_ratio.as_dict(), "notes": list(self.notes)}


def _slopes(rows: pd.DataFrame, plans: list[StepPlan], group_col: str, context_col: str, attention, rates: Rates,
            notes: list[str], what: str) -> LogRatio:
    """Per group (same batch or chunk), the least-squares slope of step time against attention roofline
    time across contexts: the attention's own ratio, the rest of the step being the same."""
    xs, ratios = [], []
    for key, idx in rows.groupby(group_col).groups.items():
        idx = list(idx)
        if rows.loc[idx, context_col].nunique() < 2:
            continue
        a = np.array([rates.time(*attention(plans[i])) for i in idx])
        t = rows.loc[idx, "step_s"].to_numpy(float)
        da = a - a.mean()
        slope = float((da * (t - t.mean())).sum() / (da * da).sum())
        if not (slope > 0 and math.isfinite(slope)):
            span = float(t[np.argmax(a)] - t[np.argmin(a)])
            notes.append(f"{what} {int(key)}: step time does not grow with context (slope {slope:.3g}; the longest "
                         f"context measured {span * 1e3:+.3f} ms against the shortest); its attention ratio is "
                         "interpolated from the other groups instead")
            continue
        xs.append(int(key))
        ratios.append(slope)
    return LogRatio(xs, ratios)


def fit_steps(rows: pd.DataFrame, model: ModelSpec, tensor_parallel: int, dtype: str = "bf16",
              field: str = "cost_model.profile", rates: Rates | None = None) -> StepFit:
    """Fit the decomposition in the module docstring to a table's rows (see `read_steps_table`).

    `rates`: the device roofline the ratios are taken against; default: the fastest FLOP rate and byte
    rate the table's own steps reached."""
    if rows.empty:
        raise ConfigError(f"{field}: no rows to fit")
    if not (rows["kind"] != "decode").any() or not (rows["kind"] != "prefill").any():
        have = ", ".join(sorted(set(rows["kind"])))
        raise ConfigError(f"{field}: a whole-step table needs rows with prefill tokens and rows with decodes to "
                          f"price both; this one has only {have} rows")
    rows = rows.reset_index(drop=True)
    physics = StepPhysics(model, tensor_parallel, _DTYPE_BYTES.get(dtype, 2))
    plans = row_plans(rows)
    t = rows["step_s"].to_numpy(float)
    counts = np.array([physics.counts(p) for p in plans])
    rates = rates or Rates(float((counts[:, 0] / t).max()), float((counts[:, 1] / t).max()))
    notes: list[str] = []

    def decode_attn(p):
        return physics.decode_attention(p.num_decode_seqs, p.decode_context_tokens, p.decode_query_tokens)

    def prefill_attn(p):
        return physics.prefill_attention(p.prefill_chunk_tokens[0], p.prefill_context_tokens[0])

    is_decode, is_prefill = (rows["kind"] == "decode").to_numpy(), (rows["kind"] == "prefill").to_numpy()
    decode_ratio = _slopes(rows[is_decode], plans, "decode_batch", "decode_context", decode_attn, rates, notes,
                           "decode batch")
    prefill_ratio = _slopes(rows[is_prefill], plans, "prefill_tokens", "prefill_context", prefill_attn, rates, notes,
                            "prefill chunk")
    empty = LogRatio([], [])
    fit = StepFit(physics, rates, empty, prefill_ratio, decode_ratio, notes)
    # ρ_T per row: what the identified attention leaves, over the body's roofline (plus any attention
    # priced at the step's own ratio).
    by_tokens: dict[int, list[tuple[int, float]]] = {}
    for i, plan in enumerate(plans):
        n = plan.num_tokens
        body = fit.body_s(n, physics.head_rows(plan))
        known, common = 0.0, 0.0
        for c, x in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens):
            a = rates.time(*physics.prefill_attention(c, x))
            if prefill_ratio:
                known += prefill_ratio(c) * a
            else:
                common += a
        if plan.num_decode_seqs:
            a = rates.time(*decode_attn(plan))
            if decode_ratio:
                known += decode_ratio(plan.num_decode_seqs) * a
            else:
                common += a
        left = t[i] - known
        if left <= 0:
            r = rows.iloc[i]
            raise ConfigError(
                f"{field}: cannot explain the row {describe_row(r.kind, r.prefill_tokens, r.prefill_context, r.decode_batch, r.decode_context)}: "
                f"its attention alone is priced at {known * 1e3:.3f} ms, {-left * 1e3:.3f} ms more than the measured "
                f"{t[i] * 1e3:.3f} ms step")
        by_tokens.setdefault(n, []).append((i, left / (body + common)))
    xs, ratios = [], []
    for n, vals in sorted(by_tokens.items()):
        rs = np.array([v for _, v in vals])
        xs.append(n)
        ratios.append(float(np.exp(np.log(rs).mean())))
        if len(rs) > 1 and rs.max() / rs.min() - 1 > DISAGREEMENT_NOTE_FRACTION:
            which = "; ".join(
                f"{describe_row(*(rows.iloc[i][c] for c in SHAPE_COLUMNS))}: {v:.3f}" for i, v in vals)
            notes.append(f"rows at {n} tokens imply token-part ratios {rs.max() / rs.min() - 1:.1%} apart ({which}); "
                         "the additive model explains them only on average")
    fit.token_ratio = LogRatio(xs, ratios)
    for note in notes:
        warnings.warn(note, StepFitWarning, stacklevel=2)
    return fit


# --- profiles -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StepProfile:
    path: Path
    meta: dict
    model: ModelSpec  # the architecture the table was measured for
    rows: pd.DataFrame  # steps.csv, checked
    fit: StepFit


_CACHE: dict[tuple[str, float, float], StepProfile] = {}


def load_step_profile(path: str | Path, field: str = "cost_model.profile") -> StepProfile:
    """Read, check and fit a whole-step profile folder (cached: many replicas share one)."""
    p = Path(path).expanduser()
    meta = read_meta(p, field)
    if meta.get("profile_kind") != PROFILE_KIND:
        raise ConfigError(f"{field}: '{path}' is not a whole-step profile (profile_kind "
                          f"{meta.get('profile_kind')!r}); allowed: profile_kind 'steps'")
    if not meta.get("complete"):
        raise ConfigError(f"{field}: '{path}' is incomplete (an interrupted measurement); rerun the command "
                          "that wrote it")
    csv = p / "steps.csv"
    if not csv.is_file():
        raise ConfigError(f"{field}: '{path}' lacks steps.csv; allowed: a complete whole-step profile folder")
    key = (str(p.resolve()), (p / "meta.json").stat().st_mtime, csv.stat().st_mtime)
    if key in _CACHE:
        return _CACHE[key]
    model, tp = profile_model(meta, p, field)
    rows = read_steps_table(csv, field, model=model, device=meta.get("device"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StepFitWarning)  # kept in fit.notes; `calibrate check` prints them
        fit = fit_steps(rows, model, tp, meta.get("dtype", "bf16"), field)
    profile = StepProfile(p, meta, model, rows, fit)
    _CACHE[key] = profile
    return profile


def check_step_matches(profile: StepProfile, model: ModelSpec, tensor_parallel: int,
                       field: str = "cost_model.profile") -> None:
    """The profile must have been measured for this model's whole shard: every layer, at this TP degree."""
    have_model, have_tp = profile.model, profile.meta.get("tensor_parallel")
    want = shard_shapes(model, tensor_parallel)
    have = profile.meta["shard"]
    prefix = (f"{field}: '{profile.path}' was measured for {have_model.name} at tp {have_tp}")
    for key in ("num_heads", "num_kv_heads", "head_dim", "hidden_size", "ffn_size", "vocab_size", "gated_mlp"):
        if have.get(key) != want[key]:
            raise ConfigError(f"{prefix} ({key} {have.get(key)} per GPU), but {model.name} at tensor_parallel "
                              f"{tensor_parallel} has {key} {want[key]}")
    for name, shape in want["linear"].items():
        if have["linear"].get(name) != shape:
            raise ConfigError(f"{prefix} (linear layer {name} at {have['linear'].get(name)} per GPU), but "
                              f"{model.name} at tensor_parallel {tensor_parallel} needs {shape}")
    for key in ("num_layers", "sliding_window", "num_window_layers", "num_experts", "num_experts_per_token",
                "num_dense_layers"):
        if getattr(have_model, key) != getattr(model, key):
            raise ConfigError(f"{prefix} ({key} {getattr(have_model, key)}), but {model.name} has {key} "
                              f"{getattr(model, key)}; a whole-step profile times every layer")


# --- the cost model -----------------------------------------------------------------------------------

class StepProfileCostModel(PackedCostModel):
    """Step times from a whole-step profile (see the module docstring for the decomposition).

    The profile is one GPU's shard; with tensor_parallel > 1 and `communication` on, two all-reduces
    per layer are added from the scenario GPU's catalog entry (interconnect bandwidth × efficiency,
    latency). Swaps are priced over that GPU's host link. FLOPs and bytes (utilization figures) are
    the roofline's counts, as for the per-op calibrated model.
    """

    def __init__(self, profile_dir: str | Path, model: ModelSpec, *, tensor_parallel: int = 1,
                 gpu: GPUSpec | None = None, communication: bool = True, kv_layout: str | None = None,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", fit: StepFit | None = None,
                 fp8_compute: bool = False):
        self.profile = load_step_profile(profile_dir)
        check_step_matches(self.profile, model, tensor_parallel)
        self.model, self.tp, self.kv_layout = model, tensor_parallel, kv_layout
        self.fit = fit or self.profile.fit
        self.gpu = gpu or get_gpu("h100-sxm")
        self.communication = communication and tensor_parallel > 1
        self.roofline = RooflineCostModel(model, self.gpu, tensor_parallel=tensor_parallel,
                                          weight_dtype=weight_dtype, kv_dtype=kv_dtype, fp8_compute=fp8_compute)
        link = self.gpu.interconnect_bytes_per_s * self.gpu.interconnect_efficiency
        self._allreduce_s_per_token = 2.0 * (tensor_parallel - 1) / tensor_parallel * model.hidden_size * 2 / link

    def __repr__(self) -> str:
        meta = self.profile.meta
        comm = (f"+ 2 all-reduces per layer from the {self.gpu.name} catalog entry" if self.communication
                else "no communication" + (" (turned off)" if self.tp > 1 else " (tp 1)"))
        layout = meta.get("kv_layout")
        kv = (f", measured {layout} KV (scenario {self.kv_layout})"
              if self.kv_layout and layout and {layout, self.kv_layout} not in ({"dense", "contiguous"},) and
              layout != self.kv_layout else "")
        return (f"StepProfileCostModel({self.model.name} x{self.tp}, whole steps '{self.profile.path}', engine "
                f"{meta.get('engine')}, measured on {meta.get('device_name')} in {meta.get('dtype')}"
                f"{', fp8 weights' if meta.get('weight_dtype') == 'fp8' else ''}, "
                f"{len(self.profile.rows)} rows; {comm}{kv})")

    def _build_pack(self) -> tuple:
        """(the roofline's pack, for the FLOPs and bytes; this model's, for the time)."""
        return self.roofline._pack(), steps_kernel.pack(self)

    def note_lines(self, steps=None) -> tuple[str, ...]:
        """What this profile approximates, one line each, sorted: its fit's notes; the all-reduces it adds from the
        catalog; and, given a run's step log (`num_decode_seqs`, `num_prefill_tokens`, `num_steps`), the decode
        batches and step tokens past what it measured (its ratios are held past its edges). It keeps no notes while
        it prices, so the run's steps say where it went."""
        notes = [f"whole-step profile fit: {n}" for n in self.fit.notes]
        if self.communication:
            notes.append(f"all-reduce: not in the one-GPU profile; two a layer from the {self.gpu.name} catalog "
                         "entry's interconnect")
        if steps is None or not len(steps["num_decode_seqs"]):
            return tuple(sorted(notes))
        rows = self.profile.rows
        batch, tokens = np.asarray(steps["num_decode_seqs"]), np.asarray(steps["num_prefill_tokens"])
        measured_batch = int(rows["decode_batch"].max())
        measured_tokens = int((rows["prefill_tokens"] + rows["decode_batch"]).max())
        if batch.max() > measured_batch:
            # (a row of the log is one step, or a run of decode steps: `num_steps`)
            runs = np.asarray(steps["num_steps"]) if "num_steps" in steps else np.ones(len(batch))
            notes.append(f"whole-step profile: decode batches measured up to {measured_batch:,}; this run's "
                         f"reached {int(batch.max()):,} in {int(runs[batch > measured_batch].sum()):,} steps (the "
                         "largest measured batch's ratio held)")
        if (batch + tokens).max() > measured_tokens:
            notes.append(f"whole-step profile: steps measured up to {measured_tokens:,} tokens; this run's reached "
                         f"{int((batch + tokens).max()):,} (the nearest measured ratio held)")
        return tuple(sorted(notes))

    def allreduce_s(self, num_tokens: int) -> float:
        """The two all-reduces per layer of a step of `num_tokens` tokens (0 without communication)."""
        return steps_kernel.allreduce_s(self._pack()[1][0], num_tokens)

    def step_cost(self, plan: StepPlan) -> StepCost:
        roofline, steps = self._pack()
        return StepCost(*compiled_pricing.price_parts(KIND_STEPS, roofline, steps, None, *step_args(plan)))

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    def compiled_params(self) -> tuple | None:
        """This model's packs for the compiled engine core (`sim.compiled`), through `sim.cost.compiled_pricing`;
        None for a subclass (it may price otherwise), or without numba."""
        if type(self) is not StepProfileCostModel or not HAVE_NUMBA:
            return None
        return compiled_pricing.pricer(*self._pack())

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`): `step_cost` of each, in
        one call."""
        roofline, steps = self._pack()
        return decode_run_costs(KIND_STEPS, roofline, steps, None, num_seqs, context_tokens, num_steps)
