"""The verdict on every shipped scenario (scenarios/*.yaml), at its own size: the winner it names is the one the
rule stated in sim/views/verdict.py picks, computed here again from the summaries alone; every other variant
gets a reason; the report, the CLI and the dashboard show the same verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import expected_winners

from sim.api import load_scenario_set, make_workload, simulate
from sim.views.verdict import LEVEL_TOLERANCE, verdict_of

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
SHARED_TRACES = ROOT.parent / "shared" / "traces"


def run_all(path: Path):
    if "shared/traces" in path.read_text() and not SHARED_TRACES.is_dir():
        pytest.skip(f"{path.name} replays a trace from {SHARED_TRACES}, which is absent here")
    return [simulate(sc, make_workload(sc)) for _, sc in load_scenario_set(path).items()]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_the_verdict_names_the_winner_the_rule_picks_on_every_shipped_scenario(path):
    results = run_all(path)
    summaries = {r.name: r.summary for r in results}
    v = verdict_of(results)
    winners = expected_winners(summaries, LEVEL_TOLERANCE)
    assert [v.winner, *v.level_with] == winners, v.text()
    met = [n for n, s in summaries.items() if s.get("slo_met")]
    assert v.meeting == (met if any(s.get("slo_met") is not None for s in summaries.values()) else None)
    # Every variant that is not a winner gets one sentence, with a number in it.
    explained = [name for name, _ in v.why]
    assert set(explained) >= set(summaries) - set(winners)
    assert all(any(ch.isdigit() for ch in text) for _, text in v.why), v.why
    assert v.winner in v.headline or v.winner in v.decision
    assert v.priced_by.startswith("Priced by the ")


def test_the_quickstart_verdict_is_the_known_answer():
    v = verdict_of(run_all(ROOT / "scenarios" / "quickstart.yaml"))
    assert {v.winner, *v.level_with} == {"continuous+paged+chunked"}
    assert v.headline.startswith("3 of 5 variants meet the SLOs (p99 TTFT ≤ 2 s, p99 TPOT ≤ 0.1 s) at 28.1 req/s")
    why = dict(v.why)
    assert why["static+contiguous"].startswith("static batching waits for its longest answer: mean batch 63.6 but "
                                               "2,743 queued")
    assert "sustains 1.77 req/s of 28.1 req/s offered" in why["static+contiguous"]
    assert why["continuous+paged"].startswith("it trails continuous+paged+chunked on p99 TTFT")
    assert why["continuous+contiguous(max_len)"].startswith("contiguous KV reserves max_len per request up front")
    # no cost_model in the file: the shipped whole-step profile, named as the default choice
    assert "Priced by the calibrated + vllm-cudagraph overhead (default) cost model" in v.priced_by
