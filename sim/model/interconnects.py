"""Links between GPUs, as data: what a KV cache crosses when prefill and decode run on separate pools.

Bandwidth is per GPU and per direction (what one GPU can send to its peer while the peer sends back);
latency is the fixed start-up time of one transfer. Bandwidths come from the datasheets and standards
named beside them (line rate, before protocol overhead). The latencies are order-of-magnitude estimates
of a one-sided RDMA/NCCL put (no datasheet states a transfer's start-up time): they matter only for
transfers of a few kilobytes, far below the KV of one prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import ConfigError


# How a tensor-parallel group all-reduces (`hardware.all_reduce`): "custom", the engine's own kernel over peer memory
# (vLLM's and SGLang's custom all-reduce, TensorRT-LLM's), as the engines run it by default on NVLink; or "nccl", NCCL's
# collectives (LMDeploy's TurboMind; vLLM and SGLang with --disable-custom-all-reduce, or where their kernel turns
# itself off: sim/config/engines/base.py).
CUSTOM_ALL_REDUCE, NCCL_ALL_REDUCE = "custom", "nccl"
ALL_REDUCES = (CUSTOM_ALL_REDUCE, NCCL_ALL_REDUCE)


def interconnect_class(gpu) -> str:
    """'pcie' when a GPU's peers talk over a link no faster than the host's PCIe link (L40S, L4, A10G), else
    'nvlink' (a `GPUSpec`)."""
    return "pcie" if gpu.interconnect_bytes_per_s <= gpu.host_link_bytes_per_s else "nvlink"


@dataclass(frozen=True, slots=True)
class Interconnect:
    name: str
    bandwidth_bytes_per_s: float  # per GPU, per direction
    latency_s: float  # fixed start-up time of one transfer
    description: str


INTERCONNECTS: dict[str, Interconnect] = {
    link.name: link for link in (
        Interconnect(
            "nvlink3", 300e9,  # NVIDIA A100 datasheet: NVLink 600 GB/s bidirectional per GPU
            5e-6,  # estimate: NCCL point-to-point start-up inside a node is a few microseconds
            "NVLink 3 inside an A100 node"),
        Interconnect(
            "nvlink4", 450e9,  # NVIDIA H100/H200 SXM datasheets: NVLink 900 GB/s bidirectional per GPU
            5e-6,  # estimate, as nvlink3
            "NVLink 4 inside an H100/H200 node (DistServe's intra-node placement)"),
        Interconnect(
            "pcie-gen4", 32e9,  # PCI-SIG PCIe 4.0: 16 GT/s x16 lanes, 128b/130b = 31.5 GB/s per direction
            10e-6,  # estimate: a copy through host memory or a PCIe switch
            "PCIe 4.0 x16 between GPUs without NVLink"),
        Interconnect(
            "pcie-gen5", 64e9,  # PCI-SIG PCIe 5.0: 32 GT/s x16 lanes = 63 GB/s per direction
            10e-6,  # estimate, as pcie-gen4
            "PCIe 5.0 x16 between GPUs without NVLink"),
        Interconnect(
            "infiniband-hdr", 25e9,  # InfiniBand HDR (IBTA spec, NVIDIA ConnectX-6): 200 Gb/s per port
            2e-6,  # estimate: RDMA write end to end through one switch, ~1-2 microseconds
            "InfiniBand HDR, one 200 Gb/s port per GPU, across nodes (DGX A100)"),
        Interconnect(
            "infiniband-ndr", 50e9,  # InfiniBand NDR (IBTA spec, NVIDIA ConnectX-7): 400 Gb/s per port
            2e-6,  # estimate, as infiniband-hdr
            "InfiniBand NDR, one 400 Gb/s port per GPU, across nodes (DGX H100; Splitwise's setup)"),
        Interconnect(
            "ethernet-100g", 12.5e9,  # IEEE 802.3 100GBASE: 100 Gb/s
            10e-6,  # estimate: RoCE/TCP through a top-of-rack switch, ~several to tens of microseconds
            "100 Gb Ethernet across nodes (cloud instances without InfiniBand)"),
        Interconnect(
            "ethernet-400g", 50e9,  # IEEE 802.3bs 400GBASE: 400 Gb/s
            10e-6,  # estimate, as ethernet-100g
            "400 Gb Ethernet (RoCE) across nodes"),
    )
}


def get_interconnect(name: str, field: str = "hardware.disaggregation.link") -> Interconnect:
    try:
        return INTERCONNECTS[name.lower().replace("_", "-")]
    except KeyError:
        raise ConfigError(f"{field}: unknown interconnect {name!r}; allowed: {', '.join(INTERCONNECTS)} "
                          "or {bandwidth_bytes_per_s: ..., latency_s: ...}") from None
