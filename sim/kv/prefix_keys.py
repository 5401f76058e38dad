"""Content keys of a prompt's blocks, chained: what prefix caching looks blocks up by, in both engines.

`block_keys_into` is the one definition: the SimPy engine's `PrefixCache` calls it through `block_key_array`, and
the compiled core (sim/compiled/prefix_cache.py) calls it on its arrays, so both key the same blocks alike.
"""

from __future__ import annotations

import numpy as np

from sim.jit import njit

# A key is two 31-bit polynomial hashes of everything up to the end of its block, side by side in 62 bits: integer
# arithmetic that never leaves int64 (in numba, numpy and Python alike). Two different prefixes share a key with
# probability about n^2 / 2^62 for n distinct blocks.
_P1, _P2 = 2147483647, 2147483629  # primes below 2^31
_B1, _B2 = 911382323, 972663749
_FULL_BLOCK, _TAIL_BLOCK = -1, -2  # what starts a block's content: a full block, or a prompt's partly filled last


@njit(cache=True, inline="always")
def _absorb(h1, h2, value):
    return (h1 * _B1 + value % _P1) % _P1, (h2 * _B2 + value % _P2) % _P2


@njit(cache=True)
def block_keys_into(out, ids, lo, hi, unit, num_prompt_tokens, block_size):
    """Write the content keys of a prompt's blocks into `out` (room for blocks_for(covered) keys); returns (keys
    written, full blocks keyed). `ids[lo:hi]` are the prompt's content ids, `unit` tokens each.

    Block j's key is chained from block j-1's with its content: the ids of the units it overlaps and where it starts
    in the first of them, so any unit size works. Only blocks whose tokens all lie in the prompt and have ids are
    keyed, plus, when the ids cover the whole prompt, its partly filled last block (whose content also records how
    many tokens it holds: it can never equal a full block's)."""
    if hi <= lo or unit <= 0:
        return 0, 0
    covered = min(num_prompt_tokens, (hi - lo) * unit)
    num_full = covered // block_size
    h1, h2 = _absorb(0, 0, unit)
    n = 0
    for j in range(num_full):
        start = j * block_size
        h1, h2 = _absorb(h1, h2, _FULL_BLOCK)
        for u in range(start // unit, (start + block_size - 1) // unit + 1):
            h1, h2 = _absorb(h1, h2, ids[lo + u])
        h1, h2 = _absorb(h1, h2, start % unit)
        out[n] = h1 * _P1 + h2 + 1  # distinct pairs, distinct keys (h2 < _P1); never 0
        n += 1
    if covered == num_prompt_tokens and covered % block_size:
        start = num_full * block_size
        h1, h2 = _absorb(h1, h2, _TAIL_BLOCK)
        for u in range(start // unit, (covered + unit - 1) // unit):
            h1, h2 = _absorb(h1, h2, ids[lo + u])
        h1, h2 = _absorb(h1, h2, start % unit)
        h1, h2 = _absorb(h1, h2, covered - start)
        out[n] = h1 * _P1 + h2 + 1
        n += 1
    return n, num_full


def block_key_array(prefix_ids, unit: int, num_prompt_tokens: int, block_size: int) -> tuple[np.ndarray, int]:
    """Content keys of a prompt's blocks (`block_keys_into`), an int64 array, and how many of them are full blocks."""
    if prefix_ids is None or unit <= 0 or not len(prefix_ids):
        return np.zeros(0, dtype=np.int64), 0
    ids = np.asarray(prefix_ids, dtype=np.int64)
    covered = min(num_prompt_tokens, len(ids) * unit)
    out = np.empty(covered // block_size + 1, dtype=np.int64)
    n, num_full = block_keys_into(out, ids, 0, len(ids), unit, num_prompt_tokens, block_size)
    return out[:n], int(num_full)
