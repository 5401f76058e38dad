"""Pipeline parallelism in the event model: micro-batches moving through a replica's stages.

A pipelined replica's GPUs form `num_stages` stages, each a SimPy resource held by one micro-batch at a time
for that stage's time. Each of its micro-batch slots (as many as stages: vLLM V1's `max_concurrent_batches`)
is an engine loop: take the driver (the CPU that schedules, one batch at a time), schedule a batch from the
slot's own requests and the shared queue, hold the driver for its CPU time, queue for stage 0 (FIFO), run it,
send the activations to the next stage (the link's time, no stage held), wait for that stage, and so on; after
the last stage the outcome is applied and the step recorded. As in vLLM V1 (`step_with_batch_queue`), a batch
is scheduled as soon as the batch queue has room, and the CPU's work overlaps the GPUs' work on earlier
micro-batches. One micro-batch alone takes the driver's time plus the sum of the stage times plus the transfers
(the bubble); with every slot busy, a new batch leaves the pipeline once per slowest stage (or driver) time. A replica without pipelining uses `Simulation.engine` unchanged.
"""

from __future__ import annotations

import simpy

from sim.core.engine import Replica, Simulation
from sim.core.step_plan import StepPlan

PROGRESS_EVERY_MICRO_BATCHES = 2048  # as often as the plain engine reports (its steps)


class PipelineReplica(Replica):
    """A replica whose `scheduler` is a set of micro-batch slots (`sim.sched.pipeline.MicroBatchSlots`) and
    whose cost model prices each stage (`sim.cost.pipeline.PipelineCostModel`)."""

    kind = "a pipelined replica"

    def __init__(self, index: int, scheduler, cost_model):
        super().__init__(index, scheduler, cost_model)
        self.stage_busy_s = [0.0] * cost_model.num_stages  # time each stage computed (transfers excluded)
        self.num_micro_batches = 0
        self.num_scheduled = 0  # micro-batches scheduled: a perturbed run's draw counter

    def engine_processes(self, sim: Simulation, env: simpy.Environment) -> list:
        driver = simpy.Resource(env, capacity=1)
        stages = [simpy.Resource(env, capacity=1) for _ in range(self.cost_model.num_stages)]
        return [self._slot_loop(sim, env, slot, driver, stages) for slot in self.scheduler.slots]

    def _wake_idle_slots(self) -> None:
        if self.wakeup is not None and not self.wakeup.triggered:
            self.wakeup.succeed()

    def _slot_loop(self, sim: Simulation, env: simpy.Environment, slot, driver: simpy.Resource,
                   stages: list[simpy.Resource]):
        cost_model = self.cost_model
        draws = sim.step_draws  # a perturbed run's (sim/cost/draws.py): one draw per micro-batch, keyed on its count
        perturb = sim.draw_functions[0] if draws is not None else None
        while True:
            cpu = driver.request()
            yield cpu
            start = env.now
            plan: StepPlan | None = slot.schedule(start)
            if plan is None:
                driver.release(cpu)
                if self.wakeup is None or self.wakeup.triggered:
                    self.wakeup = env.event()
                yield self.wakeup  # an arrival, or another slot's step freeing KV blocks
                continue
            num_waiting = self.scheduler.num_waiting
            # The micro-batch's whole priced time (the driver's CPU and each stage's) scaled by one draw, as the plain
            # engine scales a step's; counted in the order micro-batches are scheduled on this replica.
            factor = 1.0
            if draws is not None:
                factor = perturb(draws, 1.0, self.index, self.num_scheduled, plan.num_prefill_tokens > 0)
            self.num_scheduled += 1
            driver_s = cost_model.driver_s(plan) * factor
            if driver_s:
                yield env.timeout(driver_s)
            driver.release(cpu)
            costs = cost_model.stage_costs(plan)
            if factor != 1.0:
                costs = [c._replace(time_s=c.time_s * factor) for c in costs]
            transfer_s = cost_model.transfer_s(plan) if len(costs) > 1 else 0.0
            for i, cost in enumerate(costs):
                if i:
                    yield env.timeout(transfer_s)
                held = stages[i].request()
                yield held
                yield env.timeout(cost.time_s)
                stages[i].release(held)
                self.stage_busy_s[i] += cost.time_s
            outcome = slot.update_from_output(plan, env.now)
            self.num_micro_batches += 1
            # One step row per micro-batch: it started when it was scheduled and lasted until it left the last stage.
            sim.record_step(self, plan, outcome, start, env.now - start, num_waiting,
                            sum(c.flops for c in costs), sum(c.bytes for c in costs))
            if outcome.finished:
                sim.finish_requests(self, outcome.finished, start)
            self._wake_idle_slots()  # finishes and admissions change what an idle slot can schedule
            if sim.progress is not None and self.num_micro_batches % PROGRESS_EVERY_MICRO_BATCHES == 0:
                sim.progress(env.now, sim.num_done)
