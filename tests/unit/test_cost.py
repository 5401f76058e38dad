"""Roofline physics: bounds and slopes the formulas imply."""

import pytest

from sim.core.step_plan import StepPlan
from sim.cost.roofline import RooflineCostModel
from sim.model.catalog import get_gpu, get_model
from sim.model.memory import DTYPE_BYTES, kv_bytes_per_token, weight_bytes_per_gpu
from sim.model.shapes import param_count


def decode_plan(batch: int, context: int) -> StepPlan:
    return StepPlan(num_decode_seqs=batch, decode_context_tokens=batch * context, num_sampled_seqs=batch)


def prefill_plan(tokens: int, context: int = 0) -> StepPlan:
    return StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[tokens], prefill_context_tokens=[context],
                    num_sampled_seqs=1)


def test_batch1_decode_is_never_faster_than_reading_the_weights():
    model, gpu = get_model("llama-2-7b"), get_gpu("h100-sxm")
    cost = RooflineCostModel(model, gpu, step_overhead_s=0.0, memory_efficiency=1.0, compute_efficiency=1.0)
    bound = weight_bytes_per_gpu(model, "bf16", 1) / gpu.hbm_bytes_per_s
    t = cost.step_time(decode_plan(1, 1))
    assert t >= bound * 0.97  # the embedding table is not read in a decode step; everything else is
    assert t >= (2 * param_count(model) - 2 * model.vocab_size * model.hidden_size) / gpu.hbm_bytes_per_s


def test_decode_time_grows_with_batch_and_context_as_the_formulas_say():
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    cost = RooflineCostModel(model, gpu, step_overhead_s=0.0)
    # Memory-bound attention: each extra context token of each sequence reads its KV once per step.
    t1, t2 = cost.step_time(decode_plan(8, 1000)), cost.step_time(decode_plan(8, 3000))
    expected = 8 * 2000 * kv_bytes_per_token(model) / (gpu.hbm_bytes_per_s * gpu.memory_efficiency)
    assert t2 - t1 == pytest.approx(expected, rel=1e-6)
    times = [cost.step_time(decode_plan(b, 512)) for b in (1, 8, 64, 256)]
    assert times == sorted(times) and times[-1] > times[0]
    # At small batch the step is weight-bound: going from 1 to 8 sequences costs far less than 8x.
    assert times[1] < 1.5 * times[0]


def test_prefill_becomes_compute_bound_and_scales_linearly():
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    cost = RooflineCostModel(model, gpu, step_overhead_s=0.0, compute_efficiency=1.0)
    t4k, t8k = cost.step_time(prefill_plan(4096)), cost.step_time(prefill_plan(8192))
    linear_flops_per_token = 2 * (param_count(model) - model.vocab_size * model.hidden_size * 2)
    assert t4k >= 4096 * linear_flops_per_token / gpu.bf16_flops_per_s
    assert 2.0 <= t8k / t4k <= 2.3  # linear layers double; causal attention grows faster


def test_tensor_parallel_splits_work_and_adds_allreduce():
    model, gpu = get_model("llama-3.1-70b"), get_gpu("h100-sxm")
    tp1 = RooflineCostModel(model, gpu, tensor_parallel=1, step_overhead_s=0.0)
    tp4 = RooflineCostModel(model, gpu, tensor_parallel=4, step_overhead_s=0.0)
    plan = decode_plan(32, 1000)
    t1, t4 = tp1.step_time(plan), tp4.step_time(plan)
    assert t4 < t1 / 3  # nearly 4x less to read per GPU
    assert t4 > t1 / 4  # ... but the all-reduces are not free
    # Shrinking the link bandwidth slows TP steps and only TP steps.
    slow = gpu.model_copy(update={"interconnect_bytes_per_s": gpu.interconnect_bytes_per_s / 100})
    assert RooflineCostModel(model, slow, tensor_parallel=4, step_overhead_s=0.0).step_time(plan) > t4
    assert RooflineCostModel(model, slow, tensor_parallel=1, step_overhead_s=0.0).step_time(plan) == t1

