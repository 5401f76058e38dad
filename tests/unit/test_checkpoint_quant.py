"""A quantized checkpoint is priced as it is stored: its config.json's quantization_config read into the scenario's
`quantization` where the scenario leaves it out (sim/model/checkpoint_quant.py, sim/config/checkpoint.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import SUBPROCESS_TIMEOUT_S

from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.model.checkpoint_quant import checkpoint_quantization

REPO = Path(__file__).resolve().parents[2]
LLAMA = json.loads((REPO / "tests" / "fixtures" / "hf" / "llama-3.1-8b.json").read_text())
DEEPSEEK_R1 = REPO / "sim" / "model" / "configs" / "deepseek-r1.json"
BLOCK_FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def _group(weights: dict, activations: dict | None) -> dict:
    return {"targets": ["Linear"], "weights": weights, "input_activations": activations}


FP8_DYNAMIC = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": _group(
    {"num_bits": 8, "type": "float", "strategy": "channel"}, {"num_bits": 8, "type": "float", "dynamic": True})}}
W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": _group(
    {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}, None)}}
NVFP4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized", "config_groups": {"group_0": _group(
    {"num_bits": 4, "type": "float", "strategy": "tensor_group"}, None)}}  # weight-only FP4: not nvfp4 (W4A4)
_FP4_16 = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
NVFP4_W4A4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
              "config_groups": {"group_0": _group(_FP4_16, {**_FP4_16, "dynamic": "local"})},
              "ignore": ["lm_head", "model.embed_tokens", "model.visual.blocks.0.attn.qkv", "mtp.layers.0*"]}


@pytest.mark.parametrize("config, expected", [
    (BLOCK_FP8, ("fp8", True, True)),
    ({"quant_method": "fp8", "activation_scheme": "static"}, ("fp8", False, True)),
    (FP8_DYNAMIC, ("fp8", False, True)),
    ({**FP8_DYNAMIC, "config_groups": {"group_0": _group({"num_bits": 8, "type": "float", "strategy": "block",
                                                           "block_structure": [128, 128]}, None)}},
     ("fp8", True, False)),
    (W4A16, ("int4", False, False)),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, ("fp8", False, True)),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.3.mlp.gate"]},
     ("nvfp4", False, False)),
    (NVFP4_W4A4, ("nvfp4", False, False)),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, ("int4", False, False)),
    ({"quant_method": "gptq", "bits": 8}, ("int8", False, False)),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, ("int4", False, False)),
])
def test_formats_read_as_the_engines_load_them(config, expected):
    q = checkpoint_quantization({**LLAMA, "quantization_config": config})
    assert (q.weights, q.fp8_block_scales, q.fp8_activations) == expected


@pytest.mark.parametrize("config, why", [
    ({"quant_method": "hqq"}, "a format ServeSim has no dtype for"),
    (NVFP4, "weights of 4 bits of type 'float'"),
    ({**W4A16, "config_groups": {**W4A16["config_groups"], **{"group_1": FP8_DYNAMIC["config_groups"]["group_0"]}}},
     "its config groups store weights differently"),
    ({"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION"}, "quant_algo 'MIXED_PRECISION'"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]},
     "NVFP4 that keeps 'model.layers.0.self_attn*' unquantized"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4", "config_groups": NVFP4_W4A4["config_groups"],
      "ignore": ["lm_head", "model.layers.0.self_attn*"]}, "quantization_config 'modelopt' not read (NVFP4 that keeps"),
    ({**NVFP4_W4A4, "ignore": ["lm_head", "model.layers.0.mlp.shared_expert.down_proj"]},
     "NVFP4 that keeps 'model.layers.0.mlp.shared_expert.down_proj' unquantized"),
    ({"quant_method": "gptq", "bits": 3}, "bits 3"),
])
def test_formats_without_a_servesim_dtype_are_unread_and_say_why(config, why):
    q = checkpoint_quantization({**LLAMA, "quantization_config": config})
    assert q.weights is None and why in q.describe()


def test_a_config_without_quantization_declares_none():
    assert checkpoint_quantization(LLAMA) is None


def _scenario(tmp_path: Path, quantization_config: dict | None, gpu: str = "h100-sxm", **extra) -> dict:
    config = LLAMA if quantization_config is None else {**LLAMA, "quantization_config": quantization_config}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return {"model": {"hf_config": str(path)}, "hardware": {"gpu": gpu},
            "workload": {"arrival": {"kind": "burst"},
                         "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}},
            "run": {"num_requests": 4}, **extra}


def _quant(raw: dict) -> tuple:
    q = validate_scenario(raw).quantization
    return q.weights, q.fp8_block_scales, q.fp8_compute


def test_deepseek_r1_config_is_priced_in_block_scaled_fp8():
    raw = {"model": {"hf_config": str(DEEPSEEK_R1)}, "hardware": {"gpu": "h200", "tensor_parallel": 8},
           "workload": {"arrival": {"kind": "burst"},
                        "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}},
           "run": {"num_requests": 4}}
    assert _quant(raw) == ("fp8", True, True)  # was bf16: 1.34 TB of weights, beyond 8 H200s


QWEN3_235B = REPO / "sim" / "model" / "configs" / "qwen3-235b-a22b.json"


@pytest.mark.parametrize("tp, problem", [(4, None), (8, "experts_gate_up's output width per GPU is 192")])
def test_block_scaled_fp8_needs_whole_scale_blocks_on_every_gpu(tp, problem):
    # Qwen3-235B-A22B: moe_intermediate_size 1536, so 192 per GPU at TP 8 (vLLM refuses it: GPUStack's page, "TP8
    # only is not compatible for the model weight. Use EP as well."); 384 = 3 x 128 at TP 4
    from sim.model.catalog import get_model
    from sim.model.hf_config import read_model_ref
    from sim.model.shapes import block_scale_problem
    model = read_model_ref({"hf_config": str(QWEN3_235B)}, "model")
    found = block_scale_problem(model, tp)
    assert found == problem if problem is None else problem in found
    assert block_scale_problem(get_model("llama-3.1-8b"), 8) is None  # 14336 / 8 = 1792 = 14 x 128
    raw = {"model": {"hf_config": str(QWEN3_235B)}, "hardware": {"gpu": "h100-sxm", "tensor_parallel": tp},
           "quantization": {"weights": "fp8", "fp8_block_scales": True},
           "workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 64,
                                                                  "output_tokens": 8}},
           "run": {"num_requests": 4}}
    if problem is None:
        assert validate_scenario(raw).hardware.tensor_parallel == tp
        return
    with pytest.raises(ConfigError, match=r"^hardware\.tensor_parallel: 8 cannot shard qwen3-235b-a22b's block-scaled "
                       r"fp8 weights \(.*\); allowed: 1, 2, 4, hardware\.expert_parallel 2 or 4 or 8, or "
                       r"quantization\.fp8_block_scales false$"):
        validate_scenario(raw)
    per_tensor = {**raw, "quantization": {"weights": "fp8", "fp8_block_scales": False}}
    assert validate_scenario(per_tensor).hardware.tensor_parallel == 8  # per-tensor scales shard anywhere


def test_fp8_activations_run_in_fp8_only_on_a_gpu_with_an_fp8_rate(tmp_path):
    assert _quant(_scenario(tmp_path, BLOCK_FP8, "h100-sxm")) == ("fp8", True, True)
    assert _quant(_scenario(tmp_path, BLOCK_FP8, "a100-80gb")) == ("fp8", True, False)  # weight-only fp8 there
    assert _quant(_scenario(tmp_path, W4A16)) == ("int4", False, False)
    assert _quant(_scenario(tmp_path, None)) == ("bf16", False, False)


def test_what_the_scenario_says_wins(tmp_path):
    assert _quant(_scenario(tmp_path, BLOCK_FP8, quantization={"weights": "bf16"})) == ("bf16", False, False)
    assert _quant(_scenario(tmp_path, BLOCK_FP8, quantization={"weights": "fp8"})) == ("fp8", True, True)
    assert _quant(_scenario(tmp_path, BLOCK_FP8, quantization={"fp8_compute": False})) == ("fp8", True, False)
    assert _quant(_scenario(tmp_path, BLOCK_FP8, quantization={"fp8_block_scales": False})) == ("fp8", False, True)
    # the KV dtype is the scenario's: the checkpoint's weights do not set it
    assert validate_scenario(_scenario(tmp_path, BLOCK_FP8)).quantization.kv_cache == "bf16"


def test_an_unread_quantization_needs_the_weights_said(tmp_path):
    with pytest.raises(ConfigError) as err:
        validate_scenario(_scenario(tmp_path, NVFP4))
    message = str(err.value)
    assert "\n" not in message and message.startswith("model.hf_config: the checkpoint's quantization_config "
                                                      "'compressed-tensors'")
    assert ("allowed: say how its weights are stored with quantization.weights (bf16, fp16, fp8, int8, int4, "
            "mxfp4, nvfp4)") in message
    assert _quant(_scenario(tmp_path, NVFP4, quantization={"weights": "int4"}))[0] == "int4"


def test_mxfp4_is_a_mixture_of_experts_format(tmp_path):
    # gpt-oss's checkpoints store their routed experts in MXFP4; on a dense model the dtype is refused in one line
    with pytest.raises(ConfigError) as err:
        validate_scenario(_scenario(tmp_path, None, quantization={"weights": "mxfp4"}))
    message = str(err.value)
    assert "\n" not in message and message.startswith("quantization.weights: 'mxfp4' stores a mixture of experts'")
    assert message.endswith("allowed: bf16, fp16, fp8, int8, int4, nvfp4")
    with pytest.raises(ConfigError, match="fp8_compute: true with weights 'mxfp4'"):
        validate_scenario({**_scenario(tmp_path, None), "model": "mixtral-8x7b",
                           "quantization": {"weights": "mxfp4", "fp8_compute": True}})


def test_the_dumped_scenario_reads_back_equal(tmp_path):
    scenario = validate_scenario(_scenario(tmp_path, BLOCK_FP8))
    again = validate_scenario(yaml.safe_load(scenario.to_yaml()))
    assert again.quantization == scenario.quantization and again.model == scenario.model


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim.views.cli", *args], check=False, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)


def test_cli_refuses_an_unread_quantization_in_one_line_and_writes_nothing(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario(tmp_path, NVFP4)))
    result = _cli("run", str(path), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "quantization.weights" in result.stderr
    assert not (tmp_path / "out").exists()


def test_catalog_import_pastes_the_checkpoint_quantization(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "quantization_config": BLOCK_FP8}))
    result = _cli("catalog", "import", str(path), "--name", "m", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "# checkpoint: fp8 weights, block scales, fp8 activations (quantization_config 'fp8')" in result.stdout
    pasted = yaml.safe_load(result.stdout)
    assert pasted["quantization"] == {"weights": "fp8", "fp8_block_scales": True, "fp8_compute": True}
    raw = _scenario(tmp_path, BLOCK_FP8)
    assert validate_scenario({**raw, **pasted}).quantization == validate_scenario(raw).quantization


def _modelopt_checkpoint(tmp_path: Path, quant_file: str | None) -> dict:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA))  # no quantization_config in it
    if quant_file is not None:
        (tmp_path / "hf_quant_config.json").write_text(quant_file)
    return {**_scenario(tmp_path, None), "model": {"hf_config": str(tmp_path / "config.json")}}


@pytest.mark.parametrize("quantization, expected", [
    ({"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]}, ("fp8", False, True)),
    ({"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head", "model.layers.*.mlp.gate"]},
     ("nvfp4", False, False)),
])
def test_a_modelopt_hf_quant_config_beside_the_config_is_read(tmp_path, quantization, expected):
    # NVIDIA's ModelOpt exports (nvidia/Llama-3.1-70B-Instruct-FP8, nvidia/Qwen3-235B-A22B-NVFP4 ...) keep their
    # quantization in hf_quant_config.json, not config.json: read as bf16 before, they are priced as stored
    raw = _modelopt_checkpoint(tmp_path, json.dumps({"producer": {"name": "modelopt"}, "quantization": quantization}))
    gpu = "b200" if expected[0] == "nvfp4" else "h100-sxm"
    assert _quant({**raw, "hardware": {"gpu": gpu}}) == expected


def test_a_modelopt_file_that_keeps_attention_16_bit_or_is_malformed_is_one_line(tmp_path):
    raw = _modelopt_checkpoint(tmp_path, json.dumps({"quantization": {
        "quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}}))
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    assert "\n" not in str(err.value) and "NVFP4 that keeps 'model.layers.0.self_attn*' unquantized" in str(err.value)
    assert _quant({**raw, "quantization": {"weights": "fp8", "fp8_compute": True}})[0] == "fp8"  # said: priced so
    raw = _modelopt_checkpoint(tmp_path, "{not json")
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    assert str(err.value) == (f"model.hf_config: '{tmp_path / 'hf_quant_config.json'}' is not a ModelOpt "
                              "hf_quant_config.json (a JSON object with a 'quantization' object); allowed: that, or no "
                              "such file beside the config")
