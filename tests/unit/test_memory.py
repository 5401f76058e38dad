import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError, DoesNotFitError
from sim.model.catalog import GPUS, MODELS
from sim.model.memory import (
    activation_bytes,
    check_tensor_parallel,
    kv_bytes_for_sequence,
    kv_bytes_per_token,
    kv_capacity,
    weight_bytes,
    weight_bytes_per_gpu,
    weight_dtypes_for,
)
from sim.model.shapes import param_count
from sim.model.specs import ModelSpec

# GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads of 128, 2048 context.
GPT3_175B = ModelSpec(
    name="gpt3-175b",
    num_layers=96,
    hidden_size=12288,
    num_attention_heads=96,
    num_kv_heads=96,
    head_dim=128,
    ffn_size=4 * 12288,
    vocab_size=50257,
    max_context=2048,
    attention="mha",
    gated_mlp=False,
)

MQA_MODEL = ModelSpec(
    name="tiny-mqa",
    num_layers=4,
    hidden_size=512,
    num_attention_heads=8,
    num_kv_heads=1,
    head_dim=64,
    ffn_size=2048,
    vocab_size=1000,
    max_context=1024,
    attention="mqa",
)


def allowed_tp(model):
    allowed = []
    for tp in range(1, model.num_attention_heads + 1):
        try:
            check_tensor_parallel(model, tp)
        except ConfigError:
            continue
        allowed.append(tp)
    return allowed


@pytest.mark.parametrize(
    ("model", "kv_dtype", "expected"),
    [
        (MODELS["opt-13b"], "fp16", 819_200),  # vLLM paper (Kwon et al. 2023): 800 KB per token
        (GPT3_175B, "fp16", 4_718_592),  # 2 * 96 layers * 12288 * 2 bytes = 4.5 MiB
        (MODELS["llama-2-70b"], "bf16", 327_680),  # 2 * 80 * 8 KV heads * 128 * 2
        (MODELS["llama-3.1-8b"], "bf16", 131_072),  # 2 * 32 * 8 KV heads * 128 * 2
    ],
)
def test_kv_bytes_per_token_known_answers(model, kv_dtype, expected):
    assert kv_bytes_per_token(model, kv_dtype) == expected


def test_mqa_keeps_one_kv_head_replicated_across_ranks():
    per_token = 2 * 4 * 1 * 64 * 2
    assert kv_bytes_per_token(MQA_MODEL) == per_token
    assert kv_bytes_per_token(MQA_MODEL, tensor_parallel=4) == per_token


def test_mla_caches_one_latent_per_layer_on_every_rank():
    deepseek = MODELS["deepseek-v2-lite"]
    assert kv_bytes_per_token(deepseek) == 27 * (512 + 64) * 2
    assert kv_bytes_per_token(deepseek, tensor_parallel=4) == 27 * (512 + 64) * 2


@pytest.mark.parametrize("key", list(MODELS))
@pytest.mark.parametrize("kv_dtype", ["fp8", "int8"])
def test_one_byte_kv_halves_it(key, kv_dtype):
    model = MODELS[key]
    assert 2 * kv_bytes_per_token(model, kv_dtype) == kv_bytes_per_token(model, "bf16")


def test_tensor_parallel_splits_kv_heads_then_replicates_them():
    llama = MODELS["llama-3.1-8b"]
    assert kv_bytes_per_token(llama, tensor_parallel=2) == 131_072 // 2
    assert kv_bytes_per_token(llama, tensor_parallel=8) == 131_072 // 8
    # 16 ranks but 8 KV heads: each rank keeps one head.
    assert kv_bytes_per_token(llama, tensor_parallel=16) == 131_072 // 8


def test_sliding_window_caps_kv_per_sequence():
    mistral = MODELS["mistral-7b-v0.1"]
    per_token = kv_bytes_per_token(mistral)
    assert kv_bytes_for_sequence(mistral, 100) == 100 * per_token
    assert kv_bytes_for_sequence(mistral, 4096) == 4096 * per_token
    assert kv_bytes_for_sequence(mistral, 20_000) == 4096 * per_token
    llama = MODELS["llama-3.1-8b"]
    assert kv_bytes_for_sequence(llama, 20_000) == 20_000 * kv_bytes_per_token(llama)
    assert kv_bytes_for_sequence(llama, 20_000, "fp8", 2) == 20_000 * kv_bytes_per_token(llama, "fp8", 2)


def test_unknown_kv_dtype_is_rejected():
    with pytest.raises(ConfigError, match=r"^kv_dtype: unknown dtype 'fp6'; allowed: fp32, "):
        kv_bytes_per_token(MODELS["llama-3.1-8b"], "fp6")


@pytest.mark.parametrize("key", list(MODELS))
def test_bf16_weights_are_two_bytes_per_parameter(key):
    model = MODELS[key]
    assert weight_bytes(model, "bf16") == 2 * param_count(model)
    assert weight_bytes(model, "fp16") == weight_bytes(model, "bf16")


