"""SGLang's data-parallel attention (--enable-dp-attention --dp D): D lockstep ranks of tp / D GPUs whose every MLP
runs the group's gathered tokens over all its GPUs (sim/config/engines/sglang_dp_attention.py)."""

import pytest
import yaml

from helpers import run_refused
from sim.config.files import validate_scenario
from sim.config.schema import Scenario
from sim.core.step_plan import StepPlan
from sim.cost.measured import MeasuredCostModel
from sim.cost.roofline import RooflineCostModel
from sim.cost.roofline_kernel import EXCHANGE_KINDS, expert_exchange_s
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.memory import weight_bytes_per_gpu
from sim.model.specs import ExpertGroup

H100 = get_gpu("h100-sxm")
LITE = get_model("deepseek-v2-lite")  # 27 layers: 1 dense (MLP 10944), 26 of 64 experts + 2 shared (2 x 1408)
WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 20.0},
            "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 20}}


def sglang(model="deepseek-v2-lite", version="0.5.3", hardware=None, num_requests=40, **flags) -> dict:
    return {"model": model, "hardware": {"gpu": "h100-sxm", **(hardware or {})}, "workload": WORKLOAD,
            "engine": {"name": "sglang", "version": version, **flags}, "run": {"num_requests": num_requests}}


def dp_attention(dp=4, tp=4, command=True, **kw) -> dict:
    if command:
        return sglang(command=f"python -m sglang.launch_server --tp {tp} --dp {dp} --enable-dp-attention", **kw)
    return sglang(tp_size=tp, dp_size=dp, enable_dp_attention=True, **kw)


def plan(prefill=(300,), decodes=20, expert_tokens=0):
    return StepPlan(prefill_request_ids=list(range(len(prefill))), prefill_chunk_tokens=list(prefill),
                    prefill_context_tokens=[0] * len(prefill), num_decode_seqs=decodes,
                    decode_context_tokens=20 * 900, num_sampled_seqs=decodes + len(prefill),
                    num_expert_tokens=expert_tokens)


@pytest.mark.parametrize("dp, rank_gpus", [(4, 1), (2, 2)])
def test_the_ranks_are_a_lockstep_group_of_tp_over_dp_gpus(dp, rank_gpus):
    lone = validate_scenario(sglang(command="python -m sglang.launch_server --tp 4 --enable-dp-attention"))
    group = validate_scenario(dp_attention(dp))
    hw = group.hardware
    assert (hw.tensor_parallel, hw.num_replicas, hw.router) == (rank_gpus, dp, "round_robin")
    assert (hw.lockstep.pad_tokens, hw.lockstep.pad_prefill_steps, hw.lockstep.idle_check_steps,
            hw.lockstep.expert_exchange) == (True, False, 1, "dp_attention")
    assert group.frontend.replicas_per_server == dp
    # each rank: its share of the chunk, and the new-token ratio at 0.3 x the conservativeness
    assert group.scheduler.max_num_batched_tokens == lone.scheduler.max_num_batched_tokens // dp
    assert group.scheduler.new_token_ratio.init == pytest.approx(lone.scheduler.new_token_ratio.init * 0.3)
    # the memory rule reserves the decode graphs' 3 MiB a slot (4.5 above 300) once per rank
    graph_bs = 512  # an 80 GiB H100 at tp 4
    reserved_mib = graph_bs * 4.5 * (dp - 1)
    gpu_mib = H100.hbm_bytes / 2**20
    assert (lone.kv_cache.gpu_memory_utilization - group.kv_cache.gpu_memory_utilization
            == pytest.approx(reserved_mib / gpu_mib, abs=1.5e-3))  # (each fraction rounded to 3 places)
    assert any(f"--dp {dp} --tp 4: {dp} ranks of {rank_gpus} GPU(s)" in note for note in group.engine.notes)


def test_a_given_running_limit_is_shared_by_the_ranks():
    raw = dp_attention(4)
    raw["engine"]["max_running_requests"] = 64
    group = validate_scenario(raw)
    assert group.scheduler.max_num_seqs == 16


def test_a_scenario_written_back_derives_the_same_group():
    scenario = validate_scenario(dp_attention(4))
    again = Scenario.model_validate(yaml.safe_load(scenario.to_yaml()))
    assert validate_scenario(again.model_dump(mode="json", exclude_none=True)).hardware == scenario.hardware


