"""The dashboard's GPU cost-model choice and the "cost model" row of every summary view (issue 12)."""

from __future__ import annotations

import copy
import json

import pytest
from helpers import APP_RUN_TIMEOUT_S, small_scenario

from sim.config.files import validate_scenario
from sim.config.schema import MeasuredCostSpec, RooflineSpec, Scenario, literal_choices, union_kinds
from sim.cost.labels import cost_model_label
from sim.errors import ConfigError
from sim.run import simulate
from sim.views import dashboard as dash
from sim.views.cli import main as servesim
from sim.views.report import COST_MODEL_LABEL, summary_table_html


def test_choices_come_from_the_schema_after_the_best_available():
    kinds = union_kinds(Scenario.model_fields["cost_model"].annotation)
    assert "measured" in kinds and "roofline" in kinds
    assert dash.COST_MODEL_CHOICES[:2] == (dash.BEST, "measured")
    # one roofline choice per efficiencies literal
    assert len([c for c in dash.COST_MODEL_CHOICES if c.startswith("roofline")]) == len(
        literal_choices(RooflineSpec, "efficiencies"))


@pytest.mark.parametrize("choice", dash.COST_MODEL_CHOICES)
def test_a_choice_round_trips_through_the_scenario_section(choice):
    spec = dash.with_cost_model_choice(None, choice)
    assert dash.cost_model_choice(spec) == choice
    validate_scenario(small_scenario(cost_model=spec) if spec else small_scenario())  # a valid section


def test_switching_choice_keeps_settings_of_the_same_kind_only():
    measured = {"kind": "measured", "overhead": {"engine": "vllm-eager"}}
    assert dash.with_cost_model_choice(measured, "measured") == measured
    assert dash.with_cost_model_choice(measured, "roofline") == {"kind": "roofline"}
    assert dash.with_cost_model_choice({"kind": "roofline", "efficiencies": "learned"}, "roofline") == {
        "kind": "roofline"}
    assert dash.with_cost_model_choice(measured, dash.BEST) is None  # no section: the default choice
    with pytest.raises(ConfigError, match="cost_model: 'fixed' is not a dashboard choice; allowed: best available"):
        dash.with_cost_model_choice(None, "fixed")
    assert dash.cost_model_choice({"kind": "fixed", "prefill_s": 1, "decode_s": 1}) is None  # shown as YAML


def test_a_new_form_is_priced_as_run_prices_it_and_the_note_names_the_model():
    # no cost_model: the default choice (sim/config/cost_choice.py), the one `servesim run` makes
    assert "cost_model" not in dash.DEFAULT_BASE
    assert dash.cost_model_choice(dash.DEFAULT_BASE.get("cost_model")) == dash.BEST
    raw = {k: v for k, v in dash.DEFAULT_BASE.items()}
    chosen = validate_scenario(copy.deepcopy(raw)).cost_model_choice
    assert chosen.startswith("calibrated: shipped whole-step profile h100-sxm/llama-3.1-8b/tp1")
    assert dash.cost_model_note(raw).endswith(chosen)
    l4 = {**raw, "hardware": {"gpu": "l4"}, "quantization": {"weights": "fp8"}}
    assert "learned: learned roofline" in dash.cost_model_note(l4)


def test_the_note_names_the_runs_choice_with_the_engine_presets_values():
    # the preset's own values (vLLM's Marlin MXFP4 experts on an A100) decide the choice, as validation applies them
    from pathlib import Path
    oss = str(Path(__file__).resolve().parents[2] / "sim" / "model" / "configs" / "gpt-oss-20b.json")
    raw = {**copy.deepcopy(dash.DEFAULT_BASE), "model": {"hf_config": oss}, "hardware": {"gpu": "a100-80gb"},
           "engine": {"name": "vllm", "version": "0.11.0"}}
    chosen = validate_scenario(copy.deepcopy(raw)).cost_model_choice
    assert chosen.startswith("measured: vllm kernel tables of a100-80gb")
    assert dash.cost_model_note(raw).endswith(chosen)
    measured = {**raw, "cost_model": {"kind": "measured"}}  # Marlin's rows price it: nothing to say
    assert dash.cost_model_note(measured) is None
    assert "only Marlin's MXFP4" in dash.cost_model_note({**measured, "engine": None})


def test_note_says_when_measured_falls_back():
    base = copy.deepcopy(dash.DEFAULT_BASE)
    base["cost_model"] = {"kind": "measured"}
    assert dash.cost_model_note(base) is None
    base["hardware"]["gpu"] = "l4"
    note = dash.cost_model_note(base)
    assert note.startswith("measured kernels unavailable (no measured kernel tables for gpu 'l4'")
    assert note.endswith("priced with the roofline (catalog efficiencies)")
    base["cost_model"]["on_missing"] = "error"
    assert "will stop with this error" in dash.cost_model_note(base)
    assert dash.cost_model_note({"hardware": {"gpu": "l4"}, "cost_model": {"kind": "roofline"}}) is None
    # a dtype the tables were not measured in: the measured model stops (unmeasured_dtype 'error', its default),
    # as the run does, unless the roofline is asked for (sim/cost/measured.py measured_refusal decides both)
    fp8 = {"hardware": {"gpu": "h100-sxm"}, "quantization": {"weights": "fp8"}, "cost_model": {"kind": "measured"}}
    assert "weight-only fp8" in dash.cost_model_note(fp8) and "will stop" in dash.cost_model_note(fp8)
    with pytest.raises(ConfigError, match="weight-only fp8"):
        simulate(validate_scenario(small_scenario(fp8)))
    fp8["cost_model"]["unmeasured_dtype"] = "roofline"
    assert dash.cost_model_note(fp8).endswith("priced with the roofline (catalog efficiencies)")


