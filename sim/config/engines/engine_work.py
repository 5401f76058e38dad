"""What sits around the kernels, as the presets write it into a scenario: the API server's measured work per
request and per chunk, the chat template's parse, and the engine's fitted CPU terms.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sim.config.engines.base import Context, dotted_version, get_key, parse_version
from sim.config.engines.fitted import fit_name, fitted_terms, nearest_fits, release_distance
from sim.workload.generate import endpoint_of


# The preset's front-end is one fitted delay, and, where a version's API-server work was measured, or where its
# fitted delay was fitted beside measured work, the nearest measured release's of its kind (`measured_work`), that
# work, which queues; elsewhere nothing in it queues, so a burst of short prompts is never front-end bound there, as
# published ones were. No term that queues is fitted: the published runs disagree on how the work queues and leave
# the host's CPU unstated (benchmarks/results/published-e2e.md, "A fifth source").
FRONTEND_CAPACITY_NOTE = ("front-end: a fitted delay that does not queue, so the API server's capacity is not modelled "
                          "(bursts of short prompts can be front-end bound); frontend.per_request_s adds work that "
                          "queues")
QUEUEING_FRONTEND_TERMS = ("per_request_s", "per_prompt_token_s", "per_output_chunk_s")  # a user's own: no note


@dataclass(frozen=True)
class TemplateParse:
    """vLLM versions whose API server parses the chat template's source anew for every chat request."""

    since: tuple[int, ...]  # the first version that does
    until: tuple[int, ...]  # the first that no longer does
    work_s: float  # one request's parse (seconds of the API server's event loop)
    what: str  # what it runs, as the source names it


# vLLM's OpenAI server renders a /v1/chat/completions request's messages through the model's Jinja chat template,
# synchronously in its event loop: work that queues on the API server process. The render itself is cheap
# (transformers caches the compiled template), but two version ranges also parse the template's source again per
# request, read in vllm/entrypoints/chat_utils.py of 22 releases (PyPI sdists and wheels: 0.6.0, 0.6.3, 0.6.4, 0.6.6,
# 0.7.0, 0.7.3, 0.8.0-0.8.5, 0.9.0-0.9.2, 0.10.0-0.10.2, 0.11.0, 0.11.1, 0.12.0): 0.8.2 to 0.9.1 through
# resolve_chat_template_content_format (cached to 0.8.1, cached again in 0.9.2 by pull request 20065, "6-8 seconds
# delay" for 1,000 requests), and 0.11.0 through resolve_chat_template_kwargs (absent to 0.10.2, cached from 0.11.1).
# Each costs what benchmarks/bench_chat_template.py measured for Qwen3's chat template (4,169 characters) on the
# development machine (AMD EPYC KVM guest, AVX2, CPython 3.11.7, jinja2 3.1.6, 11-30 13:35): the minimum over 3
# processes x 7 rounds (an unloaded core; the median was 12.0 and 33.8 ms); its spread,
# ESTIMATE_RANGES["per_request_s"].
TEMPLATE_PARSES = (
    TemplateParse((0, 8, 2), (0, 9, 2), 7.5e-3, "_detect_content_format: the template parsed, its loops walked"),
    TemplateParse((0, 11, 0), (0, 11, 1), 17.9e-3,
                  "resolve_chat_template_kwargs: the template parsed in a new environment, its undeclared variables "
                  "found"),
)
# gpt-oss's chat requests go through openai_harmony instead of the Jinja template (serving_chat.py use_harmony)
HARMONY_MODEL_TYPES = ("gpt_oss",)


def chat_template_parse(version: tuple[int, ...], model_type: str | None, endpoint: str) -> TemplateParse | None:
    """The per-request template parse a vLLM version's API server does for this model and endpoint, or None: only
    chat requests are rendered through a template, and a harmony model's are not."""
    if endpoint != "chat" or model_type in HARMONY_MODEL_TYPES:
        return None
    return next((p for p in TEMPLATE_PARSES if p.since <= version < p.until), None)


