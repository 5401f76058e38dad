"""What the benchmark client itself spends (issue 30): a benchmark tool's own request functions (`vllm bench serve`'s,
vLLM's older `benchmark_serving.py`'s, `sglang.bench_serving`'s), run on this machine's CPU against a stand-in server,
per request sent and per streamed event received. The numbers behind `sim/config/bench_clients.py` BENCH_CLIENTS.

`vllm bench serve` is one asyncio process (`asyncio.run`, vllm/benchmarks/serve.py): it sends every request, reads
every server-sent event of every stream, parses each one's JSON and timestamps it. Its TTFT and ITL are taken when it
gets round to an event, so when it falls behind, its own queue shows in the figures it prints.

- **The client**: vLLM's `async_request_openai_completions` / `async_request_openai_chat_completions`, loaded from the
  `vllm/benchmarks/lib/endpoint_request_func.py` given (`--request-funcs`), with the aiohttp session `serve.py` makes
  for a run without --max-concurrency (TCPConnector limit 0, keep-alive), every request of a burst started at once
  (request rate inf), as `serve.py` starts them. Pinned to core 0. The older tools (`--tool`; `TOOLS`) are loaded
  the same way from their own files, each request opening its own aiohttp session (so its own connection, and for a
  host name its own lookup) to the tool's default host, as their functions do; completions only, the endpoint their
  published runs used.
- **The stand-in server** (core 1, uvloop, HTTP/1.1 chunked): a decode step every `step_ms`, one event for every
  running stream, in the JSON vLLM's OpenAI server writes (chat: the role event first, as vLLM sends it with the
  first token), then the usage event (where the tool's era's server sends one: `vllm bench serve` asks for it) and
  `[DONE]`.

Measured: the client's CPU seconds over the burst (`time.process_time` in its process), the events it parsed, the
mean TTFT and TPOT it recorded (the TPOT against the server's step), and when the server read the burst's first and
last request (the order the client hands a burst over in: all at the end, as a shared process does, or one by one,
as first come, first served). Cells:

- **Per request**: bursts of 250, 500 and 1,000 requests of one output token (each reply: its token event, usage,
  [DONE]; chat: the role event too); CPU over requests.
- **Per event**: bursts of 500 requests of 128 tokens at steps of 50, 20, 10, 5 and 1 ms; (CPU - requests x per
  request) over the token events. At 50 ms the client keeps up and reads an event at a time; at shorter steps it
  falls behind, `iter_any` reads several events at once and an event costs less (its recorded TPOT then exceeds the
  step: the client's queue).

Setup (a venv with aiohttp, regex, tqdm and uvloop; vLLM's request functions from its wheel, nothing else of it):

    pip download --no-deps --only-binary :all: vllm==0.19.0 -d dl
    unzip -j dl/vllm-0.19.0-*.whl vllm/benchmarks/lib/endpoint_request_func.py -d vllm-0.19.0
    python benchmarks/bench_serve_client.py --request-funcs vllm-0.19.0/endpoint_request_func.py [--endpoint chat]

vLLM's `benchmark_serving.py` (the Lambda runs' client): benchmarks/backend_request_func.py of vllm-project/vllm at
011841309828ee36ff4c125eb2390b56e1c1bbad (its 0.6-era copy: a new `aiohttp.ClientSession` a request, Python 3.8
syntax), saved as a file; `sglang.bench_serving` (the SGLang v0.3.0 / vLLM v0.6.0 page's client) from SGLang 0.3.0's
wheel. Their tokenizer imports (transformers, huggingface_hub, requests, numpy) are stubbed, never called:

    python benchmarks/bench_serve_client.py --tool "vllm benchmark_serving.py" --request-funcs backend_request_func.py
    pip download --no-deps --only-binary :all: sglang==0.3.0 -d dl
    unzip -j dl/sglang-0.3.0-*.whl sglang/bench_serving.py -d sglang-0.3.0
    python benchmarks/bench_serve_client.py --tool sglang.bench_serving --request-funcs sglang-0.3.0/bench_serving.py
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import json
import multiprocessing
import os
import platform
import socket
import statistics
import subprocess
import time
from dataclasses import dataclass

COMPLETION_EVENT = {"id": "cmpl-0123456789abcdef0123456789abcdef", "object": "text_completion",
                    "created": 1764590000, "model": "Qwen/Qwen3-0.6B",
                    "choices": [{"index": 0, "text": " word", "logprobs": None, "finish_reason": None,
                                 "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
                                 "prompt_token_ids": None}], "usage": None}
CHAT_EVENT = {"id": "chatcmpl-0123456789abcdef0123456789abcdef", "object": "chat.completion.chunk",
              "created": 1764590000, "model": "Qwen/Qwen3-0.6B",
              "choices": [{"index": 0, "delta": {"content": " word"}, "logprobs": None, "finish_reason": None}]}
CHAT_ROLE_EVENT = {**CHAT_EVENT, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                              "logprobs": None, "finish_reason": None}]}
USAGE_EVENT = {"id": "cmpl-0123456789abcdef0123456789abcdef", "object": "text_completion", "created": 1764590000,
               "model": "Qwen/Qwen3-0.6B", "choices": [],
               "usage": {"prompt_tokens": 512, "total_tokens": 640, "completion_tokens": 128}}


def _sse(event) -> bytes:
    """One server-sent event as one HTTP/1.1 chunk."""
    data = (f"data: {event if isinstance(event, str) else json.dumps(event, separators=(',', ':'))}\n\n").encode()
    return b"%x\r\n" % len(data) + data + b"\r\n"


def most_files() -> None:
    """Raise this process's open-file limit to its hard limit: a burst holds a connection a request (as
    sglang.bench_serving's set_ulimit does for itself)."""
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def server_process(port: int, step_s: float, chat: bool, usage_event: bool = True) -> None:
    """The stand-in server: reads each request (keep-alive), then streams `max_tokens` events, one a step (then the
    usage event where its era's server sends one, and [DONE])."""
    import uvloop
    most_files()
    token, role, usage, done = (_sse(CHAT_EVENT if chat else COMPLETION_EVENT), _sse(CHAT_ROLE_EVENT),
                                _sse(USAGE_EVENT) if usage_event else b"",
                                _sse("[DONE]") + b"0\r\n\r\n")
    running: dict[int, list] = {}  # stream -> [writer, tokens left, finished future, tokens sent]
    arrivals: list[float] = []  # when each request was read (time.monotonic: one clock for both processes)

    async def stepper():
        while True:
            await asyncio.sleep(step_s)
            for key, stream in list(running.items()):
                writer, left, finished, sent = stream
                data = (role if chat and sent == 0 else b"") + token
                if left == 1:
                    data += usage + done
                    del running[key]
                    finished.set_result(None)
                else:
                    stream[1], stream[3] = left - 1, sent + 1
                writer.write(data)

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET /arrivals"):  # the client asks, after its burst
                    data = json.dumps(arrivals).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                                 % len(data) + data)
                    continue
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                body = json.loads(await reader.readexactly(length))
                arrivals.append(time.monotonic())
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                finished = asyncio.get_running_loop().create_future()
                running[id(finished)] = [writer, body.get("max_tokens") or body["max_completion_tokens"], finished, 0]
                await finished
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main():
        asyncio.get_running_loop().create_task(stepper())
        server = await asyncio.start_server(handle, None, port, backlog=8192)  # every interface: any tool's host
        await server.serve_forever()
    uvloop.run(main())


