"""benchmarks/bench_vidur.py's helpers: the shared trace both simulators read, and Vidur's offline cache layout.

The benchmark itself needs Vidur in its own venv; these parts need neither Vidur nor ../shared.
"""

from __future__ import annotations

import json
import lzma
import math
from pathlib import Path

import pandas as pd
import pytest

from helpers import load_benchmark
from sim.config.files import validate_scenario
from sim.run import make_workload


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_vidur")


@pytest.fixture
def azure_csv(tmp_path: Path) -> Path:
    """Three requests 1 s and 3 s apart; the last one longer than Vidur's 4096-token cap."""
    path = tmp_path / "azure.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:00:00.0,100,10\n"
                    "2023-11-16 18:00:01.0,0,0\n"
                    "2023-11-16 18:00:04.0,5000,200\n")
    return path


def test_trace_cycles_rows_and_rescales_gaps_to_the_rate(bench, azure_csv):
    frame = bench.build_trace(7, rate_per_s=4.0, source=azure_csv)
    # Rows cycle 0, 1, 2, 0, 1, 2, 0; gaps cycle 1 s, 3 s (mean 2 s) and are scaled to a mean of 0.25 s.
    assert frame["arrived_at"].tolist() == pytest.approx([0, 0.125, 0.5, 0.625, 1.0, 1.125, 1.5])
    # Empty prompts and outputs become 1 token; the long prompt is cut so that prompt + output = 4096.
    assert frame["num_prefill_tokens"].tolist() == [100, 1, 3896, 100, 1, 3896, 100]
    assert frame["num_decode_tokens"].tolist() == [10, 1, 200, 10, 1, 200, 10]
    assert (frame["num_prefill_tokens"] + frame["num_decode_tokens"]).max() <= bench.MAX_TOTAL_TOKENS


def test_vidur_csv_holds_the_same_rows_and_servesim_replays_them(bench, azure_csv, tmp_path):
    frame = bench.build_trace(5, rate_per_s=2.0, source=azure_csv)
    plain, vidur = bench.write_traces(frame, tmp_path / "traces")
    theirs = pd.read_csv(vidur)
    assert set(theirs["Date"]) == {bench.VIDUR_TRACE_DATE}  # vidur keeps only rows of that date
    mine = pd.read_csv(plain)
    assert theirs["Time"].tolist() == mine["arrived_at"].tolist()
    assert theirs["PromptTokenCount"].tolist() == mine["num_prefill_tokens"].tolist()
    assert theirs["CompletionTokenCount"].tolist() == mine["num_decode_tokens"].tolist()

    scenario = validate_scenario(bench.servesim_scenario(plain, 5, kv_capacity_tokens=4096 * 4))
    workload = make_workload(scenario)
    assert workload.num_clipped == 0  # prompt + output <= max_model_len: ServeSim replays them unchanged
    assert workload.arrival_s.tolist() == mine["arrived_at"].tolist()
    assert workload.input_tokens.tolist() == mine["num_prefill_tokens"].tolist()
    assert workload.output_tokens.tolist() == mine["num_decode_tokens"].tolist()

def test_offline_cache_is_a_hugging_face_dataset_snapshot(bench, tmp_path):
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "mlp.csv").write_text("n_head,num_tokens\n32,1\n")
    (profile / "attention.csv").write_text("n_embd,batch_size\n4096,1\n")
    bench.prepare_vidur_cache(tmp_path / "cache", profile)
    repo = tmp_path / "cache" / "profiling_data" / "compute" / "datasets--project-vajra--dev-staging-meta-llama-llama-3-8b-h100"
    snapshot = repo / "snapshots" / (repo / "refs" / "main").read_text()
    assert lzma.decompress((snapshot / "mlp.csv.xz").read_bytes()) == (profile / "mlp.csv").read_bytes()
    assert lzma.decompress((snapshot / "attention.csv.xz").read_bytes()) == (profile / "attention.csv").read_bytes()
    # vidur asserts these two fields against its replica config (model name and device).
    assert json.loads((snapshot / "config.json").read_text()) == {"model": "meta-llama/Llama-3-8B", "device_sku": "h100"}
    network = tmp_path / "cache" / "profiling_data" / "network" / "datasets--project-vajra--dev-staging-h100-dgx"
    net_snapshot = network / "snapshots" / (network / "refs" / "main").read_text()
    assert json.loads((net_snapshot / "config.json").read_text()) == {"sku": "h100_dgx"}


def test_vidur_log_phases_split_setup_from_the_event_loop(bench):
    log = ("INFO 11-23 04:10:01 trace_replay_request_generator.py:73] Loaded trace file t.csv with 1000 requests\n"
           "  a continuation line without a stamp\n"
           "INFO 11-23 04:11:04 simulator.py:57] Starting simulation with cluster: Cluster({})\n"
           "INFO 11-23 04:11:10 simulator.py:79] Simulation ended at: 103.7s\n")
    assert bench.vidur_log_phases(log) == {"setup_s": 63.0, "loop_s": 6.0}
    assert math.isnan(bench.vidur_log_phases("no stamps here")["loop_s"])


def test_vidur_step_sums_its_ops_over_32_layers_with_its_roundings(bench):
    # Every per-token op 0.01 ms at 8 tokens (3 decodes + 5 prompt tokens round to 8); decode attention 0.5 ms for
    # 3 sequences at an average context rounded up to 256; prefill attention 1 ms for 5 tokens (rounded to 32)
    # over 260 tokens of KV (rounded up to 512).
    tables = {op: {(8,): 0.01} for op in bench.VIDUR_TOKEN_OPS}
    tables["attn_decode"] = {(3, 256): 0.5}
    tables["attn_prefill"] = {(512, 32): 1.0}
    per_layer_ms = 9 * 0.01 + 0.5 * 1.1 + 1.0
    assert bench.vidur_step_s(tables, 5, 255, 3, 200) == pytest.approx(per_layer_ms * 32 * 1e-3)
    decode_only_ms = (9 * 0.01 + 0.5 * 1.1) * 32
    assert bench.vidur_step_s(tables, 0, 0, 3, 256) == pytest.approx(decode_only_ms * 1e-3)
    assert bench.vidur_step_s(tables, 0, 0, 4, 200) is None  # batch 4 is not in its decode-attention table
