"""The fidelity harness's comparison and report (calibrate.fidelity), on a committed recorded vLLM run.

The fixture (tests/fixtures/fidelity, see its README.md) is a real recording: vLLM CPU serving a
random-initialised Llama, per-request timings for 3 repeats of one load, a calibration run with its
per-step records, and the kernel profile measured on the same machine. Nothing here needs vLLM or
torch, and no timing is asserted: only that the comparison computes what it says it computes.
"""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import run_fidelity_cli

from calibrate.fidelity.__main__ import main
from calibrate.fidelity.compare import (
    METRICS,
    error_table,
    load_run,
    relative_error,
    request_metrics,
    scenario_dict,
)
from calibrate.fidelity.replay_vllm import EngineSettings, LlamaShape
from sim.errors import ConfigError

FIXTURE = Path(__file__).parents[1] / "fixtures" / "fidelity"
RUN = FIXTURE / "medium"
CALIB = FIXTURE / "calib"
PROFILE = FIXTURE / "profile-kernels"




def test_metrics_on_a_hand_made_run():
    frame = pd.DataFrame({
        "arrival_s": [0.0, 1.0, 2.0],
        "first_token_s": [0.5, 1.5, 4.0],
        "finish_s": [2.5, 3.5, 5.0],
        "output_tokens": [5, 3, 1],
    })
    m = request_metrics(frame)
    assert m["makespan_s"] == 5.0
    assert m["throughput_tok_s"] == pytest.approx(9 / 5.0)
    assert m["ttft_mean_s"] == pytest.approx((0.5 + 0.5 + 2.0) / 3)
    assert m["ttft_p90_s"] == pytest.approx(0.5 + 0.8 * (2.0 - 0.5))  # linear between the 2nd and 3rd
    # TPOT over requests with >1 token: (2.5-0.5)/4 and (3.5-1.5)/2.
    assert m["tpot_mean_s"] == pytest.approx((0.5 + 1.0) / 2)
    assert m["e2e_mean_s"] == pytest.approx((2.5 + 2.5 + 3.0) / 3)
    assert m["e2e_p90_s"] == pytest.approx(2.5 + 0.8 * 0.5)


def test_error_table_takes_the_median_of_repeats_and_the_signed_relative_error():
    repeats = [{k: v for k, _, _ in METRICS for v in [x]} for x in (1.0, 2.0, 10.0)]
    simulated = {k: 3.0 for k, _, _ in METRICS}
    table = error_table(repeats, simulated)
    assert list(table["metric"]) == [k for k, _, _ in METRICS]
    assert (table["real"] == 2.0).all() and (table["real_min"] == 1.0).all() and (table["real_max"] == 10.0).all()
    assert table["real_spread"].tolist() == pytest.approx([4.5] * len(METRICS))
    assert table["error"].tolist() == pytest.approx([0.5] * len(METRICS))
    assert relative_error(0.9, 1.0) == pytest.approx(-0.1) and math.isnan(relative_error(1.0, 0.0))


def test_the_mirrored_scenario_has_the_recorded_settings():
    run = load_run(RUN)
    vllm = run.meta["vllm"]
    s = scenario_dict(run.meta, 100)
    assert s["kv_cache"]["capacity_tokens"] == vllm["num_kv_blocks"] * vllm["block_size"]
    assert s["kv_cache"]["block_size"] == vllm["block_size"] and not s["kv_cache"]["enable_prefix_caching"]
    assert s["scheduler"] == {"batching": "continuous", "max_num_seqs": vllm["max_num_seqs"],
                              "max_num_batched_tokens": vllm["max_num_batched_tokens"],
                              "chunked_prefill": vllm["chunked_prefill"], "max_model_len": run.meta["model"]["max_context"],
                              "preemption": {"mode": "recompute", "victim": "last_admitted"}}  # vLLM V1's
    assert {k: s["model"][k] for k in run.meta["model"]} == run.meta["model"]


def test_the_served_model_is_the_calibrated_architecture():
    arch = yaml.safe_load((Path(__file__).parents[2] / "calibrate" / "fidelity" / "model.yaml").read_text())
    shape = vars(LlamaShape())
    assert {k: arch[k] for k in shape} == shape
    assert EngineSettings().block_size % 32 == 0  # vLLM's CPU attention needs a multiple of 32


def test_compare_on_the_recorded_run_reports_every_metric(tmp_path, capsys):
    out = tmp_path / "report"
    code, captured = run_fidelity_cli(["compare", str(RUN), "--profile", str(PROFILE), "--out", str(out)], capsys)
    assert code == 0, captured.err
    md = (out / "fidelity.md").read_text()
    for _, label, _ in METRICS:
        assert f"| {label} |" in md and f"| {label} |" in captured.out
    table = pd.read_csv(out / "fidelity.csv")
    assert len(table) == len(METRICS) and (table["repeats"] == 3).all()
    # Real values: the median over repeats, recomputed here from the raw CSVs.
    frames = [pd.read_csv(d / "requests.csv") for d in sorted(RUN.glob("repeat-*"))]
    ttft_means = [float((f["first_token_s"] - f["arrival_s"]).mean()) for f in frames]
    row = table.set_index("metric").loc["ttft_mean_s"]
    assert row["real"] == pytest.approx(np.median(ttft_means))
    assert row["real_min"] == pytest.approx(min(ttft_means)) and row["real_max"] == pytest.approx(max(ttft_means))
    assert table["error"].to_numpy() == pytest.approx(
        ((table["simulated"] - table["real"]) / table["real"]).to_numpy())
    assert (table["simulated"] > 0).all()
    info = json.loads((out / "simulation.json").read_text())
    assert "CalibratedCostModel" in info["cost_model"]
    assert info["scenario"]["kv_cache"]["capacity_tokens"] == load_run(RUN).meta["vllm"]["num_kv_blocks"] * 32


