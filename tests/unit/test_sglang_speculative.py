"""SGLang's speculative decoding (--speculative-algorithm EAGLE, EAGLE3, NEXTN; sim/config/engines/
sglang_speculative.py): what it sets in SGLang's own defaults, hand-computed, the flags refused in one line, and runs
of its new-token-ratio admission beside speculation."""

import numpy as np
import pytest

from sim.config.deployment import resolve
from sim.config.files import validate_scenario
from sim.core.request import Request
from sim.errors import ConfigError
from sim.kv.paged import PagedKVManager
from sim.model.catalog import get_gpu
from sim.run import simulate
from sim.sched.decode import DecodeTracker
from sim.sched.rules import SGLANG_CLIP_MAX_NEW_TOKENS, clipped_outputs_sum
from sim.sched.speculative import SpeculativeDecodeBatch

BASE = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 20.0},
                     "lengths": {"kind": "fixed", "input_tokens": 500, "output_tokens": 100}},
        "run": {"num_requests": 60, "seed": 3}}
SECTION = {"draft_cost_ratio": 0.05, "acceptance": {"kind": "fixed", "alpha": 0.7}}
EAGLE = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
         "speculative_num_draft_tokens": 4}


def scenario(flags: dict, version: str = "0.5.5.post1", speculation: dict | None = SECTION, **sections):
    raw = {**BASE, **sections, "engine": {"name": "sglang", "version": version, **flags}}
    if speculation is not None:
        raw["speculation"] = speculation
    return validate_scenario(raw)


def test_eagle_takes_48_running_requests_2_gib_more_reserve_and_a_pool_grown_by_each_slots_drafts():
    # server_args.py (0.5.5.post1) on an H100 (81,559 MiB), TP 1: reserved 512 + 8,192 x 1.5 + 256 x 2 + 1,024 / 8 =
    # 13,440 MiB (above the 10 GiB floor), + 2,048 with EAGLE; model_runner.py: max_num_reqs 2,048 (Llama-3.1-8B's
    # 131,072-token context), the pool + 2,048 x (3 x 1 + 4) + 100 tokens
    gpu_mib = get_gpu("h100-sxm").hbm_bytes / 2**20
    plain = scenario({}, speculation=None)
    assert plain.kv_cache.gpu_memory_utilization == round((gpu_mib - 13440) / gpu_mib, 3)
    eagle = scenario(EAGLE)
    fraction = round((gpu_mib - 13440 - 2048) / gpu_mib, 3)
    assert eagle.kv_cache.gpu_memory_utilization == fraction
    assert eagle.scheduler.max_num_seqs == 48 and plain.scheduler.max_num_seqs == 2048
    assert eagle.speculation.num_speculative_tokens == 3 and not eagle.scheduler.mixed_batches
    profiled = resolve(scenario({"mem_fraction_static": fraction}, speculation=None)).kv_capacity_tokens
    assert profiled > 300_000
    assert eagle.kv_cache.capacity_tokens == resolve(eagle).kv_capacity_tokens == profiled + 2048 * 7 + 100


@pytest.mark.parametrize("version, reserved_mib, grows, checks_more", [
    ("0.5.6.post2", 2048, True, True), ("0.5.7", 2048, False, True), ("0.5.8.post1", 2048, False, True),
    ("0.5.9", 2048, False, False), ("0.5.10rc0", 4096, False, False), ("0.5.10.post1", 4096, False, False),
    ("0.5.11", 4096, False, False), ("0.5.13.post1", 4096, False, False)])
def test_the_reserve_and_the_pools_headroom_follow_the_release(version, reserved_mib, grows, checks_more):
    # 13,440 MiB (above) + 2 GiB to 0.5.9, 4 GiB from 0.5.10 (0.5.10rc0 too), whose prefill graphs speculation turns
    # off (to 0.5.13); the pool's headroom to 0.5.6.post2 (from 0.5.7 model_runner_kv_cache_mixin.py keeps the
    # profiled tokens)
    gpu_mib = get_gpu("h100-sxm").hbm_bytes / 2**20
    eagle = scenario(EAGLE, version=version)
    assert eagle.kv_cache.gpu_memory_utilization == round((gpu_mib - 13440 - reserved_mib) / gpu_mib, 3)
    assert (eagle.kv_cache.capacity_tokens is not None) is grows
    # the decode memory check: N + 1 + N tokens a request to 0.5.8.post1, max(N, N + 1) from 0.5.9
    assert any(note.endswith("(SGLang's memory check wants 7: not modelled)") for note in eagle.engine.notes) \
        is checks_more


