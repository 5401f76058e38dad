"""Disaggregated prefill/decode (DistServe, Zhong et al. OSDI 2024; Splitwise, Patel et al. ISCA 2024).

A request goes to a prefill replica, which computes its prompt and samples its first token, exactly as a
colocated replica would (same scheduler, same cost model; the request it sees asks for one output token).
Then its KV cache moves to a decode replica, which decodes the rest:

1. **Prefill** on a prefill replica. The first token exists when that step ends: `first_token_s` (TTFT),
   as vLLM's and DistServe's prefill instances return it. The prefill replica keeps the KV.
2. **Decode blocks.** The request waits in one FIFO queue until a decode replica has a sequence slot and
   the blocks for its prompt KV, which are claimed before anything is sent (`decode_reserved_s`; the wait
   `decode_reserved_s - first_token_s` is the decode-block wait). Replicas are tried fewest outstanding
   requests first (ties: lowest index); while the head of the queue fits nowhere, the requests behind it wait.
3. **Transfer** of the prompt's KV (`prompt_tokens x kv_bytes_per_token`; a hybrid model's sliding layers send their
   last window) over the link of its prefill replica, which sends one transfer at a time (FIFO): it starts at
   `transfer_start_s` = max(blocks reserved, link free) and takes
   - overlap "none": latency + bytes / bandwidth;
   - overlap "layerwise", when the transfer starts the moment the prefill step ends (blocks free and link
     idle): each layer's share (bytes / L) is sent as soon as that layer has been computed, so after the
     step (of length T) ends what is left is latency + max(bytes / (L x bandwidth), bytes / bandwidth - T (L-1) / L)
     (the last layer's share, or, on a slow link, what the step could not hide). Layer l's KV is ready at
     l T / L; sent back to back, the last share ends at max over l of l T / L + (L - l + 1) bytes / (L bw),
     a linear function of l, so the larger of its values at l = L and l = 1. A transfer that had to wait
     is sent whole: the prefill is over. The overlapped step is assumed to have the link to itself.
   `bandwidth` is the link's per-GPU rate times min(TP_prefill, TP_decode): each GPU sends its own shard.
4. When the transfer ends the prefill replica frees the KV and the request joins the decode replica's
   batch at its next step (`decode_admit_s`), then decodes as in a colocated run. A decode replica short of
   blocks preempts as any replica does and recomputes the victim itself; while it has preempted requests
   waiting, it reserves nothing for new transfers (they would take the blocks its own requests wait for).

So TTFT holds no transfer; the transfer (and the decode-block wait) shows in the gap between the first
and the second token, and so in TPOT and E2E, exactly once. A request with one output token is done at the
end of its prefill and moves nothing.

Decode runs (`fast_decode`) are not taken: a transfer can end at any moment and change a decode batch.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.core.engine import Replica, RequestLog, Simulation
from sim.core.request import Request, RequestStatus


@dataclass(frozen=True)
class KVTransferLink:
    """The link a prefill replica sends KV caches over, as the transfer-time formula uses it."""

    bandwidth_bytes_per_s: float  # per transfer: the per-GPU rate times the GPU links used side by side
    latency_s: float  # fixed start-up time of one transfer
    overlap: str  # "none" or "layerwise"
    num_layers: int  # layers whose KV is sent one after the other (layerwise)

    def transfer_s(self, num_bytes: float, prefill_step_s: float = 0.0, *, overlapped: bool = False) -> float:
        """Seconds from the transfer's start to its end (see the module docstring)."""
        whole_s = num_bytes / self.bandwidth_bytes_per_s
        if not overlapped or self.overlap != "layerwise":
            return self.latency_s + whole_s
        layers = self.num_layers
        return self.latency_s + max(whole_s / layers, whole_s - prefill_step_s * (layers - 1) / layers)


class DisaggregatedRequestLog(RequestLog):
    """The request records plus the disaggregated timestamps (NaN where a request never got there)."""

    def __init__(self, num_requests: int):
        super().__init__(num_requests)
        n = num_requests
        self.decode_replica = np.full(n, -1, dtype=np.int64)
        self.decode_reserved_s = np.full(n, np.nan)
        self.transfer_start_s = np.full(n, np.nan)
        self.transfer_end_s = np.full(n, np.nan)
        self.decode_admit_s = np.full(n, np.nan)
        self.transfer_bytes = np.zeros(n, dtype=np.float64)

    def extra_columns(self) -> dict[str, np.ndarray]:
        return {"decode_replica": self.decode_replica, "decode_reserved_s": self.decode_reserved_s,
                "transfer_start_s": self.transfer_start_s, "transfer_end_s": self.transfer_end_s,
                "decode_admit_s": self.decode_admit_s, "transfer_bytes": self.transfer_bytes}


