"""Hugging Face config.json -> ModelSpec: every catalog model read from its config fields gives the catalog's
parameter count and KV bytes per token exactly; other architectures against published numbers; bad files
are one line naming the file and the field; scenarios and `servesim catalog import` use the same reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sim.config.files import load_scenario_set, validate_scenario
from sim.errors import ConfigError
from sim.model.catalog import MODELS
from sim.model.checkpoint_quant import checkpoint_quantization
from sim.model.hf_config import load_hf_config, spec_from_config
from sim.model.memory import (
    kv_bytes_for_sequence,
    kv_bytes_per_token,
    kv_slot_bytes,
    weight_bytes,
    window_kv_bytes_per_token,
)
from sim.model.shapes import active_param_count, param_count
from sim.model.specs import ModelSpec

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "hf"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.mark.parametrize("key", list(MODELS))
def test_catalog_models_from_their_config_fields(key):
    catalog = MODELS[key]
    spec = load_hf_config(FIXTURES / f"{key}.json", name=key)
    assert param_count(spec) == param_count(catalog)
    assert kv_bytes_per_token(spec) == kv_bytes_per_token(catalog)
    for tp in (2, 8):
        if catalog.num_attention_heads % tp == 0:
            assert kv_bytes_per_token(spec, "fp8", tp) == kv_bytes_per_token(catalog, "fp8", tp)
    # Field by field too: the catalog's published_params is the only thing a config.json cannot say (and the reader
    # records where it read the model from: its model_type, and what it leaves out).
    provenance = {"published_params", "model_type", "not_modelled"}
    assert spec.model_dump(exclude=provenance) == catalog.model_dump(exclude=provenance)
    assert spec.model_type == json.loads((FIXTURES / f"{key}.json").read_text())["model_type"]


def test_name_comes_from_name_or_path_else_the_file(tmp_path):
    cfg = fixture("llama-2-7b")
    assert spec_from_config({**cfg, "_name_or_path": "meta-llama/Llama-2-7b-hf"}).name == "llama-2-7b-hf"
    folder = tmp_path / "My Model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    assert load_hf_config(folder / "config.json").name == "my-model"
    assert load_hf_config(folder / "config.json", name="x").name == "x"


def test_architectures_stand_in_for_a_missing_model_type():
    cfg = fixture("mistral-7b-v0.1")
    del cfg["model_type"]
    assert spec_from_config(cfg, "m") == spec_from_config(fixture("mistral-7b-v0.1"), "m")


@pytest.mark.parametrize("model_type", [[], {}, ["qwen3"], 3])
def test_a_model_type_that_is_not_a_string_is_refused_in_one_line(model_type):
    cfg = fixture("mistral-7b-v0.1") | {"model_type": model_type}
    del cfg["architectures"]
    with pytest.raises(ConfigError, match=r"^c.json: model_type .* is not a handled architecture; allowed model_type: "):
        spec_from_config(cfg, "m", source="c.json")
    # beside a text_config (a multimodal wrapper's layout), the same refusal: no TypeError on the way
    with pytest.raises(ConfigError, match="c.json text_config: model_type .* is not a handled architecture"):
        spec_from_config(cfg | {"text_config": cfg}, "m", source="c.json")


def test_deepseek_v3_mla_with_query_compression_and_three_dense_layers():
    # deepseek-ai/DeepSeek-V3 config.json
    cfg = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
           "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
           "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
           "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False}
    spec = spec_from_config(cfg, "deepseek-v3")
    assert (spec.attention, spec.num_dense_layers, spec.dense_ffn_size, spec.q_lora_rank) == ("mla", 3, 18432, 1536)
    assert kv_bytes_per_token(spec) == 61 * (512 + 64) * 2  # one latent + the rope key per layer, bf16
    assert param_count(spec) == pytest.approx(671e9, rel=0.01)  # DeepSeek-V3 report: 671B total (MTP excluded)
    assert active_param_count(spec) == pytest.approx(37e9, rel=0.05)  # 37B activated per token


def test_glm45_air_grouped_query_attention_with_deepseeks_experts():
    # zai-org/GLM-4.5-Air config.json (Glm4MoeConfig, transformers 4.54.1), the fields that price it
    cfg = {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True,
           "first_k_dense_replace": 1, "head_dim": 128, "hidden_size": 4096, "intermediate_size": 10944,
           "max_position_embeddings": 131072, "moe_intermediate_size": 1408, "n_routed_experts": 128,
           "n_shared_experts": 1, "num_attention_heads": 96, "num_experts_per_tok": 8, "num_hidden_layers": 46,
           "num_key_value_heads": 8, "num_nextn_predict_layers": 1, "partial_rotary_factor": 0.5,
           "tie_word_embeddings": False, "use_qk_norm": False, "vocab_size": 151552}
    spec = spec_from_config(cfg, "glm-4.5-air")
    assert (spec.attention, spec.head_dim, spec.attention_bias) == ("gqa", 128, True)
    assert (spec.num_dense_layers, spec.dense_ffn_size, spec.ffn_size) == (1, 10944, 1408)
    assert (spec.num_experts, spec.num_experts_per_token, spec.num_shared_experts) == (128, 8, 1)
    assert kv_bytes_per_token(spec) == 46 * 2 * 8 * 128 * 2  # K and V of 8 heads of 128 a layer, bf16
    assert param_count(spec) == pytest.approx(106e9, rel=0.01)  # its model card: 106B total (MTP layer excluded)
    assert active_param_count(spec) == pytest.approx(12e9, rel=0.08)  # "12B active", rounded (12.8B here)
    assert spec_from_config({k: v for k, v in cfg.items() if k != "model_type"}, "g") == spec_from_config(cfg, "g")
    # Glm4MoeConfig's defaults are GLM-4.5-Air's layout: a file without the expert keys reads the same
    moe_keys = ("first_k_dense_replace", "moe_intermediate_size", "n_routed_experts", "n_shared_experts",
                "num_experts_per_tok")
    assert spec_from_config({k: v for k, v in cfg.items() if k not in moe_keys}, "g") == spec_from_config(cfg, "g")


def test_gemma_explicit_head_dim_and_tied_embeddings():
    # google/gemma-7b config.json: head_dim 256 although hidden_size / heads = 192; no tie_word_embeddings key
    cfg = {"architectures": ["GemmaForCausalLM"], "model_type": "gemma", "hidden_size": 3072,
           "intermediate_size": 24576, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
           "head_dim": 256, "vocab_size": 256000, "max_position_embeddings": 8192}
    spec = spec_from_config(cfg, "gemma-7b")
    assert spec.head_dim == 256 and spec.tie_word_embeddings
    assert param_count(spec) == pytest.approx(8.54e9, rel=0.005)  # google/gemma-7b: 8.54B parameters
    assert kv_bytes_per_token(spec) == 2 * 28 * 16 * 256 * 2


def test_qwen_sliding_window_only_when_switched_on_and_text_config_is_unwrapped():
    cfg = fixture("qwen2.5-7b")
    assert spec_from_config(cfg, "q").sliding_window is None  # 131072 in the file, use_sliding_window false
    assert spec_from_config({**cfg, "use_sliding_window": True, "sliding_window": 4096}, "q").sliding_window == 4096
    wrapped = {"architectures": ["SomethingForConditionalGeneration"], "model_type": "vision-thing",
               "text_config": cfg}
    assert spec_from_config(wrapped, "q") == spec_from_config(cfg, "q")


def test_moe_qwen3():
    # Qwen/Qwen3-30B-A3B config.json
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
           "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
           "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
           "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
           "max_position_embeddings": 40960, "tie_word_embeddings": False}
    spec = spec_from_config(cfg, "qwen3-30b-a3b")
    assert param_count(spec) == pytest.approx(30.5e9, rel=0.01)  # model card: 30.5B total
    # Model card: 3.3B activated, counting the input embedding table that active_param_count leaves out.
    embeddings = spec.vocab_size * spec.hidden_size
    assert active_param_count(spec) + embeddings == pytest.approx(3.3e9, rel=0.03)


@pytest.mark.parametrize("layers, experts, total, active, checkpoint_gib",
                         [(36, 128, 117e9, 5.1e9, 60.8), (24, 32, 21e9, 3.6e9, 12.8)])
def test_gpt_oss(layers, experts, total, active, checkpoint_gib):
    # openai/gpt-oss-120b and -20b config.json (as aiconfigurator-core 0.12.0 ships them in model_configs/); OpenAI's
    # model card (arXiv 2508.10925): 117B parameters with 5.1B active, 21B with 3.6B active, checkpoints of 60.8 and
    # 12.8 GiB (MXFP4 experts, the rest bf16)
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
           "experts_per_token": 4, "head_dim": 64, "hidden_size": 2880, "intermediate_size": 2880,
           "layer_types": ["sliding_attention", "full_attention"] * (layers // 2), "max_position_embeddings": 131072,
           "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": layers,
           "num_key_value_heads": 8, "num_local_experts": experts, "sliding_window": 128,
           "tie_word_embeddings": False, "vocab_size": 201088,
           "quantization_config": {"quant_method": "mxfp4"}}
    spec = spec_from_config(cfg, "gpt-oss")
    assert (spec.num_experts, spec.num_experts_per_token, spec.attention_bias) == (experts, 4, True)
    # Every other layer slides over the last 128 tokens: half the layers' KV stops there.
    assert (spec.sliding_window, spec.sliding_window_layers, spec.hybrid_window) == (128, layers // 2, True)
    assert param_count(spec) == pytest.approx(total, rel=0.01)
    assert active_param_count(spec) == pytest.approx(active, rel=0.01)
    assert kv_bytes_per_token(spec) == layers * 2 * 8 * 64 * 2
    assert kv_slot_bytes(spec) == window_kv_bytes_per_token(spec) == layers // 2 * 2 * 8 * 64 * 2
    # A 1,000-token sequence: 1,000 tokens in the full layers, 128 in the sliding ones.
    assert kv_bytes_for_sequence(spec, 1000) == (1000 + 128) * layers // 2 * 2 * 8 * 64 * 2
    assert checkpoint_quantization(cfg).weights == "mxfp4"
    assert weight_bytes(spec, "mxfp4") / 2**30 == pytest.approx(checkpoint_gib, rel=0.005)
    with pytest.raises(ConfigError, match="layer_types = 'all' is not allowed"):
        spec_from_config({**cfg, "layer_types": "all"}, "gpt-oss")


def test_minimax_m2_and_qwen3_vl_language_models():
    # MiniMaxAI/MiniMax-M2.5 config.json (aiconfigurator-core 0.12.0's copy); MiniMax-M2's model card: 230B total
    # parameters, 10B active
    cfg = {"architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "num_hidden_layers": 62,
           "hidden_size": 3072, "num_attention_heads": 48, "num_key_value_heads": 8, "head_dim": 128,
           "intermediate_size": 1536, "vocab_size": 200064, "num_experts_per_tok": 8, "num_local_experts": 256,
           "max_position_embeddings": 196608, "tie_word_embeddings": False, "shared_intermediate_size": 0,
           "attn_type_list": [1] * 62}
    spec = spec_from_config(cfg, "minimax-m2")
    assert (spec.num_experts, spec.num_experts_per_token, spec.num_shared_experts) == (256, 8, 0)
    assert param_count(spec) == pytest.approx(230e9, rel=0.01)
    assert active_param_count(spec) == pytest.approx(10e9, rel=0.05)
    with pytest.raises(ConfigError, match="attn_type_list"):  # MiniMax-M1's lightning-attention layers
        spec_from_config({**cfg, "attn_type_list": [0, 1] * 31}, "minimax-m1")
    with pytest.raises(ConfigError, match="shared_intermediate_size"):
        spec_from_config({**cfg, "shared_intermediate_size": 512}, "minimax")
    # Qwen/Qwen3-VL-8B-Instruct: the language model (text_config) is Qwen3's; the vision tower is left out and said
    text = {"model_type": "qwen3_vl_text", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
            "max_position_embeddings": 262144}
    vl = spec_from_config({"model_type": "qwen3_vl", "text_config": text}, "qwen3-vl-8b")
    provenance = {"not_modelled", "model_type"}
    assert vl.model_dump(exclude=provenance) == spec_from_config(
        {**text, "model_type": "qwen3"}, "qwen3-vl-8b").model_dump(exclude=provenance)
    assert "vision encoder" in vl.not_modelled


@pytest.mark.parametrize("model_type, layers, pattern, types, sliding", [
    # google/gemma-2-9b config.json: 42 layers, no layer_types; transformers' Gemma2Config: even layers slide
    ("gemma2", 42, None, None, 21),
    # google/gemma-3-27b-it text_config: 62 layers, sliding_window_pattern 6: layers 5, 11, ..., 59 are global
    ("gemma3_text", 62, 6, None, 52),
    # a file that lists its layers is read as it lists them
    ("gemma3_text", 4, None, ["full_attention", "sliding_attention", "sliding_attention", "full_attention"], 2),
    ("gemma2", 4, None, ["full_attention"] * 4, 0),
    ("gemma2", 4, None, ["sliding_attention"] * 4, 4),
])
def test_gemma_local_and_global_layers(model_type, layers, pattern, types, sliding):
    cfg = {"model_type": model_type, "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": layers,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "vocab_size": 256000,
           "max_position_embeddings": 8192, "sliding_window": 4096}
    cfg |= {"sliding_window_pattern": pattern} if pattern else {}
    cfg |= {"layer_types": types} if types else {}
    spec = spec_from_config(cfg, "gemma")
    assert spec.num_window_layers == sliding
    assert spec.sliding_window == (4096 if sliding else None)
    assert spec.sliding_window_layers == (sliding if 0 < sliding < layers else None)
    assert spec.hybrid_window == (0 < sliding < layers)
    with pytest.raises(ConfigError, match="layer_types"):
        spec_from_config({**cfg, "layer_types": ["sliding_attention"] * (layers + 1)}, "gemma")


def _write(tmp_path: Path, content, name="config.json") -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("change", "words"), [
    (lambda c: c.pop("hidden_size"), ["missing field 'hidden_size'"]),
    (lambda c: c.pop("max_position_embeddings"), ["missing field 'max_position_embeddings'"]),
    (lambda c: c.update(num_hidden_layers=0), ["num_hidden_layers = 0", "an integer >= 1"]),
    (lambda c: c.update(intermediate_size=-4096), ["intermediate_size = -4096", "an integer >= 1"]),
    (lambda c: c.update(vocab_size=True), ["vocab_size = True", "an integer >= 1"]),
    (lambda c: c.update(hidden_size=4096.5), ["hidden_size = 4096.5"]),
    (lambda c: c.update(num_key_value_heads=5), ["num_attention_heads=32 is not a multiple of num_kv_heads=5"]),
    (lambda c: c.update(tie_word_embeddings="yes"), ["tie_word_embeddings = 'yes'", "true or false"]),
    (lambda c: c.update(model_type="mamba", architectures=["MambaForCausalLM"]),
     ["model_type 'mamba' is not a handled architecture", "llama"]),
    (lambda c: [c.pop("model_type"), c.pop("architectures")], ["missing field 'model_type'"]),
])
def test_bad_config_is_one_line_naming_the_file_and_field(tmp_path, change, words):
    cfg = fixture("llama-3.1-8b")
    change(cfg)
    path = _write(tmp_path, cfg)
    with pytest.raises(ConfigError) as err:
        load_hf_config(path)
    message = _one_line(err)
    assert str(path) in message
    for word in words:
        assert word in message


def test_unmodelled_moe_layout_is_refused(tmp_path):
    path = _write(tmp_path, {**fixture("deepseek-v2-lite"), "moe_layer_freq": 2})
    with pytest.raises(ConfigError, match="moe_layer_freq = 2 is not allowed; allowed: 1"):
        load_hf_config(path)


@pytest.mark.parametrize(("content", "words"), [
    ("{not json", ["line 1: not JSON"]),
    ("[1, 2]", ["expected a JSON object", "list"]),
    (b"\xff\xfe{}", ["not UTF-8"]),
])
def test_unreadable_files(tmp_path, content, words):
    path = tmp_path / "config.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ConfigError) as err:
        load_hf_config(path, field="model.hf_config")
    message = _one_line(err)
    assert message.startswith(f"model.hf_config: '{path}'")
    for word in words:
        assert word in message
    with pytest.raises(ConfigError, match="not found"):
        load_hf_config(tmp_path / "absent.json")
    with pytest.raises(ConfigError, match="is a folder"):
        load_hf_config(tmp_path)


BASE = {"hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}},
        "run": {"num_requests": 4}}


def test_scenario_hf_config_is_relative_to_the_scenario_file(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.json").write_text((FIXTURES / "mistral-7b-v0.1.json").read_text())
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**BASE, "model": {"hf_config": "models/m.json"}}))
    monkeypatch.chdir(REPO)  # not the scenario's folder
    scenario = load_scenario_set(tmp_path / "s.yaml").base
    assert isinstance(scenario.model, ModelSpec)
    assert scenario.model == MODELS["mistral-7b-v0.1"].model_copy(update={"name": "m", "published_params": None,
                                                                          "model_type": "mistral"})
    # The written scenario is self-contained: the inline architecture, no path.
    again = validate_scenario(yaml.safe_load(scenario.to_yaml()))
    assert again.model == scenario.model


@pytest.mark.parametrize(("model", "words"), [
    ({"hf_config": 3}, "model.hf_config: 3 is not allowed"),
    ({"hf_config": "x.json", "layers": 2}, "model.layers: unknown key beside hf_config; allowed: hf_config, name"),
    ({"hf_config": "/nonexistent/config.json"}, "model.hf_config: '/nonexistent/config.json' not found"),
])
def test_scenario_bad_hf_config(model, words):
    with pytest.raises(ConfigError) as err:
        validate_scenario({**BASE, "model": model})
    assert words in _one_line(err)


def test_draft_model_from_hf_config():
    raw = {**BASE, "model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "tensor_parallel": 4},
           "speculation": {"draft_model": {"hf_config": str(FIXTURES / "llama-3.1-8b.json"), "name": "draft"}}}
    scenario = validate_scenario(raw)
    assert scenario.speculation.draft_spec() == MODELS["llama-3.1-8b"].model_copy(
        update={"name": "draft", "published_params": None, "model_type": "llama"})


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim.views.cli", *args], check=False, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_catalog_import_prints_a_pasteable_model_and_its_numbers():
    result = _cli("catalog", "import", str(FIXTURES / "deepseek-v2-lite.json"), "--name", "dsv2")
    assert result.returncode == 0, result.stderr
    catalog = MODELS["deepseek-v2-lite"]
    assert f"parameters: {param_count(catalog):,}" in result.stdout
    assert f"active per token: {active_param_count(catalog):,}" in result.stdout
    assert f"KV cache: {kv_bytes_per_token(catalog):,} bytes per token" in result.stdout
    pasted = validate_scenario({**BASE, **yaml.safe_load(result.stdout)}, resolve=False)
    assert pasted.model == catalog.model_copy(update={"name": "dsv2", "published_params": None,
                                                      "model_type": "deepseek_v2"})


def test_catalog_import_bad_file_is_one_line(tmp_path):
    path = _write(tmp_path, {**fixture("llama-2-7b"), "model_type": "rwkv", "architectures": ["RwkvForCausalLM"]})
    result = _cli("catalog", "import", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert str(path) in result.stderr and "'rwkv' is not a handled architecture" in result.stderr
    missing = _cli("catalog", "import")
    assert missing.returncode == 2 and "missing the config.json path" in missing.stderr


def test_what_the_reader_leaves_out_is_said_beside_each_run(tmp_path):
    from helpers import servesim
    from sim.model.hf_config import IGNORED
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
           "intermediate_size": 3072, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 8,
           "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960}
    spec = spec_from_config(cfg, "small-qwen3")
    assert spec.not_modelled == IGNORED["qwen3"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**BASE, "model": {"hf_config": "config.json"}}))
    out = servesim("run", tmp_path / "s.yaml", "-q", "--out", tmp_path / "out", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    printed = " ".join(out.stdout.split())  # (the narrow test console wraps long lines)
    assert f"not modelled: {IGNORED['qwen3']}" in printed
    # the written scenario keeps it, so that a run of the outputs says it too; a catalog model says nothing
    assert yaml.safe_load((tmp_path / "out" / "scenario.yaml").read_text())["model"]["not_modelled"] == IGNORED["qwen3"]
    assert all(m.not_modelled is None for m in MODELS.values())


def test_a_pasted_import_keeps_the_architecture_engine_presets_key_on(tmp_path):
    # `catalog import` prints the model to paste; its model_type stays, so SGLang's preset still knows gpt-oss
    from sim.views.hf_import import import_text
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "head_dim": 64, "hidden_size": 2880,
           "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention"] * 12,
           "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
           "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32, "sliding_window": 128,
           "vocab_size": 201088}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    pasted = yaml.safe_load(import_text(str(tmp_path / "config.json"), name="oss"))["model"]
    assert pasted["model_type"] == "gpt_oss" and pasted["sliding_window_layers"] == 12
    scenario = validate_scenario({**BASE, "model": pasted, "engine": {"name": "sglang", "version": "0.5.4.post2"}})
    assert scenario.kv_cache.window_memory == "every_token"  # SGLang 0.5.4 keeps every token of gpt-oss's
