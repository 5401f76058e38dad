"""The compiled core's prefix cache (sim/compiled/prefix_cache.py) on hand-worked cases: the order in which it
evicts, what it shares and what it gives back. Its records against the SimPy engine's are in
tests/integration/test_compiled_core.py."""

import numpy as np
import pytest

from sim.compiled import prefix_cache as pc
from sim.core.request import Request
from sim.kv import prefix_index as ix
from sim.kv.paged import PagedKVManager

BS = 16


def cache_of(prompts_ids: list[list[int]], num_blocks: int = 8):
    ids = np.concatenate([np.array(i, dtype=np.int64) for i in prompts_ids])
    start = np.concatenate([[0], np.cumsum([len(i) for i in prompts_ids])]).astype(np.int64)
    return pc.state(1, num_blocks, 4, 8, ids, start)


def admit(state, rid, prompt, free_blocks, chunk=None):
    """Admit request `rid` as the kernel does, computing `chunk` tokens (default: the rest of its prompt); returns
    (slot, cached tokens, blocks taken, free blocks after)."""
    slot, cached = pc.lookup(state, 0, rid, prompt, BS, BS)
    claimed = cached // BS
    chunk = prompt - cached if chunk is None else chunk
    revived = pc.num_revived(state, 0, slot, claimed)
    need = -(-(cached + chunk) // BS) - claimed
    pc.claim(state, 0, slot, prompt, claimed, BS)
    free_blocks -= revived
    pc.take(state, 0, need, free_blocks)
    pc.register(state, 0, slot, prompt, cached + chunk, BS)
    return slot, cached, claimed + need, free_blocks - need


def test_a_finished_prompt_parks_its_partly_filled_last_block_first_and_its_leading_blocks_last():
    # Request 0: 33 tokens, ids for 32 (two full blocks keyed, its third block plain). Request 1: 40 tokens with
    # ids throughout (two full blocks and a partly filled last one, all keyed). Freed in that order, the blocks go
    # onto the LRU as PrefixCache.park puts them: request 1's unclaimable tail at the head, before request 0's
    # blocks, then each request's blocks in reverse table order, so leading blocks survive longest.
    state = cache_of([[1, 2], [5, 6, 7]], num_blocks=6)
    slot_a, _, held_a, free = admit(state, 0, 33, 6)
    slot_b, cached, held_b, free = admit(state, 1, 40, free)
    assert (held_a, cached, held_b, free) == (3, 0, 3, 0)
    free += pc.release(state, 0, slot_a, held_a)
    free += pc.release(state, 0, slot_b, held_b)
    assert free == 6 and state[0][0, ix.S_EVICTABLE] == 5
    pc.take(state, 0, 2, free)  # the plain block, then one eviction: request 1's tail
    free -= 2
    assert state[0][0, ix.S_EVICTIONS] == 1
    assert pc.lookup(state, 0, 0, 33, BS, BS)[1] == 32 and pc.lookup(state, 0, 1, 40, BS, BS)[1] == 32
    pc.take(state, 0, 1, free)  # then request 0's second block
    assert pc.lookup(state, 0, 0, 33, BS, BS)[1] == 16 and pc.lookup(state, 0, 1, 40, BS, BS)[1] == 32


def test_a_shared_prefix_is_stored_once_and_given_back_when_its_last_holder_leaves():
    # Two prompts share their first 32 tokens (two units). The second claims the first's two full blocks while
    # the first still runs: two saved blocks; each release gives back only what nobody else holds.
    state = cache_of([[7, 8, 9], [7, 8, 5]], num_blocks=8)
    slot_a, _, held_a, free = admit(state, 0, 48, 8)
    slot_b, cached_b, held_b, free = admit(state, 1, 48, free)
    assert cached_b == 32 and held_b == 3 and free == 8 - 3 - 1
    assert state[0][0, ix.S_SAVED] == 2
    assert pc.release(state, 0, slot_a, held_a) == 1  # its two shared blocks stay held by the second
    assert state[0][0, ix.S_SAVED] == 0
    assert pc.release(state, 0, slot_b, held_b) == 3
    assert state[0][0, ix.S_EVICTABLE] == 4  # both prompts' keyed blocks, cached for a later request
    stats = state[0][0, ix.FIRST_STAT:]
    assert list(stats) == [2, 96, 32, 6, 2, 2, 0]  # queries, tokens, hit tokens, blocks, hit blocks, reused, evictions


def test_keys_are_the_simpy_engines_keys():
    # Both engines key blocks with sim.kv.prefix_keys.block_keys_into: the slot's keys are PrefixCache's.
    ids = [4, 4, 9, 1]
    state = cache_of([ids], num_blocks=8)  # the unit (8 tokens) is the lookup's
    slot, _ = pc.lookup(state, 0, 0, 27, 8, BS)
    kv = PagedKVManager(8, BS, enable_prefix_caching=True)
    keys, num_full = kv.prefix_cache.keys_of(Request(0, 0.0, 27, 4, prefix_ids=np.array(ids), prefix_unit_tokens=8))
    meta = state[6][0, slot]
    assert (meta[pc.M_NUM_KEYS], meta[pc.M_NUM_FULL]) == (len(keys), num_full) == (2, 1)
    assert state[4][0, slot, :2].tolist() == keys.tolist()


@pytest.mark.parametrize("taken", [0, 1, 2])
def test_taking_blocks_evicts_only_what_the_uncached_free_blocks_cannot_give(taken):
    # (the caller checked room: at most the free count, the evictable entries in it)
    state = cache_of([[1, 2], [3, 4]], num_blocks=6)
    slot, _, held, free = admit(state, 0, 32, 6)  # 2 blocks, both keyed
    free += pc.release(state, 0, slot, held)  # 4 uncached free + 2 evictable
    pc.take(state, 0, 4 + taken, free)
    assert state[0][0, ix.S_EVICTIONS] == taken and state[0][0, ix.S_EVICTABLE] == 2 - taken
