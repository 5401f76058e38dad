"""What `run` and `compare` leave on disk: Parquet records, summary, scenario, a self-contained report."""

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import yaml
from helpers import small_scenario

ROOT = Path(__file__).resolve().parents[2]

SMALL = small_scenario({"workload": {"arrival": {"rate_per_s": 10},
                                     "lengths": {"input_tokens": 200, "output_tokens": 20}},
                        "slo": {"ttft_s": 1.0}, "run": {"num_requests": 60},
                        "variants": {"paged": {}, "contiguous": {"kv_cache": {"layout": "contiguous"}}}})


def servesim(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "sim.views.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


class _Sections(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.scripts = [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.ids.append(dict(attrs).get("id"))
        if tag == "script":
            self.scripts += 1


def test_run_writes_records_and_report(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    out = tmp_path / "out"
    proc = servesim("run", path, "--out", out, "-q")
    assert proc.returncode == 0, proc.stderr
    requests = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")
    summary = json.loads((out / "summary.json").read_text())
    assert len(requests) == 60 and (requests["status"] == "finished").all()
    assert steps["duration_s"].gt(0).all()
    assert summary["num_finished"] == 60
    assert yaml.safe_load((out / "scenario.yaml").read_text())["name"] == "small"
    html = (out / "report.html").read_text()
    parser = _Sections()
    parser.feed(html)
    assert {"summary", "latency", "timeseries", "kv", "scenario"} <= set(parser.ids)
    assert "plotly" in html.lower() and parser.scripts >= 3
    assert not re.search(r"<script[^>]+src=", html)  # self-contained: plotly.js is inlined
    assert not list(tmp_path.glob(".out.tmp-*"))  # nothing half-written left behind


def test_compare_writes_one_folder_per_variant_and_overlays_them(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    out = tmp_path / "cmp"
    proc = servesim("compare", path, "--out", out, "-q")
    assert proc.returncode == 0, proc.stderr
    assert (out / "paged" / "requests.parquet").exists() and (out / "contiguous" / "steps.parquet").exists()
    both = json.loads((out / "summary.json").read_text())
    assert set(both) == {"paged", "contiguous"}
    # Same generated workload for every variant.
    a = pd.read_parquet(out / "paged" / "requests.parquet")
    b = pd.read_parquet(out / "contiguous" / "requests.parquet")
    assert a["arrival_s"].equals(b["arrival_s"]) and a["prompt_tokens"].equals(b["prompt_tokens"])
    html = (out / "report.html").read_text()
    assert html.count('"name":"paged"') >= 1 and html.count('"name":"contiguous"') >= 1
    assert "paged" in proc.stdout and "contiguous" in proc.stdout


def test_a_failed_run_leaves_the_previous_output_intact(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    out = tmp_path / "out"
    assert servesim("run", path, "--out", out, "-q").returncode == 0
    before = (out / "summary.json").read_text()
    proc = servesim("run", path, "--out", out, "-q", "--set", "hardware.gpu=nope")
    assert proc.returncode == 2
    assert (out / "summary.json").read_text() == before


def test_sim_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['triton'] = None\n"
            "import sim.run, sim.views.cli, sim.views.report\n"
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_catalog_and_workload_commands_print_tables():
    models = servesim("catalog", "models")
    assert models.returncode == 0 and "llama-3.1-8b" in models.stdout and "deepseek-v2-lite" in models.stdout
    gpus = servesim("catalog", "gpus")
    assert gpus.returncode == 0 and "h100-sxm" in gpus.stdout
    from sim.views.tables import gpus_table
    table = gpus_table().set_index("gpu")["measured_tables"]
    assert table["b300"] == "vllm, sglang, trtllm" and table["l4"] == "-" and table["a10g"] == "-"
    engines = servesim("catalog", "engines")
    assert engines.returncode == 0 and "TensorRT-LLM" in engines.stdout and "num_scheduler_steps" in engines.stdout
    wl = servesim("workload", "scenarios/quickstart.yaml")
    assert wl.returncode == 0
    assert re.search(r"count\s*│\s*3,000", wl.stdout)


def test_a_run_that_rejects_requests_says_why(tmp_path):
    """A KV cache smaller than any request (LMDeploy's cache_max_entry_count of 2 blocks, found by a random search)
    rejects every request and exits 0: the table counts them, and a note now says why, from their reject_reason."""
    scenario = small_scenario({"kv_cache": {"capacity_tokens": 128},
                               "workload": {"lengths": {"input_tokens": 200, "output_tokens": 20}},
                               "run": {"num_requests": 10}})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    proc = servesim("run", path, "--out", tmp_path / "out", "-q")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if "rejected," in line]
    # 219 KV slots: 200 + 20 tokens, the last token's KV never written
    assert lines == ["note: small: 10 of 10 requests were rejected, as they can never run here (the first: needs 219 "
                     "KV slots but the whole cache holds 128); requests.parquet's reject_reason says why for each"]
    # With SLOs the verdict says why (report.html and the dashboard show it too), and the note does not repeat it.
    scenario["slo"] = {"ttft_s": 1.0}
    path.write_text(yaml.safe_dump(scenario))
    proc = servesim("run", path, "--out", tmp_path / "out2", "-q")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # as the console wraps it
    assert ("Why small: it rejected 10 of 10 requests, which it can never run (the first needs 219 KV slots but the "
            "whole cache holds 128); each counts over every limit") in text
    assert ("note: small: 10 of 10 requests were rejected, as they can never run here (the first as the verdict "
            "says); each counts over every SLO limit") in text
    report = (tmp_path / "out2" / "report.html").read_text()
    assert "the first needs 219 KV slots but the whole cache holds 128" in report
    # Two variants alike: the verdict's sentence is on one of them; the other's note still says why.
    scenario["variants"] = {"a": {}, "b": {}}
    path.write_text(yaml.safe_dump(scenario))
    proc = servesim("compare", path, "--out", tmp_path / "out3", "-q")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "Why a: it rejected 10 of 10 requests" in text and "Why b:" not in text
    assert ("note: a: 10 of 10 requests were rejected, as they can never run here (the first as the verdict "
            "says)") in text
    assert ("note: b: 10 of 10 requests were rejected, as they can never run here (the first: needs 219 KV slots but "
            "the whole cache holds 128)") in text


def test_compare_prints_a_note_its_variants_share_once_naming_them_all(tmp_path):
    """a and b run the same model on the same tables, so their cost models note the same unmeasured LM head: one line
    names both. c's model has another LM head: its own line."""
    raw = small_scenario(cost_model={"kind": "measured"}, variants={
        "a": {}, "b": {"scheduler": {"max_num_seqs": 8}}, "c": {"model": "qwen2.5-7b"}})
    (tmp_path / "three.yaml").write_text(yaml.safe_dump(raw))
    done = servesim("compare", tmp_path / "three.yaml", "-q", "--out", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert text.count("cost model: gemm lm_head") == 2
    assert "note: a, b: cost model: gemm lm_head: (n=128256, k=4096) outside measured" in text
    assert "note: c: cost model: gemm lm_head: (n=152064, k=3584) outside measured" in text
