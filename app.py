"""ServeSim what-if dashboard: `make app` (or `streamlit run app.py`).

This file only draws widgets. The form state, scenario files, choice lists, summary table and load-sweep
chart live in sim/views/dashboard.py; the latency, time-series and KV charts in sim/views/report.py; the verdict
the page opens with in sim/views/verdict.py; every number comes from sim.run.simulate, the function the CLI calls.
"""

from __future__ import annotations

import copy
import os
from dataclasses import replace
from functools import partial
from pathlib import Path

import streamlit as st
import yaml

from sim.config.engines import preset_notes
from sim.config.files import get_path, parse_yaml, set_path, validate_scenario
from sim.config.schema import VERDICT_METRICS
from sim.errors import ServeSimError
from sim.model.catalog import GPUS, catalog_models
from sim.results import Result
from sim.bands import simulate_with_band as simulate  # the run, and its band when run.band asks for one
from sim.views import dashboard as dash
from sim.views.report import cost_model_note_groups, figures
from sim.workload.lengths import kept_means

# Uploaded traces are kept by content hash, so a downloaded scenario can still point at them. A scenario on the
# page opens only files uploaded in this session (st.session_state.uploads), never another file of the server.
UPLOAD_FOLDER = Path(os.environ.get("SERVESIM_UPLOAD_DIR") or Path(__file__).resolve().parent / "out" / "dashboard"
                     / "uploads")
CUSTOM = "custom…"
set_form_key = partial(set_path, source="dashboard", none_removes=True)  # None clears a key: its default applies


@st.cache_resource
def result_cache() -> dash.ResultCache:
    """One simulation per distinct scenario, shared by every session: flipping back is instant."""
    return dash.ResultCache(max_entries=64)


def run_with_progress(scenario, label: str) -> Result:
    cache = result_cache()
    scenario_key = dash.scenario_key(scenario)
    cached = cache.get(scenario_key)
    if cached is not None:
        return cached
    total = dash.estimated_requests(scenario)
    bar = st.progress(0.0, text=f"simulating {label}…")

    def update(now_s: float, num_done: int) -> None:
        share = min(1.0, num_done / total) if total else 0.0
        bar.progress(share, text=f"simulating {label}: {num_done:,} requests done, t = {now_s:,.1f} s")

    try:
        result = simulate(scenario, progress=update)
    finally:
        bar.empty()
    cache.put(scenario_key, result)
    return result


def key(name: str) -> str:
    """Widget keys carry the form's generation: loading a file starts every widget from the file."""
    return f"{st.session_state.generation}.{name}"


def reload_form(form: dash.Form) -> None:
    st.session_state.form = form
    st.session_state.generation += 1
    st.rerun()


def uploads() -> dash.Uploads:
    """This session's uploaded files: the only files a scenario on the page may open."""
    if "uploads" not in st.session_state:
        st.session_state.uploads = dash.Uploads()
    return st.session_state.uploads


def handle_upload() -> None:
    # One scenario YAML (read with the CLI's 1 MiB limit) and the trace and config.json files it names.
    uploaded = st.sidebar.file_uploader(
        "Load a scenario YAML, with the trace or config.json files it names",
        type=[*dash.SCENARIO_EXTENSIONS, *dash.COMPANION_EXTENSIONS], accept_multiple_files=True,
        key="scenario_upload", max_upload_size=dash.MAX_UPLOAD_TRACE_BYTES >> 20,
        help=f"the YAML up to {dash.MAX_UPLOAD_YAML_BYTES:,} bytes, read as data only; it may name only the files "
             "uploaded with it (by file name), no file of the server")
    if not uploaded:
        st.session_state.pop("upload_error", None)
        return
    batch = tuple(f.file_id for f in uploaded)
    if st.session_state.get("applied_upload") == batch:
        return
    st.session_state.applied_upload = batch
    try:
        form, notes = dash.load_scenario_upload([(f.name, f.getvalue()) for f in uploaded], UPLOAD_FOLDER, uploads())
    except ServeSimError as err:
        st.session_state.upload_error = str(err)
        return
    st.session_state.pop("upload_error", None)
    st.session_state.form_notes = notes
    reload_form(form)


