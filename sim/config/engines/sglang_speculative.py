"""SGLang's speculative decoding (its EAGLE drafters) as ServeSim's speculation section, and what it changes in the
engine's own defaults.

What ServeSim prices is the scenario's `speculation` section: its acceptance (no flag gives one: it is a property of
the model pair and the traffic) and the drafter's cost, `draft_cost_ratio` (an EAGLE or EAGLE3 head, or the model's
own MTP layers for NEXTN). The flags say how many tokens the drafter proposes and set SGLang's rules for them.

Read in the PyPI wheels of every release from 0.5.3 to 0.5.13.post1 (python/sglang/srt/server_args.py
`_handle_speculative_decoding`, from 0.5.13 arg_groups/speculative_hook.py `_handle_eagle_family`,
`auto_choose_speculative_params` and `_handle_gpu_memory_settings`), in the model_executor/ of 0.5.3, 0.5.3.post3,
0.5.4.post2, 0.5.5.post1, 0.5.5.post3, 0.5.6, 0.5.6.post2, 0.5.7, 0.5.8, 0.5.8.post1, 0.5.9, 0.5.10rc0, 0.5.10,
0.5.10.post1, 0.5.11, 0.5.12, 0.5.12.post1, 0.5.13 and 0.5.13.post1, and in the decode memory check of 0.5.3,
0.5.3.post3, 0.5.4.post2, 0.5.5.post1, 0.5.5.post3, 0.5.6, 0.5.7, 0.5.8 and 0.5.8.post1 (managers/scheduler.py),
0.5.9, 0.5.10, 0.5.11, 0.5.12, 0.5.12.post1, 0.5.13 and 0.5.13.post1 (managers/schedule_batch.py); and in the whole
wheels of 0.5.14, 0.5.15, 0.5.15.post1 and 0.5.16 to 0.5.23 (arg_groups/speculative_hook.py, from 0.5.19 beside
arg_groups/memory_hook.py; managers/scheduler.py `init_model_worker`; model_runner_kv_cache_mixin.py, from 0.5.16
mem_cache/kv_cache_configurator.py, `_profile_available_bytes`; model_executor/pool_configurator.py;
mem_cache/allocation_sizing.py; speculative/spec_info.py):

- NEXTN is EAGLE; with EAGLE, EAGLE3 or STANDALONE `max_running_requests` is 48 unless given and mixed chunks are
  off (forced off to 0.5.18; from 0.5.19 off by default, and --enable-mixed-chunk kept for EAGLE and EAGLE3, whose
  mixed steps decode one token a running request without drafts: refused here). The overlap scheduler is off to
  0.5.10.post1 (unless the environment's SGLANG_ENABLE_SPEC_V2, from 0.5.5: not modelled); from 0.5.11 that variable
  defaults to true and "spec v2" keeps it on, for a chain only in 0.5.11-0.5.12 (a tree falls back to v1, without
  it), for any from 0.5.13; 0.5.14 removes the variable (v2 always, the overlap on unless --disable-overlap-schedule).
  Where it is off, the scheduler's own work a step adds to the CPU terms (sglang.py `sglang_overlap_work`).
- without --speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens must be left out too
  (an assertion) and the three are chosen by architecture: (5, 4, 8), a tree of 4 drafts a step, for Llama; (3, 1,
  4) for DeepSeek V2/V3/V3.2, gpt-oss and Bailing MoE (from 0.5.6.post1 also GLM-4.5 MoE and Mistral Large 3); for
  the others (5, 4, 8) to 0.5.7, (3, 1, 4) from 0.5.8. With --speculative-eagle-topk 1 the draft tokens are set to
  num_steps + 1: one chain. Above 1 the draft steps grow a tree (topk candidates a request after the first step,
  topk x topk after each later one; speculative/eagle_worker.py, eagle_utils.py) and num_draft_tokens of it are
  verified: ServeSim's speculation prices it as num_steps draft steps, the first of one token a request, the others
  of topk (`speculation.draft_tree_width`), and a verification of num_draft_tokens a request
  (`speculation.num_verified_tokens`), its acceptance the section's along the accepted path (the accept length
  SGLang logs: `acceptance: {kind: accept_length}`). A tree with pages over one token needs the flashinfer attention
  backend (from 0.5.6 or fa3, from 0.5.13 or triton), and trtllm_mha takes none.
- mem_fraction_static's reserve grows by 2 GiB, from 0.5.10 (0.5.10rc0) to 0.5.13.post1 4 GiB (EAGLE's draft model
  and its graphs; 6 GiB for STANDALONE), after the 10 GiB floor of a GPU over 60 GiB; from 0.5.14 by nothing: the
  draft is loaded before the target's KV pool is sized (scheduler.py init_model_worker), so the pool loses its
  weights, its own embedding and LM head included (set_embed_and_head shares the target's only afterwards), and each
  token's cell grows by the draft's layers (int(cell x (1 + draft layers / layers))). ServeSim takes the draft as one
  decoder layer of the target's shapes with an embedding, an LM head and a 2h x h projection
  (sim/model/memory.py draft_head_bytes_per_gpu: an EAGLE head's and DeepSeek's MTP module's shapes; an EAGLE3
  head's smaller vocabulary head and wider inputs are not read from its config), one draft layer a token.
- to 0.5.6.post2 the target's KV pool is the profiled tokens + max_num_reqs x (num_steps x topk + num_draft_tokens) +
  100, headroom for the drafts and the verification (model_runner.py `draft_runner_cache_size`); from 0.5.7
  (model_runner_kv_cache_mixin.py) the profiled tokens alone, the draft's own KV out of the reserve to 0.5.13.post1.
- the decode step's memory check wants room for num_draft_tokens + topk x num_steps tokens a request to 0.5.8.post1
  (scheduler.py `decode_mem_cache_buf_multiplier`), from 0.5.9 max(topk x num_steps, num_draft_tokens)
  (schedule_batch.py `new_tokens_required_next_decode`, page size 1): num_steps + 1 with topk 1; spec v2 (0.5.11 on)
  keeps up to twice that allocated ahead of a request's tokens (`get_alloc_len_per_decode`: mem_cache/common.py,
  from 0.5.16 mem_cache/allocation_sizing.py; the same through 0.5.23).
  ServeSim's verification step takes num_draft_tokens a request and retracts when they do not fit (where SGLang asks
  more, an approximation, said in the notes).

STANDALONE (a separate draft model: the speculation section's `draft_model`, priced as that model) is modelled from
0.5.14, where its whole weights (it shares no embedding or LM head) come out of the pool and each token's cell grows
by its num_hidden_layers at the target's per-layer size (pool_configurator.py's rule, which assumes them equal);
SGLang's choice without the three numbers is (3, 1, 4) and it keeps mixed chunks off in every release. To
0.5.13.post1 its memory lives in a 6 GiB reserve the KV arithmetic does not split: refused there. The later
algorithms (DFLASH, FROZEN_KV_MTP, DSPARK from 0.5.16, UNO from 0.5.20) are refused.

NGRAM (from 0.5.3; read in the wheels of every release 0.5.3-0.5.13.post1 and, for 0.5.14-0.5.23, in full in 0.5.14
and 0.5.23 and its files compared in the others: server_args.py `_handle_speculative_decoding`, from 0.5.13
arg_groups/speculative_hook.py `_handle_ngram`; speculative/ngram_worker.py, ngram_utils.py / ngram_info.py and the
C++ n-gram cache; model_runner.py's pool headroom; the decode memory check) drafts from a trie of recent output
tokens on the CPU, with no draft model: nothing reserved, nothing added to or taken from the KV pool. Each decode step
is one verification of --speculative-num-draft-tokens D a request (the last token and D - 1 drafts, a tree whose
breadth --speculative-ngram-max-bfs-breadth caps, 10 by default), at most D tokens committed: ServeSim prices it as a
chain of D - 1 drafts verified as D tokens, the acceptance the section's (along the accepted path), the CPU's lookups
and the mask it copies to the GPU by the section's draft_cost_ratio a draft token. D is 12 unless given (to
0.5.10rc0 --speculative-ngram-max-match-window-size's value, 12 by default); --speculative-eagle-topk is replaced by
the breadth; max_running_requests 48 unless given; mixed chunks turned off; the overlap scheduler turned off to
0.5.13.post1, kept from 0.5.14. The decode memory check wants D + breadth x (num_steps or 1) tokens a request to
0.5.8.post1, max((num_steps or 1) x breadth, D) from 0.5.9, with num_steps D // breadth unless given from 0.5.14 (and
twice that allocated ahead; mem_cache/common.py, from 0.5.16 allocation_sizing.py): noted, as for EAGLE. Refused as
SGLang refuses them: pages over one token with a breadth over 1 unless --attention-backend is flashinfer;
--enable-dp-attention (not modelled either way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.config.engines.base import Context, dotted_version, model_of_value, released_before
from sim.errors import ConfigError
from sim.sched.speculative import DEFAULT_SPECULATIVE_TOKENS, MAX_SPECULATIVE_TOKENS, tree_candidate_tokens

SGLANG_SPECULATION_READ = ((0, 5, 3), (0, 5, 23))  # (the first release read, the last)
# server_args.py's choices 0.5.3-0.5.10.post1 (0.5.11 on take more, DFLASH and others, refused here as not modelled)
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
# the EAGLE family, with speculation.draft_cost_ratio (STANDALONE and NGRAM have their own rules below)
SGLANG_MODELLED_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")
SPECULATIVE_FLAGS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                     "speculative_num_draft_tokens", "speculative_draft_model_path")
SGLANG_SPECULATIVE_MAX_RUNNING = 48
# mem_fraction_static's reserve for the EAGLE family's draft: (from this release, MiB), newest first
SGLANG_EAGLE_RESERVED_MIB = (((0, 5, 14), 0), ((0, 5, 10), 4 * 1024), ((0, 0), 2 * 1024))
# from 0.5.14 the draft is loaded before the target's KV pool is sized: its weights come out of the pool, and every
# token keeps its KV beside the target's (a draft layer more a token: pool_configurator.py)
SGLANG_DRAFT_IN_POOL_SINCE = (0, 5, 14)
SGLANG_DRAFT_LAYERS = 1  # an EAGLE or EAGLE3 head, DeepSeek's and GLM-4.5's MTP module (num_nextn_predict_layers 1)
SGLANG_SPECULATIVE_POOL_HEADROOM_UNTIL = (0, 5, 7)
SGLANG_SPECULATIVE_POOL_BUFFER = 100
# auto_choose_speculative_params: (num_steps, eagle_topk, num_draft_tokens)
SGLANG_AUTO_CHAIN, SGLANG_AUTO_TREE = (3, 1, 4), (5, 4, 8)
SGLANG_CHAIN_MODEL_TYPES = {"deepseek_v2", "deepseek_v3", "deepseek_v32", "gpt_oss", "bailing_moe"}
SGLANG_CHAIN_MODEL_TYPES_SINCE = {"glm4_moe": "0.5.6.post1"}
SGLANG_AUTO_CHAIN_FOR_OTHERS_SINCE = (0, 5, 8)  # every architecture but Llama's
SGLANG_MEMORY_CHECK_MAX_SINCE = (0, 5, 9)  # the decode memory check: the larger of drafts and verified tokens
# a tree with pages over one token: flashinfer, from 0.5.6 fa3 too, from 0.5.13 triton too
SGLANG_TREE_PAGE_BACKENDS = (((0, 5, 13), ("flashinfer", "fa3", "triton")), ((0, 5, 6), ("flashinfer", "fa3")),
                             ((0, 0), ("flashinfer",)))
# spec v2 (SGLANG_ENABLE_SPEC_V2 true by default): the overlap scheduler stays on, for a chain from 0.5.11, for any
# tree from 0.5.13; it allocates up to twice the decode's need ahead
SGLANG_SPEC_V2_CHAIN_SINCE, SGLANG_SPEC_V2_TREE_SINCE = (0, 5, 11), (0, 5, 13)
SGLANG_SPEC_V2_ALWAYS_SINCE = (0, 5, 14)  # SGLANG_ENABLE_SPEC_V2 removed: the v2 worker always
# NGRAM (above): D and the tree's breadth unless given, D before 0.5.10 from the match window
SGLANG_NGRAM_DRAFT_TOKENS = 12
SGLANG_NGRAM_BFS_BREADTH = 10
SGLANG_NGRAM_MATCH_WINDOW = 12
SGLANG_NGRAM_FIXED_DRAFT_TOKENS_SINCE = (0, 5, 10)
SGLANG_NGRAM_OVERLAP_SINCE = (0, 5, 14)  # the overlap scheduler no longer turned off; num_steps D // breadth
NGRAM_ACCEPTANCE = "what NGRAM's trie drafts, which the speculation section's acceptance stands for"
NGRAM_SHAPES = ("speculative_ngram_max_bfs_breadth", "speculative_ngram_max_match_window_size")  # read by the rules
# from 0.5.19 --enable-mixed-chunk stays on with the EAGLE family (spec_info.py supports_mixed_chunk): a mixed step's
# running requests then decode one token each, without drafts or a verification (schedule_batch.py), not modelled
SGLANG_SPEC_MIXED_CHUNK_SINCE = (0, 5, 19)


@dataclass(frozen=True)
class SGLangSpeculation:
    algorithm: str  # as SGLang runs it (NEXTN is EAGLE)
    num_steps: int  # draft steps a verification: ServeSim's γ
    topk: int
    num_draft_tokens: int  # tokens verified a request
    reserved_mib: int  # added to mem_fraction_static's reserve
    grows_pool: bool  # whether the target's KV pool gets the drafts' headroom (to 0.5.6.post2)
    draft_in_pool: bool  # whether the draft's weights and KV come out of the target's pool (from 0.5.14)
    memory_check_tokens: int  # KV tokens a request the decode step's memory check wants free
    draft_model: Any = None  # STANDALONE's draft (a ModelSpec; None: an EAGLE head or MTP module, or unreadable)
    keeps_overlap: bool = False  # whether SGLang keeps its overlap scheduler on with it (spec v2; NGRAM from 0.5.14)

    @property
    def draft_layers(self) -> int:
        """The draft's layers in each token's KV cell (model_runner.py eagle_draft_num_layers: a STANDALONE draft's
        num_hidden_layers; an EAGLE head's or an MTP module's one)."""
        return self.draft_model.num_layers if self.draft_model is not None else SGLANG_DRAFT_LAYERS

    @property
    def setting_flags(self) -> dict[str, str]:
        """The flag that sets each of the speculation section's keys (γ, the tree's width, the verified tokens):
        NGRAM's γ and chain follow from its draft tokens alone."""
        if self.algorithm == "NGRAM":
            return {"num_speculative_tokens": "speculative_num_draft_tokens",
                    "draft_tree_width": "speculative_algorithm",
                    "num_verified_tokens": "speculative_num_draft_tokens"}
        return {"num_speculative_tokens": "speculative_num_steps", "draft_tree_width": "speculative_eagle_topk",
                "num_verified_tokens": "speculative_num_draft_tokens"}

    @property
    def pool_headroom_per_request(self) -> int:
        """KV tokens the pool grows by a request slot (model_runner.py draft_runner_cache_size, to 0.5.6.post2)."""
        return self.num_steps * self.topk + self.num_draft_tokens

    def pool_tokens(self, profiled_tokens: int, request_slots: int, draft_bytes: int = 0, token_bytes: int = 0,
                    num_layers: int = 1) -> int:
        """The target's KV pool: the profiled tokens and, where SGLang adds it, the headroom of every request slot
        (max_num_reqs); where the draft is in the pool, its `draft_bytes` of weights out of the profiled tokens'
        bytes (`token_bytes` each, over the target's `num_layers`) and each token's cell a draft layer larger
        (model_runner_kv_cache_mixin.py _profile_available_bytes; pool_configurator.py: int(cell x (1 + draft
        layers / layers)))."""
        if self.draft_in_pool:
            cell = int(token_bytes * (1 + self.draft_layers / num_layers))
            return max(0, (profiled_tokens * token_bytes - draft_bytes) // cell)
        if not self.grows_pool:
            return profiled_tokens
        return profiled_tokens + request_slots * self.pool_headroom_per_request + SGLANG_SPECULATIVE_POOL_BUFFER


def sglang_speculation(ctx: Context, notes: list[str]) -> SGLangSpeculation | None:
    """The speculation SGLang runs (checked against the scenario's speculation section), or None without it."""
    flags = ctx.flags
    given = [name for name in SPECULATIVE_FLAGS if flags.get(name) is not None]
    section = ctx.raw.get("speculation")
    if section is None:
        if given:
            raise ConfigError(f"engine.{given[0]}: needs the scenario's speculation section (its acceptance, and "
                              "draft_cost_ratio: what the drafter costs); allowed: add one, or leave the flag out")
        return None
    first, last = SGLANG_SPECULATION_READ
    if released_before(ctx.version, ctx.version_text, first) or ctx.version > last:
        raise ConfigError(f"speculation: SGLang {ctx.version_text}'s speculative decoding is not read (its rules are "
                          f"read for {dotted_version(first)} to {dotted_version(last)}); allowed: one of those "
                          "releases, or no speculation section")
    if not isinstance(section, dict):
        return None  # validation reports it
    algorithm = flags.get("speculative_algorithm")
    _check_draft_model(ctx, algorithm, section.get("draft_model") is not None)
    ngram_flags = [name for name in flags if name.startswith("speculative_ngram_") and flags[name] is not None]
    if algorithm == "NGRAM":
        shaping = [name for name in ngram_flags if name not in NGRAM_SHAPES]
        if shaping:
            notes.append(f"SGLang NGRAM: --{shaping[0].replace('_', '-')} and the like shape what the trie drafts, "
                         "which the speculation section's acceptance stands for")
        return _ngram_rules(ctx, notes)
    if ngram_flags:
        notes.append(f"SGLang --{ngram_flags[0].replace('_', '-')}: read only with --speculative-algorithm NGRAM "
                     "(nothing here)")
    steps, topk, draft = (flags.get(name) for name in ("speculative_num_steps", "speculative_eagle_topk",
                                                       "speculative_num_draft_tokens"))
    if algorithm is None:
        if given:
            raise ConfigError(f"engine.{given[0]}: needs --speculative-algorithm (SGLang speculates only with it); "
                              f"allowed: {', '.join(SGLANG_MODELLED_ALGORITHMS)}")
        steps = section.get("num_speculative_tokens", DEFAULT_SPECULATIVE_TOKENS)
        topk = section.get("draft_tree_width", 1)
        draft = section.get("num_verified_tokens")
        draft = steps + 1 if draft is None and isinstance(steps, int) else draft
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in (steps, topk, draft)):
            return None  # validation reports it
        if topk > 1:
            _check_tree_backend(ctx, topk, "speculation.draft_tree_width")
        notes.append(f"SGLang {ctx.version_text}: the speculation section without --speculative-algorithm taken as "
                     f"EAGLE with --speculative-num-steps {steps} --speculative-eagle-topk {topk} "
                     f"--speculative-num-draft-tokens {draft}")
        return _eagle_rules(ctx, "EAGLE", steps, topk, draft, notes)
    if steps is None:
        if topk is not None or draft is not None:
            named = "speculative_eagle_topk" if topk is not None else "speculative_num_draft_tokens"
            raise ConfigError(f"engine.{named}: given without --speculative-num-steps, which SGLang "
                              f"{ctx.version_text} refuses (an assertion); allowed: give --speculative-num-steps too, "
                              "or none of the three")
        steps, topk, draft = SGLANG_AUTO_CHAIN if algorithm == "STANDALONE" else _auto_params(ctx)
        chosen_for = "STANDALONE" if algorithm == "STANDALONE" else _model_name(ctx)
        notes.append(f"SGLang {ctx.version_text} --speculative-algorithm {algorithm}: {steps} steps, topk {topk}, "
                     f"{draft} draft tokens, its choice for {chosen_for} (auto_choose_speculative_params)")
    elif topk is None:
        raise ConfigError(f"engine.speculative_eagle_topk: missing beside --speculative-num-steps (SGLang "
                          f"{ctx.version_text} compares it with 1 and fails without it); allowed: a whole number >= 1")
    elif topk == 1:
        if draft is not None and draft != steps + 1:
            notes.append(f"SGLang --speculative-num-draft-tokens {draft}: set to num_steps + 1 = {steps + 1} with "
                         "topk 1, as SGLang sets it")
        draft = steps + 1
    elif draft is None:
        raise ConfigError(f"engine.speculative_num_draft_tokens: missing beside --speculative-eagle-topk {topk} "
                          f"(SGLang {ctx.version_text} sizes its tree by it and fails without it); allowed: "
                          f"{steps + 1} to {tree_candidate_tokens(steps, topk)}")
    if topk > 1:
        _check_tree(ctx, steps, topk, draft)
    return _eagle_rules(ctx, "EAGLE" if algorithm == "NEXTN" else algorithm, steps, topk, draft, notes)


