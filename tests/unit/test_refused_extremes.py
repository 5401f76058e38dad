"""Values at the edges of what a scenario can say, found by a random search of engine flags and scenario keys
(12-06): each was a traceback, an array too large to allocate, or a run that never started a request and said
nothing. Each is now refused in one line naming the field, the value and what is allowed."""

import pytest

from helpers import BAND_PLAN, run_refused, small_scenario
from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.model.specs import MAX_MODEL_DIM
from sim.run import simulate
from sim.tools.planner import plan_settings

INT64_MAX = (1 << 63) - 1


def _engine(name: str, version: str, model: str = "llama-3.1-8b", gpu: str = "h100-sxm", **flags) -> dict:
    raw = small_scenario({"model": model, "hardware": {"gpu": gpu}, "engine": {"name": name, "version": version,
                                                                                **flags}})
    del raw["scheduler"]  # (its max_model_len would contradict the engine's context flags)
    return raw


def _refusal(raw: dict) -> str:
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    return str(err.value)


@pytest.mark.parametrize("raw, message", [
    # a float flag given inf or nan (the GiB flags took inf to an OverflowError, nan to a message naming no field)
    (_engine("vllm", "0.11.0", cpu_offload_gb=float("inf")),
     "engine.cpu_offload_gb: inf is not allowed; allowed: a finite number"),
    (_engine("vllm", "0.6.0", swap_space=float("nan")), "engine.swap_space: nan is not allowed; allowed: a finite number"),
    (_engine("lmdeploy", "0.1.0a1", gpu="a100-80gb", cache_max_entry_count=float("inf")),
     "engine.cache_max_entry_count: inf is not allowed; allowed: a finite number"),
    (_engine("sglang", "0.5.5.post1", schedule_conservativeness=float("inf")),
     "engine.schedule_conservativeness: inf is not allowed; allowed: a finite number"),
    # a token limit past what the compiled core's int64 holds (an OverflowError there)
    (_engine("vllm", "0.11.0", long_prefill_token_threshold=INT64_MAX + 1),
     f"engine.long_prefill_token_threshold: {INT64_MAX + 1} is not allowed; allowed: <= {INT64_MAX}"),
    (_engine("sglang", "0.4.5.post3", chunked_prefill_size=INT64_MAX + 1),  # (0.4.x has no memory rule to stop it)
     f"engine.chunked_prefill_size: {INT64_MAX + 1} is not allowed; allowed: <= {INT64_MAX}"),
    (small_scenario(scheduler={"prefill_context_tokens": INT64_MAX + 1}),
     f"scheduler.prefill_context_tokens: {INT64_MAX + 1} is not allowed; allowed: <= {INT64_MAX}"),
    (small_scenario(scheduler={"cuda_graph_batch_sizes": [8, INT64_MAX + 1]}),
     f"scheduler.cuda_graph_batch_sizes[1]: {INT64_MAX + 1} is not allowed; allowed: <= 1048576"),
    # SGLang before 0.3.5 takes a --context-length longer than the model's as given; the engine cores keep arrays of
    # max_model_len a replica, so a context beyond any model's (MAX_MODEL_DIM) asked for terabytes
    (_engine("sglang", "0.3.0", model="qwen3-8b", context_length=1 << 40),
     f"engine.context_length: {1 << 40} is not allowed; allowed: <= {MAX_MODEL_DIM}"),
    (small_scenario(scheduler={"max_model_len": MAX_MODEL_DIM + 1}),
     f"scheduler.max_model_len: {MAX_MODEL_DIM + 1} is not allowed; allowed: <= {MAX_MODEL_DIM}"),
    # a KV block given in tokens and a capacity in blocks (LMDeploy's cache_max_entry_count >= 1): a block of 10^12
    # tokens passed the capacity check and hung the run (the decode tracker keeps a set per position in a block)
    (_engine("lmdeploy", "0.1.0a1", gpu="a100-80gb", cache_block_seq_len=10**12, cache_max_entry_count=1.5),
     f"engine.cache_block_seq_len: {10**12} is not allowed; allowed: <= 65536"),
    (small_scenario(kv_cache={"block_size": 65537}), "kv_cache.block_size: 65537 is not allowed; allowed: <= 65536"),
    # a request's sequences start together, so more of them than max_num_seqs never started: 0 finished, exit 0
    (small_scenario(cost_model={"kind": "roofline"}, workload={"samples_per_prompt": 300}),
     "workload.samples_per_prompt: 300 sequences a request are more than scheduler.max_num_seqs (256) lets run at "
     "once, so no request could start; allowed: at most 256, or a larger max_num_seqs"),
    (small_scenario(workload={"beam_width": 5}, scheduler={"max_num_seqs": 4}),
     "workload.beam_width: 5 sequences a request are more than scheduler.max_num_seqs (4) lets run at once, so no "
     "request could start; allowed: at most 4, or a larger max_num_seqs"),
])
def test_an_extreme_value_is_refused_in_one_line(raw, message):
    assert _refusal(raw) == message