@dataclass(frozen=True)
class ApiServerWork:
    """An engine version's HTTP front-end work that queues, measured by running that version's own server code."""

    engine: str  # the preset: vllm, sglang
    since: tuple[int, ...]  # the first version measured to do it
    until: tuple[int, ...]  # the first version not measured (another front-end, or not run)
    per_request_s: float  # a request's intake: HTTP, the request model, the request log, the RPC send
    per_prompt_token_s: float  # and per prompt token: tokenization, the logged token ids, their pickling
    # one streamed chunk: the response model, its JSON, the SSE write (None: not run). The model streams a chunk a
    # token; V1's and SGLang's servers merge a request's pending tokens into one chunk when behind, so what a loaded
    # server spends a token is what counts: measured with the tokens ahead of the server (0.6.0, whose streams do not
    # merge: a chunk a token)
    per_output_chunk_s: float | None
    discipline: str  # how its process serves a burst of open arrivals (sim/frontend.py): event_loop, fifo
    bench: str  # what measured it
    # the workload endpoints it is taken for: a row measured on /v1/completions alone serves both (a chat request's
    # own work is not measured there); vLLM 0.11.0's and SGLang 0.5.5.post1's were measured on each
    endpoints: tuple[str, ...] = ("completions", "chat")
    # where the figures are another row's times ratios measured in turn with it on one host (seconds measured in
    # another window do not compare): which, said in the preset's note; "" where the row is its own measurement
    scaled_from: str = ""

    def covers(self, version: tuple[int, ...]) -> bool:
        """Whether this row was measured for `version` (its own; another version may still take it as the nearest
        measured: `lent_api_server_work`)."""
        return self.since <= version < self.until