def _check_draft_model(ctx: Context, algorithm: str | None, has_draft_model: bool) -> None:
    """A draft model is STANDALONE's, modelled from 0.5.14 (its weights and KV out of the KV pool, as ServeSim's
    arithmetic can take them; before, out of a 6 GiB reserve it does not split); NGRAM has none."""
    modelled = (f"allowed: EAGLE, EAGLE3, NEXTN or NGRAM with speculation.draft_cost_ratio, or from "
                f"{dotted_version(SGLANG_DRAFT_IN_POOL_SINCE)} STANDALONE with speculation.draft_model")
    standalone_read = ctx.version >= SGLANG_DRAFT_IN_POOL_SINCE
    if algorithm == "STANDALONE" and not standalone_read:
        raise ConfigError(f"engine.speculative_algorithm: --speculative-algorithm STANDALONE is not modelled for "
                          f"SGLang {ctx.version_text} (to 0.5.13.post1 its draft model lives in a 6 GiB reserve the "
                          f"KV arithmetic does not split); {modelled}")
    if algorithm == "STANDALONE" and not has_draft_model:
        raise ConfigError("engine.speculative_algorithm: STANDALONE needs speculation.draft_model (the draft model "
                          "whose steps are priced and whose weights and KV SGLang takes out of the KV pool); allowed: "
                          "add it, or EAGLE, EAGLE3 or NEXTN with speculation.draft_cost_ratio")
    if has_draft_model and algorithm != "STANDALONE":
        raise ConfigError(f"speculation.draft_model: speculation.draft_model is not modelled for SGLang "
                          f"{ctx.version_text} without --speculative-algorithm STANDALONE (its draft-model "
                          f"algorithm, modelled from {dotted_version(SGLANG_DRAFT_IN_POOL_SINCE)}); allowed: that flag "
                          "on SGLang 0.5.14 or later, or speculation.draft_cost_ratio")


