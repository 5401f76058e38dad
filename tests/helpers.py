"""Small builders for tests: requests for schedulers and KV managers (no event loop), scenarios, the CLI in a process."""

from __future__ import annotations

import importlib.util
import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

from sim.core.request import Request

_ids = itertools.count()


def make_request(prompt: int, output: int, arrival_s: float = 0.0, request_id: int | None = None) -> Request:
    return Request(next(_ids) if request_id is None else request_id, arrival_s, prompt, output)


# The small scenario most end-to-end tests start from: llama-3.1-8b on one H100, a light Poisson load of short
# fixed-length requests, priced by the plain roofline (these tests check mechanisms; the cost model a scenario gets
# when it names none is tested in tests/unit/test_cost_choice.py). A test states only what it changes (deep-merged,
# as scenario variants are).
SMALL_SCENARIO = {
    "name": "small",
    "model": "llama-3.1-8b",
    "hardware": {"gpu": "h100-sxm"},
    "cost_model": {"kind": "roofline"},
    "workload": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                 "lengths": {"kind": "fixed", "input_tokens": 64, "output_tokens": 8}},
    "scheduler": {"max_model_len": 2048},
    "run": {"seed": 0, "num_requests": 20},
}


def small_scenario(changes: dict | None = None, **sections) -> dict:
    """SMALL_SCENARIO with `changes` (and keyword sections) deep-merged into it; a fresh dict every call."""
    from sim.config.files import deep_merge
    return deep_merge(deep_merge(SMALL_SCENARIO, changes or {}), sections)


# The fidelity harness's fixtures (recorded vLLM runs and the kernel profile they were compared with).
FIDELITY_FIXTURES = Path(__file__).parent / "fixtures" / "fidelity"


def run_fidelity_cli(args: list[str], capsys) -> tuple[int, object]:
    """(exit status, captured output) of `python -m calibrate.fidelity ARGS`, run in-process."""
    from calibrate.fidelity.__main__ import (
        main,  # the calibrate package, imported only by the tests that use it
    )
    try:
        code = main(args)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr()


# The verdict (sim/views/verdict.py): which variant wins by the stated rule, from the summaries alone.

def _slo_percentile(summaries: dict) -> str:
    for s in summaries.values():
        for key in s:
            if key.startswith(("slo_ttft_p", "slo_tpot_p", "slo_e2e_p")):
                return key.rsplit("_", 1)[1]
    return "p99"


def expected_winners(summaries: dict[str, dict], tolerance: float = 0.02) -> list[str]:
    """The verdict's rule (sim/views/verdict.py), computed again from the summaries alone for the tests to check
    the verdict against (`tolerance`: its LEVEL_TOLERANCE): the variants meeting the SLOs (all when none does or
    none has limits); at each of goodput (max), TTFT, TPOT, E2E at the SLO percentile (min), throughput (max),
    keep those within the tolerance of the best (on goodput also those that ran the same requests as the best,
    as many of them within every limit: a rate counts the drain); the first by exact values, then file order, is
    the winner."""
    names = list(summaries)
    pct = _slo_percentile(summaries)
    meeting = [n for n in names if summaries[n].get("slo_met") is True]
    pool = meeting or names

    def key_of(n: str, metric: str) -> str:
        s = summaries[n]
        return next((k for k in (f"slo_{metric}_{pct}", f"{metric}_s_{pct}") if k in s), f"{metric}_s_p99")

    def val(n: str, metric: str) -> float:
        if metric in ("goodput", "throughput"):
            v = summaries[n].get(f"{metric}_rps")
        else:
            v = summaries[n].get(key_of(n, metric))
        return math.nan if v is None else float(v)

    order = [("goodput", 1), ("ttft", -1), ("tpot", -1), ("e2e", -1), ("throughput", 1)]
    for metric, sign in order:
        values = {n: val(n, metric) for n in pool}
        finite = [v for v in values.values() if not math.isnan(v)]
        if not finite:
            continue
        best = max(finite) if sign > 0 else min(finite)
        leader = next(n for n in pool if values[n] == best)

        def same_met(n: str) -> bool:  # as many requests, at the same rate, and as many within every limit
            a, b = summaries[n], summaries[leader]
            keys = ("num_requests", "offered_rps", "goodput_rps", "elapsed_s")
            if any(a.get(k) is None or b.get(k) is None for k in keys):
                return False
            return (a["num_requests"] == b["num_requests"] and a["offered_rps"] == b["offered_rps"]
                    and round(a["goodput_rps"] * a["elapsed_s"]) == round(b["goodput_rps"] * b["elapsed_s"]))
        pool = [n for n in pool if not math.isnan(values[n])
                and (abs(values[n] - best) <= tolerance * max(abs(values[n]), abs(best))
                     or (metric == "goodput" and same_met(n)))]
        if len(pool) == 1:
            break

    def exact(n: str):
        met = summaries[n].get("slo_met")
        rank = 0 if met else (1 if met is None else 2)
        vals = [val(n, m) for m, _ in order]
        return (rank, *[math.inf if math.isnan(v) else -s * v for v, (_, s) in zip(vals, order)], names.index(n))
    return sorted(pool, key=exact)