def catalog_or_custom(label: str, current, catalog: dict, name: str):
    """A catalog name, or an inline definition typed as YAML (pre-filled from a catalog entry)."""
    names = list(catalog)
    if isinstance(current, str) and current not in names:  # another spelling the catalog accepts
        names.append(current)
    choice = st.sidebar.selectbox(label, names + [CUSTOM], key=key(name),
                                  index=names.index(current) if isinstance(current, str) and current in names
                                  else len(names))
    if choice != CUSTOM:
        return choice
    start = current if isinstance(current, dict) else next(iter(catalog.values())).model_dump(mode="json",
                                                                                              exclude_none=True)
    text = st.sidebar.text_area(f"custom {label.lower()} (YAML)", yaml.safe_dump(start, sort_keys=False),
                                key=key(name + ".custom"), height=220)
    try:
        return parse_yaml(text, f"custom {label.lower()} (YAML)")
    except ServeSimError as err:
        st.sidebar.error(str(err))
        return text  # validation names the field and what is allowed


def number(label: str, value, name: str, **kwargs):
    return st.sidebar.number_input(label, value=value, key=key(name), **kwargs)


def arrival_inputs(arrival: dict) -> dict:
    kinds = list(dash.FORM_ARRIVAL_KINDS)
    if arrival.get("kind") not in kinds:
        kinds.append(arrival["kind"])
    kind = st.sidebar.selectbox("arrival process", kinds, index=kinds.index(arrival.get("kind")),
                                key=key("arrival.kind"))
    if kind not in dash.FORM_ARRIVAL_KINDS:
        st.sidebar.caption(f"`{kind}` arrivals from the loaded file (edit them in the YAML):")
        st.sidebar.code(yaml.safe_dump(arrival, sort_keys=False), language="yaml")
        return arrival
    if kind == "trace":
        return trace_inputs(arrival if arrival.get("kind") == "trace" else {})
    rate = number("request rate (req/s)", float(arrival.get("rate_per_s", 20.0)), "arrival.rate",
                  min_value=0.01, step=1.0)
    out = {"kind": kind, "rate_per_s": rate}
    if kind == "gamma":
        out["cv"] = number("inter-arrival CV", float(arrival.get("cv", 2.0)), "arrival.cv", min_value=0.01, step=0.5)
    return out


def trace_inputs(arrival: dict) -> dict:
    uploaded = st.sidebar.file_uploader("trace file (Azure CSV, Mooncake JSONL, generic CSV/JSONL)",
                                        type=list(dash.TRACE_EXTENSIONS), key="trace_upload",
                                        max_upload_size=dash.MAX_UPLOAD_TRACE_BYTES >> 20,
                                        help=f"up to {dash.MAX_UPLOAD_TRACE_BYTES:,} bytes")
    out = {k: v for k, v in arrival.items() if k not in ("time_scale", "target_rate_per_s")}
    out["kind"] = "trace"
    if uploaded is not None:
        try:
            stored = dash.save_uploaded_trace(uploaded.getvalue(), uploaded.name, UPLOAD_FOLDER)
            uploads().add(uploaded.name, stored)
            out["path"] = str(stored)
            out.pop("columns", None)
            out["format"] = "auto"
        except ServeSimError as err:
            st.sidebar.error(str(err))
    if "path" not in out:
        st.sidebar.info("Upload a trace file to replay it.")
        return out
    st.sidebar.caption(f"trace: `{Path(out['path']).name}`")
    target = arrival.get("target_rate_per_s")
    rescale = st.sidebar.checkbox("rescale to a mean rate", value=target is not None, key=key("arrival.rescale"))
    if rescale:
        out["target_rate_per_s"] = number("target rate (req/s)", float(target or 10.0), "arrival.target",
                                          min_value=0.01, step=1.0)
    else:
        out["time_scale"] = number("time scale (gap multiplier)", float(arrival.get("time_scale", 1.0)),
                                   "arrival.time_scale", min_value=0.01, step=0.1)
    return out