class DisaggregatedSimulation(Simulation):
    """Prefill replicas (indices 0..P-1) and decode replicas (P..P+D-1) joined by `link`.

    The replicas' schedulers come with their roles (sim/sched/disagg_roles.py, given by `sim.run`): the
    prefill replicas' hold a finished request's KV until it has been sent (`PrefillRole`); the decode
    replicas' take prefilled requests (`DecodeRole`)."""

    def __init__(self, prefill_replicas: list[Replica], decode_replicas: list[Replica], router, *,
                 link: KVTransferLink, kv_transfer_bytes: Callable[[int], float], **kwargs):
        kwargs["fast_decode"] = False
        super().__init__(prefill_replicas + decode_replicas, router, **kwargs)
        self.prefill_replicas = prefill_replicas
        self.decode_replicas = decode_replicas
        self.num_prefill_replicas = len(prefill_replicas)
        self.link = link
        self.kv_transfer_bytes = kv_transfer_bytes  # a prompt's tokens -> the bytes of its KV
        self.requests = DisaggregatedRequestLog(self.num_requests)
        self._live: dict[int, Request] = {}  # arrived, neither finished nor rejected
        self._proxies: dict[int, Request] = {}  # request id -> what its prefill replica runs
        self._prefill_step_s: dict[int, float] = {}  # request id -> length of the step that ended its prefill
        self._waiting_for_blocks: deque[Request] = deque()
        self._link_free_s = [0.0] * len(prefill_replicas)
        for replica in decode_replicas:
            replica.scheduler.role.on_join = self._on_join

    # --- arrival: to a prefill replica -------------------------------------------------------------
    def _admit(self, request: Request) -> None:
        self.num_arrived += 1
        replica = self.router.choose(self.prefill_replicas, request)
        request.replica = replica.index
        # The prefill replica computes the prompt and samples one token.
        proxy = Request(request.request_id, request.arrival_s, request.num_prompt_tokens, 1)
        reason = (replica.scheduler.rejection_reason(proxy)
                  or self.decode_replicas[0].scheduler.rejection_reason(request))
        if reason:
            request.status = RequestStatus.REJECTED
            request.reject_reason = reason
            self.requests.record(request, "rejected")
            self.num_done += 1
            return
        replica.scheduler.add_request(proxy)
        self._live[request.request_id] = request
        self._proxies[request.request_id] = proxy
        self._change_in_system(+1)
        replica.num_outstanding += 1
        self._wake(replica)

    @staticmethod
    def _wake(replica: Replica) -> None:
        if replica.wakeup is not None and not replica.wakeup.triggered:
            replica.wakeup.succeed()

    # --- a step ended with finishes ------------------------------------------------------------------
    def finish_requests(self, replica: Replica, finished: list[Request], step_start_s: float) -> None:
        if replica.index >= self.num_prefill_replicas:
            for request in finished:
                del self._live[request.request_id]
            super().finish_requests(replica, finished, step_start_s)
            self._place_waiting()  # their slots and blocks are free
            return
        now = self.env.now
        replica.num_outstanding -= len(finished)
        for proxy in finished:
            request = self._live[proxy.request_id]
            request.first_scheduled_s = proxy.first_scheduled_s
            request.first_token_s = request.last_token_s = proxy.first_token_s
            request.num_computed_tokens = request.num_prompt_tokens
            request.num_output_tokens = 1
            request.num_preemptions += proxy.num_preemptions
            if request.max_output_tokens <= 1:  # done at its first token: nothing to move
                replica.scheduler.role.release(proxy)
                request.status = RequestStatus.FINISHED
                request.finish_s = now
                del self._live[request.request_id], self._proxies[request.request_id]
                self._change_in_system(-1)
                self.requests.record(request, "finished")
                self.num_done += 1
                continue
            self._prefill_step_s[request.request_id] = now - step_start_s
            self._waiting_for_blocks.append(request)
        self._place_waiting()

    def _place_waiting(self) -> None:
        """Reserve decode blocks for the requests waiting for them, in arrival order at the queue."""
        queue = self._waiting_for_blocks
        while queue:
            request = queue[0]
            for replica in sorted(self.decode_replicas, key=lambda r: (r.num_outstanding, r.index)):
                if replica.scheduler.role.reserve(request):
                    break
            else:
                return  # fits nowhere now; a decode finish retries
            queue.popleft()
            replica.num_outstanding += 1
            self._start_transfer(request, replica)

    def _start_transfer(self, request: Request, decode: Replica) -> None:
        now, i = self.env.now, request.request_id
        prefill_index = request.replica
        start = max(now, self._link_free_s[prefill_index])
        num_bytes = self.kv_transfer_bytes(request.num_prompt_tokens)
        step_s = self._prefill_step_s.pop(i)
        overlapped = start == request.first_token_s  # blocks were free and the link idle as the prefill ended
        end = start + self.link.transfer_s(num_bytes, step_s, overlapped=overlapped)
        self._link_free_s[prefill_index] = end
        log = self.requests
        log.decode_replica[i] = decode.index
        log.decode_reserved_s[i] = now
        log.transfer_start_s[i] = start
        log.transfer_end_s[i] = end
        log.transfer_bytes[i] = num_bytes
        self.env.process(self._transfer(request, decode, end))

    def _transfer(self, request: Request, decode: Replica, end_s: float):
        yield self.env.timeout_at(end_s)
        prefill = self.replicas[request.replica]
        prefill.scheduler.role.release(self._proxies.pop(request.request_id))
        self._wake(prefill)  # its freed blocks may admit a waiting prompt
        decode.scheduler.role.receive(request)
        self._wake(decode)

    def _on_join(self, request: Request, now: float) -> None:
        self.requests.decode_admit_s[request.request_id] = now

    # --- run -----------------------------------------------------------------------------------------
    def run(self) -> None:
        env = self.env
        for replica in self.replicas:
            env.process(self.engine(env, replica))
        env.process(self.open_arrivals(env))
        if self.horizon_s is not None:
            env.run(until=self.horizon_s)
        else:
            env.run()
        self._change_in_system(0)
        for replica in self.decode_replicas:
            replica.scheduler.in_flight()  # brings decoding requests' counters up to date
        for request in self._live.values():
            proxy = self._proxies.get(request.request_id)
            if proxy is not None and math.isnan(request.first_token_s):  # still on its prefill replica
                request.first_scheduled_s = proxy.first_scheduled_s
                request.num_preemptions = proxy.num_preemptions
            self.requests.record(request, "unfinished")
        if self.progress is not None:
            self.progress(env.now, self.num_done)
