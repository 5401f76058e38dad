"""Properties of whole simulations, over random small scenarios (hypothesis)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.files import validate_scenario
from sim.run import simulate

policies = st.sampled_from([
    ("continuous", "paged", False), ("continuous", "paged", True), ("continuous", "contiguous", False),
    ("static", "paged", False), ("static", "contiguous", False),
])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=policies, reserve=st.sampled_from(["max_len", "pow2", "oracle"]),
       capacity=st.integers(600, 6000), block_size=st.sampled_from([1, 8, 16, 32]),
       rate=st.floats(1.0, 200.0), seed=st.integers(0, 10_000), replicas=st.integers(1, 3),
       horizon=st.one_of(st.none(), st.floats(0.5, 20.0)))
def test_memory_bounded_nothing_leaked_every_request_accounted(policy, reserve, capacity, block_size, rate,
                                                               seed, replicas, horizon):
    batching, layout, chunked = policy
    sc = validate_scenario({
        "model": "llama-3.1-8b",
        "hardware": {"num_replicas": replicas, "router": "least_outstanding"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": rate},
                     "lengths": {"kind": "lognormal", "input_mean": 200, "input_sigma": 1.2,
                                 "output_mean": 60, "output_sigma": 1.2}},
        "scheduler": {"batching": batching, "chunked_prefill": chunked, "max_num_seqs": 16,
                      "max_num_batched_tokens": 512 if chunked else None, "max_model_len": 2048,
                      "max_batch_size": 4},
        "kv_cache": {"layout": layout, "capacity_tokens": capacity, "block_size": block_size,
                     "reserve": reserve},
        "run": {"seed": seed, "num_requests": 60, "horizon_s": horizon},
    })
    result = simulate(sc)
    req, steps = result.requests, result.steps
    # Every request that arrived is finished, still in flight at the horizon, or rejected with a reason.
    assert req["status"].isin(["finished", "unfinished", "rejected"]).all()
    rejected = req[req["status"] == "rejected"]
    assert (rejected["reject_reason"].str.len() > 0).all()
    if horizon is None:
        assert len(req) == 60 and not (req["status"] == "unfinished").any()
    # KV memory never exceeds capacity, at any step.
    allocated = steps["kv_token_slots"] + steps["kv_reserved_slots"] + steps["kv_internal_slots"]
    assert (allocated + steps["kv_external_slots"] <= steps["kv_capacity_slots"]).all()
    assert (steps[["kv_token_slots", "kv_reserved_slots", "kv_internal_slots", "kv_external_slots"]] >= 0).all().all()
    # After the last request leaves a replica, nothing is still allocated there.
    if horizon is None:
        last = steps.groupby("replica").tail(1)
        assert (allocated[last.index] == 0).all()
    fin = req[req["status"] == "finished"]
    assert (fin["output_tokens"] == fin["max_output_tokens"]).all()
