"""A lockstep group's shared experts (`sim.model.specs.ExpertGroup`): each rank's experts run the group's tokens
over every rank's GPUs, exchanged around each expert layer; everything else runs the rank's own."""

import pytest

from sim.config.cost_choice import default_cost_model
from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.measured import MeasuredCostModel
from sim.cost.roofline import RooflineCostModel
from sim.cost.roofline_kernel import EXCHANGE_KINDS, expert_exchange_s
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.memory import kv_capacity, weight_bytes_per_gpu
from sim.model.specs import ExpertGroup

MOE = get_model("qwen3-30b-a3b")  # 48 layers, every one 128 experts, top 8, hidden 2048, expert width 768
H100 = get_gpu("h100-sxm")


def plan(prefill=(300,), decodes=20, context=20 * 900, expert_tokens=0):
    return StepPlan(prefill_request_ids=list(range(len(prefill))), prefill_chunk_tokens=list(prefill),
                    prefill_context_tokens=[0] * len(prefill), num_decode_seqs=decodes,
                    decode_context_tokens=context, num_sampled_seqs=decodes + len(prefill),
                    num_expert_tokens=expert_tokens)


def test_the_exchange_is_a_gather_and_a_scatter_or_the_broadcasts_and_an_all_reduce():
    # 1,000 tokens of 4,096 bf16 values (8,192,000 bytes) among 4 ranks, 10 us a collective, 100 GB/s a link
    message_s = 8_192_000 / 1e11
    gather = expert_exchange_s(1000, 4096, 4, EXCHANGE_KINDS["all_gather_reduce_scatter"], 1e-5, 1e11, False)
    assert gather == pytest.approx(2 * (1e-5 + 0.75 * message_s), rel=1e-12)
    naive = expert_exchange_s(1000, 4096, 4, EXCHANGE_KINDS["broadcast_all_reduce"], 1e-5, 1e11, False)
    assert naive == pytest.approx(4 * 1e-5 + message_s + 1e-5 + 2 * 0.75 * message_s, rel=1e-12)
    assert expert_exchange_s(1000, 4096, 1, EXCHANGE_KINDS["all_gather_reduce_scatter"], 1e-5, 1e11, False) == 0.0


@pytest.mark.parametrize("make", [
    lambda **kw: RooflineCostModel(MOE, H100, tensor_parallel=2, **kw),
    lambda **kw: MeasuredCostModel(MOE, H100, tensor_parallel=2, **kw),
])
def test_a_group_of_one_rank_prices_as_the_rank_alone(make):
    # one rank: the experts over its own two GPUs at its own tokens, nothing exchanged
    alone, group = make(), make(expert_group=ExpertGroup(gpus=2, ranks=1))
    step = plan()
    assert group.step_cost(plan(expert_tokens=step.num_tokens)) == alone.step_cost(step)


def test_a_rank_s_expert_flops_are_its_share_of_the_group_s_tokens():
    # per GPU: 2 FLOPs x tokens x (top 8 / 4 GPUs) x one expert's 3 x 2048 x 768 weights, in each of 48 layers
    group = RooflineCostModel(MOE, H100, expert_parallel=4, expert_group=ExpertGroup(gpus=4, ranks=4))
    alone = RooflineCostModel(MOE, H100)
    step = plan()
    t, te = step.num_tokens, 4 * step.num_tokens + 37
    expert_flops = 2 * 3 * 2048 * 768 * 48
    extra = group.step_cost(plan(expert_tokens=te)).flops - alone.step_cost(step).flops
    assert extra == pytest.approx(expert_flops * (te * 8 / 4 - t * 8), rel=1e-9)


@pytest.mark.parametrize("make", [
    lambda **kw: RooflineCostModel(MOE, H100, expert_parallel=4, **kw),
    lambda **kw: MeasuredCostModel(MOE, H100, expert_parallel=4, **kw),
])
def test_each_expert_layer_pays_the_exchange_once(make):
    te = 1200
    kinds = ("all_gather_reduce_scatter", "broadcast_all_reduce")
    gather, naive = (make(expert_group=ExpertGroup(gpus=4, ranks=4, exchange=k)).step_cost(plan(expert_tokens=te))
                     for k in kinds)
    link = H100.interconnect_bytes_per_s * H100.interconnect_efficiency
    each = [expert_exchange_s(te, 2048, 4, EXCHANGE_KINDS[k], H100.allreduce_latency_s, link, True) for k in kinds]
    assert naive.time_s - gather.time_s == pytest.approx(48 * (each[1] - each[0]), rel=1e-9)
    assert (naive.flops, naive.bytes) == (gather.flops, gather.bytes)


def test_the_experts_run_the_group_s_tokens():
    group = MeasuredCostModel(MOE, H100, expert_parallel=4, expert_group=ExpertGroup(gpus=4, ranks=4))
    times = [group.step_cost(plan(expert_tokens=te)).time_s for te in (400, 1600, 6400)]
    assert times[0] < times[1] < times[2]


def test_each_gpu_holds_its_share_of_the_group_s_experts():
    # the routed experts' bf16 bytes: 48 layers x 128 experts x 3 x 2048 x 768 weights x 2 bytes, over 8 GPUs
    experts = 48 * 128 * 3 * 2048 * 768 * 2
    alone, shared = weight_bytes_per_gpu(MOE, "bf16", 2), weight_bytes_per_gpu(MOE, "bf16", 2, expert_gpus=8)
    assert alone - shared == pytest.approx(experts / 2 - experts / 8, abs=2)
    more = kv_capacity(MOE, H100, tensor_parallel=2, expert_gpus=8).kv_bytes
    assert more - kv_capacity(MOE, H100, tensor_parallel=2).kv_bytes == alone - shared


def test_the_group_s_experts_must_split_evenly_over_its_gpus():
    raw = {"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm", "num_replicas": 3, "lockstep": {},
                                                  "expert_parallel": 2},
           "workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 100,
                                                                  "output_tokens": 10}}}
    with pytest.raises(ConfigError, match=r"^hardware.expert_parallel: 2 cannot split qwen3-30b-a3b's 128 experts "
                                          r"over the group's 3 GPUs \(it must divide both\); allowed: 1$"):
        validate_scenario(raw)
    raw["hardware"]["expert_parallel"] = 3
    with pytest.raises(ConfigError, match="allowed: 1$"):
        validate_scenario(raw)
    raw["hardware"].update(num_replicas=4, expert_parallel=4)  # one expert in four on each rank's GPU
    assert validate_scenario(raw).hardware.expert_parallel == 4


def test_without_a_cost_model_a_group_off_the_measured_gpus_takes_the_catalog_roofline():
    # the learned roofline, the default off the measured GPUs, cannot price the group's experts apart
    raw = {"model": "qwen3-30b-a3b", "hardware": {"gpu": "l4", "num_replicas": 4, "lockstep": {}},
           "workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 100,
                                                                  "output_tokens": 10}}}
    scenario = validate_scenario(raw)
    assert scenario.cost_model.kind == "roofline" and scenario.cost_model.efficiencies == "catalog"
    del raw["hardware"]["lockstep"]  # (independent replicas, each holding every expert: too big for an L4)
    assert default_cost_model(raw)[0]["efficiencies"] == "learned"
