"""Sweeps: grids, rate setting, backends giving the same rows, resuming without losing or redoing points."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

import sim.tools.sweep as sweep_mod
from sim.config.files import validate_scenario
from sim.config.schema import scenario_key_problem
from sim.errors import ConfigError
from sim.tools.sweep import (
    GridAxis,
    arrival_rate,
    grid_points,
    journal_line,
    parse_grid,
    plan_sweep,
    run_point,
    run_tasks,
    set_rate,
)
from sim.views.cli import main
from helpers import small_scenario

REPO = Path(__file__).resolve().parents[2]

SMALL = small_scenario({'workload': {'lengths': {'kind': 'uniform',
                                                 'input_min': 32,
                                                 'input_max': 256,
                                                 'output_min': 8,
                                                 'output_max': 64}},
                        'run': {'num_requests': 60},
                        'variants': {'paged': {},
                                     'contiguous': {'kv_cache': {'layout': 'contiguous', 'reserve': 'max_len'}}}})


def _write(tmp_path: Path, raw: dict = SMALL) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _run_cli(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
        raise SystemExit(0)
    return exit_info.value.code


def test_parse_grid_types_values_and_keeps_order():
    axes = parse_grid(["hardware.gpu=h100-sxm,a100-80gb", "rate=2.5,10", "kv_cache.enable_prefix_caching=true,false"])
    assert axes == [GridAxis("hardware.gpu", ("h100-sxm", "a100-80gb")), GridAxis("rate", (2.5, 10)),
                    GridAxis("kv_cache.enable_prefix_caching", (True, False))]
    points = grid_points(axes)
    assert len(points) == 8
    assert points[0] == {"hardware.gpu": "h100-sxm", "rate": 2.5, "kv_cache.enable_prefix_caching": True}
    assert points[-1] == {"hardware.gpu": "a100-80gb", "rate": 10, "kv_cache.enable_prefix_caching": False}


@pytest.mark.parametrize("spec, needle", [
    ("hardware.gpu", "is not of the form key=v1,v2"),
    ("=1,2", "is not of the form key=v1,v2"),
    ("rate=1,,2", "has an empty value"),
    ("rate=0,5", "must be positive numbers"),
    ("rate=fast", "must be positive numbers"),
])
def test_parse_grid_rejects_bad_specs(spec, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_grid([spec])


def test_parse_grid_rejects_a_key_given_twice():
    with pytest.raises(ConfigError, match="given twice"):
        parse_grid(["rate=1", "rate=2"])


@pytest.mark.parametrize("arrival, key", [
    ({"kind": "poisson", "rate_per_s": 3}, "rate_per_s"),
    ({"kind": "gamma", "rate_per_s": 3, "cv": 2}, "rate_per_s"),
    ({"kind": "constant", "rate_per_s": 3}, "rate_per_s"),
    ({"kind": "diurnal", "mean_rate_per_s": 3, "period_s": 60, "amplitude": 0.5}, "mean_rate_per_s"),
])
def test_set_rate_sets_the_mean_rate_of_each_arrival_kind(arrival, key):
    raw = {**SMALL, "workload": {**SMALL["workload"], "arrival": dict(arrival)}}
    set_rate(raw, 12.5)
    assert raw["workload"]["arrival"][key] == 12.5
    assert arrival_rate(raw) == 12.5
    validate_scenario({k: v for k, v in raw.items() if k != "variants"})


def test_set_rate_scales_a_schedule_keeping_its_shape():
    raw = {"workload": {"arrival": {"kind": "schedule", "steps": [
        {"duration_s": 10, "rate_per_s": 2}, {"duration_s": 30, "rate_per_s": 6}]}}}
    assert arrival_rate(raw) == pytest.approx(5.0)
    set_rate(raw, 10.0)
    steps = raw["workload"]["arrival"]["steps"]
    assert [s["rate_per_s"] for s in steps] == pytest.approx([4.0, 12.0])
    assert arrival_rate(raw) == pytest.approx(10.0)


def test_set_rate_on_a_trace_rescales_gaps_instead_of_the_time_scale():
    raw = {"workload": {"arrival": {"kind": "trace", "path": "x.csv", "time_scale": 0.5}}}
    set_rate(raw, 7.0)
    assert raw["workload"]["arrival"] == {"kind": "trace", "path": "x.csv", "target_rate_per_s": 7.0}


def test_set_rate_on_closed_loop_is_a_clear_error():
    raw = {"workload": {"arrival": {"kind": "closed_loop", "num_users": 4, "think_time_s": 1.0}}}
    with pytest.raises(ConfigError, match="closed_loop.*no arrival rate"):
        set_rate(raw, 7.0)


def test_run_point_matches_a_direct_simulation_and_prices_the_deployment():
    from sim.run import simulate
    task = plan_sweep(SMALL, [GridAxis("rate", (8,)), GridAxis("hardware.tensor_parallel", (2,))],
                      Path("/nonexistent/out.csv"), ["contiguous"]).tasks[0]
    row = run_point(task)
    raw = {k: v for k, v in SMALL.items() if k != "variants"}
    raw = {**raw, "name": "contiguous", "kv_cache": {"layout": "contiguous", "reserve": "max_len"},
           "hardware": {"gpu": "h100-sxm", "tensor_parallel": 2}}
    raw["workload"] = {**raw["workload"], "arrival": {"kind": "poisson", "rate_per_s": 8}}
    direct = simulate(validate_scenario(raw)).summary
    assert row["error"] == ""
    assert row["variant"] == "contiguous" and row["rate"] == 8 and row["hardware.tensor_parallel"] == 2
    for key in ("throughput_rps", "ttft_s_p99", "e2e_s_mean", "num_finished"):
        assert row[key] == direct[key]
    assert row["num_gpus"] == 2
    assert row["cost_per_hour"] == pytest.approx(2 * 12.29)
    assert row["cost_model"] == "roofline"  # which cost model priced the point


def test_a_point_that_cannot_run_records_its_reason_and_the_sweep_goes_on(tmp_path):
    path = _write(tmp_path)
    out = tmp_path / "sweep.csv"
    code = _run_cli("sweep", str(path), "--grid", "model=llama-3.1-8b,llama-3.1-70b", "--grid", "hardware.gpu=l4",
                    "--variant", "paged", "--backend", "serial", "--out", str(out), "-q")
    assert code == 0
    df = pd.read_csv(out, keep_default_na=False)
    assert len(df) == 2
    fine, too_big = df.iloc[0], df.iloc[1]
    assert fine["model"] == "llama-3.1-8b" and fine["error"] == "" and float(fine["num_finished"]) == 60
    assert too_big["model"] == "llama-3.1-70b" and "hardware" in too_big["error"]


def test_a_grid_may_give_what_the_file_leaves_out(tmp_path, capsys):
    """`--set engine.name=vllm` alone names no version, which the grid gives: the sweep runs, and a point whose
    version is no release gets its reason in its row. Where no point completes the file, the first point's error
    is the one line (it was the file's: "engine.version: missing")."""
    raw = {key: value for key, value in SMALL.items() if key != "variants"}
    path = _write(tmp_path, raw)
    out = tmp_path / "sweep.csv"
    code = _run_cli("sweep", str(path), "--set", "engine.name=vllm", "--grid", "engine.version=0.11.0,0.9.7",
                    "--backend", "serial", "--out", str(out), "-q")
    assert code == 0
    df = pd.read_csv(out, keep_default_na=False)
    assert list(df["engine.version"].astype(str)) == ["0.11.0", "0.9.7"]
    assert df.loc[0, "error"] == "" and float(df.loc[0, "num_finished"]) == 60
    assert "'0.9.7' is not a vllm release" in df.loc[1, "error"]
    capsys.readouterr()
    code = _run_cli("sweep", str(path), "--set", "engine.name=vllm", "--grid", "engine.version=0.9.7,0.9.8",
                    "--backend", "serial", "--out", str(tmp_path / "none.csv"), "-q")
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: engine.version: '0.9.7' is not a vllm release") and "\n" not in err
    assert not (tmp_path / "none.csv").exists()


def test_a_sweep_of_one_variant_needs_only_it_to_take_the_set(tmp_path, capsys):
    """An SGLang flag for the SGLang variant, the base naming vLLM: `sweep --variant sglang` runs it (as `run
    --variant` does); the whole file, or the vLLM variant alone, refuses it in one line naming where."""
    raw = {**SMALL, "engine": {"name": "vllm", "version": "0.11.0"},
           "variants": {"vllm": {}, "sglang": {"engine": {"name": "sglang", "version": "0.5.3.post3"}}}}
    path = _write(tmp_path, raw)
    common = ("--set", "engine.max_running_requests=4", "--grid", "rate=200", "--backend", "serial", "-q")
    assert _run_cli("sweep", str(path), "--variant", "sglang", "--out", str(tmp_path / "s.csv"), *common) == 0
    row = pd.read_csv(tmp_path / "s.csv", keep_default_na=False).iloc[0]
    assert row["variant"] == "sglang" and row["error"] == "" and float(row["num_finished"]) == 60
    assert _run_cli("sweep", str(path), "--variant", "sglang", "--out", str(tmp_path / "free.csv"), *common[2:]) == 0
    free = pd.read_csv(tmp_path / "free.csv", keep_default_na=False).iloc[0]
    assert float(row["mean_batch_size"]) <= 4 < float(free["mean_batch_size"])  # the flag reached the point
    capsys.readouterr()
    for chosen in (("--variant", "vllm"), ()):
        assert _run_cli("sweep", str(path), *chosen, "--out", str(tmp_path / "v.csv"), *common) == 2
        err = capsys.readouterr().err.strip()
        where = "variants.vllm." if chosen else ""
        assert err.startswith(f"error: {where}engine.max_running_requests: not a flag of the vllm preset"), err
    assert not (tmp_path / "v.csv").exists()
    # the grid may still give what the file leaves out (engine.version) with one variant swept
    path = _write(tmp_path, {**SMALL, "engine": {"name": "vllm"}})
    assert _run_cli("sweep", str(path), "--variant", "paged", "--grid", "engine.version=0.11.0", "--backend",
                    "serial", "-q", "--out", str(tmp_path / "g.csv")) == 0
    assert pd.read_csv(tmp_path / "g.csv", keep_default_na=False).loc[0, "error"] == ""


def _sweep(tmp_path: Path, out: Path, backend: str, *extra: str) -> pd.DataFrame:
    path = _write(tmp_path)
    code = _run_cli("sweep", str(path), "--grid", "rate=4,16", "--grid", "scheduler.max_num_seqs=8,64",
                    "--backend", backend, "--workers", "2", "--out", str(out), "-q", *extra)
    assert code == 0
    return pd.read_parquet(out) if out.suffix == ".parquet" else pd.read_csv(out)


def test_process_pool_gives_the_same_rows_as_serial(tmp_path):
    serial = _sweep(tmp_path, tmp_path / "serial.parquet", "serial")
    pooled = _sweep(tmp_path, tmp_path / "pool.parquet", "process")
    assert len(serial) == 2 * 2 * 2  # variants × rates × max_num_seqs
    # Grid order, whatever order the workers finished in.
    assert list(serial["rate"]) == [4, 4, 16, 16] * 2
    pd.testing.assert_frame_equal(serial, pooled)


def test_ray_backend_gives_the_same_rows_as_the_local_one(tmp_path):
    pytest.importorskip("ray")
    local = _sweep(tmp_path, tmp_path / "local.csv", "serial")
    # A real local Ray instance on loopback, in its own process so its workers and state end with it.
    ray_out = tmp_path / "ray.csv"
    code = subprocess.run(
        [sys.executable, "-m", "sim.views.cli", "sweep", str(tmp_path / "small.yaml"), "--grid", "rate=4,16",
         "--grid", "scheduler.max_num_seqs=8,64", "--backend", "ray", "--workers", "2", "--out", str(ray_out), "-q"],
        env={**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"},
        capture_output=True, text=True, timeout=300)
    assert code.returncode == 0, code.stderr[-2000:]
    pd.testing.assert_frame_equal(local, pd.read_csv(ray_out))


def test_a_finished_sweep_reruns_nothing(tmp_path, monkeypatch):
    out = tmp_path / "sweep.csv"
    first = _sweep(tmp_path, out, "serial")
    calls = []
    monkeypatch.setattr(sweep_mod, "run_point", lambda task: calls.append(task) or {})
    second = _sweep(tmp_path, out, "serial")
    assert calls == []
    pd.testing.assert_frame_equal(first, second)


def test_an_interrupted_sweep_keeps_its_finished_points_and_runs_only_the_rest(tmp_path, monkeypatch):
    full = _sweep(tmp_path, tmp_path / "full.csv", "serial")
    out = tmp_path / "sweep.csv"
    # An interrupt after three points: they are in the journal, and the fourth line was torn mid-write.
    journal = out.with_name(out.name + ".journal.jsonl")
    rows = pd.read_csv(tmp_path / "full.csv", dtype={"point_id": str, "scenario_hash": str}).to_dict("records")
    journal.write_bytes(b"".join(journal_line(r) for r in rows[:3]) + journal_line(rows[3])[:40])
    ran = []
    real = sweep_mod.run_point
    monkeypatch.setattr(sweep_mod, "run_point", lambda task: ran.append(task.point_id) or real(task))
    resumed = _sweep(tmp_path, out, "serial")
    assert sorted(ran) == sorted(r["point_id"] for r in rows[3:])
    assert not journal.exists()
    pd.testing.assert_frame_equal(full, resumed)


def test_each_finished_point_is_in_the_journal_before_the_next_starts(tmp_path):
    plan = plan_sweep(SMALL, parse_grid(["rate=4,16"]), tmp_path / "s.parquet", ["paged"])
    journal = plan.output.journal
    seen = []
    for task, row in run_tasks(plan.todo, run_point, backend="serial"):
        plan.output.append(row)
        seen.append(len(journal.read_text().splitlines()))
    assert seen == [1, 2]
    frame = plan.output.finish(plan.tasks)
    assert len(frame) == 2 and not journal.exists()


def test_an_output_of_another_scenario_is_refused(tmp_path, capsys):
    out = tmp_path / "sweep.csv"
    _sweep(tmp_path, out, "serial")
    changed = {**SMALL, "run": {"seed": 1, "num_requests": 60}}
    path = _write(tmp_path, changed)
    code = _run_cli("sweep", str(path), "--grid", "rate=4", "--out", str(out), "--backend", "serial", "-q")
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--out" in err and "different scenario" in err


@pytest.mark.parametrize("args, needle", [
    (["--grid", "rate"], "--grid: 'rate' is not of the form key=v1,v2"),
    (["--grid", "rate=2", "--backend", "mpi"], "--backend: 'mpi' is not a backend; allowed: process, ray, serial"),
    (["--grid", "rate=2", "--variant", "nope"], "--variant: 'nope' is not in"),
    (["--grid", "rate=2", "--out", "x.xlsx"], "must end in .parquet or .csv"),
    (["--grid", "rate=2", "--workers", "0"], "--workers: 0 must be >= 1"),
    # A key no point can have: a typo, refused before any point runs (not a table of error rows).
    (["--grid", "scheduler.max_num_sqs=8,16"], "--grid: scheduler.max_num_sqs: unknown key; allowed: batching, "
     "max_num_seqs"),
    (["--grid", "nope=1"], "--grid: nope: unknown key; allowed: name, description, model"),
])
def test_sweep_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, args, needle):
    path = _write(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = _run_cli("sweep", str(path), *args, "-q")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert needle in err and err.count("\n") == 0 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written


@pytest.mark.parametrize("key", ["scheduler.max_num_seqs", "engine.max_num_seqs", "engine.anything",
                                 "model.hf_config", "workload.arrival.cv", "hardware.gpu.hbm_bytes",
                                 "cost_model.overhead.per_step_s", "kv_cache.preemption"])
def test_a_grid_key_the_schema_has_or_may_have_is_not_refused(key):
    # engine flags are free-form; model {hf_config: ...} is read before validation; arrival and cost model are
    # unions of kinds (a key of any kind may be meant); kv_cache.preemption is a deprecated key, still a field
    assert scenario_key_problem(key) is None


def test_set_rate_on_an_invalid_arrival_names_the_field_as_the_file_would():
    raw = {"workload": {"arrival": {"kind": "gamma", "rate_per_s": 3}}}
    with pytest.raises(ConfigError, match=r"^workload\.arrival\.cv: missing for kind 'gamma'"):
        set_rate(raw, 7.0)


def _pid(_task) -> int:
    return os.getpid()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux-only")
def test_a_process_pool_has_a_worker_per_cpu_this_process_may_use(monkeypatch):
    # Pinned to one CPU (taskset -c 1 on a bigger machine): the tasks run here, in turn, not in a pool of workers
    # sharing that CPU.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {1})
    assert sweep_mod.usable_cpus() == 1
    pids = {pid for _, pid in sweep_mod.run_tasks([1, 2, 3], _pid, backend="process")}
    assert pids == {os.getpid()}


def test_a_sweep_over_gpus_prices_every_point_by_the_tier_all_of_them_can_have():
    # as `compare` prices a file's variants (sim/config/cost_choice.py shared_choice): the H100 alone has its
    # whole-step profile, the A100 kernel tables only, so over both the H100 is priced by its tables too
    raw = {k: v for k, v in SMALL.items() if k != "cost_model"}
    out = Path("/nonexistent/out.csv")
    alone = run_point(plan_sweep(raw, [GridAxis("rate", (4, 8))], out, ["paged"]).tasks[0])
    assert alone["error"] == "" and alone["cost_model"].startswith("calibrated")
    tasks = plan_sweep(raw, [GridAxis("hardware.gpu", ("h100-sxm", "a100-80gb"))], out, ["paged", "contiguous"]).tasks
    assert {t.cost_model_choice for t in tasks} == {"measured: the tier every scenario compared with it can have"}
    rows = [run_point(t) for t in tasks]
    assert all(row["error"] == "" and row["cost_model"].startswith("measured") for row in rows)
    h100 = validate_scenario(sweep_mod.point_raw(tasks[0]))
    assert h100.cost_model_choice.endswith("(the tier every scenario compared with it can have)")
    # a point that cannot run decides nothing: the 70B does not fit one H100, and the 8B keeps its profile
    models = plan_sweep(raw, [GridAxis("model", ("llama-3.1-8b", "llama-3.1-70b"))], out, ["paged"]).tasks
    assert {t.cost_model_choice for t in models} == {None}
    assert run_point(models[0])["cost_model"].startswith("calibrated") and "hardware" in run_point(models[1])["error"]
    # a point that names its own cost model keeps it
    axes = [GridAxis("hardware.gpu", ("h100-sxm", "a100-80gb")), GridAxis("cost_model.kind", ("roofline",))]
    named = plan_sweep(raw, axes, out, ["paged"]).tasks
    assert {t.cost_model_choice for t in named} == {None}
    assert {run_point(t)["cost_model"] for t in named} == {"roofline"}