def test_the_values_just_inside_those_edges_run():
    """The edges refuse only what could not run: a context of MAX_MODEL_DIM under SGLang 0.3.0 is taken as given,
    and a request of max_num_seqs samples starts and finishes."""
    sglang = validate_scenario(_engine("sglang", "0.3.0", model="qwen3-8b", context_length=MAX_MODEL_DIM))
    assert sglang.scheduler.max_model_len == MAX_MODEL_DIM
    samples = simulate(validate_scenario(small_scenario(workload={"samples_per_prompt": 4},
                                                        scheduler={"max_num_seqs": 4}, run={"num_requests": 5})))
    assert samples.summary["num_finished"] == 5 and samples.summary["num_unfinished"] == 0


def test_the_cli_refuses_a_request_that_could_never_start_and_writes_nothing(tmp_path):
    line = run_refused(tmp_path, small_scenario(workload={"samples_per_prompt": 300}))
    assert line.startswith("error: workload.samples_per_prompt: 300 sequences a request are more than "
                           "scheduler.max_num_seqs (256)")


def test_a_kv_cache_below_one_block_is_refused_saying_what_sizes_it_and_writes_nothing(tmp_path):
    raw = _engine("trtllm", "1.0.0", kv_cache_free_gpu_memory_fraction=1e-5)  # 5 tokens of KV, 32-token blocks
    assert run_refused(tmp_path, raw) == (
        "error: kv_cache.block_size: 32 is larger than the KV capacity of 5 tokens; allowed: at least one block of KV "
        "memory (kv_cache's gpu_memory_utilization, free_memory_fraction or capacity_tokens, or the engine's memory "
        "flag that sets them)")


@pytest.mark.parametrize("engine, flags, budget, message, agrees", [
    (("sglang", "0.5.5.post1"), {"chunked_prefill_size": 4096}, 8192, "engine.chunked_prefill_size: 4096 contradicts "
     "scheduler.max_num_batched_tokens 8192; allowed: give one of them, or the same value", 4096),
    (("sglang", "0.5.5.post1"), {"chunked_prefill_size": -1, "max_prefill_tokens": 8192}, 16384,
     "engine.max_prefill_tokens: 8192 contradicts scheduler.max_num_batched_tokens 16384; allowed: give one of them, "
     "or the same value", 8192),
    # TurboMind's budget is the flag + max_batch_size (384 on an A100 here), rounded to the TP
    (("lmdeploy", "0.12.0"), {"max_prefill_token_num": 4096}, 8192, "engine.max_prefill_token_num: 4096 (sets "
     "scheduler.max_num_batched_tokens 4480) contradicts scheduler.max_num_batched_tokens 8192; allowed: give one of "
     "them, or the same value", 4480),
])
def test_a_budget_flag_and_the_scenarios_own_budget_must_agree(engine, flags, budget, message, agrees):
    """SGLang's and LMDeploy's step budget is the flag that set it (as vLLM's --max-num-batched-tokens and
    TensorRT-LLM's max_num_tokens are): a scenario's own budget beside it must agree, where before the scenario's
    silently won over the flag."""
    raw = _engine(*engine, gpu="a100-80gb", **flags)
    raw["scheduler"] = {"max_num_batched_tokens": budget}
    assert _refusal(raw) == message
    raw["scheduler"] = {"max_num_batched_tokens": agrees}
    assert validate_scenario(raw).scheduler.max_num_batched_tokens == agrees


