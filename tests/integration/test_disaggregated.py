"""Disaggregated prefill/decode end to end (sim/core/disaggregated.py): known answers for the KV transfer and
where it shows in a request's latencies, equality with colocated serving when the transfer is free, the wait
for decode blocks, bad input, and DistServe's qualitative result on a small prefill-heavy load."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import SUBPROCESS_TIMEOUT_S, small_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.files import load_scenario_set, validate_scenario
from sim.errors import ConfigError
from sim.run import simulate

REPO = Path(__file__).resolve().parents[2]
LLAMA_8B_KV_BYTES_PER_TOKEN = 32 * 2 * 8 * 128 * 2  # layers x (K, V) x KV heads x head dim x bf16 bytes


def disaggregated(link=None, **pools) -> dict:
    return {"prefill": pools.get("prefill", {}), "decode": pools.get("decode", {}),
            "link": link or {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-3}}


def one_request(output_tokens: int = 5, **changes):
    """One request of 256 prompt tokens, fixed step times: prefill 50 ms, decode 10 ms."""
    return small_scenario(changes, cost_model={"kind": "fixed", "prefill_s": 0.05, "decode_s": 0.01},
                          workload={"lengths": {"input_tokens": 256, "output_tokens": output_tokens}},
                          run={"num_requests": 1})


def test_transfer_time_is_bytes_over_bandwidth_plus_latency():
    sc = validate_scenario(one_request(hardware={"disaggregation": disaggregated()}))
    r = simulate(sc).requests.iloc[0]
    num_bytes = 256 * LLAMA_8B_KV_BYTES_PER_TOKEN
    assert r.transfer_bytes == num_bytes
    assert r.transfer_s == pytest.approx(num_bytes / 1e9 + 1e-3, rel=1e-12)
    assert r.transfer_start_s == r.first_token_s  # decode blocks free, link idle: it starts at the first token


def test_ttft_is_the_prefill_and_the_transfer_shows_once_in_the_first_gap():
    """TTFT is when the prefill replica samples the first token; E2E = prefill + transfer + the decode steps."""
    output = 5
    colocated = simulate(validate_scenario(one_request(output))).requests.iloc[0]
    result = simulate(validate_scenario(one_request(output, hardware={"disaggregation": disaggregated()})))
    r = result.requests.iloc[0]
    transfer_s = 256 * LLAMA_8B_KV_BYTES_PER_TOKEN / 1e9 + 1e-3
    assert r.ttft_s == colocated.ttft_s == pytest.approx(0.05, rel=1e-12)
    assert r.decode_admit_s == r.transfer_end_s  # the idle decode replica starts it at once
    assert r.e2e_s == pytest.approx(0.05 + transfer_s + (output - 1) * 0.01, rel=1e-12)
    assert r.e2e_s - colocated.e2e_s == pytest.approx(transfer_s, rel=1e-9)
    assert r.tpot_s == pytest.approx((transfer_s + (output - 1) * 0.01) / (output - 1), rel=1e-12)
    assert r.decode_replica == 1 and r.replica == 0
    s = result.summary
    assert s["transfer_s_mean"] == pytest.approx(transfer_s, rel=1e-12) and s["num_transfers"] == 1
    assert s["prefill_busy_fraction"] == pytest.approx(0.05 / s["elapsed_s"], rel=1e-12)


def test_one_output_token_is_done_at_the_prefill_and_moves_nothing():
    r = simulate(validate_scenario(one_request(1, hardware={"disaggregation": disaggregated()}))).requests.iloc[0]
    assert r.finished and r.e2e_s == pytest.approx(0.05, rel=1e-12)
    assert math.isnan(r.transfer_start_s) and r.transfer_bytes == 0


def test_instant_transfer_and_idle_pools_give_colocated_latencies():
    """Same GPU, one request at a time (arrivals 10 s apart, each done in well under 1 s), a link with no
    latency and a transfer of ~1e-21 s: every request's TTFT equals colocated exactly, its E2E to rounding."""
    changes = {"workload": {"arrival": {"kind": "poisson", "rate_per_s": 0.1},
                            "lengths": {"kind": "uniform", "input_min": 100, "input_max": 2000,
                                        "output_min": 2, "output_max": 60}},
               "run": {"num_requests": 15}, "cost_model": {"kind": "roofline"}}  # one cost model for both
    colocated = simulate(validate_scenario(small_scenario(changes))).requests
    instant = disaggregated({"bandwidth_bytes_per_s": 1e30, "latency_s": 0.0})
    disagg = simulate(validate_scenario(small_scenario(changes, hardware={"disaggregation": instant}))).requests
    assert (colocated["finish_s"].to_numpy()[:-1] < colocated["arrival_s"].to_numpy()[1:]).all()  # one at a time
    np.testing.assert_array_equal(disagg["ttft_s"].to_numpy(), colocated["ttft_s"].to_numpy())
    np.testing.assert_allclose(disagg["e2e_s"].to_numpy(), colocated["e2e_s"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(disagg["tpot_s"].to_numpy(), colocated["tpot_s"].to_numpy(), rtol=1e-9)


def test_decode_block_shortage_makes_a_request_wait_and_the_wait_is_counted():
    """Decode pool: 5 blocks of 16. Each request (64 prompt tokens, 8 outputs) takes 4 blocks when reserved and
    5 by its end, so the second of two requests prefilled together waits until the first finishes."""
    sc = validate_scenario(small_scenario(
        cost_model={"kind": "fixed", "prefill_s": 0.05, "decode_s": 0.01},
        workload={"arrival": {"kind": "burst"}},
        hardware={"disaggregation": disaggregated(decode={"kv_capacity_tokens": 80})},
        run={"num_requests": 2}))
    result = simulate(sc)
    first, second = (result.requests.iloc[i] for i in range(2))
    assert first.first_token_s == second.first_token_s == pytest.approx(0.05)  # one prefill step for both
    assert first.decode_wait_s == 0.0
    assert second.decode_reserved_s == first.finish_s  # the blocks come back when the first finishes
    assert second.decode_wait_s == pytest.approx(first.finish_s - 0.05, rel=1e-12) and second.decode_wait_s > 0
    s = result.summary
    assert s["num_waited_for_decode_blocks"] == 1
    assert s["decode_wait_s_mean"] == pytest.approx(second.decode_wait_s / 2, rel=1e-12)
    assert s["num_finished"] == 2 and s["preemptions"] == 0


def test_pools_take_their_own_gpu_tp_and_replicas():
    sc = validate_scenario(small_scenario(
        hardware={"num_replicas": 3, "disaggregation": {
            "prefill": {"num_replicas": 2}, "decode": {"gpu": "a100-80gb", "tensor_parallel": 2}, "link": "nvlink3"}},
        run={"num_requests": 30}))
    from sim.config.disaggregation import resolve_disaggregated
    dd = resolve_disaggregated(sc)
    assert (dd.num_prefill_replicas, dd.num_decode_replicas) == (2, 3)  # decode: hardware.num_replicas
    assert dd.prefill.gpu.name == "h100-sxm" and dd.decode.gpu.name == "a100-80gb"
    assert dd.num_gpus == 2 * 1 + 3 * 2 and dd.num_parallel_links == 1
    assert dd.decode.kv_capacity_tokens != dd.prefill.kv_capacity_tokens  # each from its own memory arithmetic
    result = simulate(sc)
    assert result.summary["num_finished"] == 30
    assert set(result.requests["replica"]) <= {0, 1} and set(result.requests["decode_replica"]) <= {2, 3, 4}
    assert set(result.steps["replica"]) <= {0, 1, 2, 3, 4}


def test_same_scenario_and_seed_give_identical_records():
    raw = small_scenario(hardware={"disaggregation": disaggregated(link="infiniband-ndr")},
                         workload={"arrival": {"rate_per_s": 40}}, run={"num_requests": 60})
    a, b = simulate(validate_scenario(raw)), simulate(validate_scenario(raw))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)


@pytest.mark.parametrize(("changes", "message"), [
    ({"speculation": {"draft_cost_ratio": 0.1}}, "hardware.disaggregation: speculative decoding"),
    ({"hardware": {"disaggregation": {}, "pipeline_parallel": 2}},
     "hardware.disaggregation: pipeline parallelism is not modelled with disaggregation"),
    ({"scheduler": {"batching": "static"}}, "hardware.disaggregation: needs scheduler.batching 'continuous'"),
    ({"hardware": {"disaggregation": {"decode": {"tensor_parallel": 3}}}}, "hardware.disaggregation.decode.tensor_parallel: 3 cannot split llama-3.1-8b"),
    ({"hardware": {"disaggregation": {"prefill": {"gpu": "h900"}}}},
     "hardware.disaggregation.prefill.gpu: unknown gpu 'h900'"),
])
def test_bad_disaggregation_is_one_config_error(changes, message):
    raw = small_scenario({"hardware": {"disaggregation": {}}}, **changes)
    with pytest.raises(ConfigError) as err:
        simulate(validate_scenario(raw))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_distserve_prefill_heavy_load_meets_a_tight_tpot_slo_more_often_disaggregated():
    """scenarios/disaggregated.yaml, shortened: the same two GPUs, colocated vs 1 prefill + 1 decode."""
    variants = dict(load_scenario_set(REPO / "scenarios" / "disaggregated.yaml", ["run.num_requests=150"]).items())
    colocated = simulate(variants["colocated"]).summary
    split = simulate(variants["disaggregated-1p1d"]).summary
    assert colocated["num_finished"] == split["num_finished"] == 150
    assert split["num_gpus"] == 2 and variants["colocated"].hardware.num_replicas == 2
    assert split["slo_fraction_ok"] > colocated["slo_fraction_ok"] + 0.3
    assert split["tpot_s_p90"] < colocated["tpot_s_p90"]


def test_unknown_link_on_the_command_line_exits_2_with_one_line(tmp_path):
    import os
    import subprocess
    import sys

    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(hardware={"disaggregation": {"link": "tin-can"}})))
    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "sim.views.cli", "run", str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: hardware.disaggregation.link:") and "'tin-can'" in line and "nvlink4" in line