# vLLM 0.6.0's OpenAI server with its multiprocessing front-end (the default in 0.6.0: AsyncEngineRPCClient, one
# new inproc socket and a cloudpickled RPCGenerateRequest per request, every RequestOutput pickled back), request
# logging on (no --disable-log-requests), run for real from its PyPI wheel on the development machine against a
# stand-in engine (benchmarks/bench_vllm_api_server.py; "AMD EPYC" KVM guest, 2 vCPUs, AVX-512, CPython 3.11.7,
# the API server alone on one core, 11-30 19:05): bursts of 40, 160 and 320 /v1/completions requests of 16 and 900
# prompt tokens (Llama 3's tokenizer), 5 repeats, each request's intake the time the burst's last request reached
# the engine over the burst's size (its requests reach it together, in turn between awaits: processor sharing); the
# medians per cell fitted as per request + per prompt token; a streamed chunk from the API server's CPU time per
# chunk (bursts of 160 streaming 1 and 41 tokens, 3 repeats). vLLM 0.11.0's V1 server the same way (11-30 20:07;
# its AsyncLLM tokenizes and detokenizes in the API server process; the stand-in engine core in that process, the
# ZMQ hop to the real one not measured; its defaults: no request log, uvloop). V1's requests do not all reach the
# engine at the end of a burst as event_loop has them: in six bursts of 320 (12-01 00:12) the first arrived at 21-62%
# of the last one's time, after 0.5-1.3 ms a request shared by all (results/published-e2e.md): event_loop hands a
# burst's first requests over late. vLLM 0.10.2's V1 server the same way (12-01 05:08-05:19, the same machine; in
# bursts of 160 and 320 its first request arrived at 20-48% of the last one's time). Their stand-in core queued a
# request's tokens at once, so the server, behind, merged them (RequestOutputCollector): 20 and 23 us are the CPU per
# token of a loaded server. A chunk a token costs more (12-01 10:55-11:03, another "AMD EPYC" guest, 2 vCPUs, AVX2,
# the stand-in stepping every 50 ms, one EngineCoreOutputs for every running request; the CPU over the chunks the
# clients received, one a token): 136 us (0.11.0) and 106 us (0.10.2) a chunk, which only a server that keeps up
# pays. vLLM 0.11.0's chat endpoint (10:44-10:55, that guest): /v1/chat/completions requests as `vllm bench serve
# --backend openai-chat` sends them, rendered through Qwen3's chat template with 0.11.0's per-request parse cached
# (as 0.11.1 caches it: TEMPLATE_PARSES prices it), fitted as above. Its streaming was not run with the tokens all
# ahead of the server: it takes the completions row's 20 us a token (the two endpoints agreed within the noise
# where both ran: 119 against 136 us a chunk at a step of 50 ms, 80 against 72 us a token at 1 ms).
# SGLang 0.5.5.post1's HTTP front-end the same way (benchmarks/bench_sglang_tokenizer_manager.py, 12-01 06:33-06:40,
# the same machine): its own `launch_server`, whose main process serves HTTP and runs the TokenizerManager (the
# request model, tokenization, the ZMQ send), with its real detokenizer and a stand-in scheduler; bursts of 40, 160
# and 320 /v1/completions requests of 16 and 900 prompt tokens, 3 repeats, fitted as vLLM's.
# Its requests reach the scheduler one by one as each is tokenized, though not one request's work apart: a burst's
# first arrived at 13-35% of the last one's time (medians per cell), where first come, first served hands it over
# after one request's work and event_loop at the end: fifo, the nearer. Its chat endpoint the same way (12-01
# 10:02-10:14, another "AMD EPYC" guest, 2 vCPUs, AVX2 where the first had AVX-512): /v1/chat/completions requests as
# `vllm bench serve --backend openai-chat` sends them, rendered through Qwen3's chat template (4,169 characters) and
# tokenized in the main process; its first arrivals at 7-31% of the last (fifo). Its streaming on each endpoint (that
# AVX2 guest, the chat one 10:14-10:17, /v1/completions 10:17-10:21): bursts of 160 requests of 16 prompt tokens
# streaming 1 and 41 tokens, the stand-in scheduler sending a decode step's tokens every 50 ms (one message for all
# running requests, as its stream_output does), the main process's extra CPU time over the extra chunks its clients
# received (the detokenizer, a process of its own, not counted): a chunk a token costs 121 us (chat) and 82 us
# (completions) at a step of 50 ms; at 1 ms (11:07-11:17) the main process falls behind and merges ~1.8 tokens a
# chunk: 67 us (chat) and 59 us (completions) a token, the rows' figures (the chat endpoint at a step of 0.01 ms
# merged no further).
#
# vLLM 0.19.0's V1 server the same way (its build_app and init_app_state as its build_and_serve calls them), side by
# side with 0.11.0's on one host in one window (12-01 23:18 to 12-02 00:03, the development machine: "AMD EPYC" KVM
# guest, 2 vCPUs, AVX2, CPython 3.11.7, whose speed that evening gave 0.11.0's intake 4.02 ms a request where 0.11.0's
# row took 1.57 on 11-30: seconds from another window do not compare, so 0.19.0's row is 0.11.0's /v1/completions row
# times the ratios of the two versions in this window, `V0190_OVER_V0110`): intake 4.42 ms + 5.81 us a prompt token (5
# repeats) against 4.02 ms + 4.61 us (3 repeats); a loaded server's token (the stand-in stepping every 0.01 ms, far
# ahead: each stream merged into one chunk) 76.6 against 53.1 us (9 repeats each, three runs in turn, the medians'
# difference); a chunk a token at a step of 50 ms 138 against 158 us (3 repeats each; not in the row: a loaded server's
# token is). Its first requests reached the engine at 16-43% of the last one's time (medians per cell; 0.11.0 22-66% in
# the same window): event_loop, as 0.11.0's. It serves both endpoints, as 0.10.2's (its chat render was not run).
# Repeats of one cell spread by up to 2x. No other version has work that queues here. Spread: ESTIMATE_RANGES.
#
# vLLM 0.6.0 with its request log off (--disable-log-requests, as the SGLang page's 0.6.0 runs served; the row above
# has it on, 0.6.0's default), in turn with it on (12-02 11:58-12:14, another "AMD EPYC" guest, 2 vCPUs, AVX-512,
# CPython 3.11.7; five alternations of one intake repeat and three streaming pairs each; the medians per cell
# fitted as above): off 1.305 ms a request + 1.061 us a prompt token, 127 us a chunk; on 1.311 ms + 1.096 us, 136 us
# (ratios 0.995, 0.968, 0.931), where single runs of one setting spread from 1.00 to 1.68 ms a request. No difference
# beyond the noise: the row serves both, and --disable-log-requests is accepted without effect.
#
# SGLang 0.5.5.post1 with its request log on (--log-requests, at its default level 2: metadata, sampling parameters,
# input and output cut at 2,048 characters; sglang/srt/managers/tokenizer_manager.py), in turn with it off (12-04
# 20:43-21:10, "AMD EPYC" KVM guest, 2 vCPUs, AVX-512, CPython 3.11.7; four alternations of one intake repeat and one
# streaming pair each; the medians per cell fitted as above): off 1.238 ms a request + 2.236 us a prompt token, 47.7 us
# a chunk; on 1.321 ms + 2.445 us, 57.0 us (ratios 1.067, 1.094, 1.197), where single runs of one setting spread from
# 1.15 to 1.42 ms a request (on: 1.22 to 1.66) and 44 to 64 us a chunk (on: 36 to 63). No difference beyond the noise
# (an effect of up to a fifth a chunk is not ruled out): the row serves both, and --log-requests is accepted without
# effect (sim/config/engines/sglang.py SGLANG_REQUEST_LOG_SINCE).
V0190_OVER_V0110 = {"per_request_s": 4.42 / 4.02, "per_prompt_token_s": 5.81 / 4.61,
                    "per_output_chunk_s": 76.6 / 53.1}
