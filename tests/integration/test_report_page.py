"""The report page on the real quickstart (issue 32): the verdict first, plotly.js once, under the page budget,
latency axes that go logarithmic, time series per variant over its own makespan, downsampled, one colour per
variant, and tables grouped with the deciding metrics first. (The browser test checks the same page drawn.)"""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import plotly.offline
import pytest

from sim.api import load_scenario_set, make_workload, simulate
from sim.views.charts import CDF_POINTS, COLORS, PAGE_BUDGET_BYTES, PLOTLY_BUNDLE, TIME_BINS, axis_type, cdf_points
from sim.views.report import GROUPS, MAX_COLUMN_VARIANTS, figures, render_report, summary_table_html

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def quickstart():
    path = ROOT / "scenarios" / "quickstart.yaml"
    results = [simulate(sc, make_workload(sc)) for _, sc in load_scenario_set(path).items()]
    return results, render_report(results, "ServeSim comparison: quickstart", path.read_text())


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sections, self.tables = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs.get("id"))
        if tag == "table":
            self.tables.append(attrs.get("class", ""))


def test_the_quickstart_page_opens_with_the_verdict_and_stays_under_its_budget(quickstart):
    _, page = quickstart
    size = len(page.encode())
    assert size <= PAGE_BUDGET_BYTES, f"{size:,} bytes > {PAGE_BUDGET_BYTES:,}"
    parsed = _Page()
    parsed.feed(page)
    assert parsed.sections[:2] == ["verdict", "summary"]
    # the static batch's prefill steps (211k tokens) run past the H100 profile's measured 8,192: its cost model says so
    assert parsed.sections[2:] == ["latency", "timeseries", "kv", "cost-model-notes", "scenario"]
    notes = page.split('id="cost-model-notes"')[1].split("</section>")[0]
    assert "static+contiguous</h3>" in notes and "whole-step profile: steps measured up to 8,192 tokens" in notes
    assert page.count("Copyright 2012-") == 1  # plotly.js once, in the head
    assert not re.search(r"<script[^>]+src=", page)  # self-contained
    assert 'data-winner="continuous+paged+chunked"' in page


def test_the_vendored_plotly_bundle_matches_the_plotly_package():
    head = PLOTLY_BUNDLE.read_text()[:200]
    version = re.search(r"v(\d+)\.(\d+)\.(\d+)", head).groups()
    shipped = plotly.offline.get_plotlyjs_version()  # the bundle the plotly package would inline (4.8 MB)
    assert version[0] == shipped.split(".")[0], (head, shipped)
    assert (PLOTLY_BUNDLE.parent / "plotly-basic.LICENSE").read_text().startswith("MIT License")


def test_latency_axes_go_logarithmic_when_the_variants_span_more_than_a_decade(quickstart):
    results, _ = quickstart
    latency = dict(figures(results))["latency"]
    types = [latency.layout[f"xaxis{n if n > 1 else ''}"].type for n in (1, 2, 3)]
    assert types == ["log", "linear", "log"]  # TTFT 0.01-1,641 s and E2E span decades; TPOT does not
    assert axis_type([[0.5, 1.0], [2.0, 4.9]]) == "linear" and axis_type([[0.5], [5.1]]) == "log"
    for trace in latency.data:
        assert len(trace.x) <= CDF_POINTS + 1 and trace.x.dtype.name == "float32"
    # One colour per variant on every chart, in scenario order.
    colors = {r.name: COLORS[i] for i, r in enumerate(results)}
    for name, fig in figures(results):
        for trace in fig.data:
            if trace.name in colors:
                assert trace.line.color == colors[trace.name], (name, trace.name)


def test_time_series_are_small_multiples_over_each_variants_own_makespan(quickstart):
    results, _ = quickstart
    figs = dict(figures(results))
    ts, kv = figs["timeseries"], figs["kv"]
    for i, r in enumerate(results):
        end = max(float(r.steps["end_s"].max()), float(r.requests["finish_s"].max()))
        for axis in (3 * i + 1, 3 * i + 2, 3 * i + 3):
            assert ts.layout[f"xaxis{axis if axis > 1 else ''}"].range == pytest.approx((0, end))
        assert kv.layout[f"xaxis{i + 1 if i else ''}"].range == pytest.approx((0, end))
        mine = [t for t in ts.data if t.name == r.name]
        assert len(mine) == 3 and all(len(t.x) == TIME_BINS for t in mine)
    # The static variant's makespan is ~12x the others': on a shared axis they would fill its first 8%.
    ends = [ts.layout[f"xaxis{3 * i + 1 if i else ''}"].range[1] for i in range(len(results))]
    assert max(ends) / min(ends) > 10
    # The queue keeps its peak through the downsampling.
    static = next(t for t in ts.data if t.name == "static+contiguous" and t.yaxis == "y2")
    assert max(static.y) == results[0].summary["max_num_waiting"]


