"""Disaggregated prefill/decode, the plain-Python parts: the transfer-time formula, the interconnect catalog,
and the scheduler hooks a prefill replica (hold the KV after the first token) and a decode replica (take a
request whose prompt KV was computed elsewhere) use. No event loop."""

from __future__ import annotations

import pytest
from helpers import make_request

from sim.core.disaggregated import KVTransferLink
from sim.errors import ConfigError
from sim.kv.paged import PagedKVManager
from sim.model.interconnects import INTERCONNECTS, get_interconnect
from sim.sched.continuous import ContinuousScheduler
from sim.sched.disagg_roles import DecodeRole, PrefillRole


def test_transfer_without_overlap_is_bytes_over_bandwidth_plus_latency():
    link = KVTransferLink(bandwidth_bytes_per_s=50e9, latency_s=2e-6, overlap="none", num_layers=32)
    num_bytes = 1000 * 131072  # 1,000 tokens of Llama-3.1-8B's bf16 KV
    assert link.transfer_s(num_bytes, prefill_step_s=0.1) == 2e-6 + num_bytes / 50e9
    # Overlap "none" ignores the prefill, overlapped or not.
    assert link.transfer_s(num_bytes, 0.1, overlapped=True) == 2e-6 + num_bytes / 50e9


def test_layerwise_overlap_leaves_the_last_layers_share_on_a_fast_link():
    link = KVTransferLink(bandwidth_bytes_per_s=1e9, latency_s=1e-3, overlap="layerwise", num_layers=4)
    # 4e6 bytes: 4 ms in all, 1 ms per layer; a 40 ms step computes a layer every 10 ms, so each layer's
    # share is sent before the next is ready and only the last one's 1 ms is left after the step.
    assert link.transfer_s(4e6, prefill_step_s=0.04, overlapped=True) == pytest.approx(1e-3 + 1e-3, rel=1e-12)
    # Not overlapped (the transfer had to wait): the whole transfer.
    assert link.transfer_s(4e6, prefill_step_s=0.04, overlapped=False) == pytest.approx(1e-3 + 4e-3, rel=1e-12)


def test_layerwise_overlap_on_a_slow_link_hides_only_what_the_step_covers():
    link = KVTransferLink(bandwidth_bytes_per_s=1e9, latency_s=0.0, overlap="layerwise", num_layers=4)
    # 40 ms to send, a 20 ms step: layer 1 is ready at 5 ms, and from there the link is busy for 40 ms,
    # ending 25 ms after the step: 40 - 20 * 3/4 = 25 ms.
    assert link.transfer_s(40e6, prefill_step_s=0.02, overlapped=True) == pytest.approx(0.025, rel=1e-12)


def test_interconnect_catalog_rates_and_errors():
    assert INTERCONNECTS["nvlink4"].bandwidth_bytes_per_s == 450e9  # 900 GB/s bidirectional
    assert INTERCONNECTS["infiniband-ndr"].bandwidth_bytes_per_s == 400e9 / 8  # 400 Gb/s
    assert INTERCONNECTS["ethernet-100g"].bandwidth_bytes_per_s == 100e9 / 8
    assert get_interconnect("InfiniBand_NDR") is INTERCONNECTS["infiniband-ndr"]
    with pytest.raises(ConfigError, match=r"hardware.disaggregation.link: unknown interconnect 'nvlink9'; allowed: nvlink3"):
        get_interconnect("nvlink9")


def scheduler(num_blocks: int, *, role: str, max_num_seqs: int = 8) -> ContinuousScheduler:
    s = ContinuousScheduler(PagedKVManager(num_blocks, 16), max_num_seqs=max_num_seqs,
                            max_num_batched_tokens=4096, chunked_prefill=False, max_model_len=4096)
    s.role = PrefillRole(s.kv) if role == "prefill" else DecodeRole(s)
    return s


def test_prefill_replica_holds_the_kv_until_released():
    s = scheduler(10, role="prefill")
    proxy = make_request(40, 1)  # the prefill replica's copy asks for one token
    assert s.add_request(proxy)
    plan = s.schedule(0.0)
    assert plan.prefill_chunk_tokens == [40]
    outcome = s.update_from_output(plan, 0.05)
    assert outcome.finished == [proxy] and proxy.first_token_s == 0.05
    assert s.kv.num_free_blocks == 10 - 3  # 40 tokens in 3 blocks of 16, still held
    assert s.kv_usage().token_slots == 40  # counted as token states, not fragmentation
    assert s.schedule(0.05) is None  # nothing left to run
    s.role.release(proxy)
    assert s.kv.num_free_blocks == 10 and not s.role.held and s.kv_usage().token_slots == 0


def test_decode_replica_reserves_blocks_then_decodes_a_prefilled_request():
    s = scheduler(5, role="decode")
    request = make_request(64, 4)
    request.num_computed_tokens, request.num_output_tokens = 64, 1  # prompt computed elsewhere, first token out
    assert s.role.reserve(request)
    assert s.kv.num_free_blocks == 5 - 4  # exactly the prompt's 4 blocks
    other = make_request(64, 4)
    other.num_computed_tokens, other.num_output_tokens = 64, 1
    assert not s.role.reserve(other)  # 4 more blocks are not free: nothing changed
    assert s.kv.num_free_blocks == 1 and s.role.num_reserved == 1
    assert s.kv_usage().token_slots == 64  # its KV on its way counts as token states
    assert s.schedule(0.0) is None  # reserved, but its KV has not arrived
    s.role.receive(request)
    joined = []
    s.role.on_join = lambda r, now: joined.append((r.request_id, now))
    plan = s.schedule(1.0)
    assert joined == [(request.request_id, 1.0)]
    assert plan.num_decode_seqs == 1 and not plan.prefill_request_ids
    assert plan.decode_context_tokens == 65  # its 64 prompt tokens plus the token it computes now
    assert s.kv.num_free_blocks == 0  # token 65 opens a fifth block
    now = 1.0
    finished = []
    while not finished:  # three more tokens: 1 + 3 = 4
        now += 0.01
        finished = s.update_from_output(plan, now).finished
        plan = s.schedule(now) if not finished else plan
    assert finished == [request] and request.num_output_tokens == 4 and s.kv.num_free_blocks == 5
    assert s.role.reserve(other)


def test_decode_replica_reservation_counts_against_max_num_seqs():
    s = scheduler(100, role="decode", max_num_seqs=1)
    first, second = make_request(16, 4), make_request(16, 4)
    for r in (first, second):
        r.num_computed_tokens, r.num_output_tokens = 16, 1
    assert s.role.reserve(first)
    assert not s.role.reserve(second)  # the one sequence slot is taken by the transfer in flight
