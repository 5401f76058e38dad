"""The calibrated cost model: calibrate a tiny Llama-shaped model on the CPU end to end, fit, simulate;
interpolation and extrapolation rules on a committed profile of the same model; bad profiles
through both command lines (one line, exit 2); `sim` without torch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from helpers import SUBPROCESS_TIMEOUT_S
from sim.config.deployment import model_spec, resolve
from sim.config.files import build_scenario_set, load_scenario_set
from sim.core.step_plan import StepPlan
from sim.cost.calibrated import (
    CalibratedCostModel,
    Interpolator,
    load_profile,
    shard_shapes,
)
from sim.errors import ConfigError
from sim.model.catalog import get_gpu
from sim.run import make_cost_model, simulate

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "calibrate"
ARCH_FILE = FIXTURES / "tiny_llama.yaml"
PROFILE = FIXTURES / "tiny_llama_cpu"  # `python -m calibrate run --model tiny_llama.yaml --dtype fp32`
TINY = yaml.safe_load(ARCH_FILE.read_text())


def scenario_dict(profile: str, **changes) -> dict:
    data = {
        "name": "tiny-calibrated",
        "model": TINY,
        "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 40},
                     "lengths": {"kind": "uniform", "input_min": 20, "input_max": 600,
                                 "output_min": 5, "output_max": 80}},
        "scheduler": {"max_model_len": 2048, "max_num_seqs": 64},
        "cost_model": {"kind": "calibrated", "profile": profile},
        "run": {"seed": 1, "num_requests": 150},
    }
    data.update(changes)
    return data


def run_cli(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def needs_torch():
    return pytest.importorskip("torch")


# --- end to end on the CPU --------------------------------------------------------------------------

def test_calibrate_fit_and_simulate_end_to_end(tmp_path):
    needs_torch()
    out = tmp_path / "profile"
    result = run_cli("calibrate", "run", "--model", str(ARCH_FILE), "--dtype", "fp32", "--device", "cpu",
                     "--threads", "1", "--grid", "quick", "--out", str(out), "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["complete"] and meta["device"] == "cpu" and meta["dtype"] == "fp32" and meta["threads"] == 1
    assert meta["torch_version"] and meta["model"]["hidden_size"] == 128 and meta["block_size"] == 16
    assert "gather" in meta["paged_decode_impl"]
    assert all(err <= 1e-4 for err in meta["checks_relative_error"].values())
    grid = meta["grid"]
    linear = pd.read_csv(out / "linear.csv")
    assert set(linear["op"]) == {"qkv", "attn_out", "gate_up", "down", "lm_head"}
    assert len(linear) == 5 * len(grid["num_tokens"]) and (linear["median_s"] > 0).all()
    assert (linear["p20_s"] <= linear["median_s"]).all() and (linear["median_s"] <= linear["p80_s"]).all()
    prefill = pd.read_csv(out / "prefill_attention.csv")
    assert prefill["chunk_tokens"].max() == 2048 and prefill["context_tokens"].max() == 2048
    assert pd.read_csv(out / "decode_attention.csv")["batch"].max() == 256

    fit = run_cli("calibrate", "fit", str(out), "--json", cwd=tmp_path)
    assert fit.returncode == 0, fit.stderr
    rows = {r["op"]: r for r in json.loads(fit.stdout)}
    assert {"linear:qkv", "prefill_attention", "decode_attention:paged", "decode_attention:contiguous",
            "elementwise:silu_mul", "sampling", "step_overhead"} <= set(rows)
    assert all(r["held_out"] > 0 and math.isfinite(r["median_ape_pct"]) for r in rows.values())

    scenario_file = tmp_path / "scenario.yaml"
    scenario_file.write_text(yaml.safe_dump(scenario_dict("profile")))  # relative to the scenario's folder
    sim = run_cli("sim.views.cli", "run", str(scenario_file), "--quiet", cwd=REPO)
    assert sim.returncode == 0, sim.stderr
    assert "finished" in sim.stdout


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path):
    needs_torch()
    out = tmp_path / "profile"
    shutil.copytree(PROFILE, out)
    meta = json.loads((out / "meta.json").read_text())
    meta["complete"] = False
    (out / "meta.json").write_text(json.dumps(meta))
    linear = pd.read_csv(out / "linear.csv")
    kept = linear[~((linear["op"] == "down") & (linear["num_tokens"] >= 256))]
    kept.to_csv(out / "linear.csv", index=False)
    with pytest.raises(ConfigError, match="incomplete"):
        load_profile(out)
    result = run_cli("calibrate", "run", "--model", str(ARCH_FILE), "--dtype", "fp32", "--out", str(out), "--quiet",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"{len(linear) - len(kept)} measured in this run" in result.stdout
    resumed = pd.read_csv(out / "linear.csv")
    assert len(resumed) == len(linear)
    # Points measured before the interruption are kept as they were.
    merged = kept.merge(resumed, on=["op", "num_tokens"], suffixes=("", "_after"))
    assert (merged["median_s"] == merged["median_s_after"]).all()
    assert load_profile(out).meta["complete"]


# --- interpolation and extrapolation --------------------------------------------------------------

def test_measured_grid_points_are_reproduced_exactly():
    profile = load_profile(PROFILE)
    for name, table in profile.tables.items():
        predict = Interpolator(table)
        for row in table.points.itertuples(index=False):
            x = [getattr(row, a) for a in table.axes]
            assert predict(*x) == pytest.approx(row.median_s, rel=1e-9), (name, x)


def test_between_grid_points_stays_between_their_times():
    profile = load_profile(PROFILE)
    for name in ("linear:gate_up", "linear:lm_head", "elementwise:rmsnorm"):
        table = profile.tables[name]
        predict = Interpolator(table)
        pts = table.points.sort_values("num_tokens")
        for (n0, t0), (n1, t1) in zip(pts[["num_tokens", "median_s"]].values, pts[["num_tokens", "median_s"]].values[1:]):
            mid = predict(math.sqrt(n0 * n1))
            assert min(t0, t1) * 0.9 <= mid <= max(t0, t1) * 1.1, (name, n0, n1)


def test_extrapolation_is_monotone_and_follows_the_roofline_shape():
    profile = load_profile(PROFILE)
    linear = profile.tables["linear:gate_up"]
    predict = Interpolator(linear)
    edge = int(linear.points["num_tokens"].max())
    times = [predict(n) for n in (edge, 2 * edge, 4 * edge, 16 * edge)]
    assert all(a < b for a, b in zip(times, times[1:]))
    for n in (2 * edge, 16 * edge):
        assert predict(n) / predict(edge) == pytest.approx(linear.shape(n) / linear.shape(edge), rel=1e-9)
    # Large GEMMs are compute-bound: far past the grid, time grows in proportion to tokens.
    assert predict(32 * edge) / predict(16 * edge) == pytest.approx(2.0, rel=0.05)

    decode = profile.tables["decode_attention:paged"]
    predict = Interpolator(decode)
    b_edge, x_edge = int(decode.points["batch"].max()), int(decode.points["context_tokens"].max())
    grow_batch = [predict(b, x_edge) for b in (b_edge, 2 * b_edge, 8 * b_edge)]
    grow_context = [predict(b_edge, x) for x in (x_edge, 2 * x_edge, 8 * x_edge)]
    assert all(a < b for a, b in zip(grow_batch, grow_batch[1:]))
    assert all(a < b for a, b in zip(grow_context, grow_context[1:]))
    assert predict(4 * b_edge, x_edge) / predict(b_edge, x_edge) == pytest.approx(
        decode.shape(4 * b_edge, x_edge) / decode.shape(b_edge, x_edge), rel=1e-9)


def _measured(profile, family: str, **key) -> float:
    df = profile.frames[family]
    for k, v in key.items():
        df = df[df[k] == v]
    assert len(df) == 1, key
    return float(df["median_s"].iloc[0])


def test_a_step_on_grid_points_is_the_sum_of_its_measured_kernels():
    """Known answer: 16 decodes at context 256 (all grid points) = layers x (5 GEMMs + attention + norms,
    rotary, activation, residuals) + LM head + sampling + engine loop, each read from the CSVs."""
    profile = load_profile(PROFILE)
    model = model_spec(build_scenario_set(scenario_dict(str(PROFILE))).base)
    cost = CalibratedCostModel(PROFILE, model, kv_layout="paged")
    plan = StepPlan(num_decode_seqs=16, decode_context_tokens=16 * 256, num_sampled_seqs=16)
    per_layer = sum(_measured(profile, "linear", op=op, num_tokens=16)
                    for op in ("qkv", "attn_out", "gate_up", "down"))
    per_layer += _measured(profile, "decode_attention", layout="paged", batch=16, context_tokens=256)
    per_layer += sum(k * _measured(profile, "elementwise", op=op, num_tokens=16)
                     for op, k in (("rmsnorm", 2), ("rotary", 1), ("silu_mul", 1), ("residual_add", 2)))
    expected = (model.num_layers * per_layer + _measured(profile, "linear", op="lm_head", num_tokens=16)
                + _measured(profile, "sampling", num_rows=16) + _measured(profile, "step_overhead", num_seqs=16))
    assert cost.step_time(plan) == pytest.approx(expected, rel=1e-9)
    contiguous = CalibratedCostModel(PROFILE, model, kv_layout="contiguous")
    delta = (_measured(profile, "decode_attention", layout="paged", batch=16, context_tokens=256)
             - _measured(profile, "decode_attention", layout="contiguous", batch=16, context_tokens=256))
    assert cost.step_time(plan) - contiguous.step_time(plan) == pytest.approx(model.num_layers * delta, rel=1e-9)


def test_more_work_never_costs_less():
    model = model_spec(build_scenario_set(scenario_dict(str(PROFILE))).base)
    cost = CalibratedCostModel(PROFILE, model)
    prefill = [cost.step_time(StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[c], prefill_context_tokens=[0],
                                       num_sampled_seqs=1)) for c in (64, 512, 2048, 8192)]
    assert all(a < b for a, b in zip(prefill, prefill[1:]))
    assert cost.step_time(StepPlan()) > 0  # an empty step still runs the engine loop


def test_tensor_parallel_all_reduce_comes_from_the_scenario_gpu(tmp_path):
    """A TP-2 profile (per-GPU shard shapes) priced on two GPUs: the all-reduce is the roofline's."""
    model = model_spec(build_scenario_set(scenario_dict(str(PROFILE))).base)
    profile = tmp_path / "tp2"
    shutil.copytree(PROFILE, profile)
    meta = json.loads((profile / "meta.json").read_text())
    meta["shard"], meta["tensor_parallel"] = shard_shapes(model, 2), 2
    (profile / "meta.json").write_text(json.dumps(meta))
    linear = pd.read_csv(profile / "linear.csv")
    for op, (in_f, out_f) in meta["shard"]["linear"].items():
        linear.loc[linear["op"] == op, ["in_features", "out_features"]] = [in_f, out_f]
    linear.to_csv(profile / "linear.csv", index=False)
    plan = StepPlan(num_decode_seqs=16, decode_context_tokens=16 * 256, num_sampled_seqs=16)
    slow, fast = get_gpu("l4"), get_gpu("h100-sxm")
    t_slow = CalibratedCostModel(profile, model, tensor_parallel=2, gpu=slow).step_time(plan)
    t_fast = CalibratedCostModel(profile, model, tensor_parallel=2, gpu=fast).step_time(plan)
    def allreduce(gpu):
        ring = 2 * 0.5 * 16 * model.hidden_size * 2 / (gpu.interconnect_bytes_per_s * gpu.interconnect_efficiency)
        return model.num_layers * 2 * (gpu.allreduce_latency_s + ring)
    assert t_slow - t_fast == pytest.approx(allreduce(slow) - allreduce(fast), rel=1e-6)


