"""What a run's seed draws (sim/run.py seed_draws), checked against the runs themselves: where it says nothing, two
seeds give the same records; where it names a draw, they differ. The planner does not repeat a run that draws
nothing under more seeds, and says so."""

from __future__ import annotations

import copy

import pytest
from helpers import small_scenario

from sim.config.files import validate_scenario
from sim.run import seed_draws, simulate
from sim.tools.planner import plan_settings, run_plan
from sim.views.plan_report import SEEDS_DRAW_NOTHING, render_markdown

FIXED = {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}


def write_trace(folder, rows: int = 40):
    path = folder / "t.csv"
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"2023-11-16 18:15:{i * 0.05:09.6f},{200 + 37 * i % 900},{20 + 13 * i % 120}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def cases(folder) -> dict[str, tuple[dict, tuple[str, ...]]]:
    trace = write_trace(folder)
    return {
        "trace with its lengths": ({"workload": {"arrival": {"kind": "trace", "path": trace},
                                                 "lengths": {"kind": "trace"}}}, ()),
        "burst of fixed lengths": ({"workload": {"arrival": {"kind": "burst"}, "lengths": FIXED}}, ()),
        "constant rate, listed lengths": ({"workload": {"arrival": {"kind": "constant", "rate_per_s": 20},
                                                        "lengths": {"kind": "listed", "input_tokens": [50, 300, 90],
                                                                    "output_tokens": [5, 30, 12]}}}, ()),
        "trace, round robin over 2": ({"workload": {"arrival": {"kind": "trace", "path": trace},
                                                    "lengths": {"kind": "trace"}},
                                       "hardware": {"num_replicas": 2, "router": "round_robin"}}, ()),
        "poisson": ({"workload": {"arrival": {"kind": "poisson", "rate_per_s": 20}, "lengths": FIXED}},
                    ("arrival times",)),
        "trace, sampled lengths": ({"workload": {"arrival": {"kind": "trace", "path": trace},
                                                 "lengths": {"kind": "uniform", "input_min": 10, "input_max": 900,
                                                             "output_min": 2, "output_max": 90}}},
                                   ("request lengths",)),
        "trace, random router over 2": ({"workload": {"arrival": {"kind": "trace", "path": trace},
                                                      "lengths": {"kind": "trace"}},
                                         "hardware": {"num_replicas": 2, "router": "random"}},
                                        ("the random router's choices",)),
        "burst, speculation": ({"workload": {"arrival": {"kind": "burst"}, "lengths": FIXED},
                                "speculation": {"num_speculative_tokens": 3, "draft_cost_ratio": 0.1,
                                                "acceptance": {"kind": "fixed", "alpha": 0.7}}},
                               ("speculative acceptance",)),
        "burst, shared prefixes": ({"workload": {"arrival": {"kind": "burst"}, "lengths": FIXED,
                                                 "prefix": {"kind": "shared_system_prompt", "tokens": 256,
                                                            "fraction": 0.5, "num_prompts": 3}},
                                    "kv_cache": {"enable_prefix_caching": True}},
                                   ("shared prefixes",)),
    }


def scenario(changes: dict, seed: int):
    raw = small_scenario(copy.deepcopy(changes))
    raw["workload"] = copy.deepcopy(changes["workload"])
    raw["run"] = {"seed": seed, "num_requests": 40}
    return validate_scenario(raw)


@pytest.mark.parametrize("name", [
    "trace with its lengths", "burst of fixed lengths", "constant rate, listed lengths", "trace, round robin over 2",
    "poisson", "trace, sampled lengths", "trace, random router over 2", "burst, speculation",
    "burst, shared prefixes"])
def test_what_the_seed_draws_is_what_moves_the_run(tmp_path, name):
    changes, expected = cases(tmp_path)[name]
    first, second = scenario(changes, 0), scenario(changes, 1)
    assert seed_draws(first) == expected
    a, b = simulate(first), simulate(second)
    same = a.requests.equals(b.requests) and a.summary == b.summary
    assert same == (not expected), (name, a.summary.get("ttft_s_p99"), b.summary.get("ttft_s_p99"))


def test_a_plan_whose_run_draws_nothing_runs_one_seed_and_says_why(tmp_path):
    raw = small_scenario({"name": "plan-trace", "slo": {"ttft_s": 0.5, "tpot_s": 0.05, "percentile": 90},
                          "search": {"gpus": ["a100-80gb"], "tensor_parallel": [1], "max_replicas": 4,
                                     "num_seeds": 3, "min_window_s": 5, "top_k": 1}})
    raw["workload"] = {"arrival": {"kind": "trace", "path": write_trace(tmp_path, 200)}, "lengths": {"kind": "trace"}}
    raw["run"] = {"seed": 0}
    result = run_plan(copy.deepcopy(raw), plan_settings(raw, rate=30), backend="serial")
    assert result.recommendation is not None
    assert result.seeds_draw_nothing and [s.seed for s in result.seeds] == [0]
    page = render_markdown(result)
    assert SEEDS_DRAW_NOTHING in page and "replays the trace's requests" in page
    raw["workload"]["lengths"] = {"kind": "uniform", "input_min": 100, "input_max": 900, "output_min": 5,
                                  "output_max": 60}  # the seed draws the lengths: repeated as asked
    result = run_plan(copy.deepcopy(raw), plan_settings(raw, rate=30), backend="serial")
    assert not result.seeds_draw_nothing and [s.seed for s in result.seeds] == [0, 1, 2]
    assert SEEDS_DRAW_NOTHING not in render_markdown(result)


def test_a_band_says_what_its_workload_source_draws():
    from sim.views.report import band_note
    summary = {"band": {"level": 0.9, "replications": 19, "sources": ["workload", "step_time"]}}
    assert band_note("a", summary) == "band: a: 90% over 19 replications drawing workload, step_time"
    assert band_note("a", summary, ()) == ("band: a: 90% over 19 replications drawing workload (nothing: every seed "
                                           "runs the same requests the same way), step_time")
    assert band_note("a", summary, ("arrival times", "request lengths")) == (
        "band: a: 90% over 19 replications drawing workload (arrival times, request lengths), step_time")
    summary["band"]["sources"] = ["step_time"]
    assert band_note("a", summary, ()) == "band: a: 90% over 19 replications drawing step_time"
