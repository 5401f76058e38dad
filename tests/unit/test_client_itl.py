"""The inter-token latency as a streaming client measures it: one gap per streamed chunk (sim/results.py
`client_itl`, sim/frontend.py `stream_chunks`), and vLLM V0's multi-step runs streamed as vLLM streams them."""

import math

import numpy as np
import pytest
from helpers import small_scenario

from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.frontend import FrontendCosts
from sim.results import client_itl, decode_gaps, latencies, stream_chunks
from sim.run import simulate
from sim.table import Table


def test_a_reply_streams_its_first_token_alone_then_whole_chunks_and_the_rest():
    # 0 tokens: nothing; 1: the first chunk; 2..11 with 10 a chunk: one more; 12: two more (10, then 1)
    got = stream_chunks(np.array([0, 1, 2, 11, 12, 21, 22]), 10)
    assert got.tolist() == [0, 1, 2, 2, 3, 3, 4]
    assert stream_chunks(np.array([0, 1, 5]), 1).tolist() == [0, 1, 5]
    # the front-end's work counts the same chunks
    costs = FrontendCosts(1, 0.0, 0.0, 1e-3, tokens_per_chunk=10)
    chunks, first, middle, last = costs.chunk_work_s(np.array([12]))
    assert chunks.tolist() == [3] and middle.tolist() == [pytest.approx(1e-3)]


def test_the_clients_mean_gap_is_the_spans_over_the_gaps_and_its_percentiles_weigh_each_requests_gaps():
    fin = Table({"output_tokens": np.array([21, 11, 1, 0]),
                 "client_first_token_s": np.array([1.0, 0.0, 2.0, math.nan]),
                 "client_last_token_s": np.array([3.0, 0.5, 2.0, math.nan])})
    # 10 a chunk: 3 and 2 chunks -> 2 gaps of 1.0 s and 1 of 0.5 s; a one-token reply has no gap
    got = client_itl(fin, 10)
    assert got["itl_mean"] == pytest.approx(2.5 / 3)
    assert got["itl_p50"] == pytest.approx(1.0) and got["itl_p99"] == pytest.approx(1.0)
    # one token a chunk: 20 gaps of 0.1 s and 10 of 0.05 s
    every = client_itl(fin, 1)
    assert every["itl_mean"] == pytest.approx(2.5 / 30) and every["itl_p50"] == pytest.approx(0.1)
    assert every["itl_p90"] == pytest.approx(0.1)
    none = client_itl(Table({"output_tokens": np.array([1]), "client_first_token_s": np.array([1.0]),
                             "client_last_token_s": np.array([1.0])}), 4)
    assert all(math.isnan(v) for v in none.values())


def _records(first_token_s, last_token_s, output_tokens):
    n = len(output_tokens)
    return Table({"output_tokens": np.array(output_tokens), "first_token_s": np.array(first_token_s),
                  "last_token_s": np.array(last_token_s),
                  **{col: np.zeros(n) for col in ("ttft_s", "tpot_s", "e2e_s", "queueing_s", "normalized_latency_s")}})


# A decodes alone (1.0-1.1 s), B's prompt runs in a prefill-only step (1.1-1.6 s, A sits it out), then both decode
# twice (0.1 s each): A streams 4 tokens from 1.0 to 1.8 s (3 gaps: 0.1, 0.6, 0.1), B 3 from 1.6 to 1.8 s (2 gaps).
def _steps(start_s, duration_s, decodes, tokens, replica=None):
    n = len(start_s)
    return Table({"start_s": np.array(start_s), "duration_s": np.array(duration_s),
                  "num_decode_seqs": np.array(decodes), "num_padding_seqs": np.zeros(n, dtype=np.int64),
                  "num_output_tokens": np.array(tokens),
                  "replica": np.array(replica if replica is not None else [0] * n)})


STEPS_WITH_A_PREFILL_ONLY_BATCH = _steps([1.0, 1.1, 1.6, 1.7], [0.1, 0.5, 0.1, 0.1], [1, 0, 2, 2], [1, 1, 2, 2])


def test_the_engines_mean_gap_counts_the_steps_a_request_sat_out():
    fin = _records([1.0, 1.6], [1.8, 1.8], [4, 3])
    got = latencies(fin, STEPS_WITH_A_PREFILL_ONLY_BATCH)
    assert got["itl_mean"] == pytest.approx((0.8 + 0.2) / 5)  # the 0.6 s gap counted whole
    # speculative: a step's accepted tokens stream in one gap the records do not count: the step log's gaps give
    # the mean (the same here), not the decode steps' durations (0.1 s)
    assert latencies(fin, STEPS_WITH_A_PREFILL_ONLY_BATCH, speculative=True)["itl_mean"] == pytest.approx(0.2)
    assert math.isnan(latencies(_records([1.0], [1.0], [1]), STEPS_WITH_A_PREFILL_ONLY_BATCH)["itl_mean"])


