"""DeepSeek sparse attention (DeepSeek-V3.2): the indexer's weights and keys, the roofline's price of a step by hand,
the cost models that refuse it, and SGLang's rules for it (sim/config/engines/sparse_attention.py)."""

import numpy as np
import pytest

from sim.config.cost_choice import default_cost_model
from sim.config.files import validate_scenario
from sim.cost import roofline_kernel as rk
from sim.cost.roofline import RooflineCostModel
from sim.errors import ConfigError
from sim.model.catalog import get_gpu, get_model
from sim.model.memory import kv_bytes_per_token
from sim.model.shapes import param_count

V32, V3 = get_model("deepseek-v3.2"), get_model("deepseek-v3")
BASE = {"model": "deepseek-v3.2", "hardware": {"gpu": "h200", "tensor_parallel": 8},
        "quantization": {"weights": "fp8"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 2.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 20}}


def test_the_config_reads_the_indexer_and_nothing_else_changes_from_v3():
    assert (V32.index_topk, V32.index_n_heads, V32.index_head_dim, V32.model_type) == (2048, 64, 128, "deepseek_v32")
    assert V32.index_key_bytes == 128 + 4  # FP8 values, one fp32 scale per 128 (NSATokenToKVPool)
    assert V32.model_copy(update={"index_topk": 0, "index_n_heads": 0, "index_head_dim": 0, "name": V3.name,
                                  "model_type": V3.model_type, "not_modelled": V3.not_modelled}) == V3


def test_the_indexer_adds_its_three_projections_to_every_layer():
    # wq_b (q_lora_rank -> heads x dim), wk (hidden -> dim), weights_proj (hidden -> heads): SGLang's Indexer
    assert param_count(V32) - param_count(V3) == 61 * (1536 * 64 * 128 + 7168 * 128 + 7168 * 64)


@pytest.mark.parametrize("kv_dtype, latent_bytes", [("bf16", 2), ("fp8", 1)])
def test_a_tokens_kv_holds_the_latent_and_the_indexer_key_on_every_gpu(kv_dtype, latent_bytes):
    for tp in (1, 8):
        assert kv_bytes_per_token(V32, kv_dtype, tp) == 61 * ((512 + 64) * latent_bytes + 132)
        assert kv_bytes_per_token(V32, kv_dtype, tp, indexer=False) == kv_bytes_per_token(V3, kv_dtype, tp)


def _price():
    model = RooflineCostModel(V32, get_gpu("h200"), tensor_parallel=8, weight_dtype="fp8", fp8_compute=True)
    return model, model._build_pack()[0]


@pytest.mark.parametrize("context", [1000, 2048, 5000])
def test_a_decode_attends_its_top_k_keys_and_the_indexer_scores_every_one(context):
    model, price = _price()
    none = np.zeros(0, dtype=np.int64)
    parts = rk.attention_parts(price, 0, none, none, 0, 1, float(context), 1)
    attended = min(context, 2048)
    f = attended * model.attn_flops_per_pair
    b = attended * model.kv_bytes_per_token_layer + model.q_bytes_per_token
    fi = context * 2 * 64 * (128 + 1)  # each head's q.k, then its ReLU and the heads' weighted sum
    bi = context * 132 + 64 * (128 + 4)  # every key's indexer entry, the FP8 query and the head weights
    bps = model.bytes_per_s
    seconds = max(f / model.flops_per_s, b / bps) + max(fi / model.index_flops_per_s, bi / bps)
    assert parts[3:] == pytest.approx((seconds, f + fi, b + bi), rel=1e-12)
    assert parts[:3] == (0.0, 0.0, 0.0)


def test_a_prefill_chunk_attends_at_most_top_k_keys_a_row_and_the_indexer_the_whole_causal_triangle():
    model, price = _price()
    chunk, context = 512, 3000
    parts = rk.attention_parts(price, chunk, np.array([chunk]), np.array([context]), 1, 0, 0.0, 1)
    pairs = chunk * min(context + (chunk + 1) / 2, 2048)
    f = pairs * model.attn_flops_per_pair
    b = 2048 * model.kv_bytes_per_token_layer + chunk * model.q_bytes_per_token
    fi = chunk * (context + (chunk + 1) / 2) * 2 * 64 * 129
    bi = (context + chunk) * 132 + chunk * 64 * 132
    bps = model.bytes_per_s
    seconds = max(f / model.flops_per_s, b / bps) + max(fi / model.index_flops_per_s, bi / bps)
    assert parts[:3] == pytest.approx((seconds, f + fi, b + bi), rel=1e-12)


