"""SGLang's data-parallel workers (--dp-size without --enable-dp-attention): independent replicas dealt round robin
from one front-end (sim/config/engines/sglang.py `_sglang_data_parallel`, `frontend.replicas_per_server`)."""

import numpy as np
import pytest
import yaml

from helpers import one_error_line, run_refused, servesim
from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.run import simulate

WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 40.0},
            "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 40}}


def sglang(version="0.5.5", hardware=None, frontend=None, num_requests=40, **flags) -> dict:
    raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", **(hardware or {})}, "workload": WORKLOAD,
           "engine": {"name": "sglang", "version": version, **flags}, "run": {"num_requests": num_requests}}
    if frontend is not None:
        raw["frontend"] = frontend
    return raw


def test_each_worker_is_a_replica_derived_as_one_server_would_be():
    one, four = validate_scenario(sglang()), validate_scenario(sglang(dp_size=4))
    assert (one.hardware.num_replicas, four.hardware.num_replicas) == (1, 4)
    assert four.hardware.router == "round_robin" and four.frontend.replicas_per_server == 4
    assert one.frontend.replicas_per_server == 1
    for section in ("scheduler", "kv_cache"):  # every worker's limits and memory as a lone server's
        assert getattr(one, section) == getattr(four, section)
    assert any("--dp-size 4: 4 independent workers" in note for note in four.engine.notes)


def test_the_workers_take_the_requests_in_turn_through_one_front_end():
    result = simulate(validate_scenario(sglang(dp_size=4)))
    records = result.requests.sort_values(["arrival_s", "request_id"])  # in the order they reach the engine
    assert records["replica"].tolist() == [i % 4 for i in range(len(records))]
    assert set(records["frontend_process"]) == {0}  # one TokenizerManager
    assert result.summary["frontend_num_processes"] == 1


def test_a_shared_front_end_serves_a_burst_one_request_after_another():
    """Known answer: 40 requests at t = 0, 10 ms of front-end work each. One process for four replicas hands the
    k-th request to the engine at k x 10 ms; a process per replica at ceil(k / 4) x 10 ms."""
    burst = {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 50, "output_tokens": 4}}
    front = {"per_request_s": 0.01, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0}
    leave = {}
    for per_server in (4, 1):
        raw = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_replicas": 4}, "workload": burst,
               "frontend": {**front, "replicas_per_server": per_server}, "run": {"num_requests": 40}}
        leave[per_server] = np.sort(simulate(validate_scenario(raw)).requests["frontend_in_s"].to_numpy())
    k = np.arange(1, 41)
    np.testing.assert_allclose(leave[4], k * 0.01, rtol=1e-9)
    np.testing.assert_allclose(leave[1], np.ceil(k / 4) * 0.01, rtol=1e-9)


@pytest.mark.parametrize("raw, message", [
    (sglang(dp_size=4, hardware={"num_replicas": 2}),
     "engine.dp_size: 4 contradicts hardware.num_replicas 2; allowed: give one of them, or the same value"),
    (sglang(dp_size=2, enable_dp_attention=True, tp_size=2),
     "engine.dp_size: 2 with --enable-dp-attention is not modelled for llama-3.1-8b; allowed: 1, or a DeepSeek-V2/V3 "
     "mixture of experts (the path read: models/deepseek_v2.py, layers/communicator.py)"),
    (sglang(dp_size=2, load_balance_method="shortest_queue"),
     "engine.load_balance_method: 'shortest_queue' is not modelled; allowed: round_robin, auto, or leave it out"),
    (sglang(version="0.5.5", dp_size=2, load_balance_method="auto"),
     "engine.load_balance_method: 'auto' is not a value of sglang 0.5.5's --load-balance-method"),
    (sglang(version="0.3.0", dp_size=2), "engine.dp_size: not a flag of sglang 0.3.0"),
    (sglang(dp_size=0), "engine.dp_size: 0 is not allowed; allowed: a whole number >= 1"),
])
def test_what_is_not_modelled_is_refused_in_one_line(raw, message):
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_replicas_per_server_must_divide_the_replicas(tmp_path):
    raw = sglang(dp_size=4, frontend={"per_request_s": 0.001, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
                                      "replicas_per_server": 3})
    with pytest.raises(ConfigError, match="^engine.dp_size: 4 contradicts frontend.replicas_per_server 3"):
        validate_scenario(raw)
    plain = {"model": "llama-3.1-8b", "hardware": {"num_replicas": 4}, "workload": WORKLOAD,
             "frontend": {"per_request_s": 0.001, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
                          "replicas_per_server": 3}, "run": {"num_requests": 10}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(plain))
    out = servesim("run", path, "--out", tmp_path / "out", cwd=tmp_path)
    assert out.returncode == 2 and not (tmp_path / "out").exists()
    assert one_error_line(out) == ("error: frontend.replicas_per_server: 3 does not divide hardware.num_replicas 4; "
                                   "allowed: a divisor of it (each server feeds that many replicas)")


def test_a_command_line_dp_is_read_as_the_flag():
    sc = validate_scenario(sglang(command="python3 -m sglang.launch_server --model-path x --dp-size 2 --tp 1"))
    assert sc.hardware.num_replicas == 2 and sc.frontend.replicas_per_server == 2


def test_the_planner_sizes_the_replicas_itself_and_refuses_a_dp_flag(tmp_path):
    raw = {**sglang(dp_size=2), "slo": {"ttft_s": 2.0}, "search": {"max_replicas": 2, "num_seeds": 1}}
    assert run_refused(tmp_path, raw, "plan").startswith("error: engine: its flags set hardware.num_replicas (2), "
                                                         "which the planner sizes itself")


def test_the_planner_takes_dp_size_one():
    from sim.tools.planner import plan_settings
    raw = {**sglang(dp_size=1), "slo": {"ttft_s": 2.0}, "search": {"max_replicas": 2, "num_seeds": 1}}
    assert plan_settings(raw).max_replicas == 2
