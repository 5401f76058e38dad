"""The resolve step for disaggregated serving: one `Deployment` per pool, and the link between them.

Each pool is resolved as a colocated scenario of its own (`pool_scenario`: the top-level hardware with the
pool's GPU, tensor parallelism and replica count), so a pool's KV capacity, token budget and checks come
from the same memory arithmetic and rules as any deployment; a decode pool on another GPU gets that GPU's
capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sim.config.deployment import Deployment, resolve
from sim.config.schema import HardwareSpec, LinkSpec, Scenario
from sim.errors import ConfigError
from sim.model.interconnects import Interconnect, get_interconnect

Pool = Literal["prefill", "decode"]
POOLS: tuple[Pool, ...] = ("prefill", "decode")


@dataclass(frozen=True)
class DisaggregatedDeployment:
    prefill: Deployment  # one prefill replica
    decode: Deployment  # one decode replica
    num_prefill_replicas: int
    num_decode_replicas: int
    link: Interconnect
    overlap: str  # "none" or "layerwise"

    def kv_transfer_bytes(self, num_prompt_tokens: int) -> int:
        """Bytes a prompt's KV occupies, all layers, the whole tensor-parallel group: what crosses the link (a hybrid
        model's sliding layers send their last window only)."""
        return self.prefill.kv_bytes_for_tokens(num_prompt_tokens)

    @property
    def num_parallel_links(self) -> int:
        """GPU-to-GPU links a transfer uses at once: each prefill GPU sends its shard of the KV to a decode GPU,
        so min(TP_prefill, TP_decode) links run side by side."""
        return min(self.prefill.tensor_parallel, self.decode.tensor_parallel)

    @property
    def num_gpus(self) -> int:
        return (self.num_prefill_replicas * self.prefill.tensor_parallel
                + self.num_decode_replicas * self.decode.tensor_parallel)


def pool_scenario(scenario: Scenario, pool: Pool) -> Scenario:
    """The scenario one pool's replicas run: the top-level hardware with the pool's own values, colocated."""
    hw = scenario.hardware
    spec = getattr(hw.disaggregation, pool)
    hardware = HardwareSpec(gpu=spec.gpu if spec.gpu is not None else hw.gpu,
                            tensor_parallel=spec.tensor_parallel or hw.tensor_parallel,
                            expert_parallel=spec.expert_parallel or hw.expert_parallel,
                            num_replicas=spec.num_replicas or hw.num_replicas, router=hw.router)
    update = {"hardware": hardware}
    if spec.kv_capacity_tokens is not None:
        update["kv_cache"] = scenario.kv_cache.model_copy(update={"capacity_tokens": spec.kv_capacity_tokens})
    return scenario.model_copy(update=update)


def link_of(scenario: Scenario) -> Interconnect:
    link = scenario.hardware.disaggregation.link
    if isinstance(link, LinkSpec):
        return Interconnect("inline", link.bandwidth_bytes_per_s, link.latency_s, "given in the scenario")
    return get_interconnect(link)


def _check_supported(scenario: Scenario) -> None:
    """What the disaggregated engine does not model (yet): one line naming the field and what is allowed."""
    field = "hardware.disaggregation"
    if scenario.scheduler.batching != "continuous":
        raise ConfigError(f"{field}: needs scheduler.batching 'continuous', got {scenario.scheduler.batching!r}")
    if scenario.hardware.pipeline_parallel > 1:
        raise ConfigError(f"{field}: pipeline parallelism is not modelled with disaggregation; set "
                          f"hardware.pipeline_parallel to 1, got {scenario.hardware.pipeline_parallel}")
    if scenario.speculation is not None:
        raise ConfigError(f"{field}: speculative decoding is not modelled with disaggregation; remove speculation")
    if scenario.kv_cache.enable_prefix_caching:
        raise ConfigError(f"{field}: prefix caching is not modelled with disaggregation; set "
                          "kv_cache.enable_prefix_caching false")
    w = scenario.workload
    if max(w.samples_per_prompt, w.beam_width) > 1:
        raise ConfigError(f"{field}: several sequences per prompt are not modelled with disaggregation; "
                          "set workload.samples_per_prompt and beam_width to 1")
    if getattr(w.arrival, "kind", None) == "closed_loop":
        raise ConfigError(f"{field}: closed-loop users are not modelled with disaggregation; use open arrivals")
    if scenario.cost_model.kind == "calibrated":
        raise ConfigError(f"{field}: a calibrated profile is for one GPU and TP; use cost_model kind roofline, "
                          "measured or fixed")


def _in_pool(message: str, pool: Pool) -> str:
    """A pool's resolve error, its field named inside the pool: `hardware.gpu: ...` becomes
    `hardware.disaggregation.decode.gpu: ...` (the pool's value, or the top-level one it inherited)."""
    for prefix in ("hardware.", "hardware:"):
        if message.startswith(prefix):
            return f"hardware.disaggregation.{pool}{prefix[-1]}{message[len(prefix):]}"
    return f"hardware.disaggregation.{pool}: {message}"


def resolve_disaggregated(scenario: Scenario) -> DisaggregatedDeployment:
    if scenario.hardware.disaggregation is None:
        raise ConfigError("hardware.disaggregation: not set; this scenario is colocated")
    _check_supported(scenario)
    pools = {}
    for pool in POOLS:
        try:
            pools[pool] = resolve(pool_scenario(scenario, pool))
        except ConfigError as err:
            raise ConfigError(_in_pool(str(err), pool)) from None
    spec = scenario.hardware.disaggregation
    prefill_hw, decode_hw = (pool_scenario(scenario, p).hardware for p in POOLS)
    return DisaggregatedDeployment(prefill=pools["prefill"], decode=pools["decode"],
                                   num_prefill_replicas=prefill_hw.num_replicas,
                                   num_decode_replicas=decode_hw.num_replicas,
                                   link=link_of(scenario), overlap=spec.overlap)
