"""Self-contained HTML reports for one or several results: the verdict first (sim/views/verdict.py), then the
summary grouped by what it measures, then charts that stay readable whatever the spread (sim/views/charts.py),
with plotly.js inlined once.
"""

from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from sim.band_curves import (
    CDF_PROBS,
    SERIES,
    band_label,
    bucket_mean,
    finished_values,
    makespan,
    ribbon_of,
    time_bins,
    time_series,
)
from sim.results import Result
from sim.views.charts import (
    TEMPLATE,
    axis_type,
    band_legend,
    cdf_points,
    color_map,
    colored,
    error_bars,
    f32,
    figure_html,
    plotly_script,
    ribbon_traces,
)
from sim.views.verdict import verdict_of

# The KV-memory parts, in greys: on every chart a colour names a variant, never a part.
_KV_PARTS = [("kv_token_slots", "token states", "#333333"), ("kv_reserved_slots", "reserved", "#737373"),
             ("kv_internal_slots", "internal fragmentation", "#a6a6a6"),
             ("kv_external_slots", "external fragmentation", "#cccccc")]

SUMMARY_ROWS = [  # (summary key, label): the CLI table, the report and the dashboard show these rows
    ("offered_rps", "offered load (req/s)"), ("throughput_rps", "throughput incl. drain (req/s)"),
    ("output_tokens_per_s", "output tokens/s incl. drain"),
    ("sustained_output_tokens_per_s", "output tokens/s, steady state"),  # sim/results.py load_and_sustained_rates
    ("goodput_rps", "goodput (req/s)"),
    ("slo_fraction_ok", "requests meeting every SLO"),
    ("ttft_s_p50", "TTFT p50 (s)"), ("ttft_s_p90", "TTFT p90 (s)"), ("ttft_s_p99", "TTFT p99 (s)"),
    ("tpot_s_p50", "TPOT p50 (s)"), ("tpot_s_p90", "TPOT p90 (s)"), ("tpot_s_p99", "TPOT p99 (s)"),
    ("itl_p99", "ITL p99 (s)"),
    ("e2e_s_p50", "E2E p50 (s)"), ("e2e_s_p90", "E2E p90 (s)"), ("e2e_s_p99", "E2E p99 (s)"),
    ("queueing_s_mean", "queueing mean (s)"), ("normalized_latency_s_mean", "normalized latency (s/token)"),
    ("mean_batch_size", "mean batch size"),
    ("kv_token_share", "KV token-state share"), ("kv_external_fraction", "KV external fragmentation"),
    ("kv_fig2_external_fraction", "KV external frag. & others (vLLM Fig. 2)"),
    ("preemptions", "preemptions"), ("num_finished", "finished"), ("num_unfinished", "unfinished"),
    ("num_rejected", "rejected"), ("max_num_waiting", "largest queue (requests)"),
    ("num_requests_clipped", "clipped to max_model_len"), ("mbu", "memory-bandwidth utilization"), ("mfu", "FLOP utilization"),
    ("prefix_cache_hit_rate_tokens", "prefix-cache hit rate (tokens)"),
    ("kv_shared_bytes_mean", "KV bytes saved by sharing (mean)"),
    ("kv_window_freed_blocks", "KV blocks freed by the sliding window"),
    ("draft_acceptance_rate", "drafted tokens accepted"),
    ("accept_length_mean", "tokens a verification (accept length)"), ("swapped_bytes", "swapped bytes"),
]

# The steady-state window (run.warmup_s / run.cooldown_s): shown only when a result has one, each row beside
# its whole-run counterpart, and every row of both labelled with which it is.
WINDOW_ROWS = [
    ("window_offered_rps", "offered_rps", "offered load (req/s)"),
    ("window_throughput_rps", "throughput_rps", "throughput, completions in window (req/s)"),
    ("window_output_tokens_per_s", "output_tokens_per_s", "output tokens/s"),
    ("window_ttft_s_p50", "ttft_s_p50", "TTFT p50 (s)"), ("window_ttft_s_p90", "ttft_s_p90", "TTFT p90 (s)"),
    ("window_ttft_s_p99", "ttft_s_p99", "TTFT p99 (s)"),
    ("window_tpot_s_p50", "tpot_s_p50", "TPOT p50 (s)"), ("window_tpot_s_p90", "tpot_s_p90", "TPOT p90 (s)"),
    ("window_tpot_s_p99", "tpot_s_p99", "TPOT p99 (s)"),
    ("window_e2e_s_p50", "e2e_s_p50", "E2E p50 (s)"), ("window_e2e_s_p90", "e2e_s_p90", "E2E p90 (s)"),
    ("window_e2e_s_p99", "e2e_s_p99", "E2E p99 (s)"),
    ("window_queueing_s_mean", "queueing_s_mean", "queueing mean (s)"),
    ("window_num_arrived", "num_finished", "arrived"),
]
WHOLE_RUN, IN_WINDOW = "whole run: ", "window: "


