"""The front-end's arithmetic (sim/frontend.py) on arrays, with hand-computed answers and a chunk-by-chunk
reference: no engine, no event loop."""

from __future__ import annotations

import numpy as np
import pytest

from sim.frontend import FrontendCosts, fifo_servers, idle_finish, inbound, outbound, swept_outbound


def costs(num_processes=1, per_request_s=0.0, per_prompt_token_s=0.0, per_output_chunk_s=0.0,
          per_output_token_s=0.0, tokens_per_chunk=1) -> FrontendCosts:
    return FrontendCosts(num_processes, per_request_s, per_prompt_token_s, per_output_chunk_s, per_output_token_s,
                         tokens_per_chunk)


# --- inbound: N first-come-first-served servers -------------------------------------------------------------

def test_one_server_fifo_departures_by_hand():
    # arrivals 0, 1, 2 ms with 5 ms of work each: each waits for the one before it
    start, end, server = fifo_servers(np.array([0.0, 0.001, 0.002]), np.full(3, 0.005), 1)
    np.testing.assert_allclose(end, [0.005, 0.010, 0.015], rtol=0, atol=1e-15)
    np.testing.assert_allclose(start, [0.0, 0.005, 0.010], rtol=0, atol=1e-15)
    assert server.tolist() == [0, 0, 0]


def test_two_servers_by_hand():
    # arrivals 0, 1, 2, 3 ms, 5 ms each, two servers: 0 -> A [0, 5], 1 -> B [1, 6], 2 -> A [5, 10], 3 -> B [6, 11]
    start, end, server = fifo_servers(np.array([0.0, 0.001, 0.002, 0.003]), np.full(4, 0.005), 2)
    np.testing.assert_allclose(start, [0.0, 0.001, 0.005, 0.006], rtol=0, atol=1e-15)
    np.testing.assert_allclose(end, [0.005, 0.006, 0.010, 0.011], rtol=0, atol=1e-15)
    assert server.tolist() == [0, 1, 0, 1]


def test_a_short_request_overtakes_on_another_server():
    # a long request on server 0, then a short one on server 1 leaves first: the engine's order differs
    inb = inbound(np.array([0.0, 0.001]), np.array([1000, 10]), costs(2, per_request_s=0.001, per_prompt_token_s=1e-5))
    np.testing.assert_allclose(inb.arrival_s, [0.011, 0.0021], rtol=1e-12)
    assert inb.engine_order().tolist() == [1, 0]


def test_idle_servers_take_the_one_free_longest():
    # both free: the first job takes server 0, the second server 1; then server 0 (free since 1 ms) before 1
    _, _, server = fifo_servers(np.array([0.0, 0.0005, 0.010]), np.array([0.001, 0.002, 0.001]), 2)
    assert server.tolist() == [0, 1, 0]


@pytest.mark.parametrize("num_servers", [1, 2, 5, 16])
def test_the_heap_picks_what_a_scan_picks(num_servers):
    # the server free soonest, ties to the lowest number: the heap against a scan over every server
    rng = np.random.default_rng(num_servers)
    ready = np.sort(rng.choice(rng.uniform(0, 1, 50), 400))  # repeated times: ties
    work = rng.choice([0.0, 0.01, 0.05], 400)
    start, end, server = fifo_servers(ready, work, num_servers)
    free = np.zeros(num_servers)
    for i in range(400):
        k = int(np.lexsort((np.arange(num_servers), free))[0])
        s = max(ready[i], free[k])
        assert (server[i], start[i], end[i]) == (k, s, s + work[i])
        free[k] = s + work[i]


def test_zero_work_changes_nothing():
    send = np.sort(np.random.default_rng(3).uniform(0, 5, 500))
    inb = inbound(send, np.full(500, 100), costs(3))
    np.testing.assert_array_equal(inb.arrival_s, send)
    assert inb.engine_order().tolist() == list(range(500))
    first = send + 0.1
    out = outbound(inb, first, first + 1.0, np.full(500, 50), costs(3))
    np.testing.assert_array_equal(out.client_first_token_s, first)
    np.testing.assert_array_equal(out.client_last_token_s, first + 1.0)


