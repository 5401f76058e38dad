"""Step-time draws (issue 31: bands): the one definition of how a perturbed run scales a priced step.

A perturbed run multiplies every priced step time by

    exp(bias + sigma_kind × z(seed, replica, step_id))

- `bias`: the cost model's shared error, drawn ONCE per run (`draw_pack`): every step of the run is off by the
  same factor, as a cost model measured on another machine or engine is. Independent per-step noise alone
  averages away over thousands of steps and gives a band that is too narrow (issue 31).
- `sigma_kind × z`: the per-step noise, by step kind: `sigma_prefill` for a step that computes prompt tokens
  (prefill-only or mixed), `sigma_decode` for a decode-only step. The sigmas are the spread of
  log(measured / priced) on held-out steps (`calibrate/residuals.json`).
- `z(seed, replica, step_id)`: a standard normal from a counter-based hash of the key, not from a random-number
  generator, so the SimPy engine (`sim/core/engine.py`) and the compiled core (`sim/compiled/kernel.py`) need
  no generator state kept in step: each calls `perturb` right after pricing a step with the replica's own step
  counter (its 0-based count of the steps it started, every step of a decode run counted), and a decode run
  draws each of its steps the same way (`perturb_steps`). Another seed changes every draw and nothing else.

An empty pack, or one whose `on` entry is 0, returns the time unchanged (not multiplied by exp(0)): an
unperturbed run's records are the same bytes as before draws existed.

Everything here is integer or float arithmetic numba compiles and Python runs alike (`sim.jit`): the hash
works on 32-bit words held in int64, multiplied in 16-bit halves so that no intermediate passes 2^49, exact in
numba's int64 and in Python's ints (a 64-bit multiply would wrap in one and not the other).
"""

from __future__ import annotations

import math

import numpy as np

from sim.jit import njit

# The draw pack (float64): on (0/1), seed, bias (already drawn: log units), sigma of prefill-bearing and of
# decode-only steps (log units). A seed is held exactly while below 2^53; `draw_pack` takes 32-bit seeds.
DRAW_ON, DRAW_SEED, DRAW_BIAS, DRAW_SIGMA_PREFILL, DRAW_SIGMA_DECODE = range(5)
NUM_DRAW = 5
BIAS_REPLICA = -1  # the key (seed, -1, 0) draws the run's bias; replicas are numbered from 0
_M32 = 0xFFFFFFFF


def no_draws() -> np.ndarray:
    """The empty pack: step times as priced."""
    return np.zeros(0)


@njit(cache=True, inline="always")
def _mul32(a, b):
    """(a × b) mod 2^32 for 32-bit a, b, as two 16-bit partial products (each below 2^48)."""
    return (a * (b & 0xFFFF) + (((a * (b >> 16)) & 0xFFFF) << 16)) & _M32


@njit(cache=True, inline="always")
def _mix32(x):
    """`lowbias32` (C. Wellons, "Hash function prospector", 2018: a 32-bit integer hash, every input bit
    flipping each output bit with probability within 0.17% of 1/2)."""
    x ^= x >> 16
    x = _mul32(x, 0x7FEB352D)
    x ^= x >> 15
    x = _mul32(x, 0x846CA68B)
    x ^= x >> 16
    return x


@njit(cache=True)
def _hash_lane(lane, seed, replica, step_id):
    """A 32-bit hash of the key's five 32-bit words (seed and step id in two words each), absorbed one at a
    time; `lane` (a different start) gives independent hashes of one key."""
    h = _mix32((lane * 0x9E3779B9 + 0x632BE5AB) & _M32)
    h = _mix32(h ^ (seed & _M32))
    h = _mix32(h ^ ((seed >> 32) & _M32))
    h = _mix32(h ^ (replica & _M32))
    h = _mix32(h ^ (step_id & _M32))
    h = _mix32(h ^ ((step_id >> 32) & _M32))
    return h


@njit(cache=True)
def uniform(seed, replica, step_id):
    """A uniform in (0, 1), never 0 or 1: 52 bits of two hash lanes, (2k + 1) / 2^53 (exact in float64)."""
    k = (_hash_lane(0, seed, replica, step_id) >> 6) * 67108864 + (_hash_lane(1, seed, replica, step_id) >> 6)
    return (2 * k + 1) * 1.1102230246251565e-16  # 2^-53