def test_the_gaps_between_tokens_span_the_steps_a_request_sat_out():
    values, counts = decode_gaps(STEPS_WITH_A_PREFILL_ONLY_BATCH)
    gaps = sorted(np.repeat(values, counts).round(12).tolist())
    assert gaps == [0.1, 0.1, 0.1, 0.1, 0.6]  # A: 0.1, 0.6, 0.1; B: 0.1, 0.1
    got = latencies(_records([1.0, 1.6], [1.8, 1.8], [4, 3]), STEPS_WITH_A_PREFILL_ONLY_BATCH)
    assert got["itl_p50"] == pytest.approx(0.1) and got["itl_p90"] == pytest.approx(0.6)
    # two prefill-only steps (ending at 1.3 and 1.6 s) between A's steps: their requests wait from their own
    # step's end, A from its previous step's; where the step decodes fewer, the latest prompts are the ones taken
    two_prefills = ([1.0, 1.1, 1.3, 1.6], [0.1, 0.2, 0.3, 0.1], [1, 0, 0, 3], [1, 1, 1, 3])
    values, counts = decode_gaps(_steps(*two_prefills))
    assert sorted(np.repeat(values, counts).round(12).tolist()) == [0.1, 0.1, 0.4, 0.6]
    values, counts = decode_gaps(_steps(*two_prefills[:2], [1, 0, 0, 1], two_prefills[3]))
    assert sorted(np.repeat(values, counts).round(12).tolist()) == [0.1, 0.1]
    # each replica's steps follow their own: replica 1's prefill is not replica 0's wait
    values, counts = decode_gaps(_steps([1.0, 1.05, 1.1], [0.1, 0.5, 0.1], [1, 0, 1], [1, 1, 1], [0, 1, 0]))
    assert sorted(np.repeat(values, counts).round(12).tolist()) == [0.1, 0.1]
    # overlapping steps (pipeline stages in flight together) add no wait
    values, counts = decode_gaps(_steps([0.0, 0.05, 0.1], [0.2, 0.2, 0.2], [2, 2, 2], [2, 2, 2]))
    assert np.repeat(values, counts).tolist() == [0.2] * 6


def test_sglangs_separate_prefill_batches_lengthen_the_gaps_of_the_requests_decoding():
    # SGLang runs new prompts in batches of their own: every request decoding waits them out
    scenario = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 20.0},
                             "lengths": {"kind": "fixed", "input_tokens": 2000, "output_tokens": 50}},
                "run": {"num_requests": 40, "seed": 3}, "engine": {"name": "sglang", "version": "0.5.3.post3"},
                "frontend": None}
    result = simulate(validate_scenario(small_scenario(scenario)))
    req, steps = result.requests, result.steps
    assert ((steps["num_prefill_tokens"] > 0) & (steps["num_decode_seqs"] == 0)).any()
    spans = (req["last_token_s"] - req["first_token_s"]).sum()
    assert result.summary["itl_mean"] == pytest.approx(spans / (req["output_tokens"] - 1).sum(), rel=1e-12)
    decoding = steps["num_decode_seqs"] - steps["num_padding_seqs"]  # a decode run's row: each of its steps
    step_mean = (steps["duration_s"] * decoding).sum() / (decoding * steps["num_steps"]).sum()
    assert result.summary["itl_mean"] > 1.05 * step_mean
    # the step log's gaps account for the requests' spans, every gap once
    values, counts = decode_gaps(steps, result.decode_runs)
    assert counts.sum() == (req["output_tokens"] - 1).sum() and (values * counts).sum() == pytest.approx(spans)
    # the slowest gaps span a prefill-only batch or more
    prefill_only = steps[(steps["num_prefill_tokens"] > 0) & (steps["num_decode_seqs"] == 0)]
    assert result.summary["itl_p99"] > prefill_only["duration_s"].max()


SPARSE = {"workload": {"arrival": {"kind": "constant", "rate_per_s": 0.5},
                       "lengths": {"kind": "fixed", "input_tokens": 300, "output_tokens": 21}},
          "run": {"num_requests": 6}}


