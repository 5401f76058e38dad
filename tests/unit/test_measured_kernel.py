"""The measured-kernel model's compiled pricer (`sim.cost.measured_kernel`, numba) against
`MeasuredCostModel.step_cost`: bit for bit, and outside the measured tables the same points noted."""

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.step_plan import StepPlan
from sim.cost.measured import MeasuredCostModel, measured_gpus
from sim.model.catalog import get_gpu, get_model

pytest.importorskip("numba")
from sim.cost.compiled_pricing import price_step  # noqa: E402  (needs numba)
from sim.cost.measured_kernel import MEMO_TOKENS  # noqa: E402

# Dense models on every GPU with shipped tables, one GPU and several (all-reduce from a table or the catalog).
SETUPS = [("llama-3.1-8b", gpu, tp) for gpu in ("h100-sxm", "a100-80gb", "l40s") for tp in (1, 2)]
SETUPS += [("llama-3.1-70b", "h100-sxm", 4), ("qwen2.5-7b", "h200", 1), ("llama-3.1-8b", "h100-sxm", 1, "fp8", "fp8"),
           ("llama-3.1-70b", "h100-sxm", 2, "fp8", "bf16")]
_MODELS: dict = {}


def model_for(name: str, gpu: str, tp: int, weights: str = "bf16", kv: str = "bf16") -> MeasuredCostModel:
    key = (name, gpu, tp, weights, kv)
    if key not in _MODELS:
        _MODELS[key] = MeasuredCostModel(get_model(name), get_gpu(gpu), tensor_parallel=tp, weight_dtype=weights,
                                         kv_dtype=kv)
    return _MODELS[key]


def compiled_price(cm, plan: StepPlan, pack=None):
    return price_step(pack or cm.compiled_params(), plan.num_prefill_tokens,
                      np.array(plan.prefill_chunk_tokens + [0], dtype=np.int64),
                      np.array(plan.prefill_context_tokens + [0], dtype=np.int64), len(plan.prefill_chunk_tokens),
                      plan.num_decode_seqs, plan.decode_context_tokens, plan.num_sampled_seqs)


@settings(max_examples=400, deadline=None)
@given(setup=st.sampled_from([s for s in SETUPS if s[1] in measured_gpus()]),
       chunks=st.lists(st.tuples(st.sampled_from([1, 7, 16, 100, 512, 2048]) | st.integers(1, 8192),
                                 st.sampled_from([0, 0, 512]) | st.integers(0, 60_000)), max_size=5),
       repeat=st.booleans(), num_decode=st.integers(0, 512), mean_context=st.integers(1, 20_000),
       overhead_s=st.sampled_from([0.0, 0.0021]))
def test_the_compiled_measured_price_is_step_cost_bit_for_bit_and_notes_the_same_points(setup, chunks, repeat,
                                                                                          num_decode, mean_context,
                                                                                          overhead_s):
    cm = model_for(*setup)
    cm.step_overhead_s = overhead_s
    if repeat and chunks:
        chunks = chunks + chunks[:2]  # identical (chunk, context) pairs are priced together
    sampled = num_decode + sum(1 for chunk, _ in chunks if chunk % 2)
    plan = StepPlan(prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=[c for c, _ in chunks],
                    prefill_context_tokens=[x for _, x in chunks], num_decode_seqs=num_decode,
                    decode_context_tokens=num_decode * mean_context, num_sampled_seqs=sampled)
    if plan.num_tokens == 0:
        return
    assert_same_price_and_notes(cm, plan)


def assert_same_price_and_notes(cm, plan: StepPlan) -> bool:
    """The compiled price is step_cost's, and its note log names the points step_cost notes (on a model whose
    caches and notes start empty). True when some point lay outside the tables."""
    kept = Counter(cm.notes)
    try:
        cm.notes.clear()
        cm._dense_cache.clear()  # so that every point this plan touches is priced, and noted if outside
        want = cm.step_cost(plan)
        noted_here = dict(cm.notes)
        pack = cm.compiled_params()
        assert compiled_price(cm, plan, pack) == (want.time_s, want.flops, want.bytes)
        *_, note_log, note_count = pack[3]
        cm.notes.clear()
        cm.note_compiled_outside(note_log[:note_count[0]])
        assert dict(cm.notes) == noted_here
        return bool(noted_here)
    finally:
        cm.notes.clear()
        cm.notes.update(kept)