def test_simulation_is_deterministic(tmp_path, capsys):
    tables = []
    for name in ("a", "b"):
        code, captured = run_fidelity_cli(["compare", str(RUN), "--profile", str(PROFILE), "--out", str(tmp_path / name)], capsys)
        assert code == 0, captured.err
        tables.append(pd.read_csv(tmp_path / name / "fidelity.csv"))
    pd.testing.assert_frame_equal(tables[0], tables[1])


def test_report_is_replaced_whole_or_not_at_all(tmp_path, capsys, monkeypatch):
    out = tmp_path / "report"
    args = ["compare", str(RUN), "--profile", str(PROFILE), "--out", str(out)]
    assert run_fidelity_cli(args, capsys)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    import calibrate.fidelity.compare as compare

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(compare, "report_markdown", broken)
    with pytest.raises(RuntimeError):
        main(args)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched by the failed run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no temporary folder left
    monkeypatch.undo()
    assert run_fidelity_cli(args, capsys)[0] == 0  # its own folder: replaced
    assert sorted(p.name for p in out.iterdir()) == [".servesim-output.json", "fidelity.csv", "fidelity.md",
                                                     "simulation.json"]
    (out / "stale.txt").write_text("a user's note")
    code, captured = run_fidelity_cli(args, capsys)
    assert code == 2 and "stale.txt" in captured.err  # a user's file in it: refused, kept
    assert (out / "stale.txt").read_text() == "a user's note"


def test_bad_run_dirs_are_one_line_errors_with_exit_2(tmp_path, capsys):
    missing = tmp_path / "nope"
    empty = tmp_path / "empty"
    empty.mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "meta.json").write_text((RUN / "repeat-1" / "meta.json").read_text())
    (broken / "requests.csv").write_text("request_id,arrival_s\n0,0.0\n")
    for bad, needle in ((missing, "is not a folder"), (empty, "has no requests.csv"), (broken, "lacks columns")):
        code, captured = run_fidelity_cli(["compare", str(bad), "--profile", str(PROFILE), "--out", str(tmp_path / "o")],
                                 capsys)
        assert code == 2
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: RUN_DIR:") and needle in lines[0]
        assert str(bad) in lines[0] and "Traceback" not in captured.err
    code, captured = run_fidelity_cli(["compare", str(RUN), "--profile", str(tmp_path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and captured.err.startswith("error: cost_model.profile:")
    code, captured = run_fidelity_cli(["compare"], capsys)  # a usage error: no traceback either
    assert code == 2 and captured.err.startswith("error: ") and "Traceback" not in captured.err


def test_repeats_of_different_requests_are_refused(tmp_path):
    for k in (1, 2):
        d = tmp_path / f"repeat-{k}"
        d.mkdir()
        (d / "meta.json").write_text((RUN / "repeat-1" / "meta.json").read_text())
        frame = pd.read_csv(RUN / "repeat-1" / "requests.csv")
        if k == 2:
            frame.loc[0, "prompt_tokens"] += 1
        frame.to_csv(d / "requests.csv", index=False)
    with pytest.raises(ConfigError, match="replays different requests"):
        load_run(tmp_path)


def test_fit_overhead_writes_a_loadable_profile_with_the_engine_overhead(tmp_path, capsys):
    from sim.core.step_plan import StepPlan
    from sim.cost.calibrated import CalibratedCostModel, load_profile
    from sim.model.specs import ModelSpec

    out = tmp_path / "profile-engine"
    code, captured = run_fidelity_cli(["fit-overhead", str(CALIB), "--profile", str(PROFILE), "--out", str(out)], capsys)
    assert code == 0, captured.err
    overhead = pd.read_csv(out / "step_overhead.csv")
    assert (overhead["median_s"] > 0).all() and overhead["num_seqs"].is_monotonic_increasing
    assert (overhead["p20_s"] <= overhead["median_s"]).all() and (overhead["median_s"] <= overhead["p80_s"]).all()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["step_overhead_source"]["kind"] == "vllm_engine_steps"
    # Everything but the overhead table is the kernel profile, byte for byte.
    for f in PROFILE.iterdir():
        if f.name not in ("step_overhead.csv", "meta.json"):
            assert (out / f.name).read_bytes() == f.read_bytes()
    load_profile(out)
    model = ModelSpec.model_validate(yaml.safe_load(
        (Path(__file__).parents[2] / "calibrate" / "fidelity" / "model.yaml").read_text()))
    seqs, median_s = int(overhead["num_seqs"].iloc[0]), float(overhead["median_s"].iloc[0])
    decode = StepPlan(num_decode_seqs=seqs, decode_context_tokens=100 * seqs, num_sampled_seqs=seqs)
    kernels = CalibratedCostModel(PROFILE, model, block_size=32)
    engine = CalibratedCostModel(out, model, block_size=32)
    # Same kernels; the loop overhead at a table point is the fitted median.
    assert engine.step_time(decode) - kernels.step_time(decode) == pytest.approx(median_s - kernels._overhead(seqs))
