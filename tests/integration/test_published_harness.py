"""The published suite's harness (issue 30, item 5): the data loads, cites and counts as the issue asks, a malformed
case is one line, the held-out protocol keeps its sets apart, and a few runs go end to end. Not the accuracy."""

from __future__ import annotations

import csv
import math
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_published  # noqa: E402
import published_suite as ps  # noqa: E402

from sim.config.files import validate_scenario  # noqa: E402

PINNED = re.compile(r"^https://github\.com/[^/]+/[^/]+/(blob|tree)/[0-9a-f]{40}/")


@pytest.fixture(scope="module")
def suite() -> ps.Suite:
    return ps.load_suite()


def test_every_data_file_loads_without_a_malformed_case(suite):
    files = ps.data_files()
    assert len(files) >= 4
    assert suite.errors == []
    assert {c.file for c in suite.cases} == {f.name for f in files}


def test_every_case_cites_a_pinned_url_and_lists_what_its_source_leaves_unstated(suite):
    for c in suite.cases:
        assert PINNED.match(c.url), (c.name, c.url)
        assert c.unstated and all(isinstance(u, str) and u for u in c.unstated), c.name


def test_every_quoted_value_in_the_files_is_a_number():
    for path in ps.data_files():
        for case in yaml.safe_load(path.read_text())["cases"]:
            for key, value in case["quoted"].items():
                if key == "qps" and value == "INF":  # printed so on the TensorRT-LLM page (request rate inf)
                    continue
                assert isinstance(value, (int, float)) and not isinstance(value, bool), (path.name, case["name"], key)
                assert math.isfinite(value) and value >= 0, (path.name, case["name"], key)


def test_no_two_cases_quote_the_same_result(suite):
    """A source's page can repeat another page's result block (GPUStack's GLM-4.5-Air H100 page repeats its A100
    page's eight random-length blocks, digit for digit: left out, gpustack_glm45_air.yaml): two runs never give the
    same figures, so no two cases may quote the same ones."""
    seen: dict[tuple, str] = {}
    for c in suite.cases:
        key = tuple(sorted((k, repr(v)) for k, v in c.quoted.items()))
        assert key not in seen, (c.name, seen.get(key))
        seen[key] = c.name


def test_the_suite_meets_the_issue_minimums(suite):
    cases = suite.cases
    c = ps.counts(cases)
    assert len(cases) >= 40
    assert len(c["source"]) >= 3  # distinct source repositories
    assert len({x.engine.key for x in cases}) >= 2
    assert len(c["gpu"]) >= 2
    assert {1, 2, 4, 8} <= set(c["tp"])
    assert {"bf16", "fp8"} <= set(c["dtype"])
    assert {"latency", "throughput"} <= set(c["kind"])
    # every case compares at least one of the three headline metrics, in SI units
    for x in cases:
        assert x.headline and all(m.measured > 0 and m.unit in ("tok/s", "req/s", "s") for m in x.headline), x.name
        assert x.workload.input_tokens >= 1 and x.workload.output_tokens >= 1, x.name


def test_fit_runs_name_loaded_cases_and_the_two_sets_are_disjoint(suite):
    assert ps.fit_run_problems(suite.cases) == []
    fit = {c.name for c in suite.cases if ps.role(c) == "fit"}
    held = {c.name for c in suite.cases if ps.role(c) == "held-out"}
    assert fit and held and not fit & held
    assert fit | held == {c.name for c in suite.cases}
    assert fit == {n for names in ps.FIT_RUNS.values() for n in names}
    assert len(held) > 2 * len(fit)  # most runs are held out