@settings(max_examples=100, deadline=None)
@given(setup=st.sampled_from([s for s in SETUPS if s[1] in measured_gpus()]),
       steps=st.lists(st.tuples(st.lists(st.tuples(st.sampled_from([1, 16, 512]) | st.integers(1, 8192),
                                                    st.integers(0, 20_000)), max_size=3),
                                st.sampled_from([0, 1, 64]) | st.integers(0, 512), st.integers(1, 20_000)),
                      min_size=1, max_size=8))
def test_one_pack_prices_every_step_as_a_fresh_pack_whether_its_layer_terms_are_remembered_or_not(setup, steps):
    # A pack remembers each token count's per-layer terms and each LM-head row count the first time (below
    # MEMO_TOKENS); a fresh pack for every step (checked against step_cost above) never remembers anything.
    cm = model_for(*setup)
    cm.step_overhead_s = 0.0
    pack = cm.compiled_params()
    plans = []
    for chunks, num_decode, mean_context in steps:
        plans.append(StepPlan(prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=[c for c, _ in chunks],
                              prefill_context_tokens=[x for _, x in chunks], num_decode_seqs=num_decode,
                              decode_context_tokens=num_decode * mean_context,
                              num_sampled_seqs=num_decode + sum(1 for chunk, _ in chunks if chunk % 2)))
    priced = False  # a step inside the tables with a remembered token count
    for plan in plans + plans[::-1]:
        if plan.num_tokens == 0:
            continue
        args = (plan.num_prefill_tokens, np.array(plan.prefill_chunk_tokens + [0], dtype=np.int64),
                np.array(plan.prefill_context_tokens + [0], dtype=np.int64), len(plan.prefill_chunk_tokens),
                plan.num_decode_seqs, plan.decode_context_tokens, plan.num_sampled_seqs)
        got, fresh = price_step(pack, *args), price_step(cm.compiled_params(), *args)
        assert got == fresh or (math.isnan(got[0]) and math.isnan(fresh[0]) and got[1:] == fresh[1:])
        priced |= not math.isnan(got[0]) and plan.num_tokens < MEMO_TOKENS
    if priced:
        assert (pack[3][13] != -1.0).any()  # the memo was used


def test_some_random_steps_lie_inside_and_some_outside_the_tables():
    # The property above checks both branches only if both happen: a step of one short prompt sits inside the
    # H100 tables, one of 300 decodes at 1M tokens of context outside them.
    cm = model_for("llama-3.1-8b", "h100-sxm", 1)
    inside = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[512], prefill_context_tokens=[0],
                      num_sampled_seqs=1)
    outside = StepPlan(num_decode_seqs=300, decode_context_tokens=300 * 1_000_000, num_sampled_seqs=300)
    assert not assert_same_price_and_notes(cm, inside)
    assert assert_same_price_and_notes(cm, outside)
    one_token = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[1], prefill_context_tokens=[0],
                         num_sampled_seqs=1)  # a one-token prompt: its attention lies below the tables
    assert assert_same_price_and_notes(cm, one_token)


def test_a_model_that_reuses_its_pack_keeps_its_memos_and_starts_every_run_with_an_empty_note_log():
    # The planner's models (`reuse_compiled_pack`): one pack for every run, its memos filled from run to run,
    # prices as a fresh pack's; only the note log is emptied by each call, as a run reads it after itself.
    fresh = model_for("llama-3.1-8b", "h100-sxm", 1)
    cm = MeasuredCostModel(get_model("llama-3.1-8b"), get_gpu("h100-sxm"))
    cm.reuse_compiled_pack = cm.roofline.reuse_compiled_pack = True
    pack = cm.compiled_params()
    assert cm.compiled_params() is pack and pack[1] is cm.roofline.compiled_params()[1]
    inside = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[512], prefill_context_tokens=[0],
                      num_sampled_seqs=1)
    outside = StepPlan(num_decode_seqs=300, decode_context_tokens=300 * 1_000_000, num_sampled_seqs=300)
    for plan in (inside, outside, inside):
        assert compiled_price(cm, plan, pack) == compiled_price(fresh, plan, fresh.compiled_params())
    assert (pack[3][13] != -1.0).any() and pack[3][-1][0] > 0  # a memo filled, a point noted
    again = cm.compiled_params()
    assert again is pack and pack[3][-1][0] == 0 and (pack[3][13] != -1.0).any()
    assert fresh.compiled_params() is not fresh.compiled_params()  # by default, a fresh pack every call


