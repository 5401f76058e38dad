"""Hybrid sliding-window models (gpt-oss, Gemma 2 and 3): some layers attend through a window, the others to the whole
context. The memory arithmetic, the paged cache's blocks and every cost model's attention, checked against hand
arithmetic."""

import math

import pandas as pd
import pytest
from helpers import make_request, small_scenario

from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.errors import ConfigError
from sim.kv.paged import PagedKVManager
from sim.model.memory import kv_bytes_for_sequence, kv_slot_bytes, sequence_slots, window_kv_bytes_per_token
from sim.model.specs import ModelSpec
from sim.run import deployment_of, make_cost_model, make_scheduler, simulate

# gpt-oss-20b's attention (openai/gpt-oss-20b config.json), 24 layers of which 12 slide over 128 tokens, with a dense
# MLP so that any cost model can price it.
GPT_OSS_LIKE = dict(name="hybrid-20b", num_layers=24, hidden_size=2880, num_attention_heads=64, num_kv_heads=8,
                    head_dim=64, ffn_size=8192, vocab_size=201088, max_context=131072, sliding_window=128,
                    sliding_window_layers=12, attention_bias=True)
LAYER_BYTES = 2 * 8 * 64 * 2  # one token's K and V in one layer, bf16


def _model(**change) -> ModelSpec:
    return ModelSpec(**(GPT_OSS_LIKE | change))


def test_the_memory_arithmetic_keeps_the_sliding_layers_last_window_only():
    m = _model()
    assert (m.num_window_layers, m.hybrid_window, m.window_layer_share) == (12, True, 0.5)
    assert kv_slot_bytes(m) == window_kv_bytes_per_token(m) == 12 * LAYER_BYTES
    assert kv_bytes_for_sequence(m, 100) == 100 * 24 * LAYER_BYTES  # shorter than the window: every layer holds it
    assert kv_bytes_for_sequence(m, 5000) == (5000 + 128) * 12 * LAYER_BYTES
    assert sequence_slots(m, 5000) == 5128
    # Gemma 3 27B's split (52 of 62 layers slide over 1,024 tokens): the window in slots of the 10 global layers
    gemma = _model(num_layers=62, sliding_window=1024, sliding_window_layers=52)
    assert sequence_slots(gemma, 5000) == 5000 + math.ceil(1024 * 52 / 10)
    # Every layer sliding is Mistral's window, no layer none
    assert not _model(sliding_window_layers=None).hybrid_window
    assert sequence_slots(_model(sliding_window_layers=None), 5000) == 128
    with pytest.raises(ValueError, match="more than num_layers"):
        _model(sliding_window_layers=25)
    with pytest.raises(ValueError, match="needs a sliding_window"):
        _model(sliding_window=None)


def test_the_kv_capacity_counts_slots_of_the_layers_that_grow():
    def scenario(**model):
        return validate_scenario(small_scenario({"model": GPT_OSS_LIKE | model}))
    hybrid, dense = deployment_of(scenario()), deployment_of(scenario(sliding_window=None, sliding_window_layers=None))
    # The same memory, half the bytes per slot: twice the slots (up to the rounding of the bytes left).
    assert hybrid.kv_bytes_per_token_per_gpu * 2 == dense.kv_bytes_per_token_per_gpu
    assert hybrid.kv_capacity_tokens == pytest.approx(2 * dense.kv_capacity_tokens, abs=1)
    assert hybrid.kv_bytes_for_tokens(1000) == (1000 + 128) * 12 * LAYER_BYTES  # what a disaggregated prefill sends
    with pytest.raises(ConfigError, match="kv_cache.layout: 'contiguous' is not modelled for hybrid-20b, whose 12 of "
                       "24 layers slide"):
        deployment_of(validate_scenario(small_scenario({"model": GPT_OSS_LIKE,
                                                                    "kv_cache": {"layout": "contiguous"}})))


@pytest.mark.parametrize("caching", [False, True])
def test_each_request_holds_its_window_blocks_from_its_first_allocation_to_its_free(caching):
    # Window 128 in 16-token blocks touches at most 9 blocks; the sliding layers hold as many bytes as the others.
    kv = PagedKVManager(100, 16, enable_prefix_caching=caching, sliding_window=128, window_bytes_per_slot=(1, 1))
    long, short = make_request(prompt=1000, output=10), make_request(prompt=40, output=10)
    assert (kv.window_blocks(1010), kv.window_blocks(50)) == (9, 4)
    assert kv.blocks_for_sequence(1010) == 64 + 9 and kv.can_ever_fit(1010) and not kv.can_ever_fit(1500)
    assert kv.num_new_blocks(long, 1000) == 63 + 9
    assert len(kv.allocate_slots(long, 1000)) == 63  # the table's blocks; the window's are held apart
    assert kv.num_free_blocks == 100 - 72 and kv.num_new_blocks(long, 8) == 0  # taken once
    long.num_computed_tokens = 1000
    assert kv.allocate_slots(short, 40) is not None and kv.num_free_blocks == 100 - 72 - 3 - 4
    big = make_request(prompt=300, output=10)  # 19 + 9 blocks: more than the 21 left
    assert kv.allocate_slots(big, 300) is None and kv.num_free_blocks == 21
    kv.check_consistency()
    usage = kv.usage(num_token_slots=1040)
    assert usage.token_slots == 1040 + 13 * 16  # the window blocks hold token states
    kv.free(long)
    kv.free(short)
    assert kv.num_free_blocks == 100
    kv.check_consistency()