def test_the_default_is_the_engines_measured_modules_where_the_gpus_tables_price_them_else_the_learned_roofline():
    w8a8 = {**BASE, "quantization": {"weights": "fp8", "fp8_compute": True, "fp8_block_scales": True}}
    spec, why = default_cost_model(w8a8)
    assert spec == {"kind": "measured", "on_missing": "error", "overhead": {"engine": "vllm-cudagraph"}}
    assert why.startswith("measured: vllm kernel tables of h200")
    # per-tensor fp8 projections: the modules measured block-scaled ones only
    spec, why = default_cost_model({**w8a8, "quantization": {"weights": "fp8", "fp8_compute": True}})
    assert spec["efficiencies"] == "learned" and why.endswith(
        "(no whole-step profile; measured tables: deepseek-v3.2's sparse attention (index_topk 2048) with 16 heads per "
        "GPU, fp8 projections and a bf16 KV cache: not in the DSA modules in the vllm tables of h200)")
    # SGLang's own DSA rows price its tensor-parallel run; at 128 heads (data-parallel ranks) 4 of its rows sit below
    # their projections' price, so vLLM's price those ranks
    tp8 = {**w8a8, "hardware": {"gpu": "h200"}, "engine": {"name": "sglang", "version": "0.5.6.post2", "tp_size": 8}}
    assert validate_scenario(tp8).cost_model.tables == "sglang"
    ranks = {**w8a8, "hardware": {"gpu": "h200"},
             "engine": {"name": "sglang", "version": "0.5.6.post2", "tp_size": 8, "dp_size": 8,
                        "enable_dp_attention": True}}
    assert validate_scenario(ranks).cost_model.kind == "measured"
    assert validate_scenario(ranks).cost_model.tables == "vllm"
    # The B200's fp8_block modules measured below their projections' price (the GEMM rows and the modules disagree)
    b200 = {**BASE, "hardware": {"gpu": "b200", "tensor_parallel": 8},
            "quantization": {"weights": "fp8", "fp8_compute": True, "fp8_block_scales": True}}
    spec, why = default_cost_model(b200)
    assert spec["efficiencies"] == "learned"
    assert why.endswith("(no whole-step profile; measured tables: deepseek-v3.2's sparse attention (index_topk "
                        "2048) with 16 heads per GPU, fp8_block projections and a bf16 KV cache: not in the DSA "
                        "modules in the vllm tables of b200)")
    from sim.run import make_cost_model
    fp8_kv = {**b200, "quantization": {**b200["quantization"], "kv_cache": "fp8"}, "cost_model": {"kind": "measured"}}
    with pytest.raises(ConfigError, match=r"^cost_model\.kind 'measured' cannot price deepseek-v3\.2's sparse "
                                          r"attention \(index_topk 2048\): 4 of the 305 DSA module rows in the vllm "
                                          r"tables of b200 \(fp8_block projections, 16 heads, fp8 KV\) measured at or "
                                          r"below this model's price of their projections; allowed: "
                                          r"cost_model\.kind 'roofline'$"):
        make_cost_model(validate_scenario(fp8_kv))
    with pytest.raises(ConfigError, match=r"^cost_model\.kind 'measured' cannot price deepseek-v3\.2's sparse "
                                          r"attention \(index_topk 2048\), which is not in the trtllm tables of h200 "
                                          r"\(vLLM's and SGLang's DSA module rows where measured\); allowed: "
                                          r"cost_model\.kind 'roofline'$"):
        make_cost_model(validate_scenario({**w8a8, "cost_model": {"kind": "measured", "tables": "trtllm"}}))