@pytest.mark.parametrize("raw, message", [
    (dp_attention(4, command=False, model="qwen3-8b"), "engine.dp_size: 4 with --enable-dp-attention is not "
                                                       "modelled for qwen3-8b; allowed: 1, or a DeepSeek-V2/V3"),
    (dp_attention(4, command=False, model="qwen3-30b-a3b"), "not modelled for qwen3-30b-a3b"),
    (dp_attention(3, command=False), "engine.dp_size: 3 with --enable-dp-attention: 3 must divide tp_size 4"),
    (sglang(dp_size=4, enable_dp_attention=True, hardware={"tensor_parallel": 4}), "engine.tp_size: missing"),
    (dp_attention(4, command=False, version="0.5.14"), "engine.enable_dp_attention: true is not modelled for SGLang 0.5.14"),
    (dp_attention(4, command=False, hardware={"tensor_parallel": 4}), "engine.tp_size: 4 (sets hardware.tensor_parallel 1) "
                                                       "contradicts hardware.tensor_parallel 4"),
])
def test_what_is_not_modelled_is_refused_in_one_line(raw, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_scenario(raw)


def test_the_cli_refuses_it_with_exit_2(tmp_path):
    assert run_refused(tmp_path, dp_attention(3)).startswith("error: engine.command '--dp 3': 3 with --enable-dp-attention")


def test_the_exchange_is_the_gather_pair_in_decode_and_two_all_reduces_with_a_prefill():
    dp, gather = EXCHANGE_KINDS["dp_attention"], EXCHANGE_KINDS["all_gather_reduce_scatter"]
    assert expert_exchange_s(1000, 4096, 8, dp, 1e-5, 1e11, False) == expert_exchange_s(1000, 4096, 8, gather, 1e-5,
                                                                                           1e11, False)
    # two all-reduces of the message: each 2 x 7/8 of it over the link and a latency
    message_s = 1000 * 4096 * 2 / 1e11
    assert expert_exchange_s(1000, 4096, 8, dp, 1e-5, 1e11, True) == pytest.approx(2 * (1e-5 + 2 * 7 / 8 * message_s),
                                                                                   rel=1e-12)


def test_the_dense_mlps_run_the_group_s_tokens_over_its_gpus():
    """Known answer: on one GPU of four, the dense layer's MLP and the shared experts run te tokens on a quarter of
    their weights where a rank's own run t tokens on all of them: 2 x W x (te / 4 - t) FLOPs more."""
    step = plan()
    t, te = step.num_tokens, 4 * step.num_tokens + 52
    hidden = 2048
    dense_w, shared_w = 3 * hidden * 10944, 3 * hidden * 2 * 1408  # gate, up, down
    costs = [RooflineCostModel(LITE, H100, expert_group=ExpertGroup(4, 4, exchange)).step_cost(plan(expert_tokens=te))
             for exchange in ("all_gather_reduce_scatter", "dp_attention")]
    extra = costs[1].flops - costs[0].flops
    assert extra == pytest.approx(2 * (dense_w + 26 * shared_w) * (te / 4 - t), rel=1e-9)


@pytest.mark.parametrize("make", [RooflineCostModel, MeasuredCostModel])
def test_a_group_of_one_gpu_prices_as_the_rank_alone(make):
    alone = make(LITE, H100)
    group = make(LITE, H100, expert_group=ExpertGroup(1, 1, "dp_attention"))
    step = plan()
    assert group.step_cost(plan(expert_tokens=step.num_tokens)) == alone.step_cost(step)


def test_each_gpu_holds_its_share_of_the_dense_mlps():
    dense_w, shared_w = 3 * 2048 * 10944, 3 * 2048 * 2 * 1408
    own = weight_bytes_per_gpu(LITE, "bf16", 1, expert_gpus=4)
    spread = weight_bytes_per_gpu(LITE, "bf16", 1, expert_gpus=4, dense_gpus=4)
    assert own - spread == pytest.approx(2 * (dense_w + 26 * shared_w) * 3 / 4, abs=2)


def test_the_group_runs_end_to_end():
    from sim.run import simulate
    result = simulate(validate_scenario(dp_attention(4)))
    assert len(result.requests) == 40 and result.requests.finish_s.notna().all()
    assert set(result.requests.replica) == {0, 1, 2, 3}
