"""A run's prompt content ids (sim/workload/prefixes.py): what each request's ids are, and the most a run holds
(MAX_CONTENT_IDS), past which it is refused in one line rather than filling the host's memory."""

from __future__ import annotations

import numpy as np
import pytest

import sim.workload.prefixes as prefixes
from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.run import make_workload
from sim.workload.prefixes import SharedSystemPrompt, system_prompt_ids


def test_each_request_shares_its_system_prompts_whole_units_then_takes_fresh_ids():
    # 2 prompts of 40 tokens: 2 whole units each, so the shared ids are 0-1 (prompt 0) and 2-3 (prompt 1), and
    # fresh ids start at 4, one per unit of every request in order
    spec = SharedSystemPrompt(kind="shared_system_prompt", tokens=40, fraction=0.5, num_prompts=2)
    ids = system_prompt_ids(spec, np.array([1, -1, 0, 0]), np.array([50, 20, 17, 16]))
    assert [x.tolist() for x in ids] == [[2, 3, 6, 7], [8, 9], [0, 1], [0]]


def scenario(num_requests: int | None = None, duration_s: float | None = None, **workload) -> dict:
    return {"model": "llama-3.1-8b", "scheduler": {"max_model_len": 4096},
            "workload": {"arrival": {"kind": "poisson", "rate_per_s": 10},
                         "lengths": {"kind": "fixed", "input_tokens": 160, "output_tokens": 8},
                         "prefix": {"kind": "shared_system_prompt", "tokens": 320, "fraction": 1.0}, **workload},
            "run": {"num_requests": num_requests, "duration_s": duration_s}}


def test_a_run_past_the_most_content_ids_is_refused_naming_the_most_requests_that_fit(monkeypatch):
    """5.8 million requests of scenarios/prefix_caching.yaml built 21 GB of ids (the process was ended by the kernel
    under the test suite's random values)."""
    monkeypatch.setattr(prefixes, "MAX_CONTENT_IDS", 300)  # each request: 480 tokens, 30 ids; 10 fit
    assert len(make_workload(validate_scenario(scenario(10))).prefix_ids) == 10
    with pytest.raises(ConfigError, match=r"^run\.num_requests: 11 requests whose prompts hold 330 content ids "
                                          r"\(workload\.prefix: one per 16 prompt tokens, for prefix sharing\) pass "
                                          r"the 300 a run holds \(MAX_CONTENT_IDS\); allowed: run\.num_requests <= 10$"):
        make_workload(validate_scenario(scenario(11)))
    with pytest.raises(ConfigError, match=r"^run\.duration_s: \d+ requests .*; allowed: a run\.duration_s whose "
                                          r"arrivals number <= 10$"):
        make_workload(validate_scenario(scenario(duration_s=60.0)))
    multi = {"prefix": {"kind": "multi_turn", "turns_mean": 2.0, "think_time_s": 1.0}}
    with pytest.raises(ConfigError, match=r"^run\.num_requests: .*; allowed: run\.num_requests <= about \d+$"):
        make_workload(validate_scenario(scenario(100, **multi)))
