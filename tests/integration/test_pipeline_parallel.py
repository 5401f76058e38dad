"""Pipeline parallelism (issue 14, section 2): the layer split, memory per GPU, stage costs, and the micro-batch
engine's known answers: one micro-batch pays every stage plus the transfers; many approach one stage's rate."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import SUBPROCESS_TIMEOUT_S, small_scenario

from sim.config.deployment import resolve
from sim.config.files import validate_scenario
from sim.core.step_plan import StepPlan
from sim.cost.pipeline import PipelineCostModel
from sim.errors import ConfigError
from sim.model.catalog import get_model
from sim.model.memory import (
    pipeline_stage_layers,
    stage_kv_bytes_per_token,
    stage_weight_bytes_per_gpu,
    weight_bytes_per_gpu,
)
from sim.run import make_cost_model, simulate

REPO = Path(__file__).resolve().parents[2]


def scenario(**sections):
    return validate_scenario(small_scenario(sections))


# --- the layer split ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layers, pp, split", [
    (80, 4, (20, 20, 20, 20)),
    (80, 3, (27, 27, 26)),  # vLLM: the remainder goes to the stages before the last, second-to-last first
    (61, 4, (15, 15, 16, 15)),  # vLLM's docs' DeepSeek-V3 example
    (61, 2, (31, 30)),
    (32, 32, (1,) * 32),
])
def test_layer_split_is_vllms(layers, pp, split):
    assert pipeline_stage_layers(layers, pp) == split


def test_more_stages_than_layers_is_one_line_error():
    with pytest.raises(ConfigError, match=r"^hardware\.pipeline_parallel: 81 stages for 80 layers; allowed: 1 to 80") as e:
        pipeline_stage_layers(80, 81)
    assert "\n" not in str(e.value)


# --- memory per GPU ----------------------------------------------------------------------------------

# Llama-3.1-70B's config.json: hidden 8192, 64 heads, 8 KV heads of 128, MLP 28672, vocab 128256, 80 layers,
# untied embeddings. Per layer: q and o 8192x8192, k and v 8192x1024, gate/up/down 8192x28672, two norms.
LAYER_PARAMS = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
TABLE_PARAMS = 128256 * 8192


def test_weight_bytes_per_gpu_follow_the_layer_split():
    model = get_model("llama-3.1-70b", "model")
    got = [stage_weight_bytes_per_gpu(model, s, 4, "bf16", 1) for s in range(4)]
    assert got == [2 * (20 * LAYER_PARAMS + TABLE_PARAMS),  # embedding on the first stage
                   2 * 20 * LAYER_PARAMS, 2 * 20 * LAYER_PARAMS,
                   2 * (20 * LAYER_PARAMS + TABLE_PARAMS + 8192)]  # LM head and final norm on the last
    assert sum(got) == weight_bytes_per_gpu(model, "bf16", 1)  # untied: nothing held twice


def test_tied_embeddings_keep_a_table_on_the_last_stage_too():
    model = get_model("llama-3.1-70b", "model").model_copy(update={"tie_word_embeddings": True})
    two = [stage_weight_bytes_per_gpu(model, s, 2, "bf16", 1) for s in range(2)]
    assert sum(two) == weight_bytes_per_gpu(model, "bf16", 1) + 2 * TABLE_PARAMS


def test_kv_per_gpu_and_capacity_follow_the_tightest_stage():
    model = get_model("llama-3.1-70b", "model")
    assert stage_kv_bytes_per_token(model, 20, "bf16", 1) == 2 * 20 * 8 * 128 * 2
    s = scenario(model="llama-3.1-70b", hardware={"tensor_parallel": 2, "pipeline_parallel": 4})
    d = resolve(s)
    assert d.stage_layers == (20, 20, 20, 20) and d.num_gpus == 8
    # Per GPU of a stage (what swap space per GPU divides by): 20 layers x K and V x 4 KV heads x 128 x 2 bytes;
    # the replica's whole token (swapped bytes) is all 80 layers on both ranks.
    assert d.kv_bytes_per_token_per_stage_gpu == 20 * 2 * 4 * 128 * 2
    assert d.kv_bytes_per_token == 80 * 2 * 8 * 128 * 2
    # The first and last stages hold a vocabulary table more than the middle ones, and the last its final norm too
    # (8,192 bf16 weights), so the last bounds the replica.
    usable = int(d.gpu.hbm_bytes * 0.9)
    from sim.model.memory import activation_bytes
    act = activation_bytes(model, d.max_num_batched_tokens, 256, 2)
    first, middle, last = (stage_weight_bytes_per_gpu(model, stage, 4, "bf16", 2) for stage in (0, 1, 3))
    assert first > middle and last - first == 8192 * 2
    tightest = usable - last - act
    assert d.kv_capacity_tokens == tightest // stage_kv_bytes_per_token(model, 20, "bf16", 2)


# --- stage costs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("cost_model, label", [
    ({"kind": "roofline"}, "roofline over 2 pipeline stages"),
    ({"kind": "roofline", "overhead": {"engine": "vllm-cudagraph", "per_step_s": 0.002}},
     "roofline + vllm-cudagraph overhead (per_step_s 2 ms) over 2 pipeline stages"),
    ({"kind": "calibrated", "engine": "fused"}, "calibrated over 2 pipeline stages"),
])
def test_a_pipelines_label_names_what_prices_its_stages(cost_model, label):
    from sim.cost.labels import cost_model_label
    staged = make_cost_model(scenario(hardware={"pipeline_parallel": 2}, cost_model=cost_model))
    assert cost_model_label(staged) == label


def test_roofline_stages_add_up_to_the_whole_step():
    """Each stage prices its own layers, the LM head only on the last; the engine's fixed step time is the
    driver's, once per micro-batch: together exactly the unpipelined step at the same tensor parallelism."""
    whole = make_cost_model(scenario(model="llama-3.1-70b", hardware={"tensor_parallel": 2}))
    pipe = make_cost_model(scenario(model="llama-3.1-70b", hardware={"tensor_parallel": 2, "pipeline_parallel": 4}))
    assert isinstance(pipe, PipelineCostModel) and pipe.num_stages == 4
    plan = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[512], prefill_context_tokens=[0],
                    num_decode_seqs=32, decode_context_tokens=32 * 700, num_sampled_seqs=33)
    stages = pipe.stage_costs(plan)
    assert pipe.driver_s(plan) == resolve(scenario()).gpu.step_overhead_s  # the catalog GPU's fixed step time
    assert pipe.driver_s(plan) + sum(c.time_s for c in stages) == pytest.approx(whole.step_time(plan), rel=1e-12)
    assert sum(c.flops for c in stages) == pytest.approx(whole.step_cost(plan).flops, rel=1e-12)
    assert stages[3].time_s > stages[0].time_s == stages[1].time_s == stages[2].time_s  # the LM head
    gpu = resolve(scenario()).gpu
    transfer = gpu.allreduce_latency_s + 2 * 544 * 8192 * 2 / 2 / (gpu.interconnect_bytes_per_s * gpu.interconnect_efficiency)
    assert pipe.transfer_s(plan) == pytest.approx(transfer, rel=1e-12)
    assert pipe.step_time(plan) == pytest.approx(pipe.driver_s(plan) + sum(c.time_s for c in stages) + 3 * transfer,
                                                 rel=1e-12)