# Disaggregated prefill/decode (hardware.disaggregation): shown only when a result has it; a colocated
# result beside it shows "-" there.
DISAGGREGATION_ROWS = [
    ("num_gpus", "disaggregated: GPUs in both pools"),
    ("num_prefill_replicas", "disaggregated: prefill replicas"), ("num_decode_replicas", "disaggregated: decode replicas"),
    ("prefill_busy_fraction", "prefill pool busy share"), ("decode_busy_fraction", "decode pool busy share"),
    ("prefill_queueing_s_mean", "wait before prefill mean (s)"),
    ("decode_wait_s_mean", "wait for decode blocks mean (s)"), ("decode_wait_s_p90", "wait for decode blocks p90 (s)"),
    ("transfer_s_mean", "KV transfer mean (s)"), ("transfer_s_p90", "KV transfer p90 (s)"),
    ("num_waited_for_decode_blocks", "requests that waited for decode blocks"),
]


# The API front-end (`frontend:`): shown only when a result has one; with it the TTFT, TPOT, E2E and ITL rows above
# are the client's (as `vllm bench serve` measures them), and these rows give the engine's and the front-end's shares.
MEASURED_AT_KEY = "latency_measured_at"  # "client" where a front-end runs: a word, not a number
FRONTEND_ROWS = [
    (MEASURED_AT_KEY, "TTFT, TPOT, E2E measured at"),
    ("frontend_num_processes", "front-end processes"), ("frontend_busy_fraction", "front-end busy share"),
    ("frontend_in_s_mean", "front-end in: send to engine mean (s)"),
    ("frontend_in_s_p99", "front-end in: send to engine p99 (s)"),
    ("frontend_out_first_s_mean", "front-end out: first token mean (s)"),
    ("frontend_out_last_s_mean", "front-end out: last token mean (s)"),
    ("engine_ttft_s_p50", "engine TTFT p50 (s)"), ("engine_ttft_s_p99", "engine TTFT p99 (s)"),
    ("engine_tpot_s_p50", "engine TPOT p50 (s)"), ("engine_e2e_s_p50", "engine E2E p50 (s)"),
    ("engine_itl_p99", "engine ITL p99 (s)"),
]


def summary_rows(results) -> list[tuple[str, str]]:
    """(key, label) rows for these results: SUMMARY_ROWS, and when any result has a steady-state window,
    its rows inserted after their whole-run counterparts, each side labelled "whole run:" or "window:";
    FRONTEND_ROWS when any result has a front-end; DISAGGREGATION_ROWS last when any result is disaggregated."""
    extra = FRONTEND_ROWS if any("frontend_num_processes" in r.summary for r in results) else []
    if any("num_prefill_replicas" in r.summary for r in results):
        extra = extra + DISAGGREGATION_ROWS
    return _window_rows(results) + extra


def _window_rows(results) -> list[tuple[str, str]]:
    if not any("window_start_s" in r.summary for r in results):
        return SUMMARY_ROWS
    after: dict[str, list[tuple[str, str]]] = {}
    for key, beside, label in WINDOW_ROWS:
        after.setdefault(beside, []).append((key, IN_WINDOW + label))
    rows = [("window_start_s", "window start (s)"), ("window_end_s", "window end (s)")]
    for key, label in SUMMARY_ROWS:
        extra = after.get(key, [])
        rows.append((key, WHOLE_RUN + label if extra else label))
        rows.extend(extra)
    return rows


COST_MODEL_LABEL = "cost model"  # the row every summary table adds: which cost model priced the run


DEPLOYMENT_LABEL = "deployment"  # the row saying what was simulated: model, weights, GPUs and parallelism


def deployment_label(scenario) -> str:
    """What a scenario deploys, in a few words: "qwen3-32b (fp8 weights) on h200, TP 2, 3 replicas"; a
    disaggregated one's pools each ("prefill 2 x h100-sxm TP 1 / decode 1 x h100-sxm TP 2"). The model and GPU may
    come from defaults or a launch command rather than the file: this row says which ran."""
    model = scenario.model if isinstance(scenario.model, str) else scenario.model.name
    weights = scenario.quantization.weights
    model += "" if weights in ("bf16", "fp16") else f" ({weights} weights)"
    hw = scenario.hardware

    def gpu_name(gpu) -> str:
        return gpu if isinstance(gpu, str) else gpu.name
    if hw.disaggregation is not None:
        pools = []
        for role in ("prefill", "decode"):
            pool = getattr(hw.disaggregation, role)
            pools.append(f"{role} {pool.num_replicas or hw.num_replicas} x {gpu_name(pool.gpu or hw.gpu)} TP "
                         f"{pool.tensor_parallel or hw.tensor_parallel}")
        return f"{model} on {' / '.join(pools)}"
    parts = [f"{model} on {gpu_name(hw.gpu)}", f"TP {hw.tensor_parallel}"]
    parts += [f"PP {hw.pipeline_parallel}"] if hw.pipeline_parallel > 1 else []
    parts += [f"EP {hw.expert_parallel}"] if hw.expert_parallel > 1 else []
    parts += [f"{hw.num_replicas} replicas" + (" in lockstep" if hw.lockstep is not None else "")
              ] if hw.num_replicas > 1 else []
    return ", ".join(parts)