# --- scenarios -------------------------------------------------------------------------------------

def test_calibrated_scenario_simulates_deterministically(tmp_path):
    path = tmp_path / "s.yaml"
    shutil.copytree(PROFILE, tmp_path / "prof")
    data = scenario_dict("prof")
    data["variants"] = {"paged": {}, "contiguous": {"kv_cache": {"layout": "contiguous"}},
                        "speculative": {"speculation": {"draft_cost_ratio": 0.2, "num_speculative_tokens": 3}},
                        "chunked": {"scheduler": {"chunked_prefill": True, "max_num_batched_tokens": 256}}}
    path.write_text(yaml.safe_dump(data))
    variants = load_scenario_set(path).variants
    for name, scenario in variants.items():
        assert "CalibratedCostModel(tiny-llama x1" in repr(make_cost_model(scenario))
        first, second = simulate(scenario), simulate(scenario)
        assert (first.requests["status"] == "finished").all(), name
        pd.testing.assert_frame_equal(first.requests, second.requests)
        assert first.summary["ttft_s_p50"] > 0
    assert "SpeculativeCostModel" in repr(make_cost_model(variants["speculative"]))


def test_a_scenario_can_name_a_shipped_profile(tmp_path, monkeypatch):
    import sim.cost.calibrated as calibrated
    shipped = tmp_path / "profiles"
    shutil.copytree(PROFILE, shipped / "cpu-test" / "tiny-llama" / "tp1")
    monkeypatch.setattr(calibrated, "PROFILES_DIR", shipped)
    data = scenario_dict(None)
    data["cost_model"] = {"kind": "calibrated", "profile_device": "cpu-test"}
    scenario = build_scenario_set(data).base
    assert resolve(scenario).profile_dir == shipped / "cpu-test" / "tiny-llama" / "tp1"
    assert simulate(scenario).summary["throughput_rps"] > 0
    data["cost_model"] = {"kind": "calibrated"}  # defaults to hardware.gpu: nothing shipped for h100-sxm
    with pytest.raises(ConfigError, match=r"no shipped profile for h100-sxm/tiny-llama/tp1.*cpu-test/tiny-llama/tp1"):
        build_scenario_set(data)