@pytest.mark.parametrize("key", list(MODELS))
def test_quantized_weights_are_smaller(key):
    model = MODELS[key]
    int4, int8, bf16 = (weight_bytes(model, d) for d in ("int4", "int8", "bf16"))
    assert int4 < int8 < bf16
    assert weight_bytes(model, "fp8") == int8
    # Scales (and int4 zero points) add a little; unquantized embeddings add more for big vocabularies.
    assert 0.5 < int8 / bf16 < 0.6
    assert 0.25 < int4 / bf16 < 0.4


def test_larger_quantization_groups_need_fewer_scales():
    llama = MODELS["llama-3.1-8b"]
    assert weight_bytes(llama, "int4", group_size=64) > weight_bytes(llama, "int4", group_size=128)


def test_per_gpu_share_times_tp_is_about_the_total():
    llama = MODELS["llama-3.1-70b"]
    total = weight_bytes(llama)
    share = weight_bytes_per_gpu(llama, "bf16", 8)
    assert share * 8 >= total  # replicated norms are stored on every rank
    assert share * 8 == pytest.approx(total, rel=1e-3)


def test_replicated_mla_latent_projection_stays_whole_on_each_rank():
    deepseek = MODELS["deepseek-v2-lite"]
    # kv_a_proj (2048 x 576 per layer) and the router are replicated, so the split is not exact.
    assert weight_bytes_per_gpu(deepseek, "bf16", 2) * 2 - weight_bytes(deepseek) >= 27 * 2048 * 576 * 2


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(list(MODELS)), data=st.data())
def test_weight_share_bounds(key, data):
    model = MODELS[key]
    dtype = data.draw(st.sampled_from(weight_dtypes_for(model)))
    tp = data.draw(st.sampled_from(allowed_tp(model)))
    total = weight_bytes(model, dtype)
    share = weight_bytes_per_gpu(model, dtype, tp)
    assert share <= total <= share * tp


def test_activations_grow_with_tokens_and_shrink_with_tp():
    llama = MODELS["llama-3.1-8b"]
    small = activation_bytes(llama, 2048, 256)
    large = activation_bytes(llama, 8192, 256)
    assert 0 < small < large
    assert activation_bytes(llama, 8192, 256, tensor_parallel=4) < large


def test_activation_peak_is_the_larger_of_the_forward_and_the_sampling():
    # Llama 3.1 8B, 8,192 tokens: the forward's peak holds the residual, the layer's input and gate_up's output
    # (2 x 14,336 wide), bf16; the sampler then holds the forward's output and fp32 logits of the sampled rows.
    llama = MODELS["llama-3.1-8b"]
    forward = (2 * 8192 * 4096 + 8192 * 28672) * 2  # 604 MB
    assert activation_bytes(llama, 8192, 256) == forward  # 67 MB + 256 rows x 128,256 x 4 = 198 MB: the forward
    sampling = 8192 * 4096 * 2 + 2048 * 128256 * 4  # 1.12 GB
    assert activation_bytes(llama, 8192, 2048) == sampling
    # Below the forward's peak, more rows cost nothing; above it, each row costs its logits.
    assert activation_bytes(llama, 8192, 300) == forward
    assert activation_bytes(llama, 8192, 2049) - sampling == 128256 * 4


def test_kv_capacity_llama_8b_on_h100():
    llama, h100 = MODELS["llama-3.1-8b"], GPUS["h100-sxm"]
    cap = kv_capacity(llama, h100)
    assert cap.usable_bytes == int(h100.hbm_bytes * 0.9)
    assert cap.weight_bytes == weight_bytes(llama)
    assert cap.activation_bytes == activation_bytes(llama, 8192, 256)
    assert cap.kv_bytes == cap.usable_bytes - cap.weight_bytes - cap.activation_bytes
    assert cap.num_tokens == cap.kv_bytes // 131_072
    # Roughly 60 GB of an 80 GB card is left for KV after 16 GB of weights: hundreds of thousands of tokens.
    assert 1e5 < cap.num_tokens < 1e6
    assert cap.num_blocks(16) == cap.num_tokens // 16


def test_kv_capacity_without_profiled_activations_is_the_fraction_less_the_weights():
    llama, h100 = MODELS["llama-3.1-8b"], GPUS["h100-sxm"]
    cap = kv_capacity(llama, h100, gpu_memory_utilization=0.835, profiled_activations=False)
    assert cap.activation_bytes == 0
    assert cap.kv_bytes == int(h100.hbm_bytes * 0.835) - weight_bytes(llama)
    assert kv_capacity(llama, h100, gpu_memory_utilization=0.835).kv_bytes == cap.kv_bytes - activation_bytes(
        llama, 8192, 256)


