"""Device placement on a machine without a GPU: every tensor calibration makes must be made on the
inputs' device (or moved to the CPU on purpose), never on torch's default device.

Issue 17: `reference.rotary` built its tensors on the default device (the CPU) and multiplied them
with a caller's CUDA positions, which crashed the first check of `calibrate run --device cuda`. CI has
no GPU, so these tests make the default device `meta` while the inputs live on the CPU: a tensor made
without an explicit device lands on `meta`, and mixing it with a CPU tensor raises at once, the way
mixing CPU and CUDA tensors does on a GPU machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from calibrate.arch import load_model  # noqa: E402
from calibrate.bench import ShardBench  # noqa: E402
from calibrate.grids import make_grid  # noqa: E402
from calibrate.kernels import reference as ref  # noqa: E402

ARCH_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "calibrate" / "tiny_llama.yaml"


@pytest.fixture
def default_device_meta():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)


def test_the_default_device_trap_catches_a_stray_tensor(default_device_meta):
    """The trap itself: a tensor made without a device cannot meet a CPU tensor."""
    on_cpu = torch.randn(3, device="cpu")
    with pytest.raises(RuntimeError):
        on_cpu * torch.arange(3)


def test_references_make_their_tensors_where_they_compute(default_device_meta):
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(5, 4, 32, generator=gen, device="cpu")
    positions = torch.randint(0, 4096, (5,), generator=gen, device="cpu")
    out = ref.rotary(x, positions)
    assert out.device.type == "cpu" and torch.isfinite(out).all()
    q = torch.randn(1, 4, 6, 32, generator=gen, device="cpu")
    k, v = torch.randn(1, 2, 10, 32, generator=gen, device="cpu"), torch.randn(1, 2, 10, 32, generator=gen, device="cpu")
    assert torch.isfinite(ref.prefill_attention(q, k, v)).all()


def test_shard_bench_checks_and_every_point_stay_on_the_inputs_device(default_device_meta):
    spec = load_model(str(ARCH_FILE))
    bench = ShardBench(spec, 1, "fp32", "cpu", block_size=16)
    errors = bench.run_checks()
    assert errors and all(err <= 1e-4 for err in errors.values())
    grid = make_grid("quick", spec.max_context)
    seen = set()
    for point in bench.points(grid):
        # One point per (family, op): the shapes differ, the code paths do not.
        tag = (point.family, point.key.get("op"), point.key.get("layout"))
        if tag in seen:
            continue
        seen.add(tag)
        point.make()()
    assert {"linear", "elementwise", "decode_attention", "prefill_attention", "sampling",
            "step_overhead"} <= {family for family, _, _ in seen}


@pytest.mark.parametrize("engine, kv_layout", [("unfused", "dense"), ("fused", "paged")])
def test_a_whole_step_stays_on_the_inputs_device(default_device_meta, engine, kv_layout):
    from calibrate.steps import ShardModel, step_grid
    spec = load_model(str(ARCH_FILE))
    model = ShardModel(spec, 1, dtype="fp32", device="cpu", engine=engine, kv_layout=kv_layout, block_size=4)
    for shape in step_grid("quick", spec.max_context):
        with torch.no_grad():
            tokens = model.step(model.make_inputs(shape))
        assert tokens.device.type == "cpu" and tokens.shape == (shape.sampled_rows,)
