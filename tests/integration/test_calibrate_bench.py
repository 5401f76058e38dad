"""The per-op bench's bookkeeping that the GPU path relies on, checked on the CPU: every op the cost model
reads has a named implementation, and the cold-copy rule for the CUDA-graph timer."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from calibrate.arch import load_model  # noqa: E402
from calibrate.bench import GRAPH_CALLS, ShardBench  # noqa: E402

ARCH_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "calibrate" / "tiny_llama.yaml"


@pytest.mark.parametrize("gated", [True, False])
def test_every_op_the_cost_model_reads_names_its_implementation(gated):
    spec = load_model(str(ARCH_FILE)).model_copy(update={"gated_mlp": gated})
    bench = ShardBench(spec, 1, "fp32", "cpu", block_size=16)
    impls = bench.op_impls()
    # sim/calibrated.py reads these elementwise op names, and the attention layouts.
    activation = "silu_mul" if gated else "relu"
    for op in ("rmsnorm", "rotary", activation, "residual_add", "linear", "prefill_attention",
               "decode_attention:contiguous", "decode_attention:paged", "sampling", "step_overhead"):
        assert impls.get(op), op
    assert ("relu" in impls) != gated


def test_cold_copies_exceed_twice_the_l2_on_a_gpu_and_are_one_on_a_cpu():
    bench = ShardBench(load_model(str(ARCH_FILE)), 1, "fp32", "cpu", block_size=16)
    assert bench.cold_copies(1 << 10) == 1  # CPU: the timer as it was, no copies
    bench.device, bench._l2_bytes = "cuda", 50 << 20  # the rule as a GPU with a 50 MiB L2 applies it
    for nbytes in (64 << 10, 8 << 20, 30 << 20, 200 << 20):
        copies = bench.cold_copies(nbytes)
        assert 1 <= copies <= GRAPH_CALLS
        assert copies == GRAPH_CALLS or copies * nbytes >= 2 * (50 << 20)
        assert copies == min(GRAPH_CALLS, max(1, math.ceil(2 * (50 << 20) / nbytes)))
    assert bench.cold_copies(200 << 20) == 1  # larger than the L2 on its own
