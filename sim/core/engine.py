"""The event model: arrivals → router → one engine process per replica (sim/core/pipeline.py, lockstep.py and
disaggregated.py step their replicas their own ways in the same SimPy environment).

Each engine process loops: ask the scheduler for a step, ask the cost model how long it takes,
let that much simulated time pass, apply the outcome. Time moves nowhere else.
"""

from __future__ import annotations

import heapq
import math
from array import array
from typing import Callable

import numpy as np
import simpy
from simpy.events import NORMAL

from sim.core.request import Request
from sim.core.router import Router
from sim.core.step_plan import StepPlan, decode_step_costs

STATUS_CODES = {"finished": 0, "unfinished": 1, "rejected": 2}
_PROGRESS_EVERY_STEPS = 2048


class _Environment(simpy.Environment):
    """SimPy's environment plus a timeout at an absolute time. A decode run must end exactly where its
    steps, added to the clock one by one, would; SimPy's `now + delay` cannot land on every float (a sum
    halfway between two floats rounds to the even one), so the run's end is scheduled as a time."""

    def timeout_at(self, when: float) -> simpy.Event:
        if when < self._now:
            raise ValueError(f"timeout_at({when!r}) is before now ({self._now!r})")
        event = self.event()
        event._ok, event._value = True, None  # triggered, as a Timeout is from its creation
        heapq.heappush(self._queue, (when, NORMAL, next(self._eid), event))
        return event

    def advance_to(self, when: float) -> None:
        """Set the clock of an environment whose events were simulated elsewhere (the compiled core)."""
        if self._queue and self._queue[0][0] < when:
            raise ValueError("advance_to: events are pending before that time")
        self._now = when


def _plain_decode(plan: StepPlan) -> bool:
    """Only single-token decodes, every one sampled: the step a cost model's `decode_step_costs` prices."""
    return (not plan.prefill_request_ids and plan.decode_query_tokens == 1 and not plan.num_draft_tokens
            and plan.num_sampled_seqs == plan.num_decode_seqs and not plan.num_padding_seqs
            and not plan.swap_in_tokens and not plan.swap_out_tokens)


class Replica:
    """One serving instance: a scheduler (owning its KV manager) and a cost model."""

    kind = "a replica"  # what it is, in a few words (the compiled core says which kinds it leaves to this engine)

    def __init__(self, index: int, scheduler, cost_model):
        self.index = index
        self.scheduler = scheduler
        self.cost_model = cost_model
        self.wakeup: simpy.Event | None = None  # set while the engine waits for work
        self.num_outstanding = 0  # routed and not yet finished (for least-outstanding routing)

    def engine_processes(self, sim: Simulation, env: simpy.Environment) -> list:
        """The SimPy processes that run this replica's steps: one engine loop (a pipelined replica has one
        per micro-batch slot, sim/core/pipeline.py)."""
        return [sim.engine(env, self)]


