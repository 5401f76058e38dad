"""SGLang's data-parallel attention (`--enable-dp-attention --dp D` with `--tp T`) as a lockstep group.

Read in the PyPI wheels of 0.5.3 and 0.5.9 (python/sglang/srt/, the DeepSeek-V2/V3 path), the memory rule in every
release 0.5.3-0.5.13 (`sglang.SGLANG_DP_ATTENTION_READ`); the releases between are taken to run it alike:

- T GPUs, one scheduler each, in D ranks of A = T / D GPUs (layers/dp_attention.py
  compute_dp_attention_world_info: attn_tp_size = tp_size // dp_size). Each rank schedules its own batch, prefill
  first, and every rank runs a forward whenever any rank has tokens, an IDLE one where it has none
  (scheduler.py prepare_mlp_sync_batch; 0.5.9 scheduler_dp_attn_mixin.py): ServeSim's lockstep ranks
  (`hardware.lockstep`, sim/core/lockstep.py), checking for work every step (`idle_check_steps` 1). The data-parallel
  controller deals the requests to the ranks in turn (round_robin) behind one TokenizerManager.
- Decode steps pad every rank to the most tokens (the CUDA graph's bucket of the max, DpPaddingMode MAX_LEN); a
  step where any rank prefills is never padded from 0.5.3 (`get_dp_padding_mode`: `if is_extend_in_batch: return
  SUM_LEN`): `pad_prefill_steps` false. The graphs' own bucket above the max is not modelled (vLLM's ranks are
  priced the same way).
- Every layer's MLP runs the whole group's gathered tokens over all T GPUs: the routed experts (moe tp = T / ep,
  ep from --ep-size), and with the default --moe-dense-tp-size the dense layers and the shared experts too
  (communicator.py _compute_mlp_mode: FULL), exchanged around each layer over all T GPUs: an all-gather and a
  reduce-scatter in a decode step, two all-reduces in one with a prefill (`expert_exchange` dp_attention,
  `roofline_kernel.expert_exchange_s`).
- Each rank's scheduler gets chunked_prefill_size // D, max_running_requests // D where the flag is given (its own
  KV tokens // 2 otherwise), and schedule_conservativeness x 0.3 (server_args.py _handle_data_parallelism;
  tp_worker.py); the memory rule reserves cuda_graph_max_bs x D x 3 MiB more (x 1.5 more above a graph batch of 300).

Not modelled, and said: the LM head (each rank's rows gathered over all T GPUs unless --enable-dp-lm-head) is priced
on the rank's own A GPUs, as is the input embedding's memory (replicated under DP attention to 0.5.3); the metadata
all-gather each scheduler loop runs; with A > 1, a rank's own two all-reduces a layer over its A GPUs are priced
beside the exchange, into which SGLang folds them (the gather sums the attention's partial outputs, the
reduce-scatter replaces the MLP's all-reduce): an over-count. Refused: a model other than a DeepSeek-V2/V3 mixture of experts (whose path
was read; DeepSeek-V3.2 too, which SGLang serves as DeepseekV3ForCausalLM), speculative decoding, pipeline parallelism.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sim.config.engines.base import Context, ConfigError

SGLANG_DP_CONSERVATIVENESS_FACTOR = 0.3  # server_args.py: schedule_conservativeness * 0.3 under DP attention


def sglang_dp_attention_ranks(ctx: Context) -> int:
    """D where --enable-dp-attention runs with --dp D > 1 (a lockstep group), else 1."""
    dp = ctx.flags.get("dp_size", 1)
    return dp if ctx.flags.get("enable_dp_attention", False) and dp > 1 else 1


def sglang_dp_attention_context(ctx: Context) -> tuple[Context, Context]:
    """(the context SGLang's own rules read: its tp_size T, the flag's where given (a scenario written back holds
    each rank's A GPUs as hardware.tensor_parallel), and the context a rank's KV is sized with: A GPUs, the experts
    and dense MLPs over all T); ConfigError where the flags ask for what is not modelled."""
    ranks = sglang_dp_attention_ranks(ctx)
    where = f"engine.dp_size: {ranks} with --enable-dp-attention"
    tp = ctx.flags.get("tp_size")
    if tp is None:  # (hardware.tensor_parallel is each rank's GPUs here: SGLang's own T must be its flag)
        raise ConfigError(f"engine.tp_size: missing beside {where[7:]}; allowed: SGLang's --tp T, the GPUs of all "
                          f"{ranks} ranks (each rank's attention over T / {ranks})")
    if ctx.model is not None and not (ctx.model.is_moe and ctx.model.attention == "mla"):
        raise ConfigError(f"{where} is not modelled for {ctx.model.name}; allowed: 1, or a DeepSeek-V2/V3 mixture "
                          "of experts (the path read: models/deepseek_v2.py, layers/communicator.py)")
    if tp % ranks:
        raise ConfigError(f"{where}: {ranks} must divide tp_size {tp} (each rank's attention over tp_size / dp_size "
                          f"GPUs); allowed: {', '.join(str(d) for d in range(1, tp + 1) if tp % d == 0)}")
    if ctx.pipeline_parallel > 1:
        raise ConfigError(f"{where} is not modelled with pipeline_parallel {ctx.pipeline_parallel}; allowed: 1")
    if ctx.flags.get("speculative_algorithm"):
        raise ConfigError(f"{where} is not modelled with speculative decoding (SGLang then keeps prefill and decode "
                          "in separate group steps); allowed: leave speculative_algorithm out, or dp_size 1")
    sglang = dataclasses.replace(ctx, tensor_parallel=tp)
    return sglang, dataclasses.replace(ctx, tensor_parallel=tp // ranks, expert_gpus=tp, dense_gpus=tp)


def sglang_dp_attention_values(ctx: Context, chunk: int, notes: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, the flags that set them) for the lockstep group of `sglang_dp_attention_context`: D ranks of A GPUs
    (hardware.num_replicas, hardware.tensor_parallel), dealt round robin behind one front-end, each with its share of
    the chunk (`chunk`, SGLang's whole one)."""
    ranks = sglang_dp_attention_ranks(ctx)
    tp = ctx.tensor_parallel
    from_flags = {"hardware.tensor_parallel": "tp_size", "hardware.num_replicas": "dp_size",
                  "frontend.replicas_per_server": "dp_size"}
    values: dict[str, Any] = {
        "hardware.tensor_parallel": tp // ranks, "hardware.num_replicas": ranks, "hardware.router": "round_robin",
        "hardware.lockstep": {"pad_tokens": True, "pad_prefill_steps": False, "idle_check_steps": 1,
                              "expert_exchange": "dp_attention"},
        "frontend.replicas_per_server": ranks}
    running = ctx.flags.get("max_running_requests")
    if running is not None:
        values["scheduler.max_num_seqs"] = running // ranks
        from_flags["scheduler.max_num_seqs"] = "max_running_requests"
    notes.append(f"SGLang {ctx.version_text} --enable-dp-attention --dp {ranks} --tp {tp}: {ranks} ranks of "
                 f"{tp // ranks} GPU(s) stepping in lockstep (hardware.lockstep: a step lasts the slowest rank's; decode "
                 "steps padded to the most tokens, steps with a prefill unpadded), each with its own scheduler and KV, "
                 f"dealt round robin behind one front-end; every layer's MLP (routed experts, dense layers, shared "
                 f"experts) runs the gathered tokens over all {tp} GPUs (expert_exchange dp_attention); each rank's "
                 f"chunk {chunk // ranks if chunk > 0 else 'off'}"
                 + (f", max_running_requests {running // ranks}" if running is not None else "")
                 + ", schedule_conservativeness x 0.3 (server_args.py _handle_data_parallelism)")
    folded = ("" if tp == ranks else f"; each rank's own all-reduces over its {tp // ranks} GPUs are priced beside the "
              "exchange, which SGLang folds them into (an over-count)")
    notes.append(f"SGLang {ctx.version_text} --enable-dp-attention: the LM head is priced on each rank's own "
                 f"{tp // ranks} GPU(s) (SGLang gathers every rank's rows over all {tp} unless --enable-dp-lm-head), "
                 f"and the metadata all-gather of each scheduler loop is not priced{folded}")
    return values, from_flags