# vLLM 0.13.0's V1 server the same way (its init_app_state reads the config from the client), in turn with 0.11.0's,
# both from one venv (transformers 4.57, which warns that Llama 3's converted tokenizer has "an incorrect regex
# pattern": the same tokens for both), 12-07 04:09-04:27, the development machine ("Intel(R) Xeon(R) Processor" KVM
# guest, 2 vCPUs, AVX-512, CPython 3.11.7): four alternations of one intake repeat, then three of a loaded server's
# token (a step of 0.01 ms); the medians per cell over the four fitted as above. Intake 1.576 ms + 1.904 us a prompt
# token against 1.452 ms + 1.942 us; a loaded server's token 31, 31, 31 us against 30, 33, 30 (medians 31 and 30). Its
# first requests reached the engine at 39-73% of the last one's time (0.11.0 35-70%): event_loop. Its chat render was
# not run: its chat requests take 0.11.0's chat row (`lent_api_server_work`). Before this row, 0.13.0 took 0.11.0's
# rows by that rule, which these ratios put within 9% a request, 2% a prompt token and 3% a streamed token.
V0130_OVER_V0110 = {"per_request_s": 1.576 / 1.452, "per_prompt_token_s": 1.904 / 1.942, "per_output_chunk_s": 31 / 30}
# vLLM 0.8.4's and 0.9.2's V1 servers the same way, in turn with 0.11.0's (12-07 06:09-06:43, that machine; 0.11.0 from
# the venv above, the two older ones with transformers 4.53.3 and tokenizers 0.21.4 of their era ahead on the path,
# 0.9.2's code refusing 4.54+; V1 by VLLM_USE_V1=1, whose oracle refuses it on the CPU platform and takes it on a
# GPU, so the bench skips it; their default request log on; 0.8.4's output handler asserts a step's scheduler stats,
# which its stand-in sends with each output: one a request in the intake bursts, one a step on a GPU, a cost not
# sized apart): four rounds of one intake repeat each (0.8.4, 0.9.2, 0.11.0 in turn), then three of a loaded
# server's token. Intake 1.696 ms + 1.735 us a prompt token (0.8.4) and 1.223 ms + 2.760 us (0.9.2) against
# 1.613 ms + 1.697 us; single rounds 1.53-2.14 ms (0.8.4), 1.08-1.35 (0.9.2), 1.28-1.75 (0.11.0) a request. A loaded
# server's token: 16, 34, 12 us (0.8.4), 14, 22, 30 (0.9.2) against 33, 30, 33 (medians 16, 22, 33). First requests
# reached the engine at 22-85% (0.8.4) and 25-66% (0.9.2) of the last one's time: event_loop. Their chat render was
# not run. Before these rows both took 0.10.2's row (`lent_api_server_work`): 0.8.4's own is within 5% a request and
# 12% a prompt token of it, 0.9.2's 24% under it a request and 78% over it a prompt token; a streamed token 0.48x and
# 0.67x 0.11.0's.
V0084_OVER_V0110 = {"per_request_s": 1.696 / 1.613, "per_prompt_token_s": 1.735 / 1.697, "per_output_chunk_s": 16 / 33}
V0092_OVER_V0110 = {"per_request_s": 1.223 / 1.613, "per_prompt_token_s": 2.760 / 1.697, "per_output_chunk_s": 22 / 33}
# Every V1 release measured in turn with 0.11.0, by its ratios to it (each one's row is 0.11.0's times them)
RATIOS_TO_V0110 = {(0, 8, 4): V0084_OVER_V0110, (0, 9, 2): V0092_OVER_V0110, (0, 13, 0): V0130_OVER_V0110,
                   (0, 19, 0): V0190_OVER_V0110}
