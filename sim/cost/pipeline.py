"""Pipeline parallelism's cost: one cost model per stage, and the activation transfer between stages.

A stage is a tensor-parallel group holding consecutive layers (`sim.model.memory.pipeline_stage_layers`).
The roofline prices a stage exactly: its own layers, the LM head only on the last stage (sim/run.py builds
those); the engine's CPU time per step (scheduling, input preparation, output processing) is the driver's, paid
once per micro-batch before it enters the first stage and overlapping the GPUs' work on other micro-batches. Cost models whose steps cannot be split by layer
(measured, calibrated whole steps, fixed) are apportioned by layer share (`LayerShareCostModel`).
The engine that moves micro-batches through the stages is `sim.core.pipeline`.
"""

from __future__ import annotations

from sim.core.step_plan import StepPlan
from sim.core.step_plan import decode_step_costs, plain_decode_plan
from sim.cost.roofline import StepCost
from sim.model.specs import ModelSpec

# vLLM passes two [tokens, hidden] tensors between stages, `hidden_states` and `residual`
# (IntermediateTensors in vllm/model_executor/models/llama.py), in the activation dtype.
ACTIVATION_TENSORS = 2
ACTIVATION_BYTES = 2  # bf16/fp16


def stage_model_spec(model: ModelSpec, stage_layers: tuple[int, ...], stage: int) -> ModelSpec:
    """The part of `model` one stage runs: its layers (MoE models keep their leading dense layers where they
    fall), under a name that says which layers."""
    start = sum(stage_layers[:stage])
    end = start + stage_layers[stage]
    dense = max(0, min(end, model.num_dense_layers) - start)
    return model.model_copy(update={"name": f"{model.name}[layers {start}-{end - 1}]",
                                    "num_layers": stage_layers[stage], "num_dense_layers": dense})


class FixedDriverTime:
    """The driver's CPU time per micro-batch when it does not depend on the batch (the roofline's
    step_overhead_s); `sim.cost.overhead.EngineOverhead` answers the same `serial_s` for per-sequence terms."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __repr__(self) -> str:
        return f"{self.seconds:g} s per step"

    def serial_s(self, plan: StepPlan) -> float:
        return self.seconds if plan.num_tokens else 0.0


class LayerShareCostModel:
    """A whole-model cost model's step scaled to one stage's share of the layers: time, FLOPs and bytes times
    stage_layers / num_layers. For cost models that price whole steps (measured, calibrated, fixed); their
    fixed per-step terms and LM head are apportioned too, so the stages' times add up to the whole step."""

    def __init__(self, whole, num_layers: int, stage_layers: int):
        self.whole, self.num_layers, self.stage_layers = whole, num_layers, stage_layers
        self.share = stage_layers / num_layers

    def __repr__(self) -> str:
        return f"LayerShareCostModel({self.stage_layers}/{self.num_layers} of {self.whole!r})"

    def step_cost(self, plan: StepPlan) -> StepCost:
        c = self.whole.step_cost(plan)
        return StepCost(c.time_s * self.share, c.flops * self.share, c.bytes * self.share)

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """A run of decode-only steps (`sim.core.step_plan.decode_step_costs`): the whole model's, each scaled by the share."""
        share = self.share
        return [StepCost(c.time_s * share, c.flops * share, c.bytes * share)
                for c in decode_step_costs(self.whole, num_seqs, context_tokens, num_steps)]

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s


class PipelineCostModel:
    """Per-stage step costs plus the point-to-point send of the activations from one stage to the next.

    Transfer time = link latency + bytes / link bandwidth, bytes = 2 tensors × tokens × hidden × 2 bytes split
    over the tensor-parallel ranks: vLLM sends each rank's 1/tp slice of the intermediate tensors over its
    own link and all-gathers them on the receiving stage (`send_tensor_dict(..., all_gather_group=...)` in
    vllm/distributed/parallel_state.py); that all-gather inside the receiving node is not priced.
    """

    def __init__(self, stages: list, *, hidden_size: int, tensor_parallel: int, link_bytes_per_s: float,
                 link_latency_s: float, driver=None):
        if not stages:
            raise ValueError("a pipeline needs at least one stage")
        self.stages = stages
        self.driver = driver  # CPU time per micro-batch before the first stage (`serial_s(plan)`); None: none
        self.hidden_size = hidden_size
        self.tensor_parallel = tensor_parallel
        self.link_bytes_per_s = link_bytes_per_s
        self.link_latency_s = link_latency_s

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def stage_model(self):
        """What prices the stages (all alike): the whole model's cost model each takes its share of, or the first
        stage's own model of its layers."""
        stage = self.stages[0]
        return stage.whole if isinstance(stage, LayerShareCostModel) else stage

    def __repr__(self) -> str:
        driver = f"; driver {self.driver!r}" if self.driver is not None else ""
        return (f"PipelineCostModel({self.num_stages} stages: {', '.join(map(repr, self.stages))}; "
                f"link {self.link_bytes_per_s:.3g} B/s + {self.link_latency_s:g} s{driver})")

    def driver_s(self, plan: StepPlan) -> float:
        """The driver's CPU time to schedule the micro-batch, prepare its inputs and process its outputs."""
        return self.driver.serial_s(plan) if self.driver is not None else 0.0

    def stage_costs(self, plan: StepPlan) -> list[StepCost]:
        return [stage.step_cost(plan) for stage in self.stages]

    def transfer_bytes(self, plan: StepPlan) -> float:
        """Bytes each tensor-parallel rank sends to the next stage."""
        return ACTIVATION_TENSORS * plan.num_tokens * self.hidden_size * ACTIVATION_BYTES / self.tensor_parallel

    def transfer_s(self, plan: StepPlan) -> float:
        """Time to hand a micro-batch's activations from one stage to the next."""
        return self.link_latency_s + self.transfer_bytes(plan) / self.link_bytes_per_s

    def step_cost(self, plan: StepPlan) -> StepCost:
        """One micro-batch alone in the pipeline: the driver's time, every stage in turn, a transfer between each two."""
        costs = self.stage_costs(plan)
        time_s = self.driver_s(plan) + sum(c.time_s for c in costs) + (self.num_stages - 1) * self.transfer_s(plan)
        return StepCost(time_s, sum(c.flops for c in costs), sum(c.bytes for c in costs))

    def step_time(self, plan: StepPlan) -> float:
        return self.step_cost(plan).time_s

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """A run of decode-only micro-batches alone in the pipeline (`sim.core.step_plan.decode_step_costs`), bit-identical
        to `step_cost` of each: the driver and transfer times do not depend on the context, so only the
        stages' costs are taken per step (their closed forms where they have one) and summed in order."""
        plan = plain_decode_plan(num_seqs, context_tokens)
        between_s = (self.num_stages - 1) * self.transfer_s(plan)
        driver_s = self.driver_s(plan)
        per_stage = [decode_step_costs(stage, num_seqs, context_tokens, num_steps) for stage in self.stages]
        out = []
        for costs in zip(*per_stage):
            time_s = driver_s + sum(c.time_s for c in costs) + between_s
            out.append(StepCost(time_s, sum(c.flops for c in costs), sum(c.bytes for c in costs)))
        return out
