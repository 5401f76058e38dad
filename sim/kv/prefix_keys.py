"""Content keys of a prompt's blocks, chained hashes: what prefix caching looks blocks up by."""

from __future__ import annotations


def block_keys(prefix_ids, unit: int, num_prompt_tokens: int, block_size: int) -> tuple[list[int], int]:
    """Content keys of a prompt's blocks: (keys, number of full blocks keyed).

    Block j's key is hash((key of block j-1, content of block j)), chained from the unit size. Its
    content is the ids of the units it overlaps and where it starts in the first of them, so any unit
    size works (unit a multiple of the block size: (id, offset); a divisor: the block's ids). Only
    blocks whose tokens all lie in the prompt and have ids are keyed, plus, when the ids cover the whole
    prompt, its partly filled last block (its content also records how many tokens it holds).
    Keys are Python's 64-bit tuple hashes (deterministic for integers); two different prefixes would
    share only on a collision, with probability about n^2 / 2^64 for n distinct blocks.
    """
    if prefix_ids is None or unit <= 0 or not len(prefix_ids):
        return [], 0
    covered = min(num_prompt_tokens, len(prefix_ids) * unit)
    num_full = covered // block_size
    tail = covered == num_prompt_tokens and covered % block_size
    ids = prefix_ids[: -(-covered // unit)].tolist()
    keys = []
    prev = unit
    if unit % block_size == 0:
        per_unit = unit // block_size
        for j in range(num_full):
            prev = hash((prev, ids[j // per_unit], j % per_unit * block_size))
            keys.append(prev)
    else:
        for j in range(num_full):
            start = j * block_size
            prev = hash((prev, tuple(ids[start // unit: (start + block_size - 1) // unit + 1]), start % unit))
            keys.append(prev)
    if tail:
        start = num_full * block_size
        keys.append(hash((prev, tuple(ids[start // unit:]), start % unit, covered - start)))
    return keys, num_full
