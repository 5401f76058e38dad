"""The measured-kernel model's one definition (`sim.cost.measured_kernel`): the compiled core's pack prices and notes
(the points outside the tables) what `step_cost` does, its memos never change a price, and a full note log
hands the step back. Known answers (grid points reproduced, interpolation between them) are in test_measured.py;
both engines on whole runs, in tests/integration/test_compiled_core.py."""

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.step_plan import StepPlan
from sim.cost.compiled_pricing import note_unpriced_decode_steps, price_parts
from sim.cost.measured import MeasuredCostModel, measured_gpus
from sim.cost.measured_kernel import LAYER_MEMO, MEMO_TOKENS
from sim.cost.step_args import step_args
from sim.model.catalog import get_gpu, get_model
from sim.model.hf_config import load_hf_config

# Dense models on every GPU with shipped tables, one GPU and several (all-reduce from a table or the catalog),
# mixtures of experts (a fused-MoE table on the H100; expert GEMMs on the L40S), MLA, a sliding window.
SETUPS = [("llama-3.1-8b", gpu, tp) for gpu in ("h100-sxm", "a100-80gb", "l40s") for tp in (1, 2)]
SETUPS += [("llama-3.1-70b", "h100-sxm", 4), ("qwen2.5-7b", "h200", 1), ("llama-3.1-8b", "h100-sxm", 1, "fp8", "fp8"),
           ("llama-3.1-70b", "h100-sxm", 2, "fp8", "bf16"), ("mixtral-8x7b", "h100-sxm", 2),
           ("mixtral-8x7b", "h100-sxm", 2, "fp8", "bf16"),
           ("mixtral-8x7b", "l40s", 2), ("deepseek-v2-lite", "h100-sxm", 1), ("mistral-7b-v0.1", "h100-sxm", 1),
           ("deepseek-v2-lite", "h200", 2, "bf16", "fp8", "trtllm"), ("deepseek-v2-lite", "h100-sxm", 1, "bf16", "bf16",
                                                                     "sglang"),  # (MLA from its own tables)
           # sliding-window layers from the tables' window rows (mistral's 4,096-token window: from the full rows)
           ("gpt-oss-20b", "h100-sxm", 1, "mxfp4", "bf16"), ("gpt-oss-20b", "h200", 2, "mxfp4", "fp8", "sglang")]
SETUPS = [s for s in SETUPS if s[1] in measured_gpus()]
HF_MODELS = {"gpt-oss-20b": Path(__file__).parents[2] / "sim" / "model" / "configs" / "gpt-oss-20b.json"}


def model_for(name: str, gpu: str, tp: int, weights: str = "bf16", kv: str = "bf16", tables: str = "vllm",
              overhead_s: float = 0.0):
    model = load_hf_config(HF_MODELS[name]) if name in HF_MODELS else get_model(name)
    return MeasuredCostModel(model, get_gpu(gpu), tensor_parallel=tp, weight_dtype=weights, kv_dtype=kv,
                             step_overhead_s=overhead_s, tables=tables)


def core_price(cm, plan: StepPlan, pack=None):
    """The price the compiled core gets for a step (its pack: every part present, the kind chosen at run time)."""
    # (`pricer`'s pack may carry more parts after these four, e.g. the engine overhead's terms)
    kind, roofline, steps, measured = (pack or cm.compiled_params())[:4]
    return price_parts(kind, roofline, steps, measured, *step_args(plan)[:-4], 1, plan.num_padding_tokens, 0, 0)


def core_notes(cm, pack) -> dict:
    """The notes a run of the core leaves in its model (`sim.compiled.engine` reads the log after the run)."""
    *_, log, count = pack[3]
    cm.notes.clear()
    cm.note_compiled_outside(log[:count[0]])
    return dict(cm.notes)


STEPS = st.builds(lambda chunks, repeat, num_decode, mean_context: StepPlan(
    prefill_request_ids=list(range(len(chunks) + (2 if repeat else 0))),
    prefill_chunk_tokens=[c for c, _ in chunks] + ([c for c, _ in chunks[:2]] if repeat else []),
    prefill_context_tokens=[x for _, x in chunks] + ([x for _, x in chunks[:2]] if repeat else []),
    num_decode_seqs=num_decode, decode_context_tokens=num_decode * mean_context,
    num_sampled_seqs=num_decode + sum(1 for chunk, _ in chunks if chunk % 2)),
    st.lists(st.tuples(st.sampled_from([1, 7, 16, 100, 512, 2048]) | st.integers(1, 9000),
                       st.sampled_from([0, 0, 512]) | st.integers(0, 60_000)), min_size=1, max_size=4),
    st.booleans(), st.integers(0, 512), st.integers(1, 20_000))  # (identical (chunk, context) pairs priced together)


