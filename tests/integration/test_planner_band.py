"""The planner with a band (issue 31): a candidate meets the SLOs only at the band's pessimistic edge, checked at
its fewest replicas; the plan says where a verdict flips inside the band. Known answers: a band without spread
changes nothing; a wide one needs more replicas than the point figures, and says so."""

from __future__ import annotations

import copy

import pytest
import yaml

from helpers import BAND_PLAN, one_error_line, servesim, set_band_residuals, small_scenario
from sim.bands import pessimistic_misses
from sim.config.schema import SLOSpec
from sim.tools.planner import plan_settings, run_plan
from sim.views.verdict import plan_verdict

PLAN = BAND_PLAN


def _residuals(tmp_path, monkeypatch, bias: float, noise: float) -> None:
    set_band_residuals(tmp_path, monkeypatch, bias, noise)


def _plan(**run):
    raw = copy.deepcopy(PLAN)
    raw["run"].update(run)
    result = run_plan(raw, plan_settings(raw), backend="serial")
    return result, result.outcomes[0]


def test_a_band_without_spread_gives_the_point_answer_and_no_flip(tmp_path, monkeypatch):
    _residuals(tmp_path, monkeypatch, 0.0, 0.0)
    _, point = _plan()
    result, banded = _plan(band=90, band_sources=["step_time"])
    assert point.status == banded.status == "feasible"
    assert banded.num_replicas == point.num_replicas and banded.band_flip == ""
    assert banded.band["replications"] == 19
    lo, hi = banded.band["slo_ttft_p90"]
    assert lo == hi  # every replication is the run itself
    assert "no candidate's verdict flips inside the band" in plan_verdict(result).decision
    assert "band" not in plan_verdict(_plan()[0]).decision


def test_a_wide_band_needs_more_replicas_and_says_where_the_verdict_flips(tmp_path, monkeypatch):
    _residuals(tmp_path, monkeypatch, 0.15, 0.1)
    _, point = _plan()
    result, banded = _plan(band=90, band_sources=["step_time"])
    n, k = point.num_replicas, banded.num_replicas
    assert banded.status == "feasible" and k > n
    assert banded.band_flip.startswith(f"{n} replicas meet the SLOs at the point figures, not at the band's "
                                       "pessimistic edge (p90 ")
    assert banded.band_flip.endswith(f"; {k} do")
    # the chosen deployment meets every limit at the upper edge
    assert banded.band["slo_ttft_p90"][1] <= 0.5 and banded.band["slo_tpot_p90"][1] <= 0.05
    assert pessimistic_misses(banded.band, SLOSpec(ttft_s=0.5, tpot_s=0.05, percentile=90)) == []
    verdict = plan_verdict(result)
    assert "the verdict flips inside the band for a100-80gb TP1 (" in verdict.decision
    # the point search itself is the same: only the confirmation ran the band
    assert banded.max_rate_per_replica == point.max_rate_per_replica


def test_a_band_no_replica_count_meets_makes_the_candidate_infeasible(tmp_path, monkeypatch):
    _residuals(tmp_path, monkeypatch, 0.15, 0.1)
    result, banded = _plan(band=90, band_sources=["step_time"])
    needed = banded.num_replicas
    raw = copy.deepcopy(PLAN)
    raw["run"].update(band=90, band_sources=["step_time"])
    raw["search"]["max_replicas"] = needed - 1
    capped = run_plan(raw, plan_settings(raw), backend="serial").outcomes[0]
    assert capped.status == "infeasible" and capped.num_replicas is None
    assert "none meets them at the 90% band's pessimistic edge" in capped.reason
    assert capped.reason == capped.band_flip


@pytest.mark.parametrize(("band", "slo", "want"), [
    ({"slo_ttft_p99": [0.1, 0.3], "replications": 19, "slo_met_replications": 19}, {"ttft_s": 0.5}, []),
    ({"slo_ttft_p99": [0.1, 0.6], "replications": 19, "slo_met_replications": 17}, {"ttft_s": 0.5},
     ["p99 TTFT upper edge 0.6 s > 0.5 s"]),
    ({"slo_ttft_p99": [0.1, 0.3], "replications": 19, "slo_met_replications": 18}, {"ttft_s": 0.5},
     ["SLOs met in 18 of 19 replications"]),
    ({"slo_ttft_p99": [0.1, 0.3], "slo_goodput_share": [0.85, 0.99], "replications": 19,
      "slo_met_replications": 10}, {"ttft_s": 0.5, "min_goodput_fraction": 0.9},
     ["goodput share lower edge 85.0% < 90%"]),
])
def test_pessimistic_misses_reads_the_upper_edge_of_latencies_and_the_lower_of_goodput(band, slo, want):
    assert pessimistic_misses(band, SLOSpec(**slo)) == want


def test_plan_band_out_of_range_is_one_line(tmp_path):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(PLAN))
    line = one_error_line(servesim("plan", path, "-q", "--band", "100", "--out", tmp_path / "out"))
    assert "run.band: 100.0 is not allowed; allowed: < 100" in line


def test_replications_stop_once_the_upper_edge_is_certainly_over_a_limit():
    from sim.bands import certain_miss, replicate
    from sim.config.files import validate_scenario
    spec = small_scenario({"slo": {"ttft_s": 1e-6, "tpot_s": 10.0}})
    spec["run"]["band"] = 90
    scenario = validate_scenario(spec)
    band, values = replicate(scenario, stop_when=certain_miss(scenario.slo))
    assert band is None and len(values["slo_ttft_p99"]) == 1  # k = 1 of 19: the first miss settles it
    spec["slo"]["ttft_s"] = 10.0  # no replication misses: all 19 run, and the band is whole
    scenario = validate_scenario(spec)
    band, values = replicate(scenario, stop_when=certain_miss(scenario.slo))
    assert band is not None and len(values["slo_ttft_p99"]) == 19 and pessimistic_misses(band, scenario.slo) == []


def test_the_band_is_confirmed_over_the_window_its_point_check_took(tmp_path, monkeypatch):
    # steady_state_lifetimes (the default, 4) lengthened the point check's window: a band over the shorter one
    # would confirm a deployment over a run where a late-growing queue had not shown yet
    import sim.bands
    _residuals(tmp_path, monkeypatch, 0.0, 0.0)
    simulated = []
    replicate = sim.bands.replicate

    def recording(scenario, **kwargs):
        simulated.append(scenario.run.num_requests)
        return replicate(scenario, **kwargs)

    monkeypatch.setattr(sim.bands, "replicate", recording)
    result, banded = _plan(band=90, band_sources=["step_time"])
    point = next(e for e in banded.evaluations
                 if e.num_replicas == banded.num_replicas and e.rate_per_s == result.settings.target_rate_per_s)
    assert point.metrics["window_s"] > result.settings.min_window_s  # the premise: the window was lengthened
    ran = sum(point.metrics[k] for k in ("num_finished", "num_unfinished", "num_rejected"))
    assert simulated == [ran]
