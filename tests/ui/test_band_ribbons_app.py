"""The dashboard draws a band as the report does (issue 31): ticking the sidebar's band runs the variants through
`simulate_with_band`, and the page's charts (sim/views/report.py `figures`, the report's own) gain the bars with
error bars and the ribbons."""

from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("streamlit", reason="the dashboard needs the ui extra (streamlit)")

from helpers import small_scenario  # noqa: E402
from test_app import chart_titles, charts, started, upload  # noqa: E402

SMALL = small_scenario({"name": "small", "variants": {"paged": {}, "chunked": {"scheduler": {
    "chunked_prefill": True, "max_num_batched_tokens": 512}}}})


def _fills(at) -> dict[str, list]:
    return {spec["layout"]["title"]["text"]: [t.get("fill") for t in spec["data"]]
            for spec in (json.loads(c.proto.spec) for c in charts(at))}


def test_the_band_checkbox_adds_error_bars_and_ribbons():
    at = upload(started(), "small.yaml", yaml.safe_dump(SMALL, sort_keys=False).encode())
    assert not at.exception and not at.error
    assert at.checkbox(key="1.run.band").value is False
    assert "Headline figures and their band" not in chart_titles(at)
    assert "tonexty" not in _fills(at)["Latency CDFs"]

    at.checkbox(key="1.run.band").check()
    at.run()
    assert not at.exception and not at.error
    assert chart_titles(at)[0] == "Headline figures and their band"
    bars = json.loads(charts(at)[0].proto.spec)["data"]
    assert all(b["type"] == "bar" and b["error_y"]["symmetric"] is False for b in bars)
    fills = _fills(at)
    assert fills["Latency CDFs"].count("tonexty") == 2 * 3  # two variants, three panels
    assert fills["Over time"].count("tonexty") == 2 * 3
    assert "run:\n  seed: 0\n  num_requests: 20\n  band: 90" in at.code[0].value  # the download keeps it