@pytest.mark.parametrize("seed", range(5))
def test_without_work_the_shortcut_gives_the_sweeps_times_bit_for_bit(seed):
    # A front-end that does no work (an engine preset's: a latency alone) skips the sweep; its times must be the
    # sweep's: requests with no token, one token, several, first and last token at one time, ties across streams.
    rng = np.random.default_rng(seed)
    n = 400
    send = np.sort(rng.uniform(0, 20, n))
    no_work = FrontendCosts(int(rng.integers(1, 4)), 0.0, 0.0, 0.0, 0.0, int(rng.integers(1, 5)),
                            float(rng.choice([0.0, 0.0371])))
    inb = inbound(send, rng.integers(1, 3000, n), no_work)
    first = np.round(send + rng.exponential(0.5, n), 2)  # rounded: equal times across streams
    out_tokens = rng.choice([0, 1, 2, 7, 300], n)
    last = first + np.where(rng.random(n) < 0.2, 0.0, rng.exponential(3.0, n))
    first[out_tokens == 0], last[out_tokens == 0] = np.nan, np.nan
    assert no_work.does_no_work
    quick = outbound(inb, first, last, out_tokens, no_work)
    swept = swept_outbound(inb, first, last, *no_work.chunk_work_s(np.where(np.isfinite(first), out_tokens, 0)),
                           no_work)
    for name in ("client_first_token_s", "client_last_token_s", "work_s"):
        np.testing.assert_array_equal(getattr(quick, name), getattr(swept, name), err_msg=name)
    assert not costs(per_output_token_s=1e-6).does_no_work and not costs(per_request_s=1e-3).does_no_work