def test_plan_pools_simulates_every_split_of_the_budget_and_picks_the_best_goodput():
    from sim.results import good_requests
    from sim.tools.pool_split import plan_pool_split, split_scenarios
    sc = validate_scenario(small_scenario(hardware={"disaggregation": {"decode": {"tensor_parallel": 2}}},
                                          run={"num_requests": 20}))
    labels = [(e[0], e[4]) for e in split_scenarios(sc, 5)]
    # Colocated at TP 1: 5 replicas; splits: P prefill GPUs, (5 - P) // 2 decode replicas of 2 GPUs.
    assert labels == [("colocated x5", 5), ("1P+2D", 5), ("2P+1D", 4), ("3P+1D", 5)]
    plan = plan_pool_split(validate_scenario(small_scenario(run={"num_requests": 20})), 2)
    assert [c.label for c in plan.candidates] == ["colocated x2", "1P+1D"]
    assert good_requests(plan.best.summary) == max(good_requests(c.summary) for c in plan.candidates)
    assert plan.recommendation().startswith(f"recommended: {'disaggregated ' if plan.best.disaggregated else ''}"
                                            f"{plan.best.label} on ")
    assert "colocated colocated" not in plan.recommendation()
    with pytest.raises(ConfigError, match=r"--gpus: 1 leaves no GPU for one of the pools; allowed: 2 or more"):
        split_scenarios(sc, 1)


