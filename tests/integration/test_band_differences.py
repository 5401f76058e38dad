"""The band of a difference (issue 31): B − A per replication with common random numbers, in `compare --band`
and the verdict. Known answers: identical variants give exactly [0, 0]; a strictly slower GPU on the same
requests is slower across the whole band."""

import json

import pytest
import yaml

from helpers import servesim, small_scenario
from sim.bands import difference_bands, pair_differences, simulate_with_band
from sim.config.files import validate_scenario
from sim.views.verdict import Entry, decide


def _banded(name: str, changes: dict | None = None, **run) -> object:
    spec = small_scenario(changes)
    spec["name"] = name
    spec["run"].update({"band": 90, **run})
    return validate_scenario(spec)


def _pair(changes_b: dict | None = None, **run_b):
    workloads: dict = {}
    a = simulate_with_band(_banded("a"), workloads=workloads)
    b = simulate_with_band(_banded("b", changes_b, **run_b), workloads=workloads)
    return a, b, workloads


def test_identical_variants_differ_by_exactly_zero_in_every_replication():
    a, b, workloads = _pair()
    assert len(workloads) == 19  # one workload per replication, shared by both variants
    table = difference_bands([a, b], "a")
    rows = table["variants"]["b"]
    assert table["reference"] == "a" and table["not_comparable"] == {}
    assert "ttft_s_p99" in rows and "goodput_rps" in rows
    for key, row in rows.items():
        assert row["band"] == [0.0, 0.0], key
        assert row["point"] == 0.0 and row["reading"] == "identical in every replication", key
    # while each variant's own band is wide: the difference removes what they share
    lo, hi = a.summary["band"]["e2e_s_p99"]
    assert lo < hi


def test_a_strictly_slower_gpu_is_slower_across_the_band():
    a, b, _ = _pair({"hardware": {"gpu": "a100-80gb"}})
    rows = difference_bands([a, b], "a")["variants"]["b"]
    for key in ("ttft_s_p50", "ttft_s_p99", "tpot_s_p50", "tpot_s_p99", "e2e_s_p50", "e2e_s_p99"):
        lo, hi = rows[key]["band"]
        assert 0 < lo <= hi, key
        assert rows[key]["reading"] == "b slower across the band"
        assert rows[key]["point"] > 0
    # the offered load is the same requests in both: exactly no difference
    assert rows["offered_rps"]["band"] == [0.0, 0.0]
    # the other way round: the same band, negated
    pairs = pair_differences([a, b])
    for key, (lo, hi) in pairs[("a", "b")].items():
        assert pairs[("b", "a")][key] == [-hi, -lo] or (lo, hi) == (0.0, 0.0), key


def test_variants_on_other_replications_are_not_differenced():
    a, b, _ = _pair(seed=1)
    table = difference_bands([a, b], "a")
    assert table["variants"] == {} and table["not_comparable"] == {"b": "run.seed differs (0 vs 1)"}
    assert pair_differences([a, b]) == {}


def _entry(name: str, ttft_p99: float) -> Entry:
    return Entry(name, {"goodput_rps": 5.0, "ttft_s_p99": ttft_p99, "tpot_s_p99": 0.01, "e2e_s_p99": 1.0,
                        "throughput_rps": 5.0, "slo_met": None})


@pytest.mark.parametrize(("band", "words"), [
    ((0.02, 0.3), "The margin holds across the band: b − a on p99 TTFT is [0.02, 0.3 s]."),
    ((-0.05, 0.3), "That margin is inside the band: b − a on p99 TTFT is [-0.05, 0.3 s], which holds 0, so the "
                   "order could flip."),
])
def test_the_verdict_says_whether_the_margin_holds_across_the_band(band, words):
    entries = [_entry("a", 1.0), _entry("b", 1.2)]  # a wins on TTFT (20% lower, outside the 2% tolerance)
    plain = decide(entries)
    assert plain.winner == "a" and "band" not in plain.decision
    banded = decide(entries, differences={("a", "b"): {"ttft_s_p99": band}})
    assert banded.winner == "a"
    assert banded.decision == plain.decision + " " + words  # one sentence added, the rest as without a band


def test_compare_with_a_band_prints_and_writes_the_difference_bands(tmp_path):
    spec = small_scenario()
    spec["variants"] = {"h100": {}, "same": {}, "a100": {"hardware": {"gpu": "a100-80gb"}}}
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = servesim("compare", path, "-q", "--band", "90", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    table = json.loads((tmp_path / "out" / "band_differences.json").read_text())
    assert table["reference"] in ("h100", "same") and table["level"] == 0.9 and table["replications"] == 19
    other = "same" if table["reference"] == "h100" else "h100"
    assert table["variants"][other]["ttft_s_p99"]["band"] == [0.0, 0.0]
    lo, hi = table["variants"]["a100"]["ttft_s_p99"]["band"]
    assert 0 < lo <= hi
    out = " ".join(done.stdout.split())  # as one line: the terminal wraps long ones
    assert f"band of each difference from {table['reference']} (90%, 19 replications" in out
    assert f"TTFT p99: a100 − {table['reference']} = +" in out and "a100 slower across the band" in out
    assert "identical in every replication" in out
    assert "The margin holds across the band" in out
    # the report's verdict says it too
    assert "The margin holds across the band" in (tmp_path / "out" / "report.html").read_text()
