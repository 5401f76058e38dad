"""Where bands show (issue 31): a banded run keeps each replication's curves (`extras["band_curves"]`, never in
summary.json), and its report draws them as ribbons behind the CDFs and the time series, and its headline
figures as bars with error bars; a run without a band draws none of them. The same figures are the dashboard's
(sim/views/report.py `figures`; tests/ui/test_app.py drives the page)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helpers import servesim, small_scenario
from sim.band_curves import CDF_PROBS, SERIES, TIME_BINS, curves_of, ribbon, ribbon_of
from sim.bands import simulate_with_band
from sim.config.files import validate_scenario
from sim.run import simulate
from sim.views.charts import cdf_points
from sim.views.report import figures, render_report


def _scenario(**run):
    return validate_scenario(small_scenario(run=run))


@pytest.fixture(scope="module")
def banded():
    return simulate_with_band(_scenario(band=90))


def _ribbon_traces(fig):
    return [t for t in fig.data if t.legendgroup == "90% band" and t.showlegend is False]


def test_a_banded_run_keeps_each_replications_curves_small(banded):
    curves = banded.extras["band_curves"]
    assert len(curves) == banded.summary["band"]["replications"] == 19
    for c in curves:
        assert set(c["cdf"]) == {"ttft_s", "tpot_s", "e2e_s"} and set(c["series"]) == set(SERIES)
        assert all(a.shape == CDF_PROBS.shape and a.dtype == np.float32 for a in c["cdf"].values())
        assert all(a.shape == (TIME_BINS,) and a.dtype == np.float32 for a in c["series"].values())
    # a few thousand floats a replication, not its records
    assert sum(a.nbytes for c in curves for part in ("cdf", "series") for a in c[part].values()) < 19 * 8_000
    # the replications differ (other workloads, other draws)
    assert len({c["makespan_s"] for c in curves}) > 1


def test_a_runs_curves_are_the_ones_its_report_draws():
    point = simulate(_scenario(num_requests=400))  # more finished requests than CDF_POINTS: read at the grid
    c = curves_of(point)
    x, _ = cdf_points(point.requests.loc[point.requests["finished"], "ttft_s"].to_numpy())
    np.testing.assert_array_equal(c["cdf"]["ttft_s"], x)
    ts = dict(figures([point]))["timeseries"]
    lines = [t for t in ts.data if t.name == point.name]
    assert len(lines) == len(SERIES)
    for series, line in zip(SERIES, lines):
        np.testing.assert_array_equal(c["series"][series], line.y)


def test_the_report_draws_ribbons_and_error_bars_only_with_a_band(banded):
    plain = simulate(_scenario())
    band = banded.summary["band"]
    figs = dict(figures([banded]))
    assert list(figs) == ["band", "latency", "timeseries", "kv"]
    latency, ts = figs["latency"], figs["timeseries"]
    assert len(_ribbon_traces(latency)) == 2 * 3 and len(_ribbon_traces(ts)) == 2 * 3  # lower + upper per panel
    assert sum(t.name == "90% band" and t.showlegend for t in latency.data) == 1  # the legend names it once
    for fig in (latency, ts):
        traces = _ribbon_traces(fig)
        assert [t.fill for t in traces] == ["none", "tonexty"] * 3
        assert all(t.fillcolor == "rgba(31,119,180,0.2)" for t in traces)  # the variant's colour, translucent
        assert all("edge of the 90% band" in t.hovertemplate for t in traces)
        assert all(t.x.dtype.name == "float32" and t.y.dtype.name == "float32" for t in traces)
    # the ribbon's edges are the replications' k-th smallest and largest (k = 1 of 19)
    want = ribbon(banded.extras["band_curves"], 1)
    lo, hi = _ribbon_traces(latency)[:2]
    np.testing.assert_array_equal(lo.x, want["cdf"]["ttft_s"][0].astype(np.float32))
    np.testing.assert_array_equal(hi.x, want["cdf"]["ttft_s"][1].astype(np.float32))
    np.testing.assert_array_equal(lo.y, CDF_PROBS.astype(np.float32))
    assert ribbon_of(banded)["label"] == "90% band"
    # every ribbon point holds all 19 replications (k = 1)
    for name, (lo, hi) in want["series"].items():
        for c in banded.extras["band_curves"]:
            ok = ~np.isnan(lo)
            assert (lo[ok] <= c["series"][name][ok]).all() and (c["series"][name][ok] <= hi[ok]).all(), name
    # bars with asymmetric error bars from summary["band"]: hi − point up, point − lo down
    bars = figs["band"].data
    assert [b.type for b in bars] == ["bar"] * 5
    ttft = next(b for b in bars if b.name == "TTFT p99 (s)")
    point, (lo, hi) = banded.summary["ttft_s_p99"], band["ttft_s_p99"]
    assert ttft.error_y.symmetric is False
    assert ttft.error_y.array[0] == pytest.approx(max(0.0, hi - point))
    assert ttft.error_y.arrayminus[0] == pytest.approx(max(0.0, point - lo))

    page = render_report([banded], "banded")
    assert '"fill":"tonexty"' in page and '"error_y"' in page and '<section id="band">' in page
    assert page.count('"name":"90% band"') > 12
    bare = render_report([plain], "plain")
    assert '"fill":"tonexty"' not in bare and '"error_y"' not in bare and "90% band" not in bare
    assert '<section id="band">' not in bare
    assert list(dict(figures([plain]))) == ["latency", "timeseries", "kv"]


def test_two_runs_of_one_banded_scenario_keep_identical_curves(banded):
    again = simulate_with_band(_scenario(band=90))
    one, two = banded.extras["band_curves"], again.extras["band_curves"]
    assert len(one) == len(two)
    for a, b in zip(one, two):
        assert a["makespan_s"] == b["makespan_s"]
        for part in ("cdf", "series"):
            assert a[part].keys() == b[part].keys()
            for name in a[part]:
                np.testing.assert_array_equal(a[part][name], b[part][name])


def test_an_edges_band_draws_the_min_and_max_of_its_two_runs():
    result = simulate_with_band(_scenario(band=90, band_method="edges", band_sources=["step_time"]))
    curves = result.extras["band_curves"]
    assert result.summary["band"]["method"] == "edges" and len(curves) == 2
    band = ribbon_of(result)
    assert band["k"] == 1
    lo, hi = band["cdf"]["tpot_s"]
    np.testing.assert_array_equal(lo, np.fmin(curves[0]["cdf"]["tpot_s"], curves[1]["cdf"]["tpot_s"]))
    np.testing.assert_array_equal(hi, np.fmax(curves[0]["cdf"]["tpot_s"], curves[1]["cdf"]["tpot_s"]))


def test_the_cli_report_has_ribbons_and_summary_json_has_no_curves(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(json.dumps(small_scenario(run={"band": 90})))
    done = servesim("run", path, "-q", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["band"]["replications"] == 19 and "band_curves" not in json.dumps(summary)
    page = (tmp_path / "out" / "report.html").read_text()
    assert '"fill":"tonexty"' in page and '"error_y"' in page