class StepLog:
    """Per-step records, as compact columns (a million requests make millions of steps)."""

    COLUMNS = {
        "replica": "q", "start_s": "d", "duration_s": "d", "num_seqs": "q", "num_waiting": "q",
        "num_prefill_tokens": "q", "num_decode_seqs": "q", "num_padding_seqs": "q",
        "num_output_tokens": "q", "num_preempted": "q", "kv_token_slots": "q",
        "kv_reserved_slots": "q", "kv_internal_slots": "q", "kv_external_slots": "q",
        "kv_capacity_slots": "q", "kv_shared_slots": "q", "swap_in_tokens": "q", "swap_out_tokens": "q", "flops": "d", "bytes": "d",
        "num_steps": "q",
    }

    # Decode runs (rows with num_steps > 1) keep their steps' own values here, in row order, so the summary
    # weights each step by its own duration and state exactly as step-by-step simulation does: every step's
    # duration (8 bytes a step), and the KV columns of every step but the last (the row holds the last).
    RUN_KV_COLUMNS = ("kv_token_slots", "kv_reserved_slots", "kv_internal_slots", "kv_external_slots",
                      "kv_shared_slots")

    def __init__(self, max_kv_slots: int = 0):
        self.columns = {name: array(code) for name, code in self.COLUMNS.items()}
        # KV columns count slots (at most a replica's capacity): 4 bytes each while that fits in an int32.
        self._run_kv_code = "i" if max_kv_slots < 2**31 else "q"
        self.run_step_duration_s = array("d")
        self.run_kv = {name: array(self._run_kv_code) for name in self.RUN_KV_COLUMNS}
        # Rows written elsewhere (the compiled core, sim/compiled) arrive as array chunks, after these rows.
        self._chunks: dict[str, list[np.ndarray]] = {name: [] for name in self.COLUMNS}
        self._run_chunks: dict[str, list[np.ndarray]] = {name: [] for name in ("step_duration_s", *self.RUN_KV_COLUMNS)}

    def add_chunk(self, columns: dict[str, np.ndarray], run_step_duration_s: np.ndarray,
                  run_kv: dict[str, np.ndarray]) -> None:
        """Append rows given as arrays (every column), with their decode runs' per-step records."""
        for name in self.COLUMNS:
            self._chunks[name].append(columns[name])
        self._run_chunks["step_duration_s"].append(run_step_duration_s)
        for name in self.RUN_KV_COLUMNS:
            self._run_chunks[name].append(run_kv[name])

    @staticmethod
    def _joined(compact: array, chunks: list[np.ndarray], dtype) -> np.ndarray:
        """One array of the compact rows then the chunks; the chunks list is emptied as it is joined."""
        parts = ([np.array(compact, dtype=dtype)] if len(compact) or not chunks else []) + chunks
        out = parts[0].astype(dtype, copy=False) if len(parts) == 1 else np.concatenate(parts).astype(dtype, copy=False)
        chunks.clear()
        return out

    def run_arrays(self) -> dict[str, np.ndarray]:
        """The decode runs' per-step records (`sim.results.DecodeRuns`): "step_duration_s" (every step of every
        run row) and the RUN_KV_COLUMNS (every step but each run's last), as arrays; the compact copies go."""
        out = {"step_duration_s": self._joined(self.run_step_duration_s, self._run_chunks["step_duration_s"],
                                               np.float64)}
        self.run_step_duration_s = array("d")
        for name in self.RUN_KV_COLUMNS:
            out[name] = self._joined(self.run_kv.pop(name), self._run_chunks[name], np.int64)
            self.run_kv[name] = array(self._run_kv_code)
        return out

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as arrays; each column's compact copy (and chunks) is dropped as it is converted, so
        the peak holds one copy of the log and one column, not two copies."""
        out = {}
        for name in list(self.columns):
            col = self.columns.pop(name)
            out[name] = self._joined(col, self._chunks[name], np.float64 if col.typecode == "d" else np.int64)
            del col
        self.columns = {name: array(code) for name, code in self.COLUMNS.items()}
        return out


class RequestLog:
    """Per-request records, one slot per request id, filled when the request leaves or the run ends."""

    def __init__(self, num_requests: int):
        n = num_requests
        self.replica = np.full(n, -1, dtype=np.int64)
        self.arrival_s = np.full(n, np.nan)
        self.first_scheduled_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.last_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.prompt_tokens = np.zeros(n, dtype=np.int64)
        self.output_tokens = np.zeros(n, dtype=np.int64)
        self.max_output_tokens = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.status = np.full(n, -1, dtype=np.int64)  # -1: never arrived before the horizon
        self.reject_reason: dict[int, str] = {}

    def record(self, request: Request, status: str) -> None:
        i = request.request_id
        self.replica[i] = request.replica
        self.arrival_s[i] = request.arrival_s
        self.first_scheduled_s[i] = request.first_scheduled_s
        self.first_token_s[i] = request.first_token_s
        self.last_token_s[i] = request.last_token_s
        self.finish_s[i] = request.finish_s
        self.prompt_tokens[i] = request.num_prompt_tokens
        self.output_tokens[i] = request.num_output_tokens
        self.max_output_tokens[i] = request.max_output_tokens
        self.preemptions[i] = request.num_preemptions
        self.status[i] = STATUS_CODES[status]
        if request.reject_reason:
            self.reject_reason[i] = request.reject_reason


class Simulation:
    """Runs one workload through a set of replicas. Build it, call `run()`, read the logs."""

    def __init__(self, replicas: list[Replica], router: Router, *, arrival_s: np.ndarray,
                 input_tokens: np.ndarray, output_tokens: np.ndarray, horizon_s: float | None = None,
                 closed_loop_users: int = 0, think_time_s: float = 0.0, seed: int = 0,
                 prefix_ids: list | None = None, prefix_unit_tokens: int = 0,
                 progress: Callable[[float, int], None] | None = None, fast_decode: bool = False,
                 stop_when: Callable[[Simulation], bool] | None = None, frontend=None):
        self.env = _Environment()
        # Which loop ran it: this SimPy one, or the compiled core (sim/compiled), which `sim.run.simulate` tries
        # first and which then sets this, and the logs, counters and clock, as `run` would.
        self.engine_core = "python"
        self.replicas = replicas
        self.router = router
        self.arrival_s = arrival_s
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.horizon_s = horizon_s
        self.num_requests = len(input_tokens)
        self.prefix_ids = prefix_ids  # per request prompt content ids, for prefix caching
        self.prefix_unit_tokens = prefix_unit_tokens
        self.closed_loop_users = closed_loop_users
        self.think_time_s = think_time_s
        self.think_rng = np.random.default_rng(np.random.SeedSequence([seed, 7]))
        # A closed loop's front-end (sim.frontend.ClosedLoopFrontend), run in the users' loop: a request leaves
        # the client, passes its inbound work, and the user's next request waits for the whole reply to stream back.
        self.frontend = frontend
        self.progress = progress
        # Asked after every engine step; True ends the run there (the planner stops a run whose SLO verdict
        # is already certain). Arrivals and engines then stop, so the records are those of a cut-off run.
        # A rule with `next_check_s` answers False to every step ending before that time: a decode run
        # may go on until its first step ending at or after it, and is asked there, as step by step. Without
        # it a rule may answer True after any step, so no decode runs are taken.
        self.stop_when = stop_when
        self.stopped_early_s: float | None = None  # when stop_when ended the run; None: it ran to its end
        # A perturbed run's step-time draws (sim/cost/draws.py pack, issue 31: bands): every priced step time is
        # scaled by `perturb` keyed on (replica, the replica's step count). None: the times as priced.
        self.step_draws: np.ndarray | None = None
        # (perturb, perturb_steps) of sim/cost/draws.py, handed in with the pack by sim/run.py (core sits below cost)
        self.draw_functions: tuple | None = None
        # Decode runs: consecutive decode-only steps between two events that can change a batch are taken
        # in one engine turn, ending before the next arrival. Its time must be known when a run starts:
        # open arrivals, or a closed loop of one replica (its users wake after its own finishes, which end
        # runs, or at think-time ends drawn before). Closed loops over several replicas go step by step.
        self.fast_decode = fast_decode and (not closed_loop_users or len(replicas) == 1)
        self._resuming = 0  # closed loop: users whose request just finished and who have not yet acted on it
        # closed loop: when waiting users act next (heap): think-time ends; with a front-end also the ends of
        # inbound work (the engine gets a request) and replies received
        self._think_ends: list[float] = []
        self.steps = StepLog(max((r.scheduler.kv.capacity_slots for r in replicas), default=0))
        self.requests = RequestLog(self.num_requests)
        self.num_arrived = 0
        self.num_done = 0
        # Little's law, measured independently of the request records: the time integral of the
        # number of requests in the system, accumulated as it changes.
        self.in_system = 0
        self.in_system_area = 0.0
        self._in_system_since = 0.0
        self._completions: dict[int, simpy.Event] = {}
        self._next_request = 0

    # --- bookkeeping -------------------------------------------------------------------------
    def _change_in_system(self, delta: int) -> None:
        now = self.env.now
        self.in_system_area += self.in_system * (now - self._in_system_since)
        self._in_system_since = now
        self.in_system += delta

    def _admit(self, request: Request) -> None:
        self.num_arrived += 1
        replica = self.router.choose(self.replicas, request)
        request.replica = replica.index
        if not replica.scheduler.add_request(request):
            self.requests.record(request, "rejected")
            self.num_done += 1
            self._notify_done(request)
            return
        self._change_in_system(+1)
        replica.num_outstanding += 1
        if replica.wakeup is not None and not replica.wakeup.triggered:
            replica.wakeup.succeed()

    def _notify_done(self, request: Request) -> None:
        event = self._completions.pop(request.request_id, None)
        if event is not None:
            event.succeed()
            self._resuming += 1

    def _new_request(self, arrival_s: float) -> Request | None:
        i = self._next_request
        if i >= self.num_requests:
            return None
        self._next_request += 1
        prefix_ids = self.prefix_ids[i] if self.prefix_ids is not None else None
        return Request(i, arrival_s, int(self.input_tokens[i]), int(self.output_tokens[i]),
                       prefix_ids=prefix_ids, prefix_unit_tokens=self.prefix_unit_tokens)

    # --- processes -----------------------------------------------------------------------------
    def open_arrivals(self, env: simpy.Environment):
        times = self.arrival_s
        for i in range(self.num_requests):
            delay = times[i] - env.now
            if delay > 0:
                yield env.timeout(delay)
            if self.stopped_early_s is not None:
                return
            self._admit(self._new_request(float(times[i])))

    def _wait_until(self, env: simpy.Environment, when: float):
        """A closed-loop user waits until `when` (a time the front-end computed), known to the decode runs."""
        if when > env.now:
            heapq.heappush(self._think_ends, when)
            yield env.timeout_at(when)
            heapq.heappop(self._think_ends)

    def closed_loop_user(self, env: simpy.Environment):
        frontend = self.frontend
        while self.stopped_early_s is None:
            request = self._new_request(env.now)
            if request is None:
                return
            done = env.event()
            self._completions[request.request_id] = done
            if frontend is not None:  # sent now; the engine gets it when its inbound work ends
                yield from self._wait_until(env, frontend.send(request, env.now))
                if self.stopped_early_s is not None:
                    return
                request.arrival_s = env.now
            self._admit(request)
            yield done
            self._resuming -= 1
            if frontend is not None:  # the next request waits for the client to receive the whole reply
                yield from self._wait_until(env, frontend.receive(request, env.now))
            if self.think_time_s > 0:
                delay = self.think_rng.exponential(self.think_time_s)
                heapq.heappush(self._think_ends, env.now + delay)  # SimPy's own sum: the wake time exactly
                yield env.timeout(delay)
                heapq.heappop(self._think_ends)

    def engine(self, env: simpy.Environment, replica: Replica):
        scheduler, cost_model, log = replica.scheduler, replica.cost_model, self.steps
        columns = log.columns  # one bound append per column: this loop runs once per step row
        a_replica, a_start, a_duration = columns["replica"].append, columns["start_s"].append, columns["duration_s"].append
        a_seqs, a_waiting = columns["num_seqs"].append, columns["num_waiting"].append
        a_prefill, a_decode = columns["num_prefill_tokens"].append, columns["num_decode_seqs"].append
        a_padding, a_output = columns["num_padding_seqs"].append, columns["num_output_tokens"].append
        a_preempted, a_tokens = columns["num_preempted"].append, columns["kv_token_slots"].append
        a_reserved, a_internal = columns["kv_reserved_slots"].append, columns["kv_internal_slots"].append
        a_external, a_capacity = columns["kv_external_slots"].append, columns["kv_capacity_slots"].append
        a_shared, a_swap_in = columns["kv_shared_slots"].append, columns["swap_in_tokens"].append
        a_swap_out, a_flops, a_bytes = columns["swap_out_tokens"].append, columns["flops"].append, columns["bytes"].append
        a_num_steps = columns["num_steps"].append

        kv_usage = scheduler.kv_usage
        append_run_kv = [log.run_kv[name].append for name in log.RUN_KV_COLUMNS]  # RUN_KV_COLUMNS' order
        extend_run_kv = [log.run_kv[name].extend for name in log.RUN_KV_COLUMNS]
        tokens_a, reserved_a, internal_a, external_a, shared_a = append_run_kv

        def record_run_step_kv() -> None:  # called by the scheduler after each step of a run but its last
            usage = kv_usage()
            tokens_a(usage.token_slots)
            reserved_a(usage.reserved_slots)
            internal_a(usage.internal_slots)
            external_a(usage.external_slots)
            shared_a(usage.shared_slots)

        def record_run_kv(run_columns) -> None:  # the same, for all those steps at once (RUN_KV_COLUMNS' order)
            for extend, values in zip(extend_run_kv, run_columns):
                extend(values)
        steps_since_progress = 0
        draws = self.step_draws
        perturb = self.draw_functions[0] if draws is not None else None
        step_id = 0  # the steps this replica started: the draws' counter (the compiled core counts alike)
        while self.stopped_early_s is None:
            start = env.now
            plan: StepPlan | None = scheduler.schedule(start)
            if plan is None:
                replica.wakeup = env.event()
                wake_s = scheduler.next_wake_s
                if wake_s is not None and wake_s > start:
                    yield replica.wakeup | env.timeout(wake_s - start)
                else:
                    yield replica.wakeup
                replica.wakeup = None
                continue
            num_waiting = scheduler.num_waiting
            plain = self.fast_decode and plan.num_decode_seqs and _plain_decode(plan)
            if plain:
                cost = decode_step_costs(cost_model, plan.num_decode_seqs, plan.decode_context_tokens, 1)[0]
            else:
                cost = cost_model.step_cost(plan)
            time_s = cost.time_s
            if draws is not None:
                time_s = perturb(draws, time_s, replica.index, step_id, plan.num_prefill_tokens > 0)
            num_steps, duration_s, flops, nbytes = 1, time_s, cost.flops, cost.bytes
            if plain:
                run = self._decode_run(scheduler, cost_model, plan, cost, start, time_s, replica.index, step_id)
                if run is not None:
                    num_steps, end_s, duration_s, flops, nbytes, step_durations_s = run
                    yield env.timeout_at(end_s)
                    # Logged now, beside the row (other replicas' rows may have been logged during the yield).
                    log.run_step_duration_s.extend(step_durations_s)
                    scheduler.advance_decode_steps(num_steps - 1, record_run_step_kv, record_run_kv)
                    outcome = scheduler.update_from_output(plan, env.now)
                    outcome.num_output_tokens *= num_steps  # every step of the run sampled the same tokens
            step_id += num_steps
            if num_steps == 1:
                yield env.timeout(time_s)
                outcome = scheduler.update_from_output(plan, env.now)
            usage = kv_usage()
            a_replica(replica.index)
            a_start(start)
            a_duration(duration_s)
            a_seqs(plan.num_seqs)
            a_waiting(num_waiting)
            a_prefill(plan.num_prefill_tokens)
            a_decode(plan.num_decode_seqs)
            a_padding(plan.num_padding_seqs)
            a_output(outcome.num_output_tokens)
            a_preempted(len(plan.preempted_request_ids))
            a_tokens(usage.token_slots)
            a_reserved(usage.reserved_slots)
            a_internal(usage.internal_slots)
            a_external(usage.external_slots)
            a_capacity(usage.capacity_slots)
            a_shared(usage.shared_slots)
            a_swap_in(plan.swap_in_tokens)
            a_swap_out(plan.swap_out_tokens)
            a_flops(flops)
            a_bytes(nbytes)
            a_num_steps(num_steps)
            if outcome.finished:
                self.finish_requests(replica, outcome.finished, start)
            if self.stop_when is not None and self.stop_when(self):
                self.stopped_early_s = env.now
            steps_since_progress += num_steps
            if self.progress is not None and steps_since_progress >= _PROGRESS_EVERY_STEPS:
                steps_since_progress = 0
                self.progress(env.now, self.num_done)

    def record_step(self, replica: Replica, plan: StepPlan, outcome, start: float, duration_s: float,
                    num_waiting: int, flops: float, nbytes: float) -> None:
        """One step row of `replica`, its KV usage read now, for the engines that step outside `engine`'s loop
        (a pipelined replica's micro-batches, a lockstep group's ranks)."""
        usage = replica.scheduler.kv_usage()
        row = {
            "replica": replica.index, "start_s": start, "duration_s": duration_s, "num_seqs": plan.num_seqs,
            "num_waiting": num_waiting, "num_prefill_tokens": plan.num_prefill_tokens,
            "num_decode_seqs": plan.num_decode_seqs, "num_padding_seqs": plan.num_padding_seqs,
            "num_output_tokens": outcome.num_output_tokens, "num_preempted": len(plan.preempted_request_ids),
            "kv_token_slots": usage.token_slots, "kv_reserved_slots": usage.reserved_slots,
            "kv_internal_slots": usage.internal_slots, "kv_external_slots": usage.external_slots,
            "kv_capacity_slots": usage.capacity_slots, "kv_shared_slots": usage.shared_slots,
            "swap_in_tokens": plan.swap_in_tokens, "swap_out_tokens": plan.swap_out_tokens,
            "flops": flops, "bytes": nbytes, "num_steps": 1,
        }
        for name, col in self.steps.columns.items():
            col.append(row[name])

    def finish_requests(self, replica: Replica, finished: list[Request], step_start_s: float) -> None:
        """Book requests that left `replica` after its step starting at `step_start_s`: records, Little's law,
        closed-loop users (sim/core/disaggregated.py hands a prefill replica's on to the decode pool instead)."""
        replica.num_outstanding -= len(finished)
        self._change_in_system(-len(finished))
        for request in finished:
            self.requests.record(request, "finished")
            self.num_done += 1
            self._notify_done(request)

    def _next_event_s(self) -> float:
        """The earliest time something outside a replica can change its batch: the next arrival or the horizon.
        A closed-loop user still to act on a finish may send a request now."""
        bound = self.horizon_s if self.horizon_s is not None else math.inf
        if self.closed_loop_users:
            if self._next_request >= self.num_requests and self.frontend is None:  # (sent ones may still reach it)
                return bound
            if self._resuming:
                return self.env.now
            return min(bound, self._think_ends[0]) if self._think_ends else bound
        if self._next_request < self.num_requests:
            bound = min(bound, float(self.arrival_s[self._next_request]))
        return bound

    def _next_stop_check_s(self) -> float:
        """The earliest step end at which `stop_when` may end the run (see __init__)."""
        if self.stop_when is None:
            return math.inf
        return getattr(self.stop_when, "next_check_s", -math.inf)

    def _decode_run(self, scheduler, cost_model, plan: StepPlan, cost, start: float, first_time_s: float,
                    replica_index: int, step_id: int):
        """A run of decode-only steps starting with `plan`, ending strictly before the next outside event and
        at the latest with the first step that ends at or after the stop rule's next check (which is then
        asked after the same step as step by step): (steps, end time, summed duration, FLOPs, bytes, the
        steps' durations), or None for a single step. Step ends are summed one at a time from `start`,
        exactly as SimPy would advance its clock step by step. `first_time_s`: the first step's time (`cost`'s,
        perturbed in a perturbed run, whose step k is then drawn with id `step_id` + k)."""
        bound = self._next_event_s()
        check_s = self._next_stop_check_s()
        first_end = start + first_time_s
        if first_end >= bound or first_end >= check_s:
            return None
        # Steps only grow longer as contexts grow, so this many fit before the bound at most (one more when
        # the run may end with the step that crosses the check time). (A perturbed run's later step may be
        # shorter than its first: the run then ends at the cap, and the next turn goes on, in both engines.)
        last_s = min(bound, check_s)
        cap = int((last_s - start) / first_time_s) + (2 if check_s < bound else 1) if math.isfinite(last_s) else 1 << 62
        limit = scheduler.decode_run_limit(plan, cap)
        if limit <= 1:
            return None
        n = plan.num_decode_seqs  # step 0 is priced already; step k attends k * n more tokens
        costs = [cost] + decode_step_costs(cost_model, n, plan.decode_context_tokens + n, limit - 1)
        times = [c.time_s for c in costs]
        if self.step_draws is not None:
            times[0] = first_time_s
            times[1:] = self.draw_functions[1](self.step_draws, np.array(times[1:]), replica_index, step_id + 1,
                                      False).tolist()
        end = start
        num_steps = 0
        duration = flops = nbytes = 0.0
        for c, time_s in zip(costs, times):
            t = end + time_s
            if t >= bound:
                break
            end = t
            num_steps += 1
            duration += time_s
            flops += c.flops
            nbytes += c.bytes
            if t >= check_s:
                break
        if num_steps <= 1:
            return None
        return num_steps, end, duration, flops, nbytes, times[:num_steps]

    # --- run -----------------------------------------------------------------------------------
    def run(self) -> None:
        env = self.env
        for replica in self.replicas:
            for process in replica.engine_processes(self, env):
                env.process(process)
        if self.closed_loop_users:
            for _ in range(min(self.closed_loop_users, self.num_requests)):
                env.process(self.closed_loop_user(env))
        else:
            env.process(self.open_arrivals(env))
        if self.horizon_s is not None:
            env.run(until=self.horizon_s)
        else:
            env.run()  # ends when every request has left and the engines wait for work that never comes
        self._change_in_system(0)
        for replica in self.replicas:
            for request in replica.scheduler.in_flight():
                self.requests.record(request, "unfinished")
        if self.frontend is not None:
            self.frontend.close(env.now)
        if self.progress is not None:
            self.progress(env.now, self.num_done)

    @property
    def end_s(self) -> float:
        return float(self.env.now)