@dataclass(frozen=True)
class Tool:
    """A benchmark tool's client, as the bench runs it."""

    name: str  # as sim/config/bench_clients.py names it
    own_session: bool  # each request opens its own aiohttp session (and connection), as the tool's function does
    host: str  # the tool's default host (a name is resolved again by every new session)
    usage_event: bool  # the server of its era sends a usage event before [DONE] (vLLM's include_usage)
    stub_modules: tuple[str, ...] = ()  # imported at the file's top, never used by its request functions
    reads_args: bool = False  # its functions read the module's global `args` (the command line's stream flags)


TOOLS = {
    # vLLM's `vllm bench serve` (vllm/benchmarks/lib/endpoint_request_func.py): one session for the run, which
    # serve.py makes and passes to every request.
    "vllm bench serve": Tool("vllm bench serve", False, "127.0.0.1", True),
    # vLLM's benchmarks/benchmark_serving.py before `vllm bench serve` (benchmarks/backend_request_func.py): a new
    # session a request, to http://localhost:8000 by default.
    "vllm benchmark_serving.py": Tool("vllm benchmark_serving.py", True, "localhost", False,
                                      ("huggingface_hub", "huggingface_hub.constants", "transformers")),
    # SGLang's python -m sglang.bench_serving (python/sglang/bench_serving.py): a new session a request, to
    # http://0.0.0.0:<port> by default; its functions read the module's global `args`.
    "sglang.bench_serving": Tool("sglang.bench_serving", True, "0.0.0.0", False,
                                 ("numpy", "requests", "transformers"), reads_args=True),
}