def lengths_inputs(lengths: dict | None, is_trace: bool) -> dict | None:
    lengths = lengths or {"kind": "trace"}
    kinds = [k for k in dash.FORM_LENGTH_KINDS if k != "trace" or is_trace]
    if lengths.get("kind") not in kinds:
        kinds.append(lengths.get("kind"))
    kind = st.sidebar.selectbox("prompt/output lengths", kinds, index=kinds.index(lengths.get("kind")),
                                key=key("lengths.kind"))
    same = lengths if lengths.get("kind") == kind else {}
    if kind == "preset":
        presets = list(dash.LENGTH_PRESETS)
        name = st.sidebar.selectbox("preset", presets, index=presets.index(same.get("name", "sharegpt")),
                                    key=key("lengths.preset"))
        return {"kind": "preset", "name": name}
    if kind == "fixed":
        return {"kind": "fixed",
                "input_tokens": number("prompt tokens", int(same.get("input_tokens", 512)), "lengths.in", min_value=1),
                "output_tokens": number("output tokens", int(same.get("output_tokens", 128)), "lengths.out",
                                        min_value=1)}
    if kind == "uniform":
        out = {"kind": "uniform"}
        for field, default in (("input_min", 32), ("input_max", 1024), ("output_min", 16), ("output_max", 512)):
            out[field] = number(field.replace("_", " "), int(same.get(field, default)), f"lengths.{field}",
                                min_value=1)
        return out
    if kind == "lognormal":
        out = {"kind": "lognormal"}
        for field, default in (("input_mean", 512.0), ("input_sigma", 1.0), ("output_mean", 256.0),
                               ("output_sigma", 0.8)):
            out[field] = number(field.replace("_", " "), float(same.get(field, default)), f"lengths.{field}",
                                min_value=0.0)
        return out
    if kind == "dataset":
        datasets = list(dash.LENGTH_DATASETS)
        name = st.sidebar.selectbox("dataset", datasets, index=datasets.index(same.get("name", datasets[0])),
                                    key=key("lengths.dataset"))
        own = kept_means(name)  # the table's own kept means: unscaled
        out = {"kind": "dataset", "name": name}
        for field, default in zip(("input_mean", "output_mean"), own):
            shown = round(default, 1)  # the table's own mean as shown: left unscaled
            value = number(f"{field.replace('_', ' ')} (another tokenizer's counts)",
                           float(same.get(field) or shown), f"lengths.{field}", min_value=1.0)
            if value != shown:
                out[field] = value
        return out
    if kind == "trace":
        return {"kind": "trace"}
    st.sidebar.caption(f"`{kind}` lengths from the loaded file (edit them in the YAML).")
    return lengths


def cost_model_input(base: dict, new: dict) -> None:
    """The GPU cost model: the best available (named in a note), measured kernels (a note when they fall back), or a
    roofline."""
    spec = base.get("cost_model")
    current = dash.cost_model_choice(spec)
    if current is None:
        st.sidebar.caption(f"`{spec['kind']}` cost model from the loaded file (edit it in the YAML):")
        st.sidebar.code(yaml.safe_dump(spec, sort_keys=False), language="yaml")
        return
    choice = st.sidebar.selectbox(
        "GPU cost model", dash.COST_MODEL_CHOICES, index=dash.COST_MODEL_CHOICES.index(current), key=key("cost_model"),
        help="best available: what `servesim run` picks for this GPU, model, TP, engine and dtype (a shipped "
             "whole-step profile, else measured kernels, else the learned roofline); measured: kernel times "
             "measured on real GPUs (NVIDIA AIConfigurator), where this GPU has them, else the roofline; roofline: "
             "datasheet peaks at fixed efficiencies; learned: efficiencies fitted to the measured GPUs")
    spec = dash.with_cost_model_choice(spec, choice)
    if choice == dash.MEASURED and dash.is_mixture_of_experts(new.get("model")) is not False:
        routing = st.sidebar.selectbox(
            "MoE routing (measured fused-MoE rows)", dash.MOE_ROUTINGS,
            index=dash.MOE_ROUTINGS.index(dash.moe_routing_choice(spec)), key=key("cost_model.moe_routing"),
            help="how tokens spread over the experts in the kernels that price them: balanced, or a power law "
                 "(the busiest GPU sets the pace); auto: AIConfigurator's own choice, 1.01 for DeepSeek-family "
                 "models, 1.2 for the others")
        spec = dash.with_moe_routing(spec, routing)
    if spec is None:
        new.pop("cost_model", None)
    else:
        new["cost_model"] = spec
    note = dash.cost_model_note(new)
    if note:
        st.sidebar.info(note)


