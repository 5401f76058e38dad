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
"""

from __future__ import annotations

import math
import warnings
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import ValidationError

from sim.core.step_plan import StepPlan
from sim.cost.calibrated import shard_shapes
from sim.cost.profile_meta import read_meta
from sim.cost.roofline import RooflineCostModel, StepCost
from sim.errors import ConfigError
from sim.model.catalog import get_gpu
from sim.model.memory import kv_bytes_per_token
from sim.model.shapes import layer_groups
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


class StepFitWarning(UserWarning):
    """A whole-step fit that explains its rows only approximately (see the message)."""


# --- reading a table --------------------------------------------------------------------------------

def _fail(field: str, path, line: int | None, what: str) -> ConfigError:
    where = f"'{path}'" + (f" line {line}" if line is not None else "")
    return ConfigError(f"{field}: {where}: {what}")


def read_steps_table(path: str | Path, field: str = "TABLE") -> pd.DataFrame:
    """Read and check a whole-step table; every problem is one line naming the file (and line).

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
            try:
                number = float(value) if value != "" else float("nan")
            except ValueError:
                number = float("nan")
            if not math.isfinite(number) or number < 0 or number != int(number):
                raise _fail(field, path, line_no, f"{col} {value!r} is not allowed; allowed: an integer >= 0")
            rec[col] = int(number)
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
        return math.hypot(flops / self.flops_per_s, nbytes / self.bytes_per_s)


class StepPhysics:
    """FLOPs and HBM bytes of a step's parts on one GPU of a tensor-parallel group (all layers)."""

    def __init__(self, model: ModelSpec, tensor_parallel: int, elem_bytes: int):
        shard = shard_shapes(model, tensor_parallel)  # raises for MLA
        tp, eb = tensor_parallel, elem_bytes
        self.eb, self.num_layers = eb, model.num_layers
        self.window = model.sliding_window
        self.hq, self.hkv, self.d = shard["num_heads"], shard["num_kv_heads"], shard["head_dim"]
        # Per layer group: (layers, [(in, out, experts, experts each token routes to)]) per GPU.
        self.groups = []
        for n, shapes in layer_groups(model):
            mats = []
            for s in shapes:
                k = s.in_features // tp if s.tp_split == "row" else s.in_features
                m = s.out_features // tp if s.tp_split == "column" else s.out_features
                mats.append((k, m, s.count, s.active_per_token))
            self.groups.append((n, mats))
        self.head_in, self.head_out = shard["linear"]["lm_head"]
        h, ffn = shard["hidden_size"], shard["ffn_size"]
        act = 3 * ffn if model.gated_mlp else 2 * ffn
        # Two norms, two residual adds, rotary on q and k, the activation: bytes per token per layer.
        self.elementwise_bytes = (2 * 2 * h + 2 * 3 * h + 2 * (self.hq + self.hkv) * self.d + act) * eb

    def body(self, num_tokens: int) -> list[tuple[float, float]]:
        """(FLOPs, bytes) of each linear layer (all layers of its kind) and of the elementwise ops."""
        ops = []
        for n, mats in self.groups:
            for k, m, experts, active in mats:
                if experts > 1:
                    touched = experts * (1.0 - (1.0 - active / experts) ** num_tokens)
                else:
                    touched = 1.0
                flops = 2.0 * num_tokens * k * m * active
                nbytes = (k * m * touched + num_tokens * active * (k + m)) * self.eb
                ops.append((n * flops, n * nbytes))
        ops.append((0.0, self.num_layers * num_tokens * self.elementwise_bytes))
        return ops

    def head(self, rows: int) -> list[tuple[float, float]]:
        """LM head GEMM at the sampled rows, then argmax reading the logits."""
        if rows <= 0:
            return []
        k, m = self.head_in, self.head_out
        return [(2.0 * rows * k * m, (k * m + rows * (k + m)) * self.eb), (0.0, rows * m * self.eb)]

    def prefill_attention(self, chunk: int, context: int) -> tuple[float, float]:
        """Causal attention of a chunk after `context` cached tokens, all layers."""
        if self.window:
            pairs = chunk * min(context + (chunk + 1) / 2, self.window)
            kv_tokens = min(context + chunk, self.window)
        else:
            pairs = chunk * (context + (chunk + 1) / 2)
            kv_tokens = context + chunk
        flops = 4.0 * self.hq * self.d * pairs
        nbytes = (kv_tokens * 2 * self.hkv * self.d + 2 * chunk * self.hq * self.d) * self.eb
        return self.num_layers * flops, self.num_layers * nbytes

    def decode_attention(self, batch: int, context_tokens: float, query_tokens: int = 1) -> tuple[float, float]:
        """`batch` sequences, `query_tokens` each, reading `context_tokens` cached tokens in all, all layers."""
        if self.window:
            context_tokens = min(context_tokens, batch * self.window)
        flops = 4.0 * self.hq * self.d * query_tokens * context_tokens
        nbytes = (context_tokens * 2 * self.hkv * self.d + 2 * batch * query_tokens * self.hq * self.d) * self.eb
        return self.num_layers * flops, self.num_layers * nbytes

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
        self.u = [math.log(x) for x in self.xs]
        self.v = [math.log(float(np.asarray(ratios, float)[i])) for i in order]

    def __bool__(self) -> bool:
        return bool(self.u)

    def __call__(self, x: float) -> float:
        u, v = self.u, self.v
        lx = math.log(x)
        if len(u) == 1 or lx <= u[0]:
            return math.exp(v[0])
        if lx >= u[-1]:
            return math.exp(v[-1])
        i = bisect_right(u, lx) - 1
        w = (lx - u[i]) / (u[i + 1] - u[i])
        return math.exp(v[i] * (1 - w) + v[i + 1] * w)

    def as_dict(self) -> dict[int, float]:
        return {int(x): round(math.exp(v), 6) for x, v in zip(self.xs, self.v)}


