"""Parallel sampling and beam search: sequences of one request share its prompt's blocks."""

import pytest
from helpers import make_request

from sim.config.files import validate_scenario
from sim.kv.paged import PagedKVManager
from sim.run import simulate
from sim.sched.continuous import ContinuousScheduler


def test_forked_sequences_share_the_prompt_and_copy_the_partial_block():
    kv = PagedKVManager(num_blocks=64, block_size=4)
    sched = ContinuousScheduler(kv, max_num_seqs=8, max_num_batched_tokens=64, chunked_prefill=False,
                                max_model_len=1000, sequences_per_request=3)
    r = make_request(10, 5, request_id=7)  # 10 prompt tokens: 2 full blocks and a partial one
    sched.add_request(r)
    plan = sched.schedule(0.0)
    sched.update_from_output(plan, 1.0)
    assert len(sched.running) == 3 and len(sched.tracker) == 3
    tables = [kv.block_tables[rid] for rid in sched.running]
    assert tables[0] == tables[1] == tables[2]  # all three sequences point at the same 3 blocks
    assert kv.num_free_blocks == 64 - 3
    plan = sched.schedule(1.0)  # each writes token 11 into the shared partial block: 2 of 3 copy it
    assert kv.sharing_stats().num_cow_copies == 2
    tables = [kv.block_tables[rid] for rid in sched.running]
    assert tables[0][:2] == tables[1][:2] == tables[2][:2] and len({t[2] for t in tables}) == 3
    now, finished = 1.0, []
    while plan is not None:
        now += 1
        finished += sched.update_from_output(plan, now).finished
        plan = sched.schedule(now)
    assert finished == [r] and r.finish_s == now  # the request returns once, with its last sequence
    assert kv.num_free_blocks == 64 and not sched.running and not sched.sampling.remaining


def scenario(samples=1, beam=1, prefix_caching=False):
    return validate_scenario({
        "model": "llama-3.1-8b",
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 8},
                     "lengths": {"kind": "fixed", "input_tokens": 1000, "output_tokens": 100},
                     "samples_per_prompt": samples, "beam_width": beam},
        "scheduler": {"max_model_len": 4096},
        "kv_cache": {"enable_prefix_caching": prefix_caching},
        "run": {"seed": 2, "num_requests": 200},
    })


@pytest.mark.parametrize("sampling", [{"samples": 4}, {"beam": 4}])
def test_n_sequences_generate_n_times_the_tokens_and_share_memory(sampling):
    one, many = simulate(scenario()), simulate(scenario(**sampling))
    assert many.summary["num_finished"] == one.summary["num_finished"] == 200
    # Every request's 4 sequences generate its 100 tokens each; the prompt is computed once.
    assert many.steps["num_output_tokens"].sum() == 4 * one.steps["num_output_tokens"].sum()
    assert many.steps["num_prefill_tokens"].sum() == one.steps["num_prefill_tokens"].sum()
    assert many.summary["kv_shared_bytes_mean"] > 0
    # Shared prompt blocks are stored once: far less than 4 private copies of the prompt would take.
    peak_tokens = many.steps["kv_token_slots"] + many.steps["kv_shared_slots"]
    assert many.steps["kv_token_slots"].max() < 0.6 * peak_tokens.max()


def test_several_sequences_need_paged_continuous():
    from sim.errors import ConfigError
    with pytest.raises(ConfigError, match="paged"):
        validate_scenario({**scenario(samples=2).model_dump(exclude_none=True),
                           "kv_cache": {"layout": "contiguous"}})
