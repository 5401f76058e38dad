"""vLLM's --data-parallel-size: from 0.14.0 a dense model's ranks are independent engines behind the API server(s),
dealt in turn to 0.26.x and from 0.27.0 by the fewest outstanding plus a KV-pressure term (least_outstanding_kv);
0.8.3-0.13.x's ranks step in lockstep
(sim/core/lockstep.py), and a mixture of experts' in every release, sharing its experts; a V0 fallback's are
refused (sim/config/engines/vllm_data_parallel.py)."""

import pytest

from helpers import run_refused
from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.run import simulate

WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 40.0},
            "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 40}}


def vllm(version="0.14.0", model="llama-3.1-8b", hardware=None, num_requests=40, **flags) -> dict:
    return {"model": model, "hardware": {"gpu": "h100-sxm", **(hardware or {})}, "workload": WORKLOAD,
            "engine": {"name": "vllm", "version": version, **flags}, "run": {"num_requests": num_requests}}


@pytest.mark.parametrize("version, router, api_servers", [
    ("0.14.0", "round_robin", 1),  # --api-server-count's default 1; the engines publish no counts: in turn
    ("0.16.0", "round_robin", 4),  # the default API servers: one a rank
    ("0.27.0", "least_outstanding_kv", 4),  # every engine publishes its counts; in-flight and KV score
    ("0.34.0", "least_outstanding_kv", 4),
])
def test_each_rank_is_a_replica_derived_as_one_server_would_be(version, router, api_servers):
    one, four = validate_scenario(vllm(version)), validate_scenario(vllm(version, data_parallel_size=4))
    assert (one.hardware.num_replicas, four.hardware.num_replicas) == (1, 4)
    assert four.hardware.router == router
    assert (four.frontend.replicas_per_server, four.frontend.num_processes) == (4, api_servers)
    for section in ("scheduler", "kv_cache", "cost_model"):  # every rank's limits, memory and prices as a lone one's
        assert getattr(one, section) == getattr(four, section)
    assert any("--data-parallel-size 4: 4 independent engines" in note for note in four.engine.notes)


def test_api_servers_given_are_kept():
    scenario = validate_scenario(vllm("0.16.0", data_parallel_size=4, api_server_count=2))
    assert (scenario.frontend.num_processes, scenario.frontend.replicas_per_server) == (2, 4)
    front = {"per_request_s": 0.001, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0, "num_processes": 3}
    own = validate_scenario({**vllm("0.16.0", data_parallel_size=4), "frontend": front})
    assert (own.frontend.num_processes, own.frontend.replicas_per_server) == (3, 4)  # the default overridden


def test_the_ranks_take_the_requests_in_turn_through_one_api_server_to_0_26():
    result = simulate(validate_scenario(vllm("0.14.0", data_parallel_size=4)))
    records = result.requests.sort_values(["arrival_s", "request_id"])  # in the order they reach the engines
    assert records["replica"].tolist() == [i % 4 for i in range(len(records))]
    assert set(records["frontend_process"]) == {0}


def test_from_0_27_the_ranks_run_as_the_same_replicas_behind_one_front_end_would():
    """Known answer: --data-parallel-size 2 is the scenario's two replicas, least outstanding first, sharing the
    front-end's processes: the same records."""
    ranks = validate_scenario(vllm("0.27.0", data_parallel_size=2, num_requests=60))
    assert (ranks.frontend.replicas_per_server, ranks.frontend.num_processes) == (2, 2)
    replicas = validate_scenario({**vllm("0.27.0", num_requests=60, hardware={"num_replicas": 2,
                                                                              "router": "least_outstanding_kv"}),
                                  "frontend": ranks.frontend.model_dump()})
    first, second = simulate(ranks), simulate(replicas)
    assert first.requests.equals(second.requests)
    assert set(first.requests["replica"]) == {0, 1}