def test_with_chunks_of_several_tokens_the_headline_itl_is_the_clients_and_the_engines_stays_beside_it():
    # each request alone: 21 tokens stream in 1 + 2 chunks of 10, so the client's gap is 10 of the engine's steps
    fe = {"per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0, "latency_s": 0.01}
    per_token = simulate(validate_scenario(small_scenario(SPARSE, frontend=fe))).summary
    chunked = simulate(validate_scenario(small_scenario(SPARSE, frontend={**fe, "tokens_per_chunk": 10})))
    s, req = chunked.summary, chunked.requests
    span = (req["client_last_token_s"] - req["client_first_token_s"]).sum()
    assert s["itl_mean"] == pytest.approx(span / (2 * len(req)), rel=1e-12)
    assert s["itl_mean"] == pytest.approx(10 * s["engine_itl_mean"], rel=0.02)  # decode steps barely grow here
    assert s["engine_itl_mean"] == per_token["engine_itl_mean"] == per_token["itl_mean"]
    # the engine and the other client-side latencies do not depend on how the reply is cut up
    for key in ("tpot_s_mean", "ttft_s_mean", "engine_itl_p50"):
        assert s[key] == per_token[key], key


def test_one_token_a_chunk_sent_as_the_engine_made_it_keeps_the_engines_gaps():
    fe = {"per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0, "latency_s": 0.05}
    on = simulate(validate_scenario(small_scenario(SPARSE, frontend=fe))).summary
    off = simulate(validate_scenario(small_scenario(SPARSE))).summary
    for key in ("itl_mean", "itl_p50", "itl_p90", "itl_p99"):
        assert on[key] == on[f"engine_{key}"] == off[key], key
    assert "engine_itl_mean" not in off  # no front-end: the summary's ITL is the engine's, under its own name


def preset(engine: dict, **sections):
    base = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                         "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
            "run": {"num_requests": 20}}
    return validate_scenario({**base, **sections, "engine": engine})


def test_vllm_v0_multi_step_streams_one_chunk_per_run_where_the_scenario_has_a_front_end():
    # vllm/engine/llm_engine.py LLMEngine.step (0.6.0): a multi-step run's outputs go out after its last step
    engine = {"name": "vllm", "version": "0.6.0", "num_scheduler_steps": 10, "max_model_len": 4096}
    fe = {"num_processes": 1, "per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0}
    assert preset(engine, frontend=fe).frontend.tokens_per_chunk == 10
    assert preset(engine).frontend.tokens_per_chunk == 10  # the preset's own front-end (its fitted latency)
    assert preset(engine, frontend={**fe, "tokens_per_chunk": 4}).frontend.tokens_per_chunk == 4  # the user's
    assert preset(engine, frontend=None).frontend is None  # no front-end: nothing streams to a client
    single = {"name": "vllm", "version": "0.6.0", "max_model_len": 4096}
    assert preset(single, frontend=fe).frontend.tokens_per_chunk == 1
    assert preset({"name": "vllm", "version": "0.11.0"}, frontend=fe).frontend.tokens_per_chunk == 1


FRONT = {"num_processes": 1, "per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0}


def test_sglangs_stream_interval_sets_the_chunks_and_a_different_own_value_is_refused():
    # scheduler_output_processor_mixin.py (0.5.3.post3): output at len(output_ids) % N == 1 and at the end
    engine = {"name": "sglang", "version": "0.5.3.post3", "stream_interval": 8}
    assert preset(engine, frontend=FRONT).frontend.tokens_per_chunk == 8
    assert preset(engine, frontend={**FRONT, "tokens_per_chunk": 8}).frontend.tokens_per_chunk == 8
    assert preset({"name": "sglang", "version": "0.3.0", "stream_interval": 4}, frontend=FRONT
                  ).frontend.tokens_per_chunk == 4
    silent = preset(engine, frontend=None)
    assert silent.frontend is None and any("stream_interval 8: the scenario has no front-end" in n
                                           for n in silent.engine.notes)
    with pytest.raises(ConfigError) as err:
        preset(engine, frontend={**FRONT, "tokens_per_chunk": 4})
    assert str(err.value) == ("engine.stream_interval: 8 contradicts frontend.tokens_per_chunk 4; allowed: give one "
                              "of them, or the same value")
    with pytest.raises(ConfigError) as err:
        preset({**engine, "stream_interval": 0}, frontend=FRONT)
    assert "engine.stream_interval" in str(err.value) and "\n" not in str(err.value)


def test_vllms_stream_interval_from_0_11_1_sets_the_chunks():
    # vllm/v1/engine/output_processor.py (0.11.2): the first token, then whenever stream_interval more have come
    assert preset({"name": "vllm", "version": "0.11.1", "stream_interval": 10}, frontend=FRONT
                  ).frontend.tokens_per_chunk == 10
    with pytest.raises(ConfigError) as err:
        preset({"name": "vllm", "version": "0.11.0", "stream_interval": 10}, frontend=FRONT)
    assert str(err.value).startswith("engine.stream_interval: not a flag of vllm 0.11.0 (it came in 0.11.1)")


def test_vllms_api_server_count_sets_the_front_ends_processes():
    # vllm/entrypoints/cli/serve.py run_multi_api_server: from 0.9.1
    own = {k: v for k, v in FRONT.items() if k != "num_processes"}
    assert preset({"name": "vllm", "version": "0.11.0", "api_server_count": 4}, frontend=own
                  ).frontend.num_processes == 4
    assert preset({"name": "vllm", "version": "0.11.0", "api_server_count": 4}).frontend.num_processes == 4
    with pytest.raises(ConfigError) as err:
        preset({"name": "vllm", "version": "0.11.0", "api_server_count": 4}, frontend={**FRONT, "num_processes": 2})
    assert str(err.value).startswith("engine.api_server_count: 4 contradicts frontend.num_processes 2")
    with pytest.raises(ConfigError) as err:
        preset({"name": "vllm", "version": "0.9.0", "api_server_count": 4})
    assert str(err.value).startswith("engine.api_server_count: not a flag of vllm 0.9.0 (it came in 0.9.1)")