def _check_tree(ctx: Context, steps: int, topk: int, draft: int) -> None:
    """A tree as SGLang takes it, and as ServeSim's speculation prices it (each accepted path at most num_steps long,
    so at least num_steps + 1 tokens verified)."""
    if not steps + 1 <= draft <= tree_candidate_tokens(steps, topk):
        raise ConfigError(f"engine.speculative_num_draft_tokens: {draft} is not modelled with {steps} steps of topk "
                          f"{topk} (fewer than num_steps + 1 cut the accepted path; more than the tree's candidates "
                          f"fail in SGLang); allowed: {steps + 1} to {tree_candidate_tokens(steps, topk)}")
    _check_tree_backend(ctx, topk, "engine.speculative_eagle_topk")


def _check_tree_backend(ctx: Context, topk: int, named: str) -> None:
    """The attention backends SGLang takes a tree with (`named`: where the tree's width was given)."""
    backend = ctx.flags.get("attention_backend")
    if backend == "trtllm_mha":
        raise ConfigError(f"{named}: {topk} with --attention-backend trtllm_mha, which SGLang {ctx.version_text} "
                          "refuses (\"trtllm_mha backend only supports topk = 1\"); allowed: 1")
    paged = next(backends for since, backends in SGLANG_TREE_PAGE_BACKENDS if ctx.version >= since)
    if ctx.flags.get("page_size", 1) > 1 and backend not in paged:
        raise ConfigError(f"engine.page_size: {ctx.flags['page_size']} with a tree of drafts ({named} {topk}), which "
                          f"SGLang {ctx.version_text} refuses unless --attention-backend is {' or '.join(paged)}; "
                          f"allowed: 1, or --attention-backend {paged[0]}")