@dataclass
class StepFit:
    """The fitted ratios of a whole-step table, and how well they reproduce its own rows."""

    physics: StepPhysics
    rates: Rates
    token_ratio: LogRatio  # ρ_T by tokens through the linear layers
    prefill_ratio: LogRatio  # ρ_P by chunk tokens; empty: prefill attention at the step's ρ_T
    decode_ratio: LogRatio  # ρ_D by decoding sequences; empty: decode attention at the step's ρ_T
    notes: list[str] = field(default_factory=list)  # what the fit could only approximately explain
    _body_cache: dict = field(default_factory=dict, repr=False)

    def _time(self, ops) -> float:
        return sum(self.rates.time(f, b) for f, b in ops)

    def body_s(self, num_tokens: int, rows: int) -> float:
        """Roofline seconds of the linear layers, elementwise ops and LM head (before ρ_T)."""
        key = (num_tokens, rows)
        cached = self._body_cache.get(key)
        if cached is None:
            cached = self._time(self.physics.body(num_tokens) + self.physics.head(rows))
            if len(self._body_cache) < 65536:
                self._body_cache[key] = cached
        return cached

    def parts(self, plan: StepPlan) -> dict[str, float]:
        """Seconds of each part of a step: token (body + head), prefill_attention, decode_attention."""
        t = plan.num_tokens
        if t == 0:
            return {"token": 0.0, "prefill_attention": 0.0, "decode_attention": 0.0}
        rho_t = self.token_ratio(t)
        token = rho_t * self.body_s(t, self.physics.head_rows(plan))
        prefill = 0.0
        for chunk, context in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens):
            if chunk:
                rho = self.prefill_ratio(chunk) if self.prefill_ratio else rho_t
                prefill += rho * self.rates.time(*self.physics.prefill_attention(chunk, context))
        decode = 0.0
        if plan.num_decode_seqs:
            b = plan.num_decode_seqs
            rho = self.decode_ratio(b) if self.decode_ratio else rho_t
            decode = rho * self.rates.time(*self.physics.decode_attention(b, plan.decode_context_tokens,
                                                                           plan.decode_query_tokens))
        return {"token": token, "prefill_attention": prefill, "decode_attention": decode}

    def time_s(self, plan: StepPlan) -> float:
        return sum(self.parts(plan).values())

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
    try:
        model = ModelSpec.model_validate(meta.get("model"))
        tp = int(meta["tensor_parallel"])
    except (ValidationError, KeyError, TypeError, ValueError):
        raise ConfigError(f"{field}: '{p / 'meta.json'}' lacks a valid model or tensor_parallel") from None
    if meta["shard"] != shard_shapes(model, tp):
        raise ConfigError(f"{field}: '{p / 'meta.json'}' has a shard section that is not {model.name}'s at "
                          f"tensor_parallel {tp}; rewrite the profile")
    rows = read_steps_table(csv, field)
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
    for key in ("num_layers", "sliding_window", "num_experts", "num_experts_per_token", "num_dense_layers"):
        if getattr(have_model, key) != getattr(model, key):
            raise ConfigError(f"{prefix} ({key} {getattr(have_model, key)}), but {model.name} has {key} "
                              f"{getattr(model, key)}; a whole-step profile times every layer")