def engine_inputs(new: dict) -> None:
    """The serving engine a user names (sim/config/engines/): its preset sets the scheduler, KV, CPU terms and
    front-end as that engine runs. A new engine or version starts the form again from it (`reload_form`), so the
    variant columns show the engine's defaults, not the ones before it."""
    st.sidebar.header("Engine")
    name, version = dash.engine_of(new)
    if name not in dash.ENGINE_CHOICES:  # validation names the problem
        st.sidebar.caption(f"engine `{name}` from the loaded file (edit it in the YAML)")
        return
    choice = st.sidebar.selectbox(
        "serving engine", dash.ENGINE_CHOICES, index=dash.ENGINE_CHOICES.index(name), format_func=dash.engine_label,
        key=key("engine.name"), help="an engine's preset runs the scenario as that engine does: its scheduling "
        "rule, its defaults for this GPU, its kernel tables, its CPU time per step and its API front-end")
    if choice != name:
        engine_changed(new, choice, None)
    if choice == dash.NO_ENGINE:
        return
    typed = st.sidebar.text_input("version", version, key=key("engine.version"),
                                  help=f"{dash.engine_label(choice)} {dash.PRESETS[choice].known_versions()}; "
                                  "fitted on published runs: " + ", ".join(dash.fitted_versions(choice))).strip()
    if typed and typed != version:
        engine_changed(new, choice, typed)
    given = str(new["engine"].get("command", ""))
    command = st.sidebar.text_input(
        "launch command (optional)", given, key=key("engine.command"),
        help="the engine's own launch command, e.g. `vllm serve MODEL -tp 2 --max-num-seqs 256`, read as the "
        "engine reads it (engine.command: docs/scenarios.md); options that change nothing simulated (--port ...) "
        "are accepted, others refused").strip()
    if command != given:
        command_changed(new, command)
    flags = {k: v for k, v in new["engine"].items() if k not in ("name", "version", "command")}
    if flags:
        st.sidebar.caption("engine flags from the loaded file (edit them in the YAML): "
                           + ", ".join(f"`{k}: {v}`" for k, v in flags.items()))
    endpoint = get_path(new, "workload.endpoint", dash.ENDPOINTS[0])
    if endpoint in dash.ENDPOINTS:
        endpoint = st.sidebar.radio(
            "clients call", dash.ENDPOINTS, index=dash.ENDPOINTS.index(endpoint), horizontal=True,
            key=key("workload.endpoint"), help="workload.endpoint: /v1/completions, or /v1/chat/completions, whose "
            "messages the API server renders through the chat template (vLLM 0.8.2-0.9.1 and 0.11.0 parse it "
            "again for every request)")
        set_form_key(new, "workload.endpoint", None if endpoint == dash.ENDPOINTS[0] else endpoint)
    with st.sidebar.expander("what the preset approximates"):
        try:
            notes = preset_notes(new)
        except ServeSimError as err:  # the run names it too
            notes = [str(err)]
        for note in notes:
            st.caption(note)


def engine_changed(new: dict, name: str, version: str | None) -> None:
    """Start the form again from this engine choice (its defaults in the variant columns), saying which of the
    form's own values its defaults replaced."""
    try:
        base, dropped = dash.with_engine(new, name, version)
    except ServeSimError as err:
        st.sidebar.error(str(err))
        return
    if dropped:
        st.session_state.form_notes = [f"{dash.engine_label(name)}'s own defaults replace the form's "
                                         + ", ".join(dropped)]
    reload_form(dash.Form(base, st.session_state.form.variants))


def command_changed(new: dict, command: str) -> None:
    """Start the form again from this launch command (its flags' values in place of the form's)."""
    try:
        base, dropped = dash.with_command(new, command)
    except ServeSimError as err:
        st.sidebar.error(str(err))
        return
    if dropped:
        st.session_state.form_notes = ["the launch command's values replace the form's " + ", ".join(dropped)]
    reload_form(dash.Form(base, st.session_state.form.variants))


