"""The API front-end as a stage of the event model (issue 30): client -> front-end -> engine -> front-end -> client.

The front-end is `num_processes` server processes in front of each replica (vLLM's API server processes:
HTTP, the chat template, tokenization on the way in; detokenization and streaming on the way out). Each replica is a
server of its own (a `vllm serve`, with its own API server), so a run has num_processes x num_replicas of them
(an engine's data-parallel workers behind one server share its processes: `replicas_per_server`, fewer of them);
the passes pool them, a request taking the one free soonest, before the engine's router picks its replica (the
router runs in the engine loop, after the inbound pass): with one replica exact, with several what a router that
spreads the load evenly approaches (a router that does not leaves some servers busier than pooled ones). Its
arithmetic is written once, here, as numba functions over arrays, and runs outside the engine loop: one pass
before it and one after. Both engines (the SimPy engine and the compiled core) are handed the same arrival
times and write the same records, so neither loop changes, and their records stay identical.

**Inbound** (`inbound`): requests in the order the client sends them (ties: the workload's order) each take
the process that is free soonest (several free: the one idle longest, then the lowest number), wait for it,
and occupy it for `per_request_s + per_prompt_token_s x prompt tokens` (the prompt as sent: a chat template's
tokens are in the work per request, `Workload.sent_tokens`). The engine sees the request when that
work ends. With several processes a short request may overtake a long one: the engine gets the requests in
the order they leave the front-end, and the records keep the workload's request ids.

*Discipline* (`discipline`): `fifo` (the default) serves a process's requests one at a time in the order sent.
`processor_sharing` serves every request on the process at once, each at an equal share of it, as an asyncio
server's coroutines take turns between their awaits when many are in flight (`shared_departures`): a burst of n
equal requests then reaches the engine together after n x their work, where first come, first served hands the
first one over after one request's work; a shorter request overtakes a longer one (a burst of mixed prompts
reaches the engine shortest first). `event_loop` shares the process the same way, but no request leaves it
before one sent to it earlier (each leaves at its shared finish or when the one sent before it left, the later):
an asyncio server takes each request's steps in turn, and a step (a long prompt's tokenization) is done whole,
not shared, so a later, shorter request does not overtake an earlier one. The process a request takes, and so
each process's busy periods, are the same under all three (the work a process has left does not depend on the
order it serves it in), so the outbound pass below is unchanged. Open arrivals only: a closed loop's front-end
decides each request's arrival when it is sent.

**Outbound** (`outbound`): a request's response streams back through the process that took it in (its HTTP
connection and detokenizer state live there). The first chunk carries the first token alone and is ready at
the engine's first-token time (as vLLM sends the first token at once); then one chunk per `tokens_per_chunk`
tokens, the last chunk (what remains) ready at the engine's last-token time. A chunk costs
`per_output_chunk_s + per_output_token_s x its tokens`. The records keep each request's first- and last-token
times, not every token's, so:

- *Assumption (even spacing):* the chunks between the first and the last are taken to be spread evenly over
  that interval; their work is modelled as a fluid that arrives at a constant rate over it (the first and
  the last chunk stay discrete: they are all the client-side metrics read). A request alone on its process
  gets each of them one chunk's work after the engine produced it, exactly. While a process keeps up with
  its streams, the two agree with a chunk-by-chunk model to within one chunk's work (a chunk that finds
  another stream's chunk in service waits for it there, not in the fluid; tests/unit/test_frontend_passes.py). When
  it does not keep up, the backlog grows at the streams' summed rate less the process's free time, as it does
  chunk by chunk, and the process's total work is the same.
- *Assumption (inbound first):* the inbound pass fixes the engine's arrival times before the engine runs
  (one engine run: a second would double the cost of a run), so it cannot see the chunks the engine will
  produce. Inbound work therefore has (preemptive) priority over streaming: the outbound pass serves the
  chunks, first come first served, in the time the inbound work leaves free on each process. A real asyncio
  front-end interleaves the two in the order they become ready; under a front-end overload this model hands
  requests to the engine sooner than that and delays their streams more. The totals agree: the processes do
  the same work, so the rate at which clients receive complete responses saturates at
  num_processes / (inbound + outbound work per request), as in the real front-end.

**Latency** (`latency_s`): a delay per request that occupies no process and so never queues (the network, the
server's event-loop awaits, the client's own parsing where `client` below does not model it as work that queues):
added to every client-side time of the reply, the first and the last chunk's (`with_latency`), so a closed loop's
user sends again that much later. Only its sum over the request's way in and out shows in the client's metrics, so it
is applied once, on the way out.

Client-side times: `client_first_token_s` / `client_last_token_s` are when the first / last chunk leaves the
front-end (the network between front-end and client is not modelled). TTFT as `vllm bench serve` measures it is
client_first_token_s - client send time. Costs: O(requests x log(num_processes)) inbound, O(requests x log
requests) outbound (sorting the stream events), no per-token work.

**Closed loops** (`ClosedLoopFrontend`): a closed loop's next request is sent when the client has received the
previous reply, which the engine loop decides, so passes outside the loop cannot model it; the SimPy engine's
users run the front-end in the loop instead (the compiled core runs no closed loop). A user sends a request; its
inbound work takes a process by the same rule (`take_process`) and costs the same (`FrontendCosts`); the engine
gets the request when that work ends; the user's next request is sent when the client has the last chunk (then
the think time). Inside the loop each decision is taken when it happens, which changes two things:

- *First come, first served in the order work is ready:* a process serves inbound work, first chunks and last
  chunks in the order they become ready (as the asyncio front-end does), not inbound first: the loop knows the
  inbound work when it is sent, so it need not be fixed ahead of the streams. A request alone on its process gets
  the same times as in the open-loop passes (tests/unit/test_frontend_closed_loop.py).
- *Middle chunks in free time:* a stream's middle chunks are spread over its first and last token (the even-spacing
  assumption above), but that span is known only when the stream ends, after other decisions were taken. So they
  are done in the process's free time since the stream's first chunk, as far as it goes (each free second serves
  one stream: streams claim it in the order they end); what free time could not absorb is queued ahead of the last
  chunk, which cannot overtake its own stream. The process's total work is the same, so a saturated front-end
  caps the rate at num_processes / (inbound + outbound work per request), as in open loop. When streams overlap on
  a busy process, this delays a last chunk somewhat more than chunk by chunk (free time before a stream's first
  chunk is not used for it, even if an earlier stream left it unused).

The records and the summary's client-side metrics are the open loop's (`FrontendStage.client_side`).

**The benchmark client** (`client`, open arrivals only): the tool that sends the requests and times the replies
is a process too (`vllm bench serve`: one asyncio process), and the client-side times are when it gets round to each
event. It is modelled as one more front-end of one process on either side of the server's: its inbound pass
(`per_request_s` each, its `discipline`) turns the send times into the times the server gets the requests, and its
outbound pass (`per_event_s` a chunk, the server's chunks, first come first served in the time its sending leaves
free: inbound first again, as an asyncio client that starts every request of a burst at once sends them before it
reads) turns the server's chunk times into the client's. TTFT is still counted from the send time: the client
starts its clock before it sends (vllm/benchmarks/lib/endpoint_request_func.py). The client's work is not the
front-end's: `busy_s` and the summary's front-end figures are the server's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from sim.config.schema import SHARED_DISCIPLINES
from sim.jit import njit


@dataclass(frozen=True)
class FrontendCosts:
    """The front-end's numbers (the scenario's `frontend:` section), with units in their names."""

    num_processes: int  # server processes, each serving one piece of work at a time
    per_request_s: float  # inbound, once per request: HTTP, parsing, the chat template
    per_prompt_token_s: float  # inbound, per prompt token: tokenization
    per_output_chunk_s: float  # outbound, per streamed chunk: one SSE event (framing, the write)
    per_output_token_s: float = 0.0  # outbound, per output token: detokenization
    tokens_per_chunk: int = 1  # output tokens per streamed chunk after the first (the first is the first token alone)
    latency_s: float = 0.0  # once per request, occupying no process: the network, the event loop's awaits
    discipline: str = "fifo"  # how a process serves its inbound work: fifo, processor_sharing, event_loop (docstring)

    @classmethod
    def of(cls, spec) -> FrontendCosts:
        """From the validated `FrontendSpec`."""
        return cls(spec.num_processes, spec.per_request_s, spec.per_prompt_token_s, spec.per_output_chunk_s,
                   spec.per_output_token_s, spec.tokens_per_chunk, spec.latency_s, spec.discipline)

    @classmethod
    def client_of(cls, spec) -> FrontendCosts | None:
        """The benchmark client (`spec.client`) as a front-end of one process: its work per request in, per event
        out (a chunk of the server's `tokens_per_chunk`). None without one."""
        c = spec.client
        if c is None:
            return None
        return cls(1, c.per_request_s, 0.0, c.per_event_s, 0.0, spec.tokens_per_chunk, 0.0, c.discipline)

    @property
    def does_no_work(self) -> bool:
        """No work on the way in or out (a latency may remain): nothing ever queues on a process."""
        return not (self.per_request_s or self.per_prompt_token_s or self.per_output_chunk_s
                    or self.per_output_token_s)

    def inbound_work_s(self, prompt_tokens: np.ndarray) -> np.ndarray:
        """Each request's inbound work (seconds on one process)."""
        return self.per_request_s + self.per_prompt_token_s * np.asarray(prompt_tokens, dtype=np.float64)

    @property
    def client_gaps_are_engine_steps(self) -> bool:
        """Whether the client sees each token as the engine made it, the same delay later: one token a chunk and no
        outbound work that could queue (a latency alone shifts every chunk alike). Then the gaps between a
        request's chunks are the engine's (`sim.results.latencies`)."""
        return self.tokens_per_chunk == 1 and not (self.per_output_chunk_s or self.per_output_token_s)

    def chunk_work_s(self, output_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per request: (chunks, first chunk's work, the middle chunks' work together, last chunk's work), in
        seconds, over the chunks `sim.results.stream_chunks` counts."""
        from sim.results import stream_chunks
        out = np.asarray(output_tokens, dtype=np.int64)
        k = self.tokens_per_chunk
        chunks = stream_chunks(out, k)
        middle = np.maximum(chunks - 2, 0)
        last_tokens = np.where(chunks >= 2, out - 1 - k * middle, 0)
        c, t = self.per_output_chunk_s, self.per_output_token_s
        first = np.where(chunks >= 1, c + t, 0.0)
        middle_s = middle * (c + t * k)
        last = np.where(chunks >= 2, c + t * last_tokens, 0.0)
        return chunks, first, middle_s.astype(np.float64), last


# --------------------------------------------------------------------------------------------------
# The arithmetic (numba; plain Python without it)


@njit(cache=True, inline="always")
def _precedes(key_a, id_a, key_b, id_b):
    """The heaps' order: the lesser key first, ties to the lesser id."""
    return key_a < key_b or (key_a == key_b and id_a < id_b)


@njit(cache=True)
def _sift_down(free, ids, pos, value, k):
    """Put process `k` with free time `value` at heap position `pos` (its free time only grew) and sift it
    down the binary min-heap of (free time, process number)."""
    n = len(free)
    while True:
        left = 2 * pos + 1
        if left >= n:
            break
        child = left
        right = left + 1
        if right < n and _precedes(free[right], ids[right], free[left], ids[left]):
            child = right
        if _precedes(free[child], ids[child], value, k):
            free[pos] = free[child]
            ids[pos] = ids[child]
            pos = child
        else:
            break
    free[pos] = value
    ids[pos] = k


@njit(cache=True)
def take_process(free, ids, ready, work):
    """The process-choice rule, once for both the open-loop pass and the closed loop: a job ready at `ready`
    takes the process free soonest (several free: the one free longest, which is the same; ties: the lowest
    number), waits for it and holds it `work` seconds. `free`/`ids`: the processes as a binary min-heap of
    (free time, number), updated. Returns (start, end, process)."""
    t0 = free[0]
    k = ids[0]
    s = ready if ready > t0 else t0
    e = s + work
    _sift_down(free, ids, 0, e, k)
    return s, e, k


@njit(cache=True)
def hold_process(free, ids, k, ready, work):
    """Process `k` (not chosen: a reply streams through the process that took its request in) does `work`
    seconds ready at `ready` after what it already holds. Returns (start, end); the heap is updated."""
    pos = 0
    while ids[pos] != k:
        pos += 1
    t0 = free[pos]
    s = ready if ready > t0 else t0
    e = s + work
    _sift_down(free, ids, pos, e, k)
    return s, e


@njit(cache=True)
def fifo_servers(ready_s, work_s, num_servers):
    """N first-come-first-served servers: jobs in the given order (their ready times non-decreasing), each on
    the server `take_process` picks. Returns (start_s, end_s, server) per job."""
    n = len(ready_s)
    start = np.empty(n)
    end = np.empty(n)
    server = np.empty(n, dtype=np.int64)
    # A binary min-heap of (free time, server number); every server free at time 0.
    free = np.zeros(num_servers)
    ids = np.arange(num_servers)
    for i in range(n):
        start[i], end[i], server[i] = take_process(free, ids, ready_s[i], work_s[i])
    return start, end, server


@njit(cache=True)
def _sift_up(keys, ids, pos, value, k):
    """Put entry (`value`, `k`) at heap position `pos` (a new last entry) and sift it up the binary min-heap of
    (key, id) that `_sift_down` keeps."""
    while pos > 0:
        parent = (pos - 1) // 2
        if _precedes(value, k, keys[parent], ids[parent]):
            keys[pos] = keys[parent]
            ids[pos] = ids[parent]
            pos = parent
        else:
            break
    keys[pos] = value
    ids[pos] = k


@njit(cache=True)
def shared_departures(ready_s, work_s, order, offsets, departure_s):
    """Egalitarian processor sharing on each process: the jobs `order[offsets[k]:offsets[k + 1]]` (sorted by ready
    time, ties in the order given) share process k equally, each getting 1/m of it while m are in. Each job's
    departure is written to departure_s. Virtual time V grows at 1/m per second; a job ready at V0 with work w
    leaves when V reaches V0 + w, so the job with the least such finish leaves first (ties: the one given first)."""
    n = len(order)
    keys = np.empty(n)  # a binary min-heap of (virtual finish, job), per process in turn
    ids = np.empty(n, dtype=np.int64)
    for k in range(len(offsets) - 1):
        lo, hi = offsets[k], offsets[k + 1]
        size = 0
        t = 0.0
        v = 0.0
        i = lo
        while i < hi or size > 0:
            ready = ready_s[order[i]] if i < hi else math.inf
            finish = t + (keys[0] - v) * size if size > 0 else math.inf
            if ready <= finish:  # an arrival (first, at a tie: it shares the process from that instant)
                if size > 0:
                    v += (ready - t) / size
                t = ready
                j = order[i]
                i += 1
                _sift_up(keys, ids, size, v + work_s[j], j)
                size += 1
            else:  # the least virtual finish leaves; the last entry takes its place
                v = keys[0]
                t = finish
                departure_s[ids[0]] = t
                size -= 1
                if size > 0:
                    _sift_down(keys[:size], ids[:size], 0, keys[size], ids[size])


@njit(cache=True)
def _count_below(values, lo, hi, x, strict):
    """First index in values[lo:hi] (non-decreasing) whose value is >= x (strict) or > x (not strict)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < x or (not strict and values[mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def idle_finish(t, work, starts, ends, busy_before, idle_before, busy_total, lo, hi):
    """When `work` seconds of a process's free time, counted from `t`, are used up: the process is busy on
    inbound work over the intervals [starts[j], ends[j]) for j in [lo, hi) (sorted, disjoint);
    busy_before[j] is the busy time of the process's intervals before j, busy_total all of it, and
    idle_before[j] = starts[j] - busy_before[j] the free time before interval j starts."""
    if work <= 0.0:
        return t
    j = _count_below(ends, lo, hi, t, False)  # the first interval ending after t
    return idle_finish_from(t, work, j, starts, ends, busy_before, idle_before, busy_total, hi)


@njit(cache=True)
def idle_finish_from(t, work, j, starts, ends, busy_before, idle_before, busy_total, hi):
    """`idle_finish` given j, the first interval ending after t (the outbound sweep knows it: the interval of
    its next boundary)."""
    if work <= 0.0:
        return t
    t0 = t
    if j < hi and starts[j] <= t:  # t is inside it: free time starts when it ends
        t0 = ends[j]
        j += 1
    if j >= hi or t0 + work <= starts[j]:
        return t0 + work
    # The work runs past interval j: find the last interval that starts before the free time reaches the total.
    target = (t0 - busy_before[j]) + work
    m = _count_below(idle_before, j, hi, target, True)
    if m <= j:
        m = j + 1
    return t0 + work + ((busy_before[m] if m < hi else busy_total) - busy_before[j])


@njit(cache=True)
def _outbound(num_servers, offsets, in_start, in_end, busy_before, idle_before, busy_total, f_offsets, f_order,
              l_offsets, l_order, first_s, last_s, first_work, middle_work, last_work, has_last, client_first,
              client_last):
    """The outbound pass, process by process: a sweep over the process's inbound intervals and its streams'
    first and last chunks in time order, keeping the backlog of outbound work (first come, first served, in
    the time inbound work leaves free); each chunk's departure is `idle_finish` of the backlog ahead of it
    plus its own work. Every boundary at or before a chunk's time is swept before it, so the first interval ending
    after that time is the next boundary's, `lo + b // 2`. See the module docstring."""
    for k in range(num_servers):
        lo, hi = offsets[k], offsets[k + 1]
        nb = 2 * (hi - lo)  # interval boundaries: start, end, start, end, ...
        b = 0
        fi, fe = f_offsets[k], f_offsets[k + 1]
        li, le = l_offsets[k], l_offsets[k + 1]
        backlog = 0.0
        rate = 0.0
        active = 0
        busy = False
        t_prev = 0.0
        while b < nb or fi < fe or li < le:
            # the next event: a boundary, then a first chunk, then a last chunk, at equal times in that order
            tb = math.inf
            if b < nb:
                j = lo + b // 2
                tb = in_start[j] if b % 2 == 0 else in_end[j]
            tf = first_s[f_order[fi]] if fi < fe else math.inf
            tl = last_s[l_order[li]] if li < le else math.inf
            if tb <= tf and tb <= tl:
                kind, t = 0, tb
            elif tf <= tl:
                kind, t = 1, tf
            else:
                kind, t = 2, tl
            if t > t_prev:
                capacity = 0.0 if busy else 1.0
                backlog = backlog + (rate - capacity) * (t - t_prev)
                if backlog < 0.0:
                    backlog = 0.0
                t_prev = t
            if kind == 0:
                busy = b % 2 == 0
                b += 1
            elif kind == 1:
                i = f_order[fi]
                fi += 1
                client_first[i] = idle_finish_from(t, backlog + first_work[i], lo + b // 2, in_start, in_end,
                                                   busy_before, idle_before, busy_total[k], hi)
                backlog += first_work[i]
                if has_last[i]:
                    span = last_s[i] - first_s[i]
                    if span > 0.0 and middle_work[i] > 0.0:
                        rate += middle_work[i] / span
                        active += 1
                else:
                    client_last[i] = client_first[i]
            else:
                i = l_order[li]
                li += 1
                span = last_s[i] - first_s[i]
                if span > 0.0 and middle_work[i] > 0.0:
                    active -= 1
                    rate = rate - middle_work[i] / span if active > 0 else 0.0
                else:
                    backlog += middle_work[i]  # no time between first and last token: the middle chunks at once
                client_last[i] = idle_finish_from(t, backlog + last_work[i], lo + b // 2, in_start, in_end,
                                                  busy_before, idle_before, busy_total[k], hi)
                backlog += last_work[i]


# --------------------------------------------------------------------------------------------------
# The two passes over arrays


@dataclass(frozen=True)
class Inbound:
    """The inbound pass's result, per request in the order given (the workload's)."""

    send_s: np.ndarray  # when the client sent it
    start_s: np.ndarray  # when its process started its inbound work
    arrival_s: np.ndarray  # when that work ended: the engine's arrival time
    process: np.ndarray  # int64: which front-end process took it
    work_s: np.ndarray  # its inbound work (seconds)
    num_processes: int
    # Each process's busy time as first come, first served tiles it, one interval per request ([busy_from_s,
    # busy_to_s), disjoint on a process): the same busy periods under processor sharing, where start_s/arrival_s
    # overlap. None: start_s and arrival_s (first come, first served).
    busy_from_s: np.ndarray | None = None
    busy_to_s: np.ndarray | None = None

    @property
    def busy_intervals(self) -> tuple[np.ndarray, np.ndarray]:
        """(from, to) per request: its share of its process's busy time, disjoint on each process."""
        if self.busy_from_s is None:
            return self.start_s, self.arrival_s
        return self.busy_from_s, self.busy_to_s

    def engine_order(self) -> np.ndarray:
        """Request indices in the order the engine receives them (ties: the order given)."""
        return np.argsort(self.arrival_s, kind="stable")


def inbound(send_s: np.ndarray, prompt_tokens: np.ndarray, costs: FrontendCosts) -> Inbound:
    """Client send times -> engine arrival times, on `costs.num_processes` processes of `costs.discipline`."""
    send_s = np.asarray(send_s, dtype=np.float64)
    work = costs.inbound_work_s(prompt_tokens)
    order = np.argsort(send_s, kind="stable")
    start_o, end_o, server_o = fifo_servers(send_s[order], work[order], costs.num_processes)
    start, end, server = (np.empty_like(a) for a in (start_o, end_o, server_o))
    start[order], end[order], server[order] = start_o, end_o, server_o
    if costs.discipline not in SHARED_DISCIPLINES:
        return Inbound(send_s, start, end, server, work, costs.num_processes)
    by_process, offsets = _grouped(server, send_s, np.arange(len(send_s)), costs.num_processes)
    departure = np.empty(len(send_s))
    shared_departures(send_s, work, by_process, offsets, departure)
    if costs.discipline == "event_loop":  # no request leaves its process before one sent to it earlier
        in_order = departure[by_process]
        for lo, hi in zip(offsets[:-1], offsets[1:]):
            np.maximum.accumulate(in_order[lo:hi], out=in_order[lo:hi])
        departure[by_process] = in_order
    return Inbound(send_s, send_s.copy(), departure, server, work, costs.num_processes, start, end)


def _grouped(keys: np.ndarray, times: np.ndarray, ids: np.ndarray, num_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """`ids` (increasing) sorted by (key, time, id), and the offset of each key's run (num_groups + 1 offsets).
    Two stable sorts, not a lexsort of three keys: the ids' own order breaks ties, and one process's keys need
    no second sort."""
    order = ids[np.argsort(times[ids], kind="stable")].astype(np.int64)
    if num_groups > 1:
        order = order[np.argsort(keys[order], kind="stable")]
    offsets = np.searchsorted(keys[order], np.arange(num_groups + 1), side="left").astype(np.int64)
    return order, offsets


@dataclass(frozen=True)
class Outbound:
    """The outbound pass's result, per request in the inbound pass's order: when the client received its first
    and last chunk (NaN: no token), and the front-end's outbound work (seconds)."""

    client_first_token_s: np.ndarray
    client_last_token_s: np.ndarray
    work_s: np.ndarray


def outbound(inb: Inbound, first_token_s: np.ndarray, last_token_s: np.ndarray, output_tokens: np.ndarray,
             costs: FrontendCosts) -> Outbound:
    """Engine token times -> client receive times, per request in `inb`'s order (NaN first token: no chunk)."""
    first_token_s = np.asarray(first_token_s, dtype=np.float64)
    last_token_s = np.asarray(last_token_s, dtype=np.float64)
    out = np.where(np.isfinite(first_token_s), np.asarray(output_tokens, dtype=np.int64), 0)
    if costs.does_no_work:
        # Every chunk leaves when the engine made its token (what the sweep gives without work, bit for bit:
        # tests/unit/test_frontend_passes.py); an engine preset's front-end is a latency alone. A request has a
        # first chunk from 1 output token and a last one from 2 (chunk_work_s), and no work.
        client_first = np.where(out >= 1, first_token_s, np.nan)
        client_last = np.where(out >= 2, last_token_s, client_first)
        return Outbound(with_latency(client_first, costs), with_latency(client_last, costs), np.zeros(len(out)))
    chunks, first_work, middle_work, last_work = costs.chunk_work_s(out)
    return swept_outbound(inb, first_token_s, last_token_s, chunks, first_work, middle_work, last_work, costs)


def swept_outbound(inb: Inbound, first_token_s: np.ndarray, last_token_s: np.ndarray, chunks: np.ndarray,
                   first_work: np.ndarray, middle_work: np.ndarray, last_work: np.ndarray,
                   costs: FrontendCosts) -> Outbound:
    """`outbound`'s sweep over each process's inbound intervals and chunks (`chunk_work_s`'s arrays)."""
    n, num = len(inb.send_s), inb.num_processes
    # The inbound intervals of each process in time order, with the busy and free time before each.
    busy_from, busy_to = inb.busy_intervals
    by_process, offsets = _grouped(inb.process, busy_from, np.arange(n), num)
    in_start, in_end = busy_from[by_process], busy_to[by_process]
    busy_before, busy_total = np.zeros(n), np.zeros(num)
    for k in range(num):  # per process, a cumulative sum
        lo, hi = offsets[k], offsets[k + 1]
        if hi > lo:
            cum = np.cumsum(in_end[lo:hi] - in_start[lo:hi])
            busy_before[lo + 1:hi] = cum[:-1]
            busy_total[k] = cum[-1]
    idle_before = in_start - busy_before
    streaming = np.flatnonzero(chunks >= 1)
    f_order, f_offsets = _grouped(inb.process, first_token_s, streaming, num)
    last_at = np.where(chunks >= 2, last_token_s, first_token_s)
    with_last = np.flatnonzero(chunks >= 2)
    l_order, l_offsets = _grouped(inb.process, last_at, with_last, num)
    client_first = np.full(n, np.nan)
    client_last = np.full(n, np.nan)
    _outbound(num, offsets, in_start, in_end, busy_before, idle_before, busy_total, f_offsets, f_order, l_offsets,
              l_order, first_token_s, last_at, first_work, middle_work, last_work, chunks >= 2, client_first,
              client_last)
    return Outbound(with_latency(client_first, costs), with_latency(client_last, costs),
                    first_work + middle_work + last_work)


def with_latency(client_s, costs: FrontendCosts):
    """Client receive times with the front-end's `latency_s` (the one place it is added, open loop and closed)."""
    return client_s + costs.latency_s if costs.latency_s else client_s


# --------------------------------------------------------------------------------------------------
# The stage as `sim.run.simulate` uses it


class FrontendStage:
    """The front-end around one run: `engine_workload` (the inbound pass's arrivals, in the engine's order) goes
    to the engine; `client_side(requests)` adds the outbound pass's client-side columns to its records."""

    def __init__(self, spec, workload, num_replicas: int):
        # every server's own processes, pooled (module docstring)
        servers = num_replicas // spec.replicas_per_server
        self.costs = dataclasses.replace(FrontendCosts.of(spec), num_processes=spec.num_processes * servers)
        self.client_costs = FrontendCosts.client_of(spec)  # the benchmark client's, one process (None: no work)
        self.workload = workload
        self.outbound: Outbound | None = None
        self.client_inbound: Inbound | None = None
        self.received: Outbound | None = None  # the client's times: its own pass's, else the server's
        # A closed loop: the engine runs the front-end in its loop (`in_loop`, given to sim.core.engine.Simulation);
        # the engine numbers the requests as the workload does.
        self.in_loop: ClosedLoopFrontend | None = None
        if workload.closed_loop is not None:
            self.in_loop = ClosedLoopFrontend(self.costs, workload.sent_tokens)
            self.engine_workload, self.order = workload, np.arange(workload.num_requests)
            self.inbound = None
            return
        sent = workload.arrival_s
        if self.client_costs is not None:  # the client's own sending first: the server gets each request after it
            self.client_inbound = inbound(sent, np.zeros(len(sent), dtype=np.int64), self.client_costs)
            sent = self.client_inbound.arrival_s
        self.inbound = inbound(sent, workload.sent_tokens, self.costs)
        order = self.inbound.engine_order()
        self.order = order  # engine request id -> the workload's request id
        identity = bool(np.array_equal(order, np.arange(len(order))))
        self.engine_workload = dataclasses.replace(
            workload, arrival_s=self.inbound.arrival_s[order], input_tokens=workload.input_tokens[order],
            output_tokens=workload.output_tokens[order],
            hash_ids=_reordered(workload.hash_ids, order, identity),
            prefix_ids=_reordered(workload.prefix_ids, order, identity),
            conversation_ids=None if workload.conversation_ids is None else workload.conversation_ids[order])

    def client_side(self, requests):
        """The engine's request records (`sim.results.requests_table`) with the client-side columns and the
        workload's request ids (`sim.results.with_client_side`)."""
        from sim.results import with_client_side
        n = len(self.order)
        engine_ids = np.asarray(requests["request_id"], dtype=np.int64)
        ids = self.order[engine_ids]
        first, last, out = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64)
        if self.in_loop is not None:  # the closed loop ran the front-end: its records
            self.inbound, self.outbound = self.in_loop.inbound_record(), self.in_loop.outbound_record()
        else:
            first[ids] = requests["first_token_s"]
            last[ids] = requests["last_token_s"]
            out[ids] = requests["output_tokens"]
            self.outbound = outbound(self.inbound, first, last, out, self.costs)
        self.received, sent = self.outbound, self.inbound.send_s
        if self.client_inbound is not None:  # the client reads the server's chunks: its own times
            self.received = outbound(self.client_inbound, self.outbound.client_first_token_s,
                                     self.outbound.client_last_token_s, out, self.client_costs)
            sent = self.client_inbound.send_s
        return with_client_side(requests, ids, {
            "client_send_s": sent[ids], "frontend_process": self.inbound.process[ids],
            "client_first_token_s": self.received.client_first_token_s[ids],
            "client_last_token_s": self.received.client_last_token_s[ids]})

    @property
    def client_gaps_are_engine_steps(self) -> bool:
        """`FrontendCosts.client_gaps_are_engine_steps`, with a benchmark client that reads events for free."""
        reads_free = self.client_costs is None or not self.client_costs.per_output_chunk_s
        return self.costs.client_gaps_are_engine_steps and reads_free

    @property
    def last_receive_s(self) -> float:
        """When the client received the run's last chunk (the run's end as the client sees it); 0 without any."""
        last = self.received.client_last_token_s if self.received is not None else np.empty(0)
        last = last[np.isfinite(last)]
        return float(last.max()) if len(last) else 0.0

    @property
    def end_s(self) -> float:
        """When the front-end's last work ended: its last inbound work or its last chunk (0 without any)."""
        arrival = self.inbound.arrival_s[np.isfinite(self.inbound.arrival_s)] if self.inbound is not None else []
        return max(float(arrival.max()) if len(arrival) else 0.0, self.last_receive_s)

    @property
    def busy_s(self) -> float:
        """The front-end's work, inbound and outbound, summed over its processes (seconds)."""
        out = float(self.outbound.work_s.sum()) if self.outbound is not None else 0.0
        return (float(self.inbound.work_s.sum()) if self.inbound is not None else 0.0) + out

    def __repr__(self) -> str:
        c, b = self.costs, self.client_costs
        client = (f"; client {b.per_request_s:g} s/request + {b.per_output_chunk_s:g} s/event, {b.discipline}"
                  if b is not None else "")
        return (f"Frontend({c.num_processes} processes, {c.latency_s:g} s latency + {c.per_request_s:g} s/request + "
                f"{c.per_prompt_token_s:g} "
                f"s/prompt token in, {c.per_output_chunk_s:g} s/chunk + {c.per_output_token_s:g} s/token out, "
                f"{c.tokens_per_chunk} tokens/chunk{client})")


def _reordered(items: list | None, order: np.ndarray, identity: bool) -> list | None:
    if items is None or identity:
        return items
    return [items[i] for i in order]


# --------------------------------------------------------------------------------------------------
# The stage inside the event loop, for a closed loop


class ClosedLoopFrontend:
    """The front-end inside the SimPy engine's closed loop (see the module docstring, "Closed loops"): the
    users call `send` when they send a request and `receive` when the engine has finished it; `close` places
    what is left at the end of the run. The arithmetic is FrontendCosts' work functions and the process-choice
    rule `take_process` / `hold_process`, as in the open-loop passes; per request in the workload's numbering
    (the closed loop sends the requests in that order, so the engine's ids are the workload's)."""

    def __init__(self, costs: FrontendCosts, prompt_tokens: np.ndarray):
        n, num = len(prompt_tokens), costs.num_processes
        self.costs = costs
        self.inbound_work_s = costs.inbound_work_s(prompt_tokens)
        _, first, _, _ = costs.chunk_work_s(np.ones(1, dtype=np.int64))
        self.first_chunk_work_s = float(first[0])  # the first chunk carries the first token alone, whatever follows
        # The processes as the heap `take_process` keeps: (free time, number); free time: when the work queued on
        # the process ends.
        self._free = np.zeros(num)
        self._ids = np.arange(num)
        self._busy_s = np.zeros(num)  # work queued on each process so far (what the middle chunks' fluid did not use)
        self._claimed_idle_s = np.zeros(num)  # each process's free time the middle chunks have used (cumulative)
        self.send_s = np.full(n, np.nan)
        self.start_s = np.full(n, np.nan)
        self.arrival_s = np.full(n, np.nan)
        self.process = np.full(n, -1, dtype=np.int64)
        self.client_first_token_s = np.full(n, np.nan)
        self.client_last_token_s = np.full(n, np.nan)
        self.outbound_work_s = np.zeros(n)
        self._idle_at_first_s = np.full(n, np.nan)
        self._awaiting_first: dict[int, object] = {}  # sent, first chunk not yet placed: id -> Request
        self._streaming: dict[int, object] = {}  # first chunk placed, reply not yet received: id -> Request

    def _free_s(self, k: int) -> float:
        return float(self._free[int(np.flatnonzero(self._ids == k)[0])])

    def _idle_s(self, k: int, t: float) -> float:
        """Process k's free time from 0 to `t`, all its queued work being ready by `t`: `t` less the work it has
        done by then (its queued work less what is still ahead of `t`)."""
        return t - self._busy_s[k] + max(0.0, self._free_s(k) - t)

    def _hold(self, k: int, ready: float, work: float) -> float:
        _, end = hold_process(self._free, self._ids, k, ready, work)
        self._busy_s[k] += work
        return float(end)

    def _place_first_chunks(self, now: float) -> None:
        """Queue the first chunks whose first token the engine produced by `now`, in the order produced. Done
        before every decision, so each process's queue holds its work in the order it became ready."""
        ready = [r for r in self._awaiting_first.values() if r.first_token_s <= now]
        ready.sort(key=lambda r: (r.first_token_s, r.request_id))
        for r in ready:
            i, t = r.request_id, float(r.first_token_s)
            k = int(self.process[i])
            del self._awaiting_first[i]
            self._idle_at_first_s[i] = self._idle_s(k, t)
            self.client_first_token_s[i] = self._hold(k, t, self.first_chunk_work_s)
            self._streaming[i] = r

    def send(self, request, now: float) -> float:
        """The client sends `request` at `now`: the inbound work queues on the process `take_process` picks.
        Returns when that work ends (the engine's arrival time)."""
        self._place_first_chunks(now)
        i = request.request_id
        start, end, k = take_process(self._free, self._ids, now, float(self.inbound_work_s[i]))
        self._busy_s[k] += self.inbound_work_s[i]
        self.send_s[i], self.start_s[i], self.arrival_s[i], self.process[i] = now, start, end, k
        self._awaiting_first[i] = request
        return float(end)

    def receive(self, request, now: float) -> float:
        """The engine finished (or rejected) `request` by `now`: when the client has its whole reply (`now`
        without any token: nothing streams)."""
        self._place_first_chunks(now)
        i = request.request_id
        self._awaiting_first.pop(i, None)
        if self._streaming.pop(i, None) is None:
            return now
        self._stream_end(request)
        return float(with_latency(self.client_last_token_s[i], self.costs))

    def _stream_end(self, request) -> None:
        """The middle chunks and the last chunk of a reply whose first chunk is queued, from its last token."""
        i = request.request_id
        chunks, first, middle, last = self.costs.chunk_work_s(np.array([request.num_output_tokens], dtype=np.int64))
        middle_s, last_s = float(middle[0]), float(last[0])
        self.outbound_work_s[i] = float(first[0]) + middle_s + last_s
        if chunks[0] < 2:  # the first chunk was the whole reply
            self.client_last_token_s[i] = self.client_first_token_s[i]
            return
        k, t = int(self.process[i]), float(request.last_token_s)
        # The middle chunks use the process's free time since the first chunk, as far as it goes (see the module
        # docstring); each free second is used once. The rest queues ahead of the last chunk, which cannot overtake
        # its own stream.
        since = max(float(self._idle_at_first_s[i]), float(self._claimed_idle_s[k]))
        used = min(middle_s, max(0.0, self._idle_s(k, t) - since))
        self._claimed_idle_s[k] = since + used
        self.client_last_token_s[i] = self._hold(k, t, middle_s - used + last_s)

    def close(self, now: float) -> None:
        """At the end of the run: the first chunks not yet queued, then the replies of requests the engine still
        held (cut by the horizon: their tokens so far), in the order of their last token."""
        self._place_first_chunks(math.inf)
        for r in sorted(self._streaming.values(), key=lambda r: (r.last_token_s, r.request_id)):
            self._stream_end(r)
        self._streaming.clear()
        self._awaiting_first.clear()

    def inbound_record(self) -> Inbound:
        sent = np.isfinite(self.send_s)
        return Inbound(self.send_s, self.start_s, self.arrival_s, self.process,
                       np.where(sent, self.inbound_work_s, 0.0), self.costs.num_processes)

    def outbound_record(self) -> Outbound:
        return Outbound(with_latency(self.client_first_token_s, self.costs),
                        with_latency(self.client_last_token_s, self.costs), self.outbound_work_s)