def _profile_copy(tmp_path: Path, name: str = "prof") -> Path:
    dst = tmp_path / name
    shutil.copytree(PROFILE, dst)
    return dst


BAD_PROFILE_CASES = [
    ("missing-folder", lambda d: "nowhere", [], ["cost_model.profile:", "'nowhere'", "not a folder"]),
    ("no-meta", lambda d: (d / "meta.json").unlink() or "prof", [], ["cost_model.profile:", "no meta.json"]),
    ("missing-csv", lambda d: (d / "decode_attention.csv").unlink() or "prof", [],
     ["cost_model.profile:", "lacks decode_attention.csv"]),
    ("bad-csv", lambda d: (d / "linear.csv").write_text("op,num_tokens\nqkv,1\n") and "prof", [],
     ["cost_model.profile:", "linear.csv", "lacks columns", "median_s"]),
    ("other-model", lambda d: "prof", ["--set", "model=llama-3.1-8b"],
     ["cost_model.profile:", "tiny-llama", "llama-3.1-8b", "num_heads"]),
    ("other-tp", lambda d: "prof", ["--set", "hardware.tensor_parallel=2"],
     ["cost_model.profile:", "tensor_parallel 2"]),
    ("not-shipped", lambda d: None, [], ["cost_model:", "no shipped profile", "h100-sxm/tiny-llama/tp1"]),
]


