"""The summary's deployment row (sim/views/report.py deployment_label): what ran, whatever the file left to defaults
or to a launch command."""

from __future__ import annotations

from helpers import small_scenario

from sim.config.files import validate_scenario
from sim.views.report import deployment_label


def label(changes: dict) -> str:
    return deployment_label(validate_scenario(small_scenario(changes)))


def test_each_deployment_says_its_model_weights_gpus_and_parallelism():
    assert label({}) == "llama-3.1-8b on h100-sxm, TP 1"
    assert label({"model": "llama-3.1-70b", "hardware": {"gpu": "h200", "tensor_parallel": 4, "num_replicas": 3},
                  "quantization": {"weights": "fp8"}}) == "llama-3.1-70b (fp8 weights) on h200, TP 4, 3 replicas"
    assert label({"model": "llama-3.1-70b", "hardware": {"tensor_parallel": 2, "pipeline_parallel": 2}}) == (
        "llama-3.1-70b on h100-sxm, TP 2, PP 2")
    assert label({"model": "qwen3-30b-a3b", "hardware": {"tensor_parallel": 4, "expert_parallel": 4}}) == (
        "qwen3-30b-a3b on h100-sxm, TP 4, EP 4")
    assert label({"hardware": {"num_replicas": 8, "lockstep": {}}}) == (
        "llama-3.1-8b on h100-sxm, TP 1, 8 replicas in lockstep")  # data-parallel ranks stepping together
    assert label({"hardware": {"disaggregation": {"prefill": {"num_replicas": 2}, "decode": {"tensor_parallel": 2}}}}
                 ) == "llama-3.1-8b on prefill 2 x h100-sxm TP 1 / decode 1 x h100-sxm TP 2"


def test_the_model_a_launch_command_serves_is_the_one_shown():
    raw = small_scenario({"hardware": {"gpu": "h200"}})
    raw.pop("model")
    raw["engine"] = {"version": "0.11.0", "command": "vllm serve Qwen/Qwen3-32B-FP8 -tp 2"}
    raw["scheduler"] = {"max_model_len": 2048}
    assert deployment_label(validate_scenario(raw)) == "qwen3-32b-fp8 (fp8 weights) on h200, TP 2"


def test_validate_says_what_each_variant_would_run(tmp_path):
    import yaml
    from helpers import servesim
    raw = small_scenario({"hardware": {"gpu": "h200"}})
    raw.pop("model")
    raw["engine"] = {"version": "0.11.0", "command": "vllm serve Qwen/Qwen3-32B -tp 2"}
    raw["scheduler"] = {"max_model_len": 2048}
    raw["variants"] = {"a": {}, "b": {"hardware": {"num_replicas": 2}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = servesim("validate", path)
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert lines[1:] == ["a: qwen3-32b on h200, TP 2; engine vllm 0.11.0",
                         "b: qwen3-32b on h200, TP 2, 2 replicas; engine vllm 0.11.0"]