_VLLM_BENCH = "benchmarks/bench_vllm_api_server.py"
_SGLANG_BENCH = "benchmarks/bench_sglang_tokenizer_manager.py"
_VLLM_0110 = ApiServerWork("vllm", (0, 11, 0), (0, 11, 1), 1.57e-3, 2.18e-6, 20e-6, "event_loop", _VLLM_BENCH,
                           ("completions",))


def _in_turn_with_0110(version: tuple[int, ...], endpoints: tuple[str, ...] = ("completions",)) -> ApiServerWork:
    """The row of a vLLM release measured in turn with 0.11.0: 0.11.0's /v1/completions row times its ratios
    (`RATIOS_TO_V0110`), for that release alone."""
    return dataclasses.replace(
        _VLLM_0110, since=version, until=version[:2] + (version[2] + 1,), endpoints=endpoints,
        scaled_from=f"0.11.0's /v1/completions row times {dotted_version(version)}'s ratios to it, measured in turn",
        **{term: getattr(_VLLM_0110, term) * ratio for term, ratio in RATIOS_TO_V0110[version].items()})


API_SERVER_WORK = (
    ApiServerWork("vllm", (0, 6, 0), (0, 6, 1), 1.24e-3, 1.69e-6, 162e-6, "event_loop", _VLLM_BENCH),
    ApiServerWork("vllm", (0, 10, 2), (0, 10, 3), 1.57e-3, 1.99e-6, 23e-6, "event_loop", _VLLM_BENCH),
    _VLLM_0110,
    ApiServerWork("vllm", (0, 11, 0), (0, 11, 1), 3.30e-3, 3.52e-6, 20e-6, "event_loop", _VLLM_BENCH, ("chat",)),
    _in_turn_with_0110((0, 8, 4)),
    _in_turn_with_0110((0, 9, 2)),
    _in_turn_with_0110((0, 13, 0)),
    _in_turn_with_0110((0, 19, 0), ("completions", "chat")),
    ApiServerWork("sglang", (0, 5, 5), (0, 5, 6), 1.21e-3, 1.85e-6, 59e-6, "fifo", _SGLANG_BENCH,
                  ("completions",)),
    ApiServerWork("sglang", (0, 5, 5), (0, 5, 6), 2.42e-3, 2.07e-6, 67e-6, "fifo", _SGLANG_BENCH, ("chat",)),
)


def api_server_work(version: tuple[int, ...], engine: str = "vllm",
                    endpoint: str = "completions") -> ApiServerWork | None:
    """The measured front-end work of this engine version on this endpoint (`API_SERVER_WORK`), or None where none
    was measured."""
    return next((w for w in API_SERVER_WORK
                 if w.engine == engine and w.covers(version) and endpoint in w.endpoints), None)


# Where an engine's API server changed kind, so that one kind's measured work says nothing of the other's: vLLM V1's
# (from 0.8.0, its default engine: AsyncLLM tokenizes and detokenizes in the API server process) against V0's.
SERVER_KIND_SINCE = {"vllm": ((0, 8, 0),)}


def server_kind(engine: str, version: tuple[int, ...], v0_fallback: bool = False) -> int:
    """Which kind of API server this engine version runs (`SERVER_KIND_SINCE`: 0 before the first change); a vLLM
    0.8-0.10 setup that falls back to V0 (`v0_fallback`, vllm.py `_vllm_v0_fallback`) runs V0's, kind 0."""
    return 0 if v0_fallback else sum(version >= since for since in SERVER_KIND_SINCE.get(engine, ()))


