"""attention.kernel (issue 33): the roofline's score terms by hand, the score memory reserved out of the KV budget
and the limits it enforces, and the measured cost models' refusal of a kernel they were not measured with."""

import json

import pytest

from sim.config.deployment import longest_prompt_tokens, resolve
from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.attention_support import check_attention_kernel
from sim.cost.roofline import RooflineCostModel
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.memory import kv_capacity
from sim.run import make_cost_model

WORKLOAD = {"arrival": {"kind": "poisson", "rate_per_s": 1},
            "lengths": {"kind": "fixed", "input_tokens": 10, "output_tokens": 10}}
LLAMA, H100 = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
HEADS, LAYERS, D = 32, 32, 128


def scenario(kernel="materialized", **scheduler):
    return validate_scenario({"workload": WORKLOAD, "attention": {"kernel": kernel},
                              "scheduler": {"max_model_len": 4096, **scheduler}})


def prefill(chunk, context=0):
    return StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[chunk], prefill_context_tokens=[context],
                    num_sampled_seqs=1)


def _op(flops, nbytes, fps, bps):
    return max(flops / fps, nbytes / bps)


# torch's math SDPA given bf16 inputs (attention_io.MATH_SDPA_PASSES), by hand: per (query, key) pair and head, the
# matmuls move 8 bytes (S written, P read, fp32) and the other passes 40 (mask add 12, softmax 8, S == -inf 5, all 1,
# where 8, P cast to bf16 6), the mask's three passes 8 per pair; per query token and head dimension 20 (Q cast 6,
# scaled 8, O cast 6), per key 20 (K and V cast 6 each, K scaled 8).
MM_PER_PAIR, PASSES_PER_PAIR, PER_TOKEN = 8 * HEADS, 40 * HEADS + 8, 20 * HEADS * D


def test_a_materialized_prefill_computes_the_whole_rectangle_through_torch_s_passes():
    flash = RooflineCostModel(LLAMA, H100, step_overhead_s=0.0)
    mat = RooflineCostModel(LLAMA, H100, step_overhead_s=0.0, attention_kernel="materialized")
    chunk, context = 1024, 3072
    f, m = flash.step_cost(prefill(chunk, context)), mat.step_cost(prefill(chunk, context))
    afpp = 2 * HEADS * (D + D)  # QK^T and PV, 2 FLOPs per multiply-add
    causal = chunk * (context + (chunk + 1) / 2)  # FlashAttention skips the masked half
    rect = chunk * (context + chunk)  # a standard kernel computes it, then masks
    assert m.flops - f.flops == pytest.approx(LAYERS * ((rect - causal) * afpp + 5 * HEADS * rect), rel=1e-12)
    tokens = chunk + (context + chunk)  # query tokens, key tokens
    assert m.bytes - f.bytes == pytest.approx(LAYERS * (rect * (MM_PER_PAIR + PASSES_PER_PAIR) + tokens * PER_TOKEN),
                                              rel=1e-12)
    # The time: the matmuls with S's write and P's read as one op, at the H100's fp32 rate (torch casts the bf16
    # inputs to fp32: 67 TFLOP/s on its CUDA cores, where flash runs on the bf16 tensor cores), then each pass,
    # memory-bound (no cache level, no first touch in the catalog), in place of FlashAttention's one fused op.
    fps, bps = H100.bf16_flops_per_s * H100.compute_efficiency, H100.hbm_bytes_per_s * H100.memory_efficiency
    fp32 = 67e12 * H100.compute_efficiency
    qkv = (context + chunk) * flash.kv_bytes_per_token_layer + chunk * flash.q_bytes_per_token
    old = _op(causal * afpp, qkv, fps, bps)
    new = _op(rect * afpp, qkv + MM_PER_PAIR * rect, fp32, bps) + (PASSES_PER_PAIR * rect + tokens * PER_TOKEN) / bps
    assert rect * afpp / fp32 > (qkv + MM_PER_PAIR * rect) / bps  # at the fp32 rate the matmuls are compute-bound
    assert m.time_s - f.time_s == pytest.approx(LAYERS * (new - old), rel=1e-9)
    assert m.time_s > f.time_s


