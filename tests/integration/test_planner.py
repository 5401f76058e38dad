"""The planner: its searches against brute force, the rate it finds against the SLO, exclusions, reports."""

from __future__ import annotations

import copy
from dataclasses import replace
import html
import json
import math
import re
from html.parser import HTMLParser

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import small_scenario
from sim.tools.planner import (
    CEILING_MARGIN,
    Candidate,
    CandidateTask,
    Evaluator,
    candidate_raw,
    candidates,
    max_sustainable_rate,
    min_replicas,
    plan_settings,
    run_plan,
    search_candidate,
    search_ceiling,
    window_ceiling,
)
from sim.workload.arrivals import MAX_RATE_PER_S
from sim.workload.base import MAX_NUM_REQUESTS
from sim.views.cli import main
from sim.views.plan_report import (
    candidates_frame,
    pareto_front,
    recommendation_text,
    render_html,
    render_markdown,
    seed_summary,
)

# Llama-3.1-8B with short requests: every simulation is a fraction of a second.
SMALL = small_scenario({'name': 'plan-small',
                        'workload': {'arrival': {'rate_per_s': 40},
                                     'lengths': {'kind': 'uniform',
                                                 'input_min': 200,
                                                 'input_max': 1200,
                                                 'output_min': 50,
                                                 'output_max': 300}},
                        'scheduler': {'max_model_len': 4096},
                        'slo': {'ttft_s': 0.5, 'tpot_s': 0.05, 'percentile': 90},
                        'run': {'num_requests': 150},
                        'search': {'gpus': ['a100-80gb', 'l40s'],
                                   'tensor_parallel': [1, 2],
                                   'max_replicas': 6,
                                   'num_seeds': 2,
                                   'min_window_s': 5,
                                   'rate_tolerance': 0.02,
                                   'top_k': 2},
                        'variants': {'paged': {},
                                     'chunked': {'scheduler': {'chunked_prefill': True, 'max_num_batched_tokens': 1024}}}})