@pytest.mark.parametrize("make, extra, needles", [c[1:] for c in BAD_PROFILE_CASES],
                         ids=[c[0] for c in BAD_PROFILE_CASES])
def test_bad_profiles_give_one_line_through_the_cli(tmp_path, make, extra, needles):
    profile = make(_profile_copy(tmp_path))
    data = scenario_dict(profile)
    if profile is None:
        data["cost_model"] = {"kind": "calibrated"}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    line = one_error_line(run_cli("sim.views.cli", "validate", str(path), *extra, cwd=tmp_path))
    for needle in needles:
        assert needle in line, (needle, line)


CALIBRATE_BAD_ARGS = [
    ("cuda-without-cuda", ["--device", "cuda"], ["--device:", "'cuda'", "allowed here: cpu"]),
    ("bad-dtype", ["--dtype", "int3"], ["--dtype:", "'int3'", "allowed: bf16, fp16, fp32"]),
    ("bad-grid", ["--grid", "huge"], ["--grid:", "'huge'", "quick, full"]),
    ("bad-tp", ["--tp", "3"], ["--tp:", "3", "allowed: 1, 2, 4"]),
    ("zero-threads", ["--threads", "0"], ["--threads:", "0", ">= 1"]),
    ("unknown-model", ["--model", "gpt-17"], ["--model:", "'gpt-17'", "allowed:", "llama-3.1-8b"]),
    ("missing-model-file", ["--model", "nowhere.yaml"], ["--model:", "'nowhere.yaml'", "not found"]),
]