def test_a_malformed_case_is_one_line_naming_file_case_and_field(tmp_path, suite):
    good = next(c for c in yaml.safe_load((ps.DATA_DIR / "trtllm_perf_overview.yaml").read_text())["cases"])
    data = yaml.safe_load((ps.DATA_DIR / "trtllm_perf_overview.yaml").read_text())
    bad_tp = dict(good, name="bad tp", tensor_parallel="two")
    bad_quote = dict(good, name="bad quote", quoted={"token_throughput_tok_s": "fast"})
    bad_gpu = dict(good, name="bad gpu", gpu="h900")
    bad_model = dict(good, name="bad model", model="qwen3-32b.json")  # a file, no longer a name
    no_engine = {k: v for k, v in good.items() if k != "engine"} | {"name": "no engine"}
    nameless = dict(good, name="nameless engine", engine={"version": "0.17"})
    # a negated option's value reads as the option's own (--no-enable-prefix-caching: true turned caching on)
    negated = dict(good, name="negated flag", engine=dict(good["engine"], flags={"--no-enable-chunked-prefill": True}))
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump({"sources": data["sources"], "unstated": ["x"],
                                    "cases": [good, bad_tp, bad_quote, bad_gpu, bad_model, no_engine, nameless,
                                              negated, "not a mapping"]}))
    (tmp_path / "garbage.yaml").write_text("cases: [\n")
    loaded = ps.load_suite([path, tmp_path / "garbage.yaml"], data_dir=tmp_path)
    assert [c.name for c in loaded.cases] == [good["name"]]  # the good case still loads
    assert len(loaded.errors) == 9
    assert all("\n" not in e for e in loaded.errors)
    expect = [("bad tp", "tensor_parallel"), ("bad quote", "quoted.token_throughput_tok_s"), ("bad gpu", "gpu"),
              ("bad model", "model"), ("no engine", "engine"), ("nameless engine", "engine.name"),
              ("negated flag", "engine.flags")]
    for (name, fld), err in zip(expect, loaded.errors):
        assert err.startswith(f"broken.yaml: case {name!r}: field {fld!r}:"), err
    assert loaded.errors[3].endswith("'qwen3-32b.json' is not a `servesim catalog models` name (a new model: its "
                                     "config.json in sim/model/configs/)")
    assert loaded.errors[6].endswith("'--no-enable-chunked-prefill': a negated option; write it as "
                                     "'--enable-chunked-prefill': false")
    assert loaded.errors[7].startswith("broken.yaml: case #9:")
    assert loaded.errors[8].startswith("garbage.yaml: cannot be read as YAML")


def test_each_engine_gets_a_valid_scenario_with_its_own_defaults(suite):
    by_engine = {}
    for c in suite.cases:
        if ps.unsupported(c, ps.COST_MODELS["roofline"]) is None:
            by_engine.setdefault(c.engine.key, c)
    assert set(by_engine) == {"vllm", "sglang", "trtllm", "lmdeploy"}
    scheds = {}
    for key, c in by_engine.items():
        s = validate_scenario(ps.scenario(c, ps.COST_MODELS["roofline"]))
        assert s.hardware.tensor_parallel == c.tensor_parallel and s.run.num_requests == c.workload.num_prompts
        scheds[key] = s.scheduler
    assert scheds["vllm"].chunked_prefill and scheds["vllm"].max_num_batched_tokens in (2048, 8192)
    assert scheds["sglang"].max_num_batched_tokens == 8192 and 2048 <= scheds["sglang"].max_num_seqs <= 4096
    assert scheds["lmdeploy"].max_num_seqs in (128, 256) and not scheds["lmdeploy"].chunked_prefill


def test_every_case_is_simulated_on_the_gpus_its_source_ran(suite):
    # A pipeline-parallel run simulated on one GPU's memory was a different deployment (it was, until 11-29).
    staged = [c for c in suite.cases if c.pipeline_parallel > 1]
    assert staged
    for c in suite.cases:
        if ps.unsupported(c, ps.COST_MODELS["roofline"]) is not None:
            continue
        s = validate_scenario(ps.scenario(c, ps.COST_MODELS["roofline"]))
        # (SGLang's data-parallel attention: lockstep ranks of tensor_parallel GPUs, all of them the run's TP;
        # vLLM's -dp D: D ranks of the run's TP)
        ranks = s.hardware.num_replicas if s.hardware.lockstep is not None else 1
        dp = int(next((v for k, v in c.flags.items() if k in ("-dp", "--data-parallel-size")), 1)) \
            if c.engine.key == "vllm" else 1
        assert (s.hardware.tensor_parallel * ranks, s.hardware.pipeline_parallel, s.hardware.expert_parallel) == (
            c.tensor_parallel * dp, c.pipeline_parallel, c.expert_parallel), c.name


def test_cases_servesim_cannot_express_are_listed_with_their_reason(suite):
    from dataclasses import replace
    dp = next(c for c in suite.cases if c.dp_attention and c.model == "deepseek-r1")
    # SGLang's --enable-dp-attention without --dp: its preset turns it off as SGLang 0.5.3 does, with less KV memory
    s = validate_scenario(ps.scenario(dp, ps.COST_MODELS["roofline"]))
    assert s.engine.enable_dp_attention and s.kv_cache.gpu_memory_utilization == 0.881
    # the flag under another engine's name is not modelled: listed with its reason, never simulated
    other = replace(dp, engine=replace(dp.engine, key="vllm"))
    r = ps.run_case(other, "roofline")
    assert r.status == "not simulated" and "data-parallel attention" in r.reason
    a100_fp8 = next(c for c in suite.cases if c.weights == "fp8-weights")
    assert "measured kernels" in ps.unsupported(a100_fp8, ps.COST_MODELS["measured kernels"])


