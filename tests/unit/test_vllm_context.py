"""vLLM's longest context as its releases read and check it (sim/config/engines/vllm_context.py): human-readable
numbers (`--max-model-len 32k`), `--max-model-len auto` (`scheduler.fit_max_model_len`), and the start-up check that
the KV cache holds one request of max_model_len (sim/config/deployment.py `_context_in_kv`)."""

import re

import pytest
from helpers import run_refused

from sim.config.deployment import resolve
from sim.config.engines.vllm_context import readable_number
from sim.config.files import validate_scenario
from sim.errors import ConfigError

BASE = {"model": "llama-3.1-8b",  # a command's model, m, names none the catalog has
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}
# Llama-3.1-70B in fp8 on one H100: its weights leave KV for a few thousand tokens, far from its 131,072-token context
TIGHT = {**BASE, "model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm"}, "quantization": {"weights": "fp8"}}


def scenario(engine: dict, base: dict = BASE, **sections):
    return validate_scenario({**base, **sections, "engine": engine})


@pytest.mark.parametrize("word, version, number", [
    ("32k", "0.11.0", 32_000), ("32K", "0.11.0", 32_768), ("25.6k", "0.11.0", 25_600), ("0.1m", "0.8.4", 100_000),
    ("4096", "0.8.3", 4096), ("16K", "0.34.0", 16_384)])
def test_a_human_readable_max_model_len_is_the_number_vllm_reads(word, version, number):
    sc = scenario({"name": "vllm", "version": version, "command": f"vllm serve m --max-model-len {word}"})
    assert sc.scheduler.max_model_len == number and sc.scheduler.fit_max_model_len is False
    assert scenario({"name": "vllm", "version": version, "max_model_len": word}).scheduler.max_model_len == number


@pytest.mark.parametrize("flag, word, version, message", [
    ("max_model_len", "32k", "0.8.3", "engine.max_model_len: '32k' is not allowed by vLLM 0.8.3; allowed: a whole "
     "number (vLLM reads suffixes here from 0.8.4)"),
    ("max_num_batched_tokens", "16k", "0.9.0", "engine.max_num_batched_tokens: '16k' is not allowed by vLLM 0.9.0; "
     "allowed: a whole number (vLLM reads suffixes here from 0.9.1)"),
    ("max_model_len", "1.5K", "0.11.0", "engine.max_model_len: '1.5K' is not allowed by vLLM 0.11.0; allowed: a "
     "whole number, or one with a suffix (32k, 1.5m, 64K)"),
    ("max_model_len", "auto", "0.13.0", "engine.max_model_len: 'auto' is not allowed by vLLM 0.13.0; allowed: a "
     "whole number, or one with a suffix (32k, 1.5m, 64K) (auto from vLLM 0.14.0)"),
    ("max_model_len", "lots", "0.14.0", "engine.max_model_len: 'lots' is not allowed by vLLM 0.14.0; allowed: a "
     "whole number, or one with a suffix (32k, 1.5m, 64K), or auto")])
def test_a_word_the_release_does_not_read_is_refused_in_one_line(flag, word, version, message):
    with pytest.raises(ConfigError, match="^" + re.escape(message) + "$"):
        scenario({"name": "vllm", "version": version, flag: word})


def test_tera_suffixes_come_in_0_13_0():
    read = readable_number("max_num_batched_tokens")
    assert read("2t", (0, 13, 0), "0.13.0") == 2 * 10**12 and read("1T", (0, 14, 0), "0.14.0") == 2**40
    with pytest.raises(ConfigError, match=r"'2t' is not allowed by vLLM 0\.12\.0; .*\(t and T from vLLM 0\.13\.0\)"):
        read("2t", (0, 12, 0), "0.12.0")


def test_the_command_reads_a_readable_budget_as_the_flag_does():
    sc = scenario({"name": "vllm", "version": "0.11.0", "command": "vllm serve m --max-num-batched-tokens=16k"})
    assert sc.scheduler.max_num_batched_tokens == 16_000
    with pytest.raises(ConfigError, match=r"^engine\.command '--max-num-batched-tokens 16k': '16k' is not allowed by "
                                          r"vLLM 0\.9\.0; "):
        scenario({"name": "vllm", "version": "0.9.0", "command": "vllm serve m --max-num-batched-tokens 16k"})