def lent_api_server_work(version_text: str, engine: str, endpoint: str, fits: dict | None = None,
                         v0_fallback: bool = False) -> ApiServerWork | None:
    """For a version whose own front-end work was not measured: the row of the nearest measured release of its
    server's kind (`release_distance`, `server_kind`) on the endpoint, where the front-end latency the version takes
    was fitted beside measured work (its fit's version has a row); else None.

    The fitted latency is what the fit runs' front-ends took beyond the work measured for their version. Taken alone,
    it left such a version's server doing no work that queues, which every server measured does (1.2-1.7 ms a request
    and 20-160 us a streamed token, vLLM 0.6.0 to 0.19.0): a burst of short prompts never front-end bound. `fits`: as
    `nearest_fits`'s; `v0_fallback`: as `server_kind`'s."""
    version = parse_version(version_text)
    fit = nearest_fits(engine, version_text, fits).get("latency_s")
    fitted = parse_version(fit.version) if fit is not None else None
    if version is None or fitted is None or not any(w.engine == engine and w.covers(fitted) for w in API_SERVER_WORK):
        return None
    kind = server_kind(engine, version, v0_fallback)
    rows = [w for w in API_SERVER_WORK
            if w.engine == engine and endpoint in w.endpoints and server_kind(engine, w.since) == kind]
    return min(rows, key=lambda w: release_distance(w.since, version), default=None)


def measured_work(engine: str, version_text: str, model_type: str | None, endpoint: str, fits: dict | None = None,
                  v0_fallback: bool = False) -> tuple[ApiServerWork | None, TemplateParse | None]:
    """An engine version's measured front-end work: its intake and streaming on the endpoint (`api_server_work`,
    else the nearest measured release's: `lent_api_server_work`) and, for vLLM, the chat-template parse of the
    versions that parse per request (`chat_template_parse`); None where there is none. vLLM's chat requests of a
    harmony model take the /v1/completions row: openai_harmony renders and parses them, where the chat rows were
    measured through a Jinja template. `fits`: as `nearest_fits`'s. A vLLM setup that falls back to V0
    (`v0_fallback`) runs V0's API server, so it takes V0's row, not its release's V1 row."""
    version = parse_version(version_text)
    parse = chat_template_parse(version, model_type, endpoint) if engine == "vllm" else None
    if engine == "vllm" and endpoint == "chat" and model_type in HARMONY_MODEL_TYPES:
        endpoint = "completions"
    own = None if v0_fallback else api_server_work(version, engine, endpoint)
    return (own if own is not None else lent_api_server_work(version_text, engine, endpoint, fits, v0_fallback)), parse


def work_keys(intake: ApiServerWork | None, parse: TemplateParse | None) -> dict[str, float]:
    """The front-end keys of a version's measured intake and its template parse (both add to per_request_s)."""
    work: dict[str, float] = {}
    if intake is not None:
        work = {"per_request_s": intake.per_request_s, "per_prompt_token_s": intake.per_prompt_token_s}
        if intake.per_output_chunk_s is not None:
            work["per_output_chunk_s"] = intake.per_output_chunk_s
    if parse is not None:
        work["per_request_s"] = work.get("per_request_s", 0.0) + parse.work_s
    return work


# Per engine: its name, its HTTP server's, and where that work runs
_SERVER_NAMES = {"vllm": ("vLLM", "API server", ""),
                 "sglang": ("SGLang", "HTTP front-end", " (the TokenizerManager in its main process)")}
# Where a row measured on one endpoint says so (vLLM's, measured on /v1/completions, are taken for both)
_MEASURED_ON = {("completions",): " on /v1/completions",
                ("chat",): " on /v1/chat/completions, Qwen3's chat template rendered"}
# How each discipline serves a burst, as the notes say it
_DISCIPLINE_NOTES = {
    "event_loop": "its requests served in turn (frontend.discipline: event_loop, as its event loop takes them between "
                  "awaits, none overtaking one sent before it)",
    "fifo": "its requests served first come, first served (frontend.discipline: fifo, each sent on to the scheduler "
            "once tokenized)",
}