def sidebar(base: dict) -> dict:
    """The base scenario: model, hardware, engine, workload, SLOs, run size."""
    new = copy.deepcopy(base)
    st.sidebar.header("Model and hardware")
    new["model"] = catalog_or_custom("Model", base.get("model", "llama-3.1-8b"), catalog_models(), "model")
    set_form_key(new, "hardware.gpu", catalog_or_custom("GPU", get_path(base, "hardware.gpu", "h100-sxm"),
                                                         GPUS, "gpu"))
    set_form_key(new, "hardware.tensor_parallel", number(
        "tensor parallelism (GPUs per replica)", int(get_path(base, "hardware.tensor_parallel", 1)), "tp",
        min_value=1, max_value=64))
    pp = number("pipeline stages (GPU groups per replica, consecutive layers each)",
                int(get_path(base, "hardware.pipeline_parallel", 1)), "pp", min_value=1, max_value=64)
    set_form_key(new, "hardware.pipeline_parallel", pp if pp > 1 else None)  # 1: the key stays out of the YAML
    ep = number("expert parallelism (GPUs of each TP group holding whole experts; mixtures of experts)",
                int(get_path(base, "hardware.expert_parallel", 1)), "ep", min_value=1, max_value=64)
    set_form_key(new, "hardware.expert_parallel", ep if ep > 1 else None)
    # GiB as the engines' --cpu-offload-gb counts them; 0: the key stays out of the YAML
    offloaded = float((get_path(base, "kv_cache.weights_offload_bytes") or 0) / (1 << 30))
    offload_gib = number("weights in host memory, GiB per GPU (read over PCIe at every step: vLLM's and SGLang's "
                         "--cpu-offload-gb)", offloaded, "offload", min_value=0.0, step=1.0)
    set_form_key(new, "kv_cache.weights_offload_bytes", int(offload_gib * (1 << 30)) if offload_gib > 0 else None)
    cost_model_input(base, new)
    replicas = number("replicas", int(get_path(base, "hardware.num_replicas", 1)), "replicas",
                      min_value=1, max_value=256)
    set_form_key(new, "hardware.num_replicas", replicas)
    if replicas > 1:
        routers = list(dash.ROUTERS)
        router = get_path(base, "hardware.router", "round_robin")
        set_form_key(new, "hardware.router", st.sidebar.selectbox("router", routers, index=routers.index(router),
                                                                   key=key("router")))

    engine_inputs(new)

    st.sidebar.header("Workload")
    arrival = arrival_inputs(get_path(base, "workload.arrival", {"kind": "poisson", "rate_per_s": 20.0}))
    set_form_key(new, "workload.arrival", arrival)
    lengths = lengths_inputs(get_path(base, "workload.lengths"), arrival.get("kind") == "trace")
    set_form_key(new, "workload.lengths", lengths)

    st.sidebar.header("SLOs")
    st.sidebar.caption("0 means no limit; goodput counts requests that meet every limit.")
    for name, label in (("ttft_s", "TTFT limit (s)"), ("tpot_s", "TPOT limit (s)"), ("e2e_s", "end-to-end limit (s)")):
        limit = number(label, float(get_path(base, f"slo.{name}") or 0.0), f"slo.{name}",
                       min_value=0.0, step=0.05 if name == "tpot_s" else 0.5, format="%.3f")
        set_form_key(new, f"slo.{name}", limit if limit > 0 else None)
    set_form_key(new, "slo.percentile", number("at percentile", float(get_path(base, "slo.percentile", 99.0)),
                                                "slo.percentile", min_value=1.0, max_value=100.0, step=1.0))
    ranked = st.sidebar.multiselect(
        "verdict ranks by first", list(VERDICT_METRICS), default=get_path(base, "slo.rank_by") or [],
        key=key("slo.rank_by"), help="slo.rank_by: the metrics the verdict decides on first, in the order picked, "
        "after meeting the SLOs; the rest follow in the default order (goodput, ttft, tpot, e2e, throughput)")
    set_form_key(new, "slo.rank_by", list(ranked) or None)

    st.sidebar.header("Run")
    requests = get_path(base, "run.num_requests")
    if requests is not None or get_path(base, "run.duration_s") is None:
        set_form_key(new, "run.num_requests", number("requests", int(requests or 800), "run.requests",
                                                      min_value=1, step=100))
    set_form_key(new, "run.seed", number("seed", int(get_path(base, "run.seed", 0)), "run.seed", min_value=0))
    level = get_path(base, "run.band")
    banded = st.sidebar.checkbox(f"{level or 90:g}% band (replications: about 20x the run time)",
                                 value=level is not None, key=key("run.band"), help="run.band: every figure with its band; ribbons on the "
                                 "curves, error bars on the bars (sim/bands.py)")
    set_form_key(new, "run.band", (level or 90) if banded else None)
    return new


