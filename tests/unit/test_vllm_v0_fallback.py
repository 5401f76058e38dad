"""vLLM 0.8.0-0.10.x fall back to their V0 engine for an fp8 KV cache V1 cannot hold (vllm/engine/arg_utils.py
_is_v1_supported_oracle), and V0 then runs with its own defaults (sim/config/engines/vllm.py `_vllm_v0_fallback`)."""

from pathlib import Path

import pytest

from sim.config.files import validate_scenario

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
            "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 10}}


def vllm(version: str, gpu: str, kv: str = "fp8", model="llama-3.1-8b", tp: int = 1, **flags):
    return validate_scenario({"model": model, "quantization": {"kv_cache": kv}, "workload": WORKLOAD,
                              "hardware": {"gpu": gpu, "tensor_parallel": tp}, "cost_model": {"kind": "roofline"},
                              "engine": {"name": "vllm", "version": version, **flags}})


def runs_v0(sc) -> bool:
    noted = any("V1 falls back to the V0 engine" in n for n in sc.engine.notes)
    assert sc.engine.v0_fallback is noted  # the fallback the preset noted is the one the scenario records
    return noted


@pytest.mark.parametrize("version, gpu, v0", [
    ("0.8.0", "h100-sxm", True),  # 0.8.0-0.8.1: any --kv-cache-dtype
    ("0.8.5", "h100-sxm", False),  # from 0.8.2: FlashAttention 3 holds fp8 on sm_9x
    ("0.9.2", "a100-80gb", True), ("0.9.2", "l40s", True),
    ("0.9.2", "b200", True),  # FlashAttention's check alone before 0.10.0
    ("0.10.0", "b200", False),  # "All Blackwell backends support fp8": sm_100 exactly
    ("0.10.2", "b300", True),  # sm_103 is not sm_100
    ("0.11.0", "a100-80gb", False),  # no V0 engine
])
def test_an_fp8_kv_cache_v1_cannot_hold_runs_v0(version, gpu, v0):
    assert runs_v0(vllm(version, gpu)) is v0
    assert not runs_v0(vllm(version, gpu, kv="bf16"))


def test_v0_runs_with_its_own_defaults_not_v1s():
    v1, v0 = vllm("0.9.2", "h100-sxm"), vllm("0.9.2", "a100-80gb", max_model_len=8192)
    assert (v1.scheduler.mixed_batches, v1.kv_cache.enable_prefix_caching) == (True, True)
    # V0 at a context of 8,192: no chunked prefill, prefill-only steps of up to max(max_model_len, 2048) tokens,
    # 256 sequences, no prefix caching
    assert (v0.scheduler.chunked_prefill, v0.scheduler.mixed_batches) == (False, False)
    assert (v0.scheduler.max_num_batched_tokens, v0.scheduler.max_num_seqs) == (8192, 256)
    assert not v0.kv_cache.enable_prefix_caching
    long = vllm("0.9.2", "a100-80gb")  # Llama 3.1's 131,072-token context: V0 chunks, 2,048 tokens a step
    assert (long.scheduler.chunked_prefill, long.scheduler.max_num_batched_tokens) == (True, 2048)
    assert any("(V0): defaults read in the 0.8.0-0.10.2 sdists" in n for n in v0.engine.notes)


def test_an_mla_model_keeps_v1_from_0_10_2_and_v0_does_not_chunk_it():
    deepseek = {"hf_config": str(ROOT / "sim" / "model" / "configs" / "deepseek-r1.json")}
    assert not runs_v0(vllm("0.10.2", "b300", model=deepseek, tp=8))  # FlashMLA holds fp8
    v0 = vllm("0.10.1", "b300", model=deepseek, tp=8)
    assert runs_v0(v0) and v0.scheduler.chunked_prefill is False  # "not supported for ... MLA in V0"