def _measured_v32(weights="fp8", kv="bf16"):
    from sim.cost.measured import MeasuredCostModel
    return MeasuredCostModel(V32, get_gpu("h200"), tensor_parallel=8, weight_dtype=weights, kv_dtype=kv,
                             fp8_compute=weights == "fp8", fp8_block=weights == "fp8")


@pytest.mark.parametrize(("weights", "kv"), [("fp8", "bf16"), ("bf16", "bf16"), ("fp8", "fp8")])
def test_vllms_sparse_attention_block_costs_its_measured_module_at_every_measured_point(weights, kv):
    """Known answer: V3.2's attention is vLLM's whole DSA module rows less this model's prices of the module's
    projections, the indexer's among them, so at a measured point the block costs the module's measured time."""
    from sim.cost.measured import DSA_MODULE_PROJECTIONS
    cost = _measured_v32(weights, kv)
    assert "sparse attention" in cost.source and "from the whole-module rows in the vllm tables" in repr(cost)
    gemm = "fp8_block" if weights == "fp8" else "bf16"
    inside = DSA_MODULE_PROJECTIONS["vllm"]
    projections = lambda tokens: sum(cost._linear_by_name[p](tokens) for p in inside)  # noqa: E731
    t = cost.tables
    gen = t.generation_dsa_module
    gen = gen[(gen.kv_dtype == kv) & (gen.gemm_dtype == gemm) & (gen.num_heads == 16)]
    for batch, tokens in ((1, 131072), (64, 4096), (512, 2048)):
        want = gen[(gen.batch_size == batch) & (gen.kv_tokens == tokens)]["latency_ms"].iloc[0] * 1e-3
        assert projections(batch) + cost._decode(batch, tokens) == pytest.approx(want, rel=1e-12)
    ctx = t.context_dsa_module
    ctx = ctx[(ctx.kv_dtype == kv) & (ctx.gemm_dtype == gemm) & (ctx.num_heads == 16)]
    for batch, isl in ((1, 32768), (4, 2048), (16, 512)):
        want = ctx[(ctx.batch_size == batch) & (ctx.isl == isl)]["latency_ms"].iloc[0] * 1e-3
        assert projections(batch * isl) + cost._prefill(batch, isl) == pytest.approx(want, rel=1e-12)
    # Decode steps of the same batch differ only in attention: by the layers x the two modules' difference.
    from sim.core.step_plan import StepPlan
    step = {k: cost.step_time(StepPlan(num_decode_seqs=64, decode_context_tokens=64 * k, num_sampled_seqs=64))
            for k in (1024, 16384)}
    row = {k: gen[(gen.batch_size == 64) & (gen.kv_tokens == k)]["latency_ms"].iloc[0] * 1e-3 for k in (1024, 16384)}
    assert step[16384] - step[1024] == pytest.approx(V32.num_layers * (row[16384] - row[1024]), rel=1e-9)


@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_sglangs_sparse_attention_block_costs_its_measured_module_at_every_measured_point(kv):
    """Known answer: SGLang's DSA rows were timed without the fused q_a / kv_a projection (its collector feeds random
    latents), so the block less that projection costs the row at every measured point: dense MHA prompts (up to the
    top-k's 2,048 tokens), sparse ones past them, and decodes up to the batch its collector graphed."""
    from sim.cost.measured import DSA_MODULE_PROJECTIONS, MeasuredCostModel
    cost = MeasuredCostModel(V32, get_gpu("h200"), tensor_parallel=8, weight_dtype="fp8", kv_dtype=kv,
                             tables="sglang", fp8_compute=True, fp8_block=True)
    assert "sglang_dsa_dense_mha_fa3" in repr(cost) and "in the sglang tables of h200" in repr(cost)
    inside = DSA_MODULE_PROJECTIONS["sglang"]
    assert not {"q_a_proj", "kv_a_proj"} & set(inside) and set(inside) < set(cost._linear_by_name)
    projections = lambda tokens: sum(cost._linear_by_name[p](tokens) for p in inside)  # noqa: E731
    t = cost.tables
    gen = t.generation_dsa_module
    gen = gen[(gen.kv_dtype == kv) & (gen.gemm_dtype == "fp8_block") & (gen.num_heads == 16)]
    assert gen["batch_size"].max() == 256
    for batch, tokens in ((1, 131073), (64, 4097), (256, 1025)):
        want = gen[(gen.batch_size == batch) & (gen.kv_tokens == tokens)]["latency_ms"].iloc[0] * 1e-3
        assert projections(batch) + cost._decode(batch, tokens) == pytest.approx(want, rel=1e-12)
    ctx = t.context_dsa_module
    ctx = ctx[(ctx.kv_dtype == kv) & (ctx.gemm_dtype == "fp8_block") & (ctx.num_heads == 16)]
    for batch, isl in ((1, 8192), (2, 4096), (4, 2048), (16, 512)):
        want = ctx[(ctx.batch_size == batch) & (ctx.isl == isl)]["latency_ms"].iloc[0] * 1e-3
        assert projections(batch * isl) + cost._prefill(batch, isl) == pytest.approx(want, rel=1e-12)