def policy_inputs(column, index: int, policy: dash.Policy, drafts_allowed: list[str]) -> dash.Policy:
    """One variant column's policy widgets."""
    p = f"v{index}."
    batching = column.selectbox("batching", dash.BATCHING_MODES, index=dash.BATCHING_MODES.index(policy.batching),
                                key=key(p + "batching"))
    changes: dict = {"batching": batching}
    if batching == "static":
        changes["max_batch_size"] = column.number_input("requests per batch", 1, 4096, policy.max_batch_size,
                                                        key=key(p + "max_batch_size"))
    else:
        changes["max_num_seqs"] = column.number_input("max sequences per step", 1, 4096, policy.max_num_seqs,
                                                      key=key(p + "max_num_seqs"))
        budget = policy.max_num_batched_tokens or (2048 if batching == dash.CHUNKED_PREFILL else 0)
        tokens = column.number_input("token budget per step (0: default)", 0, 1 << 20, budget,
                                     key=key(p + "budget"), step=256)
        changes["max_num_batched_tokens"] = tokens or None
    layouts = list(dash.KV_LAYOUTS)
    layout = column.radio("KV layout", layouts, index=layouts.index(policy.layout), horizontal=True,
                          key=key(p + "layout"))
    changes["layout"] = layout
    if layout == "paged":
        sizes = sorted({1, 8, 16, 32, 64, 128, policy.block_size})
        changes["block_size"] = column.selectbox("block size (tokens)", sizes, index=sizes.index(policy.block_size),
                                                 key=key(p + "block"))
        changes["enable_prefix_caching"] = column.checkbox("prefix caching", policy.enable_prefix_caching,
                                                           key=key(p + "prefix"))
    else:
        rules = list(dash.RESERVE_RULES)
        changes["reserve"] = column.selectbox("reservation rule", rules, index=rules.index(policy.reserve),
                                              key=key(p + "reserve"))
    modes = list(dash.PREEMPTION_MODES)
    changes["preemption"] = column.radio("preemption", modes, index=modes.index(policy.preemption), horizontal=True,
                                         key=key(p + "preempt"))
    speculate = column.checkbox("speculative decoding", policy.speculation, key=key(p + "spec"))
    changes["speculation"] = speculate
    if speculate:
        drafts = {"cost ratio": None, **{name: name for name in drafts_allowed}}  # the target's vocabulary only
        current = "cost ratio"
        if isinstance(policy.draft_model, dict):  # an inline architecture from a loaded file
            current = f"{policy.draft_model.get('name', 'draft')} (inline)"
            drafts[current] = policy.draft_model
        elif policy.draft_model is not None:
            current = policy.draft_model
            drafts.setdefault(current, current)
        labels = list(drafts)
        draft = column.selectbox("draft", labels, index=labels.index(current), key=key(p + "draft"),
                                 help="a draft model (its weights and KV take memory), or a draft "
                                      "costing a fixed fraction of a target step")
        changes["draft_model"] = drafts[draft]
        if draft == "cost ratio":
            changes["draft_cost_ratio"] = column.number_input("draft cost ratio c", 0.001, 10.0,
                                                              float(policy.draft_cost_ratio or 0.1),
                                                              key=key(p + "ratio"), step=0.01)
        changes["num_speculative_tokens"] = column.number_input("γ (drafted tokens)", 1, 32,
                                                                policy.num_speculative_tokens, key=key(p + "gamma"))
        if policy.accept_length is None:
            changes["alpha"] = column.slider("α (acceptance)", 0.0, 0.99, float(policy.alpha), 0.01,
                                             key=key(p + "alpha"))
        else:  # the file gave the engine's logged accept length: kept as such
            changes["accept_length"] = column.number_input(
                "accept length (tokens a verification)", 1.0, 65.0, float(policy.accept_length), 0.1,
                key=key(p + "accept_length"), help="the mean tokens a verification yields, its own included, as "
                "SGLang and vLLM log it; α is solved for γ")
    split = column.checkbox("disaggregated prefill/decode", policy.disaggregated, key=key(p + "disagg"),
                            help="prefill and decode on separate pools; the KV cache crosses the link between them")
    changes["disaggregated"] = split
    if split:
        changes["prefill_replicas"] = column.number_input("prefill replicas", 1, 64, policy.prefill_replicas,
                                                          key=key(p + "prefill_replicas"))
        changes["decode_replicas"] = column.number_input("decode replicas", 1, 64, policy.decode_replicas,
                                                         key=key(p + "decode_replicas"))
        links = list(dash.INTERCONNECT_NAMES)
        if isinstance(policy.link, str) and policy.link in links:
            changes["link"] = column.selectbox("link between the pools", links, index=links.index(policy.link),
                                               key=key(p + "link"))
        overlaps = list(dash.OVERLAP_MODES)
        changes["overlap"] = column.radio("KV transfer", overlaps, index=overlaps.index(policy.overlap),
                                          horizontal=True, key=key(p + "overlap"))
    return replace(policy, **changes)


