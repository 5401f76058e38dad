"""What the cost model approximated in a run (`sim.cost.labels.cost_model_notes`), beside the engine preset's notes:
in the run's extras, the CLI's notes and the report. Measured tables that lack the run's configuration say which
they took instead; an all-reduce over more GPUs than measured says it is carried past them; points priced past a
table's range come as one line per table."""

import html
import subprocess
import sys
from pathlib import Path

import yaml
from helpers import SUBPROCESS_TIMEOUT_S

from sim.api import make_workload, simulate
from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.labels import cost_model_notes
from sim.cost.measured import MeasuredCostModel
from sim.cost.overhead import EngineOverheadCostModel, engine_overhead
from sim.cost.roofline import RooflineCostModel
from sim.model.catalog import get_gpu, get_model
from sim.views.report import render_report

ROOT = Path(__file__).resolve().parents[2]
GB200_TP8 = {"name": "gb200-tp8", "model": "llama-3.1-70b", "hardware": {"gpu": "gb200", "tensor_parallel": 8},
             "cost_model": {"kind": "measured"},
             "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                          "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 20}},
             "run": {"num_requests": 20}}


def decode(num_seqs: int, context: int) -> StepPlan:
    return StepPlan(num_decode_seqs=num_seqs, decode_context_tokens=num_seqs * context, num_sampled_seqs=num_seqs)


def test_an_all_reduce_past_the_measured_gpu_counts_says_so_and_a_measured_count_says_nothing():
    """GB200's vLLM all-reduce rows stop at 4 GPUs: TP 8 holds the 4-GPU rows' ratio to the ring shape (said as
    such, not as an interpolation); TP 4 is measured and notes no all-reduce."""
    model = get_model("llama-3.1-70b")
    tp8 = cost_model_notes(MeasuredCostModel(model, get_gpu("gb200"), tensor_parallel=8))
    assert ("all-reduce: 8 GPUs not measured (measured [2, 4]); the 4-GPU rows' ratio to the ring all-reduce's "
            "shape, held at 8 GPUs") in tp8
    assert not any(n.startswith("all-reduce") for n in cost_model_notes(
        MeasuredCostModel(model, get_gpu("gb200"), tensor_parallel=4)))


def test_points_past_a_tables_range_are_one_line_per_table_with_their_count_and_extremes():
    cost = MeasuredCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    assert not any(n.startswith("decode attention") and "outside" in n for n in cost_model_notes(cost))
    past = [(100_000, 5_000_000), (200_000, 9_000_000)]  # far past any measured batch and context
    for num_seqs, context in past:
        cost.step_cost(decode(num_seqs, context))
    lines = [n for n in cost_model_notes(cost) if n.startswith("decode attention") and "outside measured" in n]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("decode attention (batch, context): 2 points outside measured ")
    assert line.endswith("from (100000, 5e+06) to (200000, 9e+06) (the nearest edge's ratio to the roofline held)")
    cost.step_cost(decode(*past[0]))  # a point priced again is the same point
    assert [n for n in cost_model_notes(cost) if n.startswith("decode attention") and "outside" in n] == lines


def test_wrapped_models_give_their_kernels_notes_and_a_roofline_none():
    kernels = MeasuredCostModel(get_model("llama-3.1-70b"), get_gpu("gb200"), tensor_parallel=8)
    model = get_model("llama-3.1-70b")
    wrapped = EngineOverheadCostModel(kernels, engine_overhead("vllm-cudagraph"), model.num_layers)
    assert cost_model_notes(wrapped) == cost_model_notes(kernels) != ()
    assert cost_model_notes(RooflineCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))) == ()
    assert cost_model_notes(kernels) == tuple(sorted(cost_model_notes(kernels)))


def test_a_run_keeps_its_cost_models_notes_and_the_report_shows_them_once_per_model():
    sc = validate_scenario(GB200_TP8)
    result = simulate(sc, make_workload(sc))
    notes = result.extras["cost_model_notes"]
    assert any(n.startswith("all-reduce: 8 GPUs not measured") for n in notes)
    other = simulate(sc, make_workload(sc))
    other.name = "again"
    page = render_report([result, other], "notes", "")
    assert '<section id="cost-model-notes">' in page
    label = html.escape(result.extras["cost_model_label"])
    assert f"<h3>{label}: {html.escape(result.name)}, again</h3>" in page  # one group: the same model and notes
    for note in notes:
        assert page.count(f"<li>{html.escape(note)}</li>") == 1, note
    roofline = validate_scenario({**GB200_TP8, "cost_model": {"kind": "roofline"}})
    assert "cost-model-notes" not in render_report([simulate(roofline, make_workload(roofline))], "none", "")


def test_the_cli_prints_the_cost_models_notes(tmp_path):
    path = tmp_path / "gb200.yaml"
    path.write_text(yaml.safe_dump(GB200_TP8))
    proc = subprocess.run([sys.executable, "-m", "sim.views.cli", "run", str(path), "--out", str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    printed = " ".join(proc.stdout.split())  # rich wraps long lines
    assert "note: gb200-tp8: cost model: all-reduce: 8 GPUs not measured (measured [2, 4])" in printed


def test_a_whole_step_profile_says_where_the_run_went_past_the_batches_and_tokens_it_measured():
    """The H100 Llama-3.1-8B profile (the default there) measured decode batches up to 256 and steps up to 8,192
    tokens: a burst at 512 sequences and a 16,384-token budget goes past both, and says by how much; the same burst
    within them says nothing of the sort."""
    raw = {"name": "past", "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
           "scheduler": {"max_num_seqs": 512, "chunked_prefill": True, "max_num_batched_tokens": 16384},
           "workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 100,
                                                                 "output_tokens": 50}},
           "run": {"num_requests": 600}}
    sc = validate_scenario(raw)
    assert sc.cost_model.kind == "calibrated", sc.cost_model_choice
    notes = simulate(sc, make_workload(sc)).extras["cost_model_notes"]
    assert any(n.startswith("whole-step profile: decode batches measured up to 256; this run's reached 512 in ")
               for n in notes), notes
    assert "whole-step profile: steps measured up to 8,192 tokens; this run's reached 16,384 (the nearest measured " \
           "ratio held)" in notes
    within = validate_scenario({**raw, "scheduler": {"max_num_seqs": 256, "chunked_prefill": True,
                                                     "max_num_batched_tokens": 8192}})
    assert not any(n.startswith("whole-step profile:") for n in
                   simulate(within, make_workload(within)).extras["cost_model_notes"])
