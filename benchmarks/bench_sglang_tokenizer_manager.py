"""What SGLang's HTTP front-end spends per request before its scheduler sees it, and per streamed chunk (issue 30),
measured by running the version's own server code on this machine's CPU, as bench_vllm_api_server.py does for vLLM.

SGLang serves HTTP in its main process: FastAPI, the OpenAI request's validation, the chat template, tokenization and
the ZMQ send to the scheduler all run there, in the `TokenizerManager`'s event loop
(python/sglang/srt/managers/tokenizer_manager.py), and so does every streamed chunk's response; the scheduler and the
detokenizer are processes of their own. Here:

- the **server**: SGLang's own `launch_server` (sglang/srt/entrypoints/http_server.py), with its real
  `TokenizerManager` and `DetokenizerManager`, no server warm-up (`--skip-server-warmup`), `--chat-template` given;
- the **scheduler**: a stand-in in the scheduler's process slot (`run_scheduler_process` replaced), which binds the
  scheduler's input socket, says it is ready as the scheduler does and notes when each tokenized request reached it.
  For the intake it finishes each request at once with one output token (a `BatchTokenIDOutput` to the detokenizer,
  as the scheduler sends it); to stream, it runs a decode step every STEP_S seconds, one message with a token for
  every running request, as the scheduler's stream_output does at stream_interval 1;
- the **client**: `vllm bench serve`'s requests (aiohttp, streaming; backend openai on /v1/completions, openai-chat
  on /v1/chat/completions), every request of a burst at once, counting the chunks it receives.

The main process runs alone on core 0, the scheduler, the detokenizer and the client on core 1.

- **Intake**: bursts of 40, 160 and 320 requests of 16 and 900 prompt tokens; a request's intake is the time the
  burst's last request reached the scheduler over the burst's size; the median over repeats per cell, then least
  squares of intake = per request + per prompt token x tokens. The order: the burst's first request's arrival over
  its last one's.
- **Per streamed chunk**: bursts of 160 requests of 16 prompt tokens streaming 1 and 41 tokens; the main process's
  extra CPU time over the extra chunks its clients received (a request whose tokens came faster than the main process
  sent them gets them merged into fewer chunks).

- **The request log**: `--server-options=--log-requests` starts the server with it (off by default); run in turn
  with and without (sim/config/engines/engine_work.py API_SERVER_WORK says what came of it).

Not measured: the real scheduler's own per-request work, the detokenizer's (its own process), other SGLang versions.

Setup (a venv of its own: torch 2.13.0+cpu and transformers 4.57.1, which SGLang 0.5.5.post1 pins, and the server's
imports; sgl-kernel's CUDA extension replaced by a stand-in module that imports and never runs, as the vLLM bench
unpacks vLLM without its `.so` files; Llama 3's tokenizer built by bench_vllm_api_server.py):

    mkdir /tmp/sgl && cd /tmp/sgl && python3 -m venv venv && echo torch==2.13.0 > c.txt
    venv/bin/pip install torch==2.13.0
    venv/bin/pip install -c c.txt transformers==4.57.1 'fastapi[standard]' uvloop msgspec pyzmq orjson dill ipython \
        aiohttp psutil requests prometheus-client partial-json-parser pillow 'numpy<2.3' sentencepiece tiktoken \
        py-cpuinfo pybase64 setproctitle einops openai openai-harmony blake3 scipy interegular outlines_core cbor2 \
        compressed-tensors pynvml tqdm hf_transfer triton gguf jsonschema
    venv/bin/pip download --no-deps sglang==0.5.5.post1 -d dl && unzip -q dl/sglang-0.5.5.post1-*.whl
    venv/bin/pip download --no-deps --only-binary :all: llama-models==0.3.0 -d dl
    unzip -q dl/llama_models-0.3.0-*.whl 'llama_models/llama3/*' -d dl
    venv/bin/python /work/main/benchmarks/bench_vllm_api_server.py tokenizer --llama-models dl --out llama3
    venv/bin/python /work/main/benchmarks/bench_sglang_tokenizer_manager.py standin \
        --out venv/lib/python3.11/site-packages
    venv/bin/python /work/main/benchmarks/bench_sglang_tokenizer_manager.py run --model llama3 \
        [--endpoint chat --chat-template TEMPLATE.jinja] [--phases intake,stream] [--repeats 3] \
        [--server-options=--log-requests]

(run from the folder holding SGLang's unpacked `sglang/`). The chat endpoint needs a template (the tokenizer folder
has none): RESULTS.md's figures used Qwen3's, 4,169 characters, the model's own (e.g. the `chat_template` of its
tokenizer_config.json, written out as a file).
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
from bench_vllm_api_server import (_burst, _machine_cpu, _prompts, add_run_options, run_phases,  # noqa: E402
                                   run_phases_of, server_options, step_s)

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


def _token_output(finished, rows):
    """A `BatchTokenIDOutput` as the scheduler's stream_output_generation builds it, one row per request:
    (rid, http_worker_ipc, prompt tokens, decode ids, read offset, new token, completion tokens)."""
    from sglang.srt.managers.io_struct import BatchTokenIDOutput
    n = len(rows)
    return BatchTokenIDOutput(
        spec_verify_ct=[], spec_accepted_tokens=[], queue_time=[0.0] * n, forward_entry_time=[time.monotonic()] * n,
        prefill_delay=[None] * n, prefill_latency=[None] * n, finished_reasons=finished,
        decoded_texts=[""] * n, decode_ids=[r[3] for r in rows], read_offsets=[r[4] for r in rows],
        output_ids=[[r[5]] for r in rows], skip_special_tokens=[True] * n, spaces_between_special_tokens=[True] * n,
        no_stop_trim=[False] * n, prompt_tokens=[r[2] for r in rows], completion_tokens=[r[6] for r in rows],
        cached_tokens=[0] * n, input_token_logprobs_val=[], input_token_logprobs_idx=[],
        output_token_logprobs_val=[], output_token_logprobs_idx=[], input_top_logprobs_val=[],
        input_top_logprobs_idx=[], output_top_logprobs_val=[], output_top_logprobs_idx=[],
        input_token_ids_logprobs_val=[], input_token_ids_logprobs_idx=[], output_token_ids_logprobs_val=[],
        output_token_ids_logprobs_idx=[], output_token_entropy_val=None, output_hidden_states=None,
        rids=[r[0] for r in rows], http_worker_ipcs=[r[1] for r in rows], placeholder_tokens_idx=None,
        placeholder_tokens_val=None, retraction_counts=[0] * n)


def standin_scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank, pipe_writer):
    """The scheduler's process slot: its sockets (scheduler.py init_sockets), its ready message, and every generate
    request's arrival noted; SIGUSR1 writes the arrivals to $SGLANG_BENCH_ARRIVALS. With $SGLANG_BENCH_OUT_TOKENS 1
    each request is finished at once with one token; with more, it runs decode steps every step_s() seconds, each one
    message to the detokenizer with a token for every running request (as scheduler_output_processor_mixin.py
    stream_output_generation sends a step's outputs at stream_interval 1), until each has its tokens."""
    import zmq
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.utils import get_zmq_socket
    context = zmq.Context(2)
    receive = get_zmq_socket(context, zmq.PULL, port_args.scheduler_input_ipc_name, False)
    to_detokenizer = get_zmq_socket(context, zmq.PUSH, port_args.detokenizer_ipc_name, False)
    out_tokens = int(os.environ.get("SGLANG_BENCH_OUT_TOKENS", "1"))
    step = step_s()
    arrivals: list[float] = []
    signal.signal(signal.SIGUSR1, lambda *_: Path(os.environ["SGLANG_BENCH_ARRIVALS"]).write_text(json.dumps(arrivals)))
    pipe_writer.send({"status": "ready", "max_total_num_tokens": 10**6, "max_req_input_len": 8192})
    running: dict[str, list] = {}  # rid -> [http_worker_ipc, prompt ids, tokens sent]
    next_step = time.monotonic() + step
    while True:
        wait_ms = None if not running else max(0.0, next_step - time.monotonic()) * 1e3  # None: until one comes
        if out_tokens == 1 or receive.poll(wait_ms):
            message = receive.recv_pyobj()
            if isinstance(message, TokenizedGenerateReqInput):
                arrivals.append(time.monotonic())
                if out_tokens == 1:
                    n = len(message.input_ids)
                    to_detokenizer.send_pyobj(_token_output([{"type": "length", "length": 1}],
                                                            [(message.rid, message.http_worker_ipc, n, [1000], 0,
                                                              1000, 1)]))
                else:
                    if not running:
                        next_step = time.monotonic() + step
                    running[message.rid] = [message.http_worker_ipc, list(message.input_ids), 0]
            continue
        rows, finished = [], []
        for rid, state in list(running.items()):
            ipc, prompt, sent = state
            token = 1000 + sent % 50  # ordinary word pieces of Llama 3's vocabulary
            if sent == 0:  # schedule_batch.py init_incremental_detokenize: the prompt's last 5 tokens lead
                tail = prompt[-5:]
                rows.append((rid, ipc, len(prompt), tail + [token], len(tail), token, 1))
            else:
                rows.append((rid, ipc, len(prompt), [token], 0, token, sent + 1))
            state[2] = sent + 1
            done = state[2] == out_tokens
            finished.append({"type": "length", "length": out_tokens} if done else None)
            if done:
                del running[rid]
        to_detokenizer.send_pyobj(_token_output(finished, rows))
        next_step += step


def server_process(model: str, port: int, log_file: str, chat_template: str | None) -> None:
    """SGLang's `launch_server` as `python -m sglang.launch_server --model-path MODEL [--chat-template FILE]
    [--server-options]` runs it (its own argument parsing: prepare_server_args), the scheduler's process replaced by
    `standin_scheduler`."""
    sys.stdout = open(log_file, "w", buffering=1)
    sys.stderr = sys.stdout
    from sglang.srt.entrypoints import engine
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args
    engine.run_scheduler_process = standin_scheduler
    argv = ["--model-path", model, "--port", str(port), "--device", "cpu", "--skip-server-warmup"]
    launch_server(prepare_server_args(argv + (["--chat-template", chat_template] if chat_template else [])
                                      + server_options()))


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def one_burst(model: str, size: int, prompt_tokens: int, work: Path, endpoint: str = "completions",
              out_tokens: int = 1, chat_template: str | None = None) -> dict:
    """One burst against a fresh server (after a warm-up burst of 5): when its first and last request reached the
    scheduler, the main process's CPU seconds over it and the chunks its clients received."""
    from bench_vllm_api_server import _cpu_s
    from transformers import AutoTokenizer
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    arrivals_file = work / "arrivals.json"
    arrivals_file.unlink(missing_ok=True)
    os.environ["SGLANG_BENCH_ARRIVALS"] = str(arrivals_file)
    os.environ["SGLANG_BENCH_OUT_TOKENS"] = str(out_tokens)
    server = multiprocessing.get_context("spawn").Process(
        target=server_process, args=(model, port, str(work / "server.log"), chat_template))
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
        url = f"http://127.0.0.1:{port}/v1/{'chat/completions' if endpoint == 'chat' else 'completions'}"
        asyncio.run(_burst(url, model, prompts[:5], out_tokens))  # warm-up: first-call imports and caches
        time.sleep(1.0)
        cpu_before = _cpu_s(server.pid)
        sent = time.monotonic()
        chunks = asyncio.run(_burst(url, model, prompts[5:], out_tokens))
        cpu = _cpu_s(server.pid) - cpu_before
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
    return {"first_arrival_s": arrivals[0] - sent, "last_arrival_s": arrivals[-1] - sent, "main_cpu_s": cpu,
            "chunks": sum(chunks)}


def run(model: str, repeats: int, endpoint: str, chat_template: str | None, phases: tuple[str, ...]) -> None:
    import sglang
    if sglang.__version__ not in SGLANG_VERSIONS:
        raise SystemExit(f"SGLang {sglang.__version__}: this bench runs {', '.join(SGLANG_VERSIONS)} (the versions it "
                         "was read for)")
    os.sched_setaffinity(0, {1})
    template = f", chat template {chat_template}" if chat_template else ""
    options = f", server options {' '.join(server_options())}" if server_options() else ""
    print(f"# SGLang front-end work per request and per chunk, /v1/{endpoint}{template}{options}: {_machine_cpu()}, "
          f"SGLang {sglang.__version__}, {time.strftime('%Y-%m-%d %H:%M')}")
    with tempfile.TemporaryDirectory() as tmp:
        run_phases(lambda size, tokens, out_tokens: one_burst(model, size, tokens, Path(tmp), endpoint, out_tokens,
                                                              chat_template),
                   phases, repeats, repeats, "main_cpu_s", "the main process's CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    stand = sub.add_parser("standin", help="write the sgl-kernel stand-in into a venv's site-packages")
    stand.add_argument("--out", type=Path, required=True)
    go = sub.add_parser("run", help="the bursts")
    go.add_argument("--model", required=True, help="bench_vllm_api_server.py's tokenizer folder")
    add_run_options(go, repeats=3, server="SGLang")
    go.add_argument("--server-options", default="", help="more options for the server, as one string (e.g. "
                    "--log-requests, off by default)")
    args = parser.parse_args()
    os.environ["BENCH_SERVER_OPTIONS"] = getattr(args, "server_options", "")  # read by the spawned servers
    sys.path.insert(0, os.getcwd())  # SGLang's unpacked `sglang/` (see the setup above)
    if args.command == "standin":
        write_standin(args.out)
    else:
        run(args.model, args.repeats, args.endpoint, args.chat_template, run_phases_of(parser, args, during=False))


if __name__ == "__main__":
    main()