def test_plan_pools_of_an_engine_preset_names_what_its_splits_lack_and_runs_without_them():
    """An engine preset's front-end and prefix caching were refused split by split ("frontend: not allowed with
    hardware.disaggregation"), with no way named to leave out what the preset brought."""
    from sim.tools.pool_split import plan_pool_split, split_scenarios
    engine = {"name": "vllm", "version": "0.11.0"}
    with pytest.raises(ConfigError, match=r"^frontend and kv_cache\.enable_prefix_caching: not modelled with a "
                                          r"disaggregated deployment yet, which plan-pools weighs the colocated one "
                                          r"against \(engine vllm 0\.11\.0's preset brings both where the scenario "
                                          r"gives neither\); allowed: frontend: null and kv_cache\.enable_prefix_"
                                          r"caching: false \(every arrangement simulated without them\)$"):
        split_scenarios(validate_scenario(small_scenario(engine=engine)), 2)
    sc = validate_scenario(small_scenario(engine=engine, frontend=None, kv_cache={"enable_prefix_caching": False},
                                          run={"num_requests": 20}))
    plan = plan_pool_split(sc, 2)
    assert [c.label for c in plan.candidates] == ["colocated x2", "1P+1D"]
    assert all(c.summary["num_finished"] == 20 and "frontend_busy_fraction" not in c.summary
               for c in plan.candidates)


def test_plan_pools_keeps_the_runs_of_the_colocated_deployment_and_the_recommended_split():
    from sim.config.files import load_one_scenario
    from sim.tools.pool_split import _rank, plan_pool_split
    chosen = load_one_scenario(REPO / "scenarios" / "disaggregated.yaml", ["run.num_requests=300"],
                               "disaggregated-1p1d")
    plan = plan_pool_split(chosen, 4)
    assert plan.best is min(plan.candidates, key=_rank)
    assert plan.best.label != "colocated x4"  # (this load's answer: a split, so two runs are kept)
    assert [run.name for run in plan.shown] == ["colocated x4", plan.best.label]
    assert [run.summary for run in plan.shown] == [plan.candidates[0].summary, plan.best.summary]