def variant_columns(form: dash.Form, base: dict) -> dict:
    """Policy columns side by side; returns the new variant overrides."""
    names = list(form.variants)
    columns = st.columns(len(names))
    new: dict = {}
    removed = None
    for i, (name, column) in enumerate(zip(names, columns)):
        override = form.variants[name]
        try:
            policy = dash.policy_of(validate_scenario(dash.merged(base, override)))
        except ServeSimError:
            policy = dash.Policy()
        with column:
            new_name = st.text_input("variant", name, key=key(f"v{i}.name")).strip() or f"variant {i + 1}"
        policy = policy_inputs(column, i, policy, dash.draft_choices(base.get("model", "llama-3.1-8b")))
        if new_name in new:
            st.error(f"variants: the name {new_name!r} is used twice; give each column its own name")
            st.stop()
        new[new_name] = dash.with_policy(base, override, policy)
        if len(names) > 1 and column.button("remove", key=key(f"v{i}.remove")):
            removed = new_name
    if removed is not None:
        reload_form(dash.Form(base, {k: v for k, v in new.items() if k != removed}))
    if len(names) < dash.MAX_VARIANTS and st.button("add a variant"):
        copied = copy.deepcopy(new[list(new)[-1]])
        reload_form(dash.Form(base, new | {dash.new_variant_name(list(new)): copied}))
    return new


def results_section(results: list[Result]) -> None:
    st.subheader("Summary")
    st.caption(f"Δ columns compare each variant with {results[0].name!r}. SLOs met: "
               + ", ".join(f"{r.name}: {'yes' if r.summary.get('slo_met') else 'no'}" for r in results
                           if r.summary.get("slo_met") is not None))
    st.caption(dash.deployment_caption(results))
    st.caption(dash.cost_model_caption(results))
    notes = cost_model_note_groups(results)  # what the cost model approximated, as the CLI and the report say
    if notes:
        with st.expander("what the cost model approximates"):
            for label, names, lines in notes:
                st.caption(f"{label}: {', '.join(names)}")
                for line in lines:
                    st.caption(line)
    measured_at = dash.measured_at_caption(results)
    if measured_at:
        st.caption(measured_at)
    st.table(dash.summary_table(results))
    attention_section(results)
    for _, fig in figures(results):
        st.plotly_chart(fig, key=f"chart.{fig.layout.title.text}")


def attention_section(results: list[Result]) -> None:
    """The attention-kernel what-if (sim/views/attention_whatif.py): the variants side by side when they differ in
    attention.kernel, and on request both kernels computed for the first variant."""
    from sim.views.attention_whatif import attention_rows, kernel_whatif
    rows = attention_rows(results)
    if rows is not None:
        st.subheader("Attention kernel")
        st.table(rows)
    with st.expander("What if attention materialized its scores? (both kernels, computed for "
                     f"{results[0].name!r})"):
        if st.button("compute", key="attention.whatif"):
            st.table(kernel_whatif(results[0].scenario))


