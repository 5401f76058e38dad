"""The whole-step profile's one definition (`sim.cost.steps_kernel`): the fit and the cost model price through it,
and the compiled core gets it for every whole-step profile but a subclass's. The fit's known answers are in
tests/integration/test_step_profile.py; both engines calling it, in tests/integration/test_compiled_core.py."""

import pytest

from sim.core.step_plan import StepPlan
from sim.cost.steps import Rates, StepProfileCostModel
from sim.model.catalog import get_gpu, get_model

PROFILES = "calibrate/profiles/h100-sxm"


def model_for(name: str = "llama-3.1-8b", tp: int = 1, engine: str = "fused") -> StepProfileCostModel:
    return StepProfileCostModel(f"{PROFILES}/{name}/tp{tp}/steps/{engine}", get_model(name), tensor_parallel=tp,
                                gpu=get_gpu("h100-sxm"))


def test_an_ops_time_is_the_2_norm_of_its_compute_and_memory_times():
    assert Rates(flops_per_s=2.0, bytes_per_s=4.0).time(6.0, 16.0) == 5.0


@pytest.mark.parametrize(("name", "tp"), [("llama-3.1-8b", 1), ("llama-3.1-70b", 2)])
def test_a_step_is_the_fits_time_plus_the_all_reduces_and_swaps(name, tp):
    cm = model_for(name, tp)
    plan = StepPlan(prefill_request_ids=[0, 1], prefill_chunk_tokens=[512, 7], prefill_context_tokens=[0, 900],
                    num_decode_seqs=30, decode_context_tokens=30 * 1500, decode_query_tokens=3, num_sampled_seqs=31,
                    swap_in_tokens=400)
    parts = cm.fit.parts(plan)
    assert cm.fit.time_s(plan) == parts["token"] + parts["prefill_attention"] + parts["decode_attention"]
    want = cm.fit.time_s(plan) + cm.allreduce_s(plan.num_tokens) + 400 * cm.roofline.swap_s_per_token
    assert cm.step_cost(plan).time_s == want
    assert (cm.allreduce_s(plan.num_tokens) > 0) == (tp > 1)
    assert cm.step_cost(plan)[1:] == cm.roofline.step_cost(plan)[1:]  # FLOPs and bytes: the roofline's counts


def test_every_whole_step_profile_has_a_compiled_form_but_a_subclasss():
    cm = model_for()

    class Tweaked(StepProfileCostModel):
        pass
    tweaked = Tweaked.__new__(Tweaked)
    tweaked.__dict__.update(cm.__dict__)
    assert tweaked.compiled_params() is None  # a subclass may price differently
    assert cm.compiled_params() is not None
