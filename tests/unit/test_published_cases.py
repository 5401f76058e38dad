"""The committed published vLLM measurements (benchmarks/published/vllm_e2e.yaml) are complete and simulate-able."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_published import CASES, COST_MODELS, scenario

from sim.config.files import validate_scenario
from sim.model.catalog import get_model, model_names


def test_every_case_cites_its_source_and_quotes_what_the_benchmark_needs():
    data = yaml.safe_load(CASES.read_text())
    assert len(data["cases"]) >= 5
    for case in data["cases"]:
        url = data["sources"][case["source"]]
        assert url.startswith("https://github.com/") and "/blob/" in url  # pinned to a commit
        q = case["quoted"]
        assert q["successful_requests"] == case["num_prompts"]
        for key in ("benchmark_duration_s", "mean_ttft_ms", "mean_tpot_ms", "total_input_tokens",
                    "total_generated_tokens"):
            assert q[key] > 0, (case["name"], key)
        assert case["model"] in model_names()  # a catalog name (sim/model/configs/ for the Qwen3 runs)


def test_each_case_is_a_valid_scenario_with_vllm_defaults_and_the_quoted_mean_lengths():
    data = yaml.safe_load(CASES.read_text())
    for case in data["cases"]:
        raw = scenario(case, COST_MODELS["measured + overhead"])
        assert raw["engine"]["name"] == "vllm"  # the engine preset (sim/config/engines/) derives its defaults
        s = validate_scenario(raw)
        n = case["num_prompts"]
        lengths = s.workload.lengths
        if case["dataset"]["name"] == "sharegpt":  # a sample drawn as the client draws it, kept means the quoted ones
            assert lengths.kind == "dataset" and lengths.name == "sharegpt"
            assert lengths.input_mean == case["quoted"]["total_input_tokens"] / n
            assert lengths.output_mean == case["quoted"]["total_generated_tokens"] / n
        else:
            assert lengths.input_tokens == round(case["quoted"]["total_input_tokens"] / n)
        assert s.scheduler.chunked_prefill and s.scheduler.max_num_batched_tokens in (2048, 8192)
        assert s.workload.arrival.kind == ("closed_loop" if case.get("concurrency") else "burst")
    # the catalog's Qwen3-14B config has the published shape (5120 hidden, 40 layers)
    q14 = get_model(validate_scenario(scenario(data["cases"][3], COST_MODELS["roofline"])).model)
    assert (q14.hidden_size, q14.num_layers, q14.num_kv_heads) == (5120, 40, 8)