def _run_cli(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
        raise SystemExit(0)
    return exit_info.value.code


def test_binary_search_brackets_a_known_threshold():
    calls = []

    def passes(rate):
        calls.append(rate)
        return rate <= 7.3

    ok, bad = max_sustainable_rate(passes, start_rate=1.0, tolerance=0.01, floor_rate=0.01)
    assert ok <= 7.3 < bad
    assert bad / ok <= 1.01
    assert len(calls) < 20


@settings(max_examples=300, deadline=None)
@given(first=st.floats(0.05, 50.0), ratio=st.floats(0.8, 1.25), start=st.floats(0.5, 40.0),
       tolerance=st.sampled_from([0.01, 0.02, 0.05]))
def test_a_neighbours_bracket_gives_the_full_searchs_answer(first, ratio, start, tolerance):
    """Monotone verdicts (a threshold): starting from a neighbour's bracket gives the answer of the search from
    scratch, in two probes when the bracket holds for this candidate too."""
    def search(threshold, neighbour=None):
        calls = []

        def passes(rate):
            calls.append(rate)
            return rate <= threshold
        return max_sustainable_rate(passes, start, tolerance, start / 1024, neighbour), calls

    before, _ = search(first)
    cold, _ = search(first * ratio)
    warm, calls = search(first * ratio, before)
    assert warm == cold
    if 0 < before[0] <= first * ratio < before[1] < math.inf:
        assert len(calls) == 2  # the bracket holds: nothing else to probe


def test_a_neighbours_bracket_that_does_not_hold_costs_at_most_two_probes():
    calls = []

    def passes(rate):
        calls.append(rate)
        return rate <= 7.3
    cold = max_sustainable_rate(passes, 1.0, 0.01, 0.01)
    n_cold = len(calls)
    calls.clear()
    assert max_sustainable_rate(passes, 1.0, 0.01, 0.01, neighbour=(8.0, 8.05)) == cold  # fails at its low end
    assert len(calls) == n_cold + 1
    calls.clear()
    assert max_sustainable_rate(passes, 1.0, 0.01, 0.01, neighbour=(6.0, 6.05)) == cold  # passes at both ends
    assert len(calls) == n_cold + 2


def test_binary_search_reports_a_floor_failure_and_an_unbounded_pass():
    assert max_sustainable_rate(lambda r: False, 1.0, 0.02, 0.1)[0] == 0.0
    assert max_sustainable_rate(lambda r: True, 1.0, 0.02, 0.1) == (math.inf, math.inf)


def test_an_unbounded_pass_stops_doubling_at_the_ceiling():
    """SLOs that hold past CEILING_MARGIN x the saturated rate do not bind: the search stops there (1, 2, 4, then the
    ceiling 6), where it doubled on to a million requests a second."""
    calls = []
    assert max_sustainable_rate(lambda r: calls.append(r) or True, 1.0, 0.02, 0.1, ceiling_rate=6.0) == (
        math.inf, math.inf)
    assert calls == [1.0, 2.0, 4.0, 6.0]
    assert search_ceiling(10.0, 3.0) == CEILING_MARGIN * 3.0 == 12.0
    assert search_ceiling(10.0, 3.0, num_replicas=2) == 24.0
    assert search_ceiling(20.0, 3.0) == 20.0  # never below where the search starts
    assert search_ceiling(10.0, math.inf) == search_ceiling(10.0, math.nan) == MAX_RATE_PER_S


def test_a_plan_without_a_window_has_no_window_ceiling():
    """search.min_window_s 0 (allowed: no window asked) divided by zero in the window's ceiling (a review found it)."""
    assert window_ceiling(0.0) == math.inf and window_ceiling(60.0) == MAX_NUM_REQUESTS / 60.0
    raw = small_scenario({"name": "no-window", "cost_model": {"kind": "roofline"},
                          "workload": {"arrival": {"rate_per_s": 40}}, "slo": {"tpot_s": 0.2, "percentile": 90},
                          "run": {"num_requests": 150},
                          "search": {"gpus": ["a100-80gb"], "tensor_parallel": [1], "max_replicas": 4,
                                     "num_seeds": 1, "min_window_s": 0, "top_k": 1}})
    (outcome,) = run_plan(copy.deepcopy(raw), plan_settings(raw), backend="serial").outcomes
    assert outcome.status == "feasible" and outcome.max_rate_per_replica == math.inf


def test_a_plan_whose_slos_never_bind_ends():
    """A TPOT-only SLO holds at any rate (a full batch decodes as fast however long the queue): the plan reports
    that, where its searches doubled towards a million requests a second for minutes on end."""
    raw = small_scenario({"name": "tpot-only", "cost_model": {"kind": "roofline"},
                          "workload": {"arrival": {"rate_per_s": 40}},
                          "slo": {"tpot_s": 0.2, "percentile": 90}, "run": {"num_requests": 150},
                          "search": {"gpus": ["a100-80gb"], "tensor_parallel": [1], "max_replicas": 4,
                                     "num_seeds": 1, "min_window_s": 5, "top_k": 1}})
    result = run_plan(copy.deepcopy(raw), plan_settings(raw), backend="serial")
    (outcome,) = result.outcomes
    assert outcome.status == "feasible" and outcome.max_rate_per_replica == math.inf
    assert max(e.rate_per_s for e in outcome.evaluations) <= CEILING_MARGIN * outcome.saturated_rate_per_replica


@pytest.mark.parametrize("guess", [1, 2, 3, 5, 9])
def test_min_replicas_finds_the_threshold_from_any_guess(guess):
    assert min_replicas(lambda n: n >= 3, guess, max_replicas=8) == 3


def test_min_replicas_gives_none_beyond_the_limit():
    assert min_replicas(lambda n: n >= 10, 2, max_replicas=8) is None


def test_pareto_front_keeps_only_undominated_points():
    points = [(1.0, 5.0), (2.0, 3.0), (2.5, 4.0), (3.0, 1.0), (4.0, 1.0), (1.0, 6.0)]
    assert sorted(pareto_front(points)) == [0, 1, 3]


@pytest.fixture(scope="module")
def plan_result():
    raw = copy.deepcopy(SMALL)
    return raw, run_plan(raw, plan_settings(raw), backend="serial")


def _brute_force(raw: dict, settings) -> dict:
    """For every candidate, the fewest replicas meeting the SLOs at the target, trying 1, 2, 3, ..."""
    answers = {}
    for gpu in settings.gpus:
        for tp in settings.tensor_parallel:
            for policy in settings.policies:
                cand = Candidate(gpu, tp, policy)
                evaluate = Evaluator(candidate_raw(raw, cand, settings.prefer_calibrated), settings)
                answers[cand] = next((n for n in range(1, settings.max_replicas + 1)
                                      if evaluate(n, settings.target_rate_per_s).slo_met), None)
    return answers


def test_recommendation_matches_brute_force_over_the_same_grid(plan_result):
    raw, result = plan_result
    brute = _brute_force(raw, result.settings)
    assert {o.candidate: o.num_replicas for o in result.outcomes} == brute
    prices = {"a100-80gb": 5.12, "l40s": 1.861}  # catalog USD per GPU-hour
    costs = {cand: n * cand.tensor_parallel * prices[cand.gpu] for cand, n in brute.items() if n is not None}
    assert costs, "the test grid should have at least one feasible candidate"
    rec = result.recommendation
    assert rec.costs["cost_per_hour"] == pytest.approx(min(costs.values()))
    assert costs[rec.candidate] == pytest.approx(min(costs.values()))
    ranked = [o.costs["cost_per_hour"] for o in result.feasible]
    assert ranked == sorted(ranked)


def test_max_sustainable_rate_holds_the_slo_and_ten_percent_more_does_not(plan_result):
    raw, result = plan_result
    for outcome in result.feasible[:2]:
        evaluate = Evaluator(candidate_raw(raw, outcome.candidate, result.settings.prefer_calibrated), result.settings)
        rate = outcome.max_rate_per_replica
        assert evaluate(1, rate).slo_met
        assert not evaluate(1, rate * 1.1).slo_met


def test_the_deployment_rate_in_the_curves_is_consistent_too(plan_result):
    raw, result = plan_result
    curve = result.curves[0]
    evaluate = Evaluator(candidate_raw(raw, curve.candidate, result.settings.prefer_calibrated), result.settings)
    assert evaluate(curve.num_replicas, curve.max_rate_per_s).slo_met
    assert not evaluate(curve.num_replicas, curve.max_rate_per_s * 1.1).slo_met
    # The recommendation's deployment sustains at least the target.
    assert curve.max_rate_per_s >= result.settings.target_rate_per_s


def test_seeds_repeat_the_recommendation(plan_result):
    _, result = plan_result
    assert [s.seed for s in result.seeds] == [0, 1]
    assert all(s.at_recommendation.num_replicas == result.recommendation.num_replicas for s in result.seeds)
    spread = seed_summary(result)
    assert spread["num_seeds"] == 2
    assert spread["ttft_min"] <= spread["ttft_mean"] <= spread["ttft_max"]
    # Seed 0 is the search's own seed: the deployment it chose meets the SLOs there.
    assert result.seeds[0].at_recommendation.slo_met
    assert result.seeds[0].min_replicas == result.recommendation.num_replicas


def test_plan_is_deterministic(plan_result):
    raw, result = plan_result
    again = run_plan(copy.deepcopy(raw), plan_settings(raw), backend="process", workers=2)
    pd.testing.assert_frame_equal(candidates_frame(result), candidates_frame(again))


def test_a_candidate_that_cannot_hold_the_model_is_excluded_with_its_reason():
    raw = copy.deepcopy(SMALL)
    raw["model"] = "llama-3.1-70b"
    settings = plan_settings(raw, gpus=["l4"], tensor_parallel=[1, 3], policies=["paged"])
    outcomes = {(o.candidate.tensor_parallel): o for o in run_plan(raw, settings, backend="serial").outcomes}
    assert outcomes[1].status == "excluded" and "hardware" in outcomes[1].reason and "bytes" in outcomes[1].reason
    assert outcomes[3].status == "excluded" and "tensor_parallel" in outcomes[3].reason


def test_an_slo_no_load_can_meet_makes_the_candidate_infeasible_with_the_measured_value():
    raw = copy.deepcopy(SMALL)
    raw["slo"] = {"ttft_s": 0.0005, "percentile": 90}
    raw["run"]["num_requests"] = 40
    settings = plan_settings(raw, gpus=["a100-80gb"], tensor_parallel=[1], policies=["paged"])
    outcome = search_candidate(CandidateTask(candidate_raw(raw, Candidate("a100-80gb", 1, "paged")),
                                             Candidate("a100-80gb", 1, "paged"), settings))
    assert outcome.status == "infeasible"
    assert re.search(r"SLOs not met even at [\d.e-]+ req/s on one replica \(ttft [\d.e-]+ s\)", outcome.reason)


class _Sections(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.scripts, self.external = [], [], []
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.ids.append(attrs.get("id"))
        if tag == "script":
            self._in_script = True
            self.scripts.append("")
            if attrs.get("src"):
                self.external.append(attrs["src"])

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data


def test_html_report_has_every_section_and_embeds_its_plot_data(plan_result):
    _, result = plan_result
    page = render_html(result)
    parsed = _Sections()
    parsed.feed(page)
    for section in ("recommendation", "candidates", "excluded", "margin", "uncertainty", "pareto", "curves",
                    "seeds-chart", "reproduce"):
        assert section in parsed.ids
    assert parsed.ids[0] == "verdict"  # the page opens with the verdict (sim/views/verdict.py)
    assert f'data-winner="{result.recommendation.candidate.name}"' in page
    assert page.count("Copyright 2012-") == 1  # plotly.js once
    assert parsed.external == []  # self-contained: plotly is inlined
    plots = [s for s in parsed.scripts if "Plotly.newPlot" in s]
    assert len(plots) >= 3
    rec = result.recommendation
    encoded = json.dumps(rec.candidate.name)[1:-1]  # as plotly's JSON writes it (non-ASCII escaped)
    assert any(encoded in s for s in plots)  # the Pareto front names its points
    assert rec.candidate.gpu_name in page and "Versions:" in page and "servesim" in page


def test_markdown_and_tables_agree_with_the_result(plan_result):
    _, result = plan_result
    md = render_markdown(result)
    for heading in ("## Recommendation", "## Candidates", "## SLO margin", "## Uncertainty over seeds", "## Reproduce"):
        assert heading in md
    assert md.split("\n## ")[1].startswith("Verdict\n") and "Winner: " in md
    df = candidates_frame(result)
    assert len(df) == 2 * 2 * 2
    assert "engine" not in df.columns and "engine preset" not in md  # no candidate names a serving engine
    assert df.iloc[0]["candidate"] == result.recommendation.candidate.name
    assert df.iloc[0]["rank"] == 1


def test_plan_cli_writes_every_output_and_the_report(tmp_path):
    path = tmp_path / "plan.yaml"
    raw = copy.deepcopy(SMALL)
    raw["search"]["gpus"] = ["l40s", "l4"]
    raw["search"]["tensor_parallel"] = [1]
    path.write_text(yaml.safe_dump(raw))
    out, report = tmp_path / "plan", tmp_path / "report.html"
    code = _run_cli("plan", str(path), "--out", str(out), "--report", str(report), "--backend", "serial",
                    "--price", "l40s=1.5", "-q")
    assert code == 0
    assert {p.name for p in out.iterdir()} == {"report.html", "plan.md", "candidates.csv", "simulations.csv",
                                               "scenario.yaml", "plan.json", ".servesim-output.json"}
    assert report.read_text() == (out / "report.html").read_text()
    df = pd.read_csv(out / "candidates.csv")
    l40s = df[df["gpu"] == "l40s"].dropna(subset=["cost_per_hour"])
    assert (l40s["cost_per_hour"] == 1.5 * l40s["num_gpus"]).all()  # the price override is used
    sims = pd.read_csv(out / "simulations.csv")
    assert set(sims["phase"]) == {"search", "curve", "seed"}


@pytest.mark.parametrize("args, needle", [
    (["--price", "l40s"], "--price: 'l40s' is not GPU=USD"),
    (["--price", "h200=3"], "--price: 'h200' is not a candidate GPU"),
    (["--rate", "-1"], "--rate: -1.0 must be > 0"),
    (["--policies", "paged,turbo"], "search.policies: 'turbo' is not a variant"),
    (["--tp", "1,two"], "--tp: '1,two' is not a comma-separated list of int"),
    (["--max-replicas", "0"], "--max-replicas: 0 must be >= 1"),
    (["--set", "slo.ttft_s=null", "--set", "slo.tpot_s=null"], "slo: planning needs at least one limit"),
    (["--set", "workload.arrival={kind: closed_loop, num_users: 4}"], "closed_loop"),
])
def test_plan_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, needle):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    code = _run_cli("plan", str(path), "--backend", "serial", "-q", "--out", str(tmp_path / "o"), *args)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert needle in err and err.count("\n") == 0 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_an_inline_gpu_is_a_candidate_with_its_own_price():
    from sim.model.catalog import get_gpu
    raw = copy.deepcopy(SMALL)
    custom = get_gpu("l40s").model_dump(mode="json")
    custom.update(name="l40s-spot", price_per_hour=0.9)
    # priced alike: a catalog GPU would otherwise get its measured tables, an inline one the roofline
    raw["search"].update(gpus=[custom, "l40s"], tensor_parallel=[1], policies=["paged"], num_seeds=1, top_k=1,
                         prefer_calibrated=False)
    result = run_plan(raw, plan_settings(raw), backend="serial")
    by_gpu = {o.candidate.gpu_name: o for o in result.outcomes}
    assert set(by_gpu) == {"l40s-spot", "l40s"}
    spot, listed = by_gpu["l40s-spot"], by_gpu["l40s"]
    # Same silicon, so the same replicas; the cheaper price wins.
    assert spot.num_replicas == listed.num_replicas
    assert spot.costs["cost_per_hour"] == pytest.approx(0.9 * spot.num_replicas)
    assert result.recommendation.candidate.gpu_name == "l40s-spot"


def test_a_candidate_is_priced_by_the_model_its_run_would_get_and_named_as_its_run_names_it():
    """search.prefer_calibrated (the default): a candidate whose scenario names no cost model gets the most accurate
    one available, chosen as `run` chooses it (sim/config/cost_choice.py): the shipped whole-step profile on the H100
    at TP 1, AIConfigurator's measured kernels on the A100, with the engine's own tables; each outcome names it as
    the candidate's own run does. prefer_calibrated false: the catalog roofline."""
    from sim.config.files import validate_scenario
    from sim.run import simulate
    raw = copy.deepcopy(SMALL)
    raw["engine"] = {"name": "sglang", "version": "0.5.3.post3"}
    raw["search"].update(gpus=["h100-sxm", "a100-80gb"], tensor_parallel=[1], policies=["paged"], num_seeds=1,
                         top_k=1)
    result = run_plan(raw, plan_settings(raw), backend="serial")
    used = {o.candidate.gpu_name: o.cost_model for o in result.outcomes}
    assert used["h100-sxm"].startswith("calibrated + ")
    assert used["a100-80gb"].startswith("measured (AIConfigurator a100_sxm sglang ")
    for o in result.outcomes:
        run = simulate(validate_scenario(candidate_raw(raw, o.candidate, True)))
        assert run.extras["cost_model_label"] == o.cost_model
        # and says what its engine preset approximates, as its run does
        assert (o.engine, o.engine_notes) == (run.extras["engine"], tuple(run.extras["engine_notes"]))
        assert o.engine == "sglang 0.5.3.post3" and o.engine_notes
        # and what its cost model approximates as built: the run's notes, less the points its steps priced past
        # the measured range
        assert set(o.cost_model_notes) <= set(run.extras["cost_model_notes"])
        assert not {n for n in run.extras["cost_model_notes"] if n not in o.cost_model_notes
                    and "outside measured" not in n}
    _engine_notes_are_in_every_output(result)
    a100 = next(o for o in result.outcomes if o.candidate.gpu_name == "a100-80gb")
    assert a100.cost_model_notes  # the measured tables note what they lack
    cost_section = render_markdown(result).split("## What the cost model approximates\n")[1].split("\n## ")[0]
    page = render_html(result).split('id="cost-model-notes"')[1]
    for note in a100.cost_model_notes:
        assert f"- {note}" in cost_section and html.escape(note) in page
    raw["search"]["prefer_calibrated"] = False
    off = run_plan(raw, plan_settings(raw), backend="serial")
    assert all(o.cost_model.startswith("roofline + ") for o in off.outcomes)
    best = {o.candidate.gpu_name: o.max_rate_per_replica for o in result.outcomes}
    roofline = {o.candidate.gpu_name: o.max_rate_per_replica for o in off.outcomes}
    assert roofline["h100-sxm"] != pytest.approx(best["h100-sxm"], rel=0.02)  # the profile priced the first plan


def _engine_notes_are_in_every_output(result):
    """Each candidate's engine in the candidates table; each of its preset's notes in plan.md and the report under
    a heading naming its engine and that candidate, once per set of notes."""
    assert list(candidates_frame(result)["engine"]) == [o.engine for o in result.outcomes]
    md, page = render_markdown(result), render_html(result)
    section = md.split("## What the engine preset approximates\n")[1].split("\n## ")[0]
    blocks = section.split("### ")[1:]
    assert len(blocks) == len({(o.engine, o.engine_notes) for o in result.outcomes})
    for o in result.outcomes:
        mine = [b for b in blocks if b.startswith(o.engine + ": ") and o.candidate.name in b.split("\n")[0]]
        assert len(mine) == 1 and [line[2:] for line in mine[0].splitlines() if line.startswith("- ")] == \
            list(o.engine_notes)
        for note in o.engine_notes:
            assert html.escape(note) in page.split('id="engine-notes"')[1]


def test_expert_parallel_degrees_are_searched_with_the_tp_degrees_they_divide(tmp_path):
    # Mixtral-8x7B (8 experts): EP 1, 2 and 4 with TP 2 and 4 give TP2, TP2 EP2, TP4, TP4 EP2, TP4 EP4; EP 4 does not
    # split a TP-2 group and is not paired with it.
    raw = copy.deepcopy(SMALL)
    raw.update(model="mixtral-8x7b")
    raw["run"]["num_requests"] = 60
    raw["search"].update(gpus=["h100-sxm"], tensor_parallel=[2, 4], expert_parallel=[1, 2, 4], policies=["paged"],
                         num_seeds=1, top_k=1)
    settings = plan_settings(raw)
    result = run_plan(raw, settings, backend="serial")
    names = sorted(o.candidate.name for o in result.outcomes)
    assert names == ["h100-sxm TP2 EP2 · paged", "h100-sxm TP2 · paged", "h100-sxm TP4 EP2 · paged",
                     "h100-sxm TP4 EP4 · paged", "h100-sxm TP4 · paged"]
    assert all(o.status == "feasible" for o in result.outcomes), [(o.candidate.name, o.reason) for o in result.outcomes]
    for o in result.outcomes:  # each candidate ran at its own split
        written = candidate_raw(raw, o.candidate)["hardware"]
        assert written["expert_parallel"] == o.candidate.expert_parallel
    frame = candidates_frame(result)
    assert sorted(frame["expert_parallel"]) == [1, 1, 2, 2, 4]
    rec = result.recommendation.candidate
    text = render_markdown(result)
    ep = f" (EP {rec.split_experts})" if rec.split_experts else ""
    assert f"at TP {rec.tensor_parallel}{ep} with policy paged" in text and "expert parallelism [1, 2, 4]" in text
    split = next(o for o in result.feasible if o.candidate.split_experts == 4)
    result.outcomes.remove(split)
    result.outcomes.insert(0, split)  # recommended: a candidate that gives each GPU whole experts
    assert "× h100-sxm at TP 4 (EP 4) with policy paged" in recommendation_text(result)
    assert Candidate("h100-sxm", 8, None, 1, 1).split_experts is None
    # --ep on the command line, and a degree no TP degree admits: kept once, excluded with validation's reason.
    only = plan_settings(raw, expert_parallel=[8], tensor_parallel=[2])
    [cand] = candidates(only)
    assert (cand.tensor_parallel, cand.expert_parallel) == (2, 8)
    outcome = search_candidate(CandidateTask(candidate_raw(raw, cand), cand, only))
    assert outcome.status == "excluded" and "expert_parallel" in outcome.reason


def test_without_expert_parallel_degrees_each_candidate_keeps_its_own():
    # A variant that sets EP keeps it (the planner's EP search is off), and a dense model's plan writes the columns
    # it always did.
    raw = copy.deepcopy(SMALL)
    raw.update(model="mixtral-8x7b", hardware={"gpu": "h100-sxm", "tensor_parallel": 4})
    raw["variants"] = {"tp": {}, "ep2": {"hardware": {"expert_parallel": 2}}}
    settings = plan_settings(raw, gpus=["h100-sxm"], tensor_parallel=[4])
    assert settings.expert_parallel is None
    by_policy = {c.policy: candidate_raw(raw, c)["hardware"] for c in
                 candidates(settings)}
    assert by_policy["ep2"]["expert_parallel"] == 2 and "expert_parallel" not in by_policy["tp"]
    dense = copy.deepcopy(SMALL)
    dense["search"].update(gpus=["a100-80gb"], tensor_parallel=[1], policies=["paged"], num_seeds=1, top_k=1)
    assert "expert_parallel" not in candidates_frame(run_plan(dense, plan_settings(dense), backend="serial"))


def test_plan_refuses_an_expert_parallel_degree_out_of_range(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    code = _run_cli("plan", str(path), "--backend", "serial", "-q", "--out", str(tmp_path / "o"), "--ep", "0")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--ep: 0 is not allowed" in err and err.count("\n") == 0
    assert not (tmp_path / "o").exists()


def test_a_runs_requests_scale_with_the_replicas_up_to_what_one_run_holds():
    from sim.tools.planner import _requests_for
    raw = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 10}}, "run": {"num_requests": 100_000}}
    assert _requests_for(raw, 8, 10.0, 60)["run"]["num_requests"] == 800_000  # each replica sees the count
    # 128 replicas would ask 12.8 million, which validation refused mid-plan: capped at a run's most
    assert _requests_for(raw, 128, 10.0, 60)["run"]["num_requests"] == MAX_NUM_REQUESTS
    assert _requests_for(raw, 1, 5000.0, 60)["run"]["num_requests"] == 300_000  # the window asks more: it rules
    trace = {"workload": {"arrival": {"kind": "trace", "path": "t.csv"}}, "run": {"num_requests": 100_000}}
    assert _requests_for(trace, 128, 10.0, 60)["run"]["num_requests"] == 100_000  # a trace replays as it is