REPO = Path(__file__).resolve().parents[1]


# How long a test waits on a `servesim` subprocess: a guard against a hang, not a speed check (the first process of
# a fresh checkout compiles and caches the numba kernels it runs, which on a slow shared host can take minutes).
SUBPROCESS_TIMEOUT_S = 600
# How long a test waits on one run of the dashboard's script (Streamlit's AppTest; its own default is 3 s): the same
# kind of guard. The suite compiles the engine core even on a cold numba cache (tests/conftest.py), and the first
# page a worker renders may be the one that compiles it: 306 s for the quickstart page on a cold cache, alone, on the
# 2-vCPU development machine (12-03), where 120 s failed a fresh checkout's suite.
APP_RUN_TIMEOUT_S = 900


def servesim(*args, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`servesim ARGS` in a fresh process, on a narrow console: an error must stay on one line however wide."""
    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "sim.views.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The one `error:` line of a command that must exit 2 without a traceback."""
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: ") and line[len("error: "):].strip(), line
    return line


def run_refused(tmp_path: Path, raw: dict, command: str = "run") -> str:
    """`servesim run` (or `command`) of the scenario `raw` (written to tmp_path/s.yaml) refused: its one error line,
    once checked that nothing was written (tmp_path/out does not exist)."""
    import yaml
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump(raw))
    line = one_error_line(servesim(command, path, "--out", out))
    assert not out.exists(), sorted(out.rglob("*"))
    return line


# Plans of a few seconds (tests/integration/test_planner_speed.py, the band tests): lengths and SLOs a small
# deployment meets near its limit.
PLAN_LENGTHS = {"kind": "uniform", "input_min": 200, "input_max": 1200, "output_min": 50, "output_max": 300}
PLAN_SLO = {"ttft_s": 0.5, "tpot_s": 0.05, "percentile": 90}
BAND_PLAN = small_scenario({"name": "plan-band", "workload": {"arrival": {"rate_per_s": 40}, "lengths": PLAN_LENGTHS},
                            "scheduler": {"max_model_len": 4096}, "slo": PLAN_SLO, "run": {"num_requests": 150},
                            "search": {"gpus": ["a100-80gb"], "tensor_parallel": [1], "max_replicas": 8,
                                       "num_seeds": 1, "min_window_s": 5, "rate_tolerance": 0.05, "top_k": 1}})


def set_band_residuals(tmp_path, monkeypatch, bias: float, noise: float) -> None:
    """Residuals of every cost model the planner may pick (it prefers a measured or calibrated one where one fits
    the candidate) set to these sigmas, for sim.bands to read."""
    import json

    from sim import bands
    path = tmp_path / "residuals.json"
    sigmas = {"bias_sigma": bias, "sigma_prefill": noise, "sigma_decode": noise}
    path.write_text(json.dumps({"models": {key: sigmas for key in ("roofline", "measured", "steps", "ops")}}))
    monkeypatch.setattr(bands, "RESIDUALS_PATH", path)


def load_benchmark(name: str):
    """benchmarks/<name>.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
