"""The compiled engine core: when a simulation is in its scope, run it through `sim.compiled.kernel`
(numba) instead of the SimPy loop, with identical records (issue 15).

In scope: one replica or several behind any router but the random one, or the ranks of one
lockstep group (sim/core/lockstep.py, exact steps), open arrivals (any horizon),
`ContinuousScheduler` with the plain decode tracker and last-admitted recompute preemption, under any engine's
scheduling rule (sim/sched/rules.py), one sequence per request, `PagedKVManager` with or without automatic prefix
caching (sim/compiled/prefix_cache.py) and a hybrid model's window blocks, without forks or a sliding window on every
layer, a stop rule the core can ask itself
(`compiled_params()`, as the planner's `SLOMissRule`) or none, and a cost model with a compiled form
(`compiled_params()`: the roofline, a whole-step profile, `StepProfileCostModel`, the measured kernels,
`MeasuredCostModel`, or the learned roofline, `LearnedRooflineCostModel`, each with or without the engine's
overhead, `EngineOverheadCostModel`; see `sim.cost.compiled_pricing`). Anything else, or numba missing, runs the
Python engine, which stays the reference; `Simulation.engine_core` says which ran and why.
"""

from __future__ import annotations

import math
import os

import numpy as np

from sim.compiled import prefix_cache
from sim.core.request import Request
from sim.core.router import CountingRouter
from sim.cost.draws import no_draws
from sim.kv import prefix_index
from sim.machine import mappable_bytes, plain_pages

# A cold numba cache (a fresh install, or a changed core) costs ~1 min of compiling the core once: 50-57 s
# measured on the 2-core development machine (AMD EPYC, 2026-11-25), where the SimPy engine ran bench_engine's
# scenario at ~16,000 requests/s. A one-shot command (`servesim run` and `compare`: `prefer_simpy_while_cold`)
# therefore sends its runs to the SimPy engine (identical records) while the process has simulated fewer than
# COLD_CORE_MAX_REQUESTS requests in all: it finishes sooner than the core would compile. Past that, once the core
# is in the cache, and always for the planner, sweeps and the dashboard (hundreds of runs, where the core pays
# for its compile: bench_planner.py on a cold cache took 50 s in SimPy against 43 s compiling, the same machine,
# taskset -c 1, 11-25), the core compiles and runs.
# SERVESIM_COMPILE_WHEN_COLD=1 compiles it for any run (the test suite sets it).
COLD_CORE_MAX_REQUESTS = 100_000
COMPILE_WHEN_COLD_ENV = "SERVESIM_COMPILE_WHEN_COLD"
_cold = {"prefer_simpy": False, "requests_run": 0}  # this process's choice, and the requests it sent to SimPy


def prefer_simpy_while_cold() -> None:
    """Called by a one-shot command: its runs go to the SimPy engine while the core is cold (see above)."""
    _cold["prefer_simpy"] = True
_ROWS_PER_CALL = 1 << 16  # rows the kernel writes between two returns (progress reports), at most
# The step rows' buffers start at about the rows a run of open arrivals writes (~3 a request: bench_engine writes
# 2.75 without an engine preset, 3.13 with SGLang's separate prefill steps) and double when full; in ordinary pages
# (`sim.machine.plain_pages`), which the OS backs only as they are written, so a generous start costs a small run
# nothing. The kernel writes each row once, and the step log takes
# the buffers as they are (before: a copy of each 65k-row chunk, then the chunks joined, 1.3 s of 1M requests'
# 8.6 s). The largest run a scenario may ask for (MAX_NUM_REQUESTS) starts at its size: doubling from a smaller start
# copied what was written twice, 11.8 s of 10M requests' 52.8 s (12-06). Where the machine counts what a process
# maps, not what it writes (`ulimit -v`, a strict overcommit policy: `sim.machine.mappable_bytes`), the start takes
# at most a quarter of what it may still map, leaving the rest of the run the other three (a 5M-request run under
# `ulimit -v` 9 GB failed in its summary when the start took 6.1 GB); a start it still refuses is halved
# (`_start_buffers`). Either way the buffers double when full.
_ROWS_PER_REQUEST = 4
_MAX_START_ROWS = 1 << 26
_MIN_START_ROWS = 1 << 16
_START_SHARE = 4  # of what the machine lets the process map, at most 1 / _START_SHARE goes to the start
_RUN_STEPS_PER_ROW = 4  # the decode runs' buffers start at this many steps a step row
# RequestLog's status code of each kernel request state at the end (NOT_ARRIVED, WAITING, RUNNING, FINISHED,
# REJECTED): none, unfinished, unfinished, finished, rejected.
_FINAL_STATUS = np.array([-1, 1, 1, 0, 2], dtype=np.int64)