def _eagle_rules(ctx: Context, algorithm: str, steps: int, topk: int, draft: int,
                 notes: list[str]) -> SGLangSpeculation:
    """`steps` drafts a step, a chain (`topk` 1) or a tree verifying `draft` tokens, with what this release sets for
    it, said in the notes."""
    reserved = next(mib for since, mib in SGLANG_EAGLE_RESERVED_MIB if ctx.version >= since)
    if ctx.version >= SGLANG_MEMORY_CHECK_MAX_SINCE:
        check = max(steps * topk, draft)
    else:
        check = steps * topk + draft
    draft_model = (model_of_value(ctx.raw["speculation"].get("draft_model"), "speculation.draft_model")
                   if algorithm == "STANDALONE" else None)
    v2 = ctx.version >= (SGLANG_SPEC_V2_CHAIN_SINCE if topk == 1 else SGLANG_SPEC_V2_TREE_SINCE)
    spec = SGLangSpeculation(algorithm, steps, topk, draft, reserved_mib=reserved,
                             grows_pool=ctx.version < SGLANG_SPECULATIVE_POOL_HEADROOM_UNTIL,
                             draft_in_pool=ctx.version >= SGLANG_DRAFT_IN_POOL_SINCE, memory_check_tokens=check,
                             draft_model=draft_model, keeps_overlap=v2)
    keeps_mixed = ctx.version >= SGLANG_SPEC_MIXED_CHUNK_SINCE and algorithm != "STANDALONE"
    if ctx.flags.get("enable_mixed_chunk") and keeps_mixed:
        raise ConfigError(f"engine.enable_mixed_chunk: true with speculative decoding is not modelled for SGLang "
                          f"{ctx.version_text} (from {dotted_version(SGLANG_SPEC_MIXED_CHUNK_SINCE)} it keeps mixed "
                          "chunks, whose running requests decode one token each without drafts); allowed: false, or "
                          "leave it out")
    mixed = (" (--enable-mixed-chunk turned off)" if ctx.flags.get("enable_mixed_chunk") else
             " (its default; from 0.5.19 speculation no longer turns them off)" if keeps_mixed else "")
    given = ctx.flags.get("max_running_requests")
    running = (f"max_running_requests {SGLANG_SPECULATIVE_MAX_RUNNING} (its default with speculation)" if given is None
               else f"max_running_requests {given} as given")
    if spec.grows_pool:
        pool = (f"the KV pool larger by max_num_reqs x {spec.pool_headroom_per_request} + "
                f"{SGLANG_SPECULATIVE_POOL_BUFFER} tokens")
    elif spec.draft_in_pool:
        pool = "the draft's weights and its KV out of the KV pool (loaded before the pool is sized)"
    else:
        pool = "the KV pool as profiled"
    reserve = f"{spec.reserved_mib} MiB more reserved" if spec.reserved_mib else "no more reserved"
    if v2:
        check_note = f" (SGLang's spec v2 keeps up to {2 * check} allocated ahead: not modelled)"
    else:
        check_note = "" if check == draft else f" (SGLang's memory check wants {check}: not modelled)"
    if ctx.flags.get("disable_overlap_schedule"):
        overlap = "the overlap scheduler off (--disable-overlap-schedule)"
    elif ctx.version >= SGLANG_SPEC_V2_ALWAYS_SINCE:
        overlap = "the overlap scheduler on (spec v2, always from 0.5.14)"
    else:
        overlap = ("the overlap scheduler on (spec v2, SGLANG_ENABLE_SPEC_V2's default)" if v2 else
                   "the overlap scheduler off (SGLANG_ENABLE_SPEC_V2 not modelled)")
    shape = "a chain" if topk == 1 else f"a tree of topk {topk} verifying {draft} tokens"
    drafter = "speculation.draft_model" if algorithm == "STANDALONE" else "speculation.draft_cost_ratio"
    notes.append(f"SGLang {ctx.version_text} speculative decoding ({algorithm}, {steps} draft steps, {shape}): "
                 f"{running}, mixed chunks off{mixed}, {overlap}, {reserve}, {pool}; the "
                 f"drafter priced by {drafter}; a verification "
                 f"step takes {draft} KV slots a request{check_note}")
    return spec