def test_a_one_layer_drafts_weights_are_one_decoder_layer_two_vocabulary_tables_and_a_projection():
    from sim.model.catalog import get_model
    from sim.model.memory import draft_head_bytes_per_gpu
    # Llama-3.1-8B, bf16: a layer's q, k, v, o (4096 x (4096 + 1024 + 1024 + 4096)) and MLP (3 x 4096 x 14336),
    # its two norms (2 x 4096), the embedding and LM head (2 x 128,256 x 4096) and the 2h x h projection, 2 bytes each
    layer = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336
    expected = 2 * (layer + 2 * 4096 + 2 * 128256 * 4096 + 2 * 4096 * 4096)
    model = get_model("llama-3.1-8b")
    assert draft_head_bytes_per_gpu(model) == expected == 2_604_679_168
    # TP 2 splits the layer and the vocabulary tables, not the norms or the replicated projection
    assert draft_head_bytes_per_gpu(model, tensor_parallel=2) == 2 * (layer // 2 + 2 * 4096 + 128256 * 4096
                                                                     + 2 * 4096 * 4096)


@pytest.mark.parametrize("version", ["0.5.14", "0.5.16", "0.5.23"])
def test_from_0_5_14_the_draft_comes_out_of_the_kv_pool_and_nothing_more_is_reserved(version):
    # no reserve beside the plain one (the same fraction as without speculation, whose prefill graphs 0.5.14 keeps);
    # the pool: the profiled tokens' bytes (131,072 a token: 2 x 32 layers x 8 heads x 128 x 2 bytes) less the
    # draft's 2,604,679,168 bytes, over a cell a draft layer larger, int(131,072 x 33 / 32) = 135,168
    plain = scenario({}, version=version, speculation=None)
    eagle = scenario(EAGLE, version=version)
    assert eagle.kv_cache.gpu_memory_utilization == plain.kv_cache.gpu_memory_utilization
    profiled = resolve(plain).kv_capacity_tokens
    expected = (profiled * 131072 - 2_604_679_168) // 135168
    assert eagle.kv_cache.capacity_tokens == resolve(eagle).kv_capacity_tokens == expected
    assert 0.9 * profiled < expected < profiled
    notes = " ".join(eagle.engine.notes)
    assert "no more reserved" in notes and "the overlap scheduler on (spec v2, always from 0.5.14)" in notes
    assert f"{profiled:,} KV tokens -> {expected:,}" in notes


STANDALONE = {"draft_model": "llama-3.1-8b", "acceptance": {"kind": "fixed", "alpha": 0.7}}
SEVENTY_B = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "tensor_parallel": 4}}


def test_from_0_5_14_a_standalone_draft_models_weights_and_every_layers_kv_come_out_of_the_pool():
    from sim.model.catalog import get_model
    from sim.model.memory import weight_bytes_per_gpu
    # Llama-3.1-70B at TP 4: 81,920 KV bytes a token a GPU (2 x 80 layers x 2 heads x 128 x 2 bytes); the 8B draft's
    # 32 layers grow the cell to int(81,920 x (1 + 32 / 80)) = 114,688; its weights (its own embedding and LM head:
    # STANDALONE shares neither) come out of the profiled bytes. SGLang's own choice for STANDALONE: (3, 1, 4).
    plain = scenario({}, version="0.5.14", speculation=None, **SEVENTY_B)
    sc = scenario({"speculative_algorithm": "STANDALONE"}, version="0.5.14", speculation=STANDALONE, **SEVENTY_B)
    draft_bytes = weight_bytes_per_gpu(get_model("llama-3.1-8b"), "bf16", 4)
    profiled = resolve(plain).kv_capacity_tokens
    assert sc.kv_cache.capacity_tokens == resolve(sc).kv_capacity_tokens == (profiled * 81920 - draft_bytes) // 114688
    spec = sc.speculation
    assert (spec.num_speculative_tokens, spec.draft_tree_width, spec.verified_tokens()) == (3, 1, 4)
    assert sc.scheduler.max_num_seqs == 48
    assert any("drafter priced by speculation.draft_model" in note for note in sc.engine.notes)
    summary = simulate(sc).summary
    assert summary["num_finished"] == 60 and 0 < summary["draft_acceptance_rate"] < 1