def cost_model_labels(results) -> list[str]:
    """Per result, which cost model priced it (Result.extras, set by sim.run.simulate); '-' where unknown."""
    return [str(r.extras.get("cost_model_label", "-")) for r in results]


PERCENT_KEYS = frozenset({"slo_fraction_ok"})  # fractions of requests: shown as percentages, not bare 0.6625


def format_metric(key: str, value) -> str:
    """A summary value as every view shows it: fractions of requests as percentages, the rest by format_value."""
    if key in PERCENT_KEYS and isinstance(value, (float, int, np.floating)) and not isinstance(value, bool):
        return "-" if math.isnan(value) else f"{float(value) * 100:.4g}%"
    return format_value(value)


def format_banded(key: str, summary: dict) -> str:
    """A summary value with its band when the run has one (issue 31): "0.0127 [0.0119, 0.0141]"."""
    text = format_metric(key, summary.get(key))
    edges = (summary.get("band") or {}).get(key)
    if isinstance(edges, list) and len(edges) == 2:
        text += f" [{format_metric(key, edges[0])}, {format_metric(key, edges[1])}]"
    return text


def band_note(name: str, summary: dict, seed_draws: tuple[str, ...] | None = None) -> str | None:
    """One line saying what a run's band is, or None without one. `seed_draws`: what the run's seed draws
    (sim/run.py seed_draws), where known: a workload source that draws nothing is said to."""
    band = summary.get("band")
    if not band:
        return None
    names = list(band["sources"])
    if seed_draws is not None and "workload" in names:
        names[names.index("workload")] = ("workload (nothing: every seed runs the same requests the same way)"
                                          if not seed_draws else f"workload ({', '.join(seed_draws)})")
    sources = ", ".join(names)
    residuals = band.get("step_time_residuals")
    if residuals:
        sources += (f" (the {residuals['cost_model']} model's residuals: bias sigma {residuals['bias_sigma']:.3g}, "
                    f"per-step sigma {residuals['sigma_prefill']:.3g} prefill / {residuals['sigma_decode']:.3g} decode)")
    met = band.get("slo_met_replications")
    return (f"band: {name}: {band['level'] * 100:g}% over {band['replications']} replications drawing {sources}"
            + (f"; SLOs met in {met} of {band['replications']}" if met is not None else ""))


# The figures a comparison's difference bands are shown on in the terminal (the verdict's deciding metrics at
# p99), with their labels and units; band_differences.json holds every banded figure.
DIFFERENCE_LABELS = {"goodput_rps": ("goodput", "req/s"), "ttft_s_p99": ("TTFT p99", "s"),
                     "tpot_s_p99": ("TPOT p99", "s"), "e2e_s_p99": ("E2E p99", "s"),
                     "throughput_rps": ("throughput", "req/s")}


