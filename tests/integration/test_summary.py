"""The summary of a run is one dict computed in sim.results: its keys, order, types and values are pinned.

The fixture was written by the code before the summary moved into sim/results.py (prefix caching,
speculation, two replicas, a goodput SLO), so a refactor that changes any number fails here.
"""

import json
import math
from pathlib import Path

from sim.config.files import validate_scenario
from sim.run import simulate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "summary" / "prefix_speculation.json"


def test_summary_of_a_prefix_caching_speculative_run_is_unchanged():
    pinned = json.loads(FIXTURE.read_text())
    summary = simulate(validate_scenario(pinned["scenario"])).summary
    assert list(summary) == list(pinned["summary"])
    assert {k: type(v).__name__ for k, v in summary.items()} == pinned["types"]
    for key, expected in pinned["summary"].items():
        value = summary[key]
        same = value == expected or (isinstance(expected, float) and math.isnan(expected) and math.isnan(value))
        assert same, f"{key}: {value!r} != pinned {expected!r}"
    # a verification yields its own token and its accepted drafts: 1 + γ x the share of drafts accepted
    gamma = pinned["scenario"]["speculation"]["num_speculative_tokens"]
    assert math.isclose(summary["accept_length_mean"], 1 + gamma * summary["draft_acceptance_rate"], rel_tol=1e-12)


def _steps(**columns):
    import pandas as pd
    base = {"duration_s": [1.0, 3.0], "swap_in_tokens": [0, 0], "swap_out_tokens": [0, 0], "kv_shared_slots": [0, 0]}
    return pd.DataFrame(base | columns)


def test_speculation_metrics_pool_the_replicas_and_stay_out_without_speculation():
    from sim.results import ReplicaCounters, speculation_metrics
    assert speculation_metrics([ReplicaCounters(100)]) == {}
    # γ 3: 10 verifications drafted 30 and kept 10; γ 2: 5 drafted 10 and kept 10 (every draft)
    rate = speculation_metrics([ReplicaCounters(100, num_drafted=30, num_accepted_drafts=10, num_verifications=10),
                                ReplicaCounters(100, num_drafted=10, num_accepted_drafts=10, num_verifications=5)])
    assert rate == {"draft_acceptance_rate": 0.5, "accept_length_mean": (15 + 20) / 15}
    idle = speculation_metrics([ReplicaCounters(1, num_drafted=0, num_accepted_drafts=0, num_verifications=0)])
    assert math.isnan(idle["draft_acceptance_rate"]) and math.isnan(idle["accept_length_mean"])


def test_kv_memory_pools_prefix_hits_and_weights_sharing_by_step_time():
    from sim.kv.base import PrefixCacheStats
    from sim.results import ReplicaCounters, kv_memory
    stats = [PrefixCacheStats(1, 100, 25, 10, 2, 2, 1), PrefixCacheStats(1, 300, 75, 30, 8, 8, 4)]
    out = kv_memory(_steps(swap_in_tokens=[2, 0], swap_out_tokens=[0, 3], kv_shared_slots=[4, 8]),
                    [ReplicaCounters(500, prefix_cache=s) for s in stats], kv_bytes_per_token=10)
    assert out == {"kv_capacity_tokens": 500, "swapped_bytes": 50, "prefix_cache_hit_rate_tokens": 0.25,
                   "prefix_cache_hit_rate_blocks": 0.25, "prefix_cache_evictions": 5, "kv_shared_bytes_mean": 70.0}
    assert "prefix_cache_hit_rate_tokens" not in kv_memory(_steps(), [ReplicaCounters(500)], kv_bytes_per_token=10)