def test_vllm_refuses_to_start_where_one_request_of_max_model_len_does_not_fit_the_kv_cache():
    fitted = resolve(scenario({"name": "vllm", "version": "0.11.0"}, TIGHT, scheduler={"fit_max_model_len": True}))
    blocks = fitted.kv_capacity_tokens // 16  # vLLM 0.11.0's 16-token blocks
    longest = blocks * 16  # a full-attention model's request of n tokens takes ceil(n / 16) blocks
    assert 0 < longest < 131_072 and fitted.max_model_len == longest
    with pytest.raises(ConfigError) as refused:
        scenario({"name": "vllm", "version": "0.11.0"}, TIGHT)
    assert str(refused.value) == (
        "scheduler.max_model_len: 131,072 (llama-3.1-70b's max_context, the default) needs 131,072 KV token slots "
        f"for one request, more than the KV cache's {longest:,}, which vLLM 0.11.0 does not start with "
        "(vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory; V0: vllm/worker/worker.py "
        f"raise_if_cache_size_invalid); allowed: scheduler.max_model_len <= {longest:,} (the engine's max_model_len "
        "flag), scheduler.fit_max_model_len true, or more memory for the KV cache")
    assert resolve(scenario({"name": "vllm", "version": "0.11.0", "max_model_len": longest}, TIGHT)).max_model_len \
        == longest
    with pytest.raises(ConfigError, match=f"^engine\\.max_model_len \\(sets scheduler\\.max_model_len\\): "
                                          f"{longest + 1:,} needs {longest + 16:,} KV "):
        scenario({"name": "vllm", "version": "0.11.0", "max_model_len": longest + 1}, TIGHT)  # a block more


def test_the_check_counts_a_request_in_whole_blocks_and_a_sliding_window_as_its_window():
    pinned = {"capacity_tokens": 8192}
    with pytest.raises(ConfigError, match=r"^engine\.max_model_len \(sets scheduler\.max_model_len\): 8,193 needs "
                                          r"8,208 KV token slots for one "
                                          r"request, more than the KV cache's 8,192, which vLLM 0\.6\.0 "):
        scenario({"name": "vllm", "version": "0.6.0", "max_model_len": 8193}, kv_cache=pinned)
    assert resolve(scenario({"name": "vllm", "version": "0.6.0", "max_model_len": 8192},
                            kv_cache=pinned)).max_model_len == 8192
    # Mistral-7B-v0.1 slides a 4,096-token window on every layer: a request of 32,768 tokens holds its window only
    windowed = resolve(scenario({"name": "vllm", "version": "0.6.0"}, {**BASE, "model": "mistral-7b-v0.1"},
                                kv_cache=pinned))
    assert windowed.max_model_len == 32_768


def test_max_model_len_auto_fits_the_kv_cache_as_vllm_0_14_does():
    for given in ("auto", -1, "-1"):
        sc = scenario({"name": "vllm", "version": "0.14.0", "max_model_len": given}, TIGHT)
        assert sc.scheduler.fit_max_model_len is True and sc.scheduler.max_model_len is None
        assert any("--max-model-len auto" in note for note in sc.engine.notes)
    from_command = scenario({"name": "vllm", "version": "0.14.0", "command": "vllm serve m --max-model-len auto"},
                            TIGHT)
    fitted = resolve(from_command)
    assert fitted.max_model_len == fitted.kv_capacity_tokens // 16 * 16 < 131_072
    roomy = resolve(scenario({"name": "vllm", "version": "0.14.0", "max_model_len": "auto"}))  # Llama-3.1-8B: it fits
    assert roomy.max_model_len == 131_072
    with pytest.raises(ConfigError, match=r"^engine\.max_model_len: -1 is not allowed"):
        scenario({"name": "vllm", "version": "0.13.0", "max_model_len": -1})


def test_engines_that_start_anyway_and_no_engine_keep_max_model_len():
    pinned = {**BASE, "kv_cache": {"capacity_tokens": 8192}}  # Llama-3.1-8B, 131,072 tokens of context
    assert resolve(validate_scenario(pinned)).max_model_len == 131_072
    assert resolve(scenario({"name": "sglang", "version": "0.5.5"}, pinned)).max_model_len == 131_072
    with pytest.raises(ConfigError, match=r"^scheduler\.max_model_len: 131,072 \(llama-3\.1-8b's max_context, the "
                                          r"default\) needs 131,072 KV token slots for one request, more than the KV "
                                          r"cache's 8,192, which vLLM 0\.19\.0 does not start with"):
        scenario({"name": "vllm", "version": "0.19.0"}, pinned)


def test_the_cli_refuses_a_vllm_scenario_that_would_not_start_in_one_line(tmp_path):
    line = run_refused(tmp_path, {**TIGHT, "engine": {"name": "vllm", "version": "0.11.0"}})
    assert line.startswith("error: scheduler.max_model_len: 131,072 (llama-3.1-70b's max_context, the default) needs")