# --- the engine --------------------------------------------------------------------------------------

FIXED = {"kind": "fixed", "prefill_s": 0.4, "decode_s": 0.04}  # llama-3.1-8b's 32 layers: 0.1 / 0.01 per stage


def pipelined(num_requests: int, output_tokens: int, **changes):
    return scenario(hardware={"pipeline_parallel": 4}, cost_model=FIXED,
                    workload={"arrival": {"kind": "burst"},
                              "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": output_tokens}},
                    run={"seed": 0, "num_requests": num_requests}, **changes)


def test_one_micro_batch_takes_every_stage_plus_the_transfers():
    s = pipelined(1, 8)
    result = simulate(s)
    cost = make_cost_model(s)
    r = result.requests.iloc[0]
    t = 0.0
    for i in range(4):  # the prompt: each stage in turn, the activations sent between them (SimPy adds the same way)
        if i:
            t += cost.transfer_s(StepPlan(prefill_chunk_tokens=[64], prefill_request_ids=[0], prefill_context_tokens=[0]))
        t += 0.1
    assert r["first_token_s"] == t
    one = StepPlan(num_decode_seqs=1)
    for _ in range(7):
        for i in range(4):
            if i:
                t += cost.transfer_s(one)
            t += 0.01
    assert r["finish_s"] == t
    steps = result.steps
    assert len(steps) == 8 and steps["duration_s"].iloc[1] == pytest.approx(4 * 0.01 + 3 * cost.transfer_s(one), rel=1e-12)
    # Alone, the request keeps one stage at a time busy: a quarter of the pipeline's time, less the transfers.
    assert result.summary["busy_fraction"] < 0.25