def test_a_steps_prefill_chunks_run_as_one_call_priced_as_alike_fresh_prompts_of_their_tokens_and_flops():
    from sim.cost import measured_kernel as mk
    from sim.core.step_plan import StepPlan
    a, k, c = 1000.0, 2048.0, 10.0
    # the top-k caps each row's keys (the roofline's mean-row count, `chunk_pairs`); the indexer scores every pair
    assert mk.dsa_flops(a, k, c, 512.0, 3000.0) == a * 512 * 2048 + c * 512 * (3000 + 513 / 2)
    assert mk.dsa_flops(a, k, c, 1000.0, 0.0) == (a + c) * 1000 * 1001 / 2
    # alike fresh prompts are themselves; a chunk far into its context, one prompt of as many FLOPs
    assert mk.dsa_uniform_batch(a, k, c, 3 * 700.0, 3 * mk.dsa_flops(a, k, c, 700.0, 0.0)) == pytest.approx((3, 700))
    prompts, length = mk.dsa_uniform_batch(a, k, c, 512.0, mk.dsa_flops(a, k, c, 512.0, 30000.0))
    assert prompts == 1.0 and length > 512
    assert mk.dsa_flops(a, k, c, length, 0.0) == pytest.approx(mk.dsa_flops(a, k, c, 512.0, 30000.0), rel=1e-12)

    cost = _measured_v32()
    s = cost._build_pack()[1][0]
    numbers = s[mk.P_PF_A], s[mk.P_PF_B], s[mk.P_PF_C]

    def attention_over(chunks, contexts):  # a step's time less the same tokens as one fresh prompt's
        plan = StepPlan(prefill_request_ids=list(range(len(chunks))), prefill_chunk_tokens=chunks,
                        prefill_context_tokens=contexts)
        one = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[sum(chunks)], prefill_context_tokens=[0])
        return (cost.step_time(plan) - cost.step_time(one)) / V32.num_layers + cost._prefill(1, sum(chunks))
    # three fresh 1024-token prompts: the module row of a batch of 3 (one call), not three calls of one
    assert attention_over([1024] * 3, [0] * 3) == pytest.approx(cost._prefill(3, 1024), rel=1e-9)
    assert cost._prefill(3, 1024) < 3 * cost._prefill(1, 1024)
    for chunks, contexts in (([300, 2000, 45], [0, 0, 0]), ([4096], [12288]), ([512, 100], [20000, 0])):
        tokens = float(sum(chunks))
        flops = sum(mk.dsa_flops(*numbers, float(n), float(x)) for n, x in zip(chunks, contexts))
        prompts, length = mk.dsa_uniform_batch(*numbers, tokens, flops)
        # the batch runs the chunks' FLOPs, and their tokens where at least one prompt does
        assert prompts * mk.dsa_flops(*numbers, length, 0.0) == pytest.approx(flops, rel=1e-12)
        assert prompts * length == pytest.approx(tokens, rel=1e-12) if prompts > 1 else length >= tokens
        assert attention_over(chunks, contexts) == pytest.approx(cost._prefill(prompts, length), rel=1e-9)
    # both sides of the top-k's knee (prompts of 2 x topk - 1 tokens), in both forms
    for length in (100.0, 4095.0, 9000.0):
        for prompts in (1.0, 5.0):
            got = mk.dsa_uniform_batch(a, k, c, prompts * length, prompts * mk.dsa_flops(a, k, c, length, 0.0))
            assert got == pytest.approx((prompts, length), rel=1e-12)
    # a chunk past the knee far into its context: the one prompt's FLOPs on the quadratic's far side
    prompts, length = mk.dsa_uniform_batch(a, k, c, 4096.0, mk.dsa_flops(a, k, c, 4096.0, 50000.0))
    assert prompts == 1.0 and length > 4095 and mk.dsa_flops(a, k, c, length, 0.0) == pytest.approx(
        mk.dsa_flops(a, k, c, 4096.0, 50000.0), rel=1e-12)


