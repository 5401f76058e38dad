"""Sliding-window attention frees the paged blocks that fall wholly out of the window (vLLM's SlidingWindowManager)."""

import math

import pytest
from helpers import make_request

from sim.config.files import validate_scenario
from sim.kv.paged import DROPPED, PagedKVManager
from sim.run import make_scheduler, simulate

WINDOW, BLOCK = 4096, 16


def _held(kv, r):
    return sum(1 for b in kv.block_tables[r.request_id] if b != DROPPED)


def test_a_10k_token_sequence_holds_at_most_the_window_plus_one_block():
    kv = PagedKVManager(num_blocks=2000, block_size=BLOCK, sliding_window=WINDOW)
    r = make_request(prompt=10_000, output=3000)
    chunk = 512
    while r.num_computed_tokens < 10_000:  # chunked prefill
        n = min(chunk, 10_000 - r.num_computed_tokens)
        assert kv.allocate_slots(r, n) is not None
        # The chunk's first token needs the window before it; the chunk itself is all allocated.
        assert _held(kv, r) <= math.ceil((WINDOW + chunk) / BLOCK) + 1
        r.num_computed_tokens += n
        kv.check_consistency()
    most = 0
    for _ in range(2000):  # decode: one token per step, a new block every BLOCK tokens
        if r.num_computed_tokens % BLOCK == 0:
            kv.append_one_block_each([r.request_id])
        else:
            assert kv.allocate_slots(r, 1) == []
        r.num_computed_tokens += 1
        most = max(most, _held(kv, r))
        # The window of the token just computed is still all there.
        first_needed = r.num_computed_tokens - WINDOW
        assert all(b != DROPPED for b in kv.block_tables[r.request_id][max(0, first_needed) // BLOCK:])
    assert most <= math.ceil(WINDOW / BLOCK) + 1
    assert len(kv.block_tables[r.request_id]) == kv.blocks_for(r.num_computed_tokens)  # the table keeps its length
    kv.check_consistency()
    usage = kv.usage(num_token_slots=r.num_computed_tokens)
    assert 0 <= usage.internal_slots < BLOCK and usage.token_slots <= WINDOW + BLOCK
    freed = kv.num_window_freed_blocks
    assert freed == kv.blocks_for(r.num_computed_tokens) - _held(kv, r) > 0
    kv.free(r)
    assert kv.num_free_blocks == 2000 and kv.usage(0).token_slots == 0
    kv.check_consistency()


def test_without_a_window_every_block_is_kept():
    kv = PagedKVManager(num_blocks=2000, block_size=BLOCK)
    r = make_request(prompt=10_000, output=10)
    assert len(kv.allocate_slots(r, 10_000)) == 625
    r.num_computed_tokens = 10_000
    kv.append_one_block_each([r.request_id])
    assert _held(kv, r) == 626 and kv.num_window_freed_blocks == 0


def _scenario(model, **kv_cache):
    return validate_scenario({
        "model": model, "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                     "lengths": {"kind": "fixed", "input_tokens": 6000, "output_tokens": 200}},
        "scheduler": {"max_model_len": 8192}, "kv_cache": kv_cache, "run": {"seed": 0, "num_requests": 3}})


def test_a_mistral_run_counts_the_freed_blocks_and_llama_has_none():
    mistral = _scenario("mistral-7b-v0.1")
    assert make_scheduler(mistral).kv.sliding_window == 4096
    s = simulate(mistral).summary
    assert s["num_finished"] == 3
    # Each request ends at 6199 tokens: blocks before the last token's window, 3 requests.
    per_request = (6199 - 1 - 4096 + 1) // 16
    assert s["kv_window_freed_blocks"] == pytest.approx(3 * per_request, abs=3)
    llama = simulate(_scenario("llama-3.1-8b")).summary
    assert "kv_window_freed_blocks" not in llama
    assert make_scheduler(_scenario("mistral-7b-v0.1", enable_prefix_caching=True)).kv.sliding_window is None