@pytest.mark.parametrize("raw, message", [
    ({**vllm("0.10.2", data_parallel_size=2, hardware={"gpu": "a100-80gb"}), "quantization": {"kv_cache": "fp8"}},
     "engine.data_parallel_size: 2 is not modelled where vLLM 0.10.2 falls back to V0"),  # fp8 KV off Hopper
    (vllm("0.9.2", command="vllm serve x -dp 4 --preemption-mode swap"),
     "engine.command '-dp 4': 4 is not modelled where vLLM 0.9.2 falls back to V0"),
    (vllm("0.12.0", data_parallel_size=2, pipeline_parallel_size=2),
     "engine.data_parallel_size: 2 beside pipeline_parallel_size 2 is not modelled for vLLM 0.12.0"),
    (vllm("0.14.0", model="mixtral-8x7b", data_parallel_size=2, tensor_parallel_size=2, pipeline_parallel_size=2),
     "engine.data_parallel_size: 2 beside pipeline_parallel_size 2 is not modelled for vLLM 0.14.0, whose ranks run "
     "in lockstep; allowed: 1, pipeline_parallel_size 1"),
    (vllm(data_parallel_size=4, hardware={"num_replicas": 2}),
     "engine.data_parallel_size: 4 contradicts hardware.num_replicas 2; allowed: give one of them, or the same value"),
    (vllm(data_parallel_size=0), "engine.data_parallel_size: 0 is not allowed; allowed: a whole number >= 1"),
    (vllm("0.8.2", data_parallel_size=2), "engine.data_parallel_size: not a flag of vllm 0.8.2"),
])
def test_unread_and_unpriced_ranks_and_contradictions_are_refused_in_one_line(raw, message):
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("version, flags, padded, check, router", [
    ("0.8.3", {}, False, 16, "least_outstanding"),  # no get_dp_padding; the check every 16 steps; min in flight
    ("0.8.4", {}, False, 16, "least_outstanding"),
    ("0.8.5", {}, False, 24, "least_outstanding"),
    ("0.9.0", {}, False, 24, "least_outstanding"),
    ("0.9.1", {}, True, 24, "fewest_waiting"),  # get_dp_padding; the least [waiting, running] published
    ("0.9.1", {"enforce_eager": True}, False, 24, "fewest_waiting"),
    ("0.9.2", {}, True, 32, "fewest_waiting"),
    ("0.10.0", {}, True, 32, "fewest_waiting"),
    ("0.10.1", {}, True, 32, "least_loaded"),  # 4 x waiting + running
    ("0.10.2", {"enforce_eager": True}, False, 32, "least_loaded"),
    ("0.11.0", {}, True, 32, "least_loaded"),
    ("0.11.0", {"enforce_eager": True}, False, 32, "least_loaded"),  # get_dp_padding: no padding when eager
    ("0.11.0", {"compilation_config": {"cudagraph_mode": "NONE"}}, True, 32, "least_loaded"),  # reads eager only
    ("0.12.0", {"compilation_config": {"cudagraph_mode": "NONE"}}, False, 32, "least_loaded"),  # allow_dp_padding
    ("0.13.0", {}, True, 32, "least_loaded"),
])
def test_to_0_13_the_ranks_step_in_lockstep_padded_checked_and_dealt_as_the_release_does(version, flags, padded,
                                                                                         check, router):
    scenario = validate_scenario(vllm(version, data_parallel_size=2, **flags))
    assert scenario.hardware.num_replicas == 2 and scenario.hardware.router == router
    assert (scenario.hardware.lockstep.pad_tokens, scenario.hardware.lockstep.idle_check_steps) == (padded, check)
    assert any("stepping in lockstep" in note for note in scenario.engine.notes)


def test_the_scenario_s_own_lockstep_and_router_win_over_the_release_s():
    own = validate_scenario(vllm("0.13.0", data_parallel_size=2, hardware={"lockstep": {"pad_tokens": False},
                                                                            "router": "round_robin"}))
    assert (own.hardware.lockstep.pad_tokens, own.hardware.router) == (False, "round_robin")  # a what-if kept
    assert any(note.endswith("(the scenario's own hardware.lockstep applies; the scenario's own hardware.router "
                             "applies)") for note in own.engine.notes)
    apart = validate_scenario(vllm("0.13.0", data_parallel_size=2, hardware={"lockstep": None}))
    assert apart.hardware.lockstep is None


