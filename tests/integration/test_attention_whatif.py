"""The attention-kernel what-if end to end (issue 33): both engines give identical records with materialized scores,
the report and the dashboard's table show both kernels side by side, and flash runs are unchanged."""

import pytest

from sim.config.files import validate_scenario
from sim.run import simulate
from sim.views.attention_whatif import attention_rows, attention_section_html, kernel_whatif, with_kernel
from sim.views.report import render_report

pytest.importorskip("numba")

RAW = {"name": "attn", "workload": {"arrival": {"kind": "poisson", "rate_per_s": 4},
                                    "lengths": {"kind": "uniform", "input_min": 1000, "input_max": 6000,
                                                "output_min": 8, "output_max": 64}},
       "scheduler": {"max_model_len": 8192, "chunked_prefill": True},
       "run": {"num_requests": 60, "seed": 3}}


def _run(kernel, compiled):
    sc = validate_scenario({**RAW, "attention": {"kernel": kernel}, "run": {**RAW["run"], "compiled_core": compiled}})
    return simulate(sc)


def test_both_engines_give_the_same_records_with_materialized_scores_and_it_costs_time():
    compiled, python = _run("materialized", True), _run("materialized", False)
    assert compiled.extras["engine_core"].startswith("compiled")
    assert compiled.requests.equals(python.requests) and compiled.steps.equals(python.steps)
    flash = _run("flash", True)
    assert compiled.summary["ttft_s_p50"] > flash.summary["ttft_s_p50"]
    assert compiled.steps["bytes"].sum() > flash.steps["bytes"].sum()
    assert compiled.summary["kv_capacity_tokens"] < flash.summary["kv_capacity_tokens"]
    assert compiled.summary["attention_kernel"] == "materialized" and "attention_kernel" not in flash.summary
    assert compiled.summary["max_prompt_tokens_materialized"] > 8192


def test_the_report_and_the_dashboard_show_both_kernels():
    sc = validate_scenario(RAW)
    flash, mat = simulate(with_kernel(sc, "flash")), simulate(with_kernel(sc, "materialized"))
    mat.name = "materialized"
    assert attention_rows([flash]) is None and attention_section_html([flash]) == ""
    rows = attention_rows([flash, mat])
    assert list(rows["attention.kernel"]) == ["flash", "materialized"]
    assert rows["TTFT p50 (ms)"].iloc[1] > rows["TTFT p50 (ms)"].iloc[0]
    page = render_report([flash, mat], "t")
    assert '<section id="attention">' in page and '<section id="attention">' not in render_report([flash], "t")
    table = kernel_whatif(sc)
    flash_row, mat_row = table.iloc[0], table.iloc[1]
    assert mat_row["KV capacity (tokens)"] < flash_row["KV capacity (tokens)"]
    assert mat_row["longest unchunked prompt"] < flash_row["longest unchunked prompt"]
    assert mat_row["idle TTFT, longest prompt (ms)"] > flash_row["idle TTFT, longest prompt (ms)"]
    assert mat_row["score memory per GPU (GiB)"] > 0 == flash_row["score memory per GPU (GiB)"]


def test_a_kernel_the_scenario_cannot_run_gets_its_one_line_refusal_in_the_table():
    sc = validate_scenario({**RAW, "scheduler": {"max_model_len": 65_536}, "hardware": {"gpu": "a100-40gb"}})
    table = kernel_whatif(sc)
    assert table.iloc[1]["note"].startswith("attention.kernel: 'materialized' holds")
    assert table.iloc[1]["KV capacity (tokens)"] is None and table.iloc[0]["KV capacity (tokens)"] > 0