@pytest.mark.parametrize("args, needles", [c[1:] for c in CALIBRATE_BAD_ARGS], ids=[c[0] for c in CALIBRATE_BAD_ARGS])
def test_calibrate_run_bad_options_give_one_line(tmp_path, args, needles):
    torch = needs_torch()
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    base = {"--model": str(ARCH_FILE), "--out": str(tmp_path / "p")}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    line = one_error_line(run_cli("calibrate", "run", *[x for kv in base.items() for x in kv], cwd=tmp_path))
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "p" / "linear.csv").exists()


def test_inline_architecture_file_errors_name_the_field(tmp_path):
    bad = tmp_path / "arch.yaml"
    bad.write_text(yaml.safe_dump({**TINY, "hidden_size": -4}))
    line = one_error_line(run_cli("calibrate", "run", "--model", str(bad), "--out", str(tmp_path / "p"), cwd=tmp_path))
    assert "hidden_size" in line and "-4" in line


def test_calibrate_fit_on_a_missing_profile_gives_one_line(tmp_path):
    line = one_error_line(run_cli("calibrate", "fit", str(tmp_path / "none"), cwd=tmp_path))
    assert "PROFILE:" in line and "not a folder" in line


def test_fit_reports_held_out_errors_per_op():
    from calibrate.fit import fit_report, held_out_errors
    profile = load_profile(PROFILE)
    report = fit_report(profile)
    assert set(report["op"]) == set(profile.tables)
    assert (report["held_out"] > 0).all()
    # Held-out points are predicted, not looked up: an op whose held-out points were all off by 2x shows it.
    table = profile.tables["linear:qkv"]
    doubled = table.points.copy()
    values = sorted(doubled["num_tokens"].unique())
    held = [v for i, v in enumerate(values) if 0 < i < len(values) - 1 and i % 3 == 1]  # what fit holds out
    doubled.loc[doubled["num_tokens"].isin(held), "median_s"] *= 2
    from sim.cost.calibrated import OpTable
    errors = held_out_errors(OpTable(table.name, table.axes, doubled, table.shape))
    assert min(errors) > 0.3


def test_sim_imports_and_simulates_without_torch(tmp_path):
    code = ("import sys; sys.modules['torch'] = None; sys.modules['triton'] = None\n"
            "import yaml\n"
            "from sim.config.files import build_scenario_set\n"
            "from sim.run import simulate\n"
            f"data = yaml.safe_load({yaml.safe_dump(scenario_dict(str(PROFILE)))!r})\n"
            "r = simulate(build_scenario_set(data).base)\n"
            "assert r.summary['throughput_rps'] > 0\n"
            "assert 'torch' not in {m.split('.')[0] for m in sys.modules if sys.modules[m] is not None}\n"
            "print('ok')\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
