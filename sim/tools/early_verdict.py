"""Stop a simulation as soon as its SLO verdict is certain to be "missed" (issue 15, planner speed).

The planner's binary searches only need each simulation's `slo_met`. A run that will miss its SLOs usually
shows it long before its last request finishes: under overload the queue grows and, after a few seconds of
simulated time, more than 1% of the requests have already waited longer than the p99 TTFT limit. From then
on nothing the rest of the run does can bring the verdict back, so simulating it is wasted work.

`SLOMissRule` is a `stop_when` rule for `sim.run.simulate`: asked after every engine step, it answers True
only when the full run's `slo_met` (as `sim.results.slo_metrics` computes it) is certain to be False:

* for a limit on TTFT, TPOT or E2E at percentile q: at least `violations_to_miss(N, q)` requests are certain
  to exceed it (a rejected request exceeds every limit: `sim.results.percentile_with_refused`), N being the
  number of requests the workload generates (see that function for why this count forces the percentile over
  the limit whatever the other requests do), or
* with `slo.min_goodput_fraction`: so many requests are certain to miss a limit that the goodput share
  cannot reach the fraction.

A request is certain to exceed a limit when its value is known and exceeds it, or, for TTFT and E2E, when it
is still waiting for that token (or its finish) and more than the limit has passed since it arrived: the
token comes at or after now. Requests still in flight are read from the schedulers; nothing is changed.
The rule never answers True for a run that would meet its SLOs (tests/unit/test_early_verdict.py checks
this against full runs), and a run it stops reports `slo_met` False, as the full run would.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import chain

import numpy as np

from sim.core.engine import STATUS_CODES

# Slack on the percentile's virtual index: numpy computes q/100 * (N-1) in floating point, off from the
# exact value by far less than this, so flooring (exact - slack) never lands above numpy's index.
_INDEX_SLACK = Fraction(1, 10**6)
LIMITED_METRICS = ("ttft_s", "tpot_s", "e2e_s")


def violations_to_miss(num_values: int, percentile: float) -> int:
    """How many of at most `num_values` values must exceed a limit for their `percentile` (numpy's default,
    linear interpolation, as `sim.results.slo_metrics` takes it) to exceed the limit for certain.

    Sorted ascending, numpy's percentile of n values lies between v[k] and v[k+1] with k = floor(q/100 (n-1)),
    and never below v[k] (its interpolation is monotonic). If at least n - k values exceed the limit, v[k] is
    one of them, so the percentile exceeds it too. We use k_lo = floor(q/100 (n-1) - 1e-6) <= k, which needs
    n - k_lo >= n - k violations: at worst one more than necessary when q/100 (n-1) is an integer.
    The count grows with n (n - k_lo rises by 0 or 1 per value added), so the count for the most values the
    metric can have (every generated request; TPOT leaves out one-token outputs) is enough for fewer."""
    if num_values < 1:
        return 1
    index = Fraction(percentile) / 100 * (num_values - 1) - _INDEX_SLACK
    return num_values - max(0, math.floor(index))


class SLOMissRule:
    """`stop_when` for `simulate`: True once the run is certain to miss its SLOs (see the module docstring).

    `num_requests`: the requests the workload generates (an upper bound on those the summary counts).
    `check_every_s`: simulated seconds between two checks (a check reads every request record, so it runs
    at most this often; a stop comes at most this much simulated time later than it could).
    `next_check_s`: it answers False to every step ending before this time; a decode run (`run.fast_decode`)
    ends with the first step that reaches it, so the rule sees the same steps as step by step."""

    def __init__(self, slo, num_requests: int, check_every_s: float = 0.5):
        self.limits = {m: getattr(slo, m) for m in LIMITED_METRICS if getattr(slo, m) is not None}
        self.num_requests = num_requests
        self.needed = violations_to_miss(num_requests, slo.percentile)
        self.min_goodput_fraction = slo.min_goodput_fraction
        self.check_every_s = check_every_s
        self.next_check_s = 0.0
        self.num_checks = 0

    def __call__(self, sim) -> bool:
        now = sim.env.now
        if now < self.next_check_s:
            return False
        self.next_check_s = now + self.check_every_s
        self.num_checks += 1
        return self.certain_miss(sim, now)

    def compiled_params(self) -> list[float]:
        """The rule as numbers, for the compiled engine core to ask it itself (`sim.compiled.kernel._certain_miss`
        repeats `certain_miss`): TTFT, TPOT and E2E limits (inf: none), the violations that make a miss
        certain, the goodput fraction (NaN: none), the requests generated, the seconds between checks."""
        return [math.inf if m not in self.limits else float(self.limits[m]) for m in LIMITED_METRICS] + [
            float(self.needed), math.nan if self.min_goodput_fraction is None else float(self.min_goodput_fraction),
            float(self.num_requests), float(self.check_every_s)]

    def certain_miss(self, sim, now: float) -> bool:
        log = sim.requests
        status, arrival_s, first_token_s = log.status, log.arrival_s, log.first_token_s
        refused = int((status == STATUS_CODES["rejected"]).sum())  # over every limit
        fin = np.flatnonzero(status == STATUS_CODES["finished"])
        arrival = arrival_s[fin]
        # Finished requests: the same arithmetic as sim.results.requests_table.
        done_values = {"ttft_s": first_token_s[fin] - arrival, "e2e_s": log.finish_s[fin] - arrival}
        if "tpot_s" in self.limits:
            gen = log.output_tokens[fin]
            with np.errstate(invalid="ignore", divide="ignore"):
                done_values["tpot_s"] = np.where(gen > 1, (log.last_token_s[fin] - first_token_s[fin])
                                                 / (gen - 1), np.nan)
        done_bad = np.zeros(len(fin), dtype=bool)
        counts = {}
        for metric, limit in self.limits.items():
            over = done_values[metric] > limit  # NaN (one-token TPOT) is never over
            done_bad |= over
            counts[metric] = int(over.sum()) + refused
        ttft_limit, e2e_limit = self.limits.get("ttft_s", math.inf), self.limits.get("e2e_s", math.inf)
        # A request that has waited no longer than both limits is not yet certain to exceed either: a known TTFT
        # is at most the wait so far, and an unknown TTFT or E2E could still come within its limit.
        in_flight = list(self._in_flight(sim))
        in_flight_arrival_s = np.array([r.arrival_s for r in in_flight], dtype=float)
        waited_s = now - in_flight_arrival_s
        first = np.array([r.first_token_s for r in in_flight], dtype=float)
        waited_long = waited_s > min(ttft_limit, e2e_limit)
        # No first token yet: it comes at `now` or later, so TTFT >= waited_s.
        ttft_bad = waited_long & np.where(np.isnan(first), waited_s > ttft_limit,
                                          first - in_flight_arrival_s > ttft_limit)
        e2e_bad = waited_long & (waited_s > e2e_limit)  # it finishes at `now` or later
        if "ttft_s" in counts:
            counts["ttft_s"] += int(ttft_bad.sum())
        if "e2e_s" in counts:
            counts["e2e_s"] += int(e2e_bad.sum())
        pending_bad = int((ttft_bad | e2e_bad).sum())
        if any(c >= self.needed for c in counts.values()):
            return True
        if self.min_goodput_fraction is not None:
            # The summary's share is ok / arrived <= (arrived - bad) / arrived <= (N - bad) / N.
            n = self.num_requests
            if (n - int(done_bad.sum()) - refused - pending_bad) / n < self.min_goodput_fraction:
                return True
        return False

    @staticmethod
    def _in_flight(sim):
        """Requests still in the schedulers, each once (as `Simulation.run` records them when a run ends)."""
        return chain.from_iterable(chain(r.scheduler.running_requests(), r.scheduler.waiting)
                                   for r in sim.replicas)
