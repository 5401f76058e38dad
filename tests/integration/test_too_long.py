"""A request longer than max_model_len (scheduler.too_long): clipped to fit (ServeSim's rule), refused on arrival as
vLLM's OpenAI server refuses it to 0.31, or its output cut to what its prompt leaves and a prompt of the whole context
refused, as vLLM does from 0.32 (sim/config/engines/vllm.py VLLM_CLIPS_OUTPUT_SINCE)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import servesim, small_scenario

from sim.config.files import validate_scenario
from sim.run import make_workload, simulate

PAIRS = [(100, 50), (1500, 1000), (2047, 5), (2048, 5), (3000, 100)]


def trace_of(tmp_path, pairs=PAIRS) -> dict:
    """A workload section replaying `pairs` (prompt, output), a request every 0.1 s."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n"
                    + "".join(f"{i * 0.1},{p},{m}\n" for i, (p, m) in enumerate(pairs)))
    columns = {"arrival": "arrival_s", "input": "input_tokens", "output": "output_tokens"}
    return {"arrival": {"kind": "trace", "path": str(path), "columns": columns}, "lengths": {"kind": "trace"}}


def scenario(tmp_path, rule: str, **run) -> dict:
    raw = small_scenario(workload=trace_of(tmp_path), scheduler={"max_model_len": 2048, "too_long": rule}, run=run)
    del raw["run"]["num_requests"]  # the whole trace
    return raw


def lengths_under(rule: str, tmp_path) -> list[tuple[int, int]]:
    """(prompt, output) of each request of PAIRS' trace, as the workload sends them under `rule`."""
    workload = make_workload(validate_scenario(scenario(tmp_path, rule)))
    return list(zip(workload.input_tokens.tolist(), workload.output_tokens.tolist()))


@pytest.mark.parametrize("rule, sent", [
    ("clip", [(100, 50), (1500, 548), (2047, 1), (2047, 1), (2047, 1)]),
    ("refuse", PAIRS),
    ("clip_output", [(100, 50), (1500, 548), (2047, 1), (2048, 5), (3000, 100)])])
def test_each_rule_sends_the_lengths_it_says(tmp_path, rule, sent):
    assert lengths_under(rule, tmp_path) == sent


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("rule, refused", [("clip", 0), ("refuse", 4), ("clip_output", 2)])
def test_what_does_not_fit_is_refused_on_arrival_and_the_rest_run_as_sent(tmp_path, compiled, rule, refused):
    result = simulate(validate_scenario(scenario(tmp_path, rule, compiled_core=compiled)))
    requests = result.requests.sort_values("request_id")
    assert result.summary["num_rejected"] == refused and result.summary["num_finished"] == len(PAIRS) - refused
    rejected = requests[requests["status"] == "rejected"]
    assert all("> max_model_len 2048" in reason for reason in rejected["reject_reason"])
    finished = requests[requests["status"] == "finished"]
    assert np.all(finished["prompt_tokens"] + finished["output_tokens"] <= 2048)


@pytest.mark.parametrize("version, rule", [("0.6.0", "refuse"), ("0.11.0", "refuse"), ("0.31.0", "refuse"),
                                           ("0.32.0", "clip_output"), ("0.34.0", "clip_output")])
def test_vllm_takes_its_own_servers_rule_and_a_scenario_may_say_another(version, rule):
    engine = {"name": "vllm", "version": version}
    assert validate_scenario(small_scenario(engine=engine)).scheduler.too_long == rule
    assert validate_scenario(small_scenario(engine=engine, scheduler={"too_long": "clip"})).scheduler.too_long == "clip"
    assert validate_scenario(small_scenario()).scheduler.too_long == "clip"


def test_the_cli_says_which_rule_refused_or_clipped_them(tmp_path):
    import yaml
    path = tmp_path / "s.yaml"
    raw = {**scenario(tmp_path, "refuse"), "engine": {"name": "vllm", "version": "0.11.0"}, "frontend": None}
    del raw["scheduler"]["too_long"]  # the preset's
    path.write_text(yaml.safe_dump(raw))
    out = " ".join(servesim("run", path, "--out", tmp_path / "out").stdout.split())
    assert ("4 of 5 requests were rejected, as they can never run here (the first: needs 2500 tokens > max_model_len "
            "2048") in out
    assert "(scheduler.too_long: refuse, engine vllm 0.11.0's: refused, not clipped)" in out
    raw["engine"]["version"] = "0.33.0"
    path.write_text(yaml.safe_dump(raw))
    out = " ".join(servesim("run", path, "--out", tmp_path / "out2").stdout.split())
    assert "2 of 5 requests were rejected" in out
    assert ("2 of 5 requests were longer than max_model_len (2048 tokens) and were clipped to fit (scheduler.too_long: "
            "clip_output, engine vllm 0.33.0's: their output cut to what the prompt leaves, a prompt of max_model_len "
            "or more refused)") in out