@settings(max_examples=150, deadline=None)
@given(setup=st.sampled_from(SETUPS), plan=STEPS, overhead_s=st.sampled_from([0.0, 0.0021]))
def test_the_cores_pack_prices_and_notes_a_step_as_step_cost_does(setup, plan, overhead_s):
    python, core = model_for(*setup, overhead_s=overhead_s), model_for(*setup, overhead_s=overhead_s)
    python.notes.clear()
    want = python.step_cost(plan)
    pack = core.compiled_params()
    assert core_price(core, plan, pack) == tuple(want)
    assert core_notes(core, pack) == dict(python.notes)


def test_some_steps_lie_inside_and_some_outside_the_tables():
    # The property above checks both branches only if both happen: a step of one short prompt sits inside the
    # H100 tables, one of 300 decodes at 1M tokens of context outside them, a one-token prompt's attention below.
    inside = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[512], prefill_context_tokens=[0],
                      num_sampled_seqs=1)
    outside = StepPlan(num_decode_seqs=300, decode_context_tokens=300 * 1_000_000, num_sampled_seqs=300)
    one_token = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[1], prefill_context_tokens=[0],
                         num_sampled_seqs=1)
    for plan, noted in ((inside, False), (outside, True), (one_token, True)):
        cm = model_for("llama-3.1-8b", "h100-sxm", 1)
        cm.notes.clear()
        cm.step_cost(plan)
        assert any("outside measured" in n for n in cm.notes) == noted


@settings(max_examples=60, deadline=None)
@given(setup=st.sampled_from(SETUPS), plans=st.lists(STEPS, min_size=1, max_size=6))
def test_a_model_prices_every_step_as_a_fresh_one_whether_its_terms_are_remembered_or_not(setup, plans):
    # The pack remembers each token count's per-layer terms and each LM-head row count the first time (below
    # MEMO_TOKENS); a fresh model remembers nothing.
    cm = model_for(*setup)
    for plan in plans + plans[::-1]:
        assert cm.step_cost(plan) == model_for(*setup).step_cost(plan)
    if any(plan.num_tokens < MEMO_TOKENS for plan in plans):
        assert (cm._pack()[1][LAYER_MEMO] != -1.0).any()  # the memo was used


def test_the_core_gets_the_models_one_pack_with_an_empty_note_log():
    # One pack for every run, its memos filled from run to run (the planner shares a model between runs); only
    # the note log is emptied by each call, as a run reads it after itself. step_cost notes through its own log.
    cm = model_for("llama-3.1-8b", "h100-sxm", 1)
    outside = StepPlan(num_decode_seqs=300, decode_context_tokens=300 * 1_000_000, num_sampled_seqs=300)
    pack = cm.compiled_params()
    assert core_price(cm, outside, pack) == tuple(model_for("llama-3.1-8b", "h100-sxm", 1).step_cost(outside))
    assert (pack[3][LAYER_MEMO] != -1.0).any() and pack[3][-1][0] > 0  # a memo filled, a point noted
    again = cm.compiled_params()
    assert again[3] is pack[3] and pack[3][-1][0] == 0 and (pack[3][LAYER_MEMO] != -1.0).any()
    cm.step_cost(outside)
    assert pack[3][-1][0] == 0  # (step_cost read its own log)


def test_a_full_note_log_hands_the_step_back_to_the_caller(monkeypatch):
    # The core's log holds one point: its second point prices NaN (the core then runs the Python engine), while
    # step_cost, which reads its own log after every call, prices on.
    from sim.cost import measured_kernel
    monkeypatch.setattr(measured_kernel, "NOTE_CAP", 1)
    cm = model_for("llama-3.1-8b", "h100-sxm", 1)
    far = [StepPlan(num_decode_seqs=300, decode_context_tokens=300 * c, num_sampled_seqs=300)
           for c in (1_000_000, 2_000_000)]
    pack = cm.compiled_params()
    assert not math.isnan(core_price(cm, far[0], pack)[0])  # its points fill the log
    assert math.isnan(core_price(cm, far[1], pack)[0])  # another point: no room
    assert not math.isnan(cm.step_cost(far[1]).time_s)
    assert cm.step_cost(far[1]) == model_for("llama-3.1-8b", "h100-sxm", 1).step_cost(far[1])


