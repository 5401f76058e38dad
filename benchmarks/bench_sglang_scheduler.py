"""What SGLang's scheduler spends per request and per step on its own CPU (issue 30), measured by running the version's
own `Scheduler` on this machine's CPU without a model, as bench_vllm_engine_core.py does for vLLM V1.

SGLang's first tokens on GPUStack's single-H100 pages come 21-59% later than simulated, and neither its HTTP front-end
(bench_sglang_tokenizer_manager.py) nor the GPU's step explains it on its own. The scheduler is a process of its own
that takes the tokenized requests, builds every batch and hands each step's tokens to the detokenizer; with
the overlap scheduler (the default) its work runs while the GPU runs the previous batch, without it before each step.
This measures that work:

- **The scheduler**: SGLang's own `Scheduler` (python/sglang/srt/managers/scheduler.py) with its radix cache, its
  request-to-token and KV-slot pools and its first-come-first-served policy, built as `run_scheduler_process` builds
  it (`--disable-overlap-schedule`: the loop's steps one after another, as `event_loop_normal` runs them), 8,192-token
  prefill chunks and up to 1,024 running requests (its H100 defaults at TP 1), on the CPU device. Its model worker
  is a stand-in (`TpModelWorker` replaced): the pools, and one sampled token per request a step, no forward pass.
- **A step**: `get_next_batch_to_run` (admission, the batch's tensors), `run_batch` (the stand-in: the batch's
  `ModelWorkerBatch` built), `process_batch_result` (each request's token, its finish check, the stream output
  pickled as `send_pyobj` pickles it for the detokenizer, not sent).
- **Cells**: 1 to 1,024 requests of 200-215 prompt tokens sent together (`process_input_requests`: intake), prefilled
  (the prefill steps: per request admitted), then decoding together: from the first decode step with every request
  running, the mean over 48 steps; 3 repeats, the median per cell. Least squares over the cells: decode step = a +
  b x running requests.

Not measured as on a GPU: the batch's tensors live in host memory (on a GPU, each is a copy and a launch), the
request-to-token writes run as SGLang's Python loop (`write_cache_indices` without Triton) where the GPU runs a Triton
kernel, no CUDA graph replay's bookkeeping, and no overlap. The ZMQ sends and the detokenizer are not timed.

Setup: bench_sglang_tokenizer_manager.py's venv and unpacked wheel (its docstring), and its tokenizer folder (the
config is read from it). Run from the folder holding SGLang's unpacked `sglang/`:

    venv/bin/python /work/main/benchmarks/bench_sglang_scheduler.py --model llama3 [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import statistics
import sys
import time
import types
from pathlib import Path

SGLANG_VERSIONS = ("0.5.5.post1",)  # the versions whose scheduler this bench was read for
BATCHES = (1, 16, 64, 256, 512, 1024)
PROMPT_TOKENS = 200  # + i % 16 for request i
TIMED_STEPS = 48
CHUNKED_PREFILL_SIZE = 8192
MAX_RUNNING_REQUESTS = 1024
OUTPUT_TOKENS = 200  # enough for the prefill steps and the timed ones; the scheduler reserves KV for it


class _Group:
    """A one-rank process group, where the scheduler asks for one."""
    cpu_group = device_group = None
    rank = rank_in_group = 0
    world_size = 1
    is_first_rank = is_last_rank = True


class _Sink:
    """The scheduler's sockets to the detokenizer and the tokenizer: each output pickled, as send_pyobj does."""

    def send_output(self, output, recv_obj=None):
        pickle.dumps(output)

    def send_pyobj(self, obj):
        pickle.dumps(obj)


def _standin_worker(kv_tokens: int):
    """A `TpModelWorker` stand-in: the scheduler's pools and one token per request a step."""
    import torch
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool

    class StandInWorker:
        is_hybrid = False
        sliding_window_size = None

        def __init__(self, server_args, **kwargs):
            self.context_len = PROMPT_TOKENS + 16 + OUTPUT_TOKENS + 8
            self.pools = (ReqToTokenPool(MAX_RUNNING_REQUESTS + 1, self.context_len + 4, "cpu", False),
                          TokenToKVPoolAllocator(kv_tokens, torch.bfloat16, "cpu", None, False))
            self.model_runner = types.SimpleNamespace(
                hybrid_gdn_config=None, mambaish_config=None, is_hybrid=None, sliding_window_size=None,
                model=types.SimpleNamespace(), tp_group=_Group(), attention_tp_group=_Group(),
                weight_load_mem_usage=0.0, graph_mem_usage=0.0)
            self.step = 0

        def get_worker_info(self):
            return (kv_tokens, 2 * CHUNKED_PREFILL_SIZE, MAX_RUNNING_REQUESTS, 10**9, self.context_len - 1,
                    self.context_len - 2, 0, "cpu", None, None, None)

        def get_tp_group(self):
            return _Group()

        def get_attention_tp_group(self):
            return _Group()

        def get_attention_tp_cpu_group(self):
            return None

        def get_pad_input_ids_func(self):
            return None

        def get_memory_pool(self):
            return self.pools

        def forward_batch_generation(self, model_worker_batch, *args, **kwargs):
            self.step += 1
            result = GenerationBatchResult(logits_output=LogitsProcessorOutput(next_token_logits=None))
            result.next_token_ids = torch.full((len(model_worker_batch.seq_lens),), 5000 + self.step % 50,
                                               dtype=torch.long)
            return result

    return StandInWorker