@pytest.mark.parametrize("num_processes", [1, 3])
def test_saturation_caps_the_rate_at_processes_over_work(num_processes):
    # 3,000 requests sent at once, 4 ms each: the last one leaves at 3000 x 4 ms / N (each process busy throughout)
    n, work = 3000, 0.004
    inb = inbound(np.zeros(n), np.zeros(n, dtype=np.int64), costs(num_processes, per_request_s=work))
    assert inb.arrival_s.max() == pytest.approx(n * work / num_processes, rel=1e-12)
    assert np.bincount(inb.process).tolist() == [n // num_processes] * num_processes


# --- outbound ----------------------------------------------------------------------------------------------

def test_idle_finish_skips_busy_intervals():
    starts, ends = np.array([1.0, 3.0]), np.array([2.0, 4.0])
    busy_before = np.array([0.0, 1.0])
    idle_before = starts - busy_before
    args = (starts, ends, busy_before, idle_before, 2.0, 0, 2)
    assert idle_finish(0.0, 0.5, *args) == 0.5  # before the first interval
    assert idle_finish(0.5, 0.5, *args) == 1.0  # ends exactly where the interval starts
    assert idle_finish(0.5, 1.0, *args) == 2.5  # 0.5 before, paused over [1, 2], 0.5 after
    assert idle_finish(1.5, 0.25, *args) == 2.25  # starts inside a busy interval: waits for its end
    assert idle_finish(0.0, 3.0, *args) == 5.0  # across both intervals
    assert idle_finish(1.5, 0.0, *args) == 1.5  # no work: no wait


def test_one_request_alone_pays_one_chunk_each_way():
    # concurrency 1: TTFT grows by exactly per_request + prompt x per_token + one chunk
    c = costs(per_request_s=0.004, per_prompt_token_s=2e-5, per_output_chunk_s=3e-4)
    inb = inbound(np.array([1.0]), np.array([500]), c)
    assert inb.arrival_s[0] == 1.0 + (0.004 + 2e-5 * 500)
    out = outbound(inb, np.array([1.2]), np.array([2.2]), np.array([101]), c)
    assert out.client_first_token_s[0] == 1.2 + 3e-4
    assert out.client_last_token_s[0] == 2.2 + 3e-4
    assert out.work_s[0] == pytest.approx(101 * 3e-4, rel=1e-12)


def test_chunks_and_their_work():
    c = costs(per_output_chunk_s=1.0, per_output_token_s=0.01, tokens_per_chunk=4)
    chunks, first, middle, last = c.chunk_work_s(np.array([0, 1, 2, 5, 6, 13]))
    # the first token alone, then chunks of 4: 13 tokens -> 1 + 4 + 4 + 4
    assert chunks.tolist() == [0, 1, 2, 2, 3, 4]
    np.testing.assert_allclose(first, [0, 1.01, 1.01, 1.01, 1.01, 1.01])
    np.testing.assert_allclose(middle, [0, 0, 0, 0, 1.04, 2.08])
    np.testing.assert_allclose(last, [0, 0, 1.01, 1.04, 1.01, 1.04])


def test_a_stream_faster_than_its_process_is_served_back_to_back():
    # 11 tokens over 10 ms, 2 ms per chunk: the chunks queue, and the last leaves after all 11 chunks' work
    c = costs(per_output_chunk_s=0.002)
    inb = inbound(np.array([0.0]), np.array([1]), c)
    out = outbound(inb, np.array([1.0]), np.array([1.01]), np.array([11]), c)
    assert out.client_first_token_s[0] == 1.002
    assert out.client_last_token_s[0] == pytest.approx(1.0 + 11 * 0.002, rel=1e-12)


def test_inbound_work_goes_first_and_streams_fill_the_rest():
    # one process, 10 requests sent at once (1 ms each in), each with one output token 1 us after it reaches the
    # engine: the inbound work runs back to back, then the ten 0.5 ms chunks, the last leaving at 10 x 1.5 ms
    n = 10
    c = costs(per_request_s=0.001, per_output_chunk_s=0.0005)
    inb = inbound(np.zeros(n), np.zeros(n, dtype=np.int64), c)
    first = inb.arrival_s + 1e-6
    out = outbound(inb, first, first, np.ones(n, dtype=np.int64), c)
    assert out.client_last_token_s.max() == pytest.approx(n * 0.0015, rel=1e-12)
    np.testing.assert_allclose(np.sort(out.client_first_token_s), 0.010 + 0.0005 * np.arange(1, n + 1), rtol=1e-12)
    np.testing.assert_array_equal(out.client_first_token_s, out.client_last_token_s)  # one chunk each


def test_no_token_no_chunk():
    c = costs(per_output_chunk_s=0.001)
    inb = inbound(np.array([0.0, 0.0]), np.array([5, 5]), c)
    out = outbound(inb, np.array([np.nan, 0.5]), np.array([np.nan, 0.5]), np.array([0, 1]), c)
    assert np.isnan(out.client_first_token_s[0]) and np.isnan(out.client_last_token_s[0])
    assert out.client_first_token_s[1] == out.client_last_token_s[1] == 0.501
    assert out.work_s.tolist() == [0.0, 0.001]


def test_first_and_last_token_at_one_time():
    # all chunks ready at once (speculative decoding can emit several tokens in one step): first, then the rest
    c = costs(per_output_chunk_s=0.001)
    inb = inbound(np.array([0.0]), np.array([5]), c)
    out = outbound(inb, np.array([0.5]), np.array([0.5]), np.array([4]), c)
    assert out.client_first_token_s[0] == 0.501
    assert out.client_last_token_s[0] == pytest.approx(0.504, rel=1e-12)


# --- against a chunk-by-chunk reference ---------------------------------------------------------------------

def _walk(t: float, work: float, intervals: list[tuple[float, float]]) -> float:
    """Free time from t on one process, walking its busy intervals one by one."""
    if work <= 0:
        return t
    for s, d in intervals:
        if d <= t:
            continue
        if s <= t:
            t = d
            continue
        if t + work <= s:
            return t + work
        work -= s - t
        t = d
    return t + work


def chunk_by_chunk(inb, first, last, out, c: FrontendCosts):
    """Every chunk its own event: tokens evenly spaced between the first and the last, chunk k ready with its
    last token, served first come first served in the time the inbound work leaves free."""
    n = len(first)
    got_first, got_last = np.full(n, np.nan), np.full(n, np.nan)
    k = c.tokens_per_chunk
    for p in range(c.num_processes):
        mine = np.flatnonzero(inb.process == p)
        intervals = sorted(zip(inb.start_s[mine], inb.arrival_s[mine]))
        chunks = []
        for i in mine:
            o = int(out[i])
            if o == 0:
                continue
            num = 1 + (o - 1 + k - 1) // k
            for j in range(num):
                token = 1 if j == 0 else min(1 + j * k, o)  # the chunk's last token (1-based)
                tokens = 1 if j == 0 else token - (1 + (j - 1) * k)
                t = first[i] if o == 1 else first[i] + (token - 1) * (last[i] - first[i]) / (o - 1)
                chunks.append((t, j > 0, int(i), j, c.per_output_chunk_s + c.per_output_token_s * tokens, num))
        previous = -np.inf
        for t, _, i, j, work, num in sorted(chunks):
            previous = _walk(max(t, previous), work, intervals)
            if j == 0:
                got_first[i] = previous
            if j == num - 1:
                got_last[i] = previous
    return got_first, got_last


@pytest.mark.parametrize("seed", range(20))
def test_light_load_agrees_with_the_chunk_by_chunk_reference(seed):
    # a process that keeps up with its streams (the usual case): the first and last chunks' times agree to within
    # one chunk's work (a chunk that found another stream's chunk in service waited for it; the fluid did not)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    c = costs(int(rng.integers(1, 4)), rng.uniform(0, 0.005), rng.uniform(0, 1e-5), rng.uniform(0, 2e-4),
              rng.uniform(0, 1e-5), int(rng.integers(1, 4)))
    send = np.sort(rng.uniform(0, 20, n))
    inb = inbound(send, rng.integers(1, 500, n), c)
    out = rng.integers(0, 80, n)
    first = np.where(out > 0, inb.arrival_s + rng.uniform(0.01, 0.2, n), np.nan)
    last = np.where(out > 0, first + np.maximum(out - 1, 0) * rng.uniform(0.005, 0.03, n), np.nan)
    got = outbound(inb, first, last, out, c)
    want_first, want_last = chunk_by_chunk(inb, first, last, out, c)
    chunk_s = c.per_output_chunk_s + c.per_output_token_s * c.tokens_per_chunk
    np.testing.assert_allclose(got.client_first_token_s, want_first, rtol=0, atol=chunk_s + 1e-12)
    np.testing.assert_allclose(got.client_last_token_s, want_last, rtol=0, atol=chunk_s + 1e-12)
    assert np.nanmean(np.abs(got.client_last_token_s - want_last)) < 0.1 * chunk_s + 1e-12  # most are exact