@pytest.mark.parametrize(("name", "tp"), [("mixtral-8x7b", 2), ("deepseek-v2-lite", 1), ("mistral-7b-v0.1", 1)])
def test_mixtures_of_experts_mla_and_sliding_windows_have_a_compiled_form(name, tp):
    assert model_for(name, "h100-sxm", tp).compiled_params() is not None


def test_a_decode_runs_unpriced_steps_note_the_attention_points_the_python_model_notes():
    # The Python engine prices a decode run's whole limit; the core notes the steps it did not price
    # (note_unpriced_decode_steps): all inside the grid, crossing its last context, and a batch beyond it.
    probe = model_for("llama-3.1-8b", "h100-sxm", 1)
    top_ctx, top_batch = int(probe._decode.ys[-1]), int(probe._decode.xs[-1])
    for batch, first_ctx, steps, outside in ((64, 64 * 200, 6, 0), (32, 32 * (top_ctx - 2), 5, 2),
                                             (top_batch + 8, 100, 3, 3)):
        python, core = model_for("llama-3.1-8b", "h100-sxm", 1), model_for("llama-3.1-8b", "h100-sxm", 1)
        python.notes.clear()
        python.decode_step_costs(batch, first_ctx, steps)
        want = {n for n in python.notes if n.startswith("decode attention")}
        pack = core.compiled_params()
        assert note_unpriced_decode_steps(pack[0], pack[3], batch, first_ctx, steps)
        assert set(core_notes(core, pack)) == want
        assert len(want) == outside  # the mean contexts past the grid's last (one of 5 lies on it)


def test_a_decode_run_of_a_sliding_window_model_notes_both_grids_points_as_the_python_model_does():
    # gpt-oss: half its layers from the window rows' decode grid, half from the full rows', each at the whole context
    setup = ("gpt-oss-20b", "h100-sxm", 1, "mxfp4")
    probe = model_for(*setup)
    grids = (probe._window_decode, probe._decode)
    top_batch = int(max(g.xs[-1] for g in grids))
    top_ctx = int(min(g.ys[-1] for g in grids))
    for batch, first_ctx, steps, outside in ((64, 64 * 200, 6, False), (16, 16 * (top_ctx - 2), 5, True),
                                             (top_batch + 8, 100, 3, True)):
        python, core = model_for(*setup), model_for(*setup)
        python.notes.clear()
        python.decode_step_costs(batch, first_ctx, steps)
        want = {n for n in python.notes if "decode attention" in n}
        pack = core.compiled_params()
        assert note_unpriced_decode_steps(pack[0], pack[3], batch, first_ctx, steps)
        assert set(core_notes(core, pack)) == want
        # inside both grids; past their last context or batch, each grid's points
        assert {n.split(" (")[0] for n in want} == ({"decode attention", "sliding-window decode attention"}
                                                    if outside else set())


def test_notes_list_each_point_once_however_often_it_is_priced():
    cm = model_for("llama-3.1-8b", "h100-sxm", 1)
    cm.notes.clear()
    plan = StepPlan(num_decode_seqs=300, decode_context_tokens=300 * 1_000_000, num_sampled_seqs=300)
    for _ in range(3):
        cm.step_cost(plan)
    assert cm.notes and set(Counter(cm.notes).values()) == {1}
    assert np.all(cm._pack()[2][-1] == 0)


def test_every_cost_models_pack_has_the_one_numba_type_the_core_compiles_for():
    # The compiled core compiles once for the pack's type (`compiled_pricing.pricer`); an array of another layout
    # or a read-only one (a table read zero-copy) would compile the core again (~1 min on a cold cache).
    import numba

    from sim.config.files import validate_scenario
    from sim.run import make_cost_model
    types = {}
    for kind in ({"kind": "roofline"}, {"kind": "measured"}, {"kind": "calibrated"},
                 {"kind": "roofline", "efficiencies": "learned"}):
        scenario = validate_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"}, "cost_model": kind,
                                      "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1.0},
                                                   "lengths": {"kind": "fixed", "input_tokens": 8,
                                                               "output_tokens": 8}}})
        types[str(kind)] = numba.typeof(make_cost_model(scenario).compiled_params())
    assert len(set(types.values())) == 1, types