def test_a_tiny_subset_runs_end_to_end_with_measured_simulated_and_error(suite, tmp_path):
    names = ["qwen3-8b-h100 vllm c2", "trtllm 0.14 llama-3.1-70b h100-sxm tp4 bf16 467/256 qps 2",
             "lmdeploy llama2-7b tp1 static batch 64 128/128"]
    cases = [c for c in suite.cases if c.name in names]
    seen = []

    def spy(engine, version, fit_results, cost_model):
        seen.extend(r.case.name for r in fit_results)
        return {"per_step_s": 0.001}  # what a fitted preset would hand the held-out runs

    results, fitted = ps.run_suite(cases, "roofline", num_requests=8, fit=spy)
    assert seen == []  # none of the three is a fitted run: nothing was fitted on a held-out run
    for r in results:
        assert r.role == "held-out" and r.status == "simulated", (r.case.name, r.reason)
        assert r.fitted == {"per_step_s": 0.001}
        for m in r.case.headline:
            sim, err = r.simulated[m.group], r.errors[m.group]
            assert m.measured > 0 and sim > 0 and err == pytest.approx(sim / m.measured - 1)
    out = tmp_path / "rows.csv"
    bench_published.write_csv(out, results, "roofline")
    rows = list(csv.DictReader(out.open()))
    assert {r["case"] for r in rows} == set(names)
    assert all(r["measured"] and r["simulated"] and r["error"] for r in rows if r["metric"] in ps.HEADLINE)
    # each row names the model that priced it, not only the harness's option
    assert {r["cost_model"] for r in rows} == {"roofline"}
    assert all(r["cost_model_label"].startswith("roofline") for r in rows), {r["cost_model_label"] for r in rows}


def test_the_fit_hook_sees_only_the_fitted_runs():
    suite = ps.load_suite([ps.DATA_DIR / "lmdeploy_a100.yaml"])
    fit_names = set(ps.FIT_RUNS[("lmdeploy", "0.1.0a1")])
    held = "lmdeploy llama2-7b tp1 static batch 1 2048/128"
    small = [c for c in suite.cases if c.name in fit_names or c.name == held]
    seen = []
    results, fitted = ps.run_suite(small, "roofline", num_requests=4,
                                   fit=lambda e, v, rs, cm: seen.extend(r.case.name for r in rs) or {})
    assert set(seen) == fit_names and fitted == {("lmdeploy", "0.1.0a1"): {}}
    assert ps.fit_preset("vllm", "0.11.0", [], "roofline") == {}  # no engine terms to fit yet
    summary = ps.summarize(results, "held-out")
    assert summary["lmdeploy"]["runs"] == 1
    by_source = ps.summarize(results, "held-out", key=lambda r: (ps.source_repo(r.case), r.case.gpu))
    assert list(by_source) == [("InternLM/lmdeploy", "a100-80gb")]
    fits = ps.summarize(results, "fit", key=lambda r: r.case.name)
    assert set(fits) == fit_names and all(e["runs"] == 1 and e["simulated"] == 1 for e in fits.values())
    one = fits[sorted(fit_names)[0]]
    assert one["throughput"]["median"] == one["throughput"]["max"]  # one run: its own |error|


def test_a_runs_cost_model_kind_is_read_from_its_label():
    kind = bench_published.cost_model_kind
    assert kind("measured (AIConfigurator h100_sxm sglang 0.5.14, power_law_1.2 MoE routing) + vllm-cudagraph "
                "overhead (per_step_s 0.356 ms)") == "measured: sglang tables"
    assert kind("measured (AIConfigurator a100_sxm vllm 0.14.0) + vllm-cudagraph overhead (default)") == (
        "measured: vllm tables")
    assert kind("learned roofline + vllm-cudagraph overhead (per_step_s 1.44 ms)") == "learned roofline"
    assert kind("") == "-"


def test_the_command_prints_counts_and_the_table(capsys, tmp_path):
    assert bench_published.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "by engine:" in out and "by TP:" in out and "| engine | GPU | TP | dtype | kind | runs |" in out
    csv_out = tmp_path / "one.csv"
    assert bench_published.main(["--cases", "lmdeploy llama2-7b tp1 static batch 1 128/2048", "--csv",
                                 str(csv_out)]) == 0
    out = capsys.readouterr().out
    # the other lmdeploy fitted run comes along: the fit takes every FIT_RUN of the version
    assert "## Fitted runs (FIT_RUNS): 2 runs, 2 simulated" in out and "## Held-out runs: 0 runs" in out
    assert "| lmdeploy llama2-7b tp1 static batch 1 128/2048 | LMDeploy 0.1.0a1 |" in out
    assert "## Per source and GPU, held-out runs only" in out and "## Per cost model" in out
    assert "## Per kind of run" in out
    assert csv_out.is_file()


def test_the_issue_12_entry_points_still_take_a_raw_vllm_case():
    case = yaml.safe_load(bench_published.CASES.read_text())["cases"][0]
    s = validate_scenario(bench_published.scenario(case, bench_published.COST_MODELS["roofline"]))
    assert s.workload.arrival.kind == "closed_loop" and s.scheduler.max_num_seqs == 1024