def _signed(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{float(x):+,.4g}"


def difference_lines(table: dict) -> list[str]:
    """The terminal's lines for `sim.bands.difference_bands`: a heading, then per variant and figure
    "  TTFT p99: B − A = -0.012 s [-0.02, -0.003]: B faster across the band"."""
    ref = table["reference"]
    out = [f"band of each difference from {ref} ({table['level'] * 100:g}%, {table['replications']} replications, "
           "the same requests and draws for every variant):"]
    for name, rows in table["variants"].items():
        for key, (label, unit) in DIFFERENCE_LABELS.items():
            row = rows.get(key)
            if row is None:
                continue
            band = row["band"]
            edges = "[no band]" if band is None else f"[{_signed(band[0])}, {_signed(band[1])}]"
            out.append(f"  {label}: {name} − {ref} = {_signed(row['point'])} {unit} {edges}: {row['reading']}")
    for name, why in table["not_comparable"].items():
        out.append(f"  {name}: no difference band ({why})")
    return out


def format_value(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


# ------------------------------------------------------------------------------------------------ the table

# The summary's rows grouped by what they measure; the verdict's deciding metrics first (deciding_keys, with the
# SLO percentile's latencies), then latency, throughput, memory and counts, then the optional groups.
SLO_MET_ROW = ("slo_met", "SLOs met")
GROUPS = ("SLOs and goodput (what the verdict decides on)", "latency", "throughput and utilization",
          "KV memory", "counts", "steady-state window", "API front-end", "disaggregated prefill/decode", "run")
_GROUP_OF = {
    **{k: "latency" for k in ("ttft_s_p50", "ttft_s_p90", "ttft_s_p99", "tpot_s_p50", "tpot_s_p90", "tpot_s_p99",
                              "itl_p99", "e2e_s_p50", "e2e_s_p90", "e2e_s_p99", "queueing_s_mean",
                              "normalized_latency_s_mean")},
    **{k: "throughput and utilization" for k in ("output_tokens_per_s", "sustained_output_tokens_per_s",
                                                 "mean_batch_size", "mbu", "mfu",
                                                 "draft_acceptance_rate", "accept_length_mean")},
    **{k: "KV memory" for k in ("kv_token_share", "kv_external_fraction", "kv_fig2_external_fraction",
                                "prefix_cache_hit_rate_tokens", "kv_shared_bytes_mean", "kv_window_freed_blocks",
                                "swapped_bytes")},
    **{k: "counts" for k in ("preemptions", "num_finished", "num_unfinished", "num_rejected", "max_num_waiting",
                             "num_requests_clipped")},
    **{k: "API front-end" for k, _ in FRONTEND_ROWS},
    **{k: "disaggregated prefill/decode" for k, _ in DISAGGREGATION_ROWS},
}
MAX_COLUMN_VARIANTS = 4  # more variants than this: variants as rows, one table per group
MAX_GROUP_COLUMNS = 10  # variants as rows: a group wider than this is split over several tables


def deciding_keys(results) -> list[str]:
    """The summary keys the verdict decides on, in its order: SLOs met, goodput, the share meeting every SLO,
    TTFT, TPOT and E2E at the SLO percentile (p99 where the table has no such row), throughput, offered load."""
    pct = next((float(k.rsplit("_p", 1)[1]) for r in results for k in r.summary
                if k.startswith("slo_ttft_p") or k.startswith("slo_tpot_p") or k.startswith("slo_e2e_p")), 99.0)
    shown = {k for k, _ in SUMMARY_ROWS}
    latencies = [f"{m}_s_p{pct:g}" if f"{m}_s_p{pct:g}" in shown else f"{m}_s_p99" for m in ("ttft", "tpot", "e2e")]
    return ["slo_met", "goodput_rps", "slo_fraction_ok", *latencies, "throughput_rps", "offered_rps"]


def _missing(value) -> bool:
    return value is None or (isinstance(value, (float, np.floating)) and math.isnan(value))


def grouped_rows(results) -> list[tuple[str, list[tuple[str, str]]]]:
    """(group, [(key, label)]) in GROUPS order: every row of `summary_rows` (the CLI's rows, the same labels)
    and SLOs met, each in one group, the deciding ones first; rows no result has a value for are left out."""
    rows = summary_rows(results)
    if any(r.summary.get("slo_met") is not None for r in results):
        rows = rows + [SLO_MET_ROW]
    label_of = dict(rows)
    deciding = [k for k in deciding_keys(results) if k in label_of]
    groups: dict[str, list[tuple[str, str]]] = {GROUPS[0]: [(k, label_of[k]) for k in deciding]}
    for key, label in rows:
        if key in deciding:
            continue
        group = "steady-state window" if key.startswith("window_") else _GROUP_OF.get(key, "throughput and utilization")
        groups.setdefault(group, []).append((key, label))
    out = []
    for group in GROUPS:
        kept = [(k, lab) for k, lab in groups.get(group, []) if not all(_missing(r.summary.get(k)) for r in results)]
        if kept:
            out.append((group, kept))
    return out


def _name_html(name: str, color: str) -> str:
    """A variant's name with its colour swatch; it may wrap after + and ( (long policy names)."""
    text = html.escape(name).replace("+", "+<wbr>").replace("(", "<wbr>(")
    return f'<span class="swatch" style="background:{color}"></span>{text}'


def _run_cells(results) -> list[tuple[str, list[str]]]:
    """The "run" rows: what each variant deploys, the serving engine it names (its preset), which cost model priced
    it and which engine core ran it."""
    rows = [(DEPLOYMENT_LABEL, [deployment_label(r.scenario) for r in results])]
    named = [str(r.extras.get("engine", "-")) for r in results]
    if any(e != "-" for e in named):
        rows.append(("serving engine", named))
    rows.append((COST_MODEL_LABEL, cost_model_labels(results)))
    engines = [str(r.extras.get("engine_core", "-")) for r in results]
    if any(e != "-" for e in engines):
        rows.append(("engine core", engines))
    return rows


def note_groups(items) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """`items`: (variant or candidate name, what the notes are of (an engine, a cost model's label), its notes).
    One group per what and set of notes, in first-seen order: (what, the names it is for, the notes); variants of
    one engine with other flags, or on another GPU, have other notes."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for name, engine, notes in items:
        groups.setdefault((engine, tuple(notes)), []).append(name)
    return [(engine, names, notes) for (engine, notes), names in groups.items()]


def engine_notes_section_html(groups) -> str:
    """The "What the engine preset approximates" section of a report: each group of `note_groups`, headed
    by its engine and the names it is for; '' for none."""
    return notes_section_html("engine-notes", "What the engine preset approximates", groups)


def notes_section_html(section_id: str, title: str, groups) -> str:
    """A report section of notes: each group (what they are of, the names they are for, the notes) headed by the
    first two, its notes one item each; '' for no group with notes."""
    groups = [g for g in groups if g[2]]
    if not groups:
        return ""
    blocks = "".join(f"<h3>{html.escape(of)}: {html.escape(', '.join(names))}</h3>"
                     f"<ul>{''.join(f'<li>{html.escape(n)}</li>' for n in notes)}</ul>"
                     for of, names, notes in groups)
    return f'<section id="{section_id}"><h2>{html.escape(title)}</h2>{blocks}</section>'


def cost_model_note_groups(results) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """What each run's cost model approximated (its notes, as the CLI prints them: sim/cost/labels.py
    `cost_model_notes`), once per cost model and set of notes: (its label, the variants they are for, the notes);
    a disaggregated run's prefill pool apart; the runs whose model noted nothing left out."""
    items = []
    for r in results:
        items.append((r.name, str(r.extras.get("cost_model_label", "-")), r.extras.get("cost_model_notes", ())))
        if r.extras.get("prefill_cost_model_notes"):
            items.append((f"{r.name} (prefill pool)", str(r.extras.get("prefill_cost_model_label", "-")),
                          r.extras["prefill_cost_model_notes"]))
    return [g for g in note_groups(items) if g[2]]


def cost_model_notes_html(results) -> str:
    """The report's "What the cost model approximates" (`cost_model_note_groups`); '' where none has notes."""
    return notes_section_html("cost-model-notes", "What the cost model approximates", cost_model_note_groups(results))


def engine_notes_html(results) -> str:
    """What each named engine's preset approximates (its notes, one line each, as the CLI prints them), once per
    engine and set of notes, headed by the variants they are for; '' where none names one."""
    return engine_notes_section_html(note_groups(
        (r.name, str(r.extras["engine"]), r.extras.get("engine_notes", ())) for r in results if "engine" in r.extras))


def summary_table_html(results: list[Result]) -> str:
    """The summary as HTML that fits its page: up to MAX_COLUMN_VARIANTS variants as columns (metrics as rows,
    a sticky first column, a header row per group); more variants as rows, one table per group (each at most
    MAX_GROUP_COLUMNS metrics wide). Cells are `<td>value</td>` as format_metric writes it."""
    colors = color_map([r.name for r in results])
    groups = grouped_rows(results)
    run_rows = _run_cells(results)
    if len(results) <= MAX_COLUMN_VARIANTS:
        head = "".join(f"<th>{_name_html(r.name, colors[r.name])}</th>" for r in results)
        body = []
        for group, rows in groups + [("run", [])]:
            body.append(f'<tr class="group"><th colspan="{len(results) + 1}">{html.escape(group)}</th></tr>')
            for key, label in rows:
                cells = "".join(f"<td>{format_banded(key, r.summary)}</td>" for r in results)  # with its band
                body.append(f"<tr><th>{html.escape(label)}</th>{cells}</tr>")
            if group == "run":
                for label, values in run_rows:
                    cells = "".join(f"<td>{html.escape(v)}</td>" for v in values)
                    body.append(f"<tr><th>{label}</th>{cells}</tr>")
        return (f'<div class="table-wrap"><table class="summary metrics-as-rows"><thead><tr><th>metric</th>{head}'
                f'</tr></thead><tbody>{"".join(body)}</tbody></table></div>')
    tables = []
    for group, rows in groups + [("run", [])]:
        if group == "run":
            columns = [(label, None) for label, _ in run_rows]
            chunks = [columns]
        else:
            columns = [(label, key) for key, label in rows]
            chunks = [columns[i:i + MAX_GROUP_COLUMNS] for i in range(0, len(columns), MAX_GROUP_COLUMNS)]
        for n, chunk in enumerate(chunks):
            caption = group + (f" ({n + 1} of {len(chunks)})" if len(chunks) > 1 else "")
            head = "".join(f"<th>{html.escape(label)}</th>" for label, _ in chunk)
            body = []
            for i, r in enumerate(results):
                if group == "run":
                    cells = "".join(f"<td>{html.escape(values[i])}</td>" for _, values in run_rows)
                else:
                    cells = "".join(f"<td>{format_banded(key, r.summary)}</td>" for _, key in chunk)
                body.append(f"<tr><th>{_name_html(r.name, colors[r.name])}</th>{cells}</tr>")
            tables.append(f'<div class="table-wrap"><table class="summary variants-as-rows"><caption>'
                          f'{html.escape(caption)}</caption><thead><tr><th>variant</th>{head}</tr></thead>'
                          f'<tbody>{"".join(body)}</tbody></table></div>')
    return "".join(tables)


# ------------------------------------------------------------------------------------------------ the charts

_LATENCIES = (("ttft_s", "TTFT (s)", "ttft_s"), ("tpot_s", "TPOT (s)", "tpot_s"),
              ("e2e_s", "end-to-end latency (s)", "e2e_s"))


def _shared_limit(results, key: str) -> float | None:
    """The SLO limit every result shares (None where they differ or one has none)."""
    limits = {getattr(r.scenario.slo, key, None) if getattr(r, "scenario", None) is not None else None
              for r in results}
    return limits.pop() if len(limits) == 1 else None


def _on_axis(limit: float, arrays, kind: str) -> bool:
    """Whether an SLO line at `limit` sits near the plotted values (within half their span beyond them, or a
    factor of 3 on a log axis), so drawing it does not stretch the axis."""
    values = np.concatenate([np.asarray(a, dtype=float) for a in arrays] or [np.zeros(0)])
    values = values[np.isfinite(values)]
    if not len(values):
        return False
    lo, hi = float(values.min()), float(values.max())
    if kind == "log":
        return lo / 3 <= limit <= hi * 3
    return lo - (hi - lo) / 2 <= limit <= hi + (hi - lo) / 2


def _cdf_figure(results, metrics, title: str, colors: dict[str, str], limits: bool = True,
                ribbons: dict | None = None) -> go.Figure:
    """One CDF panel per metric, every variant's curve in its colour (behind it, its band's ribbon where
    `ribbons` has one: variant -> `sim.band_curves.ribbon_of`); an axis goes logarithmic when the variants'
    values span more than a decade (charts.axis_type), and the SLO limit is drawn where shared."""
    fig = make_subplots(rows=1, cols=len(metrics), horizontal_spacing=0.07,
                        subplot_titles=[label for _, label, _ in metrics])
    ribbons = ribbons or {}
    labels = []  # the band labels drawn, each given one legend entry
    for col, (metric, label, slo_key) in enumerate(metrics, start=1):
        xs = []
        for r in results:  # the ribbons first: every curve is drawn over every ribbon
            band = ribbons.get(r.name)
            if band is None or metric not in band["cdf"]:
                continue
            lo, hi = band["cdf"][metric]
            for trace in ribbon_traces(CDF_PROBS, lo, hi, colors[r.name], label=band["label"], name=r.name,
                                       across="x", hover="%{x:.4g} s at %{y:.1%}"):
                fig.add_trace(trace, row=1, col=col)
            xs += [f32(lo), f32(hi)]
            labels += [band["label"]] if band["label"] not in labels else []
        for r in results:
            values = finished_values(r, metric)
            x, y = cdf_points(values if values is not None else [])
            xs.append(x)
            fig.add_trace(go.Scatter(x=x, y=y, name=r.name, legendgroup=r.name, showlegend=col == 1,
                                     mode="lines", line=dict(color=colors[r.name], width=2),
                                     hovertemplate="%{x:.4g} s: %{y:.1%} of requests<extra>" + html.escape(r.name)
                                     + "</extra>"), row=1, col=col)
        kind = axis_type(xs)
        title_text = label + (", log scale" if kind == "log" else "")
        limit = _shared_limit(results, slo_key) if limits else None
        if limit is not None and _on_axis(limit, xs, kind):
            # A shape takes data coordinates on a log axis too; an annotation takes the exponent there.
            fig.add_vline(x=limit, line_dash="dash", line_color="#777", row=1, col=col)
            fig.add_annotation(x=math.log10(limit) if kind == "log" else limit, y=0.5, xanchor="left", xshift=3,
                               text=f"SLO {limit:g} s", showarrow=False, font=dict(size=10, color="#555"),
                               row=1, col=col)
        elif limit is not None:  # drawn, it would stretch the axis and squash every curve
            title_text += f" (SLO {limit:g} s, off the axis)"
        fig.update_xaxes(type=kind, title_text=title_text, row=1, col=col)
    for label in labels:
        fig.add_trace(band_legend(label), row=1, col=1)
    fig.update_yaxes(range=[0, 1.02])
    fig.update_yaxes(title_text="fraction of requests", row=1, col=1)
    _layout(fig, title, 430)
    return fig


def _layout(fig: go.Figure, title: str, height: int, subtitle: str | None = None, legend: bool = True) -> None:
    """Title, then one shared legend under it, then the panels: placed in pixels (container coordinates) so
    they never overlap the subplot titles, whatever the figure's height."""
    top = 44 if subtitle else 26
    fig.update_layout(
        title=dict(text=title, x=0.01, xanchor="left", yref="container", y=1 - 10 / height, yanchor="top",
                   **({"subtitle": dict(text=subtitle)} if subtitle else {})),
        legend=dict(orientation="h", yref="container", y=1 - (top + 14) / height, yanchor="top", x=0.01,
                    xanchor="left"),
        showlegend=legend, height=height, template=TEMPLATE,
        margin=dict(t=top + (80 if legend else 56), l=60, r=30, b=50))
    fig.update_annotations(font_size=13)  # the subplot titles


def _steps_time(st) -> np.ndarray:
    return ((st["start_s"] + st["end_s"]) / 2).to_numpy(dtype=float)


def _small_multiples(n: int, cols: int, titles: list[str], row_height: int) -> go.Figure:
    height = 110 + row_height * n
    return make_subplots(rows=n, cols=cols, subplot_titles=titles, horizontal_spacing=0.06,
                         vertical_spacing=min(0.3, 64 / (height - 130)) if n > 1 else 0.0)


def _timeseries_figure(results, colors: dict[str, str], ribbons: dict | None = None) -> go.Figure:
    """Small multiples: a row per variant, over its own makespan; throughput, the queue and the batch size, each
    over its band's ribbon where `ribbons` has one (variant -> `sim.band_curves.ribbon_of`)."""
    n = len(results)
    ribbons = ribbons or {}
    titles = [f"{colored(r.name, colors[r.name])} · {series}" if col == 0 else series
              for r in results for col, series in enumerate(SERIES)]
    fig = _small_multiples(n, 3, titles, 200)
    for i, r in enumerate(results, start=1):
        color, band = colors[r.name], ribbons.get(r.name)
        edges = time_bins(makespan(r))
        centers = f32((edges[:-1] + edges[1:]) / 2)
        for col, (series, y) in enumerate(time_series(r, edges).items(), start=1):
            if band is not None and series in band["series"]:
                spans = "{:.4g}-{:.4g} s".format(*band["makespan_s"])
                for trace in ribbon_traces(centers, *band["series"][series], color, label=band["label"],
                                           name=r.name, hover=f"%{{y:.4g}} at %{{x:.4g}} s (its runs' makespans: "
                                           f"{spans})"):
                    fig.add_trace(trace, row=i, col=col)
            fig.add_trace(go.Scatter(x=centers, y=f32(y), name=r.name, legendgroup=r.name,
                                     showlegend=col == 1, mode="lines", line=dict(color=color, width=1.5)),
                          row=i, col=col)
        first = "x" if i == 1 else f"x{3 * (i - 1) + 1}"
        for col in (1, 2, 3):
            fig.update_xaxes(range=[0, float(edges[-1])], row=i, col=col,
                             **({} if col == 1 else {"matches": first}))
        fig.update_yaxes(rangemode="tozero", row=i)
    fig.update_xaxes(title_text="simulated time (s)", row=n)
    # No legend: every row is titled with its variant's name, in its colour.
    _layout(fig, "Over time", 110 + 200 * n, legend=False, subtitle="each variant over its own makespan; per "
            "bin of 1/300 of it: output tokens/s, the peak queue, the mean batch; y-axes differ between rows"
            + _ribbon_note(ribbons))
    return fig


def _ribbon_note(ribbons: dict) -> str:
    """What a time series' shading is, for the subtitle ("" without a ribbon)."""
    if not ribbons:
        return ""
    labels = " / ".join(sorted({b["label"] for b in ribbons.values()}))
    return (f"<br>shaded: the {labels} of each bin, each of the band's runs binned over its own makespan "
            "(hover: how far apart their makespans are)")


def _kv_figure(results, colors: dict[str, str]) -> go.Figure:
    """A row per variant over its own makespan: the share of KV memory each part holds (greys)."""
    n = len(results)
    fig = _small_multiples(n, 1, [colored(r.name, colors[r.name]) for r in results], 190)
    for i, r in enumerate(results, start=1):
        st = r.steps
        edges = time_bins(makespan(r))
        centers = f32((edges[:-1] + edges[1:]) / 2)
        if len(st):
            cap = float(st["kv_capacity_slots"].iloc[0]) or 1.0
            t, dur = _steps_time(st), st["duration_s"].to_numpy(dtype=float)
            for column, label, color in _KV_PARTS:
                share = bucket_mean(t, st[column].to_numpy(dtype=float), dur, edges) / cap
                fig.add_trace(go.Scatter(x=centers, y=f32(share), name=label, legendgroup=label,
                                         showlegend=i == 1, stackgroup=f"kv{i}", mode="lines",
                                         line=dict(width=0.5, color=color), fillcolor=color), row=i, col=1)
        fig.update_xaxes(range=[0, float(edges[-1])], row=i, col=1)
        fig.update_yaxes(title_text="share of KV memory", range=[0, 1], row=i, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=n)
    _layout(fig, "KV-cache memory split over time", max(320, 110 + 190 * n),
            subtitle="each variant over its own makespan; greys: what holds the KV memory")
    return fig


def figures(results: list[Result]) -> list[tuple[str, go.Figure]]:
    """(section id, figure): with a band, the headline figures as bars with error bars first; the latency CDFs,
    the time series, the KV split, and the waits between the pools when a result is disaggregated; a banded
    result's CDFs and time series over their ribbons. One colour per variant on all of them (charts.color_map)."""
    colors = color_map([r.name for r in results])
    ribbons = _ribbons(results)
    figs = [("band", _band_bars_figure(results, colors))] if any(r.summary.get("band") for r in results) else []
    figs += [("latency", _cdf_figure(results, _LATENCIES, "Latency CDFs", colors, ribbons=ribbons)),
             ("timeseries", _timeseries_figure(results, colors, ribbons)), ("kv", _kv_figure(results, colors))]
    split = [r for r in results if "transfer_s" in r.requests.columns]
    if split:
        figs.append(("disaggregation", _disaggregation_figure(split, colors, ribbons)))
    return figs


def _ribbons(results) -> dict:
    """Variant -> the ribbon of its band's curves (`sim.band_curves.ribbon_of`), for the results run with a band."""
    return {r.name: band for r in results if (band := ribbon_of(r)) is not None}


def _disaggregation_figure(split: list[Result], colors: dict[str, str], ribbons: dict | None = None) -> go.Figure:
    """Disaggregated results: CDFs of the waits between the pools, over the finished requests that moved KV."""
    phases = (("queueing_s", "wait before prefill (s)", ""), ("decode_wait_s", "wait for decode blocks (s)", ""),
              ("transfer_s", "KV transfer (s)", ""))
    return _cdf_figure(split, phases, "Disaggregated prefill/decode: waits between the pools", colors, limits=False,
                       ribbons=ribbons)


# The headline figures drawn as bars with their band (the verdict's deciding metrics).
_BAND_BARS = (("goodput_rps", "goodput (req/s)"), ("throughput_rps", "throughput incl. drain (req/s)"),
              ("ttft_s_p99", "TTFT p99 (s)"), ("tpot_s_p99", "TPOT p99 (s)"), ("e2e_s_p99", "E2E p99 (s)"))


def _band_bars_figure(results, colors: dict[str, str]) -> go.Figure:
    """A panel per headline figure, a bar per variant in its colour, with its band as an error bar (results run
    with a band only have one)."""
    fig = make_subplots(rows=1, cols=len(_BAND_BARS), horizontal_spacing=0.05,
                        subplot_titles=[label for _, label in _BAND_BARS])
    names = [r.name for r in results]
    labels = []
    for col, (key, label) in enumerate(_BAND_BARS, start=1):
        points = [_number(r.summary.get(key)) for r in results]
        bands = [(r.summary.get("band") or {}).get(key) for r in results]
        bands = [b if isinstance(b, list) and len(b) == 2 else None for b in bands]
        text = [f"{format_metric(key, p)} [{format_metric(key, b[0])}, {format_metric(key, b[1])}]"
                if b is not None else format_metric(key, p) for p, b in zip(points, bands)]
        fig.add_trace(go.Bar(x=names, y=points, marker_color=[colors[n] for n in names], name=label,
                             showlegend=False, error_y=error_bars(points, bands), customdata=text,
                             hovertemplate="%{x}: %{customdata}<extra></extra>"), row=1, col=col)
    for r in results:
        band = r.summary.get("band")
        if band and (text := f"{band_label(band)} ({_runs(band)})") not in labels:
            labels.append(text)
    _layout(fig, "Headline figures and their band", 360 if len(names) <= 3 else 440, legend=False,
            subtitle=f"error bars: the {' / '.join(labels)}; a bar without one: a run without a band")
    return fig


def _runs(band: dict) -> str:
    return "two edge runs" if band.get("method") == "edges" else f"{band['replications']} replications"


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float, np.floating)) and not isinstance(value, bool) else None


