"""The verdict (sim/views/verdict.py) on hand-built summaries with known answers: the rule, each diagnosis, the
band-aware wording, what priced the runs, and the capacity plan's verdict."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from sim.views.verdict import (
    DIAGNOSES,
    LEVEL_TOLERANCE,
    Entry,
    Limits,
    criteria_of,
    decide,
    diagnose,
    entry_of,
    plan_verdict,
    priced_by,
)

LIMITS = Limits(ttft_s=2.0, tpot_s=0.1, percentile=99)


def summary(**changes) -> dict:
    """A healthy continuous+paged run at 28 req/s that meets p99 TTFT <= 2 s and p99 TPOT <= 0.1 s."""
    s = {"num_requests": 3000, "num_finished": 3000, "num_unfinished": 0, "num_rejected": 0,
         "offered_rps": 28.1, "throughput_rps": 21.36, "goodput_rps": 21.36, "slo_fraction_ok": 1.0,
         "ttft_s_p99": 0.061, "tpot_s_p99": 0.0144, "e2e_s_p99": 25.4, "slo_ttft_p99": 0.061, "slo_ttft_met": True,
         "slo_tpot_p99": 0.0144, "slo_tpot_met": True, "slo_met": True, "mean_batch_size": 82.9,
         "max_num_waiting": 0, "queueing_s_mean": 0.0068, "preemptions": 0, "kv_token_share": 0.99,
         "kv_token_fraction": 0.106, "kv_reserved_fraction": 0.0, "kv_internal_fraction": 0.0015}
    s.update(changes)
    return s


STATIC = summary(throughput_rps=1.69, goodput_rps=0.00056, slo_fraction_ok=0.0003, ttft_s_p99=1641.0,
                 slo_ttft_p99=1641.0, slo_ttft_met=False, slo_met=False, e2e_s_p99=1670.0, mean_batch_size=63.55,
                 max_num_waiting=2743, queueing_s_mean=759.2, kv_token_share=0.11, kv_token_fraction=0.0625,
                 kv_internal_fraction=0.49)
MAX_LEN = summary(throughput_rps=20.77, goodput_rps=11.25, slo_fraction_ok=0.54, ttft_s_p99=5.443, slo_ttft_p99=5.443,
                  slo_ttft_met=False, slo_met=False, e2e_s_p99=26.96, mean_batch_size=79.73, max_num_waiting=139,
                  queueing_s_mean=1.737, kv_token_share=0.116, kv_token_fraction=0.101, kv_reserved_fraction=0.072,
                  kv_internal_fraction=0.582)


def quickstart_like() -> list[Entry]:
    return [Entry("static", STATIC, LIMITS, "static", "contiguous", "max_len", "recompute", "roofline", "python (the "
                  "StaticScheduler)"),
            Entry("contiguous", MAX_LEN, LIMITS, "continuous", "contiguous", "max_len", "recompute", "roofline",
                  "python (the ContiguousKVManager)"),
            Entry("paged", summary(), LIMITS, "continuous", "paged", None, "recompute", "roofline", "compiled"),
            Entry("chunked", summary(ttft_s_p99=0.0605, slo_ttft_p99=0.0605), LIMITS, "continuous", "paged", None,
                  "recompute", "roofline", "compiled")]


def test_the_slo_meeting_variants_tie_and_the_reasons_are_read_off_the_summaries():
    v = decide(quickstart_like())
    assert v.meeting == ["paged", "chunked"]
    assert v.winner == "chunked" and v.level_with == ["paged"]  # level on everything; first by exact values
    assert v.headline.startswith("2 of 4 variants meet the SLOs (p99 TTFT ≤ 2 s, p99 TPOT ≤ 0.1 s) at 28.1 req/s "
                                 "offered: paged and chunked, 21.4 req/s goodput each.")
    assert "level (within 2%) with paged" in v.decision
    # The margin is read against the best of the rest, which misses the SLOs.
    assert ("Ahead of contiguous (which misses the SLOs) on goodput 21.4 vs 11.2 req/s (1.9×), and p99 TTFT 0.0605 "
            "vs 5.44 s (90× lower)") in v.decision
    why = dict(v.why)
    assert why["static"].startswith("static batching waits for its longest answer: mean batch 63.5 but 2,743 "
                                    "queued, p99 TTFT 1,641 s; it sustains 1.69 req/s of 28.1 req/s offered")
    assert why["contiguous"].startswith("contiguous KV reserves max_len per request up front: token states fill "
                                        "only 12% of the KV memory in use (65% reserved but unused)")
    assert "139 queued" in why["contiguous"]
    assert v.ranking == ["chunked", "paged", "contiguous", "static"]


def test_priced_by_names_the_cost_model_once_and_the_engine_cores_per_group():
    text = priced_by(quickstart_like())
    assert text.startswith("Priced by the roofline cost model; simulated by the Python engine core (not compiled: the "
                           "StaticScheduler) for static;")
    assert "the compiled engine core (numba) for paged and chunked" in text
    same = [Entry("a", summary(), cost_model="measured (AIConfigurator h100_sxm vllm 0.24.0)", engine="compiled"),
            Entry("b", summary(), cost_model="measured (AIConfigurator h100_sxm vllm 0.24.0)", engine="compiled")]
    assert priced_by(same) == ("Priced by the measured (AIConfigurator h100_sxm vllm 0.24.0) cost model; simulated by "
                               "the compiled engine core (numba).")
    assert priced_by([Entry("a", summary())]) == ""


def test_goodput_within_the_tolerance_is_level_and_ttft_decides():
    a = Entry("a", summary(goodput_rps=100.0, slo_ttft_p99=1.0))
    b = Entry("b", summary(goodput_rps=100.0 * (1 - LEVEL_TOLERANCE / 2), slo_ttft_p99=0.5))
    v = decide([a, b])
    assert v.winner == "b" and v.level_with == []
    assert v.decision == "Winner: b. Ahead of a on p99 TTFT 0.5 vs 1 s (2× lower)."
    assert "it trails b on p99 TTFT 1 vs 0.5 s" in dict(v.why)["a"]
    # 10% apart on goodput: goodput decides, whatever the latencies.
    c = Entry("c", summary(goodput_rps=90.0, slo_ttft_p99=0.1))
    assert decide([a, c]).winner == "a"


def test_bands_that_overlap_are_within_the_band():
    a = Entry("a", summary(goodput_rps=100.0, slo_ttft_p99=1.0))
    b = Entry("b", summary(goodput_rps=90.0, slo_ttft_p99=0.5))
    assert decide([a, b]).winner == "a"  # no bands: 10% apart
    bands = {"a": {"goodput_rps": (95.0, 105.0)}, "b": {"goodput_rps": (85.0, 96.0)}}
    v = decide([a, b], bands=bands)
    assert v.winner == "b" and "within the band" in v.rule
    apart = {"a": {"goodput_rps": (99.0, 101.0)}, "b": {"goodput_rps": (89.0, 91.0)}}
    assert decide([a, b], bands=apart).winner == "a"
    tied = decide([a, Entry("b", summary(goodput_rps=100.0, slo_ttft_p99=1.0))],
                  bands={"a": {"goodput_rps": (90, 110)}, "b": {"goodput_rps": (90, 110)}})
    assert tied.level_with == ["b"] and "within the band with b" in tied.decision


def test_when_none_meets_the_slos_the_closest_serves_the_most_requests_within_them():
    v = decide([Entry("static", STATIC, LIMITS, "static"), Entry("contiguous", MAX_LEN, LIMITS, layout="contiguous")])
    assert v.meeting == [] and v.winner == "contiguous"
    assert v.headline.startswith("None of the 2 variants meets the SLOs (p99 TTFT ≤ 2 s, p99 TPOT ≤ 0.1 s) at 28.1 "
                                 "req/s offered. Closest: contiguous, 11.2 req/s goodput (p99 TTFT 5.44 s > 2 s).")
    assert v.decision.startswith("Closest: contiguous.")
    assert [name for name, _ in v.why] == ["contiguous", "static"]  # the closest's own reason comes too


def test_without_slo_limits_goodput_is_every_finished_request():
    no_slo = {k: v for k, v in summary().items() if not k.startswith("slo_")}
    v = decide([Entry("a", dict(no_slo, goodput_rps=10.0)), Entry("b", dict(no_slo, goodput_rps=12.0))])
    assert v.meeting is None and v.winner == "b"
    assert v.headline.startswith("No SLO limits are set, so every finished request counts as goodput at 28.1 req/s "
                                 "offered. Best: b at 12 req/s.")


@pytest.mark.parametrize("changes, entry, words", [
    ({"num_rejected": 40, "slo_met": False}, {}, "it rejected 40 of 3,000 requests, which it can never run (too long "
     "for its KV cache, its max_model_len or, without chunked prefill, its token budget); each counts over every "
     "limit"),
    ({"num_rejected": 40, "slo_met": False}, {"reject_reason": "needs 219 KV slots but the whole cache holds 128"},
     "it rejected 40 of 3,000 requests, which it can never run (the first needs 219 KV slots but the whole cache "
     "holds 128); each counts over every limit"),
    ({"preemptions": 812, "slo_met": False, "slo_tpot_met": False}, {"preemption": "swap"},
     "the KV cache ran out mid-generation: 812 preemptions (swapped out) against 0 for ok"),
    ({"max_num_waiting": 900, "queueing_s_mean": 40.0, "throughput_rps": 12.0, "slo_met": False, "slo_ttft_met": False},
     {}, "overloaded: the queue grew to 900 requests while it served 12 req/s of 28.1 req/s offered (mean wait 40 s)"),
    ({"num_unfinished": 25, "slo_met": False}, {}, "25 requests were still unfinished when the run ended"),
    ({"slo_tpot_met": False, "slo_tpot_p99": 0.15, "slo_met": False, "mean_batch_size": 250.0}, {},
     "decode steps are too slow: p99 TPOT 0.15 s > 0.1 s at a mean batch of 250"),
    ({"slo_ttft_met": False, "slo_ttft_p99": 3.1, "slo_met": False, "queueing_s_mean": 0.2}, {},
     "p99 TTFT 3.1 s > 2 s with a mean wait in the queue of 0.2 s"),
    ({"goodput_rps": 15.0}, {}, "it trails ok on goodput 15 vs 21.4 req/s (-30%)"),
])
def test_each_diagnosis_reads_its_numbers(changes, entry, words):
    winner = Entry("ok", summary(), LIMITS)
    loser = Entry("x", summary(**changes), LIMITS, **entry)
    assert diagnose(loser, winner).startswith(words), diagnose(loser, winner)
    v = decide([winner, loser])
    assert v.winner == "ok" and dict(v.why)["x"] == diagnose(loser, winner)


def test_the_first_diagnosis_that_applies_wins_and_static_batching_comes_before_reservations():
    assert [f.__name__ for f in DIAGNOSES][:3] == ["_rejected", "_static_batching", "_reserved_unused"]
    static = Entry("static", STATIC, LIMITS, "static", "contiguous", "max_len")
    assert diagnose(static, Entry("ok", summary())).startswith("static batching")
    # A bare summary.json does not say it batched statically: its reservations are what the records show.
    assert diagnose(Entry("static", STATIC), Entry("ok", summary())).startswith("contiguous KV reserves room")


def test_one_variant_meets_or_misses_with_its_numbers():
    ok = decide([Entry("paged", summary(), LIMITS)])
    assert ok.winner == "paged" and ok.decision == "" and ok.why == []
    assert ok.headline == ("paged meets the SLOs (p99 TTFT ≤ 2 s, p99 TPOT ≤ 0.1 s) at 28.1 req/s offered: 21.4 req/s "
                           "goodput, 21.4 req/s served.")
    bad = decide([Entry("static", STATIC, LIMITS, "static")])
    assert bad.headline.startswith("static misses the SLOs (p99 TTFT ≤ 2 s, p99 TPOT ≤ 0.1 s) at 28.1 req/s offered: "
                                   "p99 TTFT 1,641 s > 2 s;")
    assert dict(bad.why)["static"].startswith("static batching waits for its longest answer")


def test_a_run_that_drains_long_after_its_last_arrival_says_so():
    # 3,000 arrivals at 28.1 req/s span 2,999 / 28.1 = 106.7 s; the run lasts 140.4 s, so 21.4 req/s "served" is
    # the whole run's rate, not a queue: the headline says over what it counts. Within a tenth of the span it
    # stays quiet (the known answer above: no elapsed_s, nothing said).
    drained = decide([Entry("paged", summary(elapsed_s=140.4, num_arrived=3000), LIMITS)])
    assert drained.headline.endswith("21.4 req/s goodput, 21.4 req/s served over the run's 140 s, drain included "
                                     "(its arrivals span 107 s).")
    steady = decide([Entry("paged", summary(elapsed_s=110.0, num_arrived=3000), LIMITS)])
    assert steady.headline.endswith("21.4 req/s goodput, 21.4 req/s served.")
    missed = decide([Entry("static", dict(STATIC, elapsed_s=1770.0, num_arrived=3000), LIMITS, "static")])
    assert missed.headline.endswith("served over the run's 1,770 s, drain included (its arrivals span 107 s).")


def test_the_same_requests_all_served_are_level_on_goodput_whatever_their_drains():
    # compare runs every variant on the same 1,000 requests. Both serve all 1,000 within every limit; "b" finishes
    # its longest answer later (50.5 s against 49.3 s), so its goodput per second is 2.4% lower: beyond the 2%
    # tolerance, but not a request fewer. Level on goodput, "a" wins on TTFT, and "b" trails there.
    same = dict(num_requests=1000, num_finished=1000, offered_rps=40.2, slo_fraction_ok=1.0)
    a = Entry("a", summary(**same, goodput_rps=1000 / 49.3, throughput_rps=1000 / 49.3, elapsed_s=49.3,
                          slo_ttft_p99=0.064), LIMITS)
    b = Entry("b", summary(**same, goodput_rps=1000 / 50.5, throughput_rps=1000 / 50.5, elapsed_s=50.5,
                          slo_ttft_p99=0.44), LIMITS)
    v = decide([b, a])
    assert v.winner == "a" and dict(v.why)["b"].startswith("it trails a on p99 TTFT 0.44 vs 0.064 s")
    assert v.headline.endswith("at 40.2 req/s offered: b and a, each 1,000 of the same 1,000 requests within every "
                               "limit.")
    # One request fewer within every limit: goodput decides again, on the rates.
    b_fewer = Entry("b", dict(b.summary, goodput_rps=999 / 50.5, slo_fraction_ok=0.999), LIMITS)
    v = decide([b_fewer, a])
    assert v.winner == "a" and dict(v.why)["b"].startswith("it trails a on goodput")
    # Other requests (another offered rate): the rates, as before.
    b_other = Entry("b", dict(b.summary, offered_rps=40.0), LIMITS)
    assert dict(decide([b_other, a]).why)["b"].startswith("it trails a on goodput")


def test_the_scenarios_rank_by_orders_the_deciding_metrics():
    """`slo.rank_by` names the metrics to take first. "fast" serves 6% more goodput with a longer p99 E2E and TTFT;
    "short" answers sooner. By the default order goodput decides; ranked by E2E first, "short" wins on it, and the
    decision and the rule say so."""
    fast = summary(goodput_rps=21.36, throughput_rps=21.36, e2e_s_p99=25.4, slo_ttft_p99=0.061)
    short = summary(goodput_rps=20.1, throughput_rps=20.1, e2e_s_p99=18.0, slo_ttft_p99=0.10)
    by_default = decide([Entry("fast", fast, LIMITS), Entry("short", short, LIMITS)])
    assert by_default.winner == "fast" and by_default.ranking == ["fast", "short"]
    assert by_default.rule.startswith("Rule: meets the SLOs first, then the highest goodput, then the lowest p99 TTFT, "
                                      "TPOT and E2E, then the highest throughput; values within 2% ")
    e2e_first = Limits(ttft_s=2.0, tpot_s=0.1, percentile=99, rank_by=("e2e",))
    v = decide([Entry("fast", fast, e2e_first), Entry("short", short, e2e_first)])
    assert v.winner == "short" and v.ranking == ["short", "fast"]
    assert v.decision == ("Winner: short. Ahead of fast on p99 E2E 18 vs 25.4 s (-29%), though goodput 20.1 vs "
                          "21.4 req/s (-6%). Ranked by p99 E2E first (slo.rank_by).")
    assert dict(v.why)["fast"] == "it trails short on p99 E2E 25.4 vs 18 s (+41%)."
    assert v.rule.startswith("Rule: meets the SLOs first, then the lowest p99 E2E, then the highest goodput, then the "
                             "lowest p99 TTFT and TPOT, then the highest throughput (slo.rank_by); ")
    # TTFT first: "fast" leads there (0.061 against 0.10 s); E2E named second never decides.
    ttft_first = Limits(ttft_s=2.0, tpot_s=0.1, percentile=99, rank_by=("ttft", "e2e"))
    assert decide([Entry("short", short, ttft_first), Entry("fast", fast, ttft_first)]).winner == "fast"
    # Level on the first named metric (within 2%): the next one decides, here the default's goodput.
    level = summary(goodput_rps=20.1, throughput_rps=20.1, e2e_s_p99=25.0, slo_ttft_p99=0.10)
    v = decide([Entry("level", level, e2e_first), Entry("fast", fast, e2e_first)])
    assert v.winner == "fast" and "on goodput 21.4 vs 20.1 req/s (+6%)" in v.decision
    # Meeting the SLOs still comes first, whatever the order.
    missing = summary(e2e_s_p99=1.0, slo_ttft_p99=3.0, slo_ttft_met=False, slo_met=False)
    assert decide([Entry("missing", missing, e2e_first), Entry("fast", fast, e2e_first)]).winner == "fast"


def test_a_scenarios_rank_by_reaches_the_verdict():
    """What `run`/`compare` hand the verdict: the scenario's `slo.rank_by` in the entry's limits."""
    from sim.config.files import build_scenario_set
    raw = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 10},
                        "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 16}},
           "slo": {"ttft_s": 2.0, "rank_by": ["e2e", "tpot"]}, "variants": {"a": {}, "b": {"slo": {"ttft_s": 1.0}}}}
    results = [SimpleNamespace(name=name, scenario=sc, summary=summary(), extras={})
               for name, sc in build_scenario_set(raw).items()]
    assert [entry_of(r).limits.rank_by for r in results] == [("e2e", "tpot"), ("e2e", "tpot")]
    assert [c.key for c in criteria_of(entry_of(results[1]))] == ["e2e", "tpot", "goodput", "ttft", "throughput"]


def test_the_slo_percentile_and_a_missing_value_are_read_off_the_summary():
    p90 = {k: v for k, v in summary().items() if not k.startswith("slo_ttft")}
    p90 = {**{k.replace("p99", "p90") if k.startswith("slo_") else k: v for k, v in p90.items()}}
    a = Entry("a", dict(p90, slo_tpot_p90=0.02))
    b = Entry("b", dict(p90, slo_tpot_p90=0.01))
    v = decide([a, b])
    assert v.winner == "b" and "p90 TPOT 0.01 vs 0.02 s (2× lower)" in v.decision
    nan = Entry("nan", summary(goodput_rps=math.nan))
    assert decide([nan, Entry("ok", summary())]).winner == "ok"


def test_different_offered_loads_are_said():
    v = decide([Entry("low", summary(offered_rps=5.0, goodput_rps=5.0)), Entry("high", summary(offered_rps=40.0))])
    assert "at different offered loads" in v.headline


def test_renderings_escape_names_and_mark_the_winner():
    v = decide([Entry("<a&b>", summary()), Entry("c_*d", summary(goodput_rps=1.0))])
    page = v.html()
    assert page.startswith('<section id="verdict" class="verdict" data-winner="&lt;a&amp;b&gt;">')
    assert "<a&b>" not in page
    md = v.markdown()
    assert md.startswith("**Verdict:** ") and "c\\_\\*d" in md
    assert v.text().startswith("Verdict: ") and len(v.text().splitlines()) == len(v.lines())


def _outcome(name, status, cost=None, replicas=None, reason="", model="roofline", reach=math.nan):
    return SimpleNamespace(candidate=SimpleNamespace(name=name), status=status, reason=reason, num_replicas=replicas,
                           costs={"cost_per_hour": cost, "cost_per_million_tokens": 0.2} if cost else {},
                           cost_model=model, reachable_rate_per_s=reach, at_target={})


def _plan(outcomes):
    settings = SimpleNamespace(target_rate_per_s=40.0, max_replicas=16)
    return SimpleNamespace(settings=settings, slo={"ttft_s": 2.0, "tpot_s": 0.1, "percentile": 99},
                           outcomes=outcomes)


def test_the_plan_verdict_names_the_cheapest_and_by_how_much():
    v = plan_verdict(_plan([_outcome("l40s TP1", "feasible", 5.58, 3, model="measured"),
                            _outcome("h100 TP1", "feasible", 12.29, 1, model="calibrated"),
                            _outcome("l4 TP1", "infeasible", reason="16 replicas miss the SLOs at 40 req/s.")]))
    assert v.winner == "l40s TP1"
    assert v.headline == ("2 of 3 candidates meet the SLOs (p99 TTFT ≤ 2 s, p99 TPOT ≤ 0.1 s) at 40 req/s: the "
                          "cheapest is 3 × l40s TP1 at $5.58 per hour.")
    assert v.decision == "Winner: 3 × l40s TP1. The next cheapest, 1 × h100 TP1, costs $12.29 per hour (+120%)."
    assert v.why == [("l4 TP1", "16 replicas miss the SLOs at 40 req/s.")]
    assert v.priced_by == ("l40s TP1 is priced by the measured cost model; the rest by the calibrated cost model "
                           "(h100 TP1); the roofline cost model (l4 TP1).")
    assert "rank_by" not in v.rule
    ranked = _plan([_outcome("l40s TP1", "feasible", 5.58, 3)])
    ranked.slo["rank_by"] = ["e2e", "ttft"]  # the plan ranks by cost whatever the scenario's order: it says so
    assert plan_verdict(ranked).rule.endswith("The scenario's slo.rank_by (e2e, ttft) orders the verdicts of run and "
                                              "compare, not the plan's.")
    none = plan_verdict(_plan([_outcome("l4 TP1", "infeasible", reason="out of reach", reach=30.0)]))
    assert none.headline.startswith("None of the 1 candidates meets the SLOs") and none.winner == "l4 TP1"
    assert none.decision == "Closest: l4 TP1, about 30 req/s with 16 replicas."


def test_a_percentile_on_a_rejected_request_is_unbounded_never_level_with_a_number():
    # The runner rejects 3 of 200 requests (each over every limit): its p99 TTFT falls on one of them.
    refuses = summary(num_requests=200, num_finished=197, num_rejected=3, slo_ttft_p99=math.inf, slo_ttft_met=False,
                      slo_met=False)
    v = decide([Entry("chunked", summary(num_requests=200, num_finished=200), LIMITS, "continuous", "paged", None,
                      "recompute", "roofline", "compiled"),
                Entry("unchunked", refuses, LIMITS, "continuous", "paged", None, "recompute", "roofline",
                      "compiled")])
    assert v.winner == "chunked"
    assert "Ahead of unchunked (which misses the SLOs) on p99 TTFT 0.061 vs unbounded." in v.decision


def test_a_winner_by_the_slos_alone_is_not_called_ahead_on_a_metric_where_it_is_behind():
    # The runner left 5 requests unfinished (a horizon): it misses the SLOs, with the lower p99 TTFT of those served.
    unfinished = summary(num_unfinished=5, num_finished=2995, ttft_s_p99=0.050, slo_ttft_p99=0.050, slo_met=False)
    v = decide([Entry("a", summary(), LIMITS, "continuous", "paged", None, "recompute", "roofline", "compiled"),
                Entry("b", unfinished, LIMITS, "continuous", "paged", None, "recompute", "roofline", "compiled")])
    assert v.winner == "a"
    assert "Ahead of b, which misses the SLOs, though p99 TTFT 0.061 vs 0.05 s (+22%)." in v.decision
