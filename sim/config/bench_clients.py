"""The benchmark clients whose own work a scenario can model (`frontend.client`; sim/frontend.py, "The benchmark
client"), measured by running each tool's own request code (benchmarks/bench_serve_client.py). A published run's
figures are what its client timed, so the published suite (benchmarks/published_suite.py) models the client that
measured it where one is here."""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import ConfigError


@dataclass(frozen=True)
class BenchClientWork:
    """One tool's own work on one endpoint, as `frontend.client` takes it."""

    tool: str  # as benchmarks/published_suite.py names the tools
    endpoint: str  # completions, chat
    per_request_s: float  # a request sent and its reply's end: the connection, the POST, the usage event, [DONE]
    per_event_s: float  # a streamed event read: parsed and timestamped (the model reads a chunk an event)
    discipline: str  # how its one process serves a burst's requests (sim/frontend.py)
    source: str  # the request functions benchmarks/bench_serve_client.py ran

    def section(self) -> dict:
        """The scenario's `frontend.client`."""
        return {"per_request_s": self.per_request_s, "per_event_s": self.per_event_s, "discipline": self.discipline}


# `vllm bench serve`: vLLM 0.19.0's request functions (vllm/benchmarks/lib/endpoint_request_func.py, from its PyPI
# wheel) with the aiohttp session vllm/benchmarks/serve.py makes for a run without --max-concurrency, under
# asyncio.run as serve.py runs them, against a stand-in server on the other core (benchmarks/bench_serve_client.py,
# 12-01 12:53-12:57, the development machine: "AMD EPYC" KVM guest, 2 vCPUs, AVX2, CPython 3.11.7, aiohttp 3.14.5; 3
# repeats a cell, medians). Per request: bursts of 250, 500 and 1,000 requests of one token, the client's CPU over
# the requests (median of the three: completions 1.44-1.56 ms, chat 0.99-1.04 ms; single bursts of 1,000 gave 1.0
# and 1.7 ms at 13:05, the noise of one burst). The server got a burst's first request at 54-69% of the time it got
# the last (bursts of 250 and 1,000, each endpoint, 13:05): nearer event_loop (all at the end) than first come,
# first served (the first after one request's work), so event_loop, as vLLM's own server takes it (API_SERVER_WORK).
# Two event_loop stages in series (the client, then the server) hand a burst to the engine later than the real
# pipeline, where the server starts on the first requests while the client sends the rest. Per event: bursts of 500
# requests of 128 tokens, the server stepping every 50, 20, 10, 5 and 1 ms; the client's CPU less the requests' own
# over the events. Where it kept up (50 ms, CPU 75-90% of the wall time) an event costs 83-102 us, read one at a
# time; behind the server (CPU >= 95%: 20 ms and shorter, its recorded TPOT 7.7-28 ms against steps of 1-20 ms) it
# reads several at once and an event costs 16-56 us. The model reads a chunk an event and does not merge, so the
# figure is the median of the cells where the client fell behind (completions 31.5 us, chat 35.8 us): a loaded
# client's, as the engine presets take a loaded server's (sim/config/engines/engine_work.py API_SERVER_WORK). Which
# vLLM's client a published run used, and its host's CPU, are mostly unstated.
#
# vLLM's older `benchmarks/benchmark_serving.py` and SGLang's `sglang.bench_serving` (12-01 15:37 and 15:39, the same
# machine and bench, 3 repeats a cell, medians; /v1/completions, the endpoint of every published run they timed): each
# request opens its own aiohttp session (so its own connection; vLLM's to its default host, localhost, looked up
# again by every session), and the server of their era sends no usage event. vLLM's copy of
# benchmarks/backend_request_func.py at vllm-project/vllm 01184130 (the 0.6 era's; which copy Lambda's runs used is
# unstated): 1.18 ms a request (0.89-1.39 over the three burst sizes), first arrivals at 76-91% of the last (so
# event_loop), 32.2 us an event behind the server (23-53 us at steps of 20-1 ms; 78 us at 50 ms, keeping up).
# SGLang 0.3.0's python/sglang/bench_serving.py (from its wheel; the page's client commit is unstated): 1.02 ms a
# request (0.90-1.13), first arrivals at 89-93% of the last (event_loop), 32.2 us an event behind (16-55 us; 98 us
# keeping up). The rule for each figure is the one above, chosen before these ran.
_VLLM_SERVE = "vLLM 0.19.0's request functions"
BENCH_CLIENTS = (
    BenchClientWork("vllm bench serve", "completions", 1.505e-3, 31.5e-6, "event_loop", _VLLM_SERVE),
    BenchClientWork("vllm bench serve", "chat", 0.992e-3, 35.8e-6, "event_loop", _VLLM_SERVE),
    BenchClientWork("vllm benchmark_serving.py", "completions", 1.177e-3, 32.2e-6, "event_loop",
                    "benchmarks/backend_request_func.py at vllm-project/vllm 01184130"),
    BenchClientWork("sglang.bench_serving", "completions", 1.020e-3, 32.2e-6, "event_loop",
                    "SGLang 0.3.0's python/sglang/bench_serving.py"),
)
# How far a row holds for a published run (a band draws it x/÷ this, sim/config/engines/spread.py bench_client_spread).
BENCH_CLIENT_RANGE = (2.0, "the benchmark client's own work (sim/config/bench_clients.py), measured on one CPU (the "
                      "development machine's AMD EPYC guest, where reruns gave 1.44-1.72 ms a request and, behind "
                      "the server, 20-31.5 us an event) for one version's client: another host's CPU, a factor of 2 "
                      "either way")


def bench_client(tool: str, endpoint: str) -> BenchClientWork | None:
    """The measured client of `tool` on `endpoint`; None where none was measured."""
    return next((c for c in BENCH_CLIENTS if c.tool == tool and c.endpoint == endpoint), None)


def measured_client_defaults(data: dict) -> dict:
    """A raw scenario whose `frontend.client` names a `tool`: the tool's measured row on the scenario's endpoint
    (workload.endpoint, default completions) under the scenario's own numbers. An unmeasured tool or endpoint is a
    ConfigError naming what was measured."""
    frontend = data.get("frontend")
    client = frontend.get("client") if isinstance(frontend, dict) else None
    if not isinstance(client, dict) or client.get("tool") is None:
        return data
    tool = client["tool"]
    tools = sorted({c.tool for c in BENCH_CLIENTS})
    if tool not in tools:
        raise ConfigError(f"frontend.client.tool: {tool!r} is not a measured benchmark client; allowed: "
                          f"{', '.join(repr(t) for t in tools)}")
    from sim.workload.generate import endpoint_of
    endpoint = endpoint_of(data.get("workload"))
    row = bench_client(tool, endpoint)
    if row is None:
        measured = sorted(c.endpoint for c in BENCH_CLIENTS if c.tool == tool)
        raise ConfigError(f"frontend.client.tool: {tool!r} was measured on workload.endpoint "
                          f"{', '.join(repr(e) for e in measured)}, not {endpoint!r}; allowed here: its numbers "
                          "given (per_request_s, per_event_s) without a tool")
    return {**data, "frontend": {**frontend, "client": {**row.section(), **client}}}
