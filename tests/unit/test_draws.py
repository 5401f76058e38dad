"""Step-time draws (sim/cost/draws.py) and the band's order statistics (sim/bands.py), issue 31.

Known answers first: the normal quantile against Python's own (the same algorithm, AS 241), an empty pack and a
bias-only pack scaling step times exactly; then the draws' distribution, and the band rule's coverage.
"""

import math
from statistics import NormalDist

import numpy as np
import pytest

from sim.cost import draws as d
from sim import bands


@pytest.mark.parametrize("p", [1e-300, 1e-12, 1e-4, 0.01, 0.025, 0.05, 0.0749, 0.075, 0.3, 0.5, 0.7, 0.925, 0.95,
                               0.975, 0.99, 1 - 1e-12])
def test_the_normal_quantile_is_python_s_to_the_last_bits(p):
    want = NormalDist().inv_cdf(p)
    assert d.normal_quantile(p) == pytest.approx(want, rel=1e-15, abs=1e-15)
    q = 1 - p  # (rounded: compared with Python's quantile at the same float)
    if q < 1.0:
        assert d.normal_quantile(q) == pytest.approx(NormalDist().inv_cdf(q), rel=1e-15, abs=1e-15)


def test_the_textbook_quantiles():
    assert d.normal_quantile(0.5) == 0.0
    assert d.normal_quantile(0.975) == pytest.approx(1.959963984540054, rel=1e-15)
    assert d.normal_quantile(0.95) == pytest.approx(1.6448536269514722, rel=1e-15)
    assert d.normal_quantile(0.8413447460685429) == pytest.approx(1.0, rel=1e-12)  # Phi(1)


def test_uniforms_are_strictly_inside_the_unit_interval_and_depend_on_every_key_part():
    base = d.uniform(7, 0, 5)
    assert 0.0 < base < 1.0
    assert d.uniform(7, 0, 5) == base  # no state: the same key, the same number
    others = {d.uniform(8, 0, 5), d.uniform(7, 1, 5), d.uniform(7, 0, 6), d.uniform(7, -1, 5),
              d.uniform(7 + 2**32, 0, 5), d.uniform(7, 0, 5 + 2**32)}  # every 32-bit word of the key counts
    assert base not in others and len(others) == 6


def test_compiled_and_python_draws_are_the_same_numbers():
    py = getattr(d.standard_normal, "py_func", None)
    if py is None:
        pytest.skip("numba not installed: there is only the Python form")
    keys = [(0, 0, 0), (12345, 3, 10**12), (2**32 - 1, -1, 0), (99, 2, 2**40 + 17)]
    for key in keys:
        assert d.standard_normal(*key) == py(*key)
    pack = d.draw_pack(11, 0.2, 0.1, 0.05)
    times = np.linspace(0.001, 0.2, 50)
    np.testing.assert_array_equal(d.perturb_steps(pack, times, 2, 1000, False),
                                  d.perturb_steps.py_func(pack, times, 2, 1000, False))


