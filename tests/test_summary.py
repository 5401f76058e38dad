"""The summary of a run is one dict computed in sim.results: its keys, order, types and values are pinned.

The fixture was written by the code before the summary moved into sim/results.py (prefix caching,
speculation, two replicas, a goodput SLO), so a refactor that changes any number fails here.
"""

import json
import math
from pathlib import Path

from sim.config.files import validate_scenario
from sim.run import simulate

FIXTURE = Path(__file__).parent / "fixtures" / "summary" / "prefix_speculation.json"


def test_summary_of_a_prefix_caching_speculative_run_is_unchanged():
    pinned = json.loads(FIXTURE.read_text())
    summary = simulate(validate_scenario(pinned["scenario"])).summary
    assert list(summary) == list(pinned["summary"])
    assert {k: type(v).__name__ for k, v in summary.items()} == pinned["types"]
    for key, expected in pinned["summary"].items():
        value = summary[key]
        same = value == expected or (isinstance(expected, float) and math.isnan(expected) and math.isnan(value))
        assert same, f"{key}: {value!r} != pinned {expected!r}"
