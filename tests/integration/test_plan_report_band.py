"""The plan's outputs with a band (issue 31, item 3): candidates.csv, plan.md and report.html list the candidates
whose verdict flips inside the band, with each candidate's band edges of the SLO figures; without a band they are
as before."""

from __future__ import annotations

import copy
import html

import pandas as pd
import pytest

from helpers import BAND_PLAN, set_band_residuals
from sim.tools.planner import plan_settings, run_plan
from sim.views.plan_report import write_plan_outputs

PLAN = {**BAND_PLAN, "name": "plan-band-report"}


@pytest.fixture
def residuals(tmp_path, monkeypatch):
    def set_sigmas(bias: float, noise: float) -> None:
        set_band_residuals(tmp_path, monkeypatch, bias, noise)
    return set_sigmas


def _outputs(tmp_path, **run):
    raw = copy.deepcopy(PLAN)
    raw["run"].update(run)
    result = run_plan(raw, plan_settings(raw), backend="serial")
    out = tmp_path / "out"
    write_plan_outputs(result, out)
    return (result.outcomes[0], pd.read_csv(out / "candidates.csv", keep_default_na=False),
            (out / "plan.md").read_text(), (out / "report.html").read_text())


def test_a_flip_inside_the_band_is_listed_in_every_output_with_the_band_edges(tmp_path, residuals):
    residuals(0.15, 0.1)
    outcome, csv, md, page = _outputs(tmp_path, band=90, band_sources=["step_time"])
    assert outcome.band_flip  # the point figures' replicas miss at the band's pessimistic edge
    row = csv.iloc[0]
    assert row["band_flip"] == outcome.band_flip
    for metric in ("ttft", "tpot"):
        lo, hi = outcome.band[f"slo_{metric}_p90"]
        assert float(row[f"{metric}_p90_s_lo"]) == pytest.approx(lo) and float(row[f"{metric}_p90_s_hi"]) == \
            pytest.approx(hi)
    assert int(row["band_replications"]) == 19
    assert int(row["band_slo_met_replications"]) == outcome.band["slo_met_replications"]
    section = md.split("## Verdict flips inside the band", 1)[1].split("\n## ", 1)[0]
    assert "The verdict flips inside the band for 1 of 1 candidates: a100-80gb TP1: " in section
    assert "| candidate | status | num_replicas | p90 TTFT band (s) | p90 TPOT band (s) | SLOs met in |" in section
    assert '<section id="band"><h2>Verdict flips inside the band</h2>' in page
    assert html.escape(outcome.band_flip) in page


def test_a_band_that_flips_nothing_says_so(tmp_path, residuals):
    residuals(0.0, 0.0)
    outcome, csv, md, page = _outputs(tmp_path, band=90, band_sources=["step_time"])
    assert outcome.band_flip == "" and csv.iloc[0]["band_flip"] == ""
    assert "No candidate's verdict flips inside the band." in md
    # the seed spread counts the point figures' replicas: said under a band, not without one
    assert "These counts are the point figures'" in md.split("## Uncertainty over seeds", 1)[1]
    lo, hi = outcome.band["slo_ttft_p90"]
    assert float(csv.iloc[0]["ttft_p90_s_lo"]) == pytest.approx(lo) == pytest.approx(hi)


def test_without_a_band_the_outputs_have_no_band_columns_or_section(tmp_path):
    _, csv, md, page = _outputs(tmp_path)
    assert not [c for c in csv.columns if c.startswith("band") or c.endswith(("_lo", "_hi"))]
    assert "Verdict flips inside the band" not in md and 'id="band"' not in page
    assert "These counts are the point figures'" not in md