def _scheduler(model: str, kv_tokens: int):
    from sglang.srt.managers import scheduler as scheduler_module
    from sglang.srt.managers import tp_worker
    from sglang.srt.server_args import PortArgs, ServerArgs, set_global_server_args_for_scheduler
    tp_worker.TpModelWorker = _standin_worker(kv_tokens)  # Scheduler.__init__ imports it from there
    scheduler_module.get_pp_group = scheduler_module.get_world_group = lambda: _Group()
    args = ServerArgs(model_path=model, device="cpu", disable_overlap_schedule=True, grammar_backend="none",
                      chunked_prefill_size=CHUNKED_PREFILL_SIZE, skip_server_warmup=True)
    set_global_server_args_for_scheduler(args)
    scheduler = scheduler_module.Scheduler(args, PortArgs.init_new(args), 0, 0, 0, 0, None)
    scheduler.send_to_detokenizer = scheduler.send_to_tokenizer = _Sink()
    return scheduler


def one_cell(model: str, batch: int, seed: int) -> dict:
    """A fresh scheduler's intake of `batch` requests sent together, its prefill steps and its mean decode step."""
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams
    scheduler = _scheduler(model, batch * (PROMPT_TOKENS + 16 + OUTPUT_TOKENS) + 4096)
    rng = random.Random(seed)
    requests = []
    for i in range(batch):
        params = SamplingParams(max_new_tokens=OUTPUT_TOKENS, temperature=0.0, ignore_eos=True)
        params.normalize(None)
        params.verify(scheduler.model_config.vocab_size)
        requests.append(TokenizedGenerateReqInput(
            rid=f"r{i}", http_worker_ipc=None, input_text="", mm_inputs=None, sampling_params=params,
            input_ids=[rng.randrange(1000, 100000) for _ in range(PROMPT_TOKENS + i % 16)], return_logprob=False,
            logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=True))
    t0 = time.perf_counter()
    scheduler.process_input_requests(requests)
    intake = time.perf_counter() - t0
    prefill, decode = [], []
    while len(decode) < TIMED_STEPS:
        t0 = time.perf_counter()
        step = scheduler.get_next_batch_to_run()
        scheduler.cur_batch = step
        result = scheduler.run_batch(step)
        scheduler.process_batch_result(step, result)
        scheduler.last_batch = step
        seconds = time.perf_counter() - t0
        if step.forward_mode.is_extend():
            assert not decode, "a prefill after the decodes began"
            prefill.append((len(step.reqs), seconds))
        elif len(step.reqs) == batch:
            decode.append(seconds)
    return {"intake_s": intake, "prefill": prefill, "decode_s": statistics.fmean(decode)}


def run(model: str, repeats: int) -> None:
    import sglang
    if sglang.__version__ not in SGLANG_VERSIONS:
        raise SystemExit(f"SGLang {sglang.__version__}: this bench runs {', '.join(SGLANG_VERSIONS)} (the versions it "
                         "was read for)")
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_vllm_api_server import _machine_cpu
    os.sched_setaffinity(0, {0})
    print(f"# SGLang scheduler work per request and per step: {_machine_cpu()}, SGLang {sglang.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print("\n| batch | intake per request (us) | prefill steps | prefill step (ms) | per request admitted (us) "
          "| decode step, each repeat (ms) | median (ms) | per request (us) |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    medians, admitted = {}, []
    for batch in BATCHES:
        cells = [one_cell(model, batch, seed) for seed in range(repeats)]
        steps = [c["decode_s"] for c in cells]
        medians[batch] = statistics.median(steps)
        prefill = [p for c in cells for p in c["prefill"]]
        admitted += [seconds / n for n, seconds in prefill]
        print(f"| {batch} | {statistics.median(c['intake_s'] for c in cells) / batch * 1e6:.1f} | "
              f"{len(prefill) // repeats} | {statistics.median(s for _, s in prefill) * 1e3:.2f} | "
              f"{statistics.median(s / n for n, s in prefill) * 1e6:.0f} | "
              f"{', '.join(f'{s * 1e3:.2f}' for s in steps)} | {medians[batch] * 1e3:.2f} | "
              f"{medians[batch] / batch * 1e6:.1f} |", flush=True)
    b, a = statistics.linear_regression(list(medians), list(medians.values()))
    print(f"\ndecode step {a * 1e3:.3f} ms + {b * 1e6:.2f} us a running request (least squares over the cells' "
          f"medians); a prefill step's work per request admitted, median over every cell: "
          f"{statistics.median(admitted) * 1e6:.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="bench_vllm_api_server.py's tokenizer folder")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())  # SGLang's unpacked `sglang/` (see the setup above)
    run(args.model, args.repeats)


if __name__ == "__main__":
    main()