def test_the_learned_roofline_adds_the_indexer_at_the_roofline_peaks_to_its_capped_attention():
    from sim.cost.learned import LearnedRooflineCostModel
    from sim.core.step_plan import StepPlan
    gpu = get_gpu("h200")
    kw = dict(tensor_parallel=8, weight_dtype="fp8", fp8_compute=True)
    sparse, catalog = LearnedRooflineCostModel(V32, gpu, **kw), RooflineCostModel(V32, gpu, **kw)
    none = np.zeros(0, dtype=np.int64)
    price = catalog._build_pack()[0]

    def indexer_s(context):  # every layer's
        return V32.num_layers * rk.indexer_parts(price, 0, none, none, 0, 1, float(context), 1)[3]

    def step_s(context):
        return sparse.step_cost(StepPlan(num_decode_seqs=1, decode_context_tokens=context, num_sampled_seqs=1)).time_s

    # past the top-k cap only the indexer grows, at the catalog roofline's peaks; below it the attention grows too
    for context in (3000, 5000, 9000):
        assert step_s(context) - step_s(2048) == pytest.approx(indexer_s(context) - indexer_s(2048), rel=1e-9)
    assert step_s(2048) - step_s(1000) > indexer_s(2048) - indexer_s(1000) > 0


@pytest.mark.parametrize("learned", [False, True])
def test_a_swapped_token_moves_its_latent_and_its_indexer_key_over_the_host_link(learned):
    from sim.cost.learned import LearnedRooflineCostModel
    from sim.core.step_plan import StepPlan
    gpu = get_gpu("h200")
    model = (LearnedRooflineCostModel if learned else RooflineCostModel)(V32, gpu, tensor_parallel=8,
                                                                          weight_dtype="fp8", fp8_compute=True)
    plain = StepPlan(num_decode_seqs=4, decode_context_tokens=4000, num_sampled_seqs=4)
    swapped = StepPlan(num_decode_seqs=4, decode_context_tokens=4000, num_sampled_seqs=4, swap_out_tokens=300)
    seconds = 300 * 61 * ((512 + 64) * 2 + 132) / gpu.host_link_bytes_per_s  # bf16 latent, FP8 key, every layer
    assert model.step_cost(swapped).time_s - model.step_cost(plain).time_s == pytest.approx(seconds, rel=1e-9)


@pytest.mark.parametrize("engine", [{"name": "vllm", "version": "0.12.0"}, {"name": "vllm", "version": "0.14.0"},
                                    {"name": "trtllm", "version": "1.2.0rc5"}, {"name": "lmdeploy", "version": "0.10.0"},
                                    {"name": "sglang", "version": "0.5.3rc0"}, {"name": "sglang", "version": "0.5.8"}])
def test_an_engine_whose_rules_for_it_were_not_read_refuses_it(engine):
    with pytest.raises(ConfigError, match=r"^engine\.version: .* is not modelled for deepseek-v3\.2's sparse attention "
                                          r"\(index_topk 2048: its engine rules were read for sglang 0\.5\.3 to "
                                          r"before 0\.5\.8 and vllm 0\.13\.0 to before 0\.14\.0 only\); allowed: "
                                          r"engine sglang 0\.5\.3 to before 0\.5\.8, vllm 0\.13\.0 to before "
                                          r"0\.14\.0, or no engine$"):
        validate_scenario({**BASE, "engine": engine})


