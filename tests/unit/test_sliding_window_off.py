"""A model's sliding window turned off (`attention.sliding_window: false`; vLLM's --disable-sliding-window, which sets
it): the model as served attends to, and keeps, every token in every layer, and vLLM caps its derived context at the
window (vllm/config.py, vllm/config/model.py from 0.11: `_get_and_verify_max_len`, read in the sdists 0.6.0-0.33.0)."""

from pathlib import Path

import pytest

from sim.config.deployment import resolve
from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.run import simulate

CONFIGS = Path(__file__).parents[2] / "sim" / "model" / "configs"
GPT_OSS_20B = {"hf_config": str(CONFIGS / "gpt-oss-20b.json")}  # sliding window 128, YaRN x 32 over 4,096
QWEN3_8B = {"hf_config": str(CONFIGS / "qwen3-8b.json")}  # no window, 40,960 positions
BASE = {"model": "mistral-7b-v0.1",  # every layer slides over 4,096 tokens; 32,768 positions
        "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}


def served(**sections):
    """(the validated scenario, its deployment)."""
    sc = validate_scenario({**BASE, **sections})
    return sc, resolve(sc)


def test_vllm_disable_sliding_window_caps_the_context_at_the_window_and_serves_every_token():
    sc, dep = served(engine={"name": "vllm", "version": "0.11.0",
                             "command": "vllm serve mistralai/Mistral-7B-v0.1 --disable-sliding-window"})
    assert sc.attention.sliding_window is False
    assert dep.model.sliding_window is None and dep.model.num_window_layers == 0
    assert sc.scheduler.max_model_len == dep.max_model_len == 4096  # min(32,768 positions, the 4,096 window)
    assert any("max_model_len 4,096, the context it derives from mistral-7b-v0.1's config (its sliding window 4,096, "
               "turned off, caps max_position_embeddings 32,768)" in note for note in sc.engine.notes)
    # V1 caches prefixes by default; the preset leaves it off only for a model whose every layer slides
    assert sc.kv_cache.enable_prefix_caching
    kept, _ = served(engine={"name": "vllm", "version": "0.11.0"})
    assert not kept.kv_cache.enable_prefix_caching and kept.scheduler.max_model_len in (None, 32768)
    assert resolve(kept).model.sliding_window == 4096


def test_a_longer_max_model_len_than_the_window_is_refused_as_vllm_refuses_it():
    with pytest.raises(ConfigError) as err:
        served(engine={"name": "vllm", "version": "0.19.0", "disable_sliding_window": True, "max_model_len": 8192})
    assert str(err.value) == (
        "engine.max_model_len: 8,192 is above the 4,096 tokens vLLM 0.19.0 derives from mistral-7b-v0.1's config "
        "(its sliding window 4,096, turned off, caps max_position_embeddings 32,768), which it refuses; allowed: at "
        "most 4,096, or RoPE scaling that extends it (the engine's config overrides)")


@pytest.mark.parametrize("version, derived", [("0.12.0", 131_072), ("0.29.0", 131_072), ("0.30.0", 128)])
def test_the_window_cap_comes_before_the_rope_factor(version, derived):
    # 0.12-0.29: YaRN's original_max_position_embeddings (4,096) x 32 replaces the capped 128; 0.30 on leaves YaRN
    sc = validate_scenario({**BASE, "model": GPT_OSS_20B,
                            "engine": {"name": "vllm", "version": version, "disable_sliding_window": True}})
    assert resolve(sc).max_model_len == derived
    assert resolve(sc).model.sliding_window is None


@pytest.mark.parametrize("model, rope", [(GPT_OSS_20B, "yarn"), (QWEN3_8B, "linear")])
def test_vllm_before_0_12_refuses_the_window_off_beside_scaled_rope(model, rope):
    engine = {"name": "vllm", "version": "0.11.0", "disable_sliding_window": True}
    if rope == "linear":  # a model without a window is refused too: the check reads the RoPE type alone
        engine["hf_overrides"] = {"rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    name = "gpt-oss-20b" if model is GPT_OSS_20B else "qwen3-8b"
    with pytest.raises(ConfigError) as err:
        validate_scenario({**BASE, "model": model, "engine": engine})
    assert str(err.value) == (
        f"engine.disable_sliding_window: true is refused by vLLM 0.11.0 beside {name}'s RoPE scaling ({rope}): "
        "\"Disabling sliding window is not supported for models with rope_scaling\" (_get_and_verify_max_len); "
        "allowed: keep the window, or vLLM 0.12.0 or later")
    llama3 = {"name": "vllm", "version": "0.6.0", "disable_sliding_window": True}  # su, longrope, llama3 pass
    sc = validate_scenario({**BASE, "model": "llama-3.1-8b", "engine": llama3})
    assert resolve(sc).max_model_len == 131_072


def test_the_flag_and_a_scenario_that_keeps_the_window_contradict_each_other():
    with pytest.raises(ConfigError) as err:
        served(engine={"name": "vllm", "version": "0.11.0", "disable_sliding_window": True},
               attention={"sliding_window": True})
    assert str(err.value) == ("engine.disable_sliding_window: True (sets attention.sliding_window False) contradicts "
                              "attention.sliding_window True; allowed: give one of them, or the same value")


def test_without_the_window_a_long_decode_reads_every_token_and_keeps_them():
    """Known direction, no engine: one request of 20,000 prompt tokens decoding 200. With the window each layer reads
    its last 4,096 tokens a step and the pool frees the blocks behind them; without it every layer reads all 20,000
    and keeps them."""
    one = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 0.1},
                        "lengths": {"kind": "fixed", "input_tokens": 20_000, "output_tokens": 200}},
           "run": {"num_requests": 1, "seed": 0}}
    windowed = simulate(validate_scenario({**BASE, **one})).summary
    full = simulate(validate_scenario({**BASE, **one, "attention": {"sliding_window": False}})).summary
    assert full["tpot_s_p50"] > windowed["tpot_s_p50"]
    assert windowed["kv_window_freed_blocks"] > 0
    assert full.get("kv_window_freed_blocks") is None


# Gemma 2 9B's shape (config.json: 42 layers, every other one over a 4,096-token window, 8,192 positions)
GEMMA2_LIKE = {"name": "gemma2-like", "model_type": "gemma2", "num_layers": 42, "hidden_size": 3584,
               "num_attention_heads": 16, "num_kv_heads": 8, "head_dim": 256, "ffn_size": 14336, "vocab_size": 256000,
               "max_context": 8192, "sliding_window": 4096, "sliding_window_layers": 21, "tie_word_embeddings": True}


@pytest.mark.parametrize("version, off", [("0.6.0", True), ("0.6.3", True), ("0.6.3.post1", False), ("0.11.0", False)])
def test_vllm_before_0_6_3_post1_turns_gemma_2s_window_off_itself(version, off):
    sc = validate_scenario({**BASE, "model": GEMMA2_LIKE, "engine": {"name": "vllm", "version": version}})
    dep = resolve(sc)
    assert (dep.model.sliding_window is None) == off
    assert dep.max_model_len == (4096 if off else 8192)
    assert any("sliding window turned off" in note for note in sc.engine.notes) == off
    if off:  # the scenario's own word wins over the engine's rule (a what-if)
        kept = validate_scenario({**BASE, "model": GEMMA2_LIKE, "attention": {"sliding_window": True},
                                  "engine": {"name": "vllm", "version": version}})
        assert resolve(kept).model.sliding_window == 4096 and resolve(kept).max_model_len == 8192
