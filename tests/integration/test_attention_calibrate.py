"""calibrate's attention kernels (issue 33): `--attention materialized` runs torch's math SDPA backend, a whole-step
profile's meta.json records which kernel it ran, and a cost model built from it refuses the other."""

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from torch.nn.attention import SDPBackend  # noqa: E402

from calibrate.kernels.attention_backends import backends, sdpa_context, time_decode, time_prefill  # noqa: E402
from calibrate.steps import ShardModel  # noqa: E402
from sim.config.files import validate_scenario  # noqa: E402
from sim.cost.attention_support import check_attention_kernel, profile_attention_kernel  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from test_calibrate_steps import MIXED, _arch_file, _spec  # noqa: E402
from test_calibrated import one_error_line, run_cli  # noqa: E402


def _qkv(n=64, heads=4, d=16):
    g = torch.Generator().manual_seed(5)
    return [torch.randn(1, heads, n, d, generator=g) for _ in range(3)]


def test_materialized_runs_the_math_backend_and_flash_does_not():
    q, k, v = _qkv()
    assert backends("materialized", "cpu") == [SDPBackend.MATH]
    assert backends("flash", "cuda") == [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    with sdpa_context("materialized", "cpu"):
        assert torch._fused_sdp_choice(q, k, v, is_causal=True) == SDPBackend.MATH.value
    # On a CPU, left to torch, these inputs take its tiled flash kernel: the what-if compares two kernels.
    with sdpa_context("flash", "cpu"):
        assert torch._fused_sdp_choice(q, k, v, is_causal=True) == SDPBackend.FLASH_ATTENTION.value
    with pytest.raises(ValueError, match="kernel: 'eager' is not allowed; allowed: flash, materialized"):
        backends("eager", "cpu")


def test_both_backends_compute_the_same_attention_and_time_it():
    ref = torch.nn.functional.scaled_dot_product_attention(*_qkv(), is_causal=True)
    for kernel in ("flash", "materialized"):
        with sdpa_context(kernel, "cpu"):
            out = torch.nn.functional.scaled_dot_product_attention(*_qkv(), is_causal=True)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
        prefill = time_prefill(kernel, heads=2, kv_heads=1, head_dim=16, tokens=64, budget_s=0.01)
        decode = time_decode(kernel, batch=2, heads=2, kv_heads=1, head_dim=16, context=64, budget_s=0.01)
        assert 0 < prefill.p20_s <= prefill.median_s <= prefill.p80_s and decode.median_s > 0


@pytest.mark.parametrize("kv_layout", ["dense", "paged"])
def test_a_materialized_step_gives_the_flash_steps_tokens(kv_layout):
    outs = []
    for kernel in ("flash", "materialized"):
        model = ShardModel(_spec(), 1, dtype="fp32", device="cpu", engine="unfused", kv_layout=kv_layout,
                           block_size=4, seed=3, attention=kernel)
        outs.append(model.step(model.make_inputs(MIXED)))
        assert model.attention_kernel == kernel
    assert torch.equal(outs[0], outs[1])
    assert "math backend" in model.op_impls()["prefill_attention"]
    assert "math backend" in model.op_impls()["decode_attention"]
    with pytest.raises(ConfigError, match="--attention: 'eager' is not allowed; allowed: flash, materialized"):
        ShardModel(_spec(), 1, dtype="fp32", device="cpu", attention="eager")


def test_a_steps_profile_records_its_kernel_and_its_cost_model_refuses_the_other(tmp_path):
    out, arch = tmp_path / "prof", _arch_file(tmp_path)
    args = ["calibrate", "steps", "--model", str(arch), "--dtype", "fp32", "--reps", "2", "--layers", "1",
            "--out", str(out), "-q"]
    result = run_cli(*args, "--attention", "materialized", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["attention_kernel"] == "materialized" and "math backend" in meta["op_impls"]["prefill_attention"]
    assert profile_attention_kernel(out) == "materialized"
    # A rerun with the other kernel does not resume into it.
    line = one_error_line(run_cli(*args, "--attention", "flash", cwd=tmp_path))
    assert "attention_kernel" in line

    class Deployed:
        profile_dir = out
    workload = {"arrival": {"kind": "poisson", "rate_per_s": 1},
                "lengths": {"kind": "fixed", "input_tokens": 10, "output_tokens": 10}}
    flash = validate_scenario({"workload": workload, "cost_model": {"kind": "calibrated", "profile_device": "h100-sxm"},
                               "scheduler": {"max_model_len": 4096}})
    with pytest.raises(ConfigError, match="attention.kernel: 'flash' is not the kernel profile"):
        check_attention_kernel(flash, Deployed)
    check_attention_kernel(flash.model_copy(update={"attention": flash.attention.model_copy(
        update={"kernel": "materialized"})}), Deployed)


def _bench_attention():
    from helpers import load_benchmark
    return load_benchmark("bench_attention")


def test_the_benchmark_probes_each_elementwise_pass_torch_runs_and_gives_the_device_their_times():
    module = _bench_attention()
    from sim.model.attention_io import ELEMENTWISE_PASSES, math_sdpa_passes
    probes = module.pass_probes()
    # every pass fp32 inputs run but the matmuls (the casts run only for bf16/fp16 inputs)
    assert set(probes) == set(ELEMENTWISE_PASSES) & {row[0] for row in math_sdpa_passes(4)}
    assert "cast_q" not in probes and "qk" not in probes and len(probes) == 10
    with torch.inference_mode():
        seconds = {op: probe() for op, probe in probes.items()}
    assert all(s > 0 and s != float("inf") for s in seconds.values())  # seconds per element, each measured
    rates = {"matmul": 1e11, "cache_copy": 3e10, "dram_copy": 1e10, "first_touch": 4e9,
             **{f"pass {op}": s for op, s in seconds.items()}}
    assert module.this_cpu(rates, 64 << 20).pass_s_per_element == seconds
    assert module.this_cpu(rates, 64 << 20, own_work=False).pass_s_per_element is None
    assert module.this_cpu(rates, 64 << 20, terms=False).pass_s_per_element is None


def test_the_gpu_mode_of_the_attention_benchmark_runs_its_code_on_a_cpu(tmp_path, capsys):
    """`bench_attention.py --gpu-dry-run`: the GPU mode's code (bf16, both kernels timed, the device constants, the
    simulator's two prices) on this CPU at tiny sizes; its CSV holds one row per length, each ratio its parts'."""
    import argparse

    import pandas as pd
    module = _bench_attention()
    out = tmp_path / "rows.csv"
    module.gpu_main(argparse.Namespace(device="cpu", heads=2, head_dim=64, gpu="h200", csv=str(out), lengths=[32, 64]))
    rows = pd.read_csv(out)
    assert list(rows["tokens"]) == [32, 64]
    assert (rows[["flash_s", "materialized_s", "flash_sim_s", "materialized_sim_s", "flash_catalog_s"]] > 0).all().all()
    assert rows["measured_ratio"].tolist() == pytest.approx((rows["flash_s"] / rows["materialized_s"]).tolist())
    assert rows["simulated_ratio_measured_rates"].tolist() == pytest.approx(
        (rows["flash_sim_s"] / rows["materialized_sim_s"]).tolist())
    # the materialized kernel moves the scores: the simulator prices it slower than flash on the catalog GPU (on
    # this CPU the bf16 rate that prices flash may be far below the fp32 rate that prices the materialized kernel)
    assert (rows["simulated_ratio_catalog"] < 1).all()
    assert (rows["fp32_matmul_flops_per_s"] > 0).all() and (rows["matmul_flops_per_s"] > 0).all()
    assert (rows["kernel_s"] > 0).all()  # a launch's fixed cost, recorded beside the rows
    assert "| 64 |" in capsys.readouterr().out
    # --reprice prices the stored rows again, measuring nothing: the same simulated ratios
    module.reprice(argparse.Namespace(reprice=str(out), gpu="h200", heads=2, head_dim=64, copy_tb_s=0.0))
    printed = capsys.readouterr().out
    for rec in rows.itertuples():
        assert f"| {rec.tokens} |" in printed and f"**{rec.simulated_ratio_measured_rates:.3f}**" in printed
    # --copy-tb-s prices with another memory rate, said in the header: a far faster one, a faster materialized price
    module.reprice(argparse.Namespace(reprice=str(out), gpu="h200", heads=2, head_dim=64, copy_tb_s=1000.0))
    faster = capsys.readouterr().out
    assert "the copy rate 1000.0 TB/s (--copy-tb-s)" in faster
    def materialized_ms(text):  # the 64-token row's "materialized ms simulated (measured rates)"
        return float(next(line for line in text.splitlines() if line.startswith("| 64 |")).split("|")[6])
    assert 0 < materialized_ms(faster) < materialized_ms(printed)
    before = out.read_bytes()  # a second run into the same CSV: refused, before any work, the file kept
    with pytest.raises(SystemExit) as stop:
        module.gpu_main(argparse.Namespace(device="cpu", heads=2, head_dim=64, gpu="h200", csv=str(out), lengths=[32]))
    assert stop.value.code == 2 and "--csv:" in capsys.readouterr().err and out.read_bytes() == before


def test_reprice_refuses_a_file_that_is_not_a_benchmark_csv_in_one_line(tmp_path, capsys):
    import argparse

    module = _bench_attention()
    other = tmp_path / "other.csv"
    other.write_text("tokens,flash_s\n512,1e-5\n")
    for path in (other, tmp_path / "missing.csv"):
        with pytest.raises(SystemExit) as stop:
            module.reprice(argparse.Namespace(reprice=str(path), gpu="h200", heads=0, head_dim=128, copy_tb_s=0.0))
        err = capsys.readouterr().err
        assert stop.value.code == 2 and err.startswith("--reprice: ") and err.count("\n") == 1


@pytest.mark.parametrize("args", [["--copy-tb-s", "4.3"], ["--reprice", "x.csv", "--copy-tb-s", "-1"]])
def test_a_copy_rate_is_taken_only_positive_and_only_by_reprice(args):
    import subprocess
    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_attention.py"
    done = subprocess.run([sys.executable, str(bench), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("--copy-tb-s: ") and "allowed" in done.stderr