def test_a_search_stops_at_the_highest_rate_one_run_holds(monkeypatch):
    """A search's ceiling (CEILING_MARGIN x the saturated rate) times search.min_window_s may ask for more requests
    than a run holds: each such run was refused and the candidate excluded ("run.num_requests"). The search now
    stops at the window's ceiling, and a pass there is a lower bound (rate, inf), said in the reason and the
    report, not the (inf, inf) of SLOs that hold at any rate."""
    import sim.tools.planner as planner
    from sim.views.plan_report import slo_margins
    cap_requests = 400  # stands in for the 10,000,000 a run holds: the TPOT-only plan's ceiling asks ~600
    monkeypatch.setattr(planner, "MAX_NUM_REQUESTS", cap_requests)
    raw = small_scenario({"name": "tpot-only", "cost_model": {"kind": "roofline"},
                          "workload": {"arrival": {"rate_per_s": 40}},
                          "slo": {"tpot_s": 0.2, "percentile": 90}, "run": {"num_requests": 150},
                          "search": {"gpus": ["a100-80gb"], "tensor_parallel": [1], "max_replicas": 4,
                                     "num_seeds": 1, "min_window_s": 5, "top_k": 1}})
    asked = []
    scenario_raw = planner.Evaluator.scenario_raw

    def recording(self, *args, **kwargs):
        out = scenario_raw(self, *args, **kwargs)
        asked.append(out["run"]["num_requests"])
        return out
    monkeypatch.setattr(planner.Evaluator, "scenario_raw", recording)
    result = run_plan(copy.deepcopy(raw), plan_settings(raw), backend="serial")
    (outcome,) = result.outcomes
    window_rate = cap_requests / 5
    assert CEILING_MARGIN * outcome.saturated_rate_per_replica > window_rate  # the window's ceiling is the lower
    assert outcome.status == "feasible", outcome.reason
    assert (outcome.max_rate_per_replica, outcome.failed_rate_per_replica) == (window_rate, math.inf)
    assert "at least" in outcome.reason and "search.min_window_s" in outcome.reason
    assert asked and max(asked) <= cap_requests
    (curve,) = result.curves
    assert curve.max_rate_per_s == window_rate and max(e.rate_per_s for e in curve.points) <= window_rate
    assert any(m["limit"] == "rate headroom (at least)" for m in slo_margins(result))


