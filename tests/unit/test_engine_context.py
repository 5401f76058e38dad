"""The longest context an engine derives from the model's config as it serves it (`EnginePreset.context`): RoPE
scaling read from config.json (`ModelSpec.rope_scaling`) or given by the engine's overrides (vLLM's --hf-overrides
and --rope-scaling, SGLang's --json-model-override-args), each engine's own rule, and a longer max_model_len refused
as the engine refuses it."""

import re
from pathlib import Path

import pytest

from sim.config.deployment import resolve
from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.model.hf_config import rope_entries, spec_from_config

QWEN3_8B = {"hf_config": str(Path(__file__).parents[2] / "sim" / "model" / "configs" / "qwen3-8b.json")}  # 40,960
BASE = {"model": QWEN3_8B, "hardware": {"gpu": "h200"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}
# Qwen's long-context recipe: YaRN x 4 over the 32,768 positions it was trained on
YARN = '{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}'


def context(engine: dict, **sections) -> tuple[int | None, int]:
    """(the scenario's max_model_len as the preset left it, the deployment's)."""
    sc = validate_scenario({**BASE, **sections, "engine": engine})
    return sc.scheduler.max_model_len, resolve(sc).max_model_len


def test_vllm_scales_its_context_by_a_yarn_overrides_factor_over_the_original_positions():
    # _get_and_verify_max_len: derived = original_max_position_embeddings (32,768) x factor (4) = 131,072
    command = f"vllm serve Qwen/Qwen3-8B --rope-scaling '{YARN}' --max-model-len 131072"
    assert context({"name": "vllm", "version": "0.11.0", "command": command}) == (131_072, 131_072)
    overrides = f"vllm serve Qwen/Qwen3-8B --hf-overrides '{{\"rope_scaling\": {YARN}}}'"
    sc = validate_scenario({**BASE, "engine": {"name": "vllm", "version": "0.19.0", "command": overrides}})
    assert sc.scheduler.max_model_len == 131_072  # the derived context is the default
    assert any("max_model_len 131,072, the context it derives from qwen3-8b's config (YaRN's "
               "original_max_position_embeddings 32,768 x its RoPE factor 4)" in n for n in sc.engine.notes)
    assert context({"name": "vllm", "version": "0.11.0"}) == (None, 40_960)  # the config's own: no scaling


def test_vllm_0_30_takes_yarn_as_already_in_max_position_embeddings():
    overrides = {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    assert context({"name": "vllm", "version": "0.30.0", "hf_overrides": overrides}) == (None, 40_960)
    longer = {**overrides, "max_position_embeddings": 131072}
    assert context({"name": "vllm", "version": "0.30.0", "hf_overrides": longer}) == (131_072, 131_072)
    assert context({"name": "vllm", "version": "0.29.0", "hf_overrides": overrides}) == (131_072, 131_072)


@pytest.mark.parametrize("rope, derived", [
    ({"rope_type": "linear", "factor": 2.0}, 81_920), ({"rope_type": "dynamic", "factor": 1.5}, 61_440),
    ({"type": "linear", "factor": 2.0}, 81_920),  # the older spelling of the type
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 40_960),
    ({"rope_type": "longrope", "factor": 4.0}, 40_960), ({"rope_type": "default"}, 40_960)])
def test_vllm_scales_by_the_factor_of_the_types_it_scales(rope, derived):
    assert context({"name": "vllm", "version": "0.11.0", "hf_overrides": {"rope_scaling": rope}})[1] == derived


def test_sglang_scales_by_the_factor_unless_the_scaling_names_its_original_positions():
    # get_context_length: a factor whose scaling has original_max_position_embeddings (YaRN's) is taken as 1
    linear = {"json_model_override_args": {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}}
    assert context({"name": "sglang", "version": "0.5.5", **linear}) == (81_920, 81_920)
    command = f"python3 -m sglang.launch_server --json-model-override-args '{{\"rope_scaling\": {YARN}}}'"
    assert context({"name": "sglang", "version": "0.5.5", "command": command}) == (None, 40_960)
    with pytest.raises(ConfigError, match=re.escape(
            "engine.command '--context-length 131072': 131,072 is above the 40,960 tokens SGLang 0.5.5 derives from "
            "qwen3-8b's config (max_position_embeddings 40,960), which it refuses; allowed: at most 40,960, or RoPE "
            "scaling that extends it (the engine's config overrides)")):
        context({"name": "sglang", "version": "0.5.5", "command": command + " --context-length 131072"})
    # 0.3.0-0.3.4 take a longer --context-length as given
    assert context({"name": "sglang", "version": "0.3.4", "context_length": 100_000}) == (100_000, 100_000)


def test_a_longer_max_model_len_than_the_engine_derives_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^engine\.command '--max-model-len 131072': 131,072 is above the 40,960 "
                                          r"tokens vLLM 0\.11\.0 derives from qwen3-8b's config \(max_position_"
                                          r"embeddings 40,960\), which it refuses; allowed: at most 40,960"):
        context({"name": "vllm", "version": "0.11.0", "command": "vllm serve m --max-model-len 131072"})
    with pytest.raises(ConfigError, match=r"^scheduler\.max_model_len: 50,000 is above the 40,960 tokens vLLM "):
        context({"name": "vllm", "version": "0.11.0"}, scheduler={"max_model_len": 50_000})
    for engine, message in (
            ({"version": "0.11.0", "hf_overrides": {"num_hidden_layers": 4}}, "engine.hf_overrides: "
             "'num_hidden_layers' is not modelled (it changes the model priced: the scenario's model says it); "
             "allowed: rope_scaling, rope_parameters, rope_theta, max_position_embeddings"),
            ({"version": "0.11.0", "hf_overrides": {"rope_scaling": {"factor": 2.0}}}, "engine.hf_overrides: "
             "rope_scaling: {'factor': 2.0} has no rope_type; allowed: a mapping with rope_type (default, linear, "
             "dynamic, yarn, llama3, longrope, ...)"),
            ({"version": "0.6.3", "hf_overrides": {"rope_theta": 1e6}}, "engine.hf_overrides: not a flag of vllm "
             "0.6.3 (it came in 0.6.4); allowed: leave it out, or engine.version 0.6.4 or later"),
            ({"version": "0.11.1", "rope_scaling": YARN}, "engine.rope_scaling: not a flag of vllm 0.11.1 (its "
             "parser refuses it from 0.11.1); allowed: leave it out, or engine.version before 0.11.1")):
        with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
            context({"name": "vllm", **engine})


def test_the_config_reader_keeps_its_rope_scaling_flat_or_per_layer_type():
    config = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_hidden_layers": 2,
              "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 4096}
    assert spec_from_config(config).rope_scaling == ()
    flat = spec_from_config({**config, "rope_scaling": {"type": "linear", "factor": 2.0}})
    assert [entry.model_dump() for entry in flat.rope_scaling] == [
        {"rope_type": "linear", "factor": 2.0, "original_max_position_embeddings": None}]
    nested = rope_entries({"rope_parameters": {"full_attention": {"rope_type": "default"},
                                               "sliding_attention": {"rope_type": "linear", "factor": 8.0}}}, "c")
    assert [entry["rope_type"] for entry in nested] == ["default", "linear"]
    with pytest.raises(ConfigError, match=r"^config\.json: rope_scaling\.factor: -2 is not allowed; allowed: a "
                                          r"number > 0$"):
        spec_from_config({**config, "rope_scaling": {"rope_type": "linear", "factor": -2}})