# --- the cost model -----------------------------------------------------------------------------------

class StepProfileCostModel:
    """Step times from a whole-step profile (see the module docstring for the decomposition).

    The profile is one GPU's shard; with tensor_parallel > 1 and `communication` on, two all-reduces
    per layer are added from the scenario GPU's catalog entry (interconnect bandwidth × efficiency,
    latency). Swaps are priced over that GPU's host link. FLOPs and bytes (utilization figures) are
    the roofline's counts, as for the per-op calibrated model.
    """

    def __init__(self, profile_dir: str | Path, model: ModelSpec, *, tensor_parallel: int = 1,
                 gpu: GPUSpec | None = None, communication: bool = True, kv_layout: str | None = None,
                 weight_dtype: str = "bf16", kv_dtype: str = "bf16", fit: StepFit | None = None):
        self.profile = load_step_profile(profile_dir)
        check_step_matches(self.profile, model, tensor_parallel)
        self.model, self.tp, self.kv_layout = model, tensor_parallel, kv_layout
        self.fit = fit or self.profile.fit
        self.gpu = gpu or get_gpu("h100-sxm")
        self.communication = communication and tensor_parallel > 1
        self.roofline = RooflineCostModel(model, self.gpu, tensor_parallel=tensor_parallel,
                                          weight_dtype=weight_dtype, kv_dtype=kv_dtype)
        link = self.gpu.interconnect_bytes_per_s * self.gpu.interconnect_efficiency
        self._allreduce_s_per_token = 2.0 * (tensor_parallel - 1) / tensor_parallel * model.hidden_size * 2 / link
        self._swap_s_per_token = kv_bytes_per_token(model, kv_dtype, tensor_parallel) / self.gpu.host_link_bytes_per_s
        self._decode_cache: dict[int, tuple] = {}  # batch size -> context-free parts of a decode-only step

    def __repr__(self) -> str:
        meta = self.profile.meta
        comm = (f"+ 2 all-reduces per layer from the {self.gpu.name} catalog entry" if self.communication
                else "no communication" + (" (turned off)" if self.tp > 1 else " (tp 1)"))
        layout = meta.get("kv_layout")
        kv = (f", measured {layout} KV (scenario {self.kv_layout})"
              if self.kv_layout and layout and {layout, self.kv_layout} not in ({"dense", "contiguous"},) and
              layout != self.kv_layout else "")
        return (f"StepProfileCostModel({self.model.name} x{self.tp}, whole steps '{self.profile.path}', engine "
                f"{meta.get('engine')}, measured on {meta.get('device_name')} in {meta.get('dtype')}, "
                f"{len(self.profile.rows)} rows; {comm}{kv})")

    def allreduce_s(self, num_tokens: int) -> float:
        if not self.communication or num_tokens == 0:
            return 0.0
        return self.model.num_layers * 2 * (self.gpu.allreduce_latency_s + num_tokens * self._allreduce_s_per_token)

    def step_cost(self, plan: StepPlan) -> StepCost:
        counts = self.roofline.step_cost(plan)
        time_s = self.fit.time_s(plan) + self.allreduce_s(plan.num_tokens)
        time_s += (plan.swap_in_tokens + plan.swap_out_tokens) * self._swap_s_per_token
        return StepCost(time_s, counts.flops, counts.bytes)

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    def compiled_params(self) -> tuple | None:
        """This model's numbers for the compiled engine core (`sim.cost.steps_kernel.step_time`, bit-identical
        to `step_cost`'s time; the roofline's counts beside it); None where that form does not cover it: a
        subclass, MoE layers, a sliding window, a roofline without a compiled form, numba missing, or a
        Python whose `math.hypot`/`sum` the kernel does not repeat (`sim.cost.pyfloat_kernel.EXACT_HERE`)."""
        physics = self.fit.physics
        if (type(self) is not StepProfileCostModel or physics.window
                or any(experts != 1 for _, mats in physics.groups for _, _, experts, _ in mats)):
            return None
        counts = self.roofline.compiled_params()
        if counts is None:
            return None
        from sim.cost import compiled_pricing, pyfloat_kernel, steps_kernel
        if not pyfloat_kernel.EXACT_HERE:
            return None
        return compiled_pricing.pricer(counts[1], steps_kernel.pack(self))  # counts[1]: the roofline's pack

    def _decode_constants(self, num_seqs: int) -> tuple:
        """What a decode-only step of `num_seqs` sequences costs apart from its attention's context: the
        token part (ρ_T · body with one LM-head row per sequence), ρ_D, the all-reduces, the (empty) swap
        term; and the attention's FLOPs per context token and bytes as (per context token, fixed), all
        layers, in `StepPhysics.decode_attention`'s operations (its byte count is an exact integer)."""
        cached = self._decode_cache.get(num_seqs)
        if cached is not None:
            return cached
        n, fit = num_seqs, self.fit
        physics = fit.physics
        rho_t = fit.token_ratio(n)
        token = rho_t * fit.body_s(n, n)
        rho_d = fit.decode_ratio(n) if fit.decode_ratio else rho_t
        swap_s = 0 * self._swap_s_per_token  # no swaps in a decode run; added as step_cost adds it
        flops_per_ctx = 4.0 * physics.hq * physics.d * 1
        cached = (token, rho_d, self.allreduce_s(n), swap_s, physics.num_layers, flops_per_ctx,
                  2 * physics.hkv * physics.d, 2 * n * 1 * physics.hq * physics.d, physics.eb,
                  n * physics.window if physics.window else 0)
        if len(self._decode_cache) < 65536:
            self._decode_cache[num_seqs] = cached
        return cached

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`), bit-identical to `step_cost` of
        each: the token part (ρ_T · body), ρ_D, the all-reduces and the roofline's context-free counts are
        computed once per batch size; per step only the decode attention (`StepPhysics.decode_attention`
        and `Rates.time` inlined, the same operations), summed in `StepFit.time_s`'s order."""
        n = num_seqs
        counts = self.roofline.decode_step_costs(n, context_tokens, num_steps)
        (token, rho_d, allreduce_s, swap_s, layers, flops_per_ctx, kv_bytes_per_ctx, q_bytes, elem_bytes,
         window_tokens) = self._decode_constants(n)
        fps, bps = self.fit.rates.flops_per_s, self.fit.rates.bytes_per_s
        hypot = math.hypot
        out = []
        ctx = context_tokens
        for c in counts:
            attended = min(ctx, window_tokens) if window_tokens else ctx
            decode_flops = layers * (flops_per_ctx * attended)
            decode_bytes = layers * ((attended * kv_bytes_per_ctx + q_bytes) * elem_bytes)
            decode = rho_d * hypot(decode_flops / fps, decode_bytes / bps)
            # StepFit.time_s sums parts() in the order token, prefill_attention (none), decode_attention.
            time_s = sum([token, 0.0, decode]) + allreduce_s
            time_s += swap_s
            out.append(StepCost(time_s, c.flops, c.bytes))
            ctx += n
        return out