@njit(cache=True)
def normal_quantile(p):
    """The standard normal's quantile at p in (0, 1): Wichura's algorithm AS 241 (PPND16, Applied Statistics
    37(3), 1988), relative error about 1e-16, the algorithm of Python's `statistics.NormalDist.inv_cdf`."""
    q = p - 0.5
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        num = (((((((2.5090809287301226727e3 * r + 3.3430575583588128105e4) * r + 6.7265770927008700853e4) * r
                   + 4.5921953931549871457e4) * r + 1.3731693765509461125e4) * r + 1.9715909503065514427e3) * r
                + 1.3314166789178437745e2) * r + 3.3871328727963666080e0)
        den = (((((((5.2264952788528545610e3 * r + 2.8729085735721942674e4) * r + 3.9307895800092710610e4) * r
                   + 2.1213794301586595867e4) * r + 5.3941960214247511077e3) * r + 6.8718700749205790830e2) * r
                + 4.2313330701600911252e1) * r + 1.0)
        return q * num / den
    r = p if q <= 0.0 else 1.0 - p
    r = math.sqrt(-math.log(r))
    if r <= 5.0:
        r = r - 1.6
        num = (((((((7.74545014278341407640e-4 * r + 2.27238449892691845833e-2) * r + 2.41780725177450611770e-1) * r
                   + 1.27045825245236838258e0) * r + 3.64784832476320460504e0) * r + 5.76949722146069140550e0) * r
                + 4.63033784615654529590e0) * r + 1.42343711074968357734e0)
        den = (((((((1.05075007164441684324e-9 * r + 5.47593808499534494600e-4) * r + 1.51986665636164571966e-2) * r
                   + 1.48103976427480074590e-1) * r + 6.89767334985100004550e-1) * r + 1.67638483018380384940e0) * r
                + 2.05319162663775882187e0) * r + 1.0)
    else:
        r = r - 5.0
        num = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r + 1.24266094738807843860e-3) * r
                   + 2.65321895265761230930e-2) * r + 2.96560571828504891230e-1) * r + 1.78482653991729133580e0) * r
                + 5.46378491116411436990e0) * r + 6.65790464350110377720e0)
        den = (((((((2.04426310338993978564e-15 * r + 1.42151175831644588870e-7) * r + 1.84631831751005468180e-5) * r
                   + 7.86869131145613259100e-4) * r + 1.48753612908506148525e-2) * r + 1.36929880922735805310e-1) * r
                + 5.99832206555887937690e-1) * r + 1.0)
    x = num / den
    return -x if q < 0.0 else x


@njit(cache=True)
def standard_normal(seed, replica, step_id):
    """z(seed, replica, step_id): the draw of one key, the same number in every engine and process."""
    return normal_quantile(uniform(seed, replica, step_id))


@njit(cache=True, inline="always")
def perturb(draws, time_s, replica, step_id, prefill):
    """A priced step's time in a perturbed run: `time_s` × exp(bias + sigma × z(seed, replica, step_id)), sigma
    by kind (`prefill`: the step computes prompt tokens). Empty or off pack: `time_s` itself."""
    if draws.shape[0] == 0 or draws[DRAW_ON] == 0.0:
        return time_s
    sigma = draws[DRAW_SIGMA_PREFILL] if prefill else draws[DRAW_SIGMA_DECODE]
    noise = 0.0
    if sigma != 0.0:
        noise = sigma * standard_normal(int(draws[DRAW_SEED]), replica, step_id)
    return time_s * math.exp(draws[DRAW_BIAS] + noise)


@njit(cache=True)
def perturb_steps(draws, times_s, replica, first_step_id, prefill):
    """`perturb` of consecutive steps (a decode run's): step k has id first_step_id + k."""
    out = np.empty(times_s.shape[0])
    for k in range(times_s.shape[0]):
        out[k] = perturb(draws, times_s[k], replica, first_step_id + k, prefill)
    return out


def draw_pack(seed: int, bias_sigma: float, sigma_prefill: float, sigma_decode: float) -> np.ndarray:
    """The pack of one perturbed run: its bias drawn now from (seed, BIAS_REPLICA, 0), scaled by `bias_sigma`.
    `seed`: 0 <= seed < 2^32 (held exactly in the float pack)."""
    if not 0 <= seed < 2**32:
        raise ValueError(f"draw_pack: seed {seed} is outside [0, 2^32)")
    bias = bias_sigma * standard_normal(seed, BIAS_REPLICA, 0) if bias_sigma else 0.0
    pack = np.zeros(NUM_DRAW)
    pack[DRAW_ON], pack[DRAW_SEED], pack[DRAW_BIAS] = 1.0, float(seed), bias
    pack[DRAW_SIGMA_PREFILL], pack[DRAW_SIGMA_DECODE] = sigma_prefill, sigma_decode
    return pack


__all__ = ["DRAW_BIAS", "DRAW_ON", "DRAW_SEED", "DRAW_SIGMA_DECODE", "DRAW_SIGMA_PREFILL", "NUM_DRAW",
           "draw_pack", "no_draws", "normal_quantile", "perturb", "perturb_steps", "standard_normal", "uniform"]