def test_the_draws_are_standard_normal():
    n = 200_000
    z = np.array([d.standard_normal(3, r, s) for r in range(2) for s in range(n // 2)])
    assert abs(z.mean()) < 4 / math.sqrt(n)
    assert z.std() == pytest.approx(1.0, abs=0.01)
    for q in (1.2815515655446004, 1.6448536269514722, 2.3263478740408408):  # the 90th, 95th, 99th percentiles
        tail = 1 - NormalDist().cdf(q)
        se = math.sqrt(tail * (1 - tail) / n)
        assert abs(np.mean(z > q) - tail) < 5 * se and abs(np.mean(z < -q) - tail) < 5 * se
    # consecutive steps are not correlated (a counter-based hash, not a sequence)
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 0.01


def test_an_empty_or_off_pack_leaves_a_time_as_priced():
    t = 0.0123456789
    assert d.perturb(d.no_draws(), t, 0, 5, True) == t
    off = d.draw_pack(1, 0.3, 0.3, 0.3)
    off[d.DRAW_ON] = 0.0
    assert d.perturb(off, t, 0, 5, True) == t


def test_a_bias_only_draw_scales_every_step_time_exactly():
    pack = d.draw_pack(42, 0.25, 0.0, 0.0)
    bias = pack[d.DRAW_BIAS]
    assert bias == 0.25 * d.standard_normal(42, d.BIAS_REPLICA, 0) and bias != 0.0
    times = np.array([1e-4, 0.0071, 0.5, 3.0])
    for prefill in (False, True):
        np.testing.assert_array_equal(d.perturb_steps(pack, times, 3, 77, prefill), times * math.exp(bias))


def test_noise_follows_the_step_kind_and_the_key():
    pack = d.draw_pack(5, 0.0, 0.2, 0.0)  # noise on prefill-bearing steps only
    t = 0.01
    assert d.perturb(pack, t, 0, 9, False) == t
    got = d.perturb(pack, t, 0, 9, True)
    assert got == t * math.exp(0.2 * d.standard_normal(5, 0, 9))
    assert got != d.perturb(pack, t, 0, 10, True) and got != d.perturb(pack, t, 1, 9, True)
    # a run's steps in bulk are the steps one by one
    times = np.full(6, t)
    np.testing.assert_array_equal(d.perturb_steps(pack, times, 1, 40, True),
                                  [d.perturb(pack, t, 1, 40 + k, True) for k in range(6)])


def test_a_draw_seed_must_fit_the_pack():
    with pytest.raises(ValueError, match="seed"):
        d.draw_pack(2**32, 0.1, 0.1, 0.1)
    with pytest.raises(ValueError, match="seed"):
        d.draw_pack(-1, 0.1, 0.1, 0.1)


# --- the band's order statistics ---------------------------------------------------------------------------

@pytest.mark.parametrize(("level", "replications", "k"), [(90, 19, 1), (95, 39, 1), (99, 199, 1), (50, 19, 5),
                                                          (80, 19, 2), (90, 39, 2)])
def test_the_replications_and_the_order_statistic_of_a_level(level, replications, k):
    assert bands.order_index(level, replications) == k
    assert (replications + 1 - 2 * k) / (replications + 1) >= level / 100 - 1e-12


def test_the_default_replications():
    assert [bands.replications_for(x) for x in (50, 80, 90, 95, 99)] == [19, 19, 19, 39, 199]
    assert bands.replications_for(90, 41) == 41


def test_levels_that_need_too_many_replications_are_refused():
    with pytest.raises(ValueError, match="band: 99.9 needs 1999 replications"):
        bands.check_band_size(99.9, None)
    with pytest.raises(ValueError, match="band_replications: 20 is too few for a 95% band; allowed: at least 39"):
        bands.check_band_size(95, 20)
    bands.check_band_size(99, None)
    bands.check_band_size(90, 19)


def test_edges_are_the_kth_smallest_and_largest():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert bands.edges(values, 1) == [1.0, 5.0]
    assert bands.edges(values, 2) == [2.0, 4.0]
    assert bands.edges([1.0, float("nan"), 2.0], 1) is None and bands.edges([1.0, None], 1) is None
    assert bands.edges([0.7] * 19, 1) == [0.7, 0.7]  # no spread: the band collapses to the value


def test_a_band_from_19_replications_holds_one_more_draw_90_percent_of_the_time():
    # The order-statistic rule is distribution-free: whatever the replications' distribution, the lowest and
    # highest of 19 bound a 20th draw with probability 18/20. A skewed distribution, 20,000 trials.
    rng = np.random.default_rng(0)
    trials = 20_000
    x = rng.lognormal(0.0, 0.8, size=(trials, 20))
    k = bands.order_index(90, 19)
    s = np.sort(x[:, :19], axis=1)
    inside = (x[:, 19] >= s[:, k - 1]) & (x[:, 19] <= s[:, 19 - k])
    assert inside.mean() == pytest.approx(0.9, abs=4 * math.sqrt(0.09 / trials))


def test_replication_seeds_are_fixed_32_bit_numbers_of_the_run_seed_and_index():
    seeds = [bands.replication_seeds(0, i) for i in range(19)]
    assert seeds == [bands.replication_seeds(0, i) for i in range(19)]
    assert len(set(seeds)) == 19 and all(0 <= a < 2**32 and 0 <= b < 2**32 for a, b in seeds)
    assert bands.replication_seeds(1, 0) != seeds[0]
