import re

import pytest

from sim.errors import ConfigError
from sim.model.catalog import GPUS, MODELS, catalog_model_name, get_gpu, get_model, model_names, names_same_model
from sim.model.interconnects import interconnect_class
from sim.model.shapes import (
    active_param_count,
    layer_groups,
    lm_head_shape,
    param_count,
)
from sim.views.tables import gpus_table, measured_tables_table, models_table


@pytest.mark.parametrize("key", list(MODELS))
def test_param_count_matches_published(key):
    model = MODELS[key]
    assert param_count(model) == pytest.approx(model.published_params, rel=0.03)


@pytest.mark.parametrize(
    ("key", "published_active"),
    [
        ("mixtral-8x7b", 12.9e9),  # Mistral AI blog "Mixtral of experts": 12.9B per token
        ("deepseek-v2-lite", 2.4e9),  # deepseek-ai/DeepSeek-V2-Lite model card: 2.4B activated
    ],
)
def test_moe_active_params_match_published(key, published_active):
    assert active_param_count(MODELS[key]) == pytest.approx(published_active, rel=0.05)


@pytest.mark.parametrize("key", list(MODELS))
def test_active_params_never_exceed_total(key):
    model = MODELS[key]
    assert 0 < active_param_count(model) <= param_count(model)


def test_tied_embeddings_are_counted_once():
    opt = MODELS["opt-13b"]
    untied = opt.model_copy(update={"tie_word_embeddings": False})
    assert param_count(untied) - param_count(opt) == opt.vocab_size * opt.hidden_size


@pytest.mark.parametrize("key", list(MODELS))
def test_model_numbers_are_positive_and_keys_match_names(key):
    model = MODELS[key]
    assert model.name == key
    numbers = [v for v in model.model_dump().values() if isinstance(v, int | float) and not isinstance(v, bool)]
    assert all(v >= 0 for v in numbers)  # 0 means "absent" (no experts, no learned positions)
    for field in ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "ffn_size",
                  "vocab_size", "max_context", "published_params"):
        assert getattr(model, field) > 0


@pytest.mark.parametrize("key", list(GPUS))
def test_gpu_numbers_are_positive_and_keys_match_names(key):
    gpu = GPUS[key]
    assert gpu.name == key
    numbers = [v for v in gpu.model_dump().values() if isinstance(v, int | float)]
    assert numbers and all(v > 0 for v in numbers)


def test_fp8_only_where_supported():
    assert {k for k, g in GPUS.items() if g.fp8_flops_per_s is None} == {"a100-40gb", "a100-80gb", "a800", "a100-pcie",
                                                                         "a30", "a10g"}
    assert all(g.fp8_flops_per_s == pytest.approx(2 * g.bf16_flops_per_s, rel=0.02)
               for g in GPUS.values() if g.fp8_flops_per_s)


def test_lookup_is_case_and_separator_insensitive():
    assert get_model("Llama_3.1_8B") is MODELS["llama-3.1-8b"]
    assert get_model(" MIXTRAL-8x7b ") is MODELS["mixtral-8x7b"]
    assert get_gpu("H100_SXM") is GPUS["h100-sxm"]


def test_unknown_model_error_is_one_line_naming_field_and_choices():
    with pytest.raises(ConfigError) as err:
        get_model("xyz")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("model: unknown model 'xyz'; allowed: opt-13b, llama-2-7b")
    assert all(key in message for key in MODELS)


def test_unknown_gpu_error_is_one_line_naming_field_and_choices():
    with pytest.raises(ConfigError) as err:
        get_gpu("v100", field="replicas[0].gpu")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("replicas[0].gpu: unknown gpu 'v100'; allowed: ")
    assert all(key in message for key in GPUS)


@pytest.mark.parametrize(("name", "meant"), [
    ("h200-sxm", " (did you mean 'h200'?)"), ("B200_SXM", " (did you mean 'b200'?)"),
    ("a100", " (did you mean 'a100-40gb' or 'a100-80gb' or 'a100-pcie'?)"), ("h20-96gb", " (did you mean 'h20'?)"),
    # a near spelling that is another part is no guess: an A10 is not an A10G, an A40 not an A30, nor is another
    # card of the part: the H800 PCIe is not the h800 (SXM) entry
    ("a10", ""), ("a40", ""), ("h100-sxm5", ""), ("h800-pcie", ""), ("h800_sxm", " (did you mean 'h800'?)")])
