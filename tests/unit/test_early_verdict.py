"""The planner's early verdict (issue 15): a run is stopped only when the full run is certain to miss its SLOs."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers import small_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.files import validate_scenario
from sim.results import REASSOCIATED_SUM_KEYS
from sim.run import make_workload, simulate
from sim.tools.early_verdict import SLOMissRule, violations_to_miss

PERCENTILES = (50, 90, 95, 99, 99.9, 100)


@pytest.mark.parametrize(("n", "q", "expected"), [
    (2400, 99, 25),   # 0.99 * 2399 = 2375.01: index 2375, so the top 25 values decide
    (1000, 99, 11),   # 0.99 * 999 = 989.01
    (10, 50, 6),      # 0.5 * 9 = 4.5: index 4
    (100, 90, 11),    # 0.9 * 99 = 89.1
    (101, 90, 12),    # 0.9 * 100 = 90 exactly: one more than needed (index 90 would need 11), the float slack
    (1, 99, 1),
    (5, 100, 2),      # p100 is the maximum (one violation would do); its index 4 is an integer: the slack again
])
def test_violations_to_miss_known_answers(n, q, expected):
    assert violations_to_miss(n, q) == expected


@pytest.mark.parametrize("q", PERCENTILES)
def test_that_many_violations_put_numpys_percentile_over_the_limit_whatever_the_rest(q):
    limit = 1.0
    over = np.nextafter(limit, 2.0)  # the smallest violation
    for n in range(1, 400):
        b = violations_to_miss(n, q)
        assert 1 <= b <= n
        for rest in (0.0, limit):  # the others as far below the limit as can be, or right at it
            values = np.concatenate([np.full(n - b, rest), np.full(b, over)])
            assert np.percentile(values, q) > limit, (n, q, b)
        # Never more than one above the fewest that could force it (numpy's index is floor(q/100 (n-1))).
        assert b <= n - math.floor(q / 100 * (n - 1)) + 1


@pytest.mark.parametrize("q", PERCENTILES)
def test_violations_to_miss_never_falls_as_values_are_added(q):
    # So the count for every generated request also serves a metric with fewer values (one-token TPOT is NaN).
    counts = [violations_to_miss(n, q) for n in range(1, 3000)]
    assert all(b >= a for a, b in itertools.pairwise(counts))


def _scenario(rate_per_s: float, slo: dict, **changes) -> dict:
    raw = small_scenario({"workload": {"arrival": {"rate_per_s": rate_per_s},
                                       "lengths": {"kind": "uniform", "input_min": 64, "input_max": 1500,
                                                   "output_min": 1, "output_max": 200}},
                          "hardware": {"gpu": "l4"},
                          "slo": slo, "run": {"num_requests": 80}})
    from sim.config.files import deep_merge
    return deep_merge(raw, changes)


def _verdicts(raw: dict):
    scenario = validate_scenario(raw)
    full = simulate(scenario).summary
    rule = SLOMissRule(scenario.slo, make_workload(scenario).num_requests, check_every_s=0.05)
    early = simulate(scenario, stop_when=rule).summary
    return full, early


def test_an_overloaded_run_stops_early_and_misses_as_the_full_run_does():
    full, early = _verdicts(_scenario(60.0, {"ttft_s": 0.5, "percentile": 90}))
    assert full["slo_met"] is False and early["slo_met"] is False
    assert 0 < early["stopped_early_s"] < full["elapsed_s"]
    assert early["num_finished"] < full["num_finished"]


def test_a_run_that_meets_its_slos_runs_to_its_end_with_the_same_summary():
    full, early = _verdicts(_scenario(1.0, {"ttft_s": 5.0, "tpot_s": 1.0, "e2e_s": 100.0, "percentile": 99}))
    assert full["slo_met"] is True
    assert "stopped_early_s" not in early
    # The rule only reads: the run is the same run. Its checks end decode runs (`run.fast_decode`) at the steps
    # it looks after, so sums over steps are taken in another order: equal to float rounding.
    assert {k: v for k, v in early.items() if k not in REASSOCIATED_SUM_KEYS} == \
        {k: v for k, v in full.items() if k not in REASSOCIATED_SUM_KEYS}
    for key in REASSOCIATED_SUM_KEYS & full.keys():
        assert math.isclose(early[key], full[key], rel_tol=1e-12), key


SLOS = st.fixed_dictionaries({}, optional={
    "ttft_s": st.sampled_from([0.05, 0.3, 1.0, 4.0]),
    "tpot_s": st.sampled_from([0.01, 0.03, 0.1]),
    "e2e_s": st.sampled_from([1.0, 5.0, 20.0]),
    "min_goodput_fraction": st.sampled_from([0.5, 0.9, 1.0]),
}).filter(lambda d: any(k in d for k in ("ttft_s", "tpot_s", "e2e_s"))).flatmap(
    lambda d: st.sampled_from(PERCENTILES).map(lambda q: {**d, "percentile": q}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rate=st.sampled_from([2.0, 8.0, 20.0, 60.0]), slo=SLOS,
       layout=st.sampled_from(["paged", "contiguous"]), chunked=st.booleans(),
       batching=st.sampled_from(["continuous", "continuous", "static"]),
       replicas=st.integers(1, 3), router=st.sampled_from(["round_robin", "least_outstanding"]),
       horizon=st.sampled_from([None, 3.0]), seed=st.integers(0, 3))
def test_the_early_verdict_is_the_full_runs_verdict(rate, slo, layout, chunked, batching, replicas, router,
                                                    horizon, seed):
    scheduler = {"batching": batching}
    if batching == "continuous" and chunked:
        scheduler.update({"chunked_prefill": True, "max_num_batched_tokens": 512})
    run = {"seed": seed} | ({"horizon_s": horizon} if horizon else {})
    raw = _scenario(rate, slo, scheduler=scheduler, kv_cache={"layout": layout},
                    hardware={"num_replicas": replicas, "router": router}, run=run)
    full, early = _verdicts(raw)
    assert early["slo_met"] == full["slo_met"]
    if "stopped_early_s" not in early:
        assert early["slo_met"] == full["slo_met"] and early["num_finished"] == full["num_finished"]


class _Scheduler:
    def __init__(self, running=(), waiting=()):
        self.running, self.waiting = list(running), list(waiting)

    def running_requests(self):
        return self.running


class _State:
    """What the rule reads of a Simulation: the clock, the request log and the replicas' schedulers."""

    def __init__(self, now: float, num_requests: int, running=(), waiting=()):
        from types import SimpleNamespace

        from sim.core.engine import RequestLog
        self.env = SimpleNamespace(now=now)
        self.requests = RequestLog(num_requests)
        self.replicas = [SimpleNamespace(scheduler=_Scheduler(running, waiting))]

    def finish(self, i: int, arrival_s: float, first_token_s: float, finish_s: float, output_tokens: int = 2):
        log = self.requests
        log.arrival_s[i], log.first_token_s[i], log.last_token_s[i] = arrival_s, first_token_s, finish_s
        log.finish_s[i], log.output_tokens[i], log.status[i] = finish_s, output_tokens, 0