def test_experts_without_a_fused_table_run_in_one_launch():
    """Known answers: one expert is its GEMM; each further one adds its time above a launch, or its roofline where
    that is more. 10 us GEMMs, a 2 us launch, 3 experts: 10 + 2 x 8 = 26 us; a 1 us roofline above 0.5 us of work:
    10 + 2 x 1 = 12 us."""
    from sim.cost.measured_kernel import fused_experts_s
    assert fused_experts_s(10e-6, 1e-6, 1.0, 2e-6) == 10e-6
    assert fused_experts_s(10e-6, 1e-6, 3.0, 2e-6) == pytest.approx(26e-6, rel=1e-12)
    assert fused_experts_s(2.5e-6, 1e-6, 3.0, 2e-6) == pytest.approx(4.5e-6, rel=1e-12)


def test_a_moe_configuration_outside_the_table_takes_the_nearest_measured_ones_ratio():
    """DeepSeek-V2-Lite (hidden 2048, 64 experts of 1408, top 6) on the H100's TensorRT-LLM fp8 fused-MoE rows: its
    configuration is not measured, so its fused-MoE time is this model's roofline times the nearest configuration's
    measured / roofline ratio at a measured row, taken at the token count where this model's touched experts get as
    many tokens each as that row's did, and the model says which configuration it took."""
    from sim.cost import measured_kernel as mk
    from sim.cost.measured import device_roofline, load_tables, nearest_moe_config, tables_dir, tokens_at_expert_load
    from sim.cost.roofline_kernel import expert_load
    if "h100-sxm" not in measured_gpus(tables="trtllm"):
        pytest.skip("no TensorRT-LLM tables for the H100")
    model = get_model("deepseek-v2-lite")
    cm = MeasuredCostModel(model, get_gpu("h100-sxm"), tensor_parallel=1, tables="trtllm")
    t = load_tables(tables_dir("h100-sxm", "trtllm"))
    rows_in_use, _ = t.moe_rows(cm.moe_routing)
    moe = rows_in_use[rows_in_use["dtype"] == "bf16"]
    config = (model.hidden_size, model.ffn_size, model.num_experts_per_token, model.num_experts, 1, 1)
    near = nearest_moe_config(moe, config)
    assert near[5] == 1  # rows of the same expert parallelism (none) where the table has them
    assert near != config and any("nearest measured" in n and "fused-MoE" in n for n in cm.notes)
    rows = moe[(moe["hidden_size"] == near[0]) & (moe["inter_size"] == near[1]) & (moe["topk"] == near[2])
               & (moe["num_experts"] == near[3]) & (moe["moe_tp_size"] == near[4]) & (moe["moe_ep_size"] == 1)]
    roof = device_roofline(t.gemm)

    def shape(c, n):
        return mk.shape_at(mk.SHAPE_MOE, c[3], c[2], c[0], c[1] / c[4], roof.flops_per_s, roof.bytes_per_s, n, 0.0)
    assert (near[2], near[3]) != (config[2], config[3])  # the case the load matters in
    for i in (3, 9):
        n, seconds = float(rows["num_tokens"].iloc[i]), float(rows["latency_ms"].iloc[i]) * 1e-3
        tokens = tokens_at_expert_load(config[3], config[2], expert_load(near[3], near[2], n))
        assert expert_load(config[3], config[2], tokens) == pytest.approx(expert_load(near[3], near[2], n), rel=1e-9)
        assert cm._moe(tokens) == pytest.approx(shape(config, tokens) * seconds / shape(near, n), rel=1e-9)
    assert nearest_moe_config(moe, near) == near  # a measured configuration is its own nearest


@pytest.mark.parametrize("experts, top_k", [(128, 4), (64, 6), (8, 2), (256, 8), (16, 16)])
def test_tokens_per_touched_expert_is_one_at_one_token_and_its_inverse_finds_the_tokens(experts, top_k):
    """One token touches top-k experts, one token each; the load rises with the tokens toward tokens x top-k /
    experts, and `tokens_at_expert_load` inverts it."""
    from sim.cost.measured import tokens_at_expert_load
    from sim.cost.roofline_kernel import expert_load
    assert expert_load(experts, top_k, 1.0) == pytest.approx(1.0, rel=1e-12)
    loads = [expert_load(experts, top_k, n) for n in (1.0, 2.0, 16.0, 256.0, 65536.0)]
    assert loads == sorted(loads)
    assert loads[-1] == pytest.approx(65536.0 * top_k / experts, rel=1e-9)
    for n in (1.0, 3.0, 100.0, 5000.0):
        assert tokens_at_expert_load(experts, top_k, expert_load(experts, top_k, n)) == pytest.approx(n, rel=1e-9)
