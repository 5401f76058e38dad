"""Preemption as a policy: which request is the victim (scheduler.preemption.victim) apart from what
happens to its KV (scheduler.preemption.mode); the old kv_cache keys still read, with a warning."""

import warnings

import pytest
from helpers import make_request

from sim.config.files import validate_scenario
from sim.config.schema import ConfigDeprecationWarning
from sim.errors import ConfigError
from sim.kv.paged import PagedKVManager
from sim.run import simulate
from sim.sched.continuous import ContinuousScheduler
from sim.sched.preemption import VICTIM_POLICIES, fewest_computed_tokens, most_kv_blocks


def first_preemptions(victim: str) -> tuple[list[int], dict[str, int]]:
    """Three requests fill a 6-block cache exactly (prompts of 3, 1 and 2 blocks); at their first decode
    each needs a new block. Returns the ids preempted in that step, and the requests' ids by name."""
    kv = PagedKVManager(6, 4)
    sched = ContinuousScheduler(kv, max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=False,
                                max_model_len=1000, victim=victim)
    a, b, c = make_request(12, 5), make_request(4, 5), make_request(8, 5)
    for r in (a, b, c):
        sched.add_request(r)
    plan = sched.schedule(0.0)
    assert plan.prefill_request_ids == [a.request_id, b.request_id, c.request_id] and kv.num_free_blocks == 0
    sched.update_from_output(plan, 1.0)
    plan = sched.schedule(1.0)
    return plan.preempted_request_ids, {"a": a.request_id, "b": b.request_id, "c": c.request_id}


def test_last_admitted_preempts_the_most_recent_admission():
    victims, ids = first_preemptions("last_admitted")
    assert victims == [ids["c"]]  # freeing c's 2 blocks leaves room for a's and b's next block


def test_fewest_computed_tokens_preempts_the_cheapest_to_recompute():
    victims, ids = first_preemptions("fewest_computed_tokens")
    # b (4 tokens) frees 1 block, 2 are needed; then c (8 tokens) rather than a (12).
    assert victims == [ids["b"], ids["c"]]


def test_most_kv_blocks_preempts_the_largest_holder():
    victims, ids = first_preemptions("most_kv_blocks")
    assert victims == [ids["a"]]  # its 3 blocks cover b's and c's next block at once


def test_ties_go_to_the_most_recently_admitted():
    kv = PagedKVManager(8, 4)
    older, newer = make_request(4, 1), make_request(4, 1)
    for r in (older, newer):
        assert kv.allocate_slots(r, 4) is not None
        r.num_computed_tokens = 4
    latest_first = [newer, older]
    assert fewest_computed_tokens(latest_first, kv) is newer
    assert most_kv_blocks(latest_first, kv) is newer


def test_unknown_victim_policy_is_refused():
    with pytest.raises(ValueError, match="victim: 'oldest'.*last_admitted"):
        ContinuousScheduler(PagedKVManager(6, 4), max_num_seqs=8, max_num_batched_tokens=64,
                            chunked_prefill=False, max_model_len=1000, victim="oldest")


def tight(**sections) -> dict:
    """A small KV cache under forks, prefix caching and chunked prefill: preemption on most steps."""
    raw = {"model": "llama-3.1-8b", "cost_model": {"kind": "roofline"},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 20},
                        "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 200},
                        "samples_per_prompt": 3},
           "scheduler": {"chunked_prefill": True}, "kv_cache": {"capacity_tokens": 6000, "enable_prefix_caching": True},
           "run": {"seed": 3, "num_requests": 150}}
    for name, section in sections.items():
        raw[name] = {**raw.get(name, {}), **section}
    return raw


def test_default_reproduces_the_results_from_before_preemption_was_a_policy():
    # Numbers recorded on the commit before this change (the victim was `running.popitem()`).
    result = simulate(validate_scenario(tight()))
    assert result.summary["preemptions"] == 116 and result.summary["num_finished"] == 150
    assert result.summary["elapsed_s"] == pytest.approx(51.182679223, rel=1e-9)
    assert result.summary["output_tokens_per_s"] == pytest.approx(1758.407362909, rel=1e-9)
    explicit = simulate(validate_scenario(tight(scheduler={"chunked_prefill": True,
                                                           "preemption": {"victim": "last_admitted"}})))
    assert explicit.steps.equals(result.steps)


@pytest.mark.parametrize("victim", sorted(set(VICTIM_POLICIES) - {"last_admitted"}))
@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_every_policy_and_mode_finishes_every_request(victim, mode):
    preemption = {"victim": victim, "mode": mode, "swap_space_bytes": 300_000_000}
    result = simulate(validate_scenario(tight(scheduler={"chunked_prefill": True, "preemption": preemption})))
    assert result.summary["num_finished"] == 150 and result.summary["preemptions"] > 0
    assert (result.summary["swapped_bytes"] > 0) == (mode == "swap")
    assert f"victim='{victim}'" in result.extras["scheduler"]


def test_old_kv_cache_keys_still_work_with_a_warning():
    with pytest.warns(ConfigDeprecationWarning) as record:
        old = validate_scenario(tight(kv_cache={"preemption": "swap", "swap_space_bytes": 123}))
    assert sorted(str(w.message) for w in record) == [
        "kv_cache.preemption is deprecated: write scheduler.preemption.mode instead",
        "kv_cache.swap_space_bytes is deprecated: write scheduler.preemption.swap_space_bytes instead"]
    assert old.scheduler.preemption.mode == "swap" and old.scheduler.preemption.swap_space_bytes == 123
    assert old.kv_cache.preemption is None and "swap_space_bytes" not in old.to_yaml().split("preemption:")[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = validate_scenario(tight(scheduler={"preemption": {"mode": "swap", "swap_space_bytes": 123}}))
    assert new.scheduler.preemption == old.scheduler.preemption
    # Both given and agreeing is fine.
    with pytest.warns(ConfigDeprecationWarning):
        validate_scenario(tight(kv_cache={"preemption": "swap"}, scheduler={"preemption": {"mode": "swap"}}))


def test_old_and_new_keys_that_disagree_are_one_clear_error():
    with pytest.raises(ConfigError) as err:
        validate_scenario(tight(kv_cache={"preemption": "swap"}, scheduler={"preemption": {"mode": "recompute"}}))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("kv_cache.preemption: 'swap' contradicts scheduler.preemption.mode 'recompute'")


def test_unknown_victim_in_a_scenario_names_the_field_and_the_choices():
    with pytest.raises(ConfigError) as err:
        validate_scenario(tight(scheduler={"preemption": {"victim": "oldest"}}))
    message = str(err.value)
    assert message.startswith("scheduler.preemption.victim") and "oldest" in message
    assert all(name in message for name in VICTIM_POLICIES) and "\n" not in message