def test_timeline_shows_the_transfer_between_prefill_and_decode(tmp_path):
    import json

    from sim.views.timeline import write_timeline
    result = simulate(validate_scenario(small_scenario(
        cost_model={"kind": "fixed", "prefill_s": 0.05, "decode_s": 0.01}, workload={"arrival": {"kind": "burst"}},
        hardware={"disaggregation": disaggregated(decode={"kv_capacity_tokens": 80})}, run={"num_requests": 2})))
    write_timeline(result, tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    spans: dict = {}
    for e in events:
        if e.get("cat", "").startswith("request") and e["ph"] in "be":
            spans.setdefault((e["id"], e["name"]), []).append(e["ts"])
    r0, r1 = result.requests.iloc[0], result.requests.iloc[1]
    start, end = spans[(1, "transfer")]
    assert (end - start) == pytest.approx(r1.transfer_s * 1e6, abs=2e-3)  # microseconds, rounded to the ns
    assert (0, "wait for decode blocks") not in spans  # the first did not wait
    start, end = spans[(1, "wait for decode blocks")]
    assert (end - start) == pytest.approx(r1.decode_wait_s * 1e6, abs=2e-3)
    assert spans[(0, "decode")][0] == pytest.approx(r0.transfer_end_s * 1e6, abs=1e-3)


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_every_request_finishes_and_no_kv_is_leaked_in_either_pool(layout):
    """A tight decode pool (preemptions there, recompute on the decode replica) under a burst: every request
    finishes once, and afterwards every pool's KV is free, nothing held, reserved or incoming."""
    from sim.run import disaggregated_simulation, make_workload
    sc = validate_scenario(small_scenario(
        workload={"arrival": {"kind": "burst"},
                  "lengths": {"kind": "uniform", "input_min": 16, "input_max": 300, "output_min": 1, "output_max": 200}},
        kv_cache={"layout": layout, "reserve": "oracle"} if layout == "contiguous" else {"layout": layout},
        hardware={"disaggregation": disaggregated(prefill={"num_replicas": 2},
                                                  decode={"num_replicas": 2, "kv_capacity_tokens": 1200})},
        run={"num_requests": 80}))
    sim = disaggregated_simulation(sc, make_workload(sc))
    sim.run()
    assert (sim.requests.status == 0).all() and sim.num_done == 80
    for replica in sim.replicas:
        assert replica.scheduler.kv.num_allocated_slots() == 0
        assert replica.scheduler.role.outside_batch_tokens == 0
    assert not any(replica.scheduler.role.held for replica in sim.prefill_replicas)
    assert not any(r.scheduler.role.received or r.scheduler.role.num_reserved for r in sim.decode_replicas)
    assert (sim.requests.output_tokens == sim.requests.max_output_tokens).all()
    waited = np.nan_to_num(sim.requests.decode_reserved_s - sim.requests.first_token_s)
    assert (waited > 0).any()  # the tight decode pool made some wait for blocks
    if layout == "paged":
        assert sim.requests.preemptions.sum() > 0  # and preempted some while they decoded


def test_pools_hold_the_model_where_the_top_level_hardware_would_not():
    """Llama-3.1-70B does not fit one H100 (the top-level default); pools at TP 2 and TP 4 do, and validation
    checks the pools, naming the pool that does not fit."""
    raw = small_scenario(model="llama-3.1-70b", hardware={"disaggregation": {
        "prefill": {"tensor_parallel": 2}, "decode": {"tensor_parallel": 4}}})
    result = simulate(validate_scenario(raw))
    assert result.summary["num_finished"] == 20 and result.summary["num_gpus"] == 6
    raw["hardware"]["disaggregation"]["decode"]["tensor_parallel"] = 1
    with pytest.raises(ConfigError, match=r"^hardware.disaggregation.decode: llama-3.1-70b .* tensor_parallel=1"):
        validate_scenario(raw)


def test_cost_of_a_disaggregated_deployment_prices_each_pool_on_its_own_gpu():
    from sim.model.catalog import GPUS
    from sim.tools.sweep import cost_figures
    sc = validate_scenario(small_scenario(hardware={"num_replicas": 2, "disaggregation": {
        "prefill": {"num_replicas": 1}, "decode": {"gpu": "h200", "tensor_parallel": 2}}}))
    costs = cost_figures(sc, {"total_tokens_per_s": 1000.0, "output_tokens_per_s": 100.0})
    assert costs["num_gpus"] == 1 + 2 * 2
    assert costs["cost_per_hour"] == pytest.approx(GPUS["h100-sxm"].price_per_hour + 4 * GPUS["h200"].price_per_hour)
    assert cost_figures(sc, {}, {"h200": 1.0})["cost_per_hour"] == pytest.approx(GPUS["h100-sxm"].price_per_hour + 4)


def test_report_has_the_disaggregation_rows_and_figure_only_when_a_result_is_disaggregated():
    from sim.views.report import figures, render_report, summary_rows
    colocated = simulate(validate_scenario(small_scenario()))
    split = simulate(validate_scenario(small_scenario(hardware={"disaggregation": disaggregated()})))
    assert "transfer_s_mean" not in dict(summary_rows([colocated]))
    assert dict(summary_rows([colocated, split]))["transfer_s_mean"] == "KV transfer mean (s)"
    assert [name for name, _ in figures([colocated])] == ["latency", "timeseries", "kv"]
    assert [name for name, _ in figures([colocated, split])][-1] == "disaggregation"
    html = render_report([colocated, split], "t")
    assert "KV transfer mean (s)" in html and "waits between the pools" in html


def test_layerwise_overlap_leaves_only_the_last_layers_share_after_the_prefill():
    """32 layers, a 50 ms prefill step, 33.5 MB at 1 GB/s (33.6 ms in all): each layer's 1.05 ms share is sent
    before the next layer is ready, so latency + bytes / (32 x bandwidth) is left after the step."""
    link = {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-3}
    sc = validate_scenario(one_request(hardware={"disaggregation": {**disaggregated(link), "overlap": "layerwise"}}))
    r = simulate(sc).requests.iloc[0]
    num_bytes = 256 * LLAMA_8B_KV_BYTES_PER_TOKEN
    assert num_bytes / 1e9 < 0.05 * 31 / 32  # the step hides everything but the last layer's share
    assert r.transfer_s == pytest.approx(1e-3 + num_bytes / 32 / 1e9, rel=1e-12)


def test_tensor_parallel_pools_send_their_shards_over_parallel_links():
    """Prefill TP 2, decode TP 4: each of the 2 prefill GPUs sends its half of the KV over its own link."""
    link = {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-3}
    sc = validate_scenario(one_request(hardware={"disaggregation": disaggregated(
        link, prefill={"tensor_parallel": 2}, decode={"tensor_parallel": 4})}))
    r = simulate(sc).requests.iloc[0]
    num_bytes = 256 * LLAMA_8B_KV_BYTES_PER_TOKEN  # the whole group's KV, whatever the split
    assert r.transfer_bytes == num_bytes
    assert r.transfer_s == pytest.approx(1e-3 + num_bytes / (2 * 1e9), rel=1e-12)


def test_plan_pools_on_the_command_line(tmp_path):
    import os
    import subprocess
    import sys

    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario()))
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(REPO)}

    def servesim(*args):
        return subprocess.run([sys.executable, "-m", "sim.views.cli", "plan-pools", str(path), *args], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S, check=False)
    done = servesim("--gpus", "2", "-q")
    assert done.returncode == 0, done.stderr
    assert "colocated x2" in done.stdout and "1P+1D" in done.stdout and "recommended: " in done.stdout
    bad = servesim("--gpus", "2", "--variant", "nope")
    assert bad.returncode == 2 and bad.stderr.strip() == (f"error: --variant: 'nope' is not in {path}; "
                                                          "allowed: small")  # no variants: the scenario itself, by name
    # --out: every split's summary, the recommendation and the scenario, in a folder ServeSim marks as its own
    written = servesim("--gpus", "2", "-q", "--out", "splits")
    assert written.returncode == 0, written.stderr
    import pandas as pd
    table = pd.read_csv(tmp_path / "splits" / "splits.csv")
    assert list(table["candidate"]) == ["colocated x2", "1P+1D"] and list(table["num_gpus"]) == [2, 2]
    assert table["recommended"].sum() == 1 and {"goodput_rps", "cost_per_hour", "ttft_s_p99"} <= set(table.columns)
    best = table.loc[table["recommended"], "candidate"].item()
    assert f"recommended: {'disaggregated ' if 'P+' in best else ''}{best} on 2 of 2 GPUs" in (
        tmp_path / "splits" / "recommendation.txt").read_text()
    # report.html: the recommendation as its verdict, every split's row, the charts of colocated and the recommended
    page = (tmp_path / "splits" / "report.html").read_text()
    assert f'data-winner="{best}"' in page and page.count('<section id="verdict"') == 1
    splits = page[page.index('<section id="splits">'):page.index('<section id="summary">')]
    assert splits.count("<td>colocated x2</td>") == 1 and splits.count("<td>1P+1D</td>") == 1
    assert splits.count("<td>yes</td>") == 1
    drawn = "colocated x2" + (" and 1P+1D" if best == "1P+1D" else "")
    assert f"The summary and charts below are of {drawn}." in page
    assert ('<section id="disaggregation">' in page) == (best == "1P+1D")  # a split's pools, where one is drawn
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    refused = servesim("--gpus", "2", "--out", "mine")  # refused before anything is simulated (no progress line)
    assert refused.returncode == 2 and "notes.txt" in refused.stderr and "simulating" not in refused.stderr
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num_prefill=st.integers(1, 3), num_decode=st.integers(1, 3), decode_blocks=st.integers(25, 80),
       rate_per_s=st.sampled_from([5.0, 50.0, 500.0]), overlap=st.sampled_from(["none", "layerwise"]),
       chunked=st.booleans(), seed=st.integers(0, 1000))