def _scope(sim) -> tuple[str, tuple | None]:
    """(why `sim` cannot run compiled, or ""; its cost model's `compiled_params()` when it can)."""
    from sim.core.engine import Replica
    from sim.core.lockstep import LockstepRank
    from sim.kv.paged import PagedKVManager
    from sim.sched.continuous import ContinuousScheduler
    from sim.sched.decode import DecodeTracker

    if sim.stop_when is not None and getattr(sim.stop_when, "compiled_params", None) is None:
        return "a stop rule without compiled_params", None
    if sim.closed_loop_users:
        return "a closed loop", None
    kind = LockstepRank if _one_lockstep_group(sim.replicas) else Replica
    other = next((r for r in sim.replicas if type(r) is not kind), None)
    if other is not None:
        return other.kind, None
    if kind is LockstepRank and sim.replicas[0].group.experts_over_group:  # (the core prices no group's experts)
        return "a lockstep group sharing a mixture of experts", None
    if kind is LockstepRank and not sim.replicas[0].group.pad_prefill_steps:  # (the core pads every step alike)
        return "a lockstep group that pads no step with a prefill", None
    if not isinstance(sim.router, CountingRouter):  # the random router draws in Python
        return f"the {type(sim.router).__name__}", None
    if sim.env.now != 0 or sim.num_requests == 0:
        return "a started or empty simulation", None
    first = sim.replicas[0]
    for replica in sim.replicas:
        gap = _replica_gap(replica, ContinuousScheduler, DecodeTracker, PagedKVManager)
        if gap:
            return gap, None
        a, b = replica.scheduler, first.scheduler
        if (type(replica.cost_model) is not type(first.cost_model) or a.kv.num_blocks != b.kv.num_blocks
                or a.kv.block_size != b.kv.block_size or a.kv.window_bytes_per_slot != b.kv.window_bytes_per_slot
                or (a.max_num_seqs, a.max_num_batched_tokens, a.chunked_prefill, a.max_model_len, a.rule)
                != (b.max_num_seqs, b.max_num_batched_tokens, b.chunked_prefill, b.max_model_len, b.rule)):
            return "replicas configured differently", None
    try:
        from sim.compiled import kernel  # noqa: F401  (numba present)
    except ImportError:
        return "numba is not installed (pip install servesim[fast])", None
    if _cold["prefer_simpy"] and _cold["requests_run"] + sim.num_requests < COLD_CORE_MAX_REQUESTS \
            and os.environ.get(COMPILE_WHEN_COLD_ENV) != "1" and not core_in_cache():
        _cold["requests_run"] += sim.num_requests
        return (f"{sim.num_requests:,} requests on a cold numba cache: the SimPy engine finishes before the core "
                f"would compile (~1 min, once; {COMPILE_WHEN_COLD_ENV}=1 compiles it now)"), None
    cost_model = sim.replicas[0].cost_model
    form = getattr(cost_model, "compiled_params", None)
    price = form() if form is not None else None
    if price is None:
        return f"the cost model {type(cost_model).__name__} has no compiled form", None
    from sim.cost.compiled_pricing import same_prices
    for replica in sim.replicas[1:]:
        if replica.cost_model is not cost_model and not same_prices(replica.cost_model.compiled_params(), price):
            return "replicas priced differently", None
    return "", price


def _one_lockstep_group(replicas) -> bool:
    """Whether the replicas are the ranks of one lockstep group, in order and not yet stepped (the core's lockstep
    mode: sim/core/lockstep.py)."""
    group = getattr(replicas[0], "group", None)
    return (group is not None and len(group.ranks) == len(replicas)
            and all(a is b for a, b in zip(group.ranks, replicas)) and group.num_steps == 0)


