"""vLLM's `--data-parallel-size` as ServeSim's replicas: independent engines, or the ranks of a lockstep group.

Read in the PyPI sdists of 0.8.0-0.8.5, 0.9.0-0.9.2, 0.10.0-0.10.2, 0.11.0-0.14.0, 0.16.0-0.19.0, 0.25.0-0.29.0 and
0.31.0-0.34.0 (0.15.x taken as 0.16.0, as elsewhere): vllm/v1/engine/core.py (EngineCoreProc.run_engine_core,
DPEngineCoreProc, `_maybe_publish_request_counts`), vllm/v1/engine/core_client.py (get_core_engine_for_request),
vllm/v1/engine/coordinator.py, vllm/forward_context.py, vllm/v1/worker/gpu_model_runner.py, vllm/v1/worker/dp_utils.py
and vllm/entrypoints/cli/serve.py with openai/cli_args.py:

- 0.8.0-0.8.2 have neither the flag nor a data-parallel engine core (both come in 0.8.3; the flag's `since`).
- 0.8.3-0.13.x: every rank runs DPEngineCoreProc, a dense model's too: an idle rank runs dummy batches while any
  rank has work, the ranks all-reduce whether any has unfinished requests every 16 steps (0.8.3-0.8.4), 24
  (0.8.5-0.9.1) or 32 (from 0.9.2), and every forward all-reduces the ranks' token counts (forward_context.py:
  a barrier each step). From 0.9.1 the ranks are padded to the most tokens (get_dp_padding in gpu_model_runner.py,
  unless --enforce-eager; from 0.12.0 coordinate_batch_across_dp, unless the CUDA-graph mode is NONE); before, not.
  A dense model's ranks run as such a lockstep group (`hardware.lockstep`, sim/core/lockstep.py). The load balancer:
  0.8.3-0.9.0 the fewest requests the client has in flight to an engine (`least_outstanding`); 0.9.1-0.10.0 the
  least [waiting, running] pair the engines publish through the coordinator (`fewest_waiting`); 0.10.1-0.13.x the
  lowest 4 x waiting + running of those counts plus the server's own sends since (`least_loaded`); the counts
  current here (vLLM's about every 100 ms; said), ties to the lowest index (each API server's scan starts at its
  own index: not modelled). Where 0.8-0.10 fall back to V0, refused in one line (not read).
- from 0.14.0 a dense (non-MoE) model's ranks are "completely independent, so treat like DP=1": D engines of
  tp x pp GPUs each, each derived as one server would be, behind the API server(s). A mixture-of-experts model's
  ranks stay in lockstep (DPEngineCoreProc; its experts spread over every rank): refused in one line.
- the API servers deal the requests out (DPLBAsyncMPClient, the internal load balancer). 0.14.0-0.26.x: the lowest
  of 4 x waiting + running, from counts the DP coordinator publishes, which a dense model's engines never send it
  (only DPEngineCoreProc publishes them), so the counts are zeros plus the server's own count of requests it sent
  (its waiting + 1 each): the engines in turn, `round_robin` here (the coordinator's zeros, published every 5 s,
  restart the turn at the server's first engine: not modelled). From 0.27.0 every engine publishes its counts
  (before and after each step) and the score is the greater of the server's requests in flight to an engine (x the
  servers) and its published waiting + running, plus 6 x waiting x (KV usage - 0.5) above half-full KV, the scan
  starting one engine further each request (ties to the next engine in turn): `least_outstanding_kv` here, the
  counts current (vLLM's are published before and after each step) and one scan start for all the API servers
  (each of vLLM's starts at its own index and counts its own in-flight requests: not modelled).
- a mixture of experts keeps its ranks in lockstep in every release (from 0.14.0 DPEngineCoreProc asserts it is
  one), its experts spread over every rank's GPUs (`sim.model.specs.ExpertGroup`; read in 0.8.0-0.8.5, 0.9.0-0.9.2,
  0.10.2, 0.11.0, 0.13.0 and 0.14.0): FusedMoE flattens the TP group across the DP ranks (fused_moe/layer.py
  FusedMoE.__init__ in 0.8.x, fused_moe/config.py FusedMoEParallelConfig.make from 0.9.0): moe tp = ranks x tp,
  or with --enable-expert-parallel ep = ranks x tp (`hardware.expert_parallel`). Each expert layer gathers every
  rank's tokens (padded, as above) and sends each rank its own back: before 0.11.0 each rank broadcasts its slice
  and the outputs are all-reduced (0.8.x FusedMoE.naive_multicast and get_dp_group().all_reduce; 0.9.0-0.10.2
  NaiveAll2AllManager, VLLM_ALL2ALL_BACKEND's default "naive"), from 0.11.0 an all-gather and a reduce-scatter
  (AgRsAll2AllManager, the default "allgather_reducescatter"): `hardware.lockstep.expert_exchange`. Then the
  rank's own TP all-reduce (DeepseekV2MoE, `maybe_all_reduce_tensor_model_parallel`). Shared experts, attention,
  dense layers and the LM head run on the rank's own tokens over its own TP group. Not modelled (said): from
  0.11.0, with --enable-expert-parallel and tp > 1, vLLM's sequence-parallel MoE (each TP GPU dispatches a 1 / tp
  chunk over all the GPUs, then all-gathers over its TP group; `use_sequence_parallel_moe`), priced as the exchange
  above; the pplx and DeepEP backends (VLLM_ALL2ALL_BACKEND, --all2all-backend), which send each token only to its
  experts' GPUs. The load balancer of 0.14.0-0.26.x gets the engines' counts (DPEngineCoreProc publishes them):
  `least_loaded`.
- --api-server-count: 1 unless given to 0.14.x, the data-parallel size from 0.16.0 (serve.py, internal balancing).
"""

