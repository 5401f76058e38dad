"""Closed-form decode runs (issue 15, `run.fast_decode`) for every cost model: `decode_step_costs(n, ctx, k)`
must equal `step_cost` of each of the k plain decode steps bit for bit (time, FLOPs, bytes), since the
step-by-step simulation is the reference. Contexts range from one token per sequence to far past every
measured table (extrapolation), batches from 1 to past the tables' largest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cost.calibrated import CalibratedCostModel
from sim.core.step_plan import decode_step_costs, plain_decode_plan
from sim.cost.engine_steps import (
    FEATURES,
    EngineStepCostModel,
    write_engine_step_profile,
)
from sim.cost.learned import LearnedRooflineCostModel
from sim.cost.measured import MeasuredCostModel
from sim.cost.overhead import EngineOverheadCostModel, engine_overhead
from sim.cost.pipeline import LayerShareCostModel, PipelineCostModel, stage_model_spec
from sim.cost.roofline import FixedCostModel, RooflineCostModel
from sim.cost.steps import StepProfileCostModel
from sim.model.catalog import get_gpu, get_model

PROFILES = Path(__file__).resolve().parents[2] / "calibrate" / "profiles"
H100 = get_gpu("h100-sxm")
LLAMA_8B = get_model("llama-3.1-8b")


def step_profile(model: str = "llama-3.1-8b", tp: int = 1, engine: str = "fused"):
    return StepProfileCostModel(PROFILES / "h100-sxm" / model / f"tp{tp}" / "steps" / engine, get_model(model),
                                tensor_parallel=tp)


def windowed_step_profile(tmp_dir: Path) -> StepProfileCostModel:
    """The shipped Llama-3.1-8B whole-step profile read as if measured with a 65,536-token sliding window
    (no shipped whole-step profile has one; longer than its measured contexts, so the fit is unchanged), to
    reach the window branch of the closed form at longer contexts."""
    src = PROFILES / "h100-sxm" / "llama-3.1-8b" / "tp1" / "steps" / "fused"
    dst = tmp_dir / "windowed-steps"
    shutil.copytree(src, dst)
    meta = json.loads((dst / "meta.json").read_text())
    meta["model"]["sliding_window"] = 65_536
    (dst / "meta.json").write_text(json.dumps(meta))
    return StepProfileCostModel(dst, LLAMA_8B.model_copy(update={"sliding_window": 65_536}))


def engine_step_model(tmp_dir: Path) -> EngineStepCostModel:
    # Every feature with a distinct coefficient, so each term counts in the sum.
    coefficients = {name: (i + 1) * 1.37e-6 for i, name in enumerate(FEATURES)}
    write_engine_step_profile(tmp_dir / "engine-steps", LLAMA_8B, coefficients, {"engine": "test"})
    return EngineStepCostModel(tmp_dir / "engine-steps", LLAMA_8B)


def pipeline_model(whole=None):
    model, layers = LLAMA_8B, (16, 16)
    if whole is not None:
        stages = [LayerShareCostModel(whole, model.num_layers, n) for n in layers]
    else:
        stages = [RooflineCostModel(stage_model_spec(model, layers, i), H100) for i in range(len(layers))]
        stages[0].include_lm_head = False
    return PipelineCostModel(stages, hidden_size=model.hidden_size, tensor_parallel=1,
                             link_bytes_per_s=H100.interconnect_bytes_per_s, link_latency_s=5e-6)


def _builders(tmp_dir: Path) -> dict:
    return {
        "steps llama-8b fused": lambda: step_profile(),
        "steps llama-70b tp2 (all-reduce)": lambda: step_profile("llama-3.1-70b", 2),
        "steps qwen-7b": lambda: step_profile("qwen2.5-7b"),
        "steps llama-8b, 65,536-token window": lambda: windowed_step_profile(tmp_dir),
        "calibrated ops llama-8b paged": lambda: CalibratedCostModel(PROFILES / "h100-sxm/llama-3.1-8b/tp1/ops",
                                                                     LLAMA_8B),
        "calibrated ops llama-8b contiguous": lambda: CalibratedCostModel(
            PROFILES / "h100-sxm/llama-3.1-8b/tp1/ops", LLAMA_8B, kv_layout="contiguous"),
        "measured llama-8b": lambda: MeasuredCostModel(LLAMA_8B, H100),
        "measured llama-70b tp4": lambda: MeasuredCostModel(get_model("llama-3.1-70b"), H100, tensor_parallel=4,
                                                            step_overhead_s=1e-4),
        "measured mistral (sliding window)": lambda: MeasuredCostModel(get_model("mistral-7b-v0.1"), H100),
        "measured mixtral tp2 (MoE)": lambda: MeasuredCostModel(get_model("mixtral-8x7b"), H100, tensor_parallel=2),
        "measured deepseek (MLA)": lambda: MeasuredCostModel(get_model("deepseek-v2-lite"), H100),
        "learned llama-8b": lambda: LearnedRooflineCostModel(LLAMA_8B, H100),
        "learned llama-70b tp4": lambda: LearnedRooflineCostModel(get_model("llama-3.1-70b"), H100, tensor_parallel=4),
        "learned mistral (sliding window)": lambda: LearnedRooflineCostModel(get_model("mistral-7b-v0.1"), H100),
        "learned mixtral tp2 (MoE)": lambda: LearnedRooflineCostModel(get_model("mixtral-8x7b"), H100,
                                                                      tensor_parallel=2),
        "engine steps": lambda: engine_step_model(tmp_dir),
        "overhead eager over steps": lambda: EngineOverheadCostModel(step_profile(), engine_overhead("vllm-eager"),
                                                                     LLAMA_8B.num_layers),
        "overhead cudagraph over measured": lambda: EngineOverheadCostModel(
            MeasuredCostModel(LLAMA_8B, H100), engine_overhead("vllm-cudagraph"), LLAMA_8B.num_layers),
        "overhead over fixed (no closed form)": lambda: EngineOverheadCostModel(
            FixedCostModel(0.05, 0.01), engine_overhead("vllm-eager"), LLAMA_8B.num_layers),
        "pipeline roofline stages": lambda: pipeline_model(),
        "pipeline layer shares of steps": lambda: pipeline_model(step_profile()),
    }



@pytest.fixture(scope="module")
def cost_models(tmp_path_factory):
    tmp_dir = tmp_path_factory.mktemp("decode-runs")
    return {name: build() for name, build in _builders(tmp_dir).items()}


def bits(cost) -> tuple[str, str, str]:
    """A step cost's floats as hex: equal only when bit-identical."""
    return tuple(float(x).hex() for x in (cost.time_s, cost.flops, cost.bytes))