@pytest.mark.parametrize("cost", [{"kind": "roofline"}, {"kind": "roofline", "overhead": {"engine": "vllm-eager"}}])
def test_one_roofline_micro_batch_is_driver_then_stages_and_transfers(cost):
    """The driver's CPU time (the GPU's fixed step time, or the engine overhead's CPU terms), then every stage
    in turn with a transfer between each two: the request's first token, to the last bit."""
    s = scenario(model="llama-3.1-70b", hardware={"tensor_parallel": 2, "pipeline_parallel": 4}, cost_model=cost,
                 workload={"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 300,
                                                                      "output_tokens": 2}},
                 run={"seed": 0, "num_requests": 1})
    pipe = make_cost_model(s)
    plan = StepPlan(prefill_request_ids=[0], prefill_chunk_tokens=[300], prefill_context_tokens=[0],
                    num_sampled_seqs=1, new_request_ids=[0])
    t = pipe.driver_s(plan)
    assert t > 0
    for i, cost_i in enumerate(pipe.stage_costs(plan)):
        if i:
            t += pipe.transfer_s(plan)
        t += cost_i.time_s
    assert simulate(s).requests["first_token_s"].iloc[0] == t


def test_many_micro_batches_approach_one_stages_rate():
    """64 requests decoding together fill the four slots (max_num_seqs 64: 16 each): a micro-batch leaves the
    pipeline once per stage time (0.01 s), at most; the transfers (~10 µs, not holding a stage) cost well
    under 3% of that. (With max_num_seqs 256 two slots would take all 64 requests and two batches would be in
    flight, as in vLLM V1, where a batch holds every running request not already in flight.)"""
    result = simulate(pipelined(64, 200, scheduler={"max_num_seqs": 64}))
    steps = result.steps
    decode = steps[steps["num_prefill_tokens"] == 0]
    ends = decode["start_s"] + decode["duration_s"]
    window_s = float(ends.max() - ends.min())
    rate_per_s = (len(decode) - 1) / window_s
    assert 0.97 * 100 <= rate_per_s <= 100
    assert (decode["num_seqs"] == 16).all()
    # The same GPUs unpipelined run one 64-sequence step per 0.04 s: 1600 tokens/s; the pipeline matches it.
    tokens_per_s = decode["num_output_tokens"].iloc[1:].sum() / window_s
    assert 0.97 * 1600 <= tokens_per_s <= 1600
    assert result.summary["pipeline_stage0_busy_fraction"] > 0.9


def test_pipeline_parallel_one_is_the_plain_engine():
    plain = simulate(scenario())
    explicit = simulate(scenario(hardware={"pipeline_parallel": 1}))
    assert plain.requests.equals(explicit.requests) and plain.steps.equals(explicit.steps)
    assert "pipeline_stages" not in explicit.summary
    assert not isinstance(make_cost_model(scenario(hardware={"pipeline_parallel": 1})), PipelineCostModel)


def test_same_seed_same_pipelined_run():
    a, b = simulate(pipelined(40, 30)), simulate(pipelined(40, 30))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert a.requests["finished"].all()


