"""Quantized weights and KV: memory room, bytes per step, and fp8 compute only where asked and supported."""

import pytest

from sim.config.deployment import resolve
from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.run import make_cost_model, simulate


def scenario(weights="bf16", kv="bf16", fp8_compute=False, gpu="h100-sxm", model="llama-3.1-8b"):
    return validate_scenario({
        "model": model,
        "hardware": {"gpu": gpu},
        "workload": {"arrival": {"kind": "poisson", "rate_per_s": 20},
                     "lengths": {"kind": "preset", "name": "sharegpt"}},
        "scheduler": {"max_model_len": 4096},
        "quantization": {"weights": weights, "kv_cache": kv, "fp8_compute": fp8_compute},
        "run": {"seed": 0, "num_requests": 300},
    })


def test_smaller_weights_leave_more_kv_room():
    rooms = [resolve(scenario(weights=w)).kv_capacity_tokens for w in ("bf16", "fp8", "int8", "int4")]
    assert rooms[0] < rooms[1] <= rooms[2] < rooms[3]


def test_kv_dtype_changes_bytes_per_token_exactly():
    bf16, fp8 = scenario(kv="bf16"), scenario(kv="fp8")
    assert resolve(bf16).kv_bytes_per_token_per_gpu == 131072 and resolve(fp8).kv_bytes_per_token_per_gpu == 65536
    assert resolve(fp8).kv_capacity_tokens == pytest.approx(2 * resolve(bf16).kv_capacity_tokens, abs=2)


def test_decode_reads_fewer_bytes_and_runs_faster_with_int4_weights():
    plan = StepPlan(num_decode_seqs=8, decode_context_tokens=8 * 1000, num_sampled_seqs=8)
    bf16, int4 = make_cost_model(scenario()), make_cost_model(scenario(weights="int4"))
    assert int4.step_cost(plan).bytes < 0.5 * bf16.step_cost(plan).bytes
    assert int4.step_time(plan) < bf16.step_time(plan)
    assert simulate(scenario(weights="int4")).summary["tpot_s_mean"] < simulate(scenario()).summary["tpot_s_mean"]


def test_fp8_compute_only_when_asked_and_supported():
    prefill = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[8192], prefill_context_tokens=[0],
                       num_sampled_seqs=1)
    bf16 = make_cost_model(scenario(weights="fp8")).step_time(prefill)
    fp8 = make_cost_model(scenario(weights="fp8", fp8_compute=True)).step_time(prefill)
    assert fp8 < 0.7 * bf16  # the compute-bound prefill runs at the fp8 rate
    # The A100 has no fp8 tensor cores: asking for fp8 compute changes nothing there.
    a100 = make_cost_model(scenario(weights="fp8", gpu="a100-80gb")).step_time(prefill)
    a100_fp8 = make_cost_model(scenario(weights="fp8", fp8_compute=True, gpu="a100-80gb")).step_time(prefill)
    assert a100_fp8 == a100
