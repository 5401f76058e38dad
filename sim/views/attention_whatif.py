"""The attention-kernel what-if, side by side (issue 33): what FlashAttention and materialized scores give a
scenario's replica.

- `kernel_whatif(scenario)`: computed from both kernels, without simulating: the KV capacity and the score memory
  reserved for the largest step, the largest batch of mean-length requests the KV holds, the longest prompt that
  fits (`sim.config.deployment.longest_prompt_tokens`), and the TTFT of the workload's median and longest prompt
  on an idle replica (the scenario's cost model pricing its prefill chunk by chunk). A kernel the scenario cannot
  run (its scores never fit; a cost model measured with the other kernel) gets its one-line refusal instead.
- `attention_rows(results)`: the simulated variants of a comparison, when they differ in attention.kernel (or use
  materialized scores): TTFT p50 / p99, the largest batch a step ran and the longest prompt that fits, per variant.

The dashboard (app.py) and the compare report (sim/views/report.py) show both; the CLI prints the second.
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd

from sim.config.deployment import longest_prompt_tokens, resolve
from sim.config.schema import AttentionSpec, Scenario
from sim.core.step_plan import StepPlan
from sim.errors import ConfigError
from sim.model.attention_io import ATTENTION_KERNELS

WHATIF_COLUMNS = ("attention.kernel", "KV capacity (tokens)", "score memory per GPU (GiB)", "max batch",
                  "longest prompt", "longest unchunked prompt", "idle TTFT, median prompt (ms)", "idle TTFT, longest prompt (ms)", "note")
ROWS_COLUMNS = ("variant", "attention.kernel", "TTFT p50 (ms)", "TTFT p99 (ms)", "largest batch run",
                "longest prompt", "KV capacity (tokens)")


def with_kernel(scenario: Scenario, kernel: str) -> Scenario:
    """The scenario with this attention kernel. A cost model ServeSim chose by default is chosen again at the
    roofline's tier, the one model that prices both kernels, so the two sides of the what-if are priced alike."""
    if scenario.cost_model_choice:
        raw = scenario.model_dump(mode="json", exclude_none=True)
        raw.pop("cost_model", None)
        raw["attention"], raw["cost_model_choice"] = {"kernel": kernel}, "roofline"
        return Scenario.model_validate(raw)
    return scenario.model_copy(update={"attention": AttentionSpec(kernel=kernel)})


def shows_attention(scenarios: list[Scenario]) -> bool:
    """The side-by-side belongs on the page: the scenarios differ in attention.kernel or use materialized scores."""
    kernels = {s.attention.kernel for s in scenarios}
    return len(kernels) > 1 or kernels != {"flash"}


def _longest(scenario: Scenario, deployment) -> int:
    """The longest prompt that fits this deployment as it schedules: unchunked, or in chunks of its budget."""
    s = scenario.scheduler
    chunk = deployment.max_num_batched_tokens if s.batching == "continuous" and s.chunked_prefill else None
    return longest_prompt_tokens(scenario, deployment.model, deployment.gpu, chunk_tokens=chunk)


def idle_ttft_s(cost_model, prompt_tokens: int, budget: int, chunked: bool) -> float:
    """Seconds from admission to the first token of one prompt alone on the replica: its prefill, in chunks of the
    token budget when prefill is chunked (each chunk attends the ones before it), the last chunk sampling."""
    done, total = 0, 0.0
    while done < prompt_tokens:
        chunk = min(budget, prompt_tokens - done) if chunked else prompt_tokens
        last = done + chunk >= prompt_tokens
        total += cost_model.step_time(StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[chunk],
                                               prefill_context_tokens=[done], num_sampled_seqs=1 if last else 0))
        done += chunk
    return total