def test_the_planners_models_reuse_their_packs():
    from sim.config.files import validate_scenario
    from sim.tools.planner import shared_cost_model
    raw = {"name": "p", "model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "tensor_parallel": 2},
           "cost_model": {"kind": "measured"}, "run": {"num_requests": 10},
           "workload": {"arrival": {"kind": "poisson", "rate_per_s": 1},
                        "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}}}
    model = shared_cost_model(raw, validate_scenario(raw))
    assert isinstance(model, MeasuredCostModel) and model.reuse_compiled_pack and model.roofline.reuse_compiled_pack


def test_a_full_note_log_prices_nan_so_the_run_goes_to_the_python_engine(monkeypatch):
    from sim.cost import measured_kernel
    monkeypatch.setattr(measured_kernel, "NOTE_CAP", 1)
    cm = model_for("llama-3.1-8b", "h100-sxm", 1)
    pack = cm.compiled_params()
    far = [StepPlan(num_decode_seqs=300, decode_context_tokens=300 * c, num_sampled_seqs=300)
           for c in (1_000_000, 2_000_000)]
    assert not math.isnan(compiled_price(cm, far[0], pack)[0])  # its point fills the log
    assert not math.isnan(compiled_price(cm, far[0], pack)[0])  # the same point again: not written twice
    assert math.isnan(compiled_price(cm, far[1], pack)[0])  # another point: no room


def test_decode_runs_price_the_same_as_the_compiled_steps():
    cm = model_for("llama-3.1-8b", "l40s", 1)
    empty = np.zeros(1, dtype=np.int64)
    for batch, context in ((1, 17), (37, 37 * 900), (128, 128 * 2000)):
        for k, want in enumerate(cm.decode_step_costs(batch, context, 40)):
            got = price_step(cm.compiled_params(), 0, empty, empty, 0, batch, context + k * batch, batch)
            assert got == (want.time_s, want.flops, want.bytes)


def test_models_the_compiled_form_does_not_cover_have_none():
    assert MeasuredCostModel(get_model("mixtral-8x7b"), get_gpu("h100-sxm"), tensor_parallel=2).compiled_params() is None
    assert model_for("llama-3.1-8b", "h100-sxm", 1).compiled_params() is not None


def test_a_decode_runs_unpriced_steps_note_the_attention_points_the_python_model_notes():
    # The Python engine prices a decode run's whole limit; the core notes the steps it did not price
    # (note_unpriced_decode_steps): all inside the grid, crossing its last context, and a batch beyond it.
    from sim.cost.compiled_pricing import note_unpriced_decode_steps
    cm = model_for("llama-3.1-8b", "h100-sxm", 1)
    top_ctx, top_batch = int(cm._decode.ys[-1]), int(cm._decode.xs[-1])
    kept = Counter(cm.notes)
    try:
        for batch, first_ctx, steps, outside in ((64, 64 * 200, 6, 0), (32, 32 * (top_ctx - 2), 5, 2),
                                                 (top_batch + 8, 100, 3, 3)):
            cm.notes.clear()
            cm._dense_cache.clear()
            cm._decode_cache.clear()
            cm.decode_step_costs(batch, first_ctx, steps)
            python = {n for n in cm.notes if n.startswith("decode attention")}
            pack = cm.compiled_params()
            assert note_unpriced_decode_steps(pack[0], pack[3], batch, first_ctx, steps)
            *_, note_log, note_count = pack[3]
            cm.notes.clear()
            cm.note_compiled_outside(note_log[:note_count[0]])
            assert set(cm.notes) == python
            assert len(python) == outside  # the mean contexts past the grid's last (one of 5 lies on it)
    finally:
        cm.notes.clear()
        cm.notes.update(kept)