def _slo(**limits):
    from sim.config.schema import SLOSpec
    return SLOSpec(**limits)


def test_the_rule_stops_at_exactly_the_count_and_counts_a_wait_only_past_the_limit():
    # 10 requests, p50 TTFT <= 1 s: 6 certain violations force the median over (violations_to_miss(10, 50)).
    from helpers import make_request
    waiting = make_request(64, 8, arrival_s=0.0, request_id=9)  # no first token yet
    state = _State(now=1.0, num_requests=10, waiting=[waiting])
    for i in range(5):
        state.finish(i, arrival_s=0.0, first_token_s=1.5, finish_s=2.0)  # TTFT 1.5 s > 1 s
    rule = SLOMissRule(_slo(ttft_s=1.0, percentile=50), num_requests=10)
    assert not rule.certain_miss(state, now=1.0)  # the waiting request has waited exactly the limit: not over
    assert rule.certain_miss(state, now=np.nextafter(1.0, 2.0))  # now it has: its TTFT is over whenever it comes
    state.requests.status[4] = -1  # one finished violation fewer: 4 + the waiting one is not enough
    assert not rule.certain_miss(state, now=5.0)


def test_the_rule_counts_tpot_only_at_finish_and_a_rejection_as_over_every_limit():
    from helpers import make_request
    running = make_request(64, 100, arrival_s=0.0, request_id=3)
    running.first_token_s = 0.1  # decoding, far over any TPOT so far, but its TPOT is known only at its end
    state = _State(now=50.0, num_requests=4, running=[running])
    rule = SLOMissRule(_slo(tpot_s=0.01, percentile=50), num_requests=4)  # needs 4 - floor(1.5) = 3
    state.finish(0, 0.0, 0.1, 0.2, output_tokens=11)  # TPOT 0.01 s: at the limit, not over
    state.finish(1, 0.0, 0.1, 10.1, output_tokens=2)  # TPOT 10 s
    state.finish(2, 0.0, 0.1, 5.0, output_tokens=1)  # one token: no TPOT
    assert not rule.certain_miss(state, now=50.0)
    state.requests.status[2] = 2  # rejected: over the limit, the second violation of the 3 needed
    assert not rule.certain_miss(state, now=50.0)
    state.requests.status[0] = 2  # the third
    assert rule.certain_miss(state, now=50.0)


def test_the_goodput_share_misses_once_too_few_requests_can_still_be_good():
    state = _State(now=10.0, num_requests=10)
    rule = SLOMissRule(_slo(e2e_s=5.0, percentile=100, min_goodput_fraction=0.8), num_requests=10)
    state.finish(0, 0.0, 0.1, 6.0)  # e2e 6 s > 5 s
    state.finish(1, 0.0, 0.1, 4.0)  # good
    # p100 needs violations_to_miss(10, 100) = 2 (slack); goodput: (10 - 1) / 10 = 0.9 >= 0.8, not certain
    assert violations_to_miss(10, 100) == 2 and not rule.certain_miss(state, now=10.0)
    state.finish(2, 1.0, 1.1, 7.0)  # e2e 6 s: now the p100 count too
    assert rule.certain_miss(state, now=10.0)
    rule_goodput = SLOMissRule(_slo(e2e_s=5.0, percentile=50, min_goodput_fraction=0.9), num_requests=10)
    state.requests.status[2] = -1  # 1 bad of 10: share can still be 0.9
    assert not rule_goodput.certain_miss(state, now=10.0)
    state.requests.status[2] = 0  # 2 bad: at most 0.8 < 0.9
    assert rule_goodput.certain_miss(state, now=10.0)