def test_each_gpu_moves_only_its_shards_activations():
    # Llama-3.1-8B (hidden 4096, 32 query and 8 KV heads of 128, FFN 14336) at TP 2, by hand: the column-split qkv
    # writes (4096 + 2 x 1024) / 2 = 3072 features a token, gate_up 2 x 14336 / 2; the row-split o_proj reads
    # 4096 / 2, down 14336 / 2. Each matrix reads its input and writes its output once a token, in bf16.
    from sim.cost.roofline_kernel import ACT_BYTES
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    roof = RooflineCostModel(model, gpu, tensor_parallel=2)
    [(layers, matmuls)] = roof.groups
    assert layers == 32
    assert [(m.in_features, m.out_features) for m in matmuls] == [(4096, 3072), (2048, 4096), (4096, 14336),
                                                                  (7168, 4096)]
    assert (roof.lm_head.in_features, roof.lm_head.out_features) == (4096, 128256 // 2)
    # One layer's matmuls at n tokens, as the kernel prices them: the shard's weights read once, its activations in
    # and out once a token.
    from sim.cost.roofline_kernel import _matmuls
    pack = roof._pack()
    n = 1000
    _, _, layer_bytes = _matmuls(pack[3], 0, 4, n, 0, 1e15, 1e12)
    weights = 4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096  # the whole layer's, half on each GPU
    activations = (4096 + 3072) + (2048 + 4096) + (4096 + 14336) + (7168 + 4096)
    assert layer_bytes == pytest.approx(weights / 2 * 2.0 + n * activations * ACT_BYTES, rel=1e-12)


def test_quantized_weights_and_kv_read_fewer_bytes():
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    plan = decode_plan(16, 2000)
    bf16 = RooflineCostModel(model, gpu).step_cost(plan)
    int4 = RooflineCostModel(model, gpu, weight_dtype="int4").step_cost(plan)
    fp8kv = RooflineCostModel(model, gpu, kv_dtype="fp8").step_cost(plan)
    assert int4.bytes < bf16.bytes and int4.time_s < bf16.time_s
    assert fp8kv.bytes < bf16.bytes


def test_moe_reads_only_the_experts_it_routes_to():
    model, gpu = get_model("mixtral-8x7b"), get_gpu("h100-sxm")
    cost = RooflineCostModel(model, gpu, tensor_parallel=2)
    one, many = cost.step_cost(decode_plan(1, 100)), cost.step_cost(decode_plan(256, 100))
    # One token touches 2 of 8 experts; 256 tokens touch essentially all of them.
    assert many.bytes > 2.5 * one.bytes


def test_sliding_window_caps_attention_context():
    model, gpu = get_model("mistral-7b-v0.1"), get_gpu("h100-sxm")
    cost = RooflineCostModel(model, gpu)
    assert cost.step_time(decode_plan(8, 8000)) == cost.step_time(decode_plan(8, 16000))
    assert cost.step_time(decode_plan(8, 2000)) < cost.step_time(decode_plan(8, 4000))


def test_overhead_and_repr():
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100-sxm")
    a = RooflineCostModel(model, gpu, step_overhead_s=0.0)
    b = RooflineCostModel(model, gpu, step_overhead_s=0.004)
    assert b.step_time(decode_plan(4, 100)) - a.step_time(decode_plan(4, 100)) == pytest.approx(0.004)
    assert "llama-3.1-8b" in repr(a) and "h100" in repr(a).lower()


def test_each_matrix_is_read_at_its_own_dtypes_width():
    from sim.cost.roofline_kernel import M_BYTES_PER_PARAM
    from sim.model.memory import MXFP4_PARAM_BYTES
    gpu = get_gpu("h100-sxm")
    # mxfp4: the routed experts at 4 bits and a byte per 32 weights, attention and router at 16 bits
    [(_, mms)] = RooflineCostModel(get_model("mixtral-8x7b"), gpu, weight_dtype="mxfp4").groups
    assert {m.bytes_per_param for m in mms if m.num_experts > 1} == {MXFP4_PARAM_BYTES} == {0.53125}
    assert {m.bytes_per_param for m in mms if m.num_experts == 1} == {2.0}
    # the LM head stays 16-bit under every scheme (as vLLM and ModelOpt leave it): one sampled row reads it whole
    for dtype in ("fp8", "int4"):
        llama = RooflineCostModel(get_model("llama-3.1-8b"), gpu, weight_dtype=dtype)
        assert llama._pack()[4][M_BYTES_PER_PARAM] == 2.0
        assert {m.bytes_per_param for _, mms in llama.groups for m in mms} == {DTYPE_BYTES[dtype]}
