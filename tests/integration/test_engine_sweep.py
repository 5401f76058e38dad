"""Every engine preset, on any catalog GPU and model, at any TP, with the options its launch command takes: the
scenario runs, or it is refused in one line; nothing else escapes (no traceback, no multi-line message).

A draw of the sweep run by hand on 12-02 (20,000 scenarios, then 8,000 after the fix; 0 crashes), which found
SGLang refused on two 24 GB GPUs (its max_running_requests above its chunk: sim/config/engines/base.py
decodes_within_budget)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.files import validate_scenario
from sim.errors import ServeSimError
from sim.run import simulate

MODELS = ["llama-2-7b", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v2-lite", "opt-13b"]
GPUS = ["h100-sxm", "h200", "b200", "a100-80gb", "a100-40gb", "l40s", "l4", "a10g"]
# versions across each preset's range, and options its command line takes (flags and options without effect)
ENGINES = {
    "vllm": (["0.6.0", "0.6.3", "0.7.3", "0.8.5", "0.10.2", "0.11.0", "0.14.0", "0.19.0", "0.33.0", "0.34.0"],
             ["", "--enforce-eager", "--num-scheduler-steps 8", "--enable-chunked-prefill",
              "--async-scheduling --max-num-seqs 64", "--kv-cache-dtype fp8 --quantization fp8",
              "--gpu-memory-utilization 0.5 --max-model-len 2048 --port 1", "--enable-expert-parallel",
              "--disable-custom-all-reduce --stream-interval 4 --block-size 32",
              "--swap-space 4 --disable-log-requests --use-v2-block-manager --hf-token t --reasoning-parser r",
              "--num-gpu-blocks-override 200", "--distributed-executor-backend mp --scheduling-policy fcfs",
              "--disable-cascade-attn --uds /tmp/s --enable-prompt-tokens-details --log-error-stack"]),
    "sglang": (["0.3.0", "0.4.6", "0.5.3.post3", "0.5.5.post1", "0.5.13", "0.5.23"],
               ["", "--enable-mixed-chunk", "--disable-radix-cache --mem-frac 0.7", "--chunked-prefill-size -1",
                "--kv-cache-dtype fp8_e4m3", "--quantization fp8 --max-running-requests 32", "--ep-size 2",
                "--enable-dp-attention", "--page-size 16 --schedule-conservativeness 0.5",
                "--model m --skip-server-warmup --watchdog-timeout 300 --dist-timeout 60",
                "--cuda-graph-max-bs 8", "--disable-cuda-graph", "--cuda-graph-max-bs-decode 1024",
                "--max-total-tokens 3000"]),
    "trtllm": (["0.14.0", "0.17.0", "1.0.0", "1.2.0rc1", "1.3.0rc5"],
               ["", "--enable_chunked_prefill", "--max_batch_size 64 --max_num_tokens 4096",
                "--kv_cache_free_gpu_memory_fraction 0.5", "--ep_size 2"]),
    "lmdeploy": (["0.1.0a1", "0.12.0", "0.16.0"],
                 ["", "--max-batch-size 16", "--quant-policy 8 --enable-prefix-caching", "--session-len 2048"]),
}


@st.composite
def engine_scenarios(draw):
    engine = draw(st.sampled_from(sorted(ENGINES)))
    versions, commands = ENGINES[engine]
    raw = {"model": draw(st.sampled_from(MODELS)),
           "hardware": {"gpu": draw(st.sampled_from(GPUS)), "tensor_parallel": draw(st.sampled_from([1, 2, 4, 8]))},
           "engine": {"name": engine, "version": draw(st.sampled_from(versions)),
                      "command": f"{engine} serve some/model {draw(st.sampled_from(commands))}"},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 20.0},
                        "lengths": {"kind": "lognormal", "input_mean": 1500, "input_sigma": 1.0,
                                    "output_mean": 150, "output_sigma": 0.5}},
           "run": {"num_requests": 30, "seed": draw(st.integers(0, 100))}}
    if draw(st.booleans()):
        raw["frontend"] = {"num_processes": 1, "per_request_s": 1e-3, "per_prompt_token_s": 1e-6,
                           "per_output_chunk_s": 2e-5}
    return raw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engine_scenarios())
def test_any_preset_on_any_gpu_and_model_runs_or_is_refused_in_one_line(raw):
    try:
        scenario = validate_scenario(raw)
    except ServeSimError as err:
        assert "\n" not in str(err) and str(err), raw
        return
    result = simulate(scenario)
    assert len(result.requests) == raw["run"]["num_requests"]
    assert result.extras["engine"] == f"{raw['engine']['name']} {raw['engine']['version']}"