def test_deterministic():
    rng = np.random.default_rng(5)
    send = np.sort(rng.uniform(0, 1, 2000))
    c = costs(4, 0.003, 1e-5, 5e-4, 1e-5, 2)
    prompt, out = rng.integers(1, 500, 2000), rng.integers(1, 100, 2000)
    runs = []
    for _ in range(2):
        inb = inbound(send, prompt, c)
        first = inb.arrival_s + 0.05
        o = outbound(inb, first, first + out * 0.01, out, c)
        runs.append((inb.arrival_s.tobytes(), o.client_first_token_s.tobytes(), o.client_last_token_s.tobytes()))
    assert runs[0] == runs[1]


# --- inbound: processor sharing (discipline processor_sharing) --------------------------------------------------

def shared(num_processes=1, **kw) -> FrontendCosts:
    import dataclasses
    return dataclasses.replace(costs(num_processes, **kw), discipline="processor_sharing")


def test_a_burst_of_equal_requests_reaches_the_engine_together_after_all_their_work():
    # five requests of 0.25 s sent together share one process: each gets a fifth of it, all leave at 1.25 s (first
    # come, first served hands them over at 0.25, 0.5, ... 1.25 s)
    send = np.zeros(5)
    inb = inbound(send, np.zeros(5, dtype=np.int64), shared(per_request_s=0.25))
    assert inb.arrival_s.tolist() == [1.25] * 5
    fifo = inbound(send, np.zeros(5, dtype=np.int64), costs(per_request_s=0.25))
    assert fifo.arrival_s.tolist() == [0.25, 0.5, 0.75, 1.0, 1.25]
    # the busy intervals the outbound pass sees are first come, first served's: the same busy period
    assert [a.tolist() for a in inb.busy_intervals] == [fifo.start_s.tolist(), fifo.arrival_s.tolist()]
    assert inb.start_s.tolist() == [0.0] * 5  # each starts when sent, at a share


def test_processor_sharing_departures_by_hand():
    # a: sent at 0 with 2 s of work; b: sent at 1 with 0.5 s. Alone until 1 s, a has 1 s left; then each gets half:
    # b's 0.5 s take 1 s (leaves at 2), a's remaining 0.5 s of that second are done, its last 0.5 s alone: 2.5
    inb = inbound(np.array([0.0, 1.0]), np.array([2000, 500]), shared(per_prompt_token_s=1e-3))
    np.testing.assert_allclose(inb.arrival_s, [2.5, 2.0], rtol=0, atol=1e-12)
    assert inb.engine_order().tolist() == [1, 0]
    fifo = inbound(np.array([0.0, 1.0]), np.array([2000, 500]), costs(per_prompt_token_s=1e-3))
    np.testing.assert_allclose(fifo.arrival_s, [2.0, 2.5], rtol=0, atol=1e-12)