from __future__ import annotations

from typing import Any

from sim.config.engines.base import Context, dotted_version
from sim.config.engines.vllm_graphs import vllm_graph_mode
from sim.errors import ConfigError

VLLM_DENSE_DATA_PARALLEL_SINCE = (0, 14, 0)  # a dense model's ranks independent (run_engine_core)
VLLM_DP_PADDING_SINCE = (0, 9, 1)  # get_dp_padding: padded unless --enforce-eager
VLLM_DP_PADDING_BY_GRAPH_MODE_SINCE = (0, 12, 0)  # coordinate_batch_across_dp: padded unless the graph mode is NONE
# DPEngineCoreProc._has_global_unfinished_reqs: the all-reduce of unfinished requests every N steps, from a release
VLLM_DP_IDLE_CHECK_STEPS = {(0, 8, 3): 16, (0, 8, 5): 24, (0, 9, 2): 32}
VLLM_DATA_PARALLEL_LEAST_LOADED_SINCE = (0, 27, 0)  # every engine publishes its counts; in-flight and KV score
# get_core_engine_for_request: the lockstep ranks' load balancer, from a release (from 0.14.0 only a mixture of
# experts' ranks step in lockstep, and their engines publish their counts; independent ranks: vllm_data_parallel)
VLLM_LOCKSTEP_ROUTERS = {(0, 8, 3): "least_outstanding", (0, 9, 1): "fewest_waiting", (0, 10, 1): "least_loaded",
                         VLLM_DATA_PARALLEL_LEAST_LOADED_SINCE: "least_outstanding_kv"}
# How each router deals the requests, in the note's words.
_DEALT = {"least_outstanding": "to the engine with the fewest in flight (least_outstanding: the client's own count "
                               "of requests sent and not finished)",
          "fewest_waiting": "to the engine with the fewest waiting, then the fewest running (fewest_waiting: the load "
                            "balancer's least [waiting, running], from counts published about every 100 ms, current "
                            "here)",
          "least_loaded": "to the least loaded (least_loaded: the load balancer's 4 x waiting + running, from counts "
                          "published about every 100 ms, current here)",
          "least_outstanding_kv": "to the engine with the fewest outstanding plus 6 x waiting x the KV usage above "
                                  "half, ties to the next in turn (least_outstanding_kv: the load balancer's score "
                                  "from counts published each step, current here; one scan start for all the API "
                                  "servers)",
          "round_robin": "in turn (round_robin: the load balancer's counts are the server's own sends, as a dense "
                         "model's engines publish none; the coordinator's zeros every 5 s restart the turn, not "
                         "modelled)"}