@pytest.mark.parametrize("version", ["0.5.3", "0.5.4", "0.5.5.post3", "0.5.6", "0.5.6.post2", "0.5.7"])
@pytest.mark.parametrize("gpu, kv", [("h200", "bf16"), ("b200", "fp8")])
def test_sglang_pages_its_kv_by_64_tokens_in_bf16_before_blackwell_and_fp8_on_it(version, gpu, kv):
    sc = validate_scenario({**BASE, "hardware": {"gpu": gpu},
                            "engine": {"name": "sglang", "version": version, "page_size": 16, "tp_size": 8}})
    assert (sc.kv_cache.block_size, sc.quantization.kv_cache) == (64, kv)
    assert any("--page-size 16 replaced by 64" in note for note in sc.engine.notes)
    given = validate_scenario({**BASE, "hardware": {"gpu": gpu},
                               "engine": {"name": "sglang", "version": version, "kv_cache_dtype": "fp8_e4m3",
                                          "tp_size": 8}})
    assert given.quantization.kv_cache == "fp8"


def test_sglang_tp_alone_is_plain_tensor_parallelism_and_dp_8_eight_ranks_of_one_gpu():
    plain = validate_scenario({**BASE, "engine": {"name": "sglang", "version": "0.5.6.post2", "tp_size": 8,
                                                  "enable_dp_attention": True}})
    assert (plain.hardware.tensor_parallel, plain.hardware.num_replicas, plain.hardware.lockstep) == (8, 1, None)
    ranks = validate_scenario({**BASE, "hardware": {"gpu": "h200"},
                               "engine": {"name": "sglang", "version": "0.5.6.post2", "tp_size": 8, "dp_size": 8,
                                          "enable_dp_attention": True}})
    assert (ranks.hardware.tensor_parallel, ranks.hardware.num_replicas) == (1, 8)
    assert ranks.hardware.lockstep.expert_exchange == "dp_attention"


def _sglang(version, **flags):
    return validate_scenario({**BASE, "hardware": {"gpu": "h200"},
                              "engine": {"name": "sglang", "version": version, "tp_size": 8, **flags}})


@pytest.mark.parametrize("version", ["0.5.3", "0.5.3.post3", "0.5.4", "0.5.4.post2", "0.5.5", "0.5.5.post3"])
def test_sglang_to_0_5_5_runs_the_attention_data_parallel_over_every_gpu_whatever_dp_says(version):
    forced, given_dp = _sglang(version), _sglang(version, dp_size=2, enable_dp_attention=True)
    for sc in (forced, given_dp):
        assert (sc.hardware.tensor_parallel, sc.hardware.num_replicas) == (1, 8)
        assert sc.hardware.lockstep.expert_exchange == "dp_attention"
        assert sc.scheduler.new_token_ratio.init == pytest.approx(0.7 * 0.3)  # schedule_conservativeness x 0.3
    assert any("--dp 2 replaced by --tp 8" in note for note in given_dp.engine.notes)


def test_the_forced_ranks_are_0_5_6s_given_ones_with_the_memory_rule_read_on_the_flags_as_given():
    # 0.5.5's memory rule ran before the rule set the flag: no dp-attention reserve (0.5.6 reserves one for its flag)
    forced, plain = _sglang("0.5.5.post3"), _sglang("0.5.6")
    given = _sglang("0.5.6", dp_size=8, enable_dp_attention=True)
    assert forced.kv_cache.gpu_memory_utilization == plain.kv_cache.gpu_memory_utilization
    assert given.kv_cache.gpu_memory_utilization < plain.kv_cache.gpu_memory_utilization
    assert forced.hardware == given.hardware
    assert forced.scheduler.max_num_batched_tokens == given.scheduler.max_num_batched_tokens  # the chunk // 8
    assert forced.scheduler.new_token_ratio == given.scheduler.new_token_ratio