def core_in_cache() -> bool:
    """Whether the core's machine code is at hand: compiled in this process, or in numba's cache for this
    source. It reads numba's cache index (a private API of numba's FunctionCache, checked with numba 0.68): on
    another numba whose internals differ it answers True, and the core compiles as it always did."""
    from sim.compiled import kernel
    if kernel.run.overloads:
        return True
    try:
        return bool(kernel.run._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001  (any other numba: assume the cache is warm)
        return True


def _replica_gap(replica, ContinuousScheduler, DecodeTracker, PagedKVManager) -> str:
    """Why this replica's scheduler and KV pool are outside the core's scope, or ""."""
    scheduler = replica.scheduler
    if type(scheduler) is not ContinuousScheduler:
        return f"the {type(scheduler).__name__}"
    if type(scheduler.tracker) is not DecodeTracker:
        return "speculative decoding"
    if scheduler.sequences_per_request != 1:
        return "parallel sampling or beam search"
    if scheduler.swap.capacity_tokens or scheduler.victim != "last_admitted":
        return "swap preemption or another victim policy"
    if scheduler.hold_kv_on_finish or scheduler.running or scheduler.waiting or scheduler.incoming:
        return "a disaggregated or started scheduler"
    kv = scheduler.kv
    if type(kv) is not PagedKVManager:
        return f"the {type(kv).__name__}"
    if (kv.sharing and kv.prefix_cache is None) or kv.sliding_window:
        return "shared or sliding-window KV blocks"
    return ""


def run_compiled(sim) -> bool:
    """Run `sim` through the compiled core if it is in scope: True, with its logs, counters and clock set as
    `Simulation.run` leaves them. False, with `sim` untouched, when out of scope or when SimPy's order of two
    simultaneous events would decide the outcome (the Python engine then runs it)."""
    gap, price = _scope(sim)
    if gap:
        sim.engine_core = f"python ({gap})"
        return False
    from sim.compiled import kernel as k

    replicas = sim.replicas
    num_replicas = len(replicas)
    scheduler, kv = replicas[0].scheduler, replicas[0].scheduler.kv  # every replica is configured alike (_scope)
    n = sim.num_requests
    # The per-request state, one row each (kernel.Q_* and QF_*); the names below are views of those rows.
    req = np.zeros((k.NUM_Q, n), dtype=np.int64)
    reqf = np.full((k.NUM_QF, n), np.nan)
    arrival_s, arrival_ev = reqf[k.QF_ARRIVAL], reqf[k.QF_ARRIVAL_EV]
    prompt, max_out = req[k.Q_PROMPT], req[k.Q_MAX_OUT]
    arrival_s[:] = sim.arrival_s[:n]
    prompt[:] = sim.input_tokens[:n]
    max_out[:] = sim.output_tokens[:n]
    horizon = sim.horizon_s if sim.horizon_s is not None else math.inf
    max_seqs = scheduler.max_num_seqs

    sr = np.zeros((num_replicas, k.NUM_SI), dtype=np.int64)
    sr[:, [k.I_RUN_HEAD, k.I_RUN_TAIL, k.I_PF_HEAD, k.I_PF_TAIL, k.I_RETURN_HEAD, k.I_RETURN_TAIL, k.I_W_HEAD,
           k.I_W_TAIL]] = -1
    sr[:, k.I_ALLOC_CLOCK] = -1
    sr[:, k.I_FREE_BLOCKS] = kv.num_blocks
    fr = np.zeros((num_replicas, k.NUM_FR))
    sg = np.zeros(k.NUM_SG, dtype=np.int64)
    sf = np.zeros(k.NUM_SF)
    sf[k.F_HORIZON] = horizon
    rule = sim.stop_when  # asked after the first step ending at or after its next check, as the engine asks it
    rule_state = dict(vars(rule)) if rule is not None else None  # put back if the Python engine reruns the scenario
    sf[k.F_CHECK] = math.inf if rule is None else getattr(rule, "next_check_s", -math.inf)
    sf[k.F_STOPPED_AT] = math.nan
    stop = np.zeros(k.NUM_S)
    if rule is not None:  # the core asks the rule itself, with the same arithmetic (SLOMissRule.compiled_params)
        stop[k.S_ON] = 1.0
        stop[k.S_TTFT:] = rule.compiled_params()
    rule_of = scheduler.rule  # sim/sched/rules.py; every replica has the same (_scope compares them)
    cfg = np.zeros(k.NUM_CFG + len(rule_of.cuda_graph_batch_sizes), dtype=np.int64)
    cfg[k.C_MIXED], cfg[k.C_GROUP_STEPS] = rule_of.mixed_batches, rule_of.decode_steps_per_schedule
    cfg[k.C_WHOLE], cfg[k.C_CONTEXT] = rule_of.whole_output_reservation, rule_of.context_pass
    cfg[k.C_PREFILL_ONLY], cfg[k.C_WHOLE_PROMPT] = rule_of.prefill_only_steps, rule_of.whole_prompt_admission
    cfg[k.C_PREFILL_CONTEXT] = rule_of.prefill_context_tokens
    cfg[k.C_PREFILL_CHUNK_CAP] = rule_of.max_prefill_chunk_tokens
    cfg[k.C_CAP_WHEN_ALONE] = rule_of.prefill_chunk_cap_when_alone
    cfg[k.C_CAP_FAIR_SHARE] = rule_of.prefill_chunk_cap_fair_share
    cfg[k.NUM_CFG:] = rule_of.graph_sizes()
    if rule_of.new_token_ratio is not None:
        cfg[k.C_RATIO], cfg[k.C_RATIO_DECAY] = 1, rule_of.new_token_ratio.decay_steps
        sf[k.F_RATIO_INIT], sf[k.F_RATIO_MIN] = rule_of.new_token_ratio.init, rule_of.new_token_ratio.min
        cfg[k.C_MOST_OUTPUT] = max_out.max(initial=0)
    cfg[k.C_MAX_SEQS], cfg[k.C_MAX_BATCHED] = max_seqs, scheduler.max_num_batched_tokens
    cfg[k.C_CHUNKED], cfg[k.C_MAX_MODEL_LEN] = scheduler.chunked_prefill, scheduler.max_model_len
    cfg[k.C_NUM_BLOCKS], cfg[k.C_BLOCK_SIZE], cfg[k.C_FAST_DECODE] = kv.num_blocks, kv.block_size, sim.fast_decode
    cfg[k.C_ROUTER] = sim.router.KIND
    group = replicas[0].group if _one_lockstep_group(replicas) else None
    if group is not None:  # the ranks step together (sim/core/lockstep.py); no decode runs, as its process takes none
        cfg[k.C_LOCKSTEP], cfg[k.C_LS_PAD], cfg[k.C_LS_IDLE_CHECK] = 1, group.pad_tokens, group.idle_check_steps
        cfg[k.C_FAST_DECODE] = 0
    pc = _prefix_cache_state(sim, kv, scheduler, num_replicas)
    cfg[k.C_PREFIX_CACHING], cfg[k.C_PREFIX_UNIT] = kv.prefix_cache is not None, sim.prefix_unit_tokens
    if kv.window_bytes_per_slot:  # a hybrid model's window blocks (every replica's manager alike: _scope)
        cfg[k.C_WINDOW_SPAN] = kv.window_blocks_span
        cfg[k.C_WINDOW_BYTES], cfg[k.C_SLOT_BYTES] = kv.window_bytes_per_slot

    out, preemptions = req[k.Q_OUT], req[k.Q_PREEMPTIONS]
    anchor, rep, state = req[k.Q_ANCHOR], req[k.Q_REP], req[k.Q_STATE]
    anchor[:] = -1
    req[[k.Q_RUN_NEXT, k.Q_RUN_PREV, k.Q_PF_NEXT, k.Q_PF_PREV, k.Q_SLOT]] = -1
    first_sched, first_tok = reqf[k.QF_FIRST_SCHED], reqf[k.QF_FIRST_TOK]
    last_tok, finish_s = reqf[k.QF_LAST_TOK], reqf[k.QF_FINISH]
    heap = np.zeros((num_replicas, n // num_replicas + 2 * max_seqs + 2), dtype=np.int64)
    bucket = np.zeros((num_replicas, kv.block_size), dtype=np.int64)
    plan = np.zeros((3, num_replicas, max_seqs + 1), dtype=np.int64)
    pf_snap = np.zeros(max_seqs + 1, dtype=np.int64)
    run_tmp = np.zeros((num_replicas, scheduler.max_model_len + 2))
    # The rows' buffers (a column per row; the replica last) and the decode runs' (every step's duration, the KV
    # token states and internal slots of all but each run's last step), in ordinary pages: see _ROWS_PER_REQUEST.
    int_rows, float_rows = len(k.INT_COLUMNS) + 1, len(k.FLOAT_COLUMNS)
    row_i, row_f, run_dur, run_i = _start_buffers(_start_rows(n, int_rows, float_rows), int_rows, float_rows,
                                                  scheduler.max_model_len + 2)
    arrival_ev[:] = k.arrival_event_times(arrival_s)
    # The step-time draws (issue 31), the SimPy engine's: one float64 pack type either way, so one compiled loop.
    draws = no_draws() if sim.step_draws is None else np.ascontiguousarray(sim.step_draws, dtype=np.float64)

    log = sim.steps

    def hand_back(reason: str) -> bool:
        sim.steps = type(log)(kv.capacity_slots)  # back to an empty log for the Python engine
        _clear_outside_points(price)  # and no points noted: the Python engine notes its own
        if rule is not None:
            vars(rule).clear()
            vars(rule).update(rule_state)  # and the stop rule as it was (its next check, its count)
        sim.engine_core = f"python ({reason})"
        return False

    while True:
        # The kernel returns after _ROWS_PER_CALL rows (a progress report), or when a buffer is full (FLUSH).
        yield_rows = min(row_i.shape[1], int(sg[k.G_ROWS]) + _ROWS_PER_CALL)
        code = k.run(sr, fr, sg, sf, cfg, price, stop, req, reqf, heap, bucket, plan, pf_snap, run_tmp,
                     row_i, row_f, run_dur, run_i, yield_rows, run_dur.shape[0], draws, pc)
        if code == k.DIVERGED:
            return hand_back("two events at one time: SimPy's event order decides")
        if code == k.UNPRICED:
            return hand_back("more points outside the cost model's measured tables than its note log holds")
        if code == k.DONE:
            _append_rows(log, sg, row_i, row_f, run_dur, run_i, k)
            break
        if sg[k.G_ROWS] + num_replicas > row_i.shape[1]:  # (a lockstep group's step writes a row a rank)
            row_i, row_f = _doubled(row_i, int(sg[k.G_ROWS])), _doubled(row_f, int(sg[k.G_ROWS]))
        if sg[k.G_RUN_STEPS] + scheduler.max_model_len + 2 > run_dur.shape[0]:
            run_dur, run_i = _doubled(run_dur, int(sg[k.G_RUN_STEPS])), _doubled(run_i, int(sg[k.G_RUN_KV]))
        if (sr[:, k.I_HEAP_SIZE] + max_seqs + 1 > heap.shape[1]).any():
            heap = np.concatenate([heap, np.zeros_like(heap)], axis=1)
        if sim.progress is not None:
            sim.progress(float(sf[k.F_NOW]), int(sg[k.G_NUM_DONE]))
    outside = _outside_points(price)
    if len(outside):
        # The Python engine notes each replica's points in that replica's model: one shared model, or SimPy.
        cost_model = replicas[0].cost_model
        if any(replica.cost_model is not cost_model for replica in replicas):
            return hand_back("points outside the measured tables, and replicas with cost models of their own")
        cost_model.note_compiled_outside(outside)

    # The state Simulation.run leaves: counters, Little's law to the end, the records.
    stopped_s = float(sf[k.F_STOPPED_AT]) if sg[k.G_STOPPED] else None
    if rule is not None:
        rule.next_check_s = float(sf[k.F_CHECK])
        rule.num_checks += int(sg[k.G_NUM_CHECKS])
    end_s = horizon if sim.horizon_s is not None else float(sf[k.F_LAST_EVENT])
    if stopped_s is not None:
        # The engines stop after their steps in flight; SimPy's clock still reaches the next arrival (whose
        # process wakes to find the run stopped) or the horizon.
        sim.stopped_early_s = stopped_s
        nxt = int(sg[k.G_NEXT_ARRIVAL])
        if sim.horizon_s is None and nxt < n:
            end_s = max(end_s, float(arrival_ev[nxt]))
    sim.env.advance_to(end_s)
    sim.num_arrived, sim.num_done = int(sg[k.G_NUM_ARRIVED]), int(sg[k.G_NUM_DONE])
    sim._next_request = int(sg[k.G_NEXT_ARRIVAL])
    sim.in_system, sim.in_system_area = int(sg[k.G_IN_SYSTEM]), float(sf[k.F_AREA])
    sim._in_system_since = float(sf[k.F_SINCE])
    sim._change_in_system(0)
    for i, replica in enumerate(replicas):
        replica.num_outstanding = int(sr[i, k.I_OUTSTANDING])
        cache = replica.scheduler.kv.prefix_cache
        if cache is not None:  # its statistics, as the Python engine leaves them (its block tables stay empty)
            cache.set_stats(pc[0][i, prefix_index.FIRST_STAT:])
    sim.router._next = int(sg[k.G_RR])  # the arrivals routed
    members = anchor >= 0  # still decoding at the horizon: their counters catch up, as in_flight() syncs them
    out[members] += sr[rep[members], k.I_CLOCK] - anchor[members]
    _fill_records(sim.requests, state, k, arrival_s, first_sched, first_tok, last_tok, finish_s, prompt, out,
                  max_out, preemptions, rep)
    for i in np.flatnonzero(state == k.REJECTED):
        sim.requests.reject_reason[int(i)] = replicas[int(rep[i])].scheduler.rejection_reason(
            Request(int(i), float(arrival_s[i]), int(prompt[i]), int(max_out[i])))
    if sim.progress is not None:
        sim.progress(end_s, sim.num_done)
    if group is not None:
        group.num_steps, group.num_dummy_forwards = int(sg[k.G_LS_STEPS]), int(sg[k.G_LS_DUMMIES])
        group.num_padding_tokens = int(sg[k.G_LS_PAD_TOKENS])
    sim.engine_core = "compiled"
    return True


def _prefix_cache_state(sim, kv, scheduler, num_replicas: int) -> tuple:
    """The prefix cache's arrays (sim/compiled/prefix_cache.py) for this run, empty without one: the requests'
    content ids one after another (none for a workload without any: nothing is ever cached, but admissions are
    still counted, as in the SimPy engine), and room for every running request's prompt keys."""
    if kv.prefix_cache is None:
        return prefix_cache.no_state()
    n, unit, bs = sim.num_requests, sim.prefix_unit_tokens, kv.block_size
    if sim.prefix_ids is None:  # no request has content ids (counted in bulk: a preset caches prefixes by default)
        lengths, ids = np.zeros(n, dtype=np.int64), np.zeros(0, dtype=np.int64)
    else:
        ids_of = sim.prefix_ids[:n]
        lengths = np.array([0 if ids is None else len(ids) for ids in ids_of], dtype=np.int64)
        ids = np.concatenate([np.asarray(i, dtype=np.int64) for i in ids_of if i is not None and len(i)] or
                             [np.zeros(0, dtype=np.int64)])
    ids_start = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=ids_start[1:])
    covered = np.minimum(np.asarray(sim.input_tokens[:n], dtype=np.int64), lengths * unit) if unit > 0 else lengths
    max_keys = int(-(-covered.max(initial=0) // bs)) + 1
    return prefix_cache.state(num_replicas, kv.num_blocks, scheduler.max_num_seqs + 1, max_keys, ids, ids_start)


def _outside_points(price) -> np.ndarray:
    """The rows of a measured-kernel pack's note log (`sim.cost.measured_kernel`); none for other pricers."""
    from sim.cost.compiled_pricing import KIND_MEASURED
    if price[0] != KIND_MEASURED:
        return np.zeros((0, 4))
    *_, note_log, note_count = price[3]
    return note_log[:int(note_count[0])]


def _clear_outside_points(price) -> None:
    from sim.cost.compiled_pricing import KIND_MEASURED
    if price[0] == KIND_MEASURED:
        price[3][-1][0] = 0  # the note log's length


def _start_rows(num_requests: int, int_rows: int, float_rows: int) -> int:
    """The step rows the buffers start at (see _ROWS_PER_REQUEST): _ROWS_PER_REQUEST a request, up to
    _MAX_START_ROWS, and, where the machine counts what is mapped, at most 1 / _START_SHARE of what it may still map
    (never under _MIN_START_ROWS)."""
    bytes_per_row = 8 * (int_rows + float_rows + 4 * _RUN_STEPS_PER_ROW)  # the run steps' duration and 3 KV ints
    share = min(mappable_bytes() / _START_SHARE / bytes_per_row, _MAX_START_ROWS)
    return min(_MAX_START_ROWS, 1024 + _ROWS_PER_REQUEST * num_requests, max(_MIN_START_ROWS, int(share)))


def _start_buffers(rows: int, int_rows: int, float_rows: int, run_margin: int) -> tuple[np.ndarray, ...]:
    """The step rows' buffers (`int_rows` int64 and `float_rows` float64 rows, a step row a column) at `rows`
    columns, and the decode runs' (every step's duration; the KV token states, internal and shared slots) at
    _RUN_STEPS_PER_ROW times as many steps plus `run_margin` (the longest run), halved while the machine refuses to
    map them at once, down to _MIN_START_ROWS."""
    while True:
        try:
            run_steps = _RUN_STEPS_PER_ROW * rows + run_margin
            return (plain_pages((int_rows, rows), np.int64), plain_pages((float_rows, rows), np.float64),
                    plain_pages((run_steps,), np.float64), plain_pages((3, run_steps), np.int64))
        except MemoryError:
            if rows <= _MIN_START_ROWS:
                raise
            rows = max(rows // 2, _MIN_START_ROWS)


def _doubled(buffer: np.ndarray, used: int) -> np.ndarray:
    """`buffer` at twice its length (its last axis), holding the first `used` entries written so far."""
    grown = plain_pages(buffer.shape[:-1] + (2 * buffer.shape[-1],), buffer.dtype)
    grown[..., :used] = buffer[..., :used]
    return grown


def _append_rows(log, sg, row_i, row_f, run_dur, run_i, k) -> None:
    """Hand the rows and run steps the kernel wrote to the step log, as views of its buffers (it writes no more)."""
    rows, steps, kv_steps = int(sg[k.G_ROWS]), int(sg[k.G_RUN_STEPS]), int(sg[k.G_RUN_KV])
    run_tok, run_internal, run_shared = run_i
    columns = {"replica": row_i[k.ROW_REPLICA, :rows]}
    columns.update((name, row_f[j, :rows]) for j, name in enumerate(k.FLOAT_COLUMNS))
    columns.update((name, row_i[j, :rows]) for j, name in enumerate(k.INT_COLUMNS))
    run_kv = {name: np.zeros(kv_steps, dtype=np.int64) for name in log.RUN_KV_COLUMNS}  # one array each
    run_kv["kv_token_slots"], run_kv["kv_internal_slots"] = run_tok[:kv_steps], run_internal[:kv_steps]
    run_kv["kv_shared_slots"] = run_shared[:kv_steps]
    log.add_chunk(columns, run_dur[:steps], run_kv)


def _fill_records(records, state, k, arrival_s, first_sched, first_tok, last_tok, finish_s, prompt, out,
                  max_out, preemptions, rep) -> None:
    """RequestLog.record for every request that arrived: finished, rejected or (at a horizon) unfinished."""
    arrived = state != k.NOT_ARRIVED
    if arrived.all():  # (every request, as at no horizon: whole copies, several times faster than through a mask)
        arrived = slice(None)
    records.status[:] = _FINAL_STATUS[state]
    records.replica[arrived] = rep[arrived]
    records.arrival_s[arrived] = arrival_s[arrived]
    for name, values in (("first_scheduled_s", first_sched), ("first_token_s", first_tok),
                         ("last_token_s", last_tok), ("finish_s", finish_s)):
        getattr(records, name)[arrived] = values[arrived]
    records.prompt_tokens[arrived] = prompt[arrived]
    records.output_tokens[arrived] = out[arrived]
    records.max_output_tokens[arrived] = max_out[arrived]
    records.preemptions[arrived] = preemptions[arrived]

