"""Known answers: the peak output rate as `vllm bench serve` counts it (the most tokens in one whole second from the
first request's start), from the engine's step log (sim/results.py `peak_output_tok_s`)."""

import math

import numpy as np
import pandas as pd
import pytest

from sim.results import peak_output_tok_s
from test_decode_run_summary import run

# Five single steps ending at 0.2, 0.9, 1.0, 1.5 and 2.99 s with 5, 7, 4, 3 and 10 tokens
STEPS = pd.DataFrame({"start_s": [0.0, 0.2, 0.9, 1.0, 1.5], "end_s": [0.2, 0.9, 1.0, 1.5, 2.99],
                      "num_output_tokens": [5, 7, 4, 3, 10], "num_steps": [1] * 5})


def test_tokens_count_in_the_whole_second_their_step_ends_in():
    # from 0: second 0 holds 5 + 7, second 1 holds 4 + 3 (1.0 opens it), second 2 holds 10
    assert peak_output_tok_s(STEPS, None, 0.0) == 12.0
    # from 0.5: the step at 0.2 came before the first request, 0.9 and 1.0 share second 0, 1.5 is second 1
    assert peak_output_tok_s(STEPS, None, 0.5) == 11.0
    # from 2.5 only the last step counts
    assert peak_output_tok_s(STEPS, None, 2.5) == 10.0


def test_no_step_after_the_first_request_is_no_rate():
    assert math.isnan(peak_output_tok_s(STEPS, None, 3.0))


@pytest.mark.parametrize("fast", [False, True])
def test_a_decode_runs_steps_count_at_their_own_ends(fast):
    """test_decode_run_summary's two requests: a prefill step ending at 0.5 s, then 5 decode steps ending at 1.5,
    2.75, 4.25, 6.0 and 8.0 s, each making 2 tokens: no second holds more than 2, logged step by step or as a run."""
    steps, runs = run(fast)
    assert peak_output_tok_s(steps, runs, 0.0) == 2.0


def test_a_run_read_back_without_its_steps_counts_its_tokens_at_its_end():
    steps, _ = run(True)
    assert list(steps["num_output_tokens"]) == [2, 10]
    assert peak_output_tok_s(steps, None, 0.0) == 10.0
    np.testing.assert_array_equal(steps["num_steps"], [1, 5])
