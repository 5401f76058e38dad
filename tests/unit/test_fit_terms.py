"""The search behind every fitted engine term (calibrate/engine_fit.py `fit_terms`, shared by `fit-engine --bench`
and the published suite's preset fit): known answers on smooth problems, and what it must do on the rippled ones a
discrete-event simulation gives."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate import engine_fit
from calibrate.engine_fit import fit_terms

START, SCALE, HI = np.array([5e-4, 0.0]), np.array([2e-4, 5e-3]), np.array([0.05, 1.0])
MEASURED = np.array([0.00767, 0.0516, 0.1616, 10.23])  # TPOT and TTFT of a concurrency-4 run, then of a burst


def runs(theta, ripple: float = 0.0, k: float = 0.0) -> np.ndarray:
    """Log errors of two runs priced with `per_step_s` and `latency_s` = theta: a closed loop at concurrency 4 (TPOT =
    its kernels + one CPU step; TTFT = its prefill + two steps + the front-end) and a burst whose measured metrics
    no terms reach (as on a slow host). `ripple`: the deterministic wobble of a discrete-event run's metrics as its
    steps and queues reorder when a term moves."""
    step, latency = theta
    simulated = np.array([0.0065 + step, 0.012 + 2 * step + latency, 0.040 + 0.3 * step, 6.0 + 40 * step + latency])
    wobble = ripple * np.sin(k * np.array([1.3, 2.1, 0.7, 1.9]) * (step * 2e4 + latency * 300))
    return np.log(simulated / MEASURED) + wobble


def test_a_smooth_fit_reaches_the_least_squares_optimum():
    # Known answer: the optimum of the smooth problem, found by brute force on a fine grid (25 us x 0.5 ms cells)
    theta, free = fit_terms(runs, START, SCALE, HI, iterations=20)
    grid = [(s, lat) for s in np.linspace(0.0, 0.01, 401) for lat in np.linspace(0.0, 0.2, 401)]
    best = min(grid, key=lambda p: float(runs(np.array(p)) @ runs(np.array(p))))
    assert free.all()
    assert theta[0] == pytest.approx(best[0], abs=25e-6) and theta[1] == pytest.approx(best[1], abs=5e-4)  # a cell
    r = runs(theta)
    assert float(r @ r) <= float(runs(np.array(best)) @ runs(np.array(best))) + 1e-6


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 13])
def test_the_fit_is_the_best_point_it_evaluated_inside_the_bounds(k):
    evaluated = []

    def residuals(theta):
        r = runs(theta, 0.03, k)
        evaluated.append((theta.copy(), float(r @ r)))
        return r

    theta, _ = fit_terms(residuals, START, SCALE, HI, iterations=5)
    inside = [ssr for point, ssr in evaluated if np.all(point >= 0) and np.all(point <= HI)]
    r = runs(theta, 0.03, k)
    assert np.all(theta >= 0) and np.all(theta <= HI)
    assert float(r @ r) == min(inside)
    assert float(r @ r) < float(runs(START, 0.03, k) @ runs(START, 0.03, k))


def test_a_probe_past_a_bound_is_never_the_fit():
    # The runs want a front-end latency far past its 1 s bound: the probe at 1.1 s fits them better, but is no answer
    measured = MEASURED.copy()
    measured[[1, 3]] = [3.0, 14.0]

    def residuals(theta):
        step, latency = theta
        simulated = np.array([0.0065 + step, 0.012 + 2 * step + latency, 0.040 + 0.3 * step,
                              6.0 + 40 * step + latency])
        return np.log(simulated / measured)

    theta, _ = fit_terms(residuals, START, SCALE, HI, iterations=10)
    assert theta[1] == HI[1]  # at its bound: said and never used by the callers (`at_bounds`)


def test_where_no_fraction_of_a_gauss_newton_step_descends_a_damped_step_goes_on(monkeypatch):
    # On this rippled problem the Gauss-Newton step and its halvings all raise the misfit at some iteration: without
    # the damped steps the search stops there; with them it goes on to a lower misfit
    def fit(damping):
        monkeypatch.setattr(engine_fit, "FIT_DAMPING", damping)
        calls = []

        def residuals(theta):
            calls.append(theta)
            return runs(theta, 0.03, 8)

        theta, _ = fit_terms(residuals, START, SCALE, HI, iterations=5)
        return float(runs(theta, 0.03, 8) @ runs(theta, 0.03, 8)), len(calls)

    damping = engine_fit.FIT_DAMPING
    undamped, undamped_calls = fit(())
    damped, damped_calls = fit(damping)
    assert damped_calls > undamped_calls
    assert damped < undamped - 0.05
