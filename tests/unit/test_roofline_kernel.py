"""The roofline's one definition (`sim.cost.roofline_kernel`): its memos never change a price, its pack follows the
model's numbers, and the compiled core gets it for every roofline (mixture of experts, sliding window, pipeline
stages included). The roofline's known answers are in test_cost.py; both engines calling it, in
tests/integration/test_compiled_core.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.step_plan import StepPlan
from sim.cost import roofline_kernel
from sim.cost.learned import LearnedRooflineCostModel
from sim.cost.roofline import RooflineCostModel
from sim.model.catalog import get_gpu, get_model

ROOT = Path(__file__).resolve().parents[2]
MODELS = [("llama-3.1-8b", "h100-sxm", 1), ("llama-3.1-70b", "h100-sxm", 4), ("llama-3.1-8b", "l4", 1),
          ("qwen2.5-7b", "a100-80gb", 2), ("mixtral-8x7b", "h100-sxm", 2), ("mistral-7b-v0.1", "h100-sxm", 1),
          ("deepseek-v2-lite", "h100-sxm", 1)]

PLANS = st.builds(lambda chunks, num_decode, mean_context, query_tokens, swapped: StepPlan(
    prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=[c for c, _ in chunks],
    prefill_context_tokens=[x for _, x in chunks], num_decode_seqs=num_decode,
    decode_context_tokens=num_decode * mean_context, decode_query_tokens=query_tokens,
    num_sampled_seqs=num_decode + sum(1 for chunk, _ in chunks if chunk % 2), swap_in_tokens=swapped),
    st.lists(st.tuples(st.sampled_from([1, 16, 512]) | st.integers(1, 9000), st.integers(0, 20_000)), max_size=3),
    st.sampled_from([0, 1, 64]) | st.integers(0, 512), st.integers(1, 20_000), st.sampled_from([1, 1, 4]),
    st.sampled_from([0, 0, 300]))


@settings(max_examples=100, deadline=None)
@given(which=st.sampled_from(MODELS), plans=st.lists(PLANS, min_size=1, max_size=8))
def test_a_model_prices_every_step_as_a_fresh_one_whether_its_terms_are_remembered_or_not(which, plans):
    # The pack remembers each token count's matmul terms (below MEMO_TOKENS) the first time: pricing the same
    # steps again, and other steps with the same counts, gives what a fresh model (nothing remembered) gives.
    name, gpu, tp = which
    model = RooflineCostModel(get_model(name), get_gpu(gpu), tensor_parallel=tp)
    for plan in plans + plans[::-1]:
        fresh = RooflineCostModel(get_model(name), get_gpu(gpu), tensor_parallel=tp)
        assert model.step_cost(plan) == fresh.step_cost(plan)
    if any(0 < plan.num_tokens < roofline_kernel.MEMO_TOKENS for plan in plans):
        assert not np.isnan(model._pack()[5]).all()  # some memo was filled (NaN: not computed yet)


def test_the_pack_follows_the_models_numbers():
    # run.py sets a pipeline stage's overhead and LM head after building it; a pack built before must not stay.
    plan = StepPlan(num_decode_seqs=8, decode_context_tokens=8 * 500, num_sampled_seqs=8)
    model = RooflineCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    before = model.step_cost(plan)
    model.step_overhead_s, model.include_lm_head = 0.0, False
    stage = RooflineCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm"), step_overhead_s=0.0)
    stage.include_lm_head = False
    assert model.step_cost(plan) == stage.step_cost(plan) != before
    assert model.step_cost(plan).time_s < before.time_s - get_gpu("h100-sxm").step_overhead_s


def test_every_roofline_has_a_compiled_form_but_one_that_prices_otherwise():
    h100 = get_gpu("h100-sxm")
    for name, tp in (("mixtral-8x7b", 2), ("mistral-7b-v0.1", 1), ("deepseek-v2-lite", 1)):
        assert RooflineCostModel(get_model(name), h100, tensor_parallel=tp).compiled_params() is not None
    stage = RooflineCostModel(get_model("llama-3.1-8b"), h100)
    stage.include_lm_head = False  # a pipeline stage before the last
    assert stage.compiled_params() is not None
    # the learned roofline has its own compiled form (sim/cost/learned_kernel.py); a subclass may price otherwise
    assert LearnedRooflineCostModel(get_model("llama-3.1-8b"), h100).compiled_params() is not None

    class PricedOtherwise(RooflineCostModel):
        pass
    assert PricedOtherwise(get_model("llama-3.1-8b"), h100).compiled_params() is None


_WITHOUT_JIT = """
import json, sys, warnings
warnings.simplefilter("ignore")
from sim.core.step_plan import StepPlan
from sim.cost.measured import MeasuredCostModel
from sim.cost.roofline import RooflineCostModel
from sim.cost.steps import StepProfileCostModel
from sim.model.catalog import get_gpu, get_model
llama, h100 = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
models = [RooflineCostModel(get_model("mixtral-8x7b"), h100, tensor_parallel=2), MeasuredCostModel(llama, h100),
          StepProfileCostModel("calibrate/profiles/h100-sxm/llama-3.1-8b/tp1/steps/fused", llama)]
plans = [StepPlan(prefill_request_ids=[0, 1], prefill_chunk_tokens=[300, 1], prefill_context_tokens=[0, 70],
                  num_decode_seqs=9, decode_context_tokens=9 * 700, num_sampled_seqs=10),
         StepPlan(num_decode_seqs=300, decode_context_tokens=300 * 1_000_000, num_sampled_seqs=300)]
json.dump([[list(m.step_cost(p)) for p in plans] + [list(map(list, m.decode_step_costs(5, 50, 3)))]
           for m in models] + [repr(models[1])], sys.stdout)
"""


def test_without_the_jit_the_same_functions_price_the_same_steps():
    # NUMBA_DISABLE_JIT=1 runs the one definition as Python (to step through a price): the same numbers, but
    # for the whole-step profile's hypot (Python's own, not libm's) in the last bit.
    def prices(disable: bool):
        env = dict(os.environ, NUMBA_DISABLE_JIT="1" if disable else "0")
        out = subprocess.run([sys.executable, "-c", _WITHOUT_JIT], cwd=ROOT, env=env, capture_output=True,
                             text=True, check=True)
        return json.loads(out.stdout)
    def flat(prices_of_a_model):
        steps, run = prices_of_a_model[:-1], prices_of_a_model[-1]
        return [x for cost in steps + run for x in cost]
    jit, python = prices(False), prices(True)
    assert python[:2] == jit[:2] and python[3] == jit[3]  # roofline, measured (and its notes): to the bit
    assert flat(python[2]) == pytest.approx(flat(jit[2]), rel=1e-12)
