"""What SGLang's HTTP front-end spends per request before its scheduler sees it (issue 30), measured by running the
version's own server code on this machine's CPU, as bench_vllm_api_server.py does for vLLM.

SGLang serves HTTP in its main process: FastAPI, the OpenAI request's validation, tokenization and the ZMQ send to the
scheduler all run there, in the `TokenizerManager`'s event loop (python/sglang/srt/managers/tokenizer_manager.py);
the scheduler and the detokenizer are processes of their own. Here:

- the **server**: SGLang's own `launch_server` (sglang/srt/entrypoints/http_server.py), with its real
  `TokenizerManager` and `DetokenizerManager`, no server warm-up (`--skip-server-warmup`);
- the **scheduler**: a stand-in in the scheduler's process slot (`run_scheduler_process` replaced), which binds the
  scheduler's input socket, says it is ready as the scheduler does, notes when each tokenized request reached it and
  finishes it at once with one output token (a `BatchTokenIDOutput` to the detokenizer, as the scheduler sends it);
- the **client**: bench_vllm_api_server.py's (aiohttp, streaming /v1/completions, every request of a burst at once).

The main process runs alone on core 0, the scheduler, the detokenizer and the client on core 1. Bursts of 40, 160 and
320 requests of 16 and 900 prompt tokens; a request's intake is the time the burst's last request reached the
scheduler over the burst's size; the median over repeats per cell, then least squares of intake = per request + per
prompt token x tokens. The order: the burst's first request's arrival over its last one's.

Not measured: the chat endpoint (its template render, cached), streaming many tokens (the per-chunk work), the real
scheduler's own per-request work, other SGLang versions.

Setup (a venv of its own, reusing bench_vllm_api_server.py's vLLM 0.11.0 venv for torch 2.13.0+cpu and transformers
4.57.1, which SGLang 0.5.5.post1 pins; sgl-kernel's CUDA extension replaced by a stand-in module that imports and
never runs, as the vLLM bench unpacks vLLM without its `.so` files):

    mkdir /tmp/sgl && cd /tmp/sgl && python3 -m venv venv
    echo /tmp/v011/venv/lib/python3.11/site-packages > venv/lib/python3.11/site-packages/zz_v011.pth
    venv/bin/pip install ipython orjson triton dill
    venv/bin/pip download --no-deps sglang==0.5.5.post1 -d dl && unzip -q dl/sglang-0.5.5.post1-*.whl
    venv/bin/python /work/main/benchmarks/bench_sglang_tokenizer_manager.py standin \\
        --out venv/lib/python3.11/site-packages
    venv/bin/python /work/main/benchmarks/bench_sglang_tokenizer_manager.py run --model /tmp/v060/llama3

(run from the folder holding SGLang's unpacked `sglang/`; the model folder is bench_vllm_api_server.py's Llama 3
tokenizer and config).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_vllm_api_server import (INTAKE_BURSTS, INTAKE_PROMPT_TOKENS, _burst, _prompts,  # noqa: E402
                                   print_intake)

SGLANG_VERSIONS = ("0.5.5.post1",)  # the versions whose launch path and scheduler messages this bench was read for

STANDIN = '''"""Stand-in for sgl-kernel's CUDA extension and its submodules (imported, never run): any attribute,
call or index gives another stand-in, so that import-time uses (scalar types, decorators) pass."""
import importlib.abc, importlib.machinery, sys, types


class _Stub:
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub()

    def __call__(self, *args, **kwargs):
        return _Stub()

    def __getitem__(self, key):
        return _Stub()


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub()


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "sgl_kernel" or fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        module.__version__ = "0.3.17"
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())
'''


def write_standin(site_packages: Path) -> None:
    """Write the stand-in module and the .pth that imports it; refuses to replace a file of other content."""
    files = {site_packages / "sgl_kernel_standin.py": STANDIN,
             site_packages / "sgl_kernel_standin.pth": "import sgl_kernel_standin\n"}
    for path, text in files.items():
        if path.exists() and path.read_text() != text:
            raise SystemExit(f"{path}: exists with other content; not replaced (remove it first)")
    for path, text in files.items():
        path.write_text(text)


def standin_scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank, pipe_writer):
    """The scheduler's process slot: its sockets (scheduler.py init_sockets), its ready message, and every generate
    request finished at once with one token (scheduler_output_processor_mixin.py stream_output_generation's message),
    each request's arrival noted; SIGUSR1 writes the arrivals to $SGLANG_BENCH_ARRIVALS."""
    import zmq
    from sglang.srt.managers.io_struct import BatchTokenIDOutput, TokenizedGenerateReqInput
    from sglang.srt.utils import get_zmq_socket
    context = zmq.Context(2)
    receive = get_zmq_socket(context, zmq.PULL, port_args.scheduler_input_ipc_name, False)
    to_detokenizer = get_zmq_socket(context, zmq.PUSH, port_args.detokenizer_ipc_name, False)
    arrivals: list[float] = []
    signal.signal(signal.SIGUSR1, lambda *_: Path(os.environ["SGLANG_BENCH_ARRIVALS"]).write_text(json.dumps(arrivals)))
    pipe_writer.send({"status": "ready", "max_total_num_tokens": 10**6, "max_req_input_len": 8192})
    while True:
        message = receive.recv_pyobj()
        if not isinstance(message, TokenizedGenerateReqInput):
            continue
        now = time.monotonic()
        arrivals.append(now)
        to_detokenizer.send_pyobj(BatchTokenIDOutput(
            spec_verify_ct=[], spec_accepted_tokens=[], queue_time=[0.0], forward_entry_time=[now],
            prefill_delay=[None], prefill_latency=[None], finished_reasons=[{"type": "length", "length": 1}],
            decoded_texts=[""], decode_ids=[[1000]], read_offsets=[0], output_ids=[[1000]],
            skip_special_tokens=[True], spaces_between_special_tokens=[True], no_stop_trim=[False],
            prompt_tokens=[len(message.input_ids)], completion_tokens=[1], cached_tokens=[0],
            input_token_logprobs_val=[], input_token_logprobs_idx=[], output_token_logprobs_val=[],
            output_token_logprobs_idx=[], input_top_logprobs_val=[], input_top_logprobs_idx=[],
            output_top_logprobs_val=[], output_top_logprobs_idx=[], input_token_ids_logprobs_val=[],
            input_token_ids_logprobs_idx=[], output_token_ids_logprobs_val=[], output_token_ids_logprobs_idx=[],
            output_token_entropy_val=None, output_hidden_states=None, rids=[message.rid],
            http_worker_ipcs=[message.http_worker_ipc], placeholder_tokens_idx=None, placeholder_tokens_val=None,
            retraction_counts=[0]))


def server_process(model: str, port: int, log_file: str) -> None:
    """SGLang's `launch_server` as `python -m sglang.launch_server --model-path MODEL` runs it, the scheduler's process
    replaced by `standin_scheduler`."""
    sys.stdout = open(log_file, "w", buffering=1)
    sys.stderr = sys.stdout
    from sglang.srt.entrypoints import engine
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import ServerArgs
    engine.run_scheduler_process = standin_scheduler
    launch_server(ServerArgs(model_path=model, port=port, device="cpu", skip_server_warmup=True))


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def one_burst(model: str, size: int, prompt_tokens: int, work: Path) -> dict:
    """One burst against a fresh server (after a warm-up burst of 5): when its first and last request reached the
    scheduler."""
    from transformers import AutoTokenizer
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    arrivals_file = work / "arrivals.json"
    arrivals_file.unlink(missing_ok=True)
    os.environ["SGLANG_BENCH_ARRIVALS"] = str(arrivals_file)
    server = multiprocessing.get_context("spawn").Process(target=server_process,
                                                           args=(model, port, str(work / "server.log")))
    server.start()
    try:
        for _ in range(900):
            if not server.is_alive():
                raise SystemExit(f"the server died: see {work / 'server.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        children = _children(server.pid)
        subprocess.run(["taskset", "-pc", "0", str(server.pid)], capture_output=True, check=True)
        for child in children:  # the scheduler stand-in and the detokenizer
            subprocess.run(["taskset", "-pc", "1", str(child)], capture_output=True, check=False)
        prompts = _prompts(AutoTokenizer.from_pretrained(model), prompt_tokens, size + 5)
        url = f"http://127.0.0.1:{port}/v1/completions"
        asyncio.run(_burst(url, model, prompts[:5], 1))  # warm-up: first-call imports and caches
        time.sleep(1.0)
        sent = time.monotonic()
        asyncio.run(_burst(url, model, prompts[5:], 1))
        time.sleep(0.5)
        for child in children:  # the stand-in writes its arrivals; the others are killed below anyway
            os.kill(child, signal.SIGUSR1)
        time.sleep(0.5)
        arrivals = sorted(json.loads(arrivals_file.read_text()))[5:]
    finally:
        for child in _children(server.pid):
            os.kill(child, signal.SIGKILL)
        server.kill()
        server.join(10)
    assert len(arrivals) == size, (len(arrivals), size)
    return {"first_arrival_s": arrivals[0] - sent, "last_arrival_s": arrivals[-1] - sent}


def run(model: str, repeats: int) -> None:
    import sglang
    if sglang.__version__ not in SGLANG_VERSIONS:
        raise SystemExit(f"SGLang {sglang.__version__}: this bench runs {', '.join(SGLANG_VERSIONS)} (the versions it "
                         "was read for)")
    from bench_vllm_api_server import _machine_cpu
    os.sched_setaffinity(0, {1})
    print(f"# SGLang front-end work per request: {_machine_cpu()}, SGLang {sglang.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    cells: dict[tuple[int, int], list[float]] = {}
    first_shares: dict[tuple[int, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for tokens in INTAKE_PROMPT_TOKENS:
                for size in INTAKE_BURSTS:
                    r = one_burst(model, size, tokens, Path(tmp))
                    cells.setdefault((size, tokens), []).append(r["last_arrival_s"] / size)
                    first_shares.setdefault((size, tokens), []).append(r["first_arrival_s"] / r["last_arrival_s"])
                    print(f"  burst {size} x {tokens} tokens: {r}", flush=True)
    a, b = print_intake(cells, first_shares)
    print(f"\nper request {a * 1e3:.2f} ms, per prompt token {b * 1e6:.2f} us (intake = a + b x prompt tokens)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    stand = sub.add_parser("standin", help="write the sgl-kernel stand-in into a venv's site-packages")
    stand.add_argument("--out", type=Path, required=True)
    go = sub.add_parser("run", help="the bursts")
    go.add_argument("--model", required=True, help="bench_vllm_api_server.py's tokenizer folder")
    go.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())  # SGLang's unpacked `sglang/` (see the setup above)
    if args.command == "standin":
        write_standin(args.out)
    else:
        run(args.model, args.repeats)


if __name__ == "__main__":
    main()