# --- bad values ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    ({"model": "llama-3.1-70b", "hardware": {"tensor_parallel": 8, "pipeline_parallel": 81}},
     r"hardware\.pipeline_parallel: 81 stages for 80 layers; allowed: 1 to 80"),
    ({"hardware": {"pipeline_parallel": 2}, "scheduler": {"batching": "static"}},
     r"hardware\.pipeline_parallel: 2 needs scheduler\.batching 'continuous'"),
    ({"hardware": {"pipeline_parallel": 2}, "workload": {"samples_per_prompt": 2}},
     r"hardware\.pipeline_parallel: 2 with several sequences per prompt"),
])
def test_bad_combinations_are_one_line_errors(changes, message):
    with pytest.raises(ConfigError, match=message) as e:
        validate_scenario(small_scenario(changes))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("value, expect", [("0", ["hardware.pipeline_parallel", "0", ">= 1"]),
                                           ("33", ["hardware.pipeline_parallel", "33", "allowed: 1 to 32"])])
def test_cli_exit_2_with_one_line(tmp_path, value, expect):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario()))
    result = subprocess.run([sys.executable, "-m", "sim.views.cli", "run", str(path), "--quiet", "--set",
                             f"hardware.pipeline_parallel={value}"], check=False, cwd=tmp_path, capture_output=True, text=True,
                            env={"PYTHONPATH": str(REPO), "COLUMNS": "40", "PATH": "/usr/bin:/bin"},
                            timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and all(x in lines[0] for x in expect), result.stderr


# --- the planner ---------------------------------------------------------------------------------------

def test_planner_enumerates_pipeline_depths_behind_search_pipeline_parallel():
    from sim.tools.planner import (
        CandidateTask,
        candidate_raw,
        candidates,
        plan_settings,
        search_candidate,
    )
    from sim.tools.sweep import num_gpus
    raw = small_scenario({"slo": {"ttft_s": 1.0, "percentile": 90},
                          "search": {"tensor_parallel": [1, 2], "pipeline_parallel": [1, 2], "max_replicas": 2,
                                     "num_seeds": 1, "min_window_s": 2}})
    settings = plan_settings(raw)
    cands = candidates(settings)
    assert [c.name for c in cands] == ["h100-sxm TP1", "h100-sxm TP1xPP2", "h100-sxm TP2", "h100-sxm TP2xPP2"]
    pp = cands[1]
    s = validate_scenario(candidate_raw(raw, pp))
    assert s.hardware.pipeline_parallel == 2 and num_gpus(s) == 2
    outcome = search_candidate(CandidateTask(candidate_raw(raw, pp), pp, settings))
    assert outcome.status == "feasible" and outcome.costs["num_gpus"] == 2 * outcome.num_replicas
    # Without the option nothing changes: one depth, and the candidate scenario does not name it.
    plain = small_scenario({"slo": {"ttft_s": 1.0}})
    only = candidates(plan_settings(plain))
    assert [c.pipeline_parallel for c in only] == [1]
    assert "pipeline_parallel" not in candidate_raw(plain, only[0])["hardware"]


def test_timeline_puts_overlapping_micro_batches_on_their_own_tracks(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from test_timeline import check_trace

    from sim.views.timeline import write_timeline
    result = simulate(pipelined(64, 20, scheduler={"max_num_seqs": 64}))
    path = tmp_path / "t.json"
    write_timeline(result, path)
    import json
    doc = json.loads(path.read_text())
    check_trace(doc)  # includes: the slices of each engine track never overlap
    step_tids = {e["tid"] for e in doc["traceEvents"] if e["ph"] == "X"}
    assert len(step_tids) == 4  # four micro-batches in flight at once at most, each lane a track
    assert sum(e["ph"] == "X" for e in doc["traceEvents"]) == len(result.steps)


@pytest.mark.parametrize("mode", ["recompute", "swap"])
def test_slots_sharing_a_small_kv_pool_preempt_and_still_finish_everything(mode):
    """Four slots compete for 3,000 KV slots under a 200 req/s burst of mixed lengths: requests are preempted,
    memory is never over capacity, every request finishes, and no block is left allocated."""
    s = scenario(hardware={"pipeline_parallel": 4}, kv_cache={"capacity_tokens": 3000},
                 scheduler={"preemption": {"mode": mode}},
                 workload={"arrival": {"kind": "poisson", "rate_per_s": 200},
                           "lengths": {"kind": "uniform", "input_min": 20, "input_max": 600, "output_min": 5,
                                       "output_max": 300}},
                 run={"seed": 1, "num_requests": 300})
    result = simulate(s)
    steps = result.steps
    assert result.requests["finished"].all() and result.requests["preemptions"].sum() > 0
    used = steps["kv_token_slots"] + steps["kv_reserved_slots"] + steps["kv_internal_slots"] + steps["kv_external_slots"]
    assert (used <= steps["kv_capacity_slots"]).all()
    assert steps["kv_token_slots"].iloc[-1] == 0 and used.iloc[-1] == 0


def test_busy_and_bandwidth_utilization_count_each_stage_once():
    """Overlapping micro-batch rows would count a busy second several times: the summary uses the stages' own
    busy time. No roofline op moves bytes faster than bandwidth x memory efficiency, so neither can the stages."""
    s = scenario(model="llama-3.1-70b", hardware={"tensor_parallel": 2, "pipeline_parallel": 4},
                 run={"seed": 0, "num_requests": 200}, scheduler={"max_num_seqs": 64},
                 workload={"arrival": {"kind": "burst"},
                           "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 64}})
    result = simulate(s)
    pp, gpu = result.summary, resolve(s).gpu
    assert 0 < pp["busy_fraction"] <= 1
    assert pp["busy_fraction"] == pytest.approx(sum(pp[f"pipeline_stage{i}_busy_fraction"] for i in range(4)) / 4)
    assert 0 < pp["mbu"] <= gpu.memory_efficiency
    # The rows overlap (up to four micro-batches in flight): their durations add up to more than the run.
    assert result.steps["duration_s"].sum() > 2 * result.steps["end_s"].max()


def test_plan_pp_option_overrides_the_search_and_refuses_bad_depths(tmp_path):
    from sim.tools.planner import candidates, plan_settings
    raw = small_scenario({"slo": {"ttft_s": 1.0}, "search": {"pipeline_parallel": [1, 2]}})
    assert {c.pipeline_parallel for c in candidates(plan_settings(raw, pipeline_parallel=[4]))} == {4}
    with pytest.raises(ConfigError, match=r"^--pp: 0 is not allowed; allowed: 1 to 1024$"):
        plan_settings(raw, pipeline_parallel=[0, 2])
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = subprocess.run([sys.executable, "-m", "sim.views.cli", "plan", str(path), "-q", "--backend", "serial",
                             "--out", str(tmp_path / "o"), "--pp", "1,two"], check=False, cwd=tmp_path,
                            capture_output=True, text=True, env={"PYTHONPATH": str(REPO), "COLUMNS": "40",
                                                                 "PATH": "/usr/bin:/bin"}, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "--pp: '1,two' is not a comma-separated list of int" in lines[0]


def test_a_horizon_leaves_pipelined_requests_unfinished_and_accounted_for():
    s = scenario(hardware={"pipeline_parallel": 2, "num_replicas": 2},
                 workload={"arrival": {"kind": "poisson", "rate_per_s": 50}},
                 run={"seed": 2, "num_requests": 400, "horizon_s": 3.0})
    result = simulate(s)
    req, summary = result.requests, result.summary
    arrived = int((req["arrival_s"] <= 3.0).sum())
    assert summary["num_arrived"] == arrived
    assert summary["num_finished"] + summary["num_unfinished"] + summary["num_rejected"] == arrived
    assert summary["num_unfinished"] > 0 and summary["num_finished"] > 0
    assert (req.loc[req["status"] == "unfinished", "finish_s"].isna()).all()
    assert set(result.steps["replica"]) == {0, 1}