@pytest.mark.parametrize("flags, speculation, version, message", [
    ({"speculative_algorithm": "STANDALONE"}, SECTION, "0.5.14",
     "engine.speculative_algorithm: STANDALONE needs speculation.draft_model"),
    (EAGLE, STANDALONE, "0.5.14", "speculation.draft_model: speculation.draft_model is not modelled for SGLang 0.5.14 "
                                  "without --speculative-algorithm STANDALONE"),
    ({"speculative_algorithm": "STANDALONE"}, STANDALONE, "0.5.13.post1",
     "engine.speculative_algorithm: --speculative-algorithm STANDALONE is not modelled for SGLang 0.5.13.post1"),
])
def test_standalone_needs_a_draft_model_and_0_5_14(flags, speculation, version, message):
    with pytest.raises(ConfigError) as err:
        scenario(flags, version=version, speculation=speculation, **SEVENTY_B)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_mixed_chunks_are_turned_off_to_0_5_18_and_off_by_default_from_0_5_19():
    forced = scenario({**EAGLE, "enable_mixed_chunk": True}, version="0.5.18")
    assert not forced.scheduler.mixed_batches
    assert any("--enable-mixed-chunk turned off" in note for note in forced.engine.notes)
    default = scenario(EAGLE, version="0.5.19")
    assert not default.scheduler.mixed_batches
    assert any("from 0.5.19 speculation no longer turns them off" in note for note in default.engine.notes)
    standalone = scenario({"speculative_algorithm": "STANDALONE", "enable_mixed_chunk": True}, version="0.5.19",
                          speculation=STANDALONE, **SEVENTY_B)  # STANDALONE's still turned off
    assert not standalone.scheduler.mixed_batches
    assert any("--enable-mixed-chunk turned off" in note for note in standalone.engine.notes)


@pytest.mark.parametrize("version, topk, overlap", [("0.5.10.post1", 1, False), ("0.5.11", 1, True),
                                                   ("0.5.12.post1", 2, False), ("0.5.13", 2, True)])
def test_spec_v2_keeps_the_overlap_scheduler_on_for_a_chain_from_0_5_11_and_a_tree_from_0_5_13(version, topk,
                                                                                               overlap):
    flags = {**EAGLE, "speculative_eagle_topk": topk, "speculative_num_draft_tokens": 4 + 2 * (topk - 1)}
    notes = " ".join(scenario(flags, version=version).engine.notes)
    assert ("the overlap scheduler on (spec v2" in notes) is overlap
    assert ("the overlap scheduler off" in notes) is not overlap
    assert ("spec v2 keeps up to" in notes) is overlap


def test_sglang_0_5_8_chooses_a_chain_for_every_architecture_but_llamas():
    def shape(version, **sections):
        spec = scenario({"speculative_algorithm": "EAGLE"}, version=version, **sections).speculation
        return spec.num_speculative_tokens, spec.draft_tree_width, spec.verified_tokens()
    assert shape("0.5.7", model="qwen2.5-7b") == (5, 4, 8)
    assert shape("0.5.8", model="qwen2.5-7b") == (3, 1, 4)
    assert shape("0.5.10") == (5, 4, 8)  # Llama


def test_a_given_running_limit_and_memory_fraction_are_kept_and_mixed_chunks_are_turned_off():
    sc = scenario({**EAGLE, "max_running_requests": 96, "mem_fraction_static": 0.8, "enable_mixed_chunk": True})
    assert (sc.scheduler.max_num_seqs, sc.kv_cache.gpu_memory_utilization, sc.scheduler.mixed_batches) == (96, 0.8,
                                                                                                          False)
    assert any("--enable-mixed-chunk turned off" in note for note in sc.engine.notes)


def test_the_draft_tokens_follow_the_steps_with_topk_1_and_nextn_is_eagle():
    sc = scenario({**EAGLE, "speculative_algorithm": "NEXTN", "speculative_num_steps": 2,
                   "speculative_num_draft_tokens": 8})
    assert sc.speculation.num_speculative_tokens == 2
    assert any("set to num_steps + 1 = 3" in note for note in sc.engine.notes)
    assert any("(EAGLE, 2 draft steps, a chain)" in note for note in sc.engine.notes)


def test_without_the_steps_sglang_chooses_by_architecture_a_chain_for_deepseek_and_a_tree_otherwise():
    deepseek = scenario({"speculative_algorithm": "NEXTN"}, model="deepseek-v2-lite").speculation
    assert (deepseek.num_speculative_tokens, deepseek.draft_tree_width, deepseek.verified_tokens()) == (3, 1, 4)
    llama = scenario({"speculative_algorithm": "EAGLE"})  # auto_choose_speculative_params: (5, 4, 8), a tree
    spec = llama.speculation
    assert (spec.num_speculative_tokens, spec.draft_tree_width, spec.num_verified_tokens) == (5, 4, 8)
    assert any("5 steps, topk 4, 8 draft tokens, its choice for llama-3.1-8b" in note for note in llama.engine.notes)
    # the pool's headroom: 2,048 slots x (5 x 4 + 8) + 100 tokens
    profiled = resolve(scenario({"mem_fraction_static": llama.kv_cache.gpu_memory_utilization},
                                speculation=None)).kv_capacity_tokens
    assert llama.kv_cache.capacity_tokens == profiled + 2048 * 28 + 100