def step_by_step(cost_model, num_seqs: int, context_tokens: int, num_steps: int) -> list:
    return [bits(cost_model.step_cost(plain_decode_plan(num_seqs, context_tokens + i * num_seqs)))
            for i in range(num_steps)]


MODEL_NAMES = list(_builders(Path(".")))


@pytest.mark.parametrize("name", MODEL_NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_seqs=st.one_of(st.integers(1, 8), st.integers(1, 1024)),
       tokens_per_seq=st.one_of(st.integers(1, 16), st.integers(1, 20_000), st.integers(100_000, 2_000_000)),
       extra=st.integers(0, 1023), num_steps=st.integers(1, 12))
def test_decode_step_costs_are_step_cost_bit_for_bit(cost_models, name, num_seqs, tokens_per_seq, extra, num_steps):
    cost_model = cost_models[name]
    context_tokens = num_seqs * tokens_per_seq + extra % num_seqs
    run = [bits(c) for c in decode_step_costs(cost_model, num_seqs, context_tokens, num_steps)]
    assert run == step_by_step(cost_model, num_seqs, context_tokens, num_steps)


@pytest.mark.parametrize("name", [n for n in MODEL_NAMES if "no closed form" not in n])
def test_every_cost_model_has_its_own_closed_form(cost_models, name):
    # Not the generic step-by-step fallback, and a learned roofline not the catalog roofline's inherited one.
    cost_model = cost_models[name]
    method = type(cost_model).decode_step_costs
    assert method is not RooflineCostModel.decode_step_costs or type(cost_model) is RooflineCostModel


def test_learned_roofline_runs_price_the_learned_kernels_not_the_catalog_roofline(cost_models):
    learned = cost_models["learned llama-8b"]
    catalog = RooflineCostModel(LLAMA_8B, H100)
    run = learned.decode_step_costs(64, 64 * 1000, 3)
    assert [c.time_s for c in run] != [c.time_s for c in catalog.decode_step_costs(64, 64 * 1000, 3)]
    assert bits(run[2]) == bits(learned.step_cost(plain_decode_plan(64, 64 * 1002)))


def test_measured_notes_list_each_point_outside_the_tables_once():
    # A batch past the measured decode grid and LM-head GEMMs is noted the same in runs or not, on the first run
    # of a batch size (constants priced then) and on later ones (constants cached): each point once, however
    # often it was priced (a count would depend on the caches; sim.cost.measured.note_outside).
    runs = [(70_000, 70_000 * 300, 5), (70_000, 70_000 * 305, 3), (7, 7 * 100, 4)]  # GEMMs measured to 32,768 tokens
    in_runs = MeasuredCostModel(LLAMA_8B, H100)
    for run in runs:
        in_runs.decode_step_costs(*run)
    alone = MeasuredCostModel(LLAMA_8B, H100)
    for run in runs:
        step_by_step(alone, *run)
    assert dict(in_runs.notes) == dict(alone.notes)
    assert in_runs.notes["gemm lm_head tokens at 70000 outside measured 1..32768"] == 1  # priced at every step
    assert in_runs.notes["gemm down tokens at 70000 outside measured 1..32768"] == 1  # priced once, then cached
    decode_points = [n for n in in_runs.notes if n.startswith("decode attention") and "(70000," in n]
    assert len(decode_points) == 8  # one per step: each step's mean context is its own point
