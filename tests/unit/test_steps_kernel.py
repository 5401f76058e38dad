"""The whole-step profile's compiled pricer (`sim.cost.steps_kernel`, numba) against `StepProfileCostModel.step_cost`,
bit for bit, and CPython's own `math.hypot` repeated in numba (`sim.cost.pyfloat_kernel`)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.step_plan import StepPlan
from sim.cost.steps import StepProfileCostModel
from sim.model.catalog import get_gpu, get_model

pyfloat_kernel = pytest.importorskip("sim.cost.pyfloat_kernel")
from sim.cost import compiled_pricing  # noqa: E402  (needs numba)

pytestmark = pytest.mark.skipif(not pyfloat_kernel.EXACT_HERE, reason="repeats CPython 3.11's hypot and sum only")
PROFILES = "calibrate/profiles/h100-sxm"
SHIPPED = [("llama-3.1-8b", 1, "fused"), ("llama-3.1-8b", 1, "unfused"), ("llama-3.1-8b", 1, "fused-paged"),
           ("llama-3.1-70b", 2, "fused"), ("llama-3.1-70b", 8, "fused")]
_MODELS: dict = {}


def model_for(name: str, tp: int, engine: str) -> StepProfileCostModel:
    key = (name, tp, engine)
    if key not in _MODELS:
        _MODELS[key] = StepProfileCostModel(f"{PROFILES}/{name}/tp{tp}/steps/{engine}", get_model(name),
                                            tensor_parallel=tp, gpu=get_gpu("h100-sxm"))
    return _MODELS[key]


def test_hypot_is_cpythons_to_the_bit_on_random_arguments():
    numba = pytest.importorskip("numba")

    @numba.njit
    def hypots(a, b, out):
        for i in range(a.shape[0]):
            out[i] = pyfloat_kernel.hypot(a[i], b[i])

    rng = np.random.default_rng(7)
    a = np.exp(rng.uniform(-40, 40, 200_000))
    b = a * np.exp(rng.uniform(-8, 8, a.shape[0]))
    a[::13], b[::17] = 0.0, 0.0  # one side zero
    a[1], b[1] = 1e-310, 3e-310  # subnormals
    a[2], b[2] = math.inf, math.nan
    a[3], b[3] = math.nan, 1.0
    out = np.empty_like(a)
    hypots(a, b, out)
    want = np.array([math.hypot(x, y) for x, y in zip(a.tolist(), b.tolist())])
    np.testing.assert_array_equal(out, want)  # NaN where both are NaN, and exact elsewhere


@settings(max_examples=300, deadline=None)
@given(which=st.sampled_from(SHIPPED),
       chunks=st.lists(st.tuples(st.integers(1, 8192), st.integers(0, 100_000)), max_size=5),
       num_decode=st.integers(0, 512), mean_context=st.integers(1, 20_000))
def test_the_compiled_whole_step_price_is_step_cost_bit_for_bit(which, chunks, num_decode, mean_context):
    cm = model_for(*which)
    sampled = num_decode + sum(1 for chunk, _ in chunks if chunk % 2)
    plan = StepPlan(prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=[c for c, _ in chunks],
                    prefill_context_tokens=[x for _, x in chunks], num_decode_seqs=num_decode,
                    decode_context_tokens=num_decode * mean_context, num_sampled_seqs=sampled)
    want = cm.step_cost(plan)
    got = compiled_pricing.price_step(cm.compiled_params(), plan.num_prefill_tokens,
                                      np.array(plan.prefill_chunk_tokens + [0], dtype=np.int64),
                                      np.array(plan.prefill_context_tokens + [0], dtype=np.int64), len(chunks),
                                      num_decode, plan.decode_context_tokens, sampled)
    assert got == (want.time_s, want.flops, want.bytes)


def test_decode_runs_price_the_same_as_the_compiled_steps():
    # The Python engine prices a decode run with decode_step_costs; the core prices each step with step_time.
    cm = model_for("llama-3.1-8b", 1, "fused")
    params = cm.compiled_params()
    empty = np.zeros(1, dtype=np.int64)
    for batch, context in ((1, 17), (37, 37 * 900), (128, 128 * 3000)):
        run = cm.decode_step_costs(batch, context, 50)
        for k, want in enumerate(run):
            got = compiled_pricing.price_step(params, 0, empty, empty, 0, batch, context + k * batch, batch)
            assert got == (want.time_s, want.flops, want.bytes)


def test_models_the_compiled_form_does_not_cover_have_none():
    cm = model_for("llama-3.1-8b", 1, "fused")

    class Tweaked(StepProfileCostModel):
        pass
    tweaked = Tweaked.__new__(Tweaked)
    tweaked.__dict__.update(cm.__dict__)
    assert tweaked.compiled_params() is None  # a subclass may price differently
    assert cm.compiled_params() is not None
