"""The scan of a step log for the gaps between a request's tokens (`sim.results.decode_gaps`), compiled.

A million-request run logs millions of step rows. The scan is one pass each way over them, writing the two arrays
it returns; written as whole-column numpy operations it built a dozen temporaries the size of the log, and inside a
1M-request summary took 4-5x what the same operations took when called again on the same log. Without numba it runs
as plain Python (`sim.jit`): the same gaps, slower.
"""

from __future__ import annotations

import numpy as np

from sim.jit import njit


@njit(cache=True)
def gap_rows(start, first_s, decodes, tokens, replica, one_replica, run_steps, run_decodes, run_mean_s, step_s,
             run_first):
    """The gaps and how many requests waited each, for every replica's rows (each replica's together, in the order
    they ran). First a gap for every decoding row, in order: its step's duration, plus, after rows of its replica
    without decodes, the wait from the row after the replica's previous decoding row. Then, scanning back, the first
    tokens of each row without decodes that the replica's next decoding row takes (the latest rows first, as many as
    it decodes; those it takes leave its own count): each waited from the row after it. Then each decode run's steps
    after its first, in row order (`run_steps` steps, `run_decodes` requests each): their own durations,
    `step_s[run_first + 1:run_first + run_steps]`, or, with no `step_s`, the run's mean step (`run_mean_s`).
    `one_replica`: every row is in one replica (`replica` is then not read).
    The counts are whole numbers (int64): the summary's bucketed percentile search needs them to find the full
    sort's values (sim.results weighted_percentiles)."""
    n = len(decodes)
    num_decoding = 0
    num_joined = 0
    next_row = -1
    for i in range(n - 1, -1, -1):
        if decodes[i] > 0:
            num_decoding += 1
            next_row = i
        elif tokens[i] > 0 and next_row >= 0 and (one_replica or replica[next_row] == replica[i]):
            num_joined += 1
    values = np.empty(num_decoding + num_joined + int((run_steps - 1).sum()))
    counts = np.empty(len(values), np.int64)
    k = 0
    previous = -1
    for i in range(n):
        if decodes[i] > 0:
            gap_s = first_s[i]
            if previous >= 0 and i - previous > 1 and (one_replica or replica[previous] == replica[i]):
                gap_s += start[i] - start[previous + 1]
            values[k] = gap_s
            counts[k] = decodes[i]
            previous = i
            k += 1
    # k is now the next decoding row's place, counted back; m the next joined gap's
    m = num_decoding
    next_row = -1
    tokens_after = 0  # first tokens of the rows between this one and the next decoding row
    for i in range(n - 1, -1, -1):
        if decodes[i] > 0:
            k -= 1
            next_row = i
            tokens_after = 0
        elif tokens[i] > 0 and next_row >= 0 and (one_replica or replica[next_row] == replica[i]):
            joined = min(max(decodes[next_row] - tokens_after, 0), tokens[i])
            tokens_after += tokens[i]
            counts[k] -= joined
            values[m] = first_s[next_row] + (start[next_row] - start[i + 1])
            counts[m] = joined
            m += 1
    for r in range(len(run_steps)):
        inner = run_steps[r] - 1
        if len(step_s):
            values[m:m + inner] = step_s[run_first[r] + 1:run_first[r] + run_steps[r]]
        else:
            values[m:m + inner] = run_mean_s[r]
        counts[m:m + inner] = run_decodes[r]
        m += inner
    return values, counts