@pytest.mark.parametrize("value, allowed", [("x", "an integer"), (0, ">= 1"), (1e-300, "an integer"),
                                            ([4096], "an integer")])
def test_an_engines_derivation_leaves_a_malformed_max_model_len_to_the_schemas_words(value, allowed):
    """SGLang's request pool is sized from the raw scenario's max_model_len before validation: a string, a list or
    0 there raised a TypeError or ZeroDivisionError; now validation names it."""
    raw = _engine("sglang", "0.5.5.post1")
    raw["scheduler"] = {"max_model_len": value}
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    assert _refusal(raw) == f"scheduler.max_model_len: {shown} is not allowed; allowed: {allowed}"


def test_a_plans_arrival_window_must_fit_one_run():
    """search.min_window_s sets each run's requests (rate x window): one past a run's limit excluded every candidate,
    and the plan said that none met the SLOs."""
    raw = {**BAND_PLAN, "search": {**BAND_PLAN["search"], "min_window_s": 1e12}}
    with pytest.raises(ConfigError) as err:
        plan_settings(raw)
    assert str(err.value) == ("search.min_window_s: 1e+12 s of arrivals at 40 req/s are 40,000,000,000,000 requests a "
                              "run, more than one holds (10,000,000); allowed: at most 250000 s at this rate")
    raw["search"]["min_window_s"] = 250_000
    assert plan_settings(raw).min_window_s == 250_000


def test_a_max_model_len_the_schema_reads_as_a_whole_number_is_read_alike_by_the_derivation():
    """4096.0 and "4096" are 4096 to the schema's field (pydantic's lax int), so to SGLang's request pool too."""
    derived = []
    for value in (4096, 4096.0, "4096"):
        raw = _engine("sglang", "0.5.5.post1")
        raw["scheduler"] = {"max_model_len": value}
        scenario = validate_scenario(raw)
        derived.append((scenario.scheduler.max_model_len, scenario.scheduler.max_num_seqs))
    assert derived[0][0] == 4096 and derived == [derived[0]] * 3


@pytest.mark.parametrize("factor, tokens", [(1e6, "4,096,000,000"), (1e-300, "0"), (1e300, "4.1e+303")])
def test_a_rope_factor_that_gives_no_models_context_is_refused_naming_the_config(tmp_path, factor, tokens):
    # vLLM scales YaRN's original context by the factor; the derived length reached the schema as a
    # scheduler.max_model_len the user never wrote (or a 300-digit one)
    import json
    from pathlib import Path

    import sim.model
    config = json.loads((Path(sim.model.__file__).parent / "configs" / "gpt-oss-20b.json").read_text())
    config["rope_scaling"]["factor"] = factor
    (tmp_path / "my-model").mkdir()
    (tmp_path / "my-model" / "config.json").write_text(json.dumps(config))  # the folder names the model
    raw = _engine("vllm", "0.11.0", model={"hf_config": str(tmp_path / "my-model" / "config.json")})
    assert _refusal(raw) == (f"model: my-model's config (YaRN's original_max_position_embeddings 4,096 x its RoPE factor "
                             f"{factor:g}) gives vLLM 0.11.0 a context of {tokens} tokens; allowed: 1 to 16,777,216 "
                             "(MAX_MODEL_DIM)")


