"""The whole-step cost model (sim/cost/steps.py) and its commands (calibrate import-steps, check).

Known answers: a table generated from the additive decomposition is recovered and its mixed steps
(never in the table) predicted exactly. Held-out error on the shipped H100 tables. Tensor parallel
all-reduce only at tp > 1. Bad tables and options through the CLI: one line, exit 2, nothing written.
A scenario naming no profile finds the shipped H100 one and simulates, deterministically.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.config.deployment import resolve
from sim.config.files import build_scenario_set
from sim.core.step_plan import StepPlan
from sim.cost.calibrated import load_profile, shard_shapes
from sim.cost.steps import (
    STEPS_COLUMNS,
    Rates,
    StepFitWarning,
    StepPhysics,
    StepProfileCostModel,
    fit_steps,
    load_step_profile,
    plan_for_row,
    read_steps_table,
    row_plans,
)
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.run import make_cost_model, simulate

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "calibrate" / "profiles" / "h100-sxm" / "llama-3.1-8b" / "tp1" / "steps"
SHARED_GPU = Path("../shared/gpu")  # relative to the repository root, as the brief's tables are named
TINY_OPS = REPO / "tests" / "fixtures" / "calibrate" / "tiny_llama_cpu"
LLAMA = get_model("llama-3.1-8b")


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "calibrate", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- a synthetic table from the decomposition itself -----------------------------------------------------

RATES = Rates(flops_per_s=600e12, bytes_per_s=2.8e12)


# Power laws are linear in (log x, log ρ), so interpolation between knots is exact; past the measured
# range the model holds the edge value, and so do these (the clip).
def rho_tokens(n):
    return 1.4 * min(max(n, 1), 8192) ** -0.04


def rho_decode(b):
    return 0.85 * min(max(b, 1), 256) ** 0.02


def rho_prefill(c):
    return 0.6 * min(max(c, 128), 8192) ** 0.05


def synthetic_time(plan: StepPlan, physics: StepPhysics, with_prefill_ratio: bool) -> float:
    """The decomposition with known ratios (prefill attention at ρ_T unless with_prefill_ratio)."""
    n = plan.num_tokens
    t = rho_tokens(n) * sum(RATES.time(f, b) for f, b in physics.body(n) + physics.head(physics.head_rows(plan)))
    for c, x in zip(plan.prefill_chunk_tokens, plan.prefill_context_tokens):
        t += (rho_prefill(c) if with_prefill_ratio else rho_tokens(n)) * RATES.time(*physics.prefill_attention(c, x))
    if plan.num_decode_seqs:
        t += rho_decode(plan.num_decode_seqs) * RATES.time(*physics.decode_attention(
            plan.num_decode_seqs, plan.decode_context_tokens, plan.decode_query_tokens))
    return t


def synthetic_table(shapes, with_prefill_ratio: bool) -> pd.DataFrame:
    physics = StepPhysics(LLAMA, 1, 2)
    rows = []
    for kind, c, x, b, ctx in shapes:
        plan = plan_for_row(kind, c, x, b, ctx)
        rows.append({"kind": kind, "prefill_tokens": c, "prefill_context": x, "decode_batch": b,
                     "decode_context": ctx, "step_s": synthetic_time(plan, physics, with_prefill_ratio),
                     "p20_s": float("nan"), "p80_s": float("nan")})
    return pd.DataFrame(rows, columns=list(STEPS_COLUMNS))


PURE_DECODE = [("decode", 0, 0, b, ctx) for b in (1, 4, 16, 64, 256) for ctx in (512, 2048, 8192)]
PURE_PREFILL = [("prefill", c, 0, 0, 0) for c in (128, 512, 2048, 8192)]
PREFILL_WITH_CONTEXT = [("prefill", c, x, 0, 0) for c in (128, 512, 2048, 8192) for x in (0, 2048, 8192)]
MIXED = [("mixed", 256, 0, 32, 1024), ("mixed", 512, 4096, 8, 300), ("mixed", 1000, 0, 100, 5000),
         ("mixed", 64, 7000, 200, 2000)]


def test_known_ratios_are_recovered_from_pure_rows():
    table = synthetic_table(PURE_DECODE + PREFILL_WITH_CONTEXT, with_prefill_ratio=True)
    fit = fit_steps(table, LLAMA, 1, rates=RATES)
    for b in (1, 4, 16, 64, 256):
        assert fit.decode_ratio(b) == pytest.approx(rho_decode(b), rel=1e-9)
    for c in (128, 512, 2048, 8192):
        assert fit.prefill_ratio(c) == pytest.approx(rho_prefill(c), rel=1e-9)
    for n in (1, 4, 16, 64, 128, 256, 512, 2048, 8192):
        assert fit.token_ratio(n) == pytest.approx(rho_tokens(n), rel=1e-9)
    assert fit.notes == []


@pytest.mark.parametrize("with_prefill_ratio", [False, True], ids=["prefill-at-step-ratio", "prefill-context-rows"])
def test_mixed_steps_are_predicted_from_pure_rows(with_prefill_ratio):
    """The table holds no mixed row; mixed steps (chunks after context beside decodes) come out exact."""
    pure = PURE_DECODE + (PREFILL_WITH_CONTEXT if with_prefill_ratio else PURE_PREFILL)
    fit = fit_steps(synthetic_table(pure, with_prefill_ratio), LLAMA, 1, rates=RATES)
    physics = StepPhysics(LLAMA, 1, 2)
    for shape in MIXED:
        plan = plan_for_row(*shape)
        assert fit.time_s(plan) == pytest.approx(synthetic_time(plan, physics, with_prefill_ratio), rel=1e-9), shape
    # A step the scheduler builds: two chunks, a speculative verification, sampling fewer rows.
    plan = StepPlan(prefill_request_ids=[1, 2], prefill_chunk_tokens=[300, 40], prefill_context_tokens=[0, 900],
                    num_decode_seqs=24, decode_context_tokens=24 * 700, decode_query_tokens=3, num_sampled_seqs=25)
    assert fit.time_s(plan) == pytest.approx(synthetic_time(plan, physics, with_prefill_ratio), rel=1e-9)


def test_a_row_alone_at_its_token_count_is_reproduced_exactly_with_the_tables_own_rates():
    table = synthetic_table(PURE_DECODE + PURE_PREFILL, with_prefill_ratio=False)
    fit = fit_steps(table, LLAMA, 1)  # rates from the table itself
    for plan, t in zip(row_plans(table), table["step_s"]):
        assert fit.time_s(plan) == pytest.approx(t, rel=1e-9)


def test_rows_the_model_cannot_explain_are_refused_with_the_numbers():
    table = synthetic_table(PURE_DECODE + PURE_PREFILL, with_prefill_ratio=False)
    # A long-context decode that took less than its neighbours: the attention slope from the others
    # prices more attention than the whole measured step.
    bad = table.copy()
    bad.loc[(bad.decode_batch == 256) & (bad.decode_context == 8192), "step_s"] = 1e-4
    with pytest.raises(ConfigError, match=r"cannot explain the row decode 256x8192: .* ms more than the measured"):
        fit_steps(bad, LLAMA, 1)
    # Time that falls with context: a note and a warning, not a silent clamp.
    flat = table.copy()
    sel = flat.decode_batch == 4
    flat.loc[sel, "step_s"] = flat.loc[sel, "step_s"].to_numpy()[::-1]
    with pytest.warns(StepFitWarning) as caught:
        fit = fit_steps(flat, LLAMA, 1)
    assert any("decode batch 4: step time does not grow with context" in str(w.message) for w in caught)
    assert any("decode batch 4" in n for n in fit.notes)
    # Its rows then share one token-part ratio they disagree on: said too, with the size.
    assert any(n.startswith("rows at 4 tokens imply token-part ratios") for n in fit.notes)


def test_a_table_needs_both_prefill_and_decode_rows():
    with pytest.raises(ConfigError, match="only decode rows"):
        fit_steps(synthetic_table(PURE_DECODE, False), LLAMA, 1)


# --- the shipped H100 tables ---------------------------------------------------------------------------

SHARED_TABLES = {"unfused": "h100_llama-3.1-8b_whole_steps.csv", "compiled": "h100_llama-3.1-8b_whole_steps_compiled.csv"}
MEASURED_TP1 = [("llama-3.1-8b", "fused"), ("llama-3.1-8b", "unfused"), ("llama-3.1-8b", "compiled"),
                ("llama-3.1-8b", "fused-paged"), ("qwen2.5-7b", "fused"), ("qwen2.5-7b", "unfused")]


def held_out_errors(rows: pd.DataFrame, model) -> tuple[np.ndarray, list[float]]:
    """Each row predicted by a fit on the other rows, and by the fit on all rows (in sample)."""
    full = fit_steps(rows, model, 1)
    errors, in_sample = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StepFitWarning)
        for i, plan in enumerate(row_plans(rows)):
            t = rows["step_s"].iloc[i]
            in_sample.append(full.time_s(plan) / t - 1)
            errors.append(fit_steps(rows.drop(index=rows.index[i]), model, 1).time_s(plan) / t - 1)
    return np.abs(errors), in_sample


@pytest.mark.parametrize("engine", list(SHARED_TABLES))
def test_shared_tables_held_out_error(engine):
    """Goal of issue 17 on the tables measured on another H100 (../shared/gpu; skipped where absent): each row
    predicted from the others within 10%, median within 5%; in sample within 2%; rows alone at their token
    count exactly."""
    shared = REPO / SHARED_GPU
    if not shared.is_dir():
        pytest.skip("../shared/gpu is not beside the repository")
    rows = read_steps_table(shared / SHARED_TABLES[engine])
    assert len(rows) == 21 and set(rows["kind"]) == {"prefill", "decode"}
    errors, in_sample = held_out_errors(rows, LLAMA)
    assert errors.max() <= 0.10, errors
    assert np.median(errors) <= 0.05
    assert np.abs(in_sample).max() <= 0.02
    tokens = [p.num_tokens for p in row_plans(rows)]
    for i, n in enumerate(tokens):
        if tokens.count(n) == 1:
            assert abs(in_sample[i]) < 1e-9, rows.iloc[i].to_dict()


@pytest.mark.parametrize("model_name, engine", MEASURED_TP1)
def test_shipped_h100_profiles_held_out_error(model_name, engine):
    """The profiles measured on an H100 for this project (prefill, chunked prefill, decode and mixed rows):
    every row predicted from the others within 10%, median within 5%."""
    profile = load_step_profile(SHIPPED.parents[2] / model_name / "tp1" / "steps" / engine)
    rows = profile.rows
    assert {"prefill", "decode", "mixed"} <= set(rows["kind"])
    errors, _ = held_out_errors(rows, profile.model)
    assert errors.max() <= 0.10, errors
    assert np.median(errors) <= 0.05


def test_shipped_profiles_say_where_they_came_from():
    metas = sorted((REPO / "calibrate" / "profiles").glob("*/*/tp*/steps/*/meta.json"))
    assert len(metas) >= 14
    for path in metas:
        meta = json.loads(path.read_text())
        folder_engine = path.parent.name
        assert meta["profile_kind"] == "steps" and meta["complete"] and meta["includes_communication"] is False
        assert folder_engine.split("-")[0] == meta["engine"], path
        assert meta["kv_layout"] == ("paged" if folder_engine.endswith("-paged") else "dense"), path
        gpu = meta["device_name"].removeprefix("NVIDIA ").split()[0]  # e.g. H100, H200
        assert gpu in meta["source"] and gpu.lower() in path.parents[4].name, path
        assert meta["method"] and meta["engine_description"], path
        assert f"tp{meta['tensor_parallel']}" == path.parents[2].name, path


def test_more_work_never_costs_less_and_the_parts_add_up():
    cost = StepProfileCostModel(SHIPPED / "compiled", LLAMA)
    def decode(b, ctx, q=1):
        return StepPlan(num_decode_seqs=b, decode_context_tokens=b * ctx, decode_query_tokens=q, num_sampled_seqs=b)
    assert cost.step_time(decode(32, 4000)) > cost.step_time(decode(32, 1000)) > cost.step_time(decode(8, 1000))
    assert cost.step_time(decode(32, 1000, q=4)) > cost.step_time(decode(32, 1000))
    chunk = [cost.step_time(plan_for_row("prefill", c, 0, 0, 0)) for c in (16, 300, 3000, 20000)]
    assert all(a < b for a, b in zip(chunk, chunk[1:]))
    assert cost.step_time(plan_for_row("prefill", 512, 8000, 0, 0)) > cost.step_time(plan_for_row("prefill", 512, 0, 0, 0))
    mixed = plan_for_row("mixed", 512, 0, 64, 2048)
    assert cost.step_time(mixed) > max(cost.step_time(plan_for_row("prefill", 512, 0, 0, 0)),
                                       cost.step_time(plan_for_row("decode", 0, 0, 64, 2048)))
    parts = cost.fit.parts(mixed)
    assert sum(parts.values()) == pytest.approx(cost.step_time(mixed), rel=1e-12)
    assert all(v > 0 for v in parts.values())
    # Swaps: each swapped token's KV over the GPU's host link, on top of the step.
    swapped = StepPlan(num_decode_seqs=8, decode_context_tokens=8000, num_sampled_seqs=8, swap_out_tokens=1000)
    plain = StepPlan(num_decode_seqs=8, decode_context_tokens=8000, num_sampled_seqs=8)
    kv_bytes = 2 * LLAMA.num_layers * LLAMA.num_kv_heads * LLAMA.head_dim * 2
    assert cost.step_time(swapped) - cost.step_time(plain) == pytest.approx(
        1000 * kv_bytes / get_gpu("h100-sxm").host_link_bytes_per_s, rel=1e-9)
    assert cost.step_time(StepPlan()) == 0.0  # nothing on the GPU


def test_sliding_window_caps_the_attention_a_step_pays_for():
    windowed = LLAMA.model_copy(update={"name": "llama-windowed", "sliding_window": 1024})
    physics = StepPhysics(windowed, 1, 2)
    assert physics.decode_attention(4, 4 * 50_000) == physics.decode_attention(4, 4 * 1024)
    assert physics.prefill_attention(256, 100_000) == physics.prefill_attention(256, 10_000)
    assert StepPhysics(LLAMA, 1, 2).decode_attention(4, 4 * 50_000)[1] > physics.decode_attention(4, 4 * 50_000)[1]


# --- tensor parallel -----------------------------------------------------------------------------------

def _import(table: Path, out: Path, *extra: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_cli("import-steps", str(table), "--model", "llama-3.1-8b", "--device-name", "test GPU", "--out",
                   str(out), *extra, cwd=cwd)


def test_tensor_parallel_adds_the_catalog_all_reduce_only_above_tp1(tmp_path):
    shapes = [("decode", 0, 0, b, ctx) for b in (1, 16, 128) for ctx in (512, 4096)] + PURE_PREFILL
    table = synthetic_table(shapes, False)  # times do not matter here, only what TP adds to them
    table.to_csv(tmp_path / "t.csv", index=False)
    result = _import(tmp_path / "t.csv", tmp_path / "tp2", "--tp", "2", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "tp2" / "meta.json").read_text())["shard"] == shard_shapes(LLAMA, 2)
    plan = StepPlan(num_decode_seqs=16, decode_context_tokens=16 * 1000, num_sampled_seqs=16)
    for gpu in (get_gpu("h100-sxm"), get_gpu("l4")):
        on = StepProfileCostModel(tmp_path / "tp2", LLAMA, tensor_parallel=2, gpu=gpu)
        off = StepProfileCostModel(tmp_path / "tp2", LLAMA, tensor_parallel=2, gpu=gpu, communication=False)
        ring = 2 * 0.5 * 16 * LLAMA.hidden_size * 2 / (gpu.interconnect_bytes_per_s * gpu.interconnect_efficiency)
        expected = LLAMA.num_layers * 2 * (gpu.allreduce_latency_s + ring)
        assert on.step_time(plan) - off.step_time(plan) == pytest.approx(expected, rel=1e-9)
        assert f"all-reduces per layer from the {gpu.name} catalog entry" in repr(on)
        assert "no communication (turned off)" in repr(off)
    tp1 = StepProfileCostModel(SHIPPED / "unfused", LLAMA, tensor_parallel=1)
    assert tp1.allreduce_s(4096) == 0.0 and "no communication (tp 1)" in repr(tp1)
    with pytest.raises(ConfigError, match=r"measured for llama-3.1-8b at tp 2 .*tensor_parallel 1"):
        StepProfileCostModel(tmp_path / "tp2", LLAMA, tensor_parallel=1)


# --- commands ------------------------------------------------------------------------------------------

def test_import_then_check_happy_path(tmp_path):
    table = tmp_path / "steps.csv"
    pd.read_csv(SHIPPED / "compiled" / "steps.csv").drop(columns=["p20_s", "p80_s"]).to_csv(
        table, index=False)
    out = tmp_path / "profiles" / "compiled"
    result = _import(table, out, "--tp", "1", "--engine", "compiled", "--source", "test text", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["profile_kind"] == "steps" and meta["complete"] and meta["engine"] == "compiled"
    assert meta["source"] == "imported from steps.csv by calibrate import-steps: test text"
    assert meta["kv_layout"] == "dense" and meta["device"] == "cuda" and meta["dtype"] == "bf16"
    assert sorted(p.name for p in out.iterdir()) == [".servesim-output.json", "meta.json", "steps.csv"]
    assert [p.name for p in out.parent.iterdir()] == ["compiled"]  # no temporary folder left behind

    check = run_cli("check", str(out), "--against", str(table), "--json", "--loo", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    assert len(report["rows"]) == 29 and all(r["in_profile"] for r in report["rows"])
    assert report["max_abs_error_pct"] <= 2 and report["max_abs_loo_error_pct"] <= 10
    assert any("communication: off" in line for line in report["header"])
    assert any("engine compiled" in line for line in report["header"])
    text = run_cli("check", str(out), "--against", str(table), "--loo", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "decode 256x512" in text.stdout and "held out (refit without each row): median" in text.stdout
    # Reimporting into the same profile folder replaces it.
    assert _import(table, out, "--tp", "1", "--engine", "fused", cwd=tmp_path).returncode == 0
    assert json.loads((out / "meta.json").read_text())["engine"] == "fused"


def test_check_prices_with_a_per_op_profile_and_the_roofline(tmp_path):
    tiny = load_profile(TINY_OPS).meta["model"]
    arch = tmp_path / "tiny.json"
    arch.write_text(json.dumps(tiny))
    table = tmp_path / "tiny_steps.csv"
    table.write_text("kind,prefill_tokens,decode_batch,decode_context,step_s\n"
                     "prefill,64,0,0,0.004\ndecode,0,8,256,0.003\ndecode,0,8,1024,0.0035\n")
    ops = run_cli("check", str(TINY_OPS), "--against", str(table), "--json", cwd=tmp_path)
    assert ops.returncode == 0, ops.stderr
    report = json.loads(ops.stdout)
    assert "per-op kernel times" in report["header"][0] and len(report["rows"]) == 3
    assert all(r["predicted_s"] > 0 for r in report["rows"])
    roof = run_cli("check", "roofline", "--gpu", "h100-sxm", "--model", str(arch), "--against", str(table), "--json",
                   cwd=tmp_path)
    assert roof.returncode == 0, roof.stderr
    rows = json.loads(roof.stdout)["rows"]
    assert rows[2]["predicted_s"] > rows[1]["predicted_s"]  # more context, more KV read


GOOD = "kind,prefill_tokens,decode_batch,decode_context,step_s\nprefill,128,0,0,0.01\ndecode,0,4,512,0.008\n" \
       "decode,0,4,2048,0.009\n"
BAD_TABLES = [
    ("empty", b"", ["is empty"]),
    ("binary", b"kind,prefill_tokens\x00\x01\x02", ["binary"]),
    ("not-utf8", "kind,prefill_tokens,decode_batch,decode_context,step_s\nprefill,1,0,0,0.01\n".encode("utf-16"),
     ["binary"]),
    ("latin1", "kind,prefill_tokens,decode_batch,decode_context,step_s\nprefill,128,0,0,0.01 \xe9\n".encode("latin-1"),
     ["not UTF-8"]),
    ("missing-column", b"kind,prefill_tokens,decode_batch,step_s\nprefill,1,0,0.01\n", ["lacks columns decode_context"]),
    ("unknown-column", GOOD.replace("step_s", "step_s,gpu").replace("0.01\n", "0.01,x\n")
     .replace("0.008\n", "0.008,x\n").replace("0.009\n", "0.009,x\n").encode(), ["unknown columns gpu"]),
    ("unknown-kind", GOOD.replace("prefill,128", "warmup,128").encode(), ["line 2", "kind 'warmup'"]),
    ("negative-time", GOOD.replace("0.008", "-0.008").encode(), ["line 3", "step_s '-0.008'", "seconds > 0"]),
    ("nan-time", GOOD.replace("0.008", "nan").encode(), ["line 3", "step_s 'nan'"]),
    ("fractional-shape", GOOD.replace("4,512", "4.5,512").encode(),
     ["line 3", "decode_batch '4.5'", "a whole number from 0"]),
    ("duplicate", (GOOD + "decode,0,4,2048,0.0091\n").encode(), ["line 5", "repeats the shape of line 4"]),
    ("inconsistent-kind", GOOD.replace("decode,0,4,512", "decode,16,4,512").encode(), ["line 3", "kind decode needs"]),
    ("only-decode", b"kind,prefill_tokens,decode_batch,decode_context,step_s\ndecode,0,4,512,0.008\n",
     ["only decode rows"]),
    ("ragged", GOOD.replace("0.008\n", "0.008,1\n").encode(), ["line 3", "cells"]),
]


@pytest.mark.parametrize("content, needles", [c[1:] for c in BAD_TABLES], ids=[c[0] for c in BAD_TABLES])
def test_import_steps_bad_tables_give_one_line_and_write_nothing(tmp_path, content, needles):
    table = tmp_path / "table.csv"
    table.write_bytes(content)
    out = tmp_path / "out" / "profile"
    line = one_error_line(_import(table, out, "--tp", "1", cwd=tmp_path))
    assert line.startswith("error: TABLE:") and "table.csv" in line
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "out").exists()


BAD_OPTIONS = [
    ("tp-zero", ["--tp", "0"], ["--tp: 0"]),
    ("tp-not-dividing", ["--tp", "3"], ["--tp"]),
    ("unknown-model", ["--tp", "1", "--model", "no-such-model"], ["--model", "no-such-model"]),
    ("dtype", ["--tp", "1", "--dtype", "int4"], ["--dtype: 'int4'", "bf16"]),
    ("kv-layout", ["--tp", "1", "--kv-layout", "ring"], ["--kv-layout: 'ring'", "dense, paged"]),
    ("engine-path", ["--tp", "1", "--engine", "a/b"], ["--engine: 'a/b'"]),
]


@pytest.mark.parametrize("extra, needles", [c[1:] for c in BAD_OPTIONS], ids=[c[0] for c in BAD_OPTIONS])
def test_import_steps_bad_options_give_one_line(tmp_path, extra, needles):
    table = tmp_path / "table.csv"
    table.write_text(GOOD)
    line = one_error_line(_import(table, tmp_path / "out", *extra, cwd=tmp_path))
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "out").exists()


def test_import_steps_refuses_to_overwrite_a_folder_that_is_not_a_profile(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text(GOOD)
    out = tmp_path / "notes"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    line = one_error_line(_import(table, out, "--tp", "1", cwd=tmp_path))
    assert "--out:" in line and "not a ServeSim profile" in line
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_check_bad_input_gives_one_line(tmp_path):
    table = tmp_path / "table.csv"
    table.write_text(GOOD)
    cases = [
        (["check", "roofline", "--against", str(table)], ["needs --gpu"]),
        (["check", "roofline", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--against", str(table), "--loo"],
         ["--loo", "'roofline'"]),
        (["check", str(tmp_path / "nowhere"), "--against", str(table)], ["PROFILE", "not a folder"]),
        (["check", str(SHIPPED / "unfused"), "--against", str(tmp_path / "missing.csv")], ["--against", "not a file"]),
        (["check", str(SHIPPED / "unfused"), "--model", "qwen2.5-7b", "--against", str(table)],
         ["--model: 'qwen2.5-7b'", "llama-3.1-8b"]),
        (["fit", str(SHIPPED / "unfused")], ["PROFILE", "whole measured steps"]),
    ]
    for args, needles in cases:
        line = one_error_line(run_cli(*args, cwd=tmp_path))
        for needle in needles:
            assert needle in line, (args, needle, line)


# --- scenarios -----------------------------------------------------------------------------------------

def scenario_dict(**cost) -> dict:
    return {
        "name": "h100-steps", "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 8},
                     "lengths": {"kind": "uniform", "input_min": 50, "input_max": 3000,
                                 "output_min": 5, "output_max": 120}},
        "scheduler": {"chunked_prefill": True, "max_num_batched_tokens": 1024},
        "cost_model": {"kind": "calibrated", **cost},
        "run": {"seed": 3, "num_requests": 120},
    }


def test_a_scenario_without_a_profile_finds_the_shipped_whole_step_profile():
    scenario = build_scenario_set(scenario_dict()).base
    assert resolve(scenario).profile_dir == SHIPPED / "fused"  # the default engine, first of fused, compiled, ...
    cost = make_cost_model(scenario)
    assert isinstance(cost, StepProfileCostModel) and "engine fused" in repr(cost)
    first, second = simulate(scenario), simulate(scenario)
    assert (first.requests["status"] == "finished").all()
    pd.testing.assert_frame_equal(first.requests, second.requests)
    pd.testing.assert_frame_equal(first.steps, second.steps)
    assert first.summary["ttft_s_p50"] > 0 and "StepProfileCostModel" in first.extras["cost_model"]
    # Any step the scheduler built was priced above the table's fastest step's token part.
    assert first.steps["duration_s"].min() > 0
    unfused = build_scenario_set(scenario_dict(engine="unfused")).base
    assert resolve(unfused).profile_dir == SHIPPED / "unfused"
    assert simulate(unfused).summary["ttft_s_p50"] > first.summary["ttft_s_p50"]  # the slower engine


def test_scenario_engine_errors_list_what_is_allowed(tmp_path):
    with pytest.raises(ConfigError, match=r"cost_model.engine: 'eager' has no shipped profile for "
                                          r"h100-sxm/llama-3.1-8b/tp1; allowed: fused, compiled, unfused, ops, "
                                          r"fused-paged$"):
        build_scenario_set(scenario_dict(engine="eager"))
    with pytest.raises(ConfigError, match=r"cost_model.engine: 'unfused' is not the engine of cost_model.profile"):
        build_scenario_set(scenario_dict(profile=str(SHIPPED / "compiled"), engine="unfused"))
    data = scenario_dict(profile=str(SHIPPED / "compiled"))
    data["hardware"]["tensor_parallel"] = 2
    with pytest.raises(ConfigError, match=r"tp 1 .*tensor_parallel 2"):
        build_scenario_set(data)
    data = scenario_dict(profile=str(SHIPPED / "compiled"))
    data["model"] = "qwen2.5-7b"
    with pytest.raises(ConfigError, match=r"measured for llama-3.1-8b"):
        build_scenario_set(data)


def test_a_per_op_loader_refuses_a_whole_step_folder_and_back():
    with pytest.raises(ConfigError, match="holds whole measured steps"):
        load_profile(SHIPPED / "unfused")
    with pytest.raises(ConfigError, match="is not a whole-step profile"):
        load_step_profile(TINY_OPS)


def test_fits_are_deterministic():
    rows = read_steps_table(SHIPPED / "unfused" / "steps.csv")
    a, b = fit_steps(rows, LLAMA, 1), fit_steps(rows.sample(frac=1.0, random_state=0), LLAMA, 1)
    assert a.describe() == b.describe()  # row order does not matter
    assert math.isfinite(a.rates.flops_per_s) and a.rates.bytes_per_s > 0