# ------------------------------------------------------------------------------------------------ the page

STYLE = """body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#1d2433}
h1{margin:.2em 0 .3em} h2{margin:1.2em 0 .4em}
.verdict{background:#eef6ee;border-left:5px solid #2ca02c;padding:.6em 1.2em;margin:1em 0}
.verdict h2{margin:.2em 0} .verdict .headline{font-size:1.1em;font-weight:600}
.verdict .priced,.verdict .rule{color:#555;font-size:.9em} .verdict ul{margin:.3em 0;padding-left:1.4em}
.table-wrap{max-width:100%;overflow-x:auto}
table.summary{border-collapse:collapse;font-size:13px;margin:.4em 0 1em;font-variant-numeric:tabular-nums}
table.summary td,table.summary th{border:1px solid #d8dce3;padding:3px 7px;text-align:right}
table.summary th:first-child{position:sticky;left:0;z-index:1;background:#fff;text-align:left;max-width:17em}
table.summary thead th{background:#f3f5f9;vertical-align:bottom}
table.summary thead th:first-child{background:#f3f5f9}
table.summary tr.group th{background:#e9eef6;text-align:left;font-weight:600;position:static}
table.summary caption{text-align:left;font-weight:600;padding:.2em 0}
table.variants-as-rows thead th{max-width:7em;white-space:normal}
.swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.35em;vertical-align:-1px}
pre{background:#f6f6f6;padding:1em;overflow:auto}"""


