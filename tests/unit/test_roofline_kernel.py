"""`sim.cost.roofline_kernel.step_cost` (numba, through `sim.cost.compiled_pricing.price_step`) against `RooflineCostModel.step_cost`: bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.step_plan import StepPlan
from sim.cost.roofline import RooflineCostModel
from sim.model.catalog import get_gpu, get_model

roofline_kernel = pytest.importorskip("sim.cost.roofline_kernel")
from sim.cost.compiled_pricing import price_step  # noqa: E402  (needs numba)

DENSE = [("llama-3.1-8b", "h100-sxm", 1), ("llama-3.1-70b", "h100-sxm", 4), ("llama-3.1-8b", "l4", 1),
         ("qwen2.5-7b", "a100-80gb", 2)]


@settings(max_examples=300, deadline=None)
@given(which=st.sampled_from(DENSE), weight_dtype=st.sampled_from(["bf16", "fp8", "int4"]),
       chunks=st.lists(st.tuples(st.integers(1, 8192), st.integers(0, 100_000)), max_size=6),
       num_decode=st.integers(0, 512), mean_context=st.integers(1, 20_000))
def test_the_compiled_step_cost_is_step_cost_bit_for_bit(which, weight_dtype, chunks, num_decode, mean_context):
    name, gpu, tp = which
    cm = RooflineCostModel(get_model(name), get_gpu(gpu), tensor_parallel=tp, weight_dtype=weight_dtype)
    sampled = num_decode + sum(1 for chunk, _ in chunks if chunk % 2)  # some chunks end their prompt
    plan = StepPlan(prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=[c for c, _ in chunks],
                    prefill_context_tokens=[x for _, x in chunks], num_decode_seqs=num_decode,
                    decode_context_tokens=num_decode * mean_context, num_sampled_seqs=sampled)
    want = cm.step_cost(plan)
    got = price_step(cm.compiled_params(), plan.num_prefill_tokens,
                     np.array(plan.prefill_chunk_tokens + [0], dtype=np.int64),
                     np.array(plan.prefill_context_tokens + [0], dtype=np.int64), len(chunks),
                     num_decode, plan.decode_context_tokens, sampled)
    assert got == (want.time_s, want.flops, want.bytes)


def test_models_the_compiled_form_does_not_cover_have_none():
    h100 = get_gpu("h100-sxm")
    assert RooflineCostModel(get_model("mixtral-8x7b"), h100, tensor_parallel=2).compiled_params() is None  # MoE
    assert RooflineCostModel(get_model("mistral-7b-v0.1"), h100).compiled_params() is None  # sliding window
    stage = RooflineCostModel(get_model("llama-3.1-8b"), h100)
    stage.include_lm_head = False  # a pipeline stage before the last
    assert stage.compiled_params() is None


_PLANS = st.builds(lambda chunks, num_decode, mean_context: StepPlan(
    prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=[c for c, _ in chunks],
    prefill_context_tokens=[x for _, x in chunks], num_decode_seqs=num_decode,
    decode_context_tokens=num_decode * mean_context,
    num_sampled_seqs=num_decode + sum(1 for chunk, _ in chunks if chunk % 2)),
    st.lists(st.tuples(st.sampled_from([1, 16, 512]) | st.integers(1, 8192), st.integers(0, 20_000)), max_size=3),
    st.sampled_from([0, 1, 64]) | st.integers(0, 512), st.integers(1, 20_000))


@settings(max_examples=100, deadline=None)
@given(which=st.sampled_from(DENSE), plans=st.lists(_PLANS, min_size=1, max_size=8))
def test_one_pack_prices_every_step_as_step_cost_whether_its_matmuls_are_remembered_or_not(which, plans):
    # The pack remembers each token count's matmul terms (below MEMO_TOKENS) the first time: pricing the same
    # steps again, and other steps with the same counts, must give step_cost's numbers still.
    name, gpu, tp = which
    cm = RooflineCostModel(get_model(name), get_gpu(gpu), tensor_parallel=tp)
    pack = cm.compiled_params()
    for plan in plans + plans[::-1]:
        if plan.num_tokens == 0:
            continue
        want = cm.step_cost(plan)
        got = price_step(pack, plan.num_prefill_tokens, np.array(plan.prefill_chunk_tokens + [0], dtype=np.int64),
                         np.array(plan.prefill_context_tokens + [0], dtype=np.int64), len(plan.prefill_chunk_tokens),
                         plan.num_decode_seqs, plan.decode_context_tokens, plan.num_sampled_seqs)
        assert got == (want.time_s, want.flops, want.bytes)
    if any(0 < plan.num_tokens < roofline_kernel.MEMO_TOKENS for plan in plans):
        assert not np.isnan(pack[1][5]).all()  # the memo was used