def test_a_window_in_fewer_bytes_per_token_takes_fewer_blocks():
    # Gemma 3 27B: 52 sliding layers against 10 global, window 1,024 in 16-token blocks (65 blocks at most)
    kv = PagedKVManager(10_000, 16, sliding_window=1024, window_bytes_per_slot=(52, 10))
    assert kv.window_blocks(5000) == math.ceil(65 * 52 / 10) == 338
    assert kv.window_blocks(100) == math.ceil(7 * 52 / 10)


def _priced(model, cost_model, plan):
    scenario = validate_scenario(small_scenario({"model": model, "cost_model": cost_model}))
    return make_cost_model(scenario).step_cost(plan)


@pytest.mark.parametrize("cost_model", [{"kind": "roofline"}, {"kind": "roofline", "efficiencies": "learned"},
                                        {"kind": "measured"}])
@pytest.mark.parametrize("plan", [
    StepPlan(num_decode_seqs=32, decode_context_tokens=32 * 3000, num_sampled_seqs=32),
    StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[2048], prefill_context_tokens=[4096],
             num_decode_seqs=8, decode_context_tokens=8 * 700, num_sampled_seqs=9)])
def test_a_hybrid_layer_is_the_share_weighted_mean_of_a_windowed_and_a_whole_one(cost_model, plan):
    # Each layer's attention is its own kernels: half the layers through the window, half without it. Everything
    # else in a step is the same, so the step is the mean of the model with the window on every layer and without.
    hybrid = _priced(GPT_OSS_LIKE, cost_model, plan)
    windowed = _priced(GPT_OSS_LIKE | {"sliding_window_layers": None}, cost_model, plan)
    whole = _priced(GPT_OSS_LIKE | {"sliding_window": None, "sliding_window_layers": None}, cost_model, plan)
    assert windowed.time_s < hybrid.time_s < whole.time_s
    assert hybrid.time_s == pytest.approx((windowed.time_s + whole.time_s) / 2, rel=1e-12)
    if cost_model["kind"] == "roofline":
        assert hybrid.flops == pytest.approx((windowed.flops + whole.flops) / 2, rel=1e-12)
        assert hybrid.bytes == pytest.approx((windowed.bytes + whole.bytes) / 2, rel=1e-12)


@pytest.mark.parametrize("changes", [
    {},
    {"kv_cache": {"enable_prefix_caching": True},
     "workload": {"prefix": {"kind": "shared_system_prompt", "tokens": 512, "fraction": 0.8, "num_prompts": 2}}},
    {"kv_cache": {"capacity_tokens": 12_000}},  # preemptions: window blocks given back and taken again
    {"engine": {"name": "trtllm", "version": "1.2.0rc1"}},  # the whole sequence reserved, window included
    {"engine": {"name": "sglang", "version": "0.5.3.post3"},  # the new-token ratio's admission
     "kv_cache": {"window_memory": "shared_pool"}},  # (SGLang keeps them apart: the windows asked for here)
    {"cost_model": {"kind": "measured"}},  # the tables' notes of points priced outside them, windowed and whole
])
def test_the_compiled_core_holds_the_window_blocks_as_the_python_engine_does(changes):
    pytest.importorskip("numba")
    results = []
    for compiled in (False, True):
        raw = small_scenario({"model": GPT_OSS_LIKE, "run": {"num_requests": 120, "compiled_core": compiled},
                              "workload": {"arrival": {"kind": "poisson", "rate_per_s": 30},
                                           "lengths": {"kind": "lognormal", "input_mean": 900, "input_sigma": 1.0,
                                                       "output_mean": 120, "output_sigma": 1.0}}}, **changes)
        results.append(simulate(validate_scenario(raw)))
    python, compiled = results
    assert python.extras["engine_core"].startswith("python")
    assert compiled.extras["engine_core"] == "compiled"
    assert python.summary["num_finished"] == 120
    pd.testing.assert_frame_equal(python.steps, compiled.steps, check_exact=True)
    pd.testing.assert_frame_equal(python.requests, compiled.requests, check_exact=True)
    if "capacity_tokens" in changes.get("kv_cache", {}):
        assert python.summary["preemptions"] > 0