def test_a_v0_fallback_for_a_model_with_attention_sinks_is_refused():
    """V0's attention implementations take no sinks (vllm/attention/backends/flash_attn.py, xformers.py, 0.10.1 and
    0.10.2), so gpt-oss with an fp8 KV cache where V1 falls back does not load: one line, naming the field."""
    from sim.errors import ConfigError
    gpt_oss = {"hf_config": str(ROOT / "sim" / "model" / "configs" / "gpt-oss-20b.json")}
    with pytest.raises(ConfigError) as refused:
        vllm("0.10.2", "a100-80gb", model=gpt_oss)
    assert str(refused.value).startswith("quantization.kv_cache: 'fp8' with gpt_oss on a100-80gb")
    assert "\n" not in str(refused.value)
    assert not runs_v0(vllm("0.10.2", "h100-sxm", model=gpt_oss))  # V1 holds it on sm_9x: no fallback to refuse
    assert not runs_v0(vllm("0.10.2", "a100-80gb", model=gpt_oss, kv="bf16"))


@pytest.mark.parametrize("version", ["0.6.0", "0.9.2", "0.10.0"])
def test_a_vllm_release_without_gpt_oss_refuses_it(version):
    """GptOssForCausalLM joined vLLM's model registry in 0.10.1 (absent from 0.10.0's sdist)."""
    from sim.errors import ConfigError
    gpt_oss = {"hf_config": str(ROOT / "sim" / "model" / "configs" / "gpt-oss-20b.json")}
    want = rf"^engine.version: vLLM {version} has no gpt_oss model .*0\.10\.1 or later$"
    with pytest.raises(ConfigError, match=want):
        vllm(version, "h100-sxm", model=gpt_oss, kv="bf16")
    assert vllm("0.10.1", "h100-sxm", model=gpt_oss, kv="bf16").engine.name == "vllm"


@pytest.mark.parametrize("version", ["0.8.4", "0.9.2", "0.10.2"])
def test_a_v0_fallback_does_the_v0_api_servers_work_not_its_releases_v1_rows(version):
    # the release's own V1 row (0.8.4, 0.9.2 and 0.10.2 were each measured) is not the server a fallback runs: it
    # takes V0's, the nearest measured (0.6.0's), and a band draws it as lent
    from sim.config.engines import api_server_work, engine_term_spread
    from sim.config.engines.base import parse_version
    v0_row, v1_row = api_server_work((0, 6, 0)), api_server_work(parse_version(version))
    v0, v1 = vllm(version, "a100-80gb"), vllm(version, "a100-80gb", kv="bf16")
    assert runs_v0(v0) and not runs_v0(v1)
    for sc, row in ((v0, v0_row), (v1, v1_row)):
        assert (sc.frontend.per_request_s, sc.frontend.per_prompt_token_s, sc.frontend.per_output_chunk_s) == (
            row.per_request_s, row.per_prompt_token_s, row.per_output_chunk_s)
    assert any("(that of the V0 engine it falls back to, not measured in this release: vLLM 0.6.0's" in n
               for n in v0.engine.notes)
    spread = {t.key: t for t in engine_term_spread(v0)}
    assert f"{version}, which takes 0.6.0's" in spread["frontend.per_request_s"].source
    assert not any("which takes" in t.source for t in engine_term_spread(v1))


def test_a_band_draws_v0s_server_terms_where_the_user_set_the_per_request_work():
    # the fallback is recorded on the engine, so the spread prices V0's server even where the user's own per-request
    # work (here beside V0's other two terms, as the preset gives them) leaves nothing to recognise the server by
    # (before: the release's V1 row, so that V0's per-prompt-token work got no spread at all)
    from sim.config.engines import api_server_work, engine_term_spread
    v0_row = api_server_work((0, 6, 0))
    sc = validate_scenario({"model": "llama-3.1-8b", "quantization": {"kv_cache": "fp8"}, "workload": WORKLOAD,
                            "hardware": {"gpu": "a100-80gb"}, "cost_model": {"kind": "roofline"},
                            "frontend": {"per_request_s": 0.0123, "per_prompt_token_s": v0_row.per_prompt_token_s,
                                         "per_output_chunk_s": v0_row.per_output_chunk_s},
                            "engine": {"name": "vllm", "version": "0.9.2"}})
    assert runs_v0(sc) and sc.frontend.per_request_s == 0.0123
    spread = {t.key: t for t in engine_term_spread(sc)}
    assert "frontend.per_request_s" not in spread  # the user's own
    assert "0.9.2, which takes 0.6.0's" in spread["frontend.per_prompt_token_s"].source
