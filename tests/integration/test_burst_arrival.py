"""`arrival: {kind: burst}`: every request at t = 0 (batch-inference jobs, microbenchmarks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from sim.config.files import load_scenario_set, validate_scenario
from sim.errors import ConfigError
from sim.run import make_workload, simulate
from sim.workload.arrivals import BurstArrival
from sim.workload.generate import WorkloadSpec, generate_workload

REPO = Path(__file__).resolve().parents[2]
LENGTHS = {"kind": "uniform", "input_min": 16, "input_max": 256, "output_min": 4, "output_max": 64}


def workload(**run):
    spec = WorkloadSpec.model_validate({"arrival": {"kind": "burst"}, "lengths": LENGTHS})
    return generate_workload(spec, seed=0, max_context=4096, **run)


def test_every_request_arrives_at_zero():
    w = workload(num_requests=500, duration_s=None)
    assert w.num_requests == 500
    assert np.array_equal(w.arrival_s, np.zeros(500))
    # With a duration too, the count still decides (all arrivals fall inside any window).
    assert np.array_equal(workload(num_requests=40, duration_s=1.0).arrival_s, np.zeros(40))
    # Lengths come from their own stream: the same as under any other arrival process.
    poisson = generate_workload(WorkloadSpec.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 3},
                                                              "lengths": LENGTHS}),
                                seed=0, num_requests=500, duration_s=None, max_context=4096)
    assert np.array_equal(w.input_tokens, poisson.input_tokens)


def test_duration_alone_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^run\.num_requests: missing; a burst arrival needs it") as err:
        workload(num_requests=None, duration_s=10.0)
    assert "\n" not in str(err.value)


def test_a_burst_has_no_rate():
    with pytest.raises(ConfigError, match="'burst' has no arrival rate"):
        _ = BurstArrival().mean_rate_per_s
    with pytest.raises(ConfigError, match="'burst' has no arrival rate"):
        BurstArrival().with_rate(5.0)
    with pytest.raises(ValidationError):
        BurstArrival.model_validate({"kind": "burst", "rate_per_s": 5})


def test_simulate_finishes_the_whole_burst():
    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
           "workload": {"arrival": {"kind": "burst"}, "lengths": LENGTHS},
           "scheduler": {"max_num_seqs": 32}, "run": {"seed": 1, "num_requests": 120}}
    result = simulate(validate_scenario(raw))
    req = result.requests
    assert result.summary["num_finished"] == 120 and len(req) == 120
    assert (req["arrival_s"] == 0).all()
    assert req["queueing_s"].max() > 0  # max_num_seqs 32 < 120: the rest wait their turn
    assert result.steps["num_waiting"].iloc[0] == 120 - result.steps["num_seqs"].iloc[0]


def test_the_shipped_burst_scenario_reads_its_hf_config():
    scenario_set = load_scenario_set(REPO / "scenarios" / "batch_burst_hf.yaml")
    base = scenario_set.base
    assert base.model.name == "qwen3-8b" and base.workload.arrival.kind == "burst"
    w = make_workload(base)
    assert w.num_requests == base.run.num_requests and not w.arrival_s.any()
