"""A rejected request's reason is in the scheduler's words (`max_num_batched_tokens`); where the scenario names an
engine, the first reason shown (`Result.first_reject_reason`: the CLI's note, the plan's candidates) also names
the engine's own flags for those keys (sim/config/engines/presets.py `engine_spelling`), the one the scenario gave
where it gave one."""

import pytest

from sim.config.engines.presets import PRESETS, engine_spelling
from sim.config.files import validate_scenario
from sim.run import deployment_of, simulate

BUDGET = "needs up to 9009 tokens in one prefill but max_num_batched_tokens is 8192 (enable chunked_prefill)"


def scenario(engine: dict | None, input_tokens: int = 500, **sections):
    raw = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                        "lengths": {"kind": "fixed", "input_tokens": input_tokens, "output_tokens": 10}},
           "run": {"num_requests": 4}, **sections}
    if engine is not None:
        raw["engine"] = engine
    return validate_scenario(raw)


@pytest.mark.parametrize("engine, text, expected", [
    ({"name": "trtllm", "version": "1.2.0rc1"}, BUDGET,
     "under TensorRT-LLM 1.2.0rc1, max_num_batched_tokens is --max_num_tokens (engine.max_num_tokens) and "
     "chunked_prefill is --enable_chunked_prefill (engine.enable_chunked_prefill)"),
    ({"name": "trtllm", "version": "1.2.0rc1", "max_num_tokens": 8192}, BUDGET,
     "under TensorRT-LLM 1.2.0rc1, max_num_batched_tokens is set by engine.max_num_tokens and "
     "chunked_prefill is --enable_chunked_prefill (engine.enable_chunked_prefill)"),
    ({"name": "sglang", "version": "0.5.3"}, BUDGET,
     "under SGLang 0.5.3, max_num_batched_tokens is --chunked-prefill-size (engine.chunked_prefill_size) or "
     "--max-prefill-tokens (engine.max_prefill_tokens) and chunked_prefill is --chunked-prefill-size "
     "(engine.chunked_prefill_size)"),
    ({"name": "vllm", "version": "0.11.0"}, "needs 9010 tokens > max_model_len 8192",
     "under vLLM 0.11.0, max_model_len is --max-model-len (engine.max_model_len)"),
    ({"name": "vllm", "version": "0.11.0"}, "needs 9010 KV slots but the whole cache holds 4096",
     "under vLLM 0.11.0, the cache is sized by --gpu-memory-utilization (engine.gpu_memory_utilization) or "
     "--num-gpu-blocks-override (engine.num_gpu_blocks_override) or --kv-cache-memory-bytes "
     "(engine.kv_cache_memory_bytes)"),
    ({"name": "vllm", "version": "0.8.4"}, "needs 9010 KV slots but the whole cache holds 4096",  # no memory bytes
     "under vLLM 0.8.4, the cache is sized by --gpu-memory-utilization (engine.gpu_memory_utilization) or "
     "--num-gpu-blocks-override (engine.num_gpu_blocks_override)"),
    ({"name": "sglang", "version": "0.5.3"}, "needs 301 KV blocks reserved for its whole sequence but the cache has "
     "200", "under SGLang 0.5.3, the cache is sized by --mem-fraction-static (engine.mem_fraction_static)"),
    (None, BUDGET, ""),
])
def test_the_engines_flags_for_the_keys_a_reason_names_known_answers(engine, text, expected):
    assert engine_spelling(text, scenario(engine)) == expected


@pytest.mark.parametrize("engine, flags, key, value", [
    ({"name": "trtllm", "version": "1.2.0rc1"}, {"enable_chunked_prefill": True}, "chunked_prefill", True),
    ({"name": "sglang", "version": "0.5.3"}, {"chunked_prefill_size": -1}, "chunked_prefill", False),
    ({"name": "sglang", "version": "0.5.3"}, {"chunked_prefill_size": 1024}, "max_num_batched_tokens", 1024),
    ({"name": "sglang", "version": "0.5.3"}, {"chunked_prefill_size": -1, "max_prefill_tokens": 4096},
     "max_num_batched_tokens", 4096),
    ({"name": "lmdeploy", "version": "0.12.0"}, {"session_len": 2048}, "max_model_len", 2048),
    # the KV cache's token slots, as the deployment resolves them (`Deployment.kv_capacity_tokens`)
    ({"name": "lmdeploy", "version": "0.12.0"}, {"cache_max_entry_count": 0.5}, "kv_capacity_tokens", None),
    ({"name": "trtllm", "version": "1.2.0rc1"}, {"kv_cache_free_gpu_memory_fraction": 0.5}, "kv_capacity_tokens",
     None),
    ({"name": "sglang", "version": "0.5.3"}, {"mem_fraction_static": 0.5}, "kv_capacity_tokens", None),
    ({"name": "vllm", "version": "0.11.0", "max_model_len": 1024}, {"num_gpu_blocks_override": 100},
     "kv_capacity_tokens", 100 * 16),
    ({"name": "vllm", "version": "0.11.0", "max_model_len": 1024}, {"kv_cache_memory_bytes": 2**30},
     "kv_capacity_tokens", 2**30 // (32 * 2 * 8 * 128 * 2)),  # 32 layers' k and v, 8 heads of 128, 2 bytes
])
def test_a_flag_said_to_decide_a_key_does(engine, flags, key, value):
    """`Flag.decides` describes the preset's derivation; here the derivation is seen to follow it."""
    preset_flags = PRESETS[engine["name"]].flags
    if key == "kv_capacity_tokens":
        dotted, read = "kv_cache.capacity_tokens", lambda s: deployment_of(s).kv_capacity_tokens
    else:
        dotted, read = f"scheduler.{key}", lambda s: getattr(s.scheduler, key)
    assert any(dotted in preset_flags[flag].decides for flag in flags)
    default, given = read(scenario(engine)), read(scenario({**engine, **flags}))
    assert given != default  # the flag moves the key
    if value is not None:  # where the value is known by hand
        assert given == value


def test_every_decided_key_is_a_scenario_key_no_target_names():
    for preset in PRESETS.values():
        for key, flag in preset.flags.items():
            for dotted in flag.decides:
                assert dotted.split(".")[0] in ("scheduler", "kv_cache") and dotted != flag.target, (preset.name, key)


@pytest.mark.parametrize("compiled", [False, True])
def test_the_first_reason_shown_names_the_engines_flags_and_the_records_keep_the_schedulers_words(compiled):
    result = simulate(scenario({"name": "trtllm", "version": "1.2.0rc1"}, input_tokens=9000,
                               run={"num_requests": 4, "compiled_core": compiled}))
    assert result.summary["num_rejected"] == 4
    reason = result.requests.loc[0, "reject_reason"]
    # the prompt alone: TensorRT-LLM reserves the whole output, so nothing is ever recomputed
    assert reason.startswith("needs up to 9000 tokens in one prefill but max_num_batched_tokens is 8192")
    assert "--max_num_tokens" not in reason
    assert result.first_reject_reason() == f"{reason}; under TensorRT-LLM 1.2.0rc1, max_num_batched_tokens is " \
        "--max_num_tokens (engine.max_num_tokens) and chunked_prefill is --enable_chunked_prefill " \
        "(engine.enable_chunked_prefill)"