def load_request_funcs(path: str, tool: Tool):
    """The tool's request functions from its own file; the modules it imports only for its tokenizer helpers are
    stubbed (the request functions never touch them)."""
    import sys
    import types
    for name in tool.stub_modules:
        if name not in sys.modules:
            stub = types.ModuleType(name)
            for attr in ("AutoTokenizer", "PreTrainedTokenizer", "PreTrainedTokenizerBase",
                         "PreTrainedTokenizerFast"):
                setattr(stub, attr, object)
            sys.modules[name] = stub
    spec = importlib.util.spec_from_file_location("request_funcs", path)
    funcs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(funcs)
    if tool.reads_args:  # streaming on, ignore_eos on: the tool's defaults
        funcs.args = argparse.Namespace(disable_stream=False, disable_ignore_eos=False)
    return funcs


def client_process(port: int, size: int, out_tokens: int, request_funcs: str, chat: bool, tool_name: str,
                   result) -> None:
    """One burst of `size` requests through the tool's request function, as the tool sends them."""
    tool = TOOLS[tool_name]
    most_files()
    funcs = load_request_funcs(request_funcs, tool)
    import aiohttp
    request = funcs.async_request_openai_chat_completions if chat else funcs.async_request_openai_completions
    url = f"http://{tool.host}:{port}/v1/{'chat/completions' if chat else 'completions'}"
    fields = {f.name for f in dataclasses.fields(funcs.RequestFuncInput)}

    async def burst():
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, use_dns_cache=True,
                                         keepalive_timeout=60, enable_cleanup_closed=True, force_close=False,
                                         ssl=False)  # serve.py's, for a run without --max-concurrency
        session = aiohttp.ClientSession(connector=connector, trust_env=True,
                                        timeout=aiohttp.ClientTimeout(total=6 * 60 * 60))

        def one():
            given = {"prompt": "hello " * 500, "api_url": url, "prompt_len": 512, "output_len": out_tokens,
                     "model": "Qwen/Qwen3-0.6B", "extra_request_body": {}}
            return funcs.RequestFuncInput(**{k: v for k, v in given.items() if k in fields})

        def send():
            return request(one()) if tool.own_session else request(one(), session)
        await send()  # warm-up: first-call imports, the first connection (the tools' own test request)
        cpu, sent, start = time.process_time(), time.perf_counter(), time.monotonic()
        outputs = await asyncio.gather(*(send() for _ in range(size)))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - sent
        async with session.get(f"http://127.0.0.1:{port}/arrivals") as response:
            arrivals = (await response.json())[1:]  # the burst's (after the warm-up's)
        await session.close()
        failed = [o.error for o in outputs if not o.success]
        assert not failed, failed[0]
        events = sum(len(o.itl) + 1 for o in outputs)  # the ones with a choice: each request's first and its gaps
        tpot = [(o.latency - o.ttft) / len(o.itl) for o in outputs if o.itl]
        result.put({"cpu_s": cpu, "wall_s": wall, "events": events, "first_arrival_s": min(arrivals) - start,
                    "last_arrival_s": max(arrivals) - start,
                    "mean_ttft_s": statistics.fmean(o.ttft for o in outputs),
                    "mean_tpot_s": statistics.fmean(tpot) if tpot else float("nan")})
    asyncio.run(burst())  # as serve.py runs it