def test_an_unknown_gpu_is_offered_the_entry_it_spells_with_words_added_or_left_off(name, meant):
    with pytest.raises(ConfigError) as err:
        get_gpu(name)
    assert str(err.value).startswith(f"hardware.gpu: unknown gpu {name!r}{meant}; allowed: a100-40gb, ")


def test_the_h100_pcie_cards_are_read_as_their_own_parts():
    # a PCIe card's peers talk over PCIe, an NVL pair's over its bridge (the all-reduce's class); vLLM gives both the
    # batch tier of a >= 70 GiB GPU that is no A100, as the SXM part (tests of the preset: test_engine_presets.py)
    pcie, nvl, sxm = get_gpu("h100-pcie"), get_gpu("H100_NVL"), get_gpu("h100-sxm")
    assert (interconnect_class(pcie), interconnect_class(nvl), interconnect_class(sxm)) == ("pcie", "nvlink", "nvlink")
    assert pcie.hbm_bytes == sxm.hbm_bytes < nvl.hbm_bytes and pcie.compute_capability == nvl.compute_capability
    assert pcie.hbm_bytes_per_s < sxm.hbm_bytes_per_s < nvl.hbm_bytes_per_s
    assert pcie.bf16_flops_per_s < nvl.bf16_flops_per_s < sxm.bf16_flops_per_s


def test_the_parts_without_measured_tables_are_read_as_what_they_are():
    # the H20: a Hopper part on NVLink with ~15% of the H100's tensor rate and more memory, faster; the A100 PCIe card:
    # the SXM part's rates less bandwidth, on PCIe; the A30 and the L40 below their larger siblings
    h20, h100, h200 = get_gpu("h20"), get_gpu("h100-sxm"), get_gpu("h200")
    assert interconnect_class(h20) == "nvlink" and h20.compute_capability == h100.compute_capability
    assert h20.bf16_flops_per_s < 0.2 * h100.bf16_flops_per_s and h20.fp8_flops_per_s == 2 * h20.bf16_flops_per_s
    assert h100.hbm_bytes < h20.hbm_bytes < h200.hbm_bytes and h100.hbm_bytes_per_s < h20.hbm_bytes_per_s
    pcie, sxm, a30 = get_gpu("A100_PCIe"), get_gpu("a100-80gb"), get_gpu("a30")
    assert [interconnect_class(g) for g in (pcie, sxm, a30)] == ["pcie", "nvlink", "pcie"]
    assert pcie.bf16_flops_per_s == sxm.bf16_flops_per_s and pcie.hbm_bytes == sxm.hbm_bytes
    assert a30.hbm_bytes_per_s < pcie.hbm_bytes_per_s < sxm.hbm_bytes_per_s
    assert a30.bf16_flops_per_s < pcie.bf16_flops_per_s
    # the A800 and the H800: the A100's and the H100's rates and memory with NVLink at 400 GB/s, not 600 / 900
    for part, base in ((get_gpu("a800"), sxm), (get_gpu("H800"), h100)):
        assert part.model_copy(update={"name": base.name, "interconnect_bytes_per_s": base.interconnect_bytes_per_s,
                                       "price_per_hour": base.price_per_hour, "kernels_as": None}) == base
        assert interconnect_class(part) == "nvlink" and part.interconnect_bytes_per_s == 200e9
        assert part.kernels_as == base.name  # its twin's measured kernels price it (test_same_silicon_tables.py)
    l40, l40s = get_gpu("l40"), get_gpu("l40s")
    assert interconnect_class(l40) == "pcie" and l40.hbm_bytes == l40s.hbm_bytes
    assert l40.bf16_flops_per_s == pytest.approx(l40s.bf16_flops_per_s / 2, rel=0.01)


