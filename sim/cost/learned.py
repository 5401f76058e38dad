"""A roofline whose efficiencies were learned from the GPUs with measured kernels (issue 12).

`cost_model: {kind: roofline, efficiencies: learned}`: the same per-op sums as RooflineCostModel, but each kernel's
time is a launch plus its ideal time at the GPU catalog's peaks (FLOP/s, HBM bytes/s) divided by an efficiency read from
calibrate/measured/learned_roofline.json (written by `python -m calibrate.learn_roofline`, which also reports
its leave-one-GPU-out error):

- GEMMs: efficiency per (log2 compute-time / memory-time on this GPU, log2 weight elements) cell, the median over
  the measured GPUs of ideal / (measured − launch) time, plus a launch (`min_kernel_s`, the fastest measured
  GEMM);
- prefill attention per log2(batch × prompt tokens), decode attention per log2(batch × context tokens), each a
  launch of its own (the kind's fastest measured call, median over the GPUs) plus its ideal time at that efficiency;
- norms/activations at the decode-attention byte efficiency of the largest cell;
- all-reduce: a fixed latency plus the message at a fraction of the catalog interconnect bandwidth, both per
  interconnect class (`interconnect_class`: NVLink or PCIe) and GPU count, learned from the engines' own kernel
  (vLLM's custom all-reduce under CUDA graphs) or, with `hardware.all_reduce: nccl`, from NCCL's tables. A class
  no measured GPU belongs to falls back to the catalog's all-reduce (the GPU's interconnect_efficiency and
  allreduce_latency_s).

No step overhead: the tables are kernel times (compose with `overhead:` for the engine's time outside kernels).
Efficiencies are fractions of the catalog's peaks, so the model applies to a GPU without measured tables.

The price is written once, with numba, in `sim.cost.learned_kernel` (the linear layers' FLOPs and bytes are the
roofline's, `sim.cost.roofline_kernel`): this class reads the tables, packs them once beside its roofline pack, and
prices through `sim.cost.compiled_pricing` (kind `KIND_LEARNED`), as the compiled engine core does with the pack
`compiled_params()` gives it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from sim.core.step_plan import StepPlan
from sim.cost import compiled_pricing, learned_kernel, roofline_kernel
from sim.cost.compiled_pricing import KIND_LEARNED
from sim.cost.roofline import RooflineCostModel, StepCost, decode_run_costs, matmul_peak_flops
from sim.cost.step_args import step_args
from sim.errors import ConfigError
from sim.jit import HAVE_NUMBA
from sim.model.interconnects import CUSTOM_ALL_REDUCE, NCCL_ALL_REDUCE, interconnect_class

LEARNED_PATH = Path(__file__).resolve().parents[2] / "calibrate" / "measured" / "learned_roofline.json"
# 3: each attention kind's own launch floor (`min_kernel_s` of prefill_attention and decode_attention), its
# efficiencies learned on the time beyond it (2: beyond a GEMM's launch)
LEARNED_FORMAT_VERSION = 3


def load_learned(path: Path | None = None) -> dict:
    p = path or LEARNED_PATH
    if not p.is_file():
        raise ConfigError(f"cost_model.efficiencies: 'learned' needs {p}; allowed: catalog, or run "
                          "`python -m calibrate.learn_roofline`")
    return json.loads(p.read_text())


class LearnedRooflineCostModel(RooflineCostModel):
    def __init__(self, *args, learned: dict | None = None, all_reduce: str = CUSTOM_ALL_REDUCE, **kwargs):
        kwargs.setdefault("step_overhead_s", 0.0)
        super().__init__(*args, **kwargs)
        self.learned = learned or load_learned()
        g = self.gpu
        peak = matmul_peak_flops(g, self.weight_dtype, kwargs.get("fp8_compute", False))
        self.peak_flops, self.peak_bytes = peak, g.hbm_bytes_per_s
        L = self.learned
        self.min_kernel_s = L["min_kernel_s"]
        self.prefill_min_s = L["prefill_attention"]["min_kernel_s"]
        self.decode_min_s = L["decode_attention"]["min_kernel_s"]
        if L.get("format_version") != LEARNED_FORMAT_VERSION:
            raise ConfigError(f"cost_model.efficiencies: 'learned' reads format_version {LEARNED_FORMAT_VERSION}, got "
                              f"{L.get('format_version')!r}; rerun `python -m calibrate.learn_roofline`")
        self.interconnect = interconnect_class(g)
        self.all_reduce = all_reduce
        nccl = all_reduce == NCCL_ALL_REDUCE
        if nccl and "allreduce_nccl" not in L:
            raise ConfigError("hardware.all_reduce: 'nccl' is not in this learned_roofline.json (written before NCCL's "
                              "tables were learned); allowed: custom, or rerun `python -m calibrate.learn_roofline`")
        by_count = L["allreduce_nccl" if nccl else "allreduce"].get(self.interconnect)
        which = "NCCL all-reduce" if nccl else "all-reduce"
        if by_count:
            # The measured GPU count nearest in log2 (TP 16 reads 8, TP 3 reads 2 or 4).
            n = min(by_count, key=lambda c: (abs(math.log2(int(c)) - math.log2(max(self.tp, 2))), int(c)))
            ar = by_count[n]
            self.ar_latency_s, self.ar_bw = ar["latency_s"], g.interconnect_bytes_per_s * ar["bandwidth_fraction"]
            self.ar_source = f"{self.interconnect} {which} learned at {n} GPUs"
        else:
            self.ar_latency_s, self.ar_bw = g.allreduce_latency_s, g.interconnect_bytes_per_s * g.interconnect_efficiency
            alike = " (nccl alike)" if nccl else ""
            self.ar_source = f"no measured {self.interconnect} GPU: catalog all-reduce{alike}"

    def __repr__(self) -> str:
        return (f"LearnedRooflineCostModel({self.model.name} on {self.gpu.name} x{self.tp}, weights={self.weight_dtype}, "
                f"kv={self.kv_dtype}, efficiencies learned from {', '.join(self.learned['fitted_on'])} "
                f"({self.learned['source']}), {self.ar_source}, step overhead {self.step_overhead_s * 1e3:g} ms)")

    def _build_pack(self) -> tuple:
        """The roofline pack (the model's numbers and its linear layers' rows); the learned tables' pack beside it,
        built from it (`_packs`)."""
        roofline = roofline_kernel.pack(self)
        self._learned_pack = learned_kernel.pack(self, roofline)
        return roofline

    def _packs(self) -> tuple[tuple, tuple]:
        roofline = self._pack()
        return roofline, self._learned_pack

    def step_cost(self, plan: StepPlan) -> StepCost:
        roofline, learned = self._packs()
        return StepCost(*compiled_pricing.price_parts(KIND_LEARNED, roofline, learned, None, *step_args(plan)))

    def compiled_params(self) -> tuple | None:
        """This model's packs for the compiled engine core (`sim.compiled`), through `sim.cost.compiled_pricing`;
        None for a subclass (it may price otherwise), or without numba."""
        if type(self) is not LearnedRooflineCostModel or not HAVE_NUMBA:
            return None
        roofline, learned = self._packs()
        return compiled_pricing.pricer(roofline, learned_params=learned)

    def decode_step_costs(self, num_seqs: int, context_tokens: int, num_steps: int) -> list[StepCost]:
        """Costs of a run of decode-only steps (`sim.core.step_plan.decode_step_costs`): `step_cost` of each, in one
        call (this overrides the catalog roofline's, whose kernel times are not these)."""
        roofline, learned = self._packs()
        return decode_run_costs(KIND_LEARNED, roofline, learned, None, num_seqs, context_tokens, num_steps)