def test_a_runs_duration_is_the_clients_from_first_sent_to_last_received():
    """With a front-end, the benchmark's duration (and so its throughput) runs from the client's first send to its
    last receipt, as `vllm bench serve` times it. A burst of 40 requests on one process of 0.25 s each: the engine's
    own times (first arrival to last finish) leave out the first request's 0.25 s of inbound work and the reply's
    0.125 s of latency."""
    from helpers import small_scenario
    from sim.config.files import validate_scenario
    from sim.run import simulate

    burst = {"workload": {"arrival": {"kind": "burst"},
                          "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 4}},
             "run": {"num_requests": 40}}
    frontend = {"num_processes": 1, "per_request_s": 0.25, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
                "latency_s": 0.125}
    result = simulate(validate_scenario(small_scenario(burst, frontend=frontend)))
    r = result.requests
    got = ps.measure(result)
    assert got["duration_s"] == float(r["client_last_token_s"].max() - r["client_send_s"].min())
    # every request was sent at 0; the last one's inbound work ends at 40 x 0.25 s, its reply 0.125 s later at least
    assert got["duration_s"] >= 40 * 0.25 + 0.125
    assert got["duration_s"] - float(r["finish_s"].max() - r["arrival_s"].min()) == pytest.approx(0.25 + 0.125)
    assert got["output_tok_s"] == pytest.approx(40 * 4 / got["duration_s"])


def test_a_medians_only_source_is_read_with_its_clients_definitions_and_its_stated_lengths(suite, tmp_path):
    """SGLang's page quotes medians through `sglang.bench_serving` (a client over HTTP) and no token totals: the
    harness compares median to median, fits the front-end for it, and takes the means the case states it
    assumed (said in its assumptions); a malformed `assumed_means` is one line naming the field."""
    online = next(c for c in suite.cases if c.name == "sglang-060 llama-3.1-8b a100 vllm 0.6.0 rps 8")
    assert online.tool == "sglang.bench_serving" and online.client_side
    assert {m.group: (m.quoted_key, m.sim) for m in online.metrics} == {
        "ttft": ("median_ttft_ms", "ttft_p50"), "tpot_itl": ("median_tpot_ms", "tpot_p50"),
        "itl": ("median_itl_ms", "itl_p50")}
    assert online.workload.arrival == "poisson" and online.workload.request_rate == 8
    assert online.workload.lengths is not None  # a ShareGPT sample drawn around the stated means
    assert any("means 217.393/194.28 assumed" in a for a in online.assumptions)
    offline = next(c for c in suite.cases if c.name == "sglang-060 llama-3.1-8b a100 vllm 0.6.0 offline")
    assert [(m.group, m.sim, m.measured) for m in offline.metrics] == [("throughput", "output_tok_s", 4132.37)]
    assert offline.workload.arrival == "burst"
    # SGLang 0.3.0's commands, as its preset spells them (--mem-frac: argparse's prefix of --mem-fraction-static)
    sglang = next(c for c in suite.cases if c.name == "sglang-060 llama-3.1-70b h100 tp4 sglang 0.3.0 offline")
    sections, _ = ps.engine_settings(sglang)
    assert sections["engine"] == {"name": "sglang", "version": "0.3.0", "disable_radix_cache": True,
                                  "mem_fraction_static": 0.88}
    compiled = next(c for c in suite.cases if c.name == "sglang-060 llama-3.1-8b a100 sglang 0.3.0 rps 4")
    assert ps.engine_settings(compiled)[0]["engine"]["enable_torch_compile"] is True
    raw = yaml.safe_load((ps.DATA_DIR / "sglang_vllm060.yaml").read_text())
    bad = dict(raw["cases"][0], name="bad means", assumed_means={"input_mean": 217.4, "output_mean": -1, "why": "x"})
    path = tmp_path / "means.yaml"
    path.write_text(yaml.safe_dump({"sources": raw["sources"], "unstated": ["x"], "cases": [bad]}))
    loaded = ps.load_suite([path], data_dir=tmp_path)
    assert loaded.cases == [] and len(loaded.errors) == 1
    assert loaded.errors[0].startswith("means.yaml: case 'bad means': field 'assumed_means':"), loaded.errors[0]


def test_a_means_source_through_sglang_bench_serving_compares_mean_to_mean(suite):
    """llm-ie's blocks (sglang.bench_serving, which prints means and medians, no TPOT) are read mean to mean, ITL
    for TPOT; vLLM-Benchmark's DGX ShareGPT file lists its 500 requests, replayed in order."""
    ie = next(c for c in suite.cases if c.name == "llm-ie deepseek-r1 h200 tp8 sglang 50 prompts 30000/100")
    assert ie.tool == "sglang.bench_serving" and ie.endpoint == "completions" and ps.role(ie) == "held-out"
    assert {m.group: (m.quoted_key, m.sim) for m in ie.metrics if m.group in ps.HEADLINE} == {
        "throughput": ("output_token_throughput_tok_s", "output_tok_s"), "ttft": ("mean_ttft_ms", "ttft_mean"),
        "tpot_itl": ("mean_itl_ms", "itl_mean")}
    assert (ie.workload.input_tokens, ie.workload.output_tokens, ie.workload.arrival) == (30000, 100, "poisson")
    assert ps.engine_settings(ie)[0]["engine"] == {"name": "sglang", "version": "0.4.5.post3",
                                                  "disable_radix_cache": True}  # --tp: the case's TP
    dgx = next(c for c in suite.cases if c.name == "vllm-benchmark deepseek-r1 h200 dgx tp8 vllm sharegpt")
    assert len(dgx.workload.requests.input_lens) == 500
    assert sum(dgx.workload.requests.output_lens) == dgx.quoted["total_generated_tokens"] == 107666
    assert ps.engine_settings(dgx)[0]["engine"]["enable_prefix_caching"] is False  # --no-enable-prefix-caching


def test_request_throughput_and_unqualified_columns_are_read_as_the_client_prints_them(suite):
    """kvcached's page gives `vllm bench serve`'s request throughput (req/s) and TTFT / TPOT columns that say neither
    mean nor median: requests per second of the client's duration, the means, and each assumption said."""
    from helpers import small_scenario
    from sim.run import simulate

    burst = next(c for c in suite.cases if c.name == "kvcached qwen3-0.6b h100 vllm 0.19.0 rate inf")
    assert [(m.group, m.quoted_key, m.sim, m.unit, m.measured) for m in burst.metrics] == [
        ("throughput", "request_throughput_req_s", "requests_per_s", "req/s", 94.91),
        ("ttft", "ttft_ms", "ttft_mean", "s", 2.905), ("tpot_itl", "tpot_ms", "tpot_mean", "s", 0.00545)]
    assert burst.workload.arrival == "burst" and burst.kind == "throughput"
    assert sum(ps.UNQUALIFIED in a for a in burst.assumptions) == 2
    sections, _ = ps.engine_settings(burst)
    assert sections["engine"]["gpu_memory_utilization"] == 0.5 and sections["engine"]["max_model_len"] == 2048
    # 30 requests of 4 output tokens, one front-end process of 0.1 s each: the client's duration is ~3 s
    frontend = {"num_processes": 1, "per_request_s": 0.1, "per_prompt_token_s": 0.0, "per_output_chunk_s": 0.0,
                "latency_s": 0.0}
    result = simulate(validate_scenario(small_scenario(
        {"workload": {"arrival": {"kind": "burst"}, "lengths": {"kind": "fixed", "input_tokens": 32,
                                                                 "output_tokens": 4}},
         "run": {"num_requests": 30}}, frontend=frontend)))
    got = ps.measure(result)
    assert got["requests_per_s"] == pytest.approx(30 / got["duration_s"])
    assert 30 * 0.1 <= got["duration_s"] < 30 * 0.1 + 1.0


def test_trtllm_bench_build_sizes_the_engine_as_its_heuristic_does(suite):
    """Llama-3.1-8B FP8 on one H100 for a 1000/1000 dataset, by hand: NVML's 81,559 MiB = 79.65 GiB less the FP8
    weights' 8.03e9 B = 7.48 GiB leaves 72.17 GiB; 0.95 of it over 2 x 32 layers x 8 KV heads x 128 x 1 B = 64 KiB a
    token for 2,000 tokens a request holds 561.7 requests: max_batch_size rounds up to 640 (128s, between 256 and
    1024); 561.7 x (1 + 1000/1000) = 1,123 tokens rounds up to the 2,048 floor. A 20,000-token prompt beyond that
    runs chunked (said among the case's approximations)."""
    case = next(c for c in suite.cases if c.name == "trtllm 0.17 llama-3.1-8b h100-sxm tp1 fp8 1000/1000 max-throughput")
    assert ps.trtllm_bench_build(case) == (640, 2048)
    sections, approx = ps.engine_settings(case)
    assert (sections["engine"]["max_batch_size"], sections["engine"]["max_num_tokens"]) == (640, 2048)
    long = next(c for c in suite.cases if c.name == "trtllm 0.17 llama-3.1-8b h100-sxm tp1 fp8 20000/2000 max-throughput")
    sections, approx = ps.engine_settings(long)
    assert sections["engine"]["max_num_tokens"] == 2048 and sections["engine"]["enable_chunked_prefill"] is True
    assert any("chunked context assumed" in a for a in approx)


def test_a_result_files_requests_are_replayed_in_order_and_counted_as_its_client_counted(suite, tmp_path):
    """Lambda's `benchmark_serving.py --save-result` files list every request: the case replays those lengths in
    order (`listed`), a request that completed with no text with its stop token, and `measure` counts the run as
    the client did: no tokens for it, and a TTFT of 0 in the mean where the file has 0."""
    case = next(c for c in suite.cases if c.name == "lambda llama-3.1-8b-fp8 h100 tp1 10 prompts")
    assert case.tool == "vllm benchmark_serving.py" and case.client_side
    # ITL is per streamed chunk of 10 tokens there, and so is the client-side ITL the preset's front-end streams
    assert [m.group for m in case.metrics] == ["throughput", "ttft", "tpot_itl", "itl", "duration"]
    req = case.workload.requests
    assert req.output_lens == (120, 1, 1, 194, 0, 40, 0, 0, 6, 80) and sum(req.input_lens) == 1369
    assert req.zero_ttft == tuple(o == 0 for o in req.output_lens)
    lengths = validate_scenario(ps.scenario(case, ps.COST_MODELS["roofline"])).workload.lengths
    assert lengths.kind == "listed" and lengths.output_tokens == [120, 1, 1, 194, 1, 40, 1, 1, 6, 80]

    from helpers import small_scenario
    from sim.run import simulate
    silent = ps.RequestLengths((64, 32, 16, 8), (4, 0, 6, 2), (False, True, False, False))
    result = simulate(validate_scenario(small_scenario({"workload": {"arrival": {"kind": "burst"},
                                                                     "lengths": silent.lengths()},
                                                        "run": {"num_requests": 4}})))
    r = result.requests.sort_values("request_id")
    assert r["output_tokens"].tolist() == [4, 1, 6, 2] and r["prompt_tokens"].tolist() == [64, 32, 16, 8]
    plain, counted = ps.measure(result), ps.measure(result, silent)
    assert counted["ttft_mean"] == pytest.approx((r["ttft_s"].sum() - r["ttft_s"].iloc[1]) / 4)
    assert counted["output_tok_s"] == pytest.approx(plain["output_tok_s"] * 12 / 13)
    assert counted["tpot_mean"] == plain["tpot_mean"] and counted["duration_s"] == plain["duration_s"]

    # A miscopied list fails on loading, one line naming the field
    raw = yaml.safe_load((ps.DATA_DIR / "lambda_vllm060.yaml").read_text())
    good = next(c for c in raw["cases"] if c["name"] == case.name)
    short = dict(good, name="short", requests=dict(good["requests"], input_lens=good["requests"]["input_lens"][:9]))
    off = dict(good, name="off by one", requests=dict(good["requests"],
                                                     output_lens=[121] + good["requests"]["output_lens"][1:]))
    talking = dict(good, name="zero ttft with text", requests=dict(good["requests"], zero_ttft_indices=[0]))
    path = tmp_path / "lens.yaml"
    path.write_text(yaml.safe_dump({"sources": raw["sources"], "unstated": ["x"], "cases": [short, off, talking]}))
    loaded = ps.load_suite([path], data_dir=tmp_path)
    assert loaded.cases == [] and len(loaded.errors) == 3
    assert loaded.errors[0] == ("lens.yaml: case 'short': field 'requests': 9 input and 10 output lengths; "
                                "num_prompts is 10")
    assert "the completed requests' lengths sum to 443, not the quoted total_generated_tokens 442" in loaded.errors[1]
    assert "a zero TTFT only where the output is 0" in loaded.errors[2]


def test_a_chat_clients_runs_take_the_presets_template_work_with_the_fits_latency(suite):
    from sim.config.engines import TEMPLATE_PARSES, api_server_work
    by_name = {c.name: c for c in suite.cases}
    chat = by_name["qwen3-14b-h100 vllm sharegpt"]
    completions = by_name["lambda llama-3.1-70b-instruct-fp8 a100 tp1 10 prompts"]
    assert (chat.endpoint, completions.endpoint) == ("chat", "completions")  # --backend openai-chat; vllm
    fitted = {"latency_s": 0.02, "per_step_s": 1e-3}
    s = validate_scenario(ps.scenario(chat, ps.COST_MODELS["roofline"], fitted))
    assert s.workload.endpoint == "chat" and s.frontend.latency_s == 0.02  # the fit's, over the preset's
    # vLLM 0.11.0 on chat: its chat endpoint's measured intake (3.30 ms + 3.52 us a prompt token; 20 us a streamed
    # token, the completions row's) plus the parse
    intake = api_server_work((0, 11, 0), "vllm", "chat")
    assert (intake.since, intake.per_request_s, intake.per_prompt_token_s) == ((0, 11, 0), 3.30e-3, 3.52e-6)
    assert s.frontend.per_request_s == intake.per_request_s + TEMPLATE_PARSES[-1].work_s
    assert (s.frontend.per_prompt_token_s, s.frontend.per_output_chunk_s) == (3.52e-6, 20e-6)
    assert s.frontend.discipline == "event_loop"
    plain = validate_scenario(ps.scenario(completions, ps.COST_MODELS["roofline"], fitted))
    # vLLM 0.6.0 on completions: its measured intake, no template parse
    assert plain.workload.endpoint == "completions"
    assert plain.frontend.per_request_s == api_server_work((0, 6, 0)).per_request_s
    # the engine prefills Qwen3's template around each message (sim/model/chat_templates.py); completions, nothing
    assert s.workload.chat_template.model_dump() == {"lead_tokens": 3, "trail_tokens": 5}
    assert plain.workload.chat_template is None
    gpt_oss = validate_scenario(ps.scenario(by_name["gpt-oss-20b-h100 sglang sharegpt"], ps.COST_MODELS["roofline"],
                                            fitted))
    assert gpt_oss.workload.chat_template.lead_tokens == 78  # SGLang's Jinja rendering, not vLLM's harmony one
    assert gpt_oss.kv_cache.enable_prefix_caching  # the radix cache shares that lead


def test_an_open_vllm_bench_serve_run_models_the_client_that_timed_it(suite):
    from sim.config.bench_clients import bench_client
    by_name = {c.name: c for c in suite.cases}
    burst = by_name["qwen3-14b-h100 vllm sharegpt"]  # vllm bench serve --backend openai-chat, every prompt at once
    closed = by_name["qwen3-8b h100 c1"]  # --max-concurrency 1: a closed loop
    sglang_client = next(c for c in suite.cases
                         if c.tool == "sglang.bench_serving" and c.workload.arrival != "closed_loop")
    lambda_burst = by_name["lambda llama-3.1-8b-fp8 h100 tp1 320 prompts"]  # vLLM's old benchmark_serving.py
    unmeasured = next(c for c in suite.cases
                      if c.tool == "triton online (unstated)" and c.workload.arrival != "closed_loop")
    fitted = {"latency_s": 0.02, "per_step_s": 1e-3}
    s = validate_scenario(ps.scenario(burst, ps.COST_MODELS["roofline"], fitted))
    chat = bench_client("vllm bench serve", "chat")
    assert (s.frontend.client.per_request_s, s.frontend.client.per_event_s) == (chat.per_request_s, chat.per_event_s)
    assert s.frontend.client.discipline == "event_loop"
    assert s.frontend.latency_s == 0.02 and s.frontend.per_output_chunk_s == 20e-6  # the server's front-end kept
    assert validate_scenario(ps.scenario(closed, ps.COST_MODELS["roofline"], fitted)).frontend.client is None
    for case, tool in ((sglang_client, "sglang.bench_serving"), (lambda_burst, "vllm benchmark_serving.py")):
        client = validate_scenario(ps.scenario(case, ps.COST_MODELS["roofline"], fitted)).frontend.client
        row = bench_client(tool, "completions")
        assert case.tool == tool and (client.per_request_s, client.per_event_s) == (row.per_request_s, row.per_event_s)
    assert validate_scenario(ps.scenario(unmeasured, ps.COST_MODELS["roofline"], fitted)).frontend.client is None
    completions = bench_client("vllm bench serve", "completions")
    assert completions is not chat and bench_client("sglang.bench_serving", "chat") is None


def test_a_runs_command_line_options_are_read_by_the_presets_own_spelling_of_each_flag():
    from sim.config.engines import PRESETS
    for engine, preset in PRESETS.items():
        for name, flag in preset.flags.items():
            spelled = name if engine == "lmdeploy" else flag.option  # LMDeploy's config.ini keys: the preset's names
            if spelled is None:  # no command-line option (SGLang's radix cache is on unless --disable-radix-cache)
                continue
            expected = None if flag.target in ps.CASE_STATED else name
            assert ps.preset_flag_name(engine, spelled) == expected, (engine, spelled)
    assert PRESETS["vllm"].flags["max_num_seqs"].option == "--max-num-seqs"
    assert PRESETS["trtllm"].flags["tokens_per_block"].option is None  # a YAML option: no command-line spelling
    assert ps.preset_flag_name("vllm", "--max_model_len") == "max_model_len"  # vLLM takes underscores for dashes
    assert ps.preset_flag_name("sglang", "--mem-frac") == "mem_fraction_static"  # argparse's unambiguous prefix
    assert ps.preset_flag_name("sglang", "--enable") is None  # ambiguous: several options start so
    assert ps.preset_flag_name("vllm", "-tp") is None and ps.preset_flag_name("vllm", "--tensor") is None  # the case's
    assert ps.preset_flag_name("vllm", "--disable-log-requests") is None  # no preset flag: not the engine's model


# The programs that launch an engine's server: a published run's `command` that starts one is what a user would give
# as `engine.command` (the others build an engine, trtllm-bench, or run a script, LMDeploy's benchmark_*.sh).
SERVER_LAUNCHES = ("vllm serve", "vllm.entrypoints.openai.api_server", "sglang.launch_server", "trtllm-serve")


def test_every_quoted_server_command_reads_as_engine_command_to_the_flags_its_case_quotes(suite):
    # `engine.command` (sim/config/engine_command.py) on the servers' commands as the sources print them: every
    # option is read or accepted, the flags it sets are those the case's `flags:` give (the harness's reading), and
    # the tensor parallelism it sets is the case's.
    from sim.config.engine_command import option_value
    from sim.config.engines import PRESETS
    checked = 0
    for case in suite.cases:
        command, key = case.engine.command, case.engine.key
        if not command or not any(launch in command for launch in SERVER_LAUNCHES):
            continue
        preset = PRESETS[key]
        read = preset.read_command(command)
        names = {option: ps.preset_flag_name(key, option) for option in case.flags}
        quoted = {name: option_value(str(case.flags[option]), preset.flags[name].kind)
                  for option, name in names.items() if name is not None}
        stated = {name for name, flag in preset.flags.items() if flag.target in ps.CASE_STATED}
        assert {k: v for k, v in read.flags.items() if k not in stated} == quoted, case.name
        tp = [v for k, v in read.flags.items() if preset.flags[k].target == "hardware.tensor_parallel"]
        assert tp in ([], [case.tensor_parallel]), case.name
        checked += 1
    assert checked >= 100


def test_a_quoted_peak_output_rate_and_median_tpot_are_compared_beside_the_headline(suite):
    """GPUStack's pages print `vllm bench serve`'s peak output token throughput and median TPOT beside the means: they
    are compared (groups `peak` and `tpot_median`, never in the goals' HEADLINE) with the most tokens the simulated
    engine made in one whole second and the requests' median TPOT."""
    case = next(c for c in suite.cases if c.name == "qwen3-14b-h100 vllm sharegpt")
    beside = {m.group: (m.quoted_key, m.measured, m.sim) for m in case.metrics if m.group in ps.BESIDE}
    assert beside == {"peak": ("peak_output_token_throughput_tok_s", 8890.0, "peak_output_tok_s"),
                      "tpot_median": ("median_tpot_ms", 0.11746, "tpot_p50"),
                      "itl": ("mean_itl_ms", 0.09283, "itl_mean")}
    assert not set(ps.BESIDE) & set(ps.HEADLINE)
    assert not any(m.group == "peak" for c in suite.cases if c.tool == "trtllm-bench" for m in c.metrics)


def test_a_data_parallel_attention_run_gives_sglang_its_tp_and_each_rank_tp_over_dp_gpus(suite):
    # `--tp-size 8 --dp-size 8 --enable-dp-attention`: the preset's rule sets each rank's GPUs from --tp; a case's
    # TP written to hardware.tensor_parallel beside it would contradict it
    case = next(c for c in suite.cases if c.name == "deepseek-v3.2-h200 sglang tp8 dp8 dp-attention sharegpt")
    raw = ps.scenario(case, ps.COST_MODELS["roofline"])
    assert raw["engine"]["tp_size"] == 8 and "tensor_parallel" not in raw["hardware"]
    s = validate_scenario(raw)
    assert (s.hardware.tensor_parallel, s.hardware.num_replicas, s.hardware.lockstep.expert_exchange) == (
        1, 8, "dp_attention")
    plain = next(c for c in suite.cases if c.name == "deepseek-v3.2-h200 sglang tp8 enable-dp-attention sharegpt")
    s = validate_scenario(ps.scenario(plain, ps.COST_MODELS["roofline"]))  # --dp 1: SGLang clears the flag
    assert (s.hardware.tensor_parallel, s.hardware.num_replicas, s.hardware.lockstep) == (8, 1, None)


def test_vllm_s_sparse_attention_runs_take_its_block_and_reserve_and_its_data_parallel_ranks(suite):
    # vLLM 0.13.0 (sim/config/engines/sparse_attention.py): 64-token blocks, the indexer's prefill workspace for the
    # run's max_model_len and the top-k index buffer set aside; `-tp 1 -dp 8 --enable-expert-parallel`: 8 lockstep
    # ranks of one GPU, the experts over all 8
    case = next(c for c in suite.cases if c.name == "deepseek-v3.2-h200 vllm tp8 ctx32k sharegpt")
    s = validate_scenario(ps.scenario(case, ps.COST_MODELS["roofline"]))
    assert (s.kv_cache.block_size, s.kv_cache.reserve_bytes) == (64, 40 * 32768 * 132 + 8192 * 2048 * 4)
    ranks = next(c for c in suite.cases if c.name == "deepseek-v3.2-h200 vllm dp8 ep sharegpt")
    s = validate_scenario(ps.scenario(ranks, ps.COST_MODELS["roofline"]))
    assert (s.hardware.tensor_parallel, s.hardware.num_replicas, s.hardware.expert_parallel) == (1, 8, 8)
    assert s.hardware.lockstep is not None and s.scheduler.max_model_len == 81920