@pytest.mark.parametrize("tokens, utilization, binds", [
    (8192, 1.0, "floor"),  # 0.56 GiB of activations: 0.75 x them is under the 1 GiB floor
    (131072, 1.0, "fraction"),  # 9 GiB: 0.75 x them, 6.75 GiB, is the margin
    (8192, 0.9, "utilization"),  # 10% of the device is more than the margin: the share binds, as without one
])
def test_a_transient_margin_keeps_the_larger_of_its_floor_and_fraction_free_of_the_device(tokens, utilization, binds):
    # vLLM 0.34's measure_kv_cache_bytes: min(requested - used, free - max(1 GiB, 0.75 x peak)) - peak
    llama, h100 = MODELS["llama-3.1-8b"], GPUS["h100-sxm"]
    peak = activation_bytes(llama, tokens, 256)
    cap = kv_capacity(llama, h100, gpu_memory_utilization=utilization, max_num_batched_tokens=tokens,
                      transient_margin=(1 << 30, 0.75))
    margin = {"floor": 1 << 30, "fraction": -(-3 * peak // 4)}.get(binds)  # the fraction's bytes rounded up
    usable = int(h100.hbm_bytes * utilization) if margin is None else h100.hbm_bytes - margin
    assert cap.usable_bytes == usable
    assert cap.kv_bytes == usable - weight_bytes(llama) - peak
    without = kv_capacity(llama, h100, gpu_memory_utilization=utilization, max_num_batched_tokens=tokens)
    assert (cap.kv_bytes == without.kv_bytes) is (binds == "utilization")


def test_kv_capacity_responds_to_settings():
    llama, h100 = MODELS["llama-3.1-8b"], GPUS["h100-sxm"]
    base = kv_capacity(llama, h100)
    reserved = kv_capacity(llama, h100, reserve_bytes=10**9)
    assert base.kv_bytes - reserved.kv_bytes == 10**9
    assert kv_capacity(llama, h100, kv_dtype="fp8").num_tokens >= 2 * base.num_tokens
    assert kv_capacity(llama, h100, weight_dtype="int4").num_tokens > base.num_tokens
    tp2 = kv_capacity(llama, h100, tensor_parallel=2)
    assert tp2.kv_bytes_per_token == base.kv_bytes_per_token // 2
    assert tp2.num_tokens > 2 * base.num_tokens  # weights split too, leaving more room per GPU
    assert kv_capacity(llama, h100, gpu_memory_utilization=0.5).num_tokens < base.num_tokens


def test_llama_70b_bf16_does_not_fit_one_h100():
    llama, h100 = MODELS["llama-3.1-70b"], GPUS["h100-sxm"]
    with pytest.raises(DoesNotFitError) as err:
        kv_capacity(llama, h100)
    message = str(err.value)
    needed = weight_bytes(llama) + activation_bytes(llama, 8192, 256)
    assert "\n" not in message
    assert f"needs {needed:,} bytes per GPU" in message
    assert f"offers {int(h100.hbm_bytes * 0.9):,}" in message
    assert "llama-3.1-70b" in message and "h100-sxm" in message
    # Four-way tensor parallelism fits.
    assert kv_capacity(llama, h100, tensor_parallel=4).num_tokens > 0


@settings(max_examples=80, deadline=None)
@given(
    key=st.sampled_from(list(MODELS)),
    gpu=st.sampled_from(list(GPUS)),
    utilization=st.floats(0.05, 1.0),
    data=st.data(),
)
def test_kv_capacity_never_exceeds_usable_memory(key, gpu, utilization, data):
    model = MODELS[key]
    dtype = data.draw(st.sampled_from(weight_dtypes_for(model)))
    tp = data.draw(st.sampled_from(allowed_tp(model)))
    try:
        cap = kv_capacity(model, GPUS[gpu], tensor_parallel=tp, weight_dtype=dtype,
                          gpu_memory_utilization=utilization)
    except DoesNotFitError:
        return
    assert cap.kv_bytes > 0
    assert cap.num_tokens * cap.kv_bytes_per_token <= cap.kv_bytes
    assert cap.weight_bytes + cap.activation_bytes + cap.kv_bytes == cap.usable_bytes <= GPUS[gpu].hbm_bytes


@pytest.mark.parametrize(
    ("key", "tp", "allowed"),
    [
        ("llama-3.1-8b", 3, "allowed: 1, 2, 4, 8, 16, 32"),
        ("llama-3.1-8b", 0, "allowed: 1, 2, 4, 8, 16, 32"),
        ("qwen2.5-7b", 7, "allowed: 1, 2, 4, 28"),  # 7 divides 28 heads but neither divides nor is a multiple of 4
        ("qwen2.5-7b", 14, "allowed: 1, 2, 4, 28"),
        ("opt-13b", 16, "allowed: 1, 2, 4, 5, 8, 10, 20, 40"),
    ],
)
def test_invalid_tensor_parallel_is_one_line_naming_field_value_and_choices(key, tp, allowed):
    with pytest.raises(ConfigError) as err:
        check_tensor_parallel(MODELS[key], tp)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"hardware.tensor_parallel: {tp} ")
    assert message.endswith(allowed)


def test_valid_tensor_parallel_passes_and_field_is_configurable():
    check_tensor_parallel(MODELS["llama-3.1-70b"], 8)
    check_tensor_parallel(MODELS["llama-3.1-70b"], 16)  # KV heads replicated twice
    check_tensor_parallel(MODELS["deepseek-v2-lite"], 16)
    with pytest.raises(ConfigError, match=r"^tp: 3 "):
        check_tensor_parallel(MODELS["llama-3.1-70b"], 3, field="tp")