def test_a_run_that_meets_the_slos_is_run_again_until_its_arrivals_span_its_requests_lifetimes():
    from sim.tools.planner import Evaluation, steady_window
    ok = Evaluation(1, 10.0, 0, True, {"e2e_s_p99": 30.0})
    assert steady_window(ok, 4.0, 60.0) == 120.0  # 4 x 30 s
    assert steady_window(ok, 4.0, 100.0) == 200.0  # at least twice the last window
    assert steady_window(ok, 4.0, 120.0) is None  # spans the lifetimes
    assert steady_window(ok, 0.0, 60.0) is None  # off
    assert steady_window(Evaluation(1, 10.0, 0, False, {"e2e_s_p99": 30.0}), 4.0, 60.0) is None  # a miss
    # in a search: SMALL's 150 requests at 10 req/s span 15 s, less than 4 times their E2E p99
    raw = candidate_raw(SMALL, Candidate("a100-80gb", 1, "paged"))
    plain = Evaluator(raw, replace(plan_settings(SMALL), steady_state_lifetimes=0.0))(1, 10.0)
    steady = Evaluator(raw, plan_settings(SMALL))(1, 10.0)  # the default, 4
    assert plain.slo_met and steady.slo_met
    assert steady.metrics["num_finished"] >= 4 * plain.metrics["e2e_s_p99"] * 10.0 > plain.metrics["num_finished"]
    # Under TPOT limits alone a growing queue never misses them, and each longer window would ask for a longer one:
    # the window stays the scenario's
    tpot_only = copy.deepcopy(raw)
    tpot_only["slo"] = {"tpot_s": 0.05, "percentile": 90}
    assert Evaluator(tpot_only, plan_settings(SMALL))(1, 10.0).metrics["num_finished"] == plain.metrics["num_finished"]


def test_plan_prints_a_note_its_candidates_share_once(tmp_path, capsys):
    """The whole-step H200 profile prices both engines' candidates, each with its engine's CPU terms (two cost-model
    labels): the profile's own note is printed once, for every candidate."""
    raw = copy.deepcopy(SMALL)
    raw.pop("cost_model")
    raw["search"] = {**raw["search"], "gpus": ["h200"], "tensor_parallel": [1], "num_seeds": 1}
    raw["variants"] = {"vllm": {"engine": {"name": "vllm", "version": "0.11.0"}},
                       "sglang": {"engine": {"name": "sglang", "version": "0.5.3.post3"}}}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert _run_cli("plan", str(path), "--backend", "serial", "-q", "--out", str(tmp_path / "o")) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.count("cost model: whole-step profile fit:") == 1
    assert "note: every candidate: cost model: whole-step profile fit:" in text