def test_the_section_alone_is_speculation_as_eagle_with_its_own_gamma():
    sc = scenario({}, speculation={**SECTION, "num_speculative_tokens": 5})
    assert sc.speculation.num_speculative_tokens == 5 and sc.scheduler.max_num_seqs == 48
    assert sc.kv_cache.capacity_tokens is not None  # the pool's headroom: 2,048 x (5 + 6) + 100 tokens more
    default = scenario({}, speculation=SECTION)  # the section's own default, 4 tokens
    assert default.speculation.num_speculative_tokens == 4 and default.scheduler.max_num_seqs == 48


@pytest.mark.parametrize("flags, speculation, version, message", [
    (EAGLE, None, "0.5.5.post1", "engine.speculative_algorithm: needs the scenario's speculation section"),
    ({**EAGLE, "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 3}, SECTION, "0.5.5.post1",
     "engine.speculative_num_draft_tokens: 3 is not modelled with 3 steps of topk 2"),
    ({**EAGLE, "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 12}, SECTION, "0.5.5.post1",
     "engine.speculative_num_draft_tokens: 12 is not modelled with 3 steps of topk 2 (fewer than num_steps + 1 cut "
     "the accepted path; more than the tree's candidates fail in SGLang); allowed: 4 to 11"),
    ({"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "speculative_eagle_topk": 2}, SECTION,
     "0.5.5.post1", "engine.speculative_num_draft_tokens: missing beside --speculative-eagle-topk 2"),
    ({**EAGLE, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8, "page_size": 16}, SECTION,
     "0.5.5.post1", "engine.page_size: 16 with a tree of drafts (engine.speculative_eagle_topk 4), which SGLang "
                    "0.5.5.post1 refuses unless --attention-backend is flashinfer; allowed: 1, or --attention-backend "
                    "flashinfer"),
    ({"page_size": 16}, {**SECTION, "draft_tree_width": 2, "num_verified_tokens": 6}, "0.5.5.post1",
     "engine.page_size: 16 with a tree of drafts (speculation.draft_tree_width 2)"),
    ({"speculative_algorithm": "EAGLE", "speculative_num_steps": 3}, SECTION, "0.5.5.post1",
     "engine.speculative_eagle_topk: missing beside --speculative-num-steps"),
    ({"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 1}, SECTION, "0.5.5.post1",
     "engine.speculative_eagle_topk: given without --speculative-num-steps"),
    ({"speculative_num_steps": 3, "speculative_eagle_topk": 1}, SECTION, "0.5.5.post1",
     "engine.speculative_num_steps: needs --speculative-algorithm"),
    ({**EAGLE, "speculative_algorithm": "STANDALONE"}, SECTION, "0.5.5.post1",
     "engine.speculative_algorithm: --speculative-algorithm STANDALONE is not modelled for SGLang"),
    ({"speculative_algorithm": "NGRAM", "page_size": 16}, SECTION, "0.5.14",
     "engine.page_size: 16 with NGRAM's tree of breadth 10 (--speculative-ngram-max-bfs-breadth), which SGLang "
     "refuses unless --attention-backend is flashinfer"),
    ({"speculative_algorithm": "NGRAM", "enable_dp_attention": True}, SECTION, "0.5.14",
     "engine.enable_dp_attention: true with NGRAM is not modelled"),
    ({"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 1}, SECTION, "0.5.14",
     "engine.speculative_num_draft_tokens: 1 with NGRAM is not modelled (its last token and 0 drafts a "
     "verification); allowed: 2 to 65"),
    ({"speculative_algorithm": "NGRAM"}, SECTION, "0.5.2",
     "engine.speculative_algorithm: 'NGRAM' is not a value of sglang 0.5.2's --speculative-algorithm (it came in "
     "0.5.3)"),
    ({"speculative_algorithm": "NGRAM", "speculative_ngram_max_match_window_size": 6}, SECTION, "0.5.10",
     "engine.speculative_ngram_max_match_window_size: not a flag of sglang 0.5.10"),
    ({"speculative_algorithm": "NGRAM"}, {"draft_model": "llama-3.1-8b", "acceptance": {"kind": "fixed", "alpha": 0.7}},
     "0.5.14", "speculation.draft_model: speculation.draft_model is not modelled for SGLang 0.5.14 without "
               "--speculative-algorithm STANDALONE"),
    ({**EAGLE, "speculative_algorithm": "LOOKAHEAD"}, SECTION, "0.5.5.post1",
     "engine.speculative_algorithm: 'LOOKAHEAD' is not modelled; allowed: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM"),
    ({}, {"draft_model": "llama-3.1-8b", "acceptance": {"kind": "fixed", "alpha": 0.7}}, "0.5.5.post1",
     "speculation.draft_model: speculation.draft_model is not modelled for SGLang"),
    ({**EAGLE, "enable_mixed_chunk": True}, SECTION, "0.5.19",
     "engine.enable_mixed_chunk: true with speculative decoding is not modelled for SGLang 0.5.19"),
    ({}, SECTION, "0.5.3rc0", "speculation: SGLang 0.5.3rc0's speculative decoding is not read"),
    ({}, SECTION, "0.3.0", "speculation: SGLang 0.3.0's speculative decoding is not read"),
    (EAGLE, SECTION, "0.4.1.post3", "engine.speculative_algorithm: not a flag of sglang 0.4.1.post3"),
    ({**EAGLE, "speculative_num_steps": 0}, SECTION, "0.5.5.post1",
     "engine.speculative_num_steps: 0 is not allowed; allowed: a whole number >= 1"),
    (EAGLE, {**SECTION, "num_speculative_tokens": 5}, "0.5.5.post1",
     "engine.speculative_num_steps: 3 contradicts speculation.num_speculative_tokens 5"),
])
def test_what_is_not_modelled_or_not_sglangs_is_refused_in_one_line(flags, speculation, version, message):
    with pytest.raises(ConfigError) as err:
        scenario(flags, version=version, speculation=speculation)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_tree_sets_its_width_and_verified_tokens_and_pages_need_flashinfer_or_from_0_5_6_fa3():
    tree = {**EAGLE, "speculative_num_steps": 5, "speculative_eagle_topk": 8, "speculative_num_draft_tokens": 32}
    spec = scenario(tree).speculation
    assert (spec.num_speculative_tokens, spec.draft_tree_width, spec.verified_tokens()) == (5, 8, 32)
    paged = {**tree, "page_size": 16}
    assert scenario({**paged, "attention_backend": "fa3"}, version="0.5.6").kv_cache.block_size == 16
    with pytest.raises(ConfigError, match="unless --attention-backend is flashinfer; allowed"):
        scenario({**paged, "attention_backend": "fa3"}, version="0.5.5.post3")
    with pytest.raises(ConfigError, match="^engine.speculative_eagle_topk: 8 contradicts speculation.draft_tree_width"):
        scenario(tree, speculation={**SECTION, "draft_tree_width": 4})


def test_trtllm_mha_takes_no_tree_whether_the_flags_or_the_section_give_it():
    b200 = {"hardware": {"gpu": "b200"}}  # (the GPU whose SGLang tables measured trtllm_mha)
    tree = {**EAGLE, "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 6, "attention_backend": "trtllm_mha"}
    with pytest.raises(ConfigError, match="^engine.speculative_eagle_topk: 2 with --attention-backend trtllm_mha"):
        scenario(tree, **b200)
    with pytest.raises(ConfigError, match="^speculation.draft_tree_width: 2 with --attention-backend trtllm_mha"):
        scenario({"attention_backend": "trtllm_mha"}, speculation={**SECTION, "draft_tree_width": 2,
                                                                   "num_verified_tokens": 6}, **b200)
    assert scenario({**tree, "speculative_eagle_topk": 1}, **b200).speculation.draft_tree_width == 1


def test_a_trees_verification_takes_its_verified_tokens_and_its_drafts_branch():
    from sim.core.step_plan import StepPlan
    from sim.cost.roofline import SpeculativeCostModel

    class Target:  # 1 ms a sequence, 1 us a token of context
        def step_cost(self, plan):
            from sim.cost.roofline import StepCost
            return StepCost(plan.num_decode_seqs * 1e-3 + plan.decode_context_tokens * 1e-6, 0.0, 0.0)

        def step_time(self, plan):
            return self.step_cost(plan).time_s
    # two requests of 100 tokens verify 8 each after 3 draft steps of a width-4 tree: the draft steps price 2, 8 and 8
    # sequences at contexts 202, 4 x 204 and 4 x 206; the ratio 0.1 of that
    plan = StepPlan(num_decode_seqs=2, decode_query_tokens=8, num_draft_tokens=3, decode_context_tokens=216,
                    num_sampled_seqs=2)
    model = SpeculativeCostModel(Target(), draft_cost_ratio=0.1, draft_tree_width=4)
    verify = 2e-3 + 216e-6
    assert model.step_time(plan) == pytest.approx(verify + 0.1 * (18e-3 + (202 + 816 + 824) * 1e-6))
    chain = SpeculativeCostModel(Target(), draft_cost_ratio=0.1)
    assert chain.step_time(plan) == pytest.approx(verify + 0.1 * (6e-3 + (202 + 204 + 206) * 1e-6))
    kv = PagedKVManager(num_blocks=100, block_size=4)
    batch = SpeculativeDecodeBatch(num_speculative_tokens=3, alpha_sampler=lambda rng: 0.0, ragged="per_request",
                                   rng=np.random.default_rng(0), kv=kv, num_verified_tokens=8)
    request = Request(request_id=1, arrival_s=0.0, num_prompt_tokens=10, max_output_tokens=20)
    kv.allocate_slots(request, 10)  # (before its prompt is counted computed: blocks for 10 tokens)
    request.num_computed_tokens, request.num_output_tokens = 10, 1
    batch.add(request)
    assert batch.decode_query_tokens == 8 and batch.num_new_blocks_needed() == 2  # 18 tokens: 5 blocks, 3 held
    batch.allocate_new_blocks()
    finished, tokens = batch.advance()  # α = 0: the target's own token only; the tree's other slots go back
    assert tokens == 1 and kv.held_slots(1) == 12


def test_the_launch_command_gives_the_same_scenario_as_the_flags():
    command = ("python3 -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --speculative-algorithm "
               "EAGLE --speculative-draft-model-path jamesliu1/sglang-EAGLE-Llama-3.1-Instruct-8B "
               "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4")
    by_command = scenario({"command": command})
    by_flags = scenario(EAGLE)
    assert by_command.scheduler == by_flags.scheduler and by_command.kv_cache == by_flags.kv_cache
    assert by_command.speculation == by_flags.speculation
    alias = command.replace("--speculative-draft-model-path", "--speculative-draft-model")  # its alias from 0.5.2
    assert scenario({"command": alias}).speculation == by_flags.speculation


@pytest.mark.parametrize("version, flags, draft, check", [
    # (SGLang's D: the match window's to 0.5.10rc0, 12 from 0.5.10; the decode memory check's tokens a request: D +
    # breadth x (num_steps or 1) to 0.5.8.post1, max((num_steps or 1) x breadth, D) from 0.5.9, num_steps D // breadth
    # unless given from 0.5.14)
    ("0.5.3.post3", {}, 12, 12 + 10),
    ("0.5.5", {"speculative_ngram_max_match_window_size": 6}, 6, 6 + 10),
    ("0.5.9", {"speculative_ngram_max_match_window_size": 6}, 6, 10),
    ("0.5.10", {}, 12, 12),
    ("0.5.14", {"speculative_num_draft_tokens": 8}, 8, 10),  # num_steps 8 // 10 = 0, read as 1
    ("0.5.23", {"speculative_ngram_max_bfs_breadth": 2, "speculative_num_draft_tokens": 7}, 7, 7),
])
def test_ngram_verifies_its_draft_tokens_as_a_chain_of_one_fewer_drafts(version, flags, draft, check):
    sc = scenario({"speculative_algorithm": "NGRAM", **flags}, version=version)
    assert (sc.speculation.num_speculative_tokens, sc.speculation.draft_tree_width,
            sc.speculation.num_verified_tokens) == (draft - 1, 1, draft)
    assert sc.scheduler.max_num_seqs == 48 and sc.scheduler.mixed_batches is False
    plain = scenario({}, version=version, speculation=None)
    assert sc.kv_cache.capacity_tokens == plain.kv_cache.capacity_tokens  # no draft: the pool as profiled
    eagle = scenario(EAGLE, version=version)  # (its draft's reserve to 0.5.13.post1, from 0.5.14 its pool share)
    assert (sc.kv_cache.gpu_memory_utilization > eagle.kv_cache.gpu_memory_utilization
            or sc.kv_cache.capacity_tokens != eagle.kv_cache.capacity_tokens)
    note = next(n for n in sc.engine.notes if "speculative decoding (NGRAM" in n)
    assert f"SGLang's memory check wants {check}" in note
    kept = tuple(int(x) for x in version.split(".")[:3]) >= (0, 5, 14)  # the overlap scheduler not turned off
    assert ("overlap scheduler on" in note) == kept and ("overlap scheduler off" in note) == (not kept)


def test_an_ngram_run_yields_its_accept_length_and_costs_its_drafts_ratio():
    section = {"draft_cost_ratio": 0.01, "acceptance": {"kind": "accept_length", "tokens_per_step": 2.5}}
    workload = {"arrival": {"kind": "poisson", "rate_per_s": 4.0},
                "lengths": {"kind": "fixed", "input_tokens": 200, "output_tokens": 400}}
    cheap = simulate(scenario({"speculative_algorithm": "NGRAM"}, version="0.5.23", speculation=section,
                              workload=workload, run={"num_requests": 40, "seed": 2})).summary
    dear = simulate(scenario({"speculative_algorithm": "NGRAM"}, version="0.5.23",
                             speculation={**section, "draft_cost_ratio": 0.2}, workload=workload,
                             run={"num_requests": 40, "seed": 2})).summary
    assert cheap["accept_length_mean"] == pytest.approx(2.5, rel=0.05)
    assert dear["tpot_s_mean"] > 1.5 * cheap["tpot_s_mean"]  # 11 drafts a step at 0.2 of a target step each


def _one_decoding_request(batch_kind: str = "speculative"):
    """(batch, its member): a 10-token prompt computed, one output token, 20 at most, in one-token pages; the
    speculative batch drafts 3 and accepts every one (α = 1)."""
    kv = PagedKVManager(num_blocks=100, block_size=1)
    batch = DecodeTracker(kv) if batch_kind == "plain" else SpeculativeDecodeBatch(
        num_speculative_tokens=3, alpha_sampler=lambda rng: 1.0, ragged="per_request", rng=np.random.default_rng(0),
        kv=kv)
    request = Request(request_id=7, arrival_s=0.0, num_prompt_tokens=10, max_output_tokens=20)
    kv.allocate_slots(request, 10)
    request.num_computed_tokens, request.num_output_tokens = 10, 1
    batch.add(request)
    batch.allocate_new_blocks()
    return batch, request


def test_the_speculative_batch_counts_its_steps_and_reads_live_outputs_for_the_ratio():
    batch, request = _one_decoding_request()
    batch.advance()  # α = 1: every draft accepted, 4 tokens
    assert batch.clock == 1 and batch.live_output_tokens(request) == 5 and request.num_output_tokens == 1
    batch.remove(request)
    assert batch.live_output_tokens(request) == request.num_output_tokens == 5
    batch.advance()  # no member: no step
    assert batch.clock == 1


def test_both_decode_batches_give_the_running_requests_remaining_outputs_for_the_ratio():
    # SGLang's reservation sums each running request's remaining output clipped at 4,096: the decoding members' from
    # the batch's live counters, a prefilling request's (not a member) from its own
    for batch_kind in ("plain", "speculative"):
        batch, decoding = _one_decoding_request(batch_kind)
        batch.advance()  # plain: one token (2 out); speculative, α = 1: four (5 out)
        prefilling = Request(request_id=8, arrival_s=0.0, num_prompt_tokens=50, max_output_tokens=9000)
        remaining = batch.remaining_outputs({7: decoding, 8: prefilling})
        assert remaining.dtype == np.int64
        assert sorted(remaining.tolist()) == ([18, 9000] if batch_kind == "plain" else [15, 9000])
        assert clipped_outputs_sum(remaining, SGLANG_CLIP_MAX_NEW_TOKENS) == remaining.min() + 4096


def test_sglang_speculation_runs_admit_by_the_ratio_retract_when_short_and_repeat_byte_for_byte():
    # 1,500-token outputs: the new-token ratio falls as the steps go by (0.7 to 0.098 over 600), admits more than the
    # 4,000-token pool holds once they all write, and SGLang retracts
    short = scenario({**EAGLE, "max_total_tokens": 4000, "max_running_requests": 16},
                     workload={"arrival": {"kind": "poisson", "rate_per_s": 20.0},
                               "lengths": {"kind": "fixed", "input_tokens": 100, "output_tokens": 1500}},
                     run={"num_requests": 30, "seed": 3})
    first, again = simulate(short), simulate(short)
    assert len(first.requests) == 30 and first.requests["output_tokens"].eq(1500).all()
    assert first.summary["preemptions"] > 0
    assert first.requests.equals(again.requests) and first.summary == again.summary
    roomy = simulate(scenario(EAGLE))
    assert roomy.summary["preemptions"] == 0 and len(roomy.requests) == BASE["run"]["num_requests"]


def test_the_shipped_scenario_halves_the_tpot_at_low_load_and_queues_at_48_running_requests():
    """scenarios/sglang_eagle.yaml (README's table): what it says of EAGLE at 2 and 30 req/s."""
    from pathlib import Path

    from sim.api import load_scenario_set
    path = Path(__file__).resolve().parents[2] / "scenarios" / "sglang_eagle.yaml"
    summary = {name: simulate(sc).summary for name, sc in load_scenario_set(path).items()}
    assert summary["low-load/eagle"]["tpot_s_p50"] < 0.6 * summary["low-load/off"]["tpot_s_p50"]
    assert summary["busy/eagle"]["ttft_s_p50"] > 10 * summary["busy/off"]["ttft_s_p50"]
    assert summary["busy/eagle-256-running"]["ttft_s_p50"] < 1.0
    assert summary["busy/eagle-256-running"]["tpot_s_p50"] < summary["busy/off"]["tpot_s_p50"]


def test_the_shipped_standalone_scenario_speeds_decoding_and_queues_at_48_running_requests():
    """scenarios/sglang_standalone.yaml (README's table): what it says of a Llama-3.1-8B draft for Llama-3.1-70B."""
    from pathlib import Path

    from sim.api import load_scenario_set
    path = Path(__file__).resolve().parents[2] / "scenarios" / "sglang_standalone.yaml"
    scenarios = dict(load_scenario_set(path).items())
    summary = {name: simulate(sc).summary for name, sc in scenarios.items()}
    assert summary["low-load/standalone"]["tpot_s_p50"] < 0.7 * summary["low-load/off"]["tpot_s_p50"]
    assert summary["busy/standalone"]["ttft_s_p50"] > 10 * summary["busy/off"]["ttft_s_p50"]
    assert summary["busy/standalone-256-running"]["ttft_s_p50"] < 1.0
    assert summary["busy/standalone-256-running"]["tpot_s_p50"] < summary["busy/off"]["tpot_s_p50"]
    pool = resolve(scenarios["busy/standalone"]).kv_capacity_tokens
    assert pool < 0.7 * resolve(scenarios["busy/off"]).kv_capacity_tokens


@pytest.mark.parametrize("alpha, gamma", [(0.0, 3), (0.5, 1), (0.5, 3), (0.75, 3), (0.9, 5), (1.0, 4)])
def test_an_accept_length_is_the_alpha_whose_drafts_yield_it(alpha, gamma):
    # (1 - α^(γ+1)) / (1 - α) tokens a verification (Leviathan et al. 2023); γ = 1: 1 + α exactly
    from sim.sched.speculative import alpha_for_tokens, tokens_per_verification
    tokens = tokens_per_verification(alpha, gamma)
    assert alpha_for_tokens(tokens, gamma) == pytest.approx(alpha, abs=1e-12)
    assert tokens_per_verification(0.5, 1) == 1.5 and tokens_per_verification(0.5, 3) == 1.875


def test_an_accept_length_acceptance_runs_at_that_many_tokens_a_verification():
    """SGLang logs its accept length; given as the acceptance, a run's verifications yield it on average."""
    accept = {**SECTION, "num_speculative_tokens": 3, "acceptance": {"kind": "accept_length", "tokens_per_step": 2.5}}
    sc = scenario({}, speculation=accept, workload={"arrival": {"kind": "poisson", "rate_per_s": 5.0},
                                                    "lengths": {"kind": "fixed", "input_tokens": 100,
                                                                "output_tokens": 2000}},
                  run={"num_requests": 40, "seed": 1})
    summary = simulate(sc).summary
    assert summary["accept_length_mean"] == pytest.approx(2.5, rel=0.03)  # 40 x 2,000 tokens: ~32,000 verifications
    assert summary["accept_length_mean"] == pytest.approx(1 + 3 * summary["draft_acceptance_rate"], rel=1e-12)
    with pytest.raises(ConfigError, match=r"^speculation.acceptance.tokens_per_step: 4.5 is more than 3 drafts"):
        scenario({}, speculation={**accept, "acceptance": {"kind": "accept_length", "tokens_per_step": 4.5}})


@pytest.mark.parametrize("width, verified, allowed", [(1, 7, "5, or leave it out"), (4, 100, "5 to 53"),
                                                      (4, 4, "5 to 53")])
def test_verified_tokens_outside_a_chains_or_a_trees_range_are_refused(width, verified, allowed):
    # a chain of 4 drafts verifies 5; a tree of width 4: the root, 4 after the first step, 16 after each later one
    raw = {**BASE, "speculation": {**SECTION, "num_speculative_tokens": 4, "draft_tree_width": width,
                                   "num_verified_tokens": verified}}
    with pytest.raises(ConfigError) as err:
        validate_scenario(raw)
    assert str(err.value) == (f"speculation.num_verified_tokens: {verified} is not allowed with 4 draft steps of "
                              f"width {width}; allowed: {allowed}")