def _ngram_rules(ctx: Context, notes: list[str]) -> SGLangSpeculation:
    """NGRAM as this release sets it (the module's docstring): a chain of D - 1 drafts verified as D tokens, nothing
    reserved and the KV pool as profiled, said in the notes."""
    flags = ctx.flags
    breadth = flags.get("speculative_ngram_max_bfs_breadth", SGLANG_NGRAM_BFS_BREADTH)
    if flags.get("page_size", 1) > 1 and breadth > 1 and flags.get("attention_backend") != "flashinfer":
        raise ConfigError(f"engine.page_size: {flags['page_size']} with NGRAM's tree of breadth {breadth} "
                          "(--speculative-ngram-max-bfs-breadth), which SGLang refuses unless --attention-backend is "
                          "flashinfer (\"unstable and produces incorrect results for paged attention backends\"); "
                          "allowed: 1, --attention-backend flashinfer, or a breadth of 1")
    if flags.get("enable_dp_attention"):
        raise ConfigError("engine.enable_dp_attention: true with NGRAM is not modelled (SGLang refuses NGRAM with dp "
                          "attention: \"Currently ngram speculative decoding does not support dp attention.\"); "
                          "allowed: false, or leave it out")
    draft = flags.get("speculative_num_draft_tokens")
    if draft is None:
        before_fixed = released_before(ctx.version, ctx.version_text, SGLANG_NGRAM_FIXED_DRAFT_TOKENS_SINCE)
        draft = (flags.get("speculative_ngram_max_match_window_size", SGLANG_NGRAM_MATCH_WINDOW) if before_fixed
                 else SGLANG_NGRAM_DRAFT_TOKENS)
        source = ("--speculative-ngram-max-match-window-size's value" if before_fixed else "its default for NGRAM")
        notes.append(f"SGLang {ctx.version_text} NGRAM: {draft} draft tokens a request ({source})")
    if not 2 <= draft <= MAX_SPECULATIVE_TOKENS + 1:
        raise ConfigError(f"engine.speculative_num_draft_tokens: {draft} with NGRAM is not modelled (its last token "
                          f"and {draft - 1} drafts a verification); allowed: 2 to {MAX_SPECULATIVE_TOKENS + 1}")
    topk = flags.get("speculative_eagle_topk")
    if topk is not None and topk != breadth:
        notes.append(f"SGLang --speculative-eagle-topk {topk}: replaced by the n-gram tree's breadth {breadth} with "
                     "NGRAM, as SGLang replaces it")
    steps = flags.get("speculative_num_steps")
    overlap_kept = ctx.version >= SGLANG_NGRAM_OVERLAP_SINCE
    if steps is None and overlap_kept:
        steps = draft // breadth
    if ctx.version < SGLANG_MEMORY_CHECK_MAX_SINCE:  # (num_steps or 1: scheduler.py, schedule_batch.py, common.py)
        check = draft + breadth * (steps or 1)
    else:
        check = max((steps or 1) * breadth, draft)
    spec = SGLangSpeculation("NGRAM", draft - 1, 1, draft, reserved_mib=0, grows_pool=False, draft_in_pool=False,
                             memory_check_tokens=check, keeps_overlap=overlap_kept)
    given = flags.get("max_running_requests")
    running = (f"max_running_requests {SGLANG_SPECULATIVE_MAX_RUNNING} (its default with speculation)" if given is None
               else f"max_running_requests {given} as given")
    mixed = " (--enable-mixed-chunk turned off)" if flags.get("enable_mixed_chunk") else ""
    overlap = ("the overlap scheduler off (--disable-overlap-schedule)" if flags.get("disable_overlap_schedule") else
               "the overlap scheduler on (not turned off from 0.5.14)" if overlap_kept else
               "the overlap scheduler off")
    ahead = f", up to {2 * check} allocated ahead" if overlap_kept else ""
    shape = "a chain" if breadth == 1 else f"a tree of breadth up to {breadth}"
    notes.append(f"SGLang {ctx.version_text} speculative decoding (NGRAM: drafts from an n-gram trie on the CPU, no "
                 f"draft model): {shape} verifying {draft} tokens a request, priced as a chain "
                 f"of {draft - 1} drafts (the acceptance the section's, along the accepted path; the CPU's lookups and "
                 f"the mask it copies to the GPU by speculation.draft_cost_ratio a draft token); {running}, mixed "
                 f"chunks off{mixed}, {overlap}, nothing reserved, the KV pool as profiled; a verification step takes "
                 f"{draft} KV slots a request (SGLang's memory check wants "
                 f"{check}{ahead}: not modelled)")
    return spec


def _model_name(ctx: Context) -> str:
    return ctx.model.name if ctx.model is not None else "the model"


def _auto_params(ctx: Context) -> tuple[int, int, int]:
    """auto_choose_speculative_params by the model's architecture (the catalog's Llama and DeepSeek-V2 models carry no
    model_type: by name)."""
    model = ctx.model
    if model is None:
        return SGLANG_AUTO_TREE
    by_name = (("llama-", "llama"), ("deepseek-v2", "deepseek_v2"))
    model_type = model.model_type or next((kind for prefix, kind in by_name if model.name.startswith(prefix)), None)
    if model_type == "llama":
        return SGLANG_AUTO_TREE
    since = SGLANG_CHAIN_MODEL_TYPES_SINCE.get(model_type)
    chain = (model_type in SGLANG_CHAIN_MODEL_TYPES or ctx.version >= SGLANG_AUTO_CHAIN_FOR_OTHERS_SINCE
             or (since is not None and not released_before(ctx.version, ctx.version_text, since)))
    return SGLANG_AUTO_CHAIN if chain else SGLANG_AUTO_TREE