def one_burst(size: int, out_tokens: int, step_ms: float, request_funcs: str, chat: bool,
              tool: str = "vllm bench serve") -> dict:
    ctx = multiprocessing.get_context("spawn")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ctx.Process(target=server_process, args=(port, step_ms / 1e3, chat, TOOLS[tool].usage_event))
    server.start()
    subprocess.run(["taskset", "-pc", "1", str(server.pid)], capture_output=True, check=True)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        result = ctx.Queue()
        client = ctx.Process(target=client_process,
                             args=(port, size, out_tokens, request_funcs, chat, tool, result))
        client.start()
        subprocess.run(["taskset", "-pc", "0", str(client.pid)], capture_output=True, check=True)
        out = result.get(timeout=900)
        client.join(10)
    finally:
        server.terminate()
        server.join(10)
    return out


def machine() -> str:
    """The CPU, its count, its widest vector ISA and Python's version (what every figure here is named with)."""
    flags = ""
    cpu = platform.processor()
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and not cpu:
            cpu = line.split(":", 1)[1].strip()
        if line.startswith("flags"):
            flags = line
            break
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{cpu}, {os.cpu_count()} CPUs, {isa}, Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--request-funcs", required=True, help="the tool's file of request functions (module docstring)")
    ap.add_argument("--tool", choices=sorted(TOOLS), default="vllm bench serve")
    ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    chat = args.endpoint == "chat"
    if chat and TOOLS[args.tool].own_session:
        ap.error(f"--endpoint chat: {args.tool}'s runs here are /v1/completions ones; only completions is measured")
    import aiohttp
    print(f"{machine()}, aiohttp {aiohttp.__version__}, {time.strftime('%Y-%m-%d %H:%M')}; client on core 0, "
          f"stand-in server on core 1; {args.tool}, /v1/{'chat/completions' if chat else 'completions'}")

    def median_cell(size, out_tokens, step_ms):
        runs = [one_burst(size, out_tokens, step_ms, args.request_funcs, chat, args.tool) for _ in range(args.repeats)]
        return {k: statistics.median(r[k] for r in runs) for k in runs[0]}

    per_request = []
    for size in (250, 500, 1000):
        cell = median_cell(size, 1, 50.0)
        per_request.append(cell["cpu_s"] / size)
        print(f"  {size:5} requests x 1 token: client CPU {cell['cpu_s']:.3f} s = {per_request[-1] * 1e3:.3f} ms a "
              f"request (events {cell['events']}, mean TTFT {cell['mean_ttft_s']:.3f} s; the server got the "
              f"first request at {cell['first_arrival_s']:.3f} s, the last at {cell['last_arrival_s']:.3f} s)")
    request_s = statistics.median(per_request)
    print(f"per request (median of the three): {request_s * 1e3:.3f} ms")
    size, out_tokens = 500, 128
    behind = []
    for step_ms in (50.0, 20.0, 10.0, 5.0, 1.0):
        cell = median_cell(size, out_tokens, step_ms)
        event_s = (cell["cpu_s"] - size * request_s) / (size * out_tokens)
        if cell["cpu_s"] >= SATURATED * cell["wall_s"]:
            behind.append(event_s)
        print(f"  {size} x {out_tokens} tokens, step {step_ms:4g} ms: client CPU {cell['cpu_s']:.3f} s over "
              f"{cell['wall_s']:.3f} s, {event_s * 1e6:.1f} us an event (after the requests' own), mean TPOT "
              f"{cell['mean_tpot_s'] * 1e3:.2f} ms against the step's {step_ms:g}")
    if behind:
        print(f"per event where the client fell behind (CPU >= {SATURATED:.0%} of the burst's wall time; the model's "
              f"figure, a chunk an event, no merging): median {statistics.median(behind) * 1e6:.1f} us of "
              f"{len(behind)} cells")
    return 0


# A cell where the client's CPU time is at least this share of the burst's wall time: the client was busy all
# along, behind the server (its reads merge events); the model's per-event figure is the median of those cells.
SATURATED = 0.95


if __name__ == "__main__":
    raise SystemExit(main())
