"""sim/dashboard.py without Streamlit: form <-> scenario files, policies, deltas, sweeps, uploads."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sim.config.deployment import resolve
from sim.config.files import build_scenario_set, load_scenario_set, validate_scenario
from sim.errors import ConfigError
from sim.model.catalog import MODELS, get_model
from sim.results import Result
from sim.run import simulate
from sim.views import dashboard as dash
from helpers import small_scenario

ROOT = Path(__file__).resolve().parents[2]

SMALL_BASE = small_scenario({'workload': {'arrival': {'kind': 'constant', 'rate_per_s': 5.0},
                                          'lengths': {'input_tokens': 128, 'output_tokens': 32}},
                             'slo': {'ttft_s': 1.0},
                             'run': {'num_requests': 60}})


def dumps(scenario) -> dict:
    return scenario.model_dump(mode="json")


def test_sim_dashboard_imports_without_streamlit_or_torch():
    code = ("import sys; import sim.views.dashboard; "
            "bad = [m for m in ('streamlit', 'torch') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_default_form_is_a_valid_two_variant_comparison_that_its_yaml_reproduces():
    form = dash.Form()
    built = form.scenario_set()
    assert list(built.variants) == list(dash.DEFAULT_VARIANTS)
    again = build_scenario_set(yaml.safe_load(form.to_yaml()))
    assert {n: dumps(s) for n, s in again.variants.items()} == {n: dumps(s) for n, s in built.variants.items()}


POLICIES = [
    dash.Policy(),
    dash.Policy(batching="static", max_batch_size=32, layout="contiguous", reserve="max_len"),
    dash.Policy(batching="chunked prefill", max_num_batched_tokens=1024, block_size=32),
    dash.Policy(layout="contiguous", reserve="oracle", preemption="swap"),
    dash.Policy(enable_prefix_caching=True, max_num_seqs=64, max_num_batched_tokens=4096),
    dash.Policy(speculation=True, draft_model=None, draft_cost_ratio=0.05, num_speculative_tokens=3, alpha=0.6),
    # A draft must share the target's vocabulary (llama-3.1-8b's 128,256): an inline one, as a loaded file gives.
    dash.Policy(speculation=True, draft_model=MODELS["llama-3.1-8b"].model_copy(update={"name": "draft-8b"})
                .model_dump(mode="json", exclude_none=True), draft_cost_ratio=None, alpha=0.8),
    dash.Policy(speculation=True, draft_cost_ratio=0.1, alpha=0.7, acceptance_concentration=5.0),
    dash.Policy(disaggregated=True, prefill_replicas=2, decode_replicas=1, link="infiniband-ndr", overlap="layerwise"),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.batching}-{p.layout}-{p.speculation}")
def test_a_policy_written_into_a_variant_reads_back_the_same(policy):
    override = dash.with_policy(SMALL_BASE, {}, policy)
    scenario = validate_scenario(dash.merged(SMALL_BASE, override))
    assert dash.policy_of(scenario) == policy


def test_the_default_policy_on_a_default_base_needs_no_override_keys():
    assert dash.with_policy(SMALL_BASE, {}, dash.Policy()) == {}


def test_with_policy_keeps_other_overrides_and_switches_speculation_off():
    base = {**SMALL_BASE, "speculation": {"draft_cost_ratio": 0.1, "num_speculative_tokens": 4}}
    override = {"workload": {"arrival": {"rate_per_s": 9.0}}, "speculation": {"num_speculative_tokens": 2}}
    new = dash.with_policy(base, override, dash.Policy(layout="contiguous", reserve="pow2"))
    scenario = validate_scenario(dash.merged(base, new))
    assert scenario.speculation is None
    assert scenario.workload.arrival.rate_per_s == 9.0
    assert (scenario.kv_cache.layout, scenario.kv_cache.reserve) == ("contiguous", "pow2")


def test_with_policy_sets_back_a_default_token_budget_the_base_overrode():
    base = {**SMALL_BASE, "scheduler": {"max_model_len": 2048, "max_num_batched_tokens": 4096}}
    new = dash.with_policy(base, {}, dash.Policy(max_num_batched_tokens=None))
    scenario = validate_scenario(dash.merged(base, new))
    assert scenario.scheduler.max_num_batched_tokens is None
    assert resolve(scenario).max_num_batched_tokens == 2048 + 256  # the engine default: max_model_len + max_num_seqs


def test_form_from_yaml_keeps_the_first_four_variants_and_names_the_rest():
    text = (ROOT / "scenarios" / "quickstart.yaml").read_text()
    form, notes = dash.form_from_yaml(text, "quickstart.yaml")
    file_set = load_scenario_set(ROOT / "scenarios" / "quickstart.yaml")
    names = list(file_set.variants)
    assert list(form.variants) == names[:4]
    assert len(notes) == 1 and names[4] in notes[0]
    built = form.scenario_set()
    for name in names[:4]:
        assert dumps(built.variants[name]) == dumps(file_set.variants[name])


def test_form_from_yaml_without_variants_makes_one_column():
    form, notes = dash.form_from_yaml(yaml.safe_dump(SMALL_BASE))
    assert list(form.variants) == ["small"] and notes == []
    assert form.scenario_set().variants["small"].run.num_requests == 60


@pytest.mark.parametrize("text, words", [
    ("!!python/object/apply:os.system ['echo pwned > /tmp/servesim-dashboard-pwned']", "could not determine"),
    ("- just\n- a list\n", "expected a mapping"),
    ("model: [unclosed\n", "line"),
    (yaml.safe_dump({**SMALL_BASE, "workload": {"arrival": {"kind": "poisson", "rate_per_s": -1},
                                                "lengths": {"kind": "preset", "name": "sharegpt"}}}),
     "workload.arrival.rate_per_s: -1 is not allowed"),
    (yaml.safe_dump({**SMALL_BASE, "variants": {"x": {"kv_cache": {"layuot": "paged"}}}}),
     "variants.x.kv_cache.layuot: unknown key"),
])
def test_bad_scenario_files_give_one_line_errors_and_run_nothing(text, words):
    with pytest.raises(ConfigError) as err:
        dash.form_from_yaml(text, "up.yaml")
    message = str(err.value)
    assert "\n" not in message and words in message
    assert not Path("/tmp/servesim-dashboard-pwned").exists()


def test_an_oversized_scenario_upload_is_refused_before_parsing():
    text = "description: " + "x" * dash.MAX_UPLOAD_YAML_BYTES
    with pytest.raises(ConfigError, match="larger than the limit of 1,048,576 bytes"):
        dash.parse_scenario_yaml(text, "big.yaml")


def fake_result(name: str, **summary) -> Result:
    return Result(name, None, None, None, summary)


def test_summary_table_puts_deltas_against_the_first_variant():
    a = fake_result("a", throughput_rps=10.0, ttft_s_p99=0.5, preemptions=0, kv_token_share=math.nan)
    b = fake_result("b", throughput_rps=12.0, ttft_s_p99=0.25, preemptions=3, kv_token_share=0.9)
    table = dash.summary_table([a, b])
    assert list(table.columns) == ["a", "b", "Δ b"]
    assert table.loc["throughput incl. drain (req/s)"].tolist() == ["10", "12", "+20.0%"]
    assert table.loc["TTFT p99 (s)"].tolist() == ["0.5", "0.25", "-50.0%"]
    assert table.loc["preemptions"].tolist() == ["0", "3", "+3"]  # no relative change from zero
    assert table.loc["KV token-state share"].tolist() == ["-", "0.9", "-"]
    assert "goodput (req/s)" not in table.index  # metrics no variant reports are left out


def test_the_cache_key_round_trips_to_the_same_scenario_and_the_same_numbers():
    scenario = validate_scenario(SMALL_BASE)
    again = dash.scenario_from_key(dash.scenario_key(scenario))
    assert dumps(again) == dumps(scenario)
    assert simulate(again).summary == simulate(scenario).summary
    changed = validate_scenario({**SMALL_BASE, "kv_cache": {"block_size": 32}})
    assert dash.scenario_key(changed) != dash.scenario_key(scenario)


def test_at_rate_sets_the_rate_of_each_sweepable_arrival_kind():
    scenario = validate_scenario(SMALL_BASE)
    moved = dash.at_rate(scenario, 7.5, num_requests=40)
    assert (moved.workload.arrival.rate_per_s, moved.run.num_requests) == (7.5, 40)
    diurnal = validate_scenario({**SMALL_BASE, "workload": {**SMALL_BASE["workload"], "arrival": {
        "kind": "diurnal", "mean_rate_per_s": 4, "amplitude": 0.5, "period_s": 60}}})
    assert dash.at_rate(diurnal, 3.0).workload.arrival.mean_rate_per_s == 3.0
    closed = validate_scenario({**SMALL_BASE, "workload": {**SMALL_BASE["workload"], "arrival": {
        "kind": "closed_loop", "num_users": 4, "think_time_s": 1}}})
    assert not dash.sweepable(closed)
    with pytest.raises(ConfigError, match="workload.arrival.kind"):
        dash.at_rate(closed, 3.0)


def test_at_rate_scales_a_schedule_and_rescales_a_trace_like_the_sweep_does(tmp_path):
    from sim.tools.sweep import set_rate
    steps = [{"duration_s": 10, "rate_per_s": 2.0}, {"duration_s": 30, "rate_per_s": 6.0}]
    schedule = validate_scenario({**SMALL_BASE, "workload": {**SMALL_BASE["workload"], "arrival": {
        "kind": "schedule", "steps": steps}}})
    assert dash.sweepable(schedule) and dash.current_rate(schedule) == pytest.approx(5.0)
    moved = dash.at_rate(schedule, 10.0)
    assert [s.rate_per_s for s in moved.workload.arrival.steps] == pytest.approx([4.0, 12.0])
    raw = {"workload": {"arrival": {"kind": "schedule", "steps": steps}}}
    set_rate(raw, 10.0)
    assert validate_scenario({**SMALL_BASE, "workload": {**SMALL_BASE["workload"], **raw["workload"]}}) == moved
    trace = tmp_path / "t.csv"
    trace.write_text(AZURE)
    at_own_pace = validate_scenario({**SMALL_BASE, "workload": {"arrival": {
        "kind": "trace", "path": str(trace), "time_scale": 2.0}}})
    assert dash.current_rate(at_own_pace) == pytest.approx(0.5)  # one request a second, gaps doubled
    assert dash.default_sweep_rates(at_own_pace, 2) == [0.125, 0.75]
    rescaled = dash.at_rate(at_own_pace, 3.0).workload.arrival
    assert (rescaled.target_rate_per_s, rescaled.time_scale, dash.current_rate(dash.at_rate(at_own_pace, 3.0))) == (
        3.0, 1.0, 3.0)


def test_a_light_load_sweep_carries_the_offered_rate():
    """Known answer: far below saturation every request finishes soon after it arrives, so throughput
    (finished / elapsed) is the offered rate, less the short drain after the last arrival."""
    scenario = validate_scenario(SMALL_BASE)
    rates = [2.0, 4.0, 8.0]
    sweep = dash.run_sweep({"a": scenario}, rates, 200, simulate)
    assert sweep["rate_per_s"].tolist() == rates
    for rate, throughput in zip(sweep["rate_per_s"], sweep["throughput_rps"]):
        assert throughput == pytest.approx(rate, rel=0.03)
    fig = dash.sweep_figure(sweep)
    assert len(fig.data) == 3 + 1  # three panels for the variant, and the offered-load line
    assert list(fig.data[0].x) == rates


def test_default_sweep_rates_span_a_quarter_to_one_and_a_half_times_the_rate():
    scenario = validate_scenario(SMALL_BASE)
    assert dash.default_sweep_rates(scenario, 6) == [1.25, 2.5, 3.75, 5.0, 6.25, 7.5]


def test_estimated_requests():
    assert dash.estimated_requests(validate_scenario(SMALL_BASE)) == 60
    by_time = {**SMALL_BASE, "run": {"seed": 0, "duration_s": 30}}
    assert dash.estimated_requests(validate_scenario(by_time)) == 150


AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{s:02d}.0000000,{100 + s},{20 + s}\n" for s in range(30))


def test_an_uploaded_trace_is_stored_by_content_and_replayed(tmp_path):
    path = dash.save_uploaded_trace(AZURE.encode(), "mine.csv", tmp_path)
    assert path == dash.save_uploaded_trace(AZURE.encode(), "again.csv", tmp_path)
    raw = {**SMALL_BASE, "workload": {"arrival": {"kind": "trace", "path": str(path)}, "lengths": {"kind": "trace"}},
           "run": {"seed": 0, "num_requests": 30}}
    result = simulate(validate_scenario(raw))
    assert result.summary["num_finished"] == 30
    assert sorted(result.requests["prompt_tokens"]) == list(range(100, 130))


def test_bad_trace_uploads_are_refused_with_one_line(tmp_path):
    with pytest.raises(ConfigError, match="extension 'txt'; allowed: csv, jsonl"):
        dash.save_uploaded_trace(b"a,b\n1,2\n", "trace.txt", tmp_path)
    broken = AZURE.replace("2023-11-16 18:15:07.0000000,107", "2023-11-16 18:15:07.0000000,lots")
    with pytest.raises(Exception) as err:
        dash.save_uploaded_trace(broken.encode(), "broken.csv", tmp_path)
    assert "line 9" in str(err.value) and "\n" not in str(err.value)


def test_path_helpers():
    from sim.config.files import get_path, set_path
    d: dict = {}
    set_path(d, "a.b.c", 1, none_removes=True)
    assert d == {"a": {"b": {"c": 1}}} and get_path(d, "a.b.c") == 1
    assert get_path(d, "a.x.c", "none") == "none"
    set_path(d, "a.b.c", None, none_removes=True)
    assert d == {"a": {"b": {}}}
    assert dash.new_variant_name(["variant 3", "x"]) == "variant 4"
    assert dash.new_variant_name(["a", "b", "variant 3"]) == "variant 4"


def test_a_relative_trace_path_in_an_upload_names_an_uploaded_file_not_one_of_the_server(tmp_path, monkeypatch):
    """An upload has no folder on the server: a relative path that happens to exist from the server's working
    folder is not opened (issue 28); the file uploaded with the scenario under that name is."""
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_text(AZURE)
    monkeypatch.chdir(tmp_path)
    raw = {**SMALL_BASE, "workload": {"arrival": {"kind": "trace", "path": "traces/t.csv"}}}
    with pytest.raises(ConfigError, match=r"^workload\.arrival\.path: 'traces/t\.csv' is not a file uploaded"):
        dash.form_from_yaml(yaml.safe_dump(raw))
    form, _ = dash.load_scenario_upload([("s.yaml", yaml.safe_dump(raw).encode()), ("t.csv", AZURE.encode())],
                                        tmp_path / "uploads", dash.Uploads())
    stored = Path(form.base["workload"]["arrival"]["path"])
    assert stored.parent == (tmp_path / "uploads").resolve() and stored.read_text() == AZURE


def test_choice_lists_come_from_the_schema():
    from sim.config.schema import KVCacheSpec, literal_choices
    assert dash.BATCHING_MODES == ("continuous", "chunked prefill", "static")
    assert (dash.KV_LAYOUTS, dash.RESERVE_RULES) == (("paged", "contiguous"), ("max_len", "pow2", "oracle"))
    assert dash.PREEMPTION_MODES == literal_choices(KVCacheSpec, "preemption") and "swap" in dash.PREEMPTION_MODES
    assert dash.ROUTERS == ("round_robin", "least_outstanding", "least_loaded", "fewest_waiting",
                           "least_outstanding_kv", "random")
    assert dash.FORM_ARRIVAL_KINDS == ("poisson", "gamma", "constant", "trace")
    assert dash.FORM_LENGTH_KINDS == ("fixed", "uniform", "lognormal", "dataset", "preset", "trace")
    assert dash.LENGTH_PRESETS == ("sharegpt", "alpaca", "sharegpt_bench")
    with pytest.raises(TypeError, match="block_size is not a Literal field"):
        literal_choices(KVCacheSpec, "block_size")


def test_literal_choices_see_through_optional_and_union():
    from typing import Literal, Optional

    from pydantic import BaseModel

    from sim.config.schema import literal_choices

    class Probe(BaseModel):
        mode: Optional[Literal["a", "b"]] = None
        mixed: Literal["x"] | Literal["y", "z"] | int = 0

    assert literal_choices(Probe, "mode") == ("a", "b") and literal_choices(Probe, "mixed") == ("x", "y", "z")


def test_the_draft_menu_offers_only_models_with_the_targets_vocabulary():
    from sim.model.catalog import catalog_models
    models = catalog_models()
    choices = dash.draft_choices("llama-2-13b")
    assert "llama-2-7b" in choices and "llama-3.1-8b" not in choices and "llama-2-13b" not in choices
    assert all(models[name].vocab_size == models["llama-2-13b"].vocab_size for name in choices)
    assert dash.draft_choices({"vocab_size": models["llama-3.1-8b"].vocab_size}) == [
        name for name, spec in models.items() if spec.vocab_size == models["llama-3.1-8b"].vocab_size]
    # the shipped configs' models too: Qwen3's small models draft for its large ones (one tokenizer)
    assert {"qwen3-0.6b", "qwen3-1.7b", "qwen3-8b"} <= set(dash.draft_choices("qwen3-32b"))


# --- the engine a form names (the sidebar's engine choice) ---------------------------------------------------------

def test_choosing_an_engine_drops_the_forms_policy_defaults_so_the_engines_own_apply():
    base, dropped = dash.with_engine(dash.DEFAULT_BASE, "vllm")
    assert base["engine"] == {"name": "vllm", "version": dash.default_engine_version("vllm")}
    assert "scheduler.max_num_seqs 256" in dropped and "max_num_seqs" not in base["scheduler"]
    assert base["scheduler"]["max_model_len"] == dash.DEFAULT_BASE["scheduler"]["max_model_len"]  # no preset key
    assert dash.DEFAULT_BASE["scheduler"]["max_num_seqs"] == 256  # the form's default itself is untouched
    chosen = validate_scenario(base)
    alone = validate_scenario({k: v for k, v in base.items() if k not in ("scheduler", "kv_cache")})
    # what a run naming the engine alone derives for this GPU and model, not the form's 256 sequences
    assert chosen.scheduler.max_num_seqs == alone.scheduler.max_num_seqs != 256
    assert chosen.kv_cache.model_dump() == alone.kv_cache.model_dump()


def test_the_same_engine_keeps_its_flags_another_starts_without_and_none_removes_the_section():
    base = {**dash.DEFAULT_BASE, "engine": {"name": "vllm", "version": "0.6.3", "num_scheduler_steps": 8}}
    again, _ = dash.with_engine(base, "vllm", "0.6.6")
    assert again["engine"] == {"name": "vllm", "version": "0.6.6", "num_scheduler_steps": 8}
    other, _ = dash.with_engine(base, "sglang")
    assert other["engine"] == {"name": "sglang", "version": dash.default_engine_version("sglang")}
    assert "engine" not in dash.with_engine(base, dash.NO_ENGINE)[0]
    assert dash.engine_of(base) == ("vllm", "0.6.3") and dash.engine_of(dash.DEFAULT_BASE) == (dash.NO_ENGINE, None)
    with pytest.raises(ConfigError, match="engine.name: 'vllmm' is not an engine preset; allowed: vllm, sglang"):
        dash.with_engine(base, "vllmm")


def test_a_launch_command_replaces_the_forms_values_its_flags_set_and_an_empty_one_removes_it():
    from sim.config.engines import preset_notes
    engine, _ = dash.with_engine(dash.DEFAULT_BASE, "vllm", "0.11.0")
    engine["scheduler"]["max_num_seqs"] = 256  # a value the form set again after the engine choice
    base, dropped = dash.with_command(engine, "vllm serve m --max-num-seqs 64 --port 8000")
    assert base["engine"]["command"] == "vllm serve m --max-num-seqs 64 --port 8000"
    assert dropped == ["scheduler.max_num_seqs 256"] and validate_scenario(base).scheduler.max_num_seqs == 64
    assert any("--port 8000: accepted, no effect" in note for note in preset_notes(base))
    assert "command" not in dash.with_command(base, "")[0]["engine"]


def test_a_launch_command_of_another_engine_chooses_that_engine():
    engine, _ = dash.with_engine(dash.DEFAULT_BASE, "vllm", "0.6.3")
    engine["engine"]["num_scheduler_steps"] = 8  # a vLLM flag: SGLang starts without it
    base, _ = dash.with_command(engine, "python -m sglang.launch_server --model-path m --max-running-requests 48")
    assert base["engine"] == {"name": "sglang", "version": dash.default_engine_version("sglang"),
                              "command": "python -m sglang.launch_server --model-path m --max-running-requests 48"}
    assert validate_scenario(base).scheduler.max_num_seqs == 48
    # a loaded file naming its engine by its command alone
    assert dash.engine_of({"engine": {"version": "1.2.0rc1", "command": "trtllm-serve m"}}) == ("trtllm", "1.2.0rc1")


def test_a_launch_command_serving_a_catalog_model_chooses_that_model():
    engine, _ = dash.with_engine(dash.DEFAULT_BASE, "vllm", "0.11.0")
    assert engine["model"] == "llama-3.1-8b"
    base, dropped = dash.with_command(engine, "vllm serve Qwen/Qwen3-8B --max-num-seqs 64")
    assert base["model"] == "qwen3-8b" and "model 'llama-3.1-8b'" in dropped
    assert validate_scenario(base).model == "qwen3-8b"
    for served in ("meta-llama/Llama-3.1-8B-Instruct", "/models/mine"):  # its own model, or none the catalog has
        kept, dropped = dash.with_command(engine, f"vllm serve {served}")
        assert kept["model"] == "llama-3.1-8b" and not any(d.startswith("model ") for d in dropped)
    inline = {**engine, "model": {"name": "mine", **get_model("llama-3.1-8b").model_dump(exclude={"name"})}}
    assert dash.with_command(inline, "vllm serve Qwen/Qwen3-8B")[0]["model"] == inline["model"]


@pytest.mark.parametrize("name", [n for n in dash.ENGINE_CHOICES if n != dash.NO_ENGINE])
def test_an_engines_starting_version_is_its_newest_with_fitted_terms(name):
    from sim.config.engines import fitted_versions
    version = dash.default_engine_version(name)
    assert version == fitted_versions(name)[-1]
    assert validate_scenario(dash.with_engine(dash.DEFAULT_BASE, name)[0]).engine.version == version  # known to it


def test_the_engine_catalog_lists_every_preset_its_versions_and_flags():
    """Known answers, not the table's own inputs recomputed: the four presets, flags as each engine spells them
    (issue 30's examples), the oldest version each knows, the versions fitted on published runs (RESULTS.md names
    their fit runs), and that a flag the catalog does not list is refused by validation, naming the listed ones."""
    from sim.views.tables import engines_table
    table = engines_table().set_index("engine")
    assert list(table.index) == ["vllm", "sglang", "trtllm", "lmdeploy"]
    flags = {name: table.loc[name, "flags"].split(", ") for name in table.index}
    assert "num_scheduler_steps" in flags["vllm"] and "max_running_requests" in flags["sglang"]
    assert "max_batch_size" in flags["trtllm"] and "cache_max_entry_count" in flags["lmdeploy"]
    assert [table.loc[n, "versions"].split(" to ")[0] for n in table.index] == ["0.6.0", "0.3.0", "0.14.0",
                                                                                 "0.1.0a0, 0.1.0a1, 0.12.0"]
    assert table.loc["lmdeploy", "versions"] == "0.1.0a0, 0.1.0a1, 0.12.0 to 0.16.x"  # 0.1.0a2-0.11.x not modelled
    for name, version in (("vllm", "0.11.0"), ("sglang", "0.5.3.post3"), ("trtllm", "1.2.0rc1"),
                          ("lmdeploy", "0.1.0a1")):
        assert version in table.loc[name, "fitted_on_published_runs"].split(", ")
    assert dash.default_engine_version("vllm") in table.loc["vllm", "fitted_on_published_runs"].split(", ")
    with pytest.raises(ConfigError) as err:
        validate_scenario(small_scenario(engine={"name": "sglang", "version": "0.5.3.post3", "max_num_seqs": 8}))
    assert "max_num_seqs" in str(err.value) and all(flag in str(err.value) for flag in flags["sglang"])
