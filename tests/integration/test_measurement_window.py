"""The steady-state window (run.warmup_s / run.cooldown_s): known answers, the sustained rate, empty windows."""

import math

import numpy as np
import pandas as pd
import pytest

from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.results import measurement_window, window_metrics
from sim.run import simulate
from sim.views.report import summary_rows, summary_table_html


def _requests(rows):
    """A hand-made requests frame: (arrival_s, first_token_s, finish_s, output_tokens, status)."""
    df = pd.DataFrame(rows, columns=["arrival_s", "first_token_s", "finish_s", "output_tokens", "status"])
    df["finished"] = df["status"] == "finished"
    df["first_scheduled_s"] = df["arrival_s"]
    df["last_token_s"] = df["finish_s"]
    df["ttft_s"] = df["first_token_s"] - df["arrival_s"]
    df["queueing_s"] = 0.0
    df["e2e_s"] = df["finish_s"] - df["arrival_s"]
    df["tpot_s"] = (df["last_token_s"] - df["first_token_s"]) / (df["output_tokens"] - 1)
    return df


def test_window_metrics_known_answer_on_a_hand_made_frame():
    requests = _requests([
        (0.5, 1.0, 3.0, 6, "finished"),   # arrives in the warm-up: not in the latencies, but completes in the window
        (2.0, 2.5, 4.5, 5, "finished"),   # in the window: ttft 0.5, e2e 2.5, tpot 0.5
        (4.0, 5.0, 7.0, 4, "finished"),   # in the window: ttft 1.0, e2e 3.0, tpot 2/3; completes after it
        (5.0, 6.0, np.nan, 0, "unfinished"),  # in the window, never finished
        (6.0, 6.5, 6.9, 3, "finished"),   # arrives at the window's end (excluded: [start, end))
    ])
    steps = pd.DataFrame({"end_s": [0.9, 2.0, 5.9, 6.0], "num_output_tokens": [7, 3, 5, 100]})
    s = window_metrics(requests, steps, 1.0, 6.0)
    assert (s["window_start_s"], s["window_end_s"]) == (1.0, 6.0)
    assert (s["window_num_arrived"], s["window_num_finished"], s["window_num_unfinished"]) == (3, 2, 1)
    assert s["window_offered_rps"] == pytest.approx(3 / 5)
    assert s["window_throughput_rps"] == pytest.approx(2 / 5)  # completions at 3.0 and 4.5
    assert s["window_output_tokens_per_s"] == pytest.approx(8 / 5)  # steps ending at 2.0 and 5.9
    assert s["window_ttft_s_mean"] == pytest.approx(0.75)
    assert s["window_e2e_s_p50"] == pytest.approx(2.75)
    assert s["window_tpot_s_mean"] == pytest.approx((0.5 + 2 / 3) / 2)
    assert "window_note" not in s


def test_a_window_with_no_arrival_gives_nan_latencies_and_a_note():
    requests = _requests([(0.5, 1.0, 3.0, 6, "finished"), (9.0, 9.5, 10.0, 2, "finished")])
    s = window_metrics(requests, pd.DataFrame({"end_s": [], "num_output_tokens": []}), 2.0, 8.0)
    assert s["window_num_arrived"] == 0 and math.isnan(s["window_ttft_s_p99"])
    assert s["window_throughput_rps"] == pytest.approx(1 / 6)  # the completion at 3.0 still counts
    assert "no request arrived in the window [2, 8) s" in s["window_note"]


def test_a_window_of_no_length_is_refused_naming_the_fields():
    requests = _requests([(0.0, 0.1, 0.2, 2, "finished"), (10.0, 10.1, 10.2, 2, "finished")])
    assert measurement_window(requests, 2.0, 3.0) == (2.0, 7.0)  # ends cooldown_s before the last arrival
    assert measurement_window(requests, 2.0, 3.0, arrivals_end_s=20.0) == (2.0, 17.0)
    with pytest.raises(ConfigError, match=r"run.warmup_s, run.cooldown_s: 6 s and 4 s leave no measurement window"):
        measurement_window(requests, 6.0, 4.0)
    raw = {"workload": {"arrival": {"kind": "constant", "rate_per_s": 1.0},
                        "lengths": {"kind": "fixed", "input_tokens": 8, "output_tokens": 2}},
           "run": {"duration_s": 10, "warmup_s": 6, "cooldown_s": 4}}
    with pytest.raises(ConfigError, match=r"warmup_s \+ cooldown_s: 6 \+ 4 s leave no measurement window in duration_s 10"):
        validate_scenario(raw)


def _constant_rate_run(**run):
    return simulate(validate_scenario({
        "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 8.0},
                     "lengths": {"kind": "fixed", "input_tokens": 256, "output_tokens": 400}},
        "run": {"seed": 3, "num_requests": 960, **run}}))  # ~120 s of arrivals, then the drain


def test_window_throughput_is_the_arrival_rate_while_the_whole_run_includes_the_drain():
    r = _constant_rate_run(warmup_s=20.0, cooldown_s=10.0)
    s = r.summary
    last_arrival = float(r.requests["arrival_s"].max())
    assert (s["window_start_s"], s["window_end_s"]) == (20.0, last_arrival - 10.0)
    span = s["window_end_s"] - s["window_start_s"]
    # Poisson arrivals at 8/s over ~90 s: the count's standard deviation is sqrt(720) ~ 27, i.e. 0.3/s.
    assert abs(s["window_throughput_rps"] - 8.0) < 4 * math.sqrt(8.0 / span)
    assert abs(s["window_throughput_rps"] - s["window_offered_rps"]) < 0.25  # keeps up: completions track arrivals
    # The whole run divides by a span that includes the drain (the last request's 400 decode steps): lower.
    assert s["elapsed_s"] > last_arrival + 1.0
    assert s["throughput_rps"] < s["window_throughput_rps"] - 0.05
    unwindowed = _constant_rate_run().summary
    assert not any(k.startswith("window_") for k in unwindowed)
    assert {k: v for k, v in s.items() if not k.startswith("window_")}.keys() == unwindowed.keys()


def test_every_table_says_which_rows_are_the_window_and_which_the_whole_run():
    r = _constant_rate_run(warmup_s=20.0, cooldown_s=10.0)
    labels = dict(summary_rows([r]))
    assert labels["ttft_s_p99"] == "whole run: TTFT p99 (s)"
    assert labels["window_ttft_s_p99"] == "window: TTFT p99 (s)"
    assert labels["window_throughput_rps"].startswith("window: ")
    keys = [k for k, _ in summary_rows([r])]
    assert keys.index("window_ttft_s_p99") == keys.index("ttft_s_p99") + 1
    html = summary_table_html([r])
    assert "whole run: TTFT p99 (s)" in html and "window: TTFT p99 (s)" in html
    plain = _constant_rate_run()
    assert summary_rows([plain]) == [row for row in summary_rows([plain]) if not row[0].startswith("window_")]
    assert not any(label.startswith("whole run") for _, label in summary_rows([plain]))