def test_to_0_13_the_ranks_are_the_scenario_s_lockstep_replicas():
    """Known answer: 0.13.0's --data-parallel-size 2 is two lockstep replicas, least loaded first, behind the
    same front-end: the same records; apart, the same replicas finish their requests sooner or as soon."""
    ranks = validate_scenario(vllm("0.13.0", data_parallel_size=2, num_requests=60))
    hardware = {"num_replicas": 2, "router": "least_loaded", "lockstep": {}}
    replicas = validate_scenario({**vllm("0.13.0", num_requests=60, hardware=hardware),
                                  "frontend": ranks.frontend.model_dump()})
    first, second = simulate(ranks), simulate(replicas)
    assert first.requests.equals(second.requests)
    assert first.extras["engine_core"] == "compiled"
    apart = validate_scenario({**vllm("0.13.0", num_requests=60, hardware={**hardware, "lockstep": None}),
                               "frontend": ranks.frontend.model_dump()})
    assert simulate(apart).summary["ttft_s_mean"] <= first.summary["ttft_s_mean"]


def test_one_rank_is_every_release_s_single_engine():
    for version in ("0.9.2", "0.13.0", "0.14.0"):
        assert validate_scenario(vllm(version, data_parallel_size=1)).hardware.num_replicas == 1


def test_the_planner_refuses_ranks_it_would_size_itself(tmp_path):
    raw = {**vllm(data_parallel_size=2), "slo": {"ttft_s": 2.0}, "search": {"max_replicas": 2, "num_seeds": 1}}
    assert run_refused(tmp_path, raw, "plan").startswith("error: engine: its flags set hardware.num_replicas (2), "
                                                         "which the planner sizes itself")


@pytest.mark.parametrize("version, flags, exchange, ep, router", [
    ("0.8.4", {}, "broadcast_all_reduce", 1, "least_outstanding"),  # FusedMoE.naive_multicast, then an all-reduce
    ("0.10.2", {"enable_expert_parallel": True}, "broadcast_all_reduce", 4, "least_loaded"),  # "naive"'s default
    ("0.11.0", {}, "all_gather_reduce_scatter", 1, "least_loaded"),  # "allgather_reducescatter", the new default
    ("0.11.0", {"enable_expert_parallel": True}, "all_gather_reduce_scatter", 4, "least_loaded"),
    ("0.14.0", {"enable_expert_parallel": True}, "all_gather_reduce_scatter", 4, "least_loaded"),  # still lockstep
    ("0.27.0", {}, "all_gather_reduce_scatter", 1, "least_outstanding_kv"),
])
def test_a_mixture_of_experts_ranks_step_in_lockstep_sharing_its_experts_in_every_release(version, flags, exchange,
                                                                                          ep, router):
    # FusedMoE flattens the TP group across the ranks: moe tp = ranks x tp, or ep = ranks x tp with the flag
    scenario = validate_scenario(vllm(version, model="qwen3-30b-a3b", data_parallel_size=2, tensor_parallel_size=2,
                                      **flags))
    hw = scenario.hardware
    assert (hw.num_replicas, hw.tensor_parallel, hw.expert_parallel, hw.router) == (2, 2, ep, router)
    assert hw.lockstep is not None and hw.lockstep.expert_exchange == exchange
    assert any("its routed experts over every rank's GPUs" in note for note in scenario.engine.notes)


def test_a_dense_model_s_ranks_share_nothing_and_from_0_14_run_apart():
    dense = validate_scenario(vllm("0.11.0", data_parallel_size=2, enable_expert_parallel=False))
    assert dense.hardware.lockstep.expert_exchange == "all_gather_reduce_scatter"  # (the default: no experts read it)
    assert dense.hardware.expert_parallel == 1
    assert validate_scenario(vllm("0.14.0", data_parallel_size=2)).hardware.lockstep is None


def test_a_scenario_written_back_keeps_the_release_s_lockstep_without_a_note_that_it_is_its_own():
    import yaml
    from sim.config.schema import Scenario
    for model, version in (("llama-3.1-8b", "0.13.0"), ("qwen3-30b-a3b", "0.11.0")):
        scenario = validate_scenario(vllm(version, model=model, data_parallel_size=2))
        again = Scenario.model_validate(yaml.safe_load(scenario.to_yaml()))
        assert again == scenario and not any("scenario's own" in note for note in again.engine.notes)