def test_a_materialized_decode_step_moves_each_query_s_scores_too():
    flash = RooflineCostModel(LLAMA, H100, step_overhead_s=0.0)
    mat = RooflineCostModel(LLAMA, H100, step_overhead_s=0.0, attention_kernel="materialized")
    plan = StepPlan(num_decode_seqs=8, decode_context_tokens=8 * 1000, num_sampled_seqs=8)
    f, m = flash.step_cost(plan), mat.step_cost(plan)
    # N_q = 1 per sequence: 8,000 pairs, 8 query tokens, 8,000 keys.
    per_pair = MM_PER_PAIR + PASSES_PER_PAIR
    assert m.bytes - f.bytes == pytest.approx(LAYERS * (per_pair * 8000 + PER_TOKEN * (8 + 8000)), rel=1e-12)
    assert m.flops - f.flops == pytest.approx(LAYERS * 5 * HEADS * 8000, rel=1e-12)
    # Verifying 4 draft tokens: 5 query rows per sequence, 40,000 pairs.
    spec = StepPlan(num_decode_seqs=8, decode_context_tokens=8 * 1000, num_sampled_seqs=8, decode_query_tokens=5)
    assert mat.step_cost(spec).bytes - flash.step_cost(spec).bytes == pytest.approx(
        LAYERS * (per_pair * 40_000 + PER_TOKEN * (40 + 8000)), rel=1e-12)


def test_flash_is_the_default_and_a_typo_is_refused():
    assert RooflineCostModel(LLAMA, H100).attention_kernel == "flash"
    assert "attention" not in repr(RooflineCostModel(LLAMA, H100))
    with pytest.raises(ConfigError, match="attention.kernel: 'eager' is not allowed; allowed: flash, materialized"):
        RooflineCostModel(LLAMA, H100, attention_kernel="eager")
    with pytest.raises(ConfigError, match="attention.kernel"):
        validate_scenario({"workload": WORKLOAD, "attention": {"kernel": "eager"}})


def test_flash_resolves_as_a_scenario_without_the_section_and_its_yaml_is_unchanged():
    bare = validate_scenario({"workload": WORKLOAD, "scheduler": {"max_model_len": 4096}})
    assert resolve(bare) == resolve(scenario("flash"))
    assert "attention" not in bare.to_yaml()
    assert "kernel: materialized" in scenario().to_yaml()


def test_the_largest_steps_scores_come_out_of_the_kv_budget():
    flash, mat = resolve(scenario("flash")), resolve(scenario())
    budget = 4096 + 256  # unchunked: a full-length prompt beside a full decode batch
    assert mat.max_num_batched_tokens == flash.max_num_batched_tokens == budget
    # S and P of 32 heads, every budget row against max_model_len keys, 4 bytes each (fp32).
    assert mat.score_bytes_per_gpu == 2 * HEADS * budget * 4096 * 4
    expected = kv_capacity(LLAMA, H100, max_num_batched_tokens=budget, max_num_seqs=256,
                           score_bytes=mat.score_bytes_per_gpu)
    assert mat.kv_capacity_tokens == expected.num_tokens
    assert flash.kv_capacity_tokens - mat.kv_capacity_tokens == pytest.approx(
        mat.score_bytes_per_gpu / expected.kv_bytes_per_token, abs=1)
    assert flash.score_bytes_per_gpu == 0 and flash.max_prompt_tokens_materialized is None


def test_the_longest_prompt_is_the_last_whose_scores_and_kv_fit():
    sc = scenario()
    longest = longest_prompt_tokens(sc, LLAMA, H100)
    assert resolve(sc).max_prompt_tokens_materialized == longest

    def room(n):  # KV tokens left beside one unchunked prompt of n tokens
        try:
            return kv_capacity(LLAMA, H100, max_num_batched_tokens=n, max_num_seqs=256,
                               score_bytes=2 * HEADS * n * n * 4).num_tokens
        except Exception:
            return -1
    assert room(longest) >= longest > room(longest + 1) - 1  # longest fits, longest + 1 does not
    assert room(longest + 1) < longest + 1
    # With FlashAttention only the KV bounds a prompt: the model's whole context fits on an H100.
    assert longest_prompt_tokens(scenario("flash"), LLAMA, H100) == LLAMA.max_context > longest