def test_every_summary_view_names_the_cost_model_that_priced_the_run(tmp_path, capsys):
    """The label comes from the cost-model object, so a measured request on a GPU without tables says roofline."""
    on_h100 = simulate(validate_scenario(small_scenario(cost_model={"kind": "measured"})))
    on_l4 = simulate(validate_scenario(small_scenario({"name": "l4", "hardware": {"gpu": "l4"}},
                                                      cost_model={"kind": "measured"})))
    assert on_h100.extras["cost_model_label"].startswith("measured (AIConfigurator h100_sxm vllm ")
    assert on_l4.extras["cost_model_label"].startswith("roofline (fallback: no measured kernel tables for gpu 'l4'")
    html = summary_table_html([on_h100, on_l4])
    assert f"<th>{COST_MODEL_LABEL}</th><td>measured (AIConfigurator h100_sxm" in html
    caption = dash.cost_model_caption([on_h100, on_l4])
    assert caption.startswith("cost model: small: measured") and "l4: roofline (fallback" in caption
    assert dash.cost_model_caption([on_h100]) == "cost model: " + on_h100.extras["cost_model_label"]
    assert dash.deployment_caption([on_h100]) == "deployment: llama-3.1-8b on h100-sxm, TP 1"
    assert dash.deployment_caption([on_h100, on_l4]) == ("deployment: small: llama-3.1-8b on h100-sxm, TP 1; l4: "
                                                         "llama-3.1-8b on l4, TP 1")

    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(small_scenario(cost_model={"kind": "roofline", "efficiencies": "learned"})))
    servesim(["run", str(path), "--out", str(tmp_path / "out")])
    assert "learned roofline" in capsys.readouterr().out
    assert "learned roofline" in (tmp_path / "out" / "report.html").read_text()


def test_label_of_wrapped_models():
    from sim.run import make_cost_model
    scenario = validate_scenario(small_scenario(cost_model={"kind": "measured", "overhead": {"engine": "vllm-eager"}}))
    assert cost_model_label(make_cost_model(scenario)).endswith(" + vllm-eager overhead")
    assert cost_model_label(make_cost_model(validate_scenario(small_scenario()))) == "roofline"


def test_the_page_starts_on_the_best_available_and_notes_a_fallback_for_a_gpu_without_tables():
    pytest.importorskip("streamlit", reason="the dashboard needs the ui extra (streamlit)")
    from pathlib import Path

    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=APP_RUN_TIMEOUT_S)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="0.cost_model").value == dash.BEST
    assert any(c.value.startswith("cost model: calibrated + vllm-cudagraph overhead") for c in at.caption)
    assert any("calibrated: shipped whole-step profile h100-sxm/llama-3.1-8b/tp1" in i.value for i in at.info)
    at.selectbox(key="0.gpu").set_value("l4")
    at.run()
    assert not at.exception
    assert any(c.value.startswith("cost model: learned roofline") for c in at.caption)
    at.selectbox(key="0.cost_model").set_value("measured")
    at.run()
    assert not at.exception
    assert any("no measured kernel tables for gpu 'l4'" in i.value for i in at.info)
    assert any(c.value.startswith("cost model: roofline (fallback") for c in at.caption)


def test_plan_rows_name_the_cost_model_that_prices_each_candidate():
    # a plan's rows (sim/views/plan_report.py) show the label the planner gives each candidate, the one its own
    # run gives it (sim/tools/planner.py candidate_cost_model_label)
    from sim.run import simulate
    from sim.tools.planner import candidate_cost_model_label
    learned = {"kind": "roofline", "efficiencies": "learned", "overhead": {"engine": "vllm-eager"}}
    for raw in (small_scenario(hardware={"gpu": "h100-sxm", "tensor_parallel": 2}, cost_model={"kind": "measured"}),
                small_scenario(hardware={"gpu": "l4"}, quantization={"weights": "fp8"}, cost_model=learned)):
        scenario = validate_scenario(raw)
        label = candidate_cost_model_label(raw, scenario)
        assert label == simulate(scenario).extras["cost_model_label"]
    assert label == "learned roofline + vllm-eager overhead"


def test_the_moe_routing_choice_round_trips_and_is_refused_off_the_measured_model():
    assert dash.MOE_ROUTINGS == literal_choices(MeasuredCostSpec, "moe_routing") and dash.MOE_ROUTINGS[0] == "auto"
    measured = {"kind": "measured", "overhead": {"engine": "vllm-eager"}}
    for routing in dash.MOE_ROUTINGS:
        spec = dash.with_moe_routing(measured, routing)
        assert dash.moe_routing_choice(spec) == routing and spec["overhead"] == measured["overhead"]
        assert ("moe_routing" in spec) is (routing != "auto")  # the default stays out of the file
        validate_scenario(small_scenario(model="mixtral-8x7b", hardware={"tensor_parallel": 2}, cost_model=spec))
    with pytest.raises(ConfigError, match="moe_routing: 'uniform' is not allowed"):
        dash.with_moe_routing(measured, "uniform")
    with pytest.raises(ConfigError, match="needs cost_model.kind 'measured'"):
        dash.with_moe_routing({"kind": "roofline"}, "balanced")
    assert dash.is_mixture_of_experts("mixtral-8x7b") and dash.is_mixture_of_experts("llama-3.1-8b") is False
    assert dash.is_mixture_of_experts("Mixtral_8x7B")  # the catalog's own spelling rules
    assert dash.is_mixture_of_experts({"hf_config": "config.json"}) is None  # the page cannot tell: it asks
    assert dash.is_mixture_of_experts("no-such-model") is None