def render_report(results: list[Result], title: str, scenario_yaml: str = "", bands=None, differences=None,
                  verdict_html: str | None = None) -> str:
    """The report page: the verdict, the grouped summary, the charts (plotly.js inlined once), the scenario.
    `bands` (variant -> summary key -> (low, high)) make the verdict band-aware; `differences` ((A, B) -> key ->
    band of B − A) let it say whether the winner's margin holds across the band. `verdict_html`: a command's own
    verdict in place of the comparison's (plan-pools ranks its splits by their own rule)."""
    # Fixed div ids (plotly draws random ones): the same run writes the same bytes.
    parts = [f'<section id="{name}">{figure_html(fig, f"plot-{name}")}</section>' for name, fig in figures(results)]
    from sim import __version__
    from sim.views.attention_whatif import attention_section_html  # '' unless a variant materializes the scores
    what = ("Each variant runs on the same generated workload." if len(results) > 1 else "")
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta name="generator" content="servesim">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>{html.escape(title)}</title>
<style>{STYLE}</style>{plotly_script()}</head>
<body><h1>{html.escape(title)}</h1>
{verdict_of(results, bands, differences).html() if verdict_html is None else verdict_html}
<section id="summary"><h2>Summary</h2><p>ServeSim {__version__}. {what}</p>{summary_table_html(results)}</section>{attention_section_html(results)}
{''.join(parts)}{engine_notes_html(results)}{cost_model_notes_html(results)}
<section id="scenario"><h2>Scenario</h2><pre>{html.escape(scenario_yaml)}</pre></section>
</body></html>"""