VLLM_API_SERVER_PER_RANK_SINCE = (0, 15)  # --api-server-count defaults to the DP size (0.15.x as 0.16.0)
VLLM_GATHER_SCATTER_EXCHANGE_SINCE = (0, 11, 0)  # VLLM_ALL2ALL_BACKEND's default "allgather_reducescatter"


def vllm_data_parallel(ctx: Context, notes: list[str], v0_fallback: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """(values, the flags that set them) for `--data-parallel-size` D: D replicas (`hardware.num_replicas`, the
    flag's own target) behind one front-end (`frontend.replicas_per_server`), dealt out as the release's load
    balancer does, stepping in lockstep where the release runs them so (above); refused in one line where that is
    not modelled (`v0_fallback`: the release runs V0 for this setup)."""
    ranks = ctx.flags.get("data_parallel_size", 1)
    if ranks == 1:
        return {}, {}
    first = dotted_version(VLLM_DENSE_DATA_PARALLEL_SINCE)
    if v0_fallback:
        raise ConfigError(f"engine.data_parallel_size: {ranks} is not modelled where vLLM {ctx.version_text} falls "
                          "back to V0 (its data parallelism is not read); allowed: 1, a setup V1 runs, or independent "
                          "servers (hardware.num_replicas)")
    if ctx.model is None:
        raise ConfigError(f"engine.data_parallel_size: {ranks} is not modelled for an unresolved model's ranks; "
                          "allowed: 1, or a catalog model")
    moe = ctx.model.is_moe
    values: dict[str, Any] = {"frontend.replicas_per_server": ranks}
    from_flags = {"frontend.replicas_per_server": "data_parallel_size"}
    lockstep = moe or ctx.version < VLLM_DENSE_DATA_PARALLEL_SINCE
    if lockstep and ctx.pipeline_parallel > 1:
        later = "" if moe else f", or vLLM {first} or later"
        raise ConfigError(f"engine.data_parallel_size: {ranks} beside pipeline_parallel_size {ctx.pipeline_parallel} "
                          f"is not modelled for vLLM {ctx.version_text}, whose ranks run in lockstep; allowed: 1, "
                          f"pipeline_parallel_size 1{later}")
    experts = ""
    if lockstep:
        padded, why = _vllm_dp_padding(ctx)
        check = _by_release(VLLM_DP_IDLE_CHECK_STEPS, ctx.version)
        values["hardware.lockstep"] = {"pad_tokens": padded, "idle_check_steps": check}
        if moe:
            experts = _vllm_expert_group(ctx, ranks, values, from_flags)
        router = _by_release(VLLM_LOCKSTEP_ROUTERS, ctx.version)
        padding = "each rank padded to the most tokens" if padded else f"no padding ({why})"
        how = (f"{ranks} ranks of {ctx.tensor_parallel} GPU(s) each stepping in lockstep (hardware.lockstep: a step "
               f"lasts the slowest rank's, {padding}, idle ranks running dummy forwards until a check every "
               f"{check} steps finds no work), as " + (f"every release runs a mixture of experts' ({experts})" if moe
                                                        else f"every release before {first} runs them"))
    elif ctx.version < VLLM_DATA_PARALLEL_LEAST_LOADED_SINCE:
        router = "round_robin"
    else:
        router = "least_outstanding_kv"
    values["hardware.router"] = router
    dealt = _DEALT[router]
    if not lockstep:
        how = (f"{ranks} independent engines of {ctx.tensor_parallel * ctx.pipeline_parallel} GPU(s) each, as a "
               f"dense model's ranks run from {first}")
    servers = ctx.flags.get("api_server_count")
    if servers is None:
        servers = ranks if ctx.version >= VLLM_API_SERVER_PER_RANK_SINCE else 1
        values["frontend.num_processes"] = servers  # a default: the scenario's own frontend.num_processes wins
    hardware = ctx.raw.get("hardware") or {}
    # the scenario's own value said where it is not the release's (a scenario written back by to_yaml gives both)
    given = [key for key in ("lockstep", "router") if key in hardware
             and not _same_setting(hardware[key], values.get(f"hardware.{key}"))]
    own = "; ".join(f"the scenario's own hardware.{key} applies" for key in given)
    notes.append(f"vLLM {ctx.version_text} --data-parallel-size {ranks}: {how} (hardware.num_replicas {ranks}), "
                 f"behind {servers} API server process(es) (frontend.replicas_per_server {ranks}), requests dealt "
                 f"{dealt}" + (f" ({own})" if own else ""))
    return values, from_flags


def _vllm_expert_group(ctx: Context, ranks: int, values: dict[str, Any], from_flags: dict[str, str]) -> str:
    """Set how a mixture of experts' lockstep ranks share its experts (the module docstring): the exchange by
    release, and with --enable-expert-parallel every GPU of the group holding whole experts. Their words."""
    gpus = ranks * ctx.tensor_parallel
    gather = ctx.version >= VLLM_GATHER_SCATTER_EXCHANGE_SINCE
    values["hardware.lockstep"]["expert_exchange"] = ("all_gather_reduce_scatter" if gather
                                                      else "broadcast_all_reduce")
    ep = bool(ctx.flags.get("enable_expert_parallel"))
    if ep:
        values["hardware.expert_parallel"] = gpus
        from_flags["hardware.expert_parallel"] = "enable_expert_parallel"
    split = f"each of the {gpus} GPUs holding whole experts" if ep else f"each expert split over the {gpus} GPUs"
    how = ("an all-gather, then a reduce-scatter (allgather_reducescatter)" if gather
           else "each rank's broadcast in turn, then an all-reduce (naive)")
    words = (f"its routed experts over every rank's GPUs, {split}, each expert layer running the group's tokens, "
             f"exchanged by {how} over the catalog's interconnect")
    if gather and ep and ctx.tensor_parallel > 1:
        words += ("; vLLM's sequence-parallel MoE (a 1 / tp chunk per GPU) is priced as that exchange, not "
                  "modelled")
    return words


def _same_setting(own: Any, release: Any) -> bool:
    """Whether the scenario's own value is the release's: equal, or a mapping giving every key the release sets
    with its value (none left to a default; a key it does not set, such as a dense model's expert_exchange, is
    read by nothing it runs)."""
    if isinstance(own, dict) and isinstance(release, dict):
        return all(key in own and own[key] == value for key, value in release.items())
    return own == release


def _by_release(table: dict[tuple, Any], version: tuple) -> Any:
    """The value `table` gives from the latest release at or before `version` (its keys: the first release of each)."""
    return table[max(since for since in table if since <= version)]


def _vllm_dp_padding(ctx: Context) -> tuple[bool, str]:
    """(whether lockstep ranks pad to the most tokens, why not): none before 0.9.1 (no get_dp_padding); 0.9.1-0.11.x
    unless --enforce-eager (get_dp_padding), 0.12.0-0.13.x unless the CUDA-graph mode resolves to NONE
    (coordinate_batch_across_dp's allow_dp_padding)."""
    if ctx.version < VLLM_DP_PADDING_SINCE:
        return False, f"no get_dp_padding before {dotted_version(VLLM_DP_PADDING_SINCE)}"
    if ctx.flags.get("enforce_eager"):
        return False, "--enforce-eager"
    if ctx.version >= VLLM_DP_PADDING_BY_GRAPH_MODE_SINCE:
        mode, why = vllm_graph_mode(ctx)
        if mode == "NONE":
            return False, f"CUDA-graph mode NONE: {why}"
    return True, ""