def in_turn(num_processes=1, **kw) -> FrontendCosts:
    import dataclasses
    return dataclasses.replace(costs(num_processes, **kw), discipline="event_loop")


def test_event_loop_shares_as_processor_sharing_but_no_request_overtakes_one_sent_before_it():
    # the case above: b (sent later, shorter) would leave at 2.0 under sharing; in turn it waits for a, at 2.5
    inb = inbound(np.array([0.0, 1.0]), np.array([2000, 500]), in_turn(per_prompt_token_s=1e-3))
    np.testing.assert_allclose(inb.arrival_s, [2.5, 2.5], rtol=0, atol=1e-12)
    # sent in the other order, sharing already hands them over in order: the same times as processor sharing
    inb = inbound(np.array([0.0, 1.0]), np.array([500, 2000]), in_turn(per_prompt_token_s=1e-3))
    np.testing.assert_allclose(inb.arrival_s, [0.5, 3.0], rtol=0, atol=1e-12)
    # a burst of mixed work: everyone behind the longest leaves with it; equal work: processor sharing exactly
    tokens = np.array([100, 300, 200, 100])  # 0.1, 0.3, 0.2, 0.1 s: sharing ends them at 0.4, 0.7, 0.6, 0.4
    np.testing.assert_allclose(inbound(np.zeros(4), tokens, shared(per_prompt_token_s=1e-3)).arrival_s,
                               [0.4, 0.7, 0.6, 0.4], rtol=0, atol=1e-12)
    np.testing.assert_allclose(inbound(np.zeros(4), tokens, in_turn(per_prompt_token_s=1e-3)).arrival_s,
                               [0.4, 0.7, 0.7, 0.7], rtol=0, atol=1e-12)
    equal = np.zeros(5, dtype=np.int64)
    assert (inbound(np.zeros(5), equal, in_turn(per_request_s=0.25)).arrival_s.tolist()
            == inbound(np.zeros(5), equal, shared(per_request_s=0.25)).arrival_s.tolist() == [1.25] * 5)
    # two processes: each keeps the order of its own requests only
    two = inbound(np.zeros(4), np.array([300, 300, 100, 100]), in_turn(2, per_prompt_token_s=1e-3))
    assert two.process.tolist() == [0, 1, 0, 1]
    np.testing.assert_allclose(two.arrival_s, [0.4, 0.4, 0.4, 0.4], rtol=0, atol=1e-12)


def test_each_process_shares_only_its_own_requests_and_keeps_first_come_first_served_choice():
    send = np.array([0.0, 0.0, 0.0, 0.0])
    fifo = inbound(send, np.zeros(4, dtype=np.int64), costs(2, per_request_s=1.0))
    inb = inbound(send, np.zeros(4, dtype=np.int64), shared(2, per_request_s=1.0))
    assert inb.process.tolist() == fifo.process.tolist() == [0, 1, 0, 1]
    assert inb.arrival_s.tolist() == [2.0, 2.0, 2.0, 2.0]  # two on each process, each at half speed


def test_mg1_processor_sharing_mean_time_is_insensitive_to_the_work_distribution():
    """M/G/1 under processor sharing: the mean time in the system is E[S] / (1 - rho) whatever the distribution of
    S (Kleinrock); first come, first served gives Pollaczek-Khinchine's E[S] + lambda E[S^2] / (2 (1 - rho)), larger
    for a variable S. Lognormal work of mean 1 s (sigma 1: E[S^2] = e), Poisson arrivals at 0.5/s, 200,000 requests."""
    rng = np.random.default_rng(0)
    n, lam = 200_000, 0.5
    send = np.cumsum(rng.exponential(1 / lam, n))
    work_s = rng.lognormal(-0.5, 1.0, n)
    tokens = np.round(work_s * 1e6).astype(np.int64)  # 1 us a prompt token: work to the microsecond
    ps = inbound(send, tokens, shared(per_prompt_token_s=1e-6))
    fifo = inbound(send, tokens, costs(per_prompt_token_s=1e-6))
    assert np.mean(ps.arrival_s - send) == pytest.approx(1.0 / (1 - lam * 1.0), rel=0.03)  # 2 s
    assert np.mean(fifo.arrival_s - send) == pytest.approx(1.0 + lam * np.e / (2 * (1 - lam)), rel=0.03)  # 2.36 s
    # the same work, so the same busy periods: the last request leaves at the same time under both
    assert ps.arrival_s.max() == pytest.approx(fifo.arrival_s.max(), rel=1e-9)