def test_sglang_0_5_3_alone_sets_the_memory_fraction_to_0_8():
    assert _sglang("0.5.3").kv_cache.gpu_memory_utilization == 0.8
    given = _sglang("0.5.3", mem_fraction_static=0.7)
    assert given.kv_cache.gpu_memory_utilization == 0.8
    assert any("--mem-fraction-static 0.7 replaced by 0.8" in note for note in given.engine.notes)
    assert _sglang("0.5.3.post1", mem_fraction_static=0.7).kv_cache.gpu_memory_utilization == 0.7


def test_sglang_to_0_5_5_needs_its_own_tp_to_run_the_forced_ranks():
    with pytest.raises(ConfigError, match=r"^engine\.tp_size: missing; SGLang 0\.5\.4 runs deepseek-v3\.2's attention "
                                          r"data-parallel over its --tp GPUs \(dp_size = tp_size, server_args\.py\); "
                                          r"allowed: --tp 8 in the engine's flags, with hardware\.tensor_parallel left "
                                          r"out$"):
        validate_scenario({**BASE, "engine": {"name": "sglang", "version": "0.5.4"}})


def _vllm(**flags):
    return validate_scenario({**BASE, "engine": {"name": "vllm", "version": "0.13.0", **flags}})


def test_vllm_pages_by_64_tokens_whatever_block_size_says_and_keeps_the_latent_in_bf16():
    sc = _vllm(block_size=16)
    assert (sc.kv_cache.block_size, sc.quantization.kv_cache) == (64, "bf16")
    assert any("--block-size 16 replaced by 64" in note for note in sc.engine.notes)
    assert _vllm(kv_cache_dtype="bfloat16").quantization.kv_cache == "bf16"


@pytest.mark.parametrize("flags, max_len, tokens", [({}, 163840, 8192),
                                                    ({"max_model_len": 32768, "max_num_batched_tokens": 4096},
                                                     32768, 4096)])
def test_vllm_sets_aside_the_indexers_prefill_workspace_and_the_top_k_index_buffer(flags, max_len, tokens):
    # 40 x max_model_len keys of 128 fp8 values and a 4-byte scale; a step's tokens x 2048 int32 indices
    assert _vllm(**flags).kv_cache.reserve_bytes == 40 * max_len * 132 + tokens * 2048 * 4


@pytest.mark.parametrize("where", ["flag", "scenario"])
def test_vllm_s_fp8_kv_layout_for_it_is_refused_in_one_line(where):
    raw = {**BASE, "engine": {"name": "vllm", "version": "0.13.0"}}
    if where == "flag":
        raw["engine"]["kv_cache_dtype"] = "fp8"
    else:
        raw["quantization"] = {**raw["quantization"], "kv_cache": "fp8"}
    field = "engine.kv_cache_dtype" if where == "flag" else "quantization.kv_cache"
    with pytest.raises(ConfigError, match=rf"^{field}: fp8 is not modelled for deepseek-v3\.2's sparse attention "
                                          r"under vLLM 0\.13\.0 \(it stores fp8_ds_mla, 656 bytes a token a layer in a "
                                          r"layout of its own\); allowed: auto or bfloat16 \(bf16\)$"):
        validate_scenario(raw)


@pytest.mark.parametrize("gpu, tp, heads", [("h200", 8, 64), ("h200", 2, 64), ("h200", 1, 128), ("b200", 8, 128)])
def test_the_sparse_kernel_runs_mla_absorbed_its_heads_padded_to_its_multiple(gpu, tp, heads):
    # FlashMLA's sparse kernel: each head's query against the 576-wide latent and rope key, its output 512 wide;
    # 64 heads at a time on Hopper, 128 on Blackwell (16 heads a GPU at TP 8 run as 64 or 128)
    model = RooflineCostModel(V32, get_gpu(gpu), tensor_parallel=tp, weight_dtype="fp8", fp8_compute=True)
    assert model.attn_flops_per_pair == 2 * heads * (576 + 512)
    assert model.q_bytes_per_token == heads * (576 + 512) * 2
    dense = RooflineCostModel(V3, get_gpu(gpu), tensor_parallel=tp, weight_dtype="fp8", fp8_compute=True)
    assert dense.attn_flops_per_pair == 2 * (128 // tp) * (192 + 128)  # DeepSeek-V3's own MLA, unchanged