@pytest.mark.parametrize(("name", "meant"), [
    ("meta-llama/Meta-Llama-3.1-8B-Instruct-FP8", " (did you mean 'llama-3.1-8b'?)"),
    ("deepseek-r1-0528", " (did you mean 'deepseek-r1'?)"),
    ("qwen3-235b-a22b-fp8-2507", " (did you mean 'qwen3-235b-a22b-fp8'?)"),  # the longest it holds
    ("qwen3-30b", " (did you mean 'qwen3-30b-a3b' or 'qwen3-30b-a3b-fp8'?)"),
    ("mistral-7b", " (did you mean 'mistral-7b-v0.1'?)"),
    ("llama-3.3-70b", ""), ("qwen3-8b.json", ""),  # not qwen3-32b's or llama-3.1-70b's: other models
    ("qwen3", "")])  # a family of a dozen: no guess
def test_an_unknown_model_is_offered_the_entry_it_spells_with_words_added_or_left_off(name, meant):
    with pytest.raises(ConfigError) as err:
        get_model(name)
    assert str(err.value).startswith(f"model: unknown model {name!r}{meant}; allowed: opt-13b, ")


@pytest.mark.parametrize(("name", "catalog"), [
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"), ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b-v0.1"),
    ("qwen3-235b-a22b-fp8-instruct", "qwen3-235b-a22b-fp8"),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", "qwen3-coder-480b-a35b-instruct"),  # a catalog name with the word
    ("Qwen/Qwen3-32B", "qwen3-32b"),
    ("Qwen/Qwen3-8B-FP8", None), ("/models/llama-3.1-8b", None), ("meta-llama/Llama-3.1-8B-Instruct-FP8", None),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", None), ("instruct", None)])
def test_an_instruction_tuned_checkpoint_names_its_base_models_architecture(name, catalog):
    assert catalog_model_name(name) == catalog
    if catalog is not None:
        assert get_model(name) == get_model(catalog)
    else:
        with pytest.raises(ConfigError, match=r"^model: unknown model "):
            get_model(name)


def test_names_of_one_model_are_compared_leniently():
    assert names_same_model("Qwen/Qwen3-8B-FP8", "qwen3-8b")
    assert names_same_model("/models/llama-3.1-8b", "LLAMA_3.1_8B")
    assert not names_same_model("Qwen/Qwen3-32B", "qwen3-8b") and not names_same_model("llama-3.1-70b", "qwen3-32b")


@pytest.mark.parametrize("name", [-1, None, ["h100-sxm"]])
def test_a_gpu_name_that_is_not_a_string_is_an_unknown_gpu(name):
    # (the no-traceback property test found -1 reaching the lookup through a checkpoint's fp8 default)
    with pytest.raises(ConfigError, match=f"^hardware.gpu: unknown gpu {re.escape(repr(name))}; allowed: "):
        get_gpu(name)


def test_dense_model_has_one_layer_group():
    groups = layer_groups(MODELS["llama-3.1-8b"])
    assert len(groups) == 1
    num_layers, shapes = groups[0]
    assert num_layers == 32
    by_name = {s.name: s for s in shapes}
    assert set(by_name) == {"qkv", "attn_out", "gate_up", "down"}
    assert by_name["qkv"].out_features == (32 + 2 * 8) * 128
    assert by_name["gate_up"].out_features == 2 * 14336
    assert (by_name["qkv"].tp_split, by_name["attn_out"].tp_split) == ("column", "row")


def test_opt_uses_plain_mlp_with_biases():
    (_, shapes), = layer_groups(MODELS["opt-13b"])
    by_name = {s.name: s for s in shapes}
    assert set(by_name) == {"qkv", "attn_out", "fc1", "fc2"}
    assert all(s.has_bias for s in shapes)
    assert by_name["fc1"].out_features == 20480


def test_qwen_has_bias_on_qkv_only():
    (_, shapes), = layer_groups(MODELS["qwen2.5-7b"])
    assert [s.name for s in shapes if s.has_bias] == ["qkv"]


def test_mixtral_experts():
    (_, shapes), = layer_groups(MODELS["mixtral-8x7b"])
    by_name = {s.name: s for s in shapes}
    assert by_name["router"].tp_split == "replicated"
    assert by_name["router"].out_features == 8
    for name in ("experts_gate_up", "experts_down"):
        assert (by_name[name].count, by_name[name].active_per_token) == (8, 2)


def test_deepseek_has_a_dense_layer_then_moe_layers_with_mla():
    (dense_layers, dense), (moe_layers, moe) = layer_groups(MODELS["deepseek-v2-lite"])
    assert (dense_layers, moe_layers) == (1, 26)
    dense_by_name = {s.name: s for s in dense}
    assert dense_by_name["gate_up"].out_features == 2 * 10944
    by_name = {s.name: s for s in moe}
    assert {"q_proj", "kv_a_proj", "kv_b_proj", "attn_out", "router"} <= set(by_name)
    assert by_name["kv_a_proj"].tp_split == "replicated"
    assert by_name["kv_a_proj"].out_features == 512 + 64
    assert by_name["kv_b_proj"].in_features == 512
    assert by_name["kv_b_proj"].out_features == 16 * (128 + 128)
    assert by_name["q_proj"].out_features == 16 * (128 + 64)
    assert (by_name["experts_gate_up"].count, by_name["experts_gate_up"].active_per_token) == (64, 6)
    # its 2 shared experts are one MLP twice as wide, as the engines build them, which every token passes through
    assert (by_name["shared_down"].count, by_name["shared_down"].active_per_token) == (1, 1)
    assert by_name["shared_down"].in_features == by_name["shared_gate_up"].out_features // 2 == 2 * 1408
    assert by_name["experts_down"].in_features == 1408


def test_lm_head_is_vocab_parallel():
    head = lm_head_shape(MODELS["llama-3.1-8b"])
    assert (head.in_features, head.out_features, head.tp_split) == (4096, 128256, "column")


def test_tables_have_one_row_per_entry():
    models = models_table()
    assert list(models["model"]) == list(model_names()) and set(MODELS) < set(model_names())  # the shipped configs' too
    assert {"params_b", "active_params_b", "kv_bytes_per_token"} <= set(models.columns)
    row = models.set_index("model").loc["llama-3.1-8b"]
    assert row["params_b"] == pytest.approx(8.03, abs=0.01)
    assert row["kv_bytes_per_token"] == 131072
    gpus = gpus_table()
    assert list(gpus["gpu"]) == list(GPUS)
    assert gpus.set_index("gpu").loc["h100-sxm", "bf16_tflops"] == pytest.approx(989)


def test_the_tables_catalog_lists_what_the_measured_model_prices():
    """`servesim catalog tables`: one row per GPU and engine with shipped tables, and every weight and KV dtype a row
    lists is one the measured model takes (no claim it would refuse); the dtypes it leaves out it refuses."""
    from sim.cost.measured import TABLES, measured_gpus, measured_unsupported
    table = measured_tables_table()
    assert sorted(zip(table["gpu"], table["tables"])) == sorted(
        (g, fw) for fw in TABLES for g in measured_gpus(tables=fw))
    scenario_weights = ("bf16", "fp8", "int8", "int4", "nvfp4")  # table dtypes a scenario names as they are
    for row in table.itertuples(index=False):
        listed = row.weights.split(", ")
        for w in scenario_weights:
            why = measured_unsupported(row.gpu, w, fp8_compute=w == "fp8", tables=row.tables)
            assert (why is None) == (w in listed), (row.gpu, row.tables, w, why)
        for kv in ("bf16", "fp8"):
            why = measured_unsupported(row.gpu, kv_dtype=kv, tables=row.tables)
            assert (why is None) == (kv in row.kv_cache.split(", ")), (row.gpu, row.tables, kv, why)
    by = table.set_index(["gpu", "tables"])
    assert by.loc[("a100-80gb", "trtllm"), "weights"] == "bf16, int4, int8"
    assert by.loc[("a100-80gb", "vllm"), "weights"] == "bf16"
    assert by.loc[("h100-sxm", "sglang"), "attention_kernel"] == "fa3"
    assert "DSA modules" in by.loc[("h200", "vllm"), "also"]  # DeepSeek-V3.2's sparse attention
    assert "DSA modules" in by.loc[("h200", "sglang"), "also"]
    assert "DSA modules" not in by.loc[("a100-80gb", "vllm"), "also"]
    assert "DSA modules" not in by.loc[("h200", "trtllm"), "also"]