def sweep_section(form: dash.Form, scenarios: dict) -> None:
    st.subheader("Load sweep")
    sweepable = {n: s for n, s in scenarios.items() if dash.sweepable(s)}
    if not sweepable:
        st.info("A load sweep sets the arrival rate; this workload's arrival process has none to set.")
        return
    first = next(iter(sweepable.values()))
    defaults = dash.default_sweep_rates(first)
    c1, c2, c3, c4 = st.columns(4)
    low = c1.number_input("from (req/s)", 0.01, value=float(defaults[0]), key=key("sweep.low"))
    high = c2.number_input("to (req/s)", 0.01, value=float(defaults[-1]), key=key("sweep.high"))
    points = c3.number_input("points", 2, 20, 6, key=key("sweep.points"))
    per_point = c4.number_input("requests per point", 50, 20_000, 300, step=50, key=key("sweep.requests"))
    chosen = st.multiselect("variants", list(sweepable), default=list(sweepable), key=key("sweep.variants"))
    rates = dash.sweep_rates(low, high, int(points))
    sweep_id = (form.to_yaml(), tuple(chosen), tuple(rates), per_point)
    if st.button("Run load sweep", type="primary"):
        try:
            st.session_state.sweep = (sweep_id, dash.run_sweep(
                {n: sweepable[n] for n in chosen}, rates, per_point,
                lambda sc: run_with_progress(sc, f"{sc.name} at {dash.current_rate(sc):g} req/s")))
        except ServeSimError as err:
            st.error(str(err))
    stored = st.session_state.get("sweep")
    if stored and stored[0] == sweep_id:
        st.plotly_chart(dash.sweep_figure(stored[1]), key="chart.sweep")
        st.dataframe(stored[1], hide_index=True)
    elif stored:
        st.caption("Settings changed since the last sweep: run it again to update.")


def main() -> None:
    st.set_page_config(page_title="ServeSim what-if dashboard", layout="wide")
    if "form" not in st.session_state:
        st.session_state.form = dash.Form()
        st.session_state.generation = 0
    st.title("ServeSim what-if dashboard")
    st.caption("Pick a model, GPU and workload in the sidebar; set each variant's serving policy below. "
               "Every variant runs on the same generated requests.")
    # The page opens with the verdict: a slot here, filled once the variants have run (sim/views/verdict.py).
    verdict_slot = st.container(border=True, key="verdict")
    handle_upload()
    if st.session_state.get("upload_error"):
        st.error(f"Could not load the scenario: {st.session_state.upload_error}")
    for note in st.session_state.pop("form_notes", []):
        st.warning(note)

    form: dash.Form = st.session_state.form
    try:
        # Nothing opens a file before this: every file the settings name must be one uploaded in this session.
        form = dash.confined_form(dash.Form(sidebar(form.base), form.variants), uploads())
    except ServeSimError as err:
        st.error(str(err))
        st.stop()
    base = form.base
    st.subheader("Variants")
    variants = variant_columns(form, base)
    form = dash.Form(base, variants)
    st.session_state.form = form

    try:
        scenario_set = form.scenario_set()
    except ServeSimError as err:
        st.error(str(err))
        st.stop()
    scenarios = scenario_set.variants
    estimate = sum(dash.estimated_requests(s) or 0 for s in scenarios.values())
    if estimate > dash.LONG_RUN_REQUESTS and not st.checkbox(
            f"Run {estimate:,} requests ({len(scenarios)} variants)? That may take a while.", key="confirm_long"):
        st.warning(f"{estimate:,} requests in all is above {dash.LONG_RUN_REQUESTS:,}: tick the box to run.")
        st.stop()
    try:
        results = [run_with_progress(sc, name) for name, sc in scenarios.items()]
    except ServeSimError as err:
        st.error(str(err))
        st.stop()
    verdict_slot.markdown(dash.verdict_markdown(results))
    results_section(results)
    sweep_section(form, scenarios)

    st.subheader("Scenario file")
    text = form.to_yaml()
    st.download_button("Download scenario YAML", text, file_name=f"{base.get('name', 'dashboard')}.yaml",
                       mime="application/x-yaml")
    st.caption("`servesim compare FILE` reproduces the numbers above (same seed, same requests).")
    with st.expander("scenario YAML"):
        st.code(text, language="yaml")


main()