@pytest.mark.parametrize("raw, message", [
    # the deployment's checks name the scenario key; an engine flag set it, so the message names the flag first
    (_engine("trtllm", "0.14.0", max_seq_len=10**6),
     "engine.max_seq_len (sets scheduler.max_model_len): 1000000 exceeds llama-3.1-8b's max_context 131072"),
    (_engine("trtllm", "1.0.0", command="trtllm-serve m --max_seq_len 1000000"),
     "engine.command '--max_seq_len 1000000' (sets scheduler.max_model_len): 1000000 exceeds llama-3.1-8b's "
     "max_context 131072"),
    (_engine("trtllm", "1.0.0", extra_llm_api_options={"max_seq_len": 10**6}),  # a part of an expanding flag
     "engine.extra_llm_api_options.max_seq_len (sets scheduler.max_model_len): 1000000 exceeds llama-3.1-8b's "
     "max_context 131072"),
    (_engine("trtllm", "1.0.0", max_num_tokens=16, max_batch_size=64),
     "engine.max_num_tokens (sets scheduler.max_num_batched_tokens): 16 must be >= max_num_seqs (64) so every "
     "running decode fits a step"),
    (_engine("vllm", "0.11.0", tensor_parallel_size=3),
     "engine.tensor_parallel_size (sets hardware.tensor_parallel): 3 cannot split llama-3.1-8b (32 attention heads, "
     "8 KV heads); allowed: 1, 2, 4, 8, 16, 32"),
    # the scenario's own key, beside an engine that did not set it: named as it is
    (small_scenario({"hardware": {"tensor_parallel": 3}, "engine": {"name": "vllm", "version": "0.11.0"}}),
     "hardware.tensor_parallel: 3 cannot split llama-3.1-8b (32 attention heads, 8 KV heads); allowed: 1, 2, 4, 8, "
     "16, 32"),
])
def test_a_deployment_error_about_a_key_an_engine_flag_set_names_the_flag(raw, message):
    assert _refusal(raw) == message


@pytest.mark.parametrize("raw", [
    small_scenario({"model": "mixtral-8x22b", "hardware": {"gpu": "a100-80gb"},
                    "kv_cache": {"capacity_tokens": 64000}}),
    _engine("lmdeploy", "0.14.0", model="mixtral-8x22b", gpu="a100-80gb", cache_max_entry_count=1000),  # 1,000 blocks
])
def test_a_pinned_kv_cache_still_needs_the_weights_to_fit(raw):
    """A pinned KV capacity (kv_cache.capacity_tokens, or LMDeploy's cache_max_entry_count as a block count, found by
    a random search) skipped the memory arithmetic: Mixtral-8x22B's 282 GB of weights ran on one 80 GB A100. The
    pin sets the cache's size; the weights must still fit the GPU's whole memory."""
    message = _refusal(raw)
    assert message.startswith("hardware: mixtral-8x22b (bf16 weights, tensor_parallel=1) needs 28") and (
        " bytes per GPU but a100-80gb offers 85,899,345,920 (1 of 85,899,345,920)" in message), message


def test_a_pinned_kv_cache_is_not_refused_for_activations_its_engine_sizes_its_own_way():
    """LMDeploy 0.1's k/v blocks are a fraction of the total memory (pinned by its preset): Llama-2-70B at TP 4 on
    A100s serves LMDeploy's published runs, where the arithmetic's activations for its batch would not fit."""
    raw = _engine("lmdeploy", "0.1.0a1", model="llama-2-70b", gpu="a100-80gb", tp=4)
    raw["hardware"]["tensor_parallel"] = 4
    assert validate_scenario(raw).kv_cache.capacity_tokens > 0


def test_a_pinned_kv_cache_that_fits_is_kept():
    from sim.config.deployment import resolve
    pinned = validate_scenario(small_scenario({"kv_cache": {"capacity_tokens": 4096}}))
    assert resolve(pinned).kv_capacity_tokens == 4096