def inbound_work(ctx: Context, engine: str, notes: list[str], v0_fallback: bool = False) -> tuple[dict, str]:
    """The front-end work of this engine version that queues (`measured_work`; `v0_fallback`: a vLLM setup that falls
    back to V0), as front-end keys for the preset's own front-end, and the note that says so; ({}, "") where there is
    none."""
    model_type = ctx.model.model_type if ctx.model is not None else None
    endpoint = endpoint_of(ctx.raw.get("workload"))
    intake, parse = measured_work(engine, ctx.version_text, model_type, endpoint, ctx.fits, v0_fallback)
    if (engine == "vllm" and endpoint == "chat" and model_type in HARMONY_MODEL_TYPES
            and chat_template_parse(ctx.version, None, endpoint)):
        notes.append(f"vLLM {ctx.version_text}: {model_type}'s chat requests are rendered by openai_harmony, not "
                     "its Jinja template: no template parse per request")
    if endpoint == "chat" and intake is not None and "chat" not in intake.endpoints:  # measured_work's choice
        notes.append(f"vLLM {ctx.version_text}: {model_type}'s chat requests (openai_harmony's) take the API server's "
                     "work measured on /v1/completions; its chat endpoint was measured through a Jinja template")
    work = work_keys(intake, parse)
    if not work:
        return {}, ""
    label, server, where = _SERVER_NAMES[engine]
    open_arrivals = get_key(ctx.raw, "workload.arrival.kind") != "closed_loop"
    said = []
    if intake is not None:
        chunk = ("its streaming not run (no per_output_chunk_s)" if intake.per_output_chunk_s is None else
                 f"{intake.per_output_chunk_s * 1e6:.0f} us a streamed chunk on the way out (per_output_chunk_s)")
        on = _MEASURED_ON.get(intake.endpoints, "")
        own = intake.covers(ctx.version)
        measured = ctx.version_text if own else dotted_version(intake.since)
        whose = "that of the V0 engine it falls back to, not measured in this release" if v0_fallback else (
            "its own not measured")
        lent = "" if own else (
            f" ({whose}: {label} {measured}'s, the nearest measured release whose {server} is of its "
            "kind, since the front-end latency it takes was fitted beside such work)")
        said.append(f"its {server}'s own work{where}, measured by running {label} {measured}'s server code "
                    f"({intake.bench}){on}{f' as {intake.scaled_from}' if intake.scaled_from else ''}{lent}: "
                    f"{intake.per_request_s * 1e3:.2f} ms a request + "
                    f"{intake.per_prompt_token_s * 1e6:.2f} us a prompt token on the way in (frontend.per_request_s, "
                    f"per_prompt_token_s), {chunk}")
    if parse is not None:
        said.append(f"it parses the chat template again for every chat request ({parse.what}; "
                    f"vllm/entrypoints/chat_utils.py, {dotted_version(parse.since)} to before "
                    f"{dotted_version(parse.until)}): "
                    f"{parse.work_s * 1e3:.1f} ms a request (frontend.per_request_s, measured for Qwen3's template: "
                    "benchmarks/bench_chat_template.py)")
    discipline = intake.discipline if intake is not None and open_arrivals else "fifo"
    note = (f"{label} {ctx.version_text}: " + "; ".join(said) + f", work that queues on the {server}, "
            + (_DISCIPLINE_NOTES[discipline] if open_arrivals
               else "first come, first served in a closed loop (the one discipline modelled there)")
            + "; the rest of the front-end is the fitted delay, which does not queue")
    return {**work, "discipline": discipline}, note


