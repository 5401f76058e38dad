"""benchmarks/bench_attention_fa2_tiles.py's tile schedule, by hand: causal query tiles of 128 walking key tiles (64
at head dim 128, 128 at 64) up to the diagonal, blocks started in launch order on the first free slot."""

from __future__ import annotations

import pytest
from helpers import load_benchmark


@pytest.fixture(scope="module")
def tiles():
    return load_benchmark("bench_attention_fa2_tiles").last_block_end_tiles


def test_with_a_slot_for_every_block_the_longest_block_ends_last(tiles):
    # 512 tokens: query tiles 0-3 walk 2, 4, 6, 8 key tiles of 64
    assert tiles(heads=1, head_dim=128, tokens=512, slots=4) == 8
    assert tiles(heads=3, head_dim=128, tokens=512, slots=1000) == 8
    assert tiles(heads=1, head_dim=64, tokens=512, slots=4) == 4  # key tiles of 128: 1, 2, 3, 4


def test_one_slot_runs_every_tile_in_turn(tiles):
    assert tiles(heads=2, head_dim=128, tokens=256, slots=1) == 2 * (2 + 4)


def test_blocks_take_the_first_free_slot_in_launch_order(tiles):
    # two slots: 2 and 4 start; 6 joins the slot free at 2 (ends 8), 8 the slot free at 4 (ends 12)
    assert tiles(heads=1, head_dim=128, tokens=512, slots=2) == 12
    # a partial last tile counts whole: 130 tokens are two query tiles, the second walking ceil(130/64) = 3
    assert tiles(heads=1, head_dim=128, tokens=130, slots=2) == 3