def test_a_hybrid_run_is_deterministic_and_its_window_blocks_show_as_token_states():
    scenario = validate_scenario(small_scenario({
        "model": GPT_OSS_LIKE, "run": {"num_requests": 60, "fast_decode": False},
        "workload": {"lengths": {"kind": "fixed", "input_tokens": 1500, "output_tokens": 64}}}))
    kv = make_scheduler(scenario).kv
    assert kv.window_bytes_per_slot == (12 * LAYER_BYTES, 12 * LAYER_BYTES) and kv.sliding_window is None
    first, second = simulate(scenario), simulate(scenario)
    assert first.summary["num_finished"] == 60
    assert first.summary == second.summary
    steps = first.steps
    # A 1,500-token prompt decoding alone holds 1,501 to 1,563 tokens after a step, and its 9 window blocks (144
    # slots); after its last step, nothing.
    alone = steps[(steps["num_seqs"] == 1) & (steps["num_decode_seqs"] == 1) & (steps["kv_token_slots"] > 0)]
    assert len(alone) > 100 and alone["kv_token_slots"].between(1501 + 144, 1563 + 144).all()


def test_where_the_engine_keeps_the_sliding_layers_sets_the_slot():
    m = _model()
    assert kv_slot_bytes(m, window_memory="every_token") == 24 * LAYER_BYTES
    # SGLang's own pool of 0.8 sliding-layer tokens per token slot: each slot pays for them (set_num_token_hybrid)
    assert kv_slot_bytes(m, window_memory="own_pool", window_pool_ratio=0.8) == math.ceil(1.8 * 12 * LAYER_BYTES)
    assert window_kv_bytes_per_token(m, window_memory="own_pool") == 0  # no window taken out of the one pool
    assert sequence_slots(m, 5000, window_memory="every_token") == sequence_slots(m, 5000, window_memory="own_pool")
    slots = {}
    for memory in ("shared_pool", "own_pool", "every_token"):
        d = deployment_of(validate_scenario(small_scenario({"model": GPT_OSS_LIKE,
                                                            "kv_cache": {"window_memory": memory}})))
        slots[memory] = d.kv_capacity_tokens
        assert (d.window_kv_bytes_per_token_per_gpu != 0) == (memory == "shared_pool")
        kv = make_scheduler(validate_scenario(small_scenario({"model": GPT_OSS_LIKE,
                                                              "kv_cache": {"window_memory": memory}}))).kv
        # no block of a request falls out of a window: its full-attention layers keep every token
        assert kv.sliding_window is None and (kv.window_bytes_per_slot is not None) == (memory == "shared_pool")
    assert slots["shared_pool"] == pytest.approx(1.8 * slots["own_pool"], rel=1e-4)
    assert slots["shared_pool"] == pytest.approx(2 * slots["every_token"], rel=1e-4)
    # every token kept: a contiguous region per request is a size again
    deployment_of(validate_scenario(small_scenario({"model": GPT_OSS_LIKE, "kv_cache": {
        "layout": "contiguous", "window_memory": "every_token"}})))


@pytest.mark.parametrize("engine, model_type, memory", [
    ({"name": "vllm", "version": "0.11.0"}, "gpt_oss", "shared_pool"),
    ({"name": "vllm", "version": "0.9.2"}, "gemma2", "every_token"),  # before the hybrid KV cache manager
    ({"name": "vllm", "version": "0.11.0", "disable_hybrid_kv_cache_manager": True}, "gpt_oss", "every_token"),
    ({"name": "sglang", "version": "0.5.3.post3"}, "gpt_oss", "every_token"),  # server_args: off for gpt-oss
    ({"name": "sglang", "version": "0.5.10"}, "gpt_oss", "own_pool"),
    ({"name": "sglang", "version": "0.5.23"}, "gemma3_text", "every_token"),  # off for Gemma 2/3 in every release
    ({"name": "sglang", "version": "0.5.23", "disable_hybrid_swa_memory": True}, "gpt_oss", "every_token"),
    ({"name": "trtllm", "version": "1.0.0"}, "gpt_oss", "every_token"),  # max_attention_window None: every layer
    ({"name": "trtllm", "version": "1.2.0rc1"}, "gemma2", "every_token"),
])
def test_each_engine_keeps_the_sliding_layers_as_its_source_does(engine, model_type, memory):
    raw = small_scenario({"model": GPT_OSS_LIKE | {"model_type": model_type}, "engine": engine})
    scenario = validate_scenario(raw)
    assert scenario.kv_cache.window_memory == memory
    if memory == "every_token":
        assert any("every token's KV" in note for note in scenario.engine.notes)