def preset_terms(ctx: Context, name: str, notes: list[str], inbound: tuple[dict, str] | None = None) -> dict:
    """The preset's CPU terms and front-end, fitted where the suite fitted them (`fitted_terms`).

    The CPU time is priced serially (kernels + CPU), also for the engines that overlap it with the GPU (SGLang's
    overlap scheduler, TensorRT-LLM 1.x's PyTorch backend): on the published suite's fit runs, pricing a step as the
    longer of the two (`cost_model.overhead.overlap: true`) missed by more (SGLang c4 throughput +13% against +2%,
    ShareGPT +107% against +4%; TensorRT-LLM ShareGPT +137% against +108%; 11-25), so the fitted per-step term is the
    CPU time the overlap leaves exposed."""
    values: dict[str, Any] = {}
    work, work_note = inbound or ({}, "")
    found = fitted_terms(name, ctx.version_text, ctx.fits)
    overhead: dict[str, Any] = {"engine": "vllm-cudagraph"}
    if found is None:
        notes.append(f"{name}: no fitted CPU terms or front-end: vLLM's estimates (sim/cost/overhead.py), no front-end")
    else:
        terms, where = found
        overhead.update({k: v for k, v in terms.items() if k in ("per_step_s", "per_seq_s", "per_prefill_token_s")})
        cpu_fits = sorted({fit.version for term, fit in nearest_fits(name, ctx.version_text, ctx.fits).items()
                           if term in overhead})
        if cpu_fits:  # the label names whose fit they are (`overhead.engine` names only the defaults they replace)
            overhead["fitted_for"] = fit_name(name, cpu_fits)
        if "latency_s" in terms:
            # num_processes left to the engine's flag (api_server_count) or the default, one: vLLM's single API server
            values["frontend"] = {"per_request_s": 0.0, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
                                  "latency_s": terms["latency_s"], **work}
        own = ctx.raw.get("frontend", values.get("frontend"))  # the scenario's own front-end wins over the preset's
        if own is None and "latency_s" in terms:  # the scenario's frontend: null, its latency unused
            notes.append(f"{name}: CPU terms {where}; no front-end (the scenario's frontend: null), so neither its "
                         "fitted latency nor its API server's work is in the client's times")
        else:
            notes.append(f"{name}: CPU terms and front-end latency {where}")
        if work and isinstance(own, dict) and own.get("per_request_s") == work["per_request_s"]:
            notes.append(work_note)  # only where the scenario's front-end does this version's work
        elif own is not None and "latency_s" in terms and not any(get_key(ctx.raw, f"frontend.{t}")
                                                                  for t in QUEUEING_FRONTEND_TERMS):
            notes.append(FRONTEND_CAPACITY_NOTE)
    values["cost_model.overhead"] = overhead
    return values


def window_memory_not_read(ctx: Context, engine: str, notes: list[str]) -> None:
    """Say that a hybrid model's sliding layers are kept as vLLM keeps them (`kv_cache.window_memory` shared_pool, the
    default) under an engine whose own rule was not read in its source."""
    if ctx.model is not None and ctx.model.hybrid_window:
        notes.append(f"{engine}: {ctx.model.name}'s sliding layers' KV read as each request's last window in the one "
                     "pool, as vLLM keeps it (the engine's own rule is not read in its source)")


def preset_kv_tokens(ctx: Context, utilization: float, token_budget: int, max_num_seqs: int,
                     window: dict | None = None, profiled_activations: bool = True) -> int | None:
    """KV token slots at this memory fraction (a hybrid model's sliding layers kept as `window` says: `window_memory`,
    `window_pool_ratio`; the activations left out of the budget or not: `kv_cache.profile_activations`), or None
    when the model is not resolved or does not fit."""
    if ctx.model is None:
        return None
    from sim.model.memory import engine_memory, kv_capacity
    q = ctx.raw.get("quantization") or {}
    kv = ctx.raw.get("kv_cache") or {}
    try:  # (a malformed section is validation's to report, in its own words)
        memory = {**engine_memory(kv if isinstance(kv, dict) else {}, q if isinstance(q, dict) else {}),
                  **(window or {}), "profiled_activations": profiled_activations}
        cap = kv_capacity(ctx.model, ctx.gpu, tensor_parallel=ctx.tensor_parallel,
                          weight_dtype=q.get("weights", "bf16"), kv_dtype=q.get("kv_cache", "bf16"),
                          gpu_memory_utilization=utilization, max_num_batched_tokens=token_budget,
                          max_num_seqs=max_num_seqs, expert_gpus=ctx.expert_gpus, dense_gpus=ctx.dense_gpus,
                          **memory)
    except Exception:  # noqa: BLE001  (validation reports a model that does not fit, in its own words)
        return None
    return cap.num_tokens