def test_property_every_request_moves_through_the_phases_in_order_and_no_kv_leaks(
        num_prefill, num_decode, decode_blocks, rate_per_s, overlap, chunked, seed):
    from sim.run import disaggregated_simulation, make_workload
    sc = validate_scenario(small_scenario(
        workload={"arrival": {"rate_per_s": rate_per_s},
                  "lengths": {"kind": "uniform", "input_min": 8, "input_max": 300, "output_min": 1, "output_max": 100}},
        scheduler={"chunked_prefill": chunked},
        hardware={"disaggregation": {"prefill": {"num_replicas": num_prefill},
                                     "decode": {"num_replicas": num_decode, "kv_capacity_tokens": decode_blocks * 16},
                                     "link": "infiniband-ndr", "overlap": overlap}},
        run={"seed": seed, "num_requests": 40}))
    sim = disaggregated_simulation(sc, make_workload(sc))
    sim.run()
    log = sim.requests  # 25 blocks of 16 hold the longest request (300 + 100 - 1 tokens): none is rejected
    assert (log.status == 0).all() and (log.output_tokens == log.max_output_tokens).all()
    moved = log.max_output_tokens > 1
    order = [log.arrival_s, log.first_scheduled_s, log.first_token_s, log.decode_reserved_s, log.transfer_start_s,
             log.transfer_end_s, log.decode_admit_s, log.finish_s]
    for earlier, later in itertools.pairwise(order):
        assert (earlier[moved] <= later[moved]).all()
    assert np.isnan(log.transfer_start_s[~moved]).all() and (log.finish_s[~moved] == log.first_token_s[~moved]).all()
    for replica in sim.replicas:
        s = replica.scheduler
        assert s.kv.num_allocated_slots() == 0 and s.role.outside_batch_tokens == 0
    assert not any(replica.scheduler.role.held for replica in sim.prefill_replicas)


def test_plan_pools_ranks_by_the_requests_meeting_the_slos_not_by_a_rate_over_the_runs_own_time():
    from sim.tools.pool_split import PoolSplitCandidate, PoolSplitPlan, _rank
    # both serve the same 1,000 requests: the split meets the SLOs for 900, over a longer drain (a lower rate)
    split = PoolSplitCandidate("1P+1D", 1, 1, 0, 2, {"goodput_rps": 9.0, "elapsed_s": 100.0, "e2e_s_p90": 2.0})
    colocated = PoolSplitCandidate("colocated x2", 0, 0, 2, 2, {"goodput_rps": 9.5, "elapsed_s": 90.0,
                                                                "e2e_s_p90": 1.0})
    assert min([colocated, split], key=_rank) is split
    # as many: the lower E2E p90
    even = PoolSplitCandidate("colocated x2", 0, 0, 2, 2, {"goodput_rps": 10.0, "elapsed_s": 90.0, "e2e_s_p90": 1.0,
                                                           "slo_fraction_ok": 0.9})
    assert min([split, even], key=_rank) is even
    assert PoolSplitPlan(2, [even, split], even).recommendation().startswith("recommended: colocated x2 on 2 of 2")