def kernel_whatif(scenario: Scenario) -> pd.DataFrame:
    """One row per attention kernel for `scenario`'s replica (computed; see the module docstring)."""
    from sim.run import make_cost_model, make_workload
    if scenario.hardware.disaggregation is not None or scenario.hardware.pipeline_parallel > 1:
        return pd.DataFrame([{WHATIF_COLUMNS[0]: k, "note": "not computed for disaggregated or pipelined "
                              "replicas; compare variants instead"} for k in ATTENTION_KERNELS],
                            columns=WHATIF_COLUMNS)
    rows = []
    workload = None
    for kernel in ATTENTION_KERNELS:
        sc = with_kernel(scenario, kernel)
        row = {WHATIF_COLUMNS[0]: kernel}
        try:
            d = resolve(sc)
        except ConfigError as err:
            rows.append(row | {"note": str(err)})
            continue
        if workload is None:
            workload = make_workload(sc, d)
        s = sc.scheduler
        seqs_cap = s.max_num_seqs if s.batching == "continuous" else s.max_batch_size
        mean_tokens = float(np.mean(workload.input_tokens + workload.output_tokens))
        prompts = np.sort(workload.input_tokens)
        median, longest_prompt = int(prompts[len(prompts) // 2]), int(prompts[-1])
        row |= {"KV capacity (tokens)": d.kv_capacity_tokens,
                "score memory per GPU (GiB)": round(d.score_bytes_per_gpu / 2**30, 2),
                "max batch": int(min(seqs_cap, d.kv_capacity_tokens // max(1.0, mean_tokens))),
                "longest prompt": _longest(sc, d),
                "longest unchunked prompt": longest_prompt_tokens(sc, d.model, d.gpu)}
        try:
            cost = make_cost_model(sc, d)
            chunked = s.batching == "continuous" and s.chunked_prefill
            row["idle TTFT, median prompt (ms)"] = round(
                idle_ttft_s(cost, median, d.max_num_batched_tokens, chunked) * 1e3, 3)
            row["idle TTFT, longest prompt (ms)"] = round(
                idle_ttft_s(cost, longest_prompt, d.max_num_batched_tokens, chunked) * 1e3, 3)
            row["note"] = f"median prompt {median:,} tokens, longest {longest_prompt:,}"
        except ConfigError as err:
            row["note"] = str(err)
        rows.append(row)
    frame = pd.DataFrame(rows, columns=WHATIF_COLUMNS).astype(object)  # counts stay integers beside a refusal
    return frame.where(frame.notna(), None)


def attention_rows(results) -> pd.DataFrame | None:
    """The simulated variants side by side (None when they all run FlashAttention: nothing to compare)."""
    if not results or not shows_attention([r.scenario for r in results]):
        return None
    rows = []
    for r in results:
        sc = r.scenario
        row = {"variant": r.name, "attention.kernel": sc.attention.kernel,
               "TTFT p50 (ms)": _ms(r.summary.get("ttft_s_p50")), "TTFT p99 (ms)": _ms(r.summary.get("ttft_s_p99")),
               "largest batch run": int(r.steps["num_seqs"].max()) if len(r.steps) else 0,
               "KV capacity (tokens)": r.summary.get("kv_capacity_tokens")}
        try:
            row["longest prompt"] = _longest(sc, resolve(sc)) if sc.hardware.disaggregation is None else None
        except ConfigError:
            row["longest prompt"] = None
        rows.append(row)
    return pd.DataFrame(rows, columns=ROWS_COLUMNS)


def _ms(seconds) -> float | None:
    return None if seconds is None or seconds != seconds else round(float(seconds) * 1e3, 2)


def attention_section_html(results) -> str:
    """The compare report's section, or '' when every variant runs FlashAttention."""
    frame = attention_rows(results)
    if frame is None:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    return ('<section id="attention"><h2>Attention kernel</h2><p>FlashAttention never holds the score matrix; '
            "materialized scores are written and read back at every layer and reserved out of the KV memory for the "
            "largest step (docs/scenarios.md, <code>attention</code>). The longest prompt is the longest that fits "
            "one replica on its own.</p>"
            f'<div class="table-wrap"><table class="summary"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div></section>")


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    return str(value)
