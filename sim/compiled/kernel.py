"""The engine loop of `sim.core.engine` for its most common case, compiled with numba (issue 15).

One replica or several (any routing but the random one), or one lockstep group's ranks
(`_group_event`: sim/core/lockstep.py, exact steps), open arrivals (any horizon), continuous batching
(`ContinuousScheduler`, chunked prefill or not, last-admitted recompute preemption), paged KV with or without
automatic prefix caching (sim/compiled/prefix_cache.py; no forks, sliding window or swap), decode
runs or exact steps, and a cost model with a compiled form (`sim.cost.compiled_pricing`: the roofline, a whole-step
profile or the measured kernels).
`sim.compiled.engine` decides when a simulation is in that scope, prepares the arrays and reads them back; this
module is only the loop. It repeats, decision by decision, what the SimPy engine, the scheduler, the decode
tracker and the paged KV manager do, and prices each step with the very function the cost model's `step_cost`
calls (`compiled_pricing.price_parts`, inlined here), so the records it writes are identical to theirs
(tests/integration/test_compiled_core.py compares them on random scenarios). Where the two could part (two
events at one time: an arrival at exactly a step's end, or two replicas' steps ending together, whose order SimPy
settles by event ids), it stops and says so, and the caller runs the Python engine instead. Events are taken in time order: the next arrival, or the earliest step end; a
replica plans its step when it starts and applies it when it ends, so the others' events fall in between.

Block identities never matter without sharing, so blocks are counted, not listed. A decoding request's
counters lag as in `DecodeTracker` (an anchor clock), and the blocks it holds follow from them: its
computed tokens, plus the one it computes in the coming step once that step's blocks were taken.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim import numba_cache  # noqa: F401  (drops stale numba caches before anything loads)
from sim.compiled import prefix_cache
from sim.core.lockstep import dummy_forward_tokens, padding_tokens
from sim.core.router import choose_replica
from sim.core.step_plan import linear_tokens
from sim.cost.compiled_pricing import note_unpriced_decode_steps, price_parts
from sim.cost.draws import perturb
from sim.cost.overhead import with_overhead
from sim.kv import prefix_index
from sim.kv.admission import admission_fits
from sim.sched.rules import (
    SGLANG_CLIP_MAX_NEW_TOKENS,
    clipped_output,
    context_charge,
    context_fits,
    context_pass_chunk,
    group_steps_left_after,
    new_token_ratio,
    padded_batch,
    prefill_chunk_limit,
    ratio_admits,
    ratio_admitted_tokens,
    reservation_fits,
    running_future_bound,
    step_prefill_chunk_cap,
)

# Return codes of `run`.
DONE = 0
FLUSH = 1  # an output buffer is (nearly) full, or the caller asked for its rows so far (a progress report): call again
DIVERGED = 2  # two events at one time (an arrival and a step end, two step ends): SimPy's order decides
UNPRICED = 3  # the cost model's compiled form cannot price a step as its Python form would: run the Python engine
TAKEN = -1  # (between the loop's own functions) an event was taken: `run` goes on

# Per-request state codes.
NOT_ARRIVED, WAITING, RUNNING, FINISHED, REJECTED = 0, 1, 2, 3, 4

# Indices into the int64 per-replica state array `sr[r]` (a replica's scheduler, KV pool and step in flight).
(I_CLOCK, I_ALLOC_CLOCK, I_MEMBERS, I_TOKEN_SUM, I_PF_SUM, I_FREE_BLOCKS, I_RUNNING, I_RUN_HEAD, I_RUN_TAIL,
 I_PF_HEAD, I_PF_TAIL, I_W_HEAD, I_W_COUNT, I_HEAP_SIZE, I_OUTSTANDING, I_BUSY, I_NUM_PF, I_NUM_DECODE,
 I_NUM_WAITING, I_NUM_PREFILL_TOKENS, I_NUM_PREEMPTED, I_NUM_STEPS, I_GROUP_LEFT, I_RESERVED, I_RATIO_RESET,
 I_NUM_PADDING, I_STEPS_DRAWN, I_WINDOW, I_RETURN_HEAD, I_RETURN_TAIL, I_W_TAIL, I_NUM_SAMPLED) = range(32)
NUM_SI = 32
# I_GROUP_LEFT: decode steps left in the current group (scheduler rule decode_steps_per_schedule); I_RESERVED: the
# blocks of every running request's whole sequence (whole_output_reservation); I_RATIO_RESET: the decode clock at
# the last preemption (new_token_ratio); I_NUM_PADDING: the step in flight's CUDA-graph padding sequences;
# I_STEPS_DRAWN: the steps the replica started (a run's every step), the step-time draws' counter
# (sim/cost/draws.py; the SimPy engine counts its steps alike); I_WINDOW: the window blocks the running requests of a
# hybrid model hold; I_RETURN_HEAD / I_RETURN_TAIL: the requests finished inside a group of decode steps that has
# not ended, linked through Q_RUN_NEXT / Q_RUN_PREV (ContinuousScheduler._returning: they return at its end).
# I_W_HEAD / I_W_TAIL / I_W_COUNT: the waiting queue, its first and last request (-1: empty) and its length, linked
# through Q_RUN_NEXT / Q_RUN_PREV too: a request is in one of its replica's lists at a time (waiting, running,
# returning), so the queues of every replica take no array of their own. I_NUM_SAMPLED: the sequences the planned
# step samples (a lockstep group plans every rank's step before it prices any).
# Indices into the float64 per-replica array `fr[r]`: the step in flight.
R_START, R_END, R_DURATION, R_FLOPS, R_BYTES = range(5)
NUM_FR = 5
# Indices into the int64 global state array `sg`.
(G_NEXT_ARRIVAL, G_NUM_ARRIVED, G_NUM_DONE, G_IN_SYSTEM, G_ROWS, G_RUN_STEPS, G_RUN_KV, G_STEP_ID, G_RR,
 G_STOPPED, G_NUM_CHECKS, G_NUM_REJECTED, G_NUM_FINISHED, G_FIN_COUNTED, G_DONE_TTFT, G_DONE_TPOT, G_DONE_E2E,
 G_DONE_BAD, G_LS_BUSY, G_LS_RUNNING, G_LS_WAVE_STEPS, G_LS_STEPS, G_LS_DUMMIES, G_LS_PAD_TOKENS) = range(24)
NUM_SG = 24
# G_NUM_FINISHED: requests finished so far, their ids in order in req[Q_FIN_ORDER]; the stop rule has counted the
# first G_FIN_COUNTED of them into G_DONE_* (finished requests over each limit, and over any), so that a check
# reads only the requests finished since the last one and those in flight, not every request.
# G_LS_*: a lockstep group (sim/core/lockstep.py): a group step in flight, a wave running, the wave's steps since its
# last idle check, the group's steps, its ranks' dummy forwards and their padding tokens (LockstepGroup.num_steps,
# num_dummy_forwards, num_padding_tokens).
# Indices into the float64 global state array `sf`.
(F_NOW, F_AREA, F_SINCE, F_LAST_EVENT, F_HORIZON, F_CHECK, F_STOPPED_AT, F_RATIO_INIT, F_RATIO_MIN,
 F_GROUP_END) = range(10)
NUM_SF = 10  # F_RATIO_*: the scheduling rule's new-token ratio (constants of the run); F_GROUP_END: when a lockstep
# group's step in flight ends
# The stop rule's numbers (`SLOMissRule.compiled_params`; S_ON 0: no rule):
# on, TTFT / TPOT / E2E limits (inf: none), violations that make a miss certain, the goodput fraction (NaN: none),
# the requests the workload generates, seconds between checks.
(S_ON, S_TTFT, S_TPOT, S_E2E, S_NEEDED, S_MIN_GOODPUT, S_NUM_REQUESTS, S_EVERY) = range(8)
NUM_S = 8
# Indices into the int64 configuration array `cfg`.
(C_MAX_SEQS, C_MAX_BATCHED, C_CHUNKED, C_MAX_MODEL_LEN, C_NUM_BLOCKS, C_BLOCK_SIZE, C_FAST_DECODE,
 C_ROUTER, C_MIXED, C_GROUP_STEPS, C_WHOLE, C_RATIO, C_RATIO_DECAY, C_CONTEXT, C_PREFILL_ONLY,
 C_WHOLE_PROMPT, C_PREFIX_CACHING, C_PREFIX_UNIT, C_WINDOW_SPAN, C_WINDOW_BYTES, C_SLOT_BYTES,
 C_PREFILL_CONTEXT, C_PREFILL_CHUNK_CAP, C_CAP_WHEN_ALONE, C_CAP_FAIR_SHARE, C_LOCKSTEP, C_LS_PAD,
 C_LS_IDLE_CHECK, C_MOST_OUTPUT) = range(29)
NUM_CFG = 29
# C_MIXED .. C_WHOLE_PROMPT: the scheduler's rule (sim/sched/rules.py SchedulingRule): mixed batches, decode steps
# per schedule, whole-output reservation, new-token ratio on and its decay steps, the context pass, whether a
# step may be prefill-only (`prefill_only_steps`), and whole-prompt admission. C_PREFIX_CACHING: automatic prefix
# caching (sim/compiled/prefix_cache.py), C_PREFIX_UNIT the tokens of a content id. C_WINDOW_*: a hybrid model's
# window blocks (`PagedKVManager.window_blocks`: the most blocks a window touches, a token's bytes in the sliding
# layers, a token slot's; bytes 0: none). C_PREFILL_CONTEXT: the rule's prefill_context_tokens (0: none).
# C_PREFILL_CHUNK_CAP, C_CAP_WHEN_ALONE, C_CAP_FAIR_SHARE: its max_prefill_chunk_tokens (0: none),
# prefill_chunk_cap_when_alone and prefill_chunk_cap_fair_share. C_LOCKSTEP: the replicas are one lockstep group's
# ranks (sim/core/lockstep.py), C_LS_PAD its pad_tokens, C_LS_IDLE_CHECK its idle_check_steps. C_ROUTER: the
# router's rule (sim/core/router.py `choose_replica`'s kind). C_MOST_OUTPUT: the most output tokens any request of the
# run may write (the new-token ratio's bound, `running_future_bound`). Past NUM_CFG: the sorted CUDA-graph batch
# sizes (none: no padding).
# Rows of the int64 per-request array `req` and of the float64 one `reqf`. The per-request state travels as
# these two arrays, not one array each: numba passes every array argument as several machine words, and with
# ~60 of them a call to `_start_step` cost more than the scheduling it does. The functions below index them in
# place (`req[Q_OUT, rid]`), as they do the per-replica state (`sr[r, I_CLOCK]`).
(Q_PROMPT, Q_MAX_OUT, Q_COMPUTED, Q_OUT, Q_ANCHOR, Q_BLOCKS, Q_STATE, Q_PREEMPTIONS, Q_REP, Q_RUN_NEXT, Q_RUN_PREV,
 Q_PF_NEXT, Q_PF_PREV, Q_STAMP, Q_FIN_ORDER, Q_SLOT) = range(16)
NUM_Q = 16  # Q_SLOT: the prefix cache's slot of a request holding blocks (sim/compiled/prefix_cache.py)
QF_ARRIVAL, QF_ARRIVAL_EV, QF_FIRST_SCHED, QF_FIRST_TOK, QF_LAST_TOK, QF_FINISH = range(6)
NUM_QF = 6
# Rows of the planned step's array `plan[:, r]`: request ids, chunks, contexts.
P_RID, P_CHUNK, P_CTX = range(3)
# Integer step-log columns, in this order (`sim.core.engine.StepLog.COLUMNS` minus replica and the floats).
INT_COLUMNS = ("num_seqs", "num_waiting", "num_prefill_tokens", "num_decode_seqs", "num_padding_seqs",
               "num_output_tokens", "num_preempted", "kv_token_slots", "kv_reserved_slots", "kv_internal_slots",
               "kv_external_slots", "kv_capacity_slots", "kv_shared_slots", "swap_in_tokens", "swap_out_tokens",
               "num_steps")
FLOAT_COLUMNS = ("start_s", "duration_s", "flops", "bytes")
ROW_REPLICA = len(INT_COLUMNS)  # the last row of `row_i`: the replica of each step row


@njit(cache=True)
def arrival_event_times(arrival_s):
    """When SimPy fires each arrival: the arrivals process sleeps `arrival - now` from its own clock, and
    `now + (a - now)` is not always `a` in floating point."""
    n = arrival_s.shape[0]
    out = np.empty(n)
    now = 0.0
    for i in range(n):
        delay = arrival_s[i] - now
        if delay > 0:
            now = now + delay
        out[i] = now
    return out


# The helpers the loop runs at every event are inlined where it calls them (inline="always"): a call passes each
# array as seven machine words, and `run` at bench_engine 1M took 1.0 s with them as calls, 0.7 s inlined (11-28).
# --- the finish heap: (finish clock, request id) pairs as one int64 key, smallest first -------------------
@njit(cache=True, inline="always")
def _heap_push(heap_all, sr, r, key):
    i = sr[r, I_HEAP_SIZE]
    sr[r, I_HEAP_SIZE] = i + 1
    heap_all[r, i] = key
    while i > 0:
        parent = (i - 1) >> 1
        if heap_all[r, parent] <= key:
            break
        heap_all[r, i] = heap_all[r, parent]
        i = parent
    heap_all[r, i] = key


@njit(cache=True, inline="always")
def _heap_pop(heap_all, sr, r):
    size = sr[r, I_HEAP_SIZE] - 1
    sr[r, I_HEAP_SIZE] = size
    top = heap_all[r, 0]
    last = heap_all[r, size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap_all[r, child + 1] < heap_all[r, child]:
            child += 1
        if heap_all[r, child] >= last:
            break
        heap_all[r, i] = heap_all[r, child]
        i = child
    if size > 0:
        heap_all[r, i] = last
    return top


@njit(cache=True)
def _blocks_for(tokens, bs):
    return -(-tokens // bs)


@njit(cache=True)
def _reserved_blocks(req, rid, bs, cfg):
    """The blocks a whole-output reservation holds for a request: its final KV tokens (prompt + output - 1), as
    `Request.num_final_kv_tokens` counts them, and its window blocks (`PagedKVManager.blocks_for_sequence`)."""
    return _blocks_for(req[Q_PROMPT, rid] + req[Q_MAX_OUT, rid] - 1, bs) + _window_blocks(req, rid, bs, cfg)


@njit(cache=True, inline="always")
def _window_blocks(req, rid, bs, cfg):
    """The blocks a hybrid model's request holds for its sliding layers while it holds any (0 for any other model):
    `PagedKVManager.window_blocks` of its final KV tokens."""
    if cfg[C_WINDOW_BYTES] == 0:
        return 0
    n = min(_blocks_for(req[Q_PROMPT, rid] + req[Q_MAX_OUT, rid] - 1, bs), cfg[C_WINDOW_SPAN])
    return -(-n * cfg[C_WINDOW_BYTES] // cfg[C_SLOT_BYTES])


@njit(cache=True, inline="always")
def _stale(req, rid, fclock):
    """A finish-heap entry no longer holds: the request left the decode tracker, or will finish at another clock."""
    return (req[Q_ANCHOR, rid] < 0 or req[Q_STATE, rid] != RUNNING
            or req[Q_ANCHOR, rid] + req[Q_MAX_OUT, rid] - req[Q_OUT, rid] != fclock)


# Compiled without numba's reference counting (`_nrt=False`, which the functions it calls inherit). The loop and
# everything it calls only read and write arrays its caller owns for the whole call, and allocate none (an
# allocation here fails to compile), so the counts guard nothing; with them, every array a call passed or a tuple
# gave up took and dropped a reference with an atomic operation, and perf found NRT_incref/NRT_decref at 71% of
# this loop's time (bench_engine 1M, development machine, 11-28: `run` 5.7 s with them, 0.7 s without).
@njit(cache=True, nogil=True, _nrt=False)
def run(sr, fr, sg, sf, cfg, price, stop, req, reqf, heap, bucket, plan, pf_snap, run_tmp,
        row_i, row_f, run_dur, run_i, max_rows, max_run_steps, draws, pc):
    """Advance the simulation event by event (arrivals, the replicas' step ends in time order) until every
    request is done (DONE), the output buffers need reading (FLUSH; call again), the SimPy order cannot be
    repeated (DIVERGED) or a step cannot be priced here (UNPRICED). The stop rule (`stop`) is asked after every
    step ending at or after its next check; after a stop no arrival is admitted and no step starts, but the
    steps in flight still end (SimPy lets them) and the rule is asked again. `draws`: the step-time draw pack
    (sim/cost/draws.py; empty: step times as priced). `pc`: the prefix cache's arrays (sim/compiled/prefix_cache.py;
    empty without it)."""
    n_req = req.shape[1]
    arrival_ev = reqf[QF_ARRIVAL_EV]
    num_replicas = sr.shape[0]
    kind, roof, steps_pack, measured, overhead = price  # once (see compiled_pricing.price_parts)
    max_seqs = cfg[C_MAX_SEQS]
    max_model_len = cfg[C_MAX_MODEL_LEN]
    horizon = sf[F_HORIZON]
    lockstep = cfg[C_LOCKSTEP] != 0
    rows_per_event = num_replicas if lockstep else 1

    while True:
        if sg[G_ROWS] + rows_per_event > max_rows or sg[G_RUN_STEPS] + max_model_len + 2 > max_run_steps:
            return FLUSH
        for r in range(num_replicas):
            if sr[r, I_HEAP_SIZE] + max_seqs + 1 > heap.shape[1]:
                return FLUSH
        stopped = sg[G_STOPPED] != 0
        if lockstep:
            code = _group_event(sr, fr, sg, sf, cfg, kind, roof, steps_pack, measured, overhead, stop, req, reqf,
                                heap, bucket, plan, pf_snap, run_tmp, row_i, row_f, run_dur, run_i, draws, pc)
            if code != TAKEN:
                return code
            continue
        # The next event: the earliest step end (two at one time: SimPy's order decides), or the next arrival.
        r_end = -1
        t_end = math.inf
        for r in range(num_replicas):
            if sr[r, I_BUSY] != 0:
                e = fr[r, R_END]
                if e < t_end:
                    t_end = e
                    r_end = r
                elif e == t_end and e < horizon:
                    return DIVERGED
        if t_end >= horizon:
            t_end = math.inf
        t_arr = math.inf
        nxt = sg[G_NEXT_ARRIVAL]
        if not stopped and nxt < n_req and arrival_ev[nxt] < horizon:
            t_arr = arrival_ev[nxt]
        if math.isinf(t_end) and math.isinf(t_arr):
            return DONE
        if t_arr == t_end:
            return DIVERGED  # an arrival at exactly a step's end
        if t_arr < t_end:
            _admit_arrivals_at(t_arr, sr, fr, sg, sf, cfg, req, reqf)
            sf[F_NOW] = t_arr
            # The idle replicas an arrival woke plan a step now (every arrival at this time is in by then).
            now, r_first, r_stop, woken_only = t_arr, 0, num_replicas, True
        else:
            _finish_step(r_end, sr, fr, sg, sf, cfg, req, reqf, heap, bucket, plan, run_tmp, row_i, row_f, run_dur,
                         run_i, pc)
            sf[F_NOW] = t_end
            sf[F_LAST_EVENT] = t_end
            _ask_stop_rule(stop, t_end, sr, sg, sf, req, reqf)  # the engine asks its stop rule after this step
            if sg[G_STOPPED] != 0:
                continue
            now, r_first, r_stop, woken_only = t_end, r_end, r_end + 1, False  # it plans its next step at once
        # One call site: `_start_step` is inlined here.
        for r in range(r_first, r_stop):
            if woken_only and (sr[r, I_BUSY] != 0 or sr[r, I_W_COUNT] == 0):
                continue
            code = _start_step(r, now, sr, fr, sg, sf, cfg, kind, roof, steps_pack, measured, overhead, req, reqf,
                               heap, bucket, plan, pf_snap, run_tmp, draws, pc)
            if code != 0:
                return code


@njit(cache=True)
def _group_event(sr, fr, sg, sf, cfg, kind, roof, steps_pack, measured, overhead, stop, req, reqf, heap, bucket,
                 plan, pf_snap, run_tmp, row_i, row_f, run_dur, run_i, draws, pc):
    """`run`'s next event when the replicas are one lockstep group's ranks (`LockstepGroup.process`): the next
    arrival, which starts a step of an idle group, or the end of the group's step: each rank with a step applies
    it (in rank order, as the group's process does), the wave's idle check every C_LS_IDLE_CHECK steps (no
    outstanding request anywhere ends the wave), the stop rule, then the group's next step. TAKEN, or DONE, or
    DIVERGED (an arrival at exactly the step's end), or the code of a step that could not start."""
    n_req = req.shape[1]
    horizon = sf[F_HORIZON]
    num_ranks = sr.shape[0]
    t_end = sf[F_GROUP_END] if sg[G_LS_BUSY] != 0 else math.inf
    if t_end >= horizon:
        t_end = math.inf
    t_arr = math.inf
    nxt = sg[G_NEXT_ARRIVAL]
    if sg[G_STOPPED] == 0 and nxt < n_req and reqf[QF_ARRIVAL_EV, nxt] < horizon:
        t_arr = reqf[QF_ARRIVAL_EV, nxt]
    if math.isinf(t_end) and math.isinf(t_arr):
        return DONE
    if t_arr == t_end:
        return DIVERGED
    if t_arr < t_end:
        _admit_arrivals_at(t_arr, sr, fr, sg, sf, cfg, req, reqf)
        sf[F_NOW] = t_arr
        if sg[G_LS_BUSY] == 0:  # an idle group wakes: every arrival at this time is in by then
            code = _start_group_step(t_arr, sr, fr, sg, sf, cfg, kind, roof, steps_pack, measured, overhead, req,
                                     reqf, bucket, plan, pf_snap, draws, pc)
            if code != 0:
                return code
        return TAKEN
    sg[G_LS_BUSY] = 0
    sg[G_LS_STEPS] += 1
    for r in range(num_ranks):
        if sr[r, I_BUSY] != 0:
            _finish_step(r, sr, fr, sg, sf, cfg, req, reqf, heap, bucket, plan, run_tmp, row_i, row_f, run_dur,
                         run_i, pc)
    sf[F_NOW] = t_end
    sf[F_LAST_EVENT] = t_end
    sg[G_LS_WAVE_STEPS] += 1
    if sg[G_LS_WAVE_STEPS] == cfg[C_LS_IDLE_CHECK]:  # the all-reduce of unfinished requests anywhere
        sg[G_LS_WAVE_STEPS] = 0
        sg[G_LS_RUNNING] = 0
        for r in range(num_ranks):
            if sr[r, I_OUTSTANDING] != 0:
                sg[G_LS_RUNNING] = 1
    _ask_stop_rule(stop, t_end, sr, sg, sf, req, reqf)  # the group asks it after each step
    if sg[G_STOPPED] != 0:
        return TAKEN
    code = _start_group_step(t_end, sr, fr, sg, sf, cfg, kind, roof, steps_pack, measured, overhead, req, reqf,
                             bucket, plan, pf_snap, draws, pc)
    return TAKEN if code == 0 else code


@njit(cache=True, inline="always")
def _schedule_step(r, now, sr, sg, sf, cfg, req, reqf, bucket_all, plan_all, pf_snap, pc):
    """`ContinuousScheduler.schedule(now)` for replica r: (0, DIVERGED or UNPRICED; whether it plans a step; its
    prefill chunks, admissions, preemptions, decodes and sampled sequences). The chunks are in plan_all[:, r]."""
    max_batched = cfg[C_MAX_BATCHED]
    bs = cfg[C_BLOCK_SIZE]
    mixed = cfg[C_MIXED] != 0
    context = cfg[C_CONTEXT] != 0
    clock = sr[r, I_CLOCK]
    sg[G_STEP_ID] += 1
    step_id = sg[G_STEP_ID]
    sr[r, I_BUSY] = 0

    have_plan = sr[r, I_RUNNING] > 0 or sr[r, I_W_COUNT] > 0
    num_pf = 0
    num_new = 0
    num_preempted = 0
    num_decode = 0
    num_sampled = 0
    if have_plan:
        # ContinuousScheduler.schedule: inside a group of decode steps, decodes only; without mixed batches, a
        # prefill-only step whenever a prefill can run, else decodes only; else decodes and prefill chunks.
        in_group = sr[r, I_GROUP_LEFT] > 0 and sr[r, I_MEMBERS] > 0
        with_decodes = True
        if in_group:
            sr[r, I_GROUP_LEFT] -= 1
        else:
            sr[r, I_GROUP_LEFT] = 0
            if not mixed or (context and sr[r, I_PF_HEAD] < 0):
                # a prefill-only step first where one can run (with the context pass: an iteration's first step)
                num_pf, num_new, added, num_sampled, code = _schedule_prefills(
                    r, now, max_batched, 0, sr, cfg, sf, req, reqf, bucket_all, plan_all, pf_snap,
                    step_id, True, pc)
                if code != 0:
                    return code, False, 0, 0, 0, 0, 0
                num_preempted += added
                with_decodes = num_pf == 0 and sr[r, I_MEMBERS] > 0
        if with_decodes:
            # Room for the decodes' next tokens; preempt (last admitted first) until there is.
            while bucket_all[r, clock % bs] > sr[r, I_FREE_BLOCKS]:
                victim = _preempt(sr, r, req, bucket_all, step_id, bs, cfg[C_WHOLE], pc, cfg)
                if victim < 0:
                    return DIVERGED, False, 0, 0, 0, 0, 0
                num_preempted += 1
            _take(pc, sr, r, bucket_all[r, clock % bs], cfg[C_PREFIX_CACHING] != 0)
            if sr[r, I_MEMBERS] > 0:
                # the members' blocks for this clock's decode are taken. Not marked without members: a step that
                # decodes nothing does not advance the clock (the context pass's decode pass), and a request that
                # joins at its end has no block taken for its first decode yet (`_tracker_remove`'s `pending`)
                sr[r, I_ALLOC_CLOCK] = clock
            if mixed and not in_group:
                num_pf, num_new, added, num_sampled, code = _schedule_prefills(
                    r, now, max_batched - sr[r, I_MEMBERS], num_preempted, sr, cfg, sf, req, reqf,
                    bucket_all, plan_all, pf_snap, step_id, not context,  # the context pass's decode pass: no admission
                    pc)
                if code != 0:
                    return code, False, 0, 0, 0, 0, 0
                num_preempted += added
            num_decode = sr[r, I_MEMBERS]
            num_sampled += num_decode
            if not in_group and (num_pf > 0 or num_decode > 0):
                sr[r, I_GROUP_LEFT] = cfg[C_GROUP_STEPS] - 1  # a step opens a group (ContinuousScheduler.schedule)
        if num_pf == 0 and num_decode == 0:
            have_plan = False
    return 0, have_plan, num_pf, num_new, num_preempted, num_decode, num_sampled


@njit(cache=True, inline="always")
def _graph_padding(cfg, num_pf, num_decode):
    """The CUDA-graph padding sequences of a step: a decode batch runs as the next captured size up (each padding
    sequence has one token of context)."""
    if num_pf == 0 and num_decode > 0 and cfg.shape[0] > NUM_CFG:
        return padded_batch(cfg[NUM_CFG:], num_decode) - num_decode
    return 0


@njit(cache=True, inline="always")
def _prefill_tokens(plan_all, r, num_pf):
    total = 0
    for j in range(num_pf):
        total += plan_all[P_CHUNK, r, j]
    return total


@njit(cache=True, inline="always")
def _price_planned(kind, roof, steps_pack, measured, overhead, plan_all, r, num_pf, num_prefill_tokens, num_decode,
                   decode_ctx, padding, num_sampled, lockstep_pad):
    """(time_s, FLOPs, bytes) of replica r's planned step, the cost model's `step_cost` of its plan: its prefill
    chunks, its decodes attending `decode_ctx`, `padding` CUDA-graph padding sequences (sampled, as the scheduler's
    plan counts them; each attends one token) and `lockstep_pad` tokens padding it to its lockstep group's most
    tokens (`sim.core.lockstep.padding_tokens`: through the linear layers only). NaN: unpriced."""
    num_priced = num_decode + padding
    time_s, flops, nbytes = price_parts(kind, roof, steps_pack, measured, num_prefill_tokens, plan_all[P_CHUNK, r],
                                        plan_all[P_CTX, r], num_pf, num_priced, decode_ctx + padding,
                                        num_sampled + padding, 1, lockstep_pad, 0, 0)
    time_s = with_overhead(overhead, time_s, num_pf + num_priced, num_prefill_tokens,
                           linear_tokens(num_prefill_tokens, num_priced, 1, lockstep_pad), lockstep_pad)
    return time_s, flops, nbytes


@njit(cache=True)
def _start_group_step(now, sr, fr, sg, sf, cfg, kind, roof, steps_pack, measured, overhead, req, reqf, bucket_all,
                      plan_all, pf_snap, draws, pc):
    """A lockstep group's step (`LockstepGroup.process`): every rank schedules its own batch; unless a wave runs
    and while none has anything to run, the group stays idle (G_LS_BUSY 0) until an arrival. Otherwise every rank's
    step is priced, padded to the busiest rank's tokens (with C_LS_PAD), a rank with nothing scheduled pricing a
    dummy forward (one token, padded likewise: padding tokens alone), each time drawn on the group's step count; the
    step lasts the longest, and each rank with a plan is busy to its end. 0, DIVERGED or UNPRICED."""
    num_ranks = sr.shape[0]
    any_plan = False
    most = 0
    for r in range(num_ranks):
        code, have_plan, num_pf, num_new, num_preempted, num_decode, num_sampled = _schedule_step(
            r, now, sr, sg, sf, cfg, req, reqf, bucket_all, plan_all, pf_snap, pc)
        if code != 0:
            return code
        if not have_plan:
            continue
        any_plan = True
        padding = _graph_padding(cfg, num_pf, num_decode)
        num_prefill_tokens = _prefill_tokens(plan_all, r, num_pf)
        sr[r, I_BUSY] = 1
        sr[r, I_NUM_PF], sr[r, I_NUM_DECODE], sr[r, I_NUM_WAITING] = num_pf, num_decode, sr[r, I_W_COUNT]
        sr[r, I_NUM_PREFILL_TOKENS], sr[r, I_NUM_PREEMPTED] = num_prefill_tokens, num_preempted
        sr[r, I_NUM_STEPS], sr[r, I_NUM_PADDING], sr[r, I_NUM_SAMPLED] = 1, padding, num_sampled
        tokens = linear_tokens(num_prefill_tokens, num_decode + padding, 1, 0)
        if tokens > most:
            most = tokens
    if not any_plan and sg[G_LS_RUNNING] == 0:
        return 0
    sg[G_LS_RUNNING] = 1
    pad = cfg[C_LS_PAD] != 0
    step_no = sg[G_LS_STEPS]
    longest = 0.0
    for r in range(num_ranks):
        if sr[r, I_BUSY] != 0:
            num_pf, num_decode = sr[r, I_NUM_PF], sr[r, I_NUM_DECODE]
            num_prefill_tokens, padding = sr[r, I_NUM_PREFILL_TOKENS], sr[r, I_NUM_PADDING]
            short = padding_tokens(most, linear_tokens(num_prefill_tokens, num_decode + padding, 1, 0), pad)
            decode_ctx = sr[r, I_TOKEN_SUM] + num_decode if num_decode > 0 else 0
            time_s, flops, nbytes = _price_planned(kind, roof, steps_pack, measured, overhead, plan_all, r, num_pf,
                                                   num_prefill_tokens, num_decode, decode_ctx, padding,
                                                   sr[r, I_NUM_SAMPLED], short)
            sg[G_LS_PAD_TOKENS] += short
            fr[r, R_FLOPS], fr[r, R_BYTES] = flops, nbytes
        else:
            sg[G_LS_DUMMIES] += 1
            num_prefill_tokens = 0
            dummy = dummy_forward_tokens(most, pad)
            sg[G_LS_PAD_TOKENS] += dummy
            time_s, flops, nbytes = _price_planned(kind, roof, steps_pack, measured, overhead, plan_all, r, 0, 0, 0,
                                                   0, 0, 0, dummy)
        if math.isnan(time_s):
            return UNPRICED
        time_s = perturb(draws, time_s, r, step_no, num_prefill_tokens > 0)
        if time_s > longest:
            longest = time_s
    end = now + longest
    for r in range(num_ranks):
        if sr[r, I_BUSY] != 0:
            fr[r, R_START], fr[r, R_END], fr[r, R_DURATION] = now, end, end - now
    sg[G_LS_BUSY] = 1
    sf[F_GROUP_END] = end
    return 0


@njit(cache=True, inline="always")
def _start_step(r, now, sr, fr, sg, sf, cfg, kind, roof, steps_pack, measured, overhead, req, reqf,
                heap_all, bucket_all, plan_all, pf_snap, run_tmp, draws, pc):
    """`ContinuousScheduler.schedule(now)` for replica r and the price of its step (a decode run where one
    fits): the replica is busy until fr[r, R_END], or idle when there is nothing to run. 0, DIVERGED or
    UNPRICED."""
    n_req = req.shape[1]
    max_seqs, max_batched = cfg[C_MAX_SEQS], cfg[C_MAX_BATCHED]
    bs, fast_decode = cfg[C_BLOCK_SIZE], cfg[C_FAST_DECODE] != 0
    horizon = sf[F_HORIZON]
    key_base = n_req  # heap key: finish_clock * key_base + request id
    clock = sr[r, I_CLOCK]
    code, have_plan, num_pf, num_new, num_preempted, num_decode, num_sampled = _schedule_step(
        r, now, sr, sg, sf, cfg, req, reqf, bucket_all, plan_all, pf_snap, pc)
    if code != 0 or not have_plan:
        return code  # idle: the engine waits for an arrival routed to it

    num_waiting = sr[r, I_W_COUNT]
    decode_ctx = sr[r, I_TOKEN_SUM] + num_decode if num_decode > 0 else 0  # a prefill-only step attends no decode
    padding = _graph_padding(cfg, num_pf, num_decode)
    num_prefill_tokens = _prefill_tokens(plan_all, r, num_pf)
    plan_chunk, plan_ctx = plan_all[P_CHUNK, r], plan_all[P_CTX, r]  # (the pricers take a step's chunks as arrays)
    time_s, flops, nbytes = _price_planned(kind, roof, steps_pack, measured, overhead, plan_all, r, num_pf,
                                           num_prefill_tokens, num_decode, decode_ctx, padding, num_sampled, 0)
    if math.isnan(time_s):
        return UNPRICED
    step_no = sr[r, I_STEPS_DRAWN]  # as Simulation.engine: perturb after pricing, keyed on the replica's step
    time_s = perturb(draws, time_s, r, step_no, num_prefill_tokens > 0)

    # ---- a decode run (Simulation._decode_run, ContinuousScheduler.decode_run_limit) ----------------
    num_steps = 1
    end = now + time_s
    duration, run_flops, run_bytes = time_s, flops, nbytes
    if fast_decode and num_decode > 0 and num_pf == 0 and padding == 0:
        nxt = sg[G_NEXT_ARRIVAL]
        bound = horizon
        if nxt < n_req and reqf[QF_ARRIVAL, nxt] < bound:
            bound = reqf[QF_ARRIVAL, nxt]
        check_s = sf[F_CHECK]
        first_end = now + time_s
        if first_end < bound and first_end < check_s:
            # Simulation._decode_run: the run ends before the next event, and at the latest with the first
            # step that ends at or after the stop rule's next check.
            last_s = bound if bound < check_s else check_s
            if math.isinf(last_s):
                cap = 1 << 62
            else:
                cap = int((last_s - now) / time_s) + (2 if check_s < bound else 1)
            limit = _decode_run_limit(sr, r, heap_all, bucket_all, req, cap, clock, bs, num_preempted, num_new,
                                      max_seqs, max_batched, key_base, cfg[C_PREFILL_ONLY] != 0)
            if limit > 1:
                end_r = now
                k_steps = 0
                duration_r = 0.0
                flops_r = 0.0
                bytes_r = 0.0
                ctx = decode_ctx
                priced = 0
                for k in range(limit):
                    if k == 0:
                        c_t, c_f, c_b = time_s, flops, nbytes
                    else:
                        c_t, c_f, c_b = price_parts(kind, roof, steps_pack, measured, 0, plan_chunk, plan_ctx, 0,
                                                    num_decode, ctx, num_decode, 1, 0, 0, 0)
                        c_t = with_overhead(overhead, c_t, num_decode, 0, num_decode, 0)
                        priced = k
                        if math.isnan(c_t):
                            return UNPRICED
                        c_t = perturb(draws, c_t, r, step_no + k, False)
                    t = end_r + c_t
                    if t >= bound:
                        break
                    end_r = t
                    run_tmp[r, k_steps] = c_t
                    k_steps += 1
                    duration_r += c_t
                    flops_r += c_f
                    bytes_r += c_b
                    ctx += num_decode
                    if t >= check_s:
                        break
                if not note_unpriced_decode_steps(kind, measured, num_decode, decode_ctx + (priced + 1) * num_decode,
                                                  limit - priced - 1):
                    return UNPRICED
                if k_steps > 1:
                    num_steps = k_steps
                    end = end_r
                    duration, run_flops, run_bytes = duration_r, flops_r, bytes_r
    sr[r, I_BUSY] = 1
    sr[r, I_NUM_PF], sr[r, I_NUM_DECODE], sr[r, I_NUM_WAITING] = num_pf, num_decode, num_waiting
    sr[r, I_NUM_PREFILL_TOKENS], sr[r, I_NUM_PREEMPTED] = num_prefill_tokens, num_preempted
    sr[r, I_NUM_STEPS], sr[r, I_NUM_PADDING] = num_steps, padding
    sr[r, I_STEPS_DRAWN] += num_steps
    fr[r, R_START], fr[r, R_END], fr[r, R_DURATION] = now, end, duration
    fr[r, R_FLOPS], fr[r, R_BYTES] = run_flops, run_bytes
    return 0


@njit(cache=True)  # a call: inlined at its two call sites it made the core ~5% slower (bench_engine 300k)
def _schedule_prefills(r, now, budget, preempted_before, sr, cfg, sf, req, reqf, bucket_all, plan_all,
                       pf_snap, step_id, admit, pc):
    """`ContinuousScheduler._schedule_prefills`: the running prefills' chunks in admission order, then (if `admit`)
    waiting requests in order while a sequence slot, the budget, the KV (and the rule's admission test) allow; the
    step's chunks go to plan_all[:, r] from 0. (chunks, admitted, preempted, sampled, 0 or DIVERGED)."""
    max_seqs, bs = cfg[C_MAX_SEQS], cfg[C_BLOCK_SIZE]
    chunked, whole, ratio_on = cfg[C_CHUNKED] != 0, cfg[C_WHOLE], cfg[C_RATIO] != 0
    context = cfg[C_CONTEXT] != 0
    caching = cfg[C_PREFIX_CACHING] != 0
    limit = cfg[C_PREFILL_CONTEXT]
    # (the requests running or waiting: admissions move requests from one to the other)
    cap = step_prefill_chunk_cap(cfg[C_PREFILL_CHUNK_CAP], cfg[C_CAP_WHEN_ALONE] != 0, cfg[C_CAP_FAIR_SHARE] != 0,
                                 sr[r, I_RUNNING] + sr[r, I_W_COUNT], cfg[C_MAX_BATCHED])
    context_used = 0
    num_pf = 0
    num_new = 0
    num_preempted = 0
    num_sampled = 0
    # Running prefills first, in admission order (a snapshot: admissions below join after).
    n_snap = 0
    rid = sr[r, I_PF_HEAD]
    while rid >= 0:
        pf_snap[n_snap] = rid
        n_snap += 1
        rid = req[Q_PF_NEXT, rid]
    for s in range(n_snap):
        rid = pf_snap[s]
        if req[Q_STATE, rid] != RUNNING or budget <= 0:
            continue  # preempted while making room for an earlier one, or no budget left
        chunk = min(req[Q_PROMPT, rid] + req[Q_OUT, rid] - req[Q_COMPUTED, rid],
                    prefill_chunk_limit(budget, cap))
        charge = context_charge(req[Q_PROMPT, rid] + req[Q_OUT, rid], chunk, False)
        if not context_fits(context_used, charge, limit):
            continue
        added = False
        while True:
            need = _blocks_for(req[Q_COMPUTED, rid] + chunk, bs) - req[Q_BLOCKS, rid]
            if need < 0:
                need = 0
            if need <= sr[r, I_FREE_BLOCKS]:
                _take(pc, sr, r, need, caching)
                if caching:
                    prefix_cache.register(pc, r, req[Q_SLOT, rid], req[Q_PROMPT, rid], req[Q_COMPUTED, rid] + chunk,
                                          bs)
                req[Q_BLOCKS, rid] += need
                added = True
                break
            victim = _preempt(sr, r, req, bucket_all, step_id, bs, whole, pc, cfg)
            if victim < 0:
                return num_pf, num_new, num_preempted, num_sampled, DIVERGED
            num_preempted += 1
            if victim == rid:
                break
        if added:
            plan_all[P_RID, r, num_pf] = rid
            plan_all[P_CHUNK, r, num_pf] = chunk
            plan_all[P_CTX, r, num_pf] = req[Q_COMPUTED, rid]
            num_pf += 1
            req[Q_STAMP, rid] = step_id
            if req[Q_COMPUTED, rid] + chunk == req[Q_PROMPT, rid] + req[Q_OUT, rid]:
                num_sampled += 1
            budget -= chunk
            context_used += charge
    # The new-token ratio's state (SGLang): the ratio now, and the running requests' expected future tokens, first
    # as a bound (the run's most output tokens, each), counted only when the bound refuses a request (the count walks
    # every running request; the bound admitting means the count would, so the decisions are the same).
    ratio = 0.0
    future_bound = 0.0
    running_future = -1.0  # not counted yet
    num_running_before = sr[r, I_RUNNING]  # admissions below join the running list after these
    admitted = 0.0
    clip = SGLANG_CLIP_MAX_NEW_TOKENS
    if ratio_on and sr[r, I_W_COUNT] > 0:
        ratio = new_token_ratio(sf[F_RATIO_INIT], sf[F_RATIO_MIN], cfg[C_RATIO_DECAY],
                                sr[r, I_CLOCK] - sr[r, I_RATIO_RESET])
        future_bound = running_future_bound(num_running_before, cfg[C_MOST_OUTPUT], clip)
    # Then waiting requests in order while a sequence slot, the budget and the KV allow.
    while (admit and sr[r, I_W_COUNT] > 0 and preempted_before + num_preempted == 0 and budget > 0
           and sr[r, I_RUNNING] < max_seqs):
        rid = sr[r, I_W_HEAD]
        reserve = 0
        if whole:
            reserve = _reserved_blocks(req, rid, bs, cfg)
            if not reservation_fits(sr[r, I_RESERVED], reserve, cfg[C_NUM_BLOCKS]):
                break
        if not context_fits(context_used, req[Q_PROMPT, rid] + req[Q_OUT, rid], limit):
            break
        prompt = req[Q_PROMPT, rid] + req[Q_OUT, rid] - req[Q_COMPUTED, rid]
        remaining_out = req[Q_MAX_OUT, rid] - req[Q_OUT, rid]
        if ratio_on and not ratio_admits(sr[r, I_FREE_BLOCKS] * bs, future_bound, admitted, prompt, remaining_out,
                                         ratio, clip):
            if running_future < 0.0:
                running_future = _running_future(req, sr[r, I_RUN_HEAD], num_running_before, sr[r, I_CLOCK], clip)
            if not ratio_admits(sr[r, I_FREE_BLOCKS] * bs, running_future, admitted, prompt, remaining_out, ratio,
                                clip):
                break
        # PagedKVManager.admit (its test: sim/kv/admission.py; no swap: everything not cached is computed again)
        need_tokens = req[Q_PROMPT, rid] + req[Q_OUT, rid]
        slot = -1
        cached = 0
        if caching:
            slot, cached = prefix_cache.lookup(pc, r, rid, req[Q_PROMPT, rid], cfg[C_PREFIX_UNIT], bs)
        step_need = need_tokens - cached
        if context:
            step_need = context_pass_chunk(step_need)  # the context pass: but the last
        chunk = min(step_need, prefill_chunk_limit(budget, cap))
        window = _window_blocks(req, rid, bs, cfg)
        if not admission_fits(chunked, cfg[C_WHOLE_PROMPT] != 0, chunk, step_need,
                              _blocks_for(need_tokens, bs) + window, sr[r, I_FREE_BLOCKS]):
            break
        claimed = cached // bs
        revived = prefix_cache.num_revived(pc, r, slot, claimed) if caching else 0
        need = _blocks_for(cached + chunk, bs) - claimed
        if need + window > sr[r, I_FREE_BLOCKS] - revived:
            break
        if ratio_on:
            admitted += ratio_admitted_tokens(prompt, chunk, remaining_out, clip)
        sr[r, I_RESERVED] += reserve
        if caching:
            prefix_cache.claim(pc, r, slot, req[Q_PROMPT, rid], claimed, bs)
            sr[r, I_FREE_BLOCKS] -= revived
        _take(pc, sr, r, need, caching)
        if window:  # PagedKVManager._take_window: after the table's blocks
            _take(pc, sr, r, window, caching)
            sr[r, I_WINDOW] += window
        if caching:
            prefix_cache.register(pc, r, slot, req[Q_PROMPT, rid], cached + chunk, bs)
            req[Q_SLOT, rid] = slot
        req[Q_BLOCKS, rid] = claimed + need
        req[Q_COMPUTED, rid] = cached
        sr[r, I_PF_SUM] += cached
        _list_remove(req, Q_RUN_PREV, Q_RUN_NEXT, sr, r, I_W_HEAD, I_W_TAIL, rid)
        sr[r, I_W_COUNT] -= 1
        req[Q_STATE, rid] = RUNNING
        if math.isnan(reqf[QF_FIRST_SCHED, rid]):
            reqf[QF_FIRST_SCHED, rid] = now
        _list_append(req, Q_RUN_PREV, Q_RUN_NEXT, sr, r, I_RUN_HEAD, I_RUN_TAIL, rid)
        sr[r, I_RUNNING] += 1
        _list_append(req, Q_PF_PREV, Q_PF_NEXT, sr, r, I_PF_HEAD, I_PF_TAIL, rid)
        num_new += 1
        plan_all[P_RID, r, num_pf] = rid
        plan_all[P_CHUNK, r, num_pf] = chunk
        plan_all[P_CTX, r, num_pf] = cached
        num_pf += 1
        req[Q_STAMP, rid] = step_id
        if cached + chunk == need_tokens:
            num_sampled += 1
        budget -= chunk
        context_used += need_tokens
    return num_pf, num_new, num_preempted, num_sampled, 0


@njit(cache=True)
def _running_future(req, head, num_running, clock, clip):
    """The future tokens SGLang's admission reserves for the first `num_running` requests of a running list from
    `head` (`clipped_outputs_sum` of their remaining outputs, a decoding request's output counted to `clock`)."""
    future = 0
    rid = head
    for _ in range(num_running):
        out = req[Q_OUT, rid]
        if req[Q_ANCHOR, rid] >= 0:
            out += clock - req[Q_ANCHOR, rid]
        future += clipped_output(req[Q_MAX_OUT, rid] - out, clip)
        rid = req[Q_RUN_NEXT, rid]
    return float(future)


@njit(cache=True, inline="always")
def _finish_step(r, sr, fr, sg, sf, cfg, req, reqf, heap_all, bucket_all, plan_all, run_tmp, row_i, row_f, run_dur,
                 run_i, pc):
    """The end of replica r's step: `update_from_output`, the step's row (and its run's per-step records),
    `Simulation.finish_requests`."""
    num_blocks, bs = cfg[C_NUM_BLOCKS], cfg[C_BLOCK_SIZE]
    whole = cfg[C_WHOLE]
    caching = cfg[C_PREFIX_CACHING] != 0
    capacity_slots = num_blocks * bs
    # token states the requests share, stored once (PagedKVManager.usage); constant through a decode run
    shared = pc[0][r, prefix_index.S_SAVED] * bs if caching else 0
    n_req = req.shape[1]
    key_base = n_req
    sr[r, I_BUSY] = 0
    end = fr[r, R_END]
    num_pf, num_decode, num_steps = sr[r, I_NUM_PF], sr[r, I_NUM_DECODE], sr[r, I_NUM_STEPS]

    if num_steps > 1:
        # The steps of the run: their durations, and the states of all but the last counted in bulk
        # (PagedKVManager.run_usage).
        s0 = sg[G_RUN_STEPS]
        for k in range(num_steps):
            run_dur[s0 + k] = run_tmp[r, k]
        sg[G_RUN_STEPS] = s0 + num_steps
        r0 = sg[G_RUN_KV]
        first_tokens = sr[r, I_TOKEN_SUM] + sr[r, I_PF_SUM] + num_decode - shared + sr[r, I_WINDOW] * bs
        allocated = (num_blocks - sr[r, I_FREE_BLOCKS]) * bs
        for k in range(num_steps - 1):
            tokens = first_tokens + k * num_decode
            run_i[0, r0 + k] = tokens
            run_i[1, r0 + k] = allocated - tokens
            run_i[2, r0 + k] = shared
            sr[r, I_CLOCK] += 1
            sr[r, I_TOKEN_SUM] += num_decode
            need = bucket_all[r, sr[r, I_CLOCK] % bs]
            _take(pc, sr, r, need, caching)
            sr[r, I_ALLOC_CLOCK] = sr[r, I_CLOCK]
            allocated += need * bs
        sg[G_RUN_KV] = r0 + num_steps - 1
        sr[r, I_GROUP_LEFT] = group_steps_left_after(sr[r, I_GROUP_LEFT], num_steps - 1,  # advance_decode_steps
                                                     cfg[C_GROUP_STEPS])

    # ---- update_from_output(plan, end) ------------------------------------------------------------------
    num_output = num_decode
    n_fin = 0
    if num_decode > 0 or cfg[C_PREFILL_ONLY] == 0:  # a prefill-only step leaves the decodes waiting
        sr[r, I_CLOCK] += 1
        sr[r, I_TOKEN_SUM] += num_decode
        clock = sr[r, I_CLOCK]
        while sr[r, I_HEAP_SIZE] > 0 and heap_all[r, 0] // key_base <= clock:
            key = _heap_pop(heap_all, sr, r)
            fclock = key // key_base
            rid = key - fclock * key_base
            if _stale(req, rid, fclock):
                continue  # stale
            held = _tracker_remove(sr, r, req, bucket_all, rid, bs)
            _finish(sr, r, req, reqf, rid, end, held, whole, bs, pc, cfg)
    clock = sr[r, I_CLOCK]
    for j in range(num_pf):
        rid = plan_all[P_RID, r, j]
        req[Q_COMPUTED, rid] += plan_all[P_CHUNK, r, j]
        sr[r, I_PF_SUM] += plan_all[P_CHUNK, r, j]
        if req[Q_COMPUTED, rid] < req[Q_PROMPT, rid] + req[Q_OUT, rid]:
            continue
        _list_remove(req, Q_PF_PREV, Q_PF_NEXT, sr, r, I_PF_HEAD, I_PF_TAIL, rid)
        sr[r, I_PF_SUM] -= req[Q_COMPUTED, rid]
        req[Q_OUT, rid] += 1
        num_output += 1
        if math.isnan(reqf[QF_FIRST_TOK, rid]):
            reqf[QF_FIRST_TOK, rid] = end
        reqf[QF_LAST_TOK, rid] = end
        if req[Q_OUT, rid] >= req[Q_MAX_OUT, rid]:
            _finish(sr, r, req, reqf, rid, end, req[Q_BLOCKS, rid], whole, bs, pc, cfg)
        else:
            # tracker.add: decodes from the next step; its blocks follow from its counters from now on
            req[Q_ANCHOR, rid] = clock
            req[Q_BLOCKS, rid] = -1  # from now on its counters say what it holds
            sr[r, I_MEMBERS] += 1
            sr[r, I_TOKEN_SUM] += req[Q_COMPUTED, rid]
            _heap_push(heap_all, sr, r, (clock + req[Q_MAX_OUT, rid] - req[Q_OUT, rid]) * key_base + rid)
            bucket_all[r, (clock - req[Q_COMPUTED, rid]) % bs] += 1
    num_output *= num_steps
    if sr[r, I_RETURN_HEAD] >= 0 and not (sr[r, I_GROUP_LEFT] > 0 and sr[r, I_MEMBERS] > 0):
        # update_from_output: the group ends with this step (or has no decode left): what finished in it returns
        rid = sr[r, I_RETURN_HEAD]
        while rid >= 0:
            reqf[QF_LAST_TOK, rid] = end
            reqf[QF_FINISH, rid] = end
            req[Q_STATE, rid] = FINISHED
            req[Q_FIN_ORDER, sg[G_NUM_FINISHED]] = rid
            sg[G_NUM_FINISHED] += 1
            n_fin += 1
            nxt = req[Q_RUN_NEXT, rid]
            req[Q_RUN_PREV, rid] = req[Q_RUN_NEXT, rid] = -1
            rid = nxt
        sr[r, I_RETURN_HEAD] = sr[r, I_RETURN_TAIL] = -1

    # ---- the step's row ---------------------------------------------------------------------------
    shared = pc[0][r, prefix_index.S_SAVED] * bs if caching else 0  # (the step's admissions and finishes moved it)
    tokens = sr[r, I_TOKEN_SUM] + sr[r, I_PF_SUM] - shared + sr[r, I_WINDOW] * bs  # PagedKVManager.usage
    allocated = (num_blocks - sr[r, I_FREE_BLOCKS]) * bs
    w = sg[G_ROWS]
    row_i[ROW_REPLICA, w] = r
    row_f[0, w] = fr[r, R_START]
    row_f[1, w] = fr[r, R_DURATION]
    row_f[2, w] = fr[r, R_FLOPS]
    row_f[3, w] = fr[r, R_BYTES]
    padding = sr[r, I_NUM_PADDING]
    row_i[0, w] = num_pf + num_decode + padding
    row_i[1, w] = sr[r, I_NUM_WAITING]
    row_i[2, w] = sr[r, I_NUM_PREFILL_TOKENS]
    row_i[3, w] = num_decode + padding
    row_i[4, w] = padding
    row_i[5, w] = num_output
    row_i[6, w] = sr[r, I_NUM_PREEMPTED]
    row_i[7, w] = tokens
    row_i[8, w] = 0
    row_i[9, w] = allocated - tokens
    row_i[10, w] = 0
    row_i[11, w] = capacity_slots
    row_i[12, w] = shared
    row_i[13, w] = 0
    row_i[14, w] = 0
    row_i[15, w] = num_steps
    sg[G_ROWS] = w + 1
    if n_fin:
        # Simulation.finish_requests: the replica's outstanding count, Little's law, then the records
        sr[r, I_OUTSTANDING] -= n_fin
        sf[F_AREA] += sg[G_IN_SYSTEM] * (end - sf[F_SINCE])
        sf[F_SINCE] = end
        sg[G_IN_SYSTEM] -= n_fin
        sg[G_NUM_DONE] += n_fin


@njit(cache=True, inline="always")
def _list_append(req, q_prev, q_next, sr, r, i_head, i_tail, rid):
    tail = sr[r, i_tail]
    req[q_prev, rid] = tail
    req[q_next, rid] = -1
    if tail >= 0:
        req[q_next, tail] = rid
    else:
        sr[r, i_head] = rid
    sr[r, i_tail] = rid


@njit(cache=True, inline="always")
def _list_remove(req, q_prev, q_next, sr, r, i_head, i_tail, rid):
    p, q = req[q_prev, rid], req[q_next, rid]
    if p >= 0:
        req[q_next, p] = q
    else:
        sr[r, i_head] = q
    if q >= 0:
        req[q_prev, q] = p
    else:
        sr[r, i_tail] = p
    req[q_prev, rid] = req[q_next, rid] = -1


@njit(cache=True, inline="always")
def _tracker_remove(sr, r, req, bucket_all, rid, bs):
    """DecodeTracker.remove: sync the counters, take the request out of the sums and its bucket."""
    clock = sr[r, I_CLOCK]
    delta = clock - req[Q_ANCHOR, rid]
    req[Q_COMPUTED, rid] += delta
    req[Q_OUT, rid] += delta
    sr[r, I_MEMBERS] -= 1
    sr[r, I_TOKEN_SUM] -= req[Q_COMPUTED, rid]
    bucket_all[r, (clock - req[Q_COMPUTED, rid]) % bs] -= 1
    pending = 1 if sr[r, I_ALLOC_CLOCK] == clock else 0  # its block for the coming step was taken
    req[Q_ANCHOR, rid] = -1
    return _blocks_for(req[Q_COMPUTED, rid] + pending, bs)


@njit(cache=True, inline="always")
def _finish(sr, r, req, reqf, rid, now, held, whole, bs, pc, cfg):
    """ContinuousScheduler._finish: the request leaves, its `held` blocks and its window blocks go back to the pool
    (and, `whole`, its reservation is released); it waits in the return list until `_finish_step` returns it
    (at once, or at the end of its group of decode steps)."""
    if whole:
        sr[r, I_RESERVED] -= _reserved_blocks(req, rid, bs, cfg)
    reqf[QF_LAST_TOK, rid] = now
    reqf[QF_FINISH, rid] = now
    _list_remove(req, Q_RUN_PREV, Q_RUN_NEXT, sr, r, I_RUN_HEAD, I_RUN_TAIL, rid)
    _list_append(req, Q_RUN_PREV, Q_RUN_NEXT, sr, r, I_RETURN_HEAD, I_RETURN_TAIL, rid)
    sr[r, I_RUNNING] -= 1
    window = _window_blocks(req, rid, bs, cfg)
    sr[r, I_FREE_BLOCKS] += window  # PagedKVManager.free: the window's blocks first, then the table's
    sr[r, I_WINDOW] -= window
    sr[r, I_FREE_BLOCKS] += _released(pc, r, req, rid, held)
    req[Q_BLOCKS, rid] = 0


@njit(cache=True, inline="always")
def _take(pc, sr, r, n, caching):
    """`n` of the replica's free blocks for new content (the caller checked room); with a prefix cache, the least
    recently used cached ones among them once the uncached ones run out (`prefix_cache.take`)."""
    if caching:
        prefix_cache.take(pc, r, n, sr[r, I_FREE_BLOCKS])
    sr[r, I_FREE_BLOCKS] -= n


@njit(cache=True, inline="always")
def _released(pc, r, req, rid, held):
    """The blocks a request leaving the batch gives back to the free count (with a prefix cache, those nobody
    else holds: `prefix_cache.release`)."""
    slot = req[Q_SLOT, rid]
    if slot < 0:
        return held
    req[Q_SLOT, rid] = -1
    return prefix_cache.release(pc, r, slot, held)


@njit(cache=True)
def _preempt(sr, r, req, bucket_all, step_id, bs, whole, pc, cfg):
    """ContinuousScheduler._preempt with the last-admitted policy and recompute. -1: no candidate."""
    victim = sr[r, I_RUN_TAIL]
    while victim >= 0 and req[Q_STAMP, victim] == step_id:
        victim = req[Q_RUN_PREV, victim]
    if victim < 0:
        return -1
    _list_remove(req, Q_RUN_PREV, Q_RUN_NEXT, sr, r, I_RUN_HEAD, I_RUN_TAIL, victim)
    sr[r, I_RUNNING] -= 1
    if req[Q_ANCHOR, victim] >= 0:
        held = _tracker_remove(sr, r, req, bucket_all, victim, bs)
    else:
        _list_remove(req, Q_PF_PREV, Q_PF_NEXT, sr, r, I_PF_HEAD, I_PF_TAIL, victim)
        sr[r, I_PF_SUM] -= req[Q_COMPUTED, victim]
        held = req[Q_BLOCKS, victim]
    window = _window_blocks(req, victim, bs, cfg)
    sr[r, I_FREE_BLOCKS] += window
    sr[r, I_WINDOW] -= window
    sr[r, I_FREE_BLOCKS] += _released(pc, r, req, victim, held)
    if whole:
        sr[r, I_RESERVED] -= _reserved_blocks(req, victim, bs, cfg)
    sr[r, I_RATIO_RESET] = sr[r, I_CLOCK]  # SGLang resets its new-token ratio on a retraction
    req[Q_BLOCKS, victim] = 0
    req[Q_COMPUTED, victim] = 0
    req[Q_PREEMPTIONS, victim] += 1
    req[Q_STATE, victim] = WAITING
    # back to the queue's front: appending to the list read backwards (links and ends swapped) is prepending
    _list_append(req, Q_RUN_NEXT, Q_RUN_PREV, sr, r, I_W_TAIL, I_W_HEAD, victim)
    sr[r, I_W_COUNT] += 1
    return victim


@njit(cache=True, inline="always")
def _decode_run_limit(sr, r, heap_all, bucket_all, req, max_steps, clock, bs, num_preempted, num_new, max_seqs,
                      max_batched, key_base, prefill_only_steps):
    if max_steps <= 1 or num_preempted or num_new or sr[r, I_MEMBERS] == 0:
        return 1
    limit = max_steps
    if sr[r, I_W_COUNT] > 0 and sr[r, I_RUNNING] < max_seqs and (max_batched > sr[r, I_MEMBERS]
                                                                  or prefill_only_steps):
        # The head of the queue may be admitted at the next step, or at the first after this group.
        if sr[r, I_GROUP_LEFT] == 0:
            return 1
        if sr[r, I_GROUP_LEFT] + 1 < limit:
            limit = sr[r, I_GROUP_LEFT] + 1
    if sr[r, I_RETURN_HEAD] >= 0 and sr[r, I_GROUP_LEFT] + 1 < limit:
        limit = sr[r, I_GROUP_LEFT] + 1  # the finished requests waiting there return at the group's end
    while sr[r, I_HEAP_SIZE] > 0:
        key = heap_all[r, 0]
        fclock = key // key_base
        rid = key - fclock * key_base
        if _stale(req, rid, fclock):
            _heap_pop(heap_all, sr, r)
            continue
        to_finish = fclock - clock
        if to_finish < limit:
            limit = to_finish
        break
    free = sr[r, I_FREE_BLOCKS]
    for j in range(1, limit):
        need = bucket_all[r, (clock + j) % bs]
        if need > free:
            return j
        free -= need
    return limit


@njit(cache=True)
def _admit_arrivals_at(t, sr, fr, sg, sf, cfg, req, reqf):
    """Every arrival SimPy fires at time `t` (one callback of the arrivals process): each is routed
    (`Simulation._admit`: by the router's rule, `sim.core.router.choose_replica`), then admitted to its replica's
    queue or rejected."""
    n_req = req.shape[1]
    max_batched, chunked = cfg[C_MAX_BATCHED], cfg[C_CHUNKED] != 0
    max_model_len, num_blocks, bs = cfg[C_MAX_MODEL_LEN], cfg[C_NUM_BLOCKS], cfg[C_BLOCK_SIZE]
    while sg[G_NEXT_ARRIVAL] < n_req and reqf[QF_ARRIVAL_EV, sg[G_NEXT_ARRIVAL]] == t:
        i = sg[G_NEXT_ARRIVAL]
        sg[G_NEXT_ARRIVAL] = i + 1
        sg[G_NUM_ARRIVED] += 1
        sf[F_LAST_EVENT] = t
        r = choose_replica(cfg[C_ROUTER], sg[G_RR], sr, I_W_COUNT, I_OUTSTANDING, I_FREE_BLOCKS, num_blocks)
        sg[G_RR] += 1  # the arrivals routed (the routers' `start`)
        req[Q_REP, i] = r
        p, m = req[Q_PROMPT, i], req[Q_MAX_OUT, i]
        # SchedulerBase / ContinuousScheduler.rejection_reason (sim.compiled.engine words the reason)
        one_prefill = p if cfg[C_WHOLE] != 0 else p + m - 1  # no recompute when the whole sequence is reserved
        sequence_blocks = _blocks_for(p + m - 1, bs) + _window_blocks(req, i, bs, cfg)  # blocks_for_sequence
        if p + m > max_model_len or sequence_blocks > num_blocks or (
                not chunked and one_prefill > max_batched):
            req[Q_STATE, i] = REJECTED
            sg[G_NUM_DONE] += 1
            sg[G_NUM_REJECTED] += 1
            continue
        req[Q_STATE, i] = WAITING
        sf[F_AREA] += sg[G_IN_SYSTEM] * (t - sf[F_SINCE])
        sf[F_SINCE] = t
        sg[G_IN_SYSTEM] += 1
        sr[r, I_OUTSTANDING] += 1
        _list_append(req, Q_RUN_PREV, Q_RUN_NEXT, sr, r, I_W_HEAD, I_W_TAIL, i)
        sr[r, I_W_COUNT] += 1


@njit(cache=True, inline="always")
def _ask_stop_rule(stop, t_end, sr, sg, sf, req, reqf):
    """The stop rule asked after a step ending at `t_end`, if it is due (its next check): a certain miss stops the
    run (G_STOPPED, F_STOPPED_AT)."""
    if stop[S_ON] != 0.0 and t_end >= sf[F_CHECK]:
        sf[F_CHECK] = t_end + stop[S_EVERY]
        sg[G_NUM_CHECKS] += 1
        if _certain_miss(stop, t_end, sr, sg, req, reqf):
            sg[G_STOPPED] = 1
            sf[F_STOPPED_AT] = t_end


@njit(cache=True)
def _certain_miss(stop, now, sr, sg, req, reqf):
    """`SLOMissRule.certain_miss_of` (sim/tools/early_verdict.py, which explains the rule) on the core's
    arrays, the same comparisons on the same floats; tests/integration/test_compiled_core.py checks that runs
    stop at the same step as in the SimPy engine. The counts are sums over requests, so they are read
    incrementally: the requests finished since the last check are added to the running counts (G_DONE_*), and
    only the requests in flight (each replica's running list, waiting queue and returning list) are read again."""
    out, fin_order, run_next = req[Q_OUT], req[Q_FIN_ORDER], req[Q_RUN_NEXT]
    arrival_s, first_tok, last_tok, finish_s = reqf[QF_ARRIVAL], reqf[QF_FIRST_TOK], reqf[QF_LAST_TOK], reqf[QF_FINISH]
    ttft_limit, tpot_limit, e2e_limit = stop[S_TTFT], stop[S_TPOT], stop[S_E2E]
    waited_floor = ttft_limit if ttft_limit < e2e_limit else e2e_limit
    for k in range(sg[G_FIN_COUNTED], sg[G_NUM_FINISHED]):
        i = fin_order[k]
        bad = False
        if first_tok[i] - arrival_s[i] > ttft_limit:
            sg[G_DONE_TTFT] += 1
            bad = True
        if finish_s[i] - arrival_s[i] > e2e_limit:
            sg[G_DONE_E2E] += 1
            bad = True
        if not math.isinf(tpot_limit) and out[i] > 1 and (last_tok[i] - first_tok[i]) / (out[i] - 1) > tpot_limit:
            sg[G_DONE_TPOT] += 1
            bad = True
        sg[G_DONE_BAD] += bad
    sg[G_FIN_COUNTED] = sg[G_NUM_FINISHED]
    c_ttft, c_tpot, c_e2e = sg[G_DONE_TTFT], sg[G_DONE_TPOT], sg[G_DONE_E2E]
    refused = sg[G_NUM_REJECTED]  # a rejected request is over every limit
    if not math.isinf(ttft_limit):
        c_ttft += refused
    if not math.isinf(tpot_limit):
        c_tpot += refused
    if not math.isinf(e2e_limit):
        c_e2e += refused
    pending_bad = 0
    for r in range(sr.shape[0]):
        rid = sr[r, I_RUN_HEAD]
        wid = sr[r, I_W_HEAD]
        tid = sr[r, I_RETURN_HEAD]
        while True:  # the running list, the waiting queue, then those finished inside a group not yet returned
            if rid >= 0:
                i = rid
                rid = run_next[rid]
            elif wid >= 0:
                i = wid
                wid = run_next[wid]
            elif tid >= 0:  # (in flight to the SimPy engine's rule too: `running_requests` holds them)
                i = tid
                tid = run_next[tid]
            else:
                break
            waited = now - arrival_s[i]
            if not waited > waited_floor:
                continue
            bad = False
            first = first_tok[i]
            if (waited > ttft_limit) if math.isnan(first) else (first - arrival_s[i] > ttft_limit):
                c_ttft += 1
                bad = True
            if waited > e2e_limit:
                c_e2e += 1
                bad = True
            pending_bad += bad
    needed = stop[S_NEEDED]
    if c_ttft >= needed or c_tpot >= needed or c_e2e >= needed:
        return True
    if not math.isnan(stop[S_MIN_GOODPUT]):
        n = int(stop[S_NUM_REQUESTS])
        if (n - sg[G_DONE_BAD] - refused - pending_bad) / n < stop[S_MIN_GOODPUT]:
            return True
    return False