def test_an_unchunked_prompt_whose_scores_never_fit_is_refused_naming_the_limit():
    longest = longest_prompt_tokens(scenario(), LLAMA, H100)
    with pytest.raises(ConfigError) as err:
        scenario(max_model_len=32_768)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("attention.kernel: 'materialized' holds 2 score matrices of 32 heads")
    assert f"scheduler.max_model_len <= {longest:,}" in message and "chunked_prefill: true" in message
    validate_scenario({"workload": WORKLOAD, "attention": {"kernel": "flash"}, "scheduler": {"max_model_len": 32_768}})


def test_chunked_prefill_shrinks_the_default_budget_until_the_scores_fit():
    a100 = get_gpu("a100-40gb")
    raw = {"workload": WORKLOAD, "attention": {"kernel": "materialized"}, "hardware": {"gpu": "a100-40gb"},
           "scheduler": {"max_model_len": 65_536, "chunked_prefill": True}}
    d = resolve(validate_scenario(raw))
    assert 256 <= d.max_num_batched_tokens < 2048

    def fits(budget):  # the budget is the largest whose scores leave KV for one max_model_len sequence
        try:
            return kv_capacity(LLAMA, a100, max_num_batched_tokens=budget, max_num_seqs=256,
                               score_bytes=2 * HEADS * budget * 65_536 * 4).num_tokens >= 65_536
        except Exception:
            return False
    assert fits(d.max_num_batched_tokens) and not fits(d.max_num_batched_tokens + 1)
    assert d.kv_capacity_tokens >= 65_536
    assert d.score_bytes_per_gpu == 2 * HEADS * d.max_num_batched_tokens * 65_536 * 4
    # A budget the user gave is not shrunk: it is refused, naming the largest that fits.
    raw["scheduler"]["max_num_batched_tokens"] = 2048
    with pytest.raises(ConfigError, match=f"scheduler.max_num_batched_tokens <= {d.max_num_batched_tokens:,}"):
        validate_scenario(raw)


def test_a_static_batch_prefills_its_prompts_together():
    with pytest.raises(ConfigError, match="scheduler.max_batch_size <= "):
        scenario(batching="static", max_batch_size=64)
    d = resolve(scenario(batching="static", max_batch_size=4))
    assert d.score_bytes_per_gpu == 2 * HEADS * 4 * 4096 * 4096 * 4


def test_measured_cost_models_refuse_a_kernel_they_were_not_measured_with():
    for cost in ({"kind": "measured"}, {"kind": "roofline", "efficiencies": "learned"},
                 {"kind": "calibrated", "profile_device": "h100-sxm"}):
        raw = {"workload": WORKLOAD, "attention": {"kernel": "materialized"}, "cost_model": cost,
               "scheduler": {"max_model_len": 4096}}
        sc = validate_scenario(raw)
        with pytest.raises(ConfigError, match="attention.kernel: 'materialized' is not the kernel .* was measured "
                                              "with; allowed: 'flash'"):
            make_cost_model(sc)
        make_cost_model(validate_scenario({**raw, "attention": {"kernel": "flash"}}))
    assert make_cost_model(scenario()).attention_kernel == "materialized"


def test_a_profile_measured_with_materialized_scores_refuses_flash(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"format_version": 1, "shard": {},
                                                    "attention_kernel": "materialized"}))

    class Deployed:
        profile_dir = tmp_path
    sc = validate_scenario({"workload": WORKLOAD, "cost_model": {"kind": "calibrated", "profile_device": "h100-sxm"},
                            "scheduler": {"max_model_len": 4096}})
    with pytest.raises(ConfigError, match="attention.kernel: 'flash' is not the kernel profile .* allowed: "
                                          "'materialized'"):
        check_attention_kernel(sc, Deployed)