def test_the_cdf_keeps_the_extremes_and_is_denser_in_the_tail():
    import numpy as np
    values = np.arange(1, 10_001, dtype=float)
    x, y = cdf_points(values)
    assert x[0] == 1 and x[-1] == 10_000 and y[-1] == 1
    assert len(x) <= CDF_POINTS + 1 and (y[1:] > y[:-1]).all()
    assert (y > 0.99).sum() >= 20  # the p99 region is drawn, not two points
    small = cdf_points(np.array([3.0, 1.0, np.nan, 2.0]))
    assert small[0].tolist() == [1, 2, 3] and small[1][-1] == 1


def test_tables_group_the_metrics_and_turn_variants_into_rows_past_four(quickstart):
    results, page = quickstart
    assert len(results) > MAX_COLUMN_VARIANTS
    parsed = _Page()
    parsed.feed(summary_table_html(results))
    assert set(parsed.tables) == {"summary variants-as-rows"}
    captions = re.findall(r"<caption>([^<]+)</caption>", summary_table_html(results))
    assert captions[0] == GROUPS[0] and captions[-1] == "run"
    assert [c for c in captions if c in GROUPS] == [g for g in GROUPS if g in captions]  # in GROUPS order
    first = summary_table_html(results).split("</table>")[0]
    heads = re.findall(r"<th>([^<]+)</th>", first)
    assert heads[:5] == ["variant", "SLOs met", "goodput (req/s)", "requests meeting every SLO", "TTFT p99 (s)"]
    # Rows no variant has a value for are left out (no prefix caching, no speculation here).
    assert "prefix-cache hit rate" not in page and "drafted tokens accepted" not in page
    few = summary_table_html(results[:2])
    assert 'class="summary metrics-as-rows"' in few and few.count('<tr class="group">') >= 5
    label = "calibrated + vllm-cudagraph overhead (default)"  # no cost_model in the file: the default choice, named
    assert f"<tr><th>cost model</th><td>{label}</td><td>{label}</td></tr>" in few


def test_the_report_embeds_each_figure_once_with_fixed_ids(quickstart):
    _, page = quickstart
    for name in ("latency", "timeseries", "kv"):
        assert page.count(f'id="plot-{name}"') == 1
    calls = re.findall(r'Plotly\.newPlot\(\s*"plot-latency",\s*(\[.*?\]),\s*\{', page, re.S)
    assert calls and '"type":"log"' in page
    assert json.loads(calls[0])[0]["name"] == "static+contiguous"


def test_a_variant_naming_an_engine_shows_it_and_what_its_preset_approximates():
    from sim.config.files import validate_scenario
    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
           "engine": {"name": "vllm", "version": "0.9.2", "command": "vllm serve m --port 8000"},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5.0},
                        "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 20}},
           "run": {"num_requests": 30}}
    sc = validate_scenario(raw)
    other = validate_scenario({**raw, "engine": {"name": "vllm", "version": "0.9.2", "command": "vllm serve m"}})
    results = [simulate(sc, make_workload(sc)), simulate(other, make_workload(other))]
    results[1].name = "other"
    page = render_report(results, "engine", "")
    parsed = _Page()
    parsed.feed(page)
    assert "engine-notes" in parsed.sections
    assert "<th>serving engine</th><td>vllm 0.9.2</td>" in page
    for note in sc.engine.notes:  # every note, escaped, once per variant whose notes differ
        shared = note in other.engine.notes
        assert page.count(f"<li>{html.escape(note)}</li>") == (2 if shared else 1), note
    assert any("--port 8000: accepted, no effect" in n for n in sc.engine.notes)
    assert not any("--port 8000" in n for n in other.engine.notes)  # its own notes, under its own heading
    assert f"<h3>vllm 0.9.2: {html.escape(results[0].name)}</h3>" in page and "<h3>vllm 0.9.2: other</h3>" in page
