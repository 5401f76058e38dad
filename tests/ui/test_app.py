"""The Streamlit dashboard (app.py) driven by Streamlit's AppTest: no browser, the real script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("streamlit", reason="the dashboard needs the ui extra (streamlit)")
from streamlit.testing.v1 import AppTest  # noqa: E402

from sim.config.files import build_scenario_set  # noqa: E402
from sim.results import Result  # noqa: E402
from sim.views import dashboard as dash  # noqa: E402
from sim.views.cli import main as servesim  # noqa: E402
from helpers import APP_RUN_TIMEOUT_S, small_scenario

APP = str(Path(__file__).resolve().parents[2] / "app.py")

SMALL = small_scenario({'name': 'uploaded',
                        'workload': {'arrival': {'rate_per_s': 12}, 'lengths': {'input_tokens': 256, 'output_tokens': 64}},
                        'slo': {'ttft_s': 1.0},
                        'run': {'seed': 3, 'num_requests': 120},
                        'variants': {'paged': {},
                                     'static': {'scheduler': {'batching': 'static', 'max_batch_size': 16}},
                                     'chunked': {'scheduler': {'chunked_prefill': True, 'max_num_batched_tokens': 512}}}})


def started() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=APP_RUN_TIMEOUT_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> list:
    return [e for e in at.get("plotly_chart")]


def chart_titles(at: AppTest) -> list[str]:
    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in charts(at)]


def upload(at: AppTest, name: str, content: bytes) -> AppTest:
    at.file_uploader(key="scenario_upload").set_value((name, content, "application/x-yaml"))
    at.run()
    return at


def test_default_page_shows_the_summary_table_and_charts():
    at = started()
    assert not at.error
    table = at.table[0].value
    names = list(dash.DEFAULT_VARIANTS)
    assert list(table.columns) == [names[0], names[1], f"Δ {names[1]}"]
    for metric in ("throughput incl. drain (req/s)", "goodput (req/s)", "TTFT p99 (s)", "TPOT p50 (s)", "E2E p99 (s)",
                   "mean batch size", "KV token-state share", "preemptions"):
        assert metric in table.index
    # Paged KV holds almost only token states; contiguous max-length reservations far fewer.
    paged, contiguous = (float(table.loc["KV token-state share", n]) for n in names)
    assert paged > 0.9 and contiguous < 0.5
    assert chart_titles(at) == ["Latency CDFs", "Over time", "KV-cache memory split over time"]
    # The verdict (sim/views/verdict.py) names paged the winner (test_browser.py: it comes first on the page).
    verdicts = [m.value for m in at.markdown if m.value.startswith("**Verdict:**")]
    assert len(verdicts) == 1 and f"Winner: {names[0]}" in verdicts[0], verdicts
    for chart in charts(at):
        assert json.loads(chart.proto.spec)["data"], "a chart without traces"


def test_changing_a_policy_reruns_and_changes_the_table():
    at = started()
    before = at.table[0].value
    second = list(dash.DEFAULT_VARIANTS)[1]
    at.selectbox(key="0.v1.batching").set_value("static")
    at.run()
    assert not at.exception and not at.error
    after = at.table[0].value
    assert list(after.columns) == list(before.columns)
    assert after[second].tolist() != before[second].tolist()
    assert after.loc["throughput incl. drain (req/s)", second] != before.loc["throughput incl. drain (req/s)", second]
    # the first variant did not change, so its numbers come back identical (from the cache)
    assert after.iloc[:, 0].tolist() == before.iloc[:, 0].tolist()
    assert "batching: static" in at.code[0].value
    # flipping back gives the first numbers again
    at.selectbox(key="0.v1.batching").set_value("continuous")
    at.run()
    assert at.table[0].value.equals(before)


def test_the_verdicts_order_is_picked_in_the_sidebar():
    """slo.rank_by from the sidebar: the verdict's rule names the order, and the scenario shown for download holds
    it."""
    at = started()
    at.multiselect(key="0.slo.rank_by").set_value(["e2e", "tpot"])
    at.run()
    assert not at.exception and not at.error
    verdicts = [m.value for m in at.markdown if m.value.startswith("**Verdict:**")]
    assert len(verdicts) == 1 and "then the lowest p99 E2E and TPOT, then the highest goodput" in verdicts[0], verdicts
    assert "(slo.rank\\_by)" in verdicts[0]
    assert "rank_by:\n  - e2e\n  - tpot" in at.code[0].value
    at.multiselect(key="0.slo.rank_by").set_value([])
    at.run()
    assert "rank_by" not in at.code[0].value


@pytest.mark.parametrize("content, words", [
    (b"workload: {arrival: {kind: poisson, rate_per_s: -3}, lengths: {kind: preset, name: sharegpt}}\n",
     "workload.arrival.rate_per_s: -3 is not allowed"),
    (b"!!python/object/apply:os.system ['echo pwned']\n", "could not determine a constructor"),
    (b"name: x\nmodle: llama-3.1-8b\n", "modle: unknown key"),
    (b"description: " + b"x" * (dash.MAX_UPLOAD_YAML_BYTES + 1), "larger than the limit"),
])
def test_a_bad_upload_shows_the_error_in_the_page_and_keeps_the_form(content, words):
    at = started()
    before = at.table[0].value
    upload(at, "bad.yaml", content)
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and words in errors[0], errors
    assert at.table[0].value.equals(before)  # the previous settings still run


def test_an_uploaded_scenario_fills_the_form_and_the_download_reproduces_it_through_the_cli(tmp_path):
    at = upload(started(), "mine.yaml", yaml.safe_dump(SMALL, sort_keys=False).encode())
    assert not at.exception and not at.error
    table = at.table[0].value
    assert [c for c in table.columns if not c.startswith("Δ")] == ["paged", "static", "chunked"]
    assert at.number_input(key="1.run.requests").value == 120
    assert at.selectbox(key="1.v1.batching").value == "static"

    # The page's YAML (shown beside the download button) is a scenario file `servesim compare` runs.
    downloaded = at.code[0].value
    assert yaml.safe_load(downloaded)["variants"].keys() == SMALL["variants"].keys()
    path = tmp_path / "downloaded.yaml"
    path.write_text(downloaded)
    servesim(["compare", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    summaries = json.loads((tmp_path / "out" / "summary.json").read_text())
    cli_table = dash.summary_table([Result(n, None, None, None, s) for n, s in summaries.items()])
    assert cli_table.equals(table)
    assert summaries["static"]["num_finished"] == 120


def test_the_download_after_editing_reproduces_the_edited_numbers(tmp_path):
    at = started()
    at.number_input(key="0.run.requests").set_value(300)
    at.radio(key="0.v0.layout").set_value("contiguous")
    at.run()
    at.selectbox(key="0.v0.reserve").set_value("oracle")
    at.checkbox(key="0.v1.spec").check()
    at.run()
    assert not at.exception and not at.error
    path = tmp_path / "edited.yaml"
    path.write_text(at.code[0].value)
    servesim(["compare", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    summaries = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert all(s["num_requests"] == 300 for s in summaries.values())
    cli_table = dash.summary_table([Result(n, None, None, None, s) for n, s in summaries.items()])
    assert cli_table.equals(at.table[0].value)
    assert "drafted tokens accepted" in at.table[0].value.index


def test_add_and_remove_variant_columns():
    at = started()
    at.button[[b.label for b in at.button].index("add a variant")].click()
    at.run()
    assert not at.exception
    assert len([c for c in at.table[0].value.columns if not c.startswith("Δ")]) == 3
    remove = [b for b in at.button if b.label == "remove"]
    remove[0].click()
    at.run()
    names = [c for c in at.table[0].value.columns if not c.startswith("Δ")]
    assert names == [list(dash.DEFAULT_VARIANTS)[1], "variant 3"]


def test_a_long_run_asks_first():
    at = started()
    at.number_input(key="0.run.requests").set_value(dash.LONG_RUN_REQUESTS)
    at.run()
    assert not at.exception
    assert not at.table  # nothing simulated yet
    assert any("tick the box" in w.value for w in at.warning)
    assert at.checkbox(key="confirm_long").value is False


def test_the_load_sweep_runs_on_demand():
    at = started()
    assert "Load sweep" not in chart_titles(at)
    at.number_input(key="0.sweep.points").set_value(3)
    at.number_input(key="0.sweep.requests").set_value(100)
    at.button[[b.label for b in at.button].index("Run load sweep")].click()
    at.run()
    assert not at.exception and not at.error
    assert "Load sweep" in chart_titles(at)
    sweep = at.dataframe[0].value
    assert len(sweep) == 3 * len(dash.DEFAULT_VARIANTS)
    assert sorted(set(sweep["rate_per_s"])) == [10.0, 35.0, 60.0]  # a quarter to 1.5x the 40 req/s default


def test_a_trace_upload_replays_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVESIM_UPLOAD_DIR", str(tmp_path))
    at = started()
    at.selectbox(key="0.arrival.kind").set_value("trace")
    at.run()
    assert not at.exception
    assert at.selectbox(key="0.lengths.kind").options[-1] == "trace"
    rows = "".join(f"2023-11-16 18:15:{s:02d}.5000000,{200 + s},{10 + s}\n" for s in range(40))
    at.file_uploader(key="trace_upload").set_value(
        ("mine.csv", ("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows).encode(), "text/csv"))
    at.run()
    at.selectbox(key="0.lengths.kind").set_value("trace")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    table = at.table[0].value
    assert table.iloc[:, 0].loc["finished"] == "40"
    assert "kind: trace" in at.code[0].value
    assert len(list(tmp_path.glob("*.csv"))) == 1


def test_sharegpt_as_the_clients_draw_it_is_a_sidebar_setting_scaled_to_the_asked_means():
    at = started()
    at.number_input(key="0.run.requests").set_value(200)
    at.selectbox(key="0.lengths.kind").set_value("dataset")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    lengths = yaml.safe_load(at.code[0].value)["workload"]["lengths"]
    assert lengths == {"kind": "dataset", "name": "sharegpt"}  # the table's own means shown: drawn unscaled
    at.number_input(key="0.lengths.input_mean").set_value(400.0)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert yaml.safe_load(at.code[0].value)["workload"]["lengths"] == {"kind": "dataset", "name": "sharegpt",
                                                                       "input_mean": 400.0}


def test_expert_parallelism_is_a_sidebar_setting_that_reaches_the_scenario():
    raw = {"name": "ep", "model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "tensor_parallel": 2},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                        "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 20}},
           "run": {"seed": 0, "num_requests": 30}}
    at = upload(started(), "ep.yaml", yaml.safe_dump(raw).encode())
    assert "expert_parallel" not in at.code[0].value  # 1: the key stays out of the YAML
    at.number_input(key="1.ep").set_value(2)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert yaml.safe_load(at.code[0].value)["hardware"]["expert_parallel"] == 2
    at.number_input(key="1.ep").set_value(3)  # 3 does not divide TP 2: the one-line error, no traceback
    at.run()
    assert not at.exception
    assert any("hardware.expert_parallel: 3" in e.value for e in at.error), [e.value for e in at.error]


def test_weights_in_host_memory_are_a_sidebar_setting_without_which_a_70b_model_does_not_fit_one_h100():
    raw = {"name": "offload", "model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm"},
           "scheduler": {"max_model_len": 4096}, "kv_cache": {"weights_offload_bytes": 80 << 30},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 0.5},
                        "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 5}},
           "run": {"seed": 0, "num_requests": 4}}
    at = upload(started(), "offload.yaml", yaml.safe_dump(raw).encode())
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.number_input(key="1.offload").value == 80.0
    at.number_input(key="1.offload").set_value(81.0)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert yaml.safe_load(at.code[0].value)["kv_cache"]["weights_offload_bytes"] == 81 << 30
    at.number_input(key="1.offload").set_value(0.0)  # 141 GB of weights on one H100: the one-line error
    at.run()
    assert not at.exception
    assert any("hardware: llama-3.1-70b" in e.value for e in at.error), [e.value for e in at.error]


def test_an_accept_length_from_the_file_is_a_setting_of_its_own_kept_on_the_round_trip():
    raw = {"name": "accept", "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
           "speculation": {"draft_cost_ratio": 0.1, "num_speculative_tokens": 3,
                           "acceptance": {"kind": "accept_length", "tokens_per_step": 2.5}},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2},
                        "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 20}},
           "run": {"seed": 0, "num_requests": 20}}
    at = upload(started(), "accept.yaml", yaml.safe_dump(raw).encode())
    assert not at.exception and not at.error, [e.value for e in at.error]
    accept = at.number_input(key="1.v0.accept_length")
    assert accept.value == 2.5 and "1.v0.alpha" not in [e.key for e in at.slider]
    accept.set_value(3.0)
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    downloaded = build_scenario_set(yaml.safe_load(at.code[0].value))
    assert all(v.speculation.acceptance.tokens_per_step == 3.0 for v in downloaded.variants.values())


def test_the_moe_routing_of_measured_kernels_is_a_sidebar_setting_for_mixtures_of_experts_only():
    raw = {"name": "routing", "model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "tensor_parallel": 2},
           "cost_model": {"kind": "measured"},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                        "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 20}},
           "run": {"seed": 0, "num_requests": 30}}
    at = upload(started(), "routing.yaml", yaml.safe_dump(raw).encode())
    routing = at.selectbox(key="1.cost_model.moe_routing")
    assert routing.value == "auto" and "moe_routing" not in at.code[0].value  # the default stays out of the YAML
    routing.set_value("balanced")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert yaml.safe_load(at.code[0].value)["cost_model"]["moe_routing"] == "balanced"
    shown = " ".join(str(e.value) for e in at.markdown) + " ".join(str(e.value) for e in at.caption)
    assert "balanced MoE routing" in shown  # the run's own label names the routing it priced with
    dense = upload(started(), "dense.yaml", yaml.safe_dump({**raw, "model": "llama-3.1-8b"}).encode())
    assert "1.cost_model.moe_routing" not in [e.key for e in dense.selectbox]


def test_an_engine_named_in_the_sidebar_runs_with_its_own_defaults_and_its_clients_endpoint(tmp_path):
    at = started()
    at.number_input(key="0.run.requests").set_value(300)
    at.run()
    at.selectbox(key="0.engine.name").set_value("vllm")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    notes = [w.value for w in at.warning]
    assert any("vLLM's own defaults replace the form's" in n and "scheduler.max_num_seqs 256" in n for n in notes)
    raw = yaml.safe_load(at.code[0].value)
    assert raw["engine"] == {"name": "vllm", "version": dash.default_engine_version("vllm")}
    assert "max_num_seqs" not in raw["scheduler"] and "endpoint" not in raw["workload"]
    # the variant columns now show what the engine derives (not the form's 256), and write no override for it
    derived = build_scenario_set(raw).variants[list(raw["variants"])[0]].scheduler
    assert at.number_input(key="1.v0.max_num_seqs").value == derived.max_num_seqs != 256
    assert raw["variants"][list(raw["variants"])[0]] == {}
    table = at.table[0].value
    completions_ttft = float(table.iloc[:, 0].loc["TTFT p99 (s)"])
    # the preset's front-end runs: TTFT is the client's, and the front-end's and the engine's rows split it
    assert "front-end busy share" in table.index and "engine TTFT p50 (s)" in table.index
    assert "TTFT, TPOT, E2E measured at" not in table.index  # a word, not a number: the caption says it
    assert any(c.value.startswith("TTFT, TPOT and E2E as the client measures them") for c in at.caption)

    # vLLM 0.11.0's API server parses the chat template for every chat request: work that queues before the engine
    at.radio(key="1.workload.endpoint").set_value("chat")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert yaml.safe_load(at.code[0].value)["workload"]["endpoint"] == "chat"
    assert float(at.table[0].value.iloc[:, 0].loc["TTFT p99 (s)"]) > completions_ttft

    # the engine's own launch command: its flags' values replace the form's, its other options are accepted
    at.text_input(key="1.engine.command").set_value("vllm serve m --gpu-memory-utilization 0.8 --port 8000")
    at.run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    raw = yaml.safe_load(at.code[0].value)
    assert raw["engine"]["command"] == "vllm serve m --gpu-memory-utilization 0.8 --port 8000"
    assert all(v.kv_cache.gpu_memory_utilization == 0.8 for v in build_scenario_set(raw).variants.values())
    at.text_input(key="2.engine.command").set_value("vllm serve m --foo 1")  # refused: one line, no traceback
    at.run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("engine.command: '--foo' is not an option"), errors
    at.text_input(key="3.engine.command").set_value("")
    at.run()
    assert "command" not in yaml.safe_load(at.code[0].value)["engine"]

    at.text_input(key="4.engine.version").set_value("9.9")  # not a version the preset knows: one line, no traceback
    at.run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("engine.version: '9.9' is not a vllm version"), errors


@pytest.mark.parametrize("name", ["quickstart", "speculative", "sglang_eagle", "sglang_standalone", "prefix_caching",
                                  "swap", "quantization", "llama70b_tp4", "pipeline_parallel", "engines"])
def test_a_shipped_scenario_survives_upload_and_download_unchanged(name):
    """The form must not change what it was given: every widget starts from the file's value."""
    raw = yaml.safe_load((Path(APP).parent / "scenarios" / f"{name}.yaml").read_text())
    raw["run"]["num_requests"] = 40  # the round trip is about settings; keep the simulations small
    at = upload(started(), f"{name}.yaml", yaml.safe_dump(raw, sort_keys=False).encode())
    assert not at.exception and not at.error, [e.value for e in at.error]
    given = build_scenario_set(raw).variants
    downloaded = build_scenario_set(yaml.safe_load(at.code[0].value)).variants
    assert list(downloaded) == list(given)[:dash.MAX_VARIANTS]
    for variant, scenario in downloaded.items():
        assert scenario.model_dump(mode="json") == given[variant].model_dump(mode="json"), variant


def test_what_the_cost_model_approximated_is_listed_under_the_summary():
    """A GB200 at TP 8 (its vLLM all-reduce rows stop at 4 GPUs): the page says so, as the CLI and the report do."""
    raw = {"name": "gb200", "model": "llama-3.1-70b", "hardware": {"gpu": "gb200", "tensor_parallel": 8},
           "cost_model": {"kind": "measured"},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2},
                        "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 20}},
           "run": {"seed": 0, "num_requests": 20}}
    at = upload(started(), "gb200.yaml", yaml.safe_dump(raw).encode())
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "what the cost model approximates" in [e.label for e in at.expander]
    captions = [str(e.value) for e in at.caption]
    assert any(c.startswith("all-reduce: 8 GPUs not measured (measured [2, 4])") for c in captions), captions
