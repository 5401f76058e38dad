"""A cold numba cache: in a one-shot command (`servesim run`, `compare`) a small run goes to the SimPy engine
(identical records) rather than wait ~1 min for the compiled core to compile (sim/compiled/engine.py
COLD_CORE_MAX_REQUESTS); a warm cache, many runs adding up, any other caller, or the override runs the core."""

import pytest

from helpers import small_scenario
from sim.compiled import engine
from sim.config.files import validate_scenario
from sim.run import simulate


def test_a_small_run_on_a_cold_cache_runs_in_the_simpy_engine_with_the_same_records(monkeypatch):
    scenario = validate_scenario(small_scenario())
    monkeypatch.setenv(engine.COMPILE_WHEN_COLD_ENV, "1")
    compiled = simulate(scenario)
    assert compiled.extras["engine_core"] == "compiled"
    monkeypatch.delenv(engine.COMPILE_WHEN_COLD_ENV)
    monkeypatch.setattr(engine, "core_in_cache", lambda: False)
    monkeypatch.setattr(engine, "_cold", {"prefer_simpy": True, "requests_run": 0})
    cold = simulate(scenario)
    assert cold.extras["engine_core"].startswith("python (20 requests on a cold numba cache")
    assert cold.summary == compiled.summary
    assert cold.requests.equals(compiled.requests)


def test_a_large_run_compiles_the_core_even_when_cold(monkeypatch):
    monkeypatch.delenv(engine.COMPILE_WHEN_COLD_ENV, raising=False)
    monkeypatch.setattr(engine, "core_in_cache", lambda: False)
    monkeypatch.setattr(engine, "_cold", {"prefer_simpy": True, "requests_run": 0})
    monkeypatch.setattr(engine, "COLD_CORE_MAX_REQUESTS", 10)  # 20 requests: "large"
    assert simulate(validate_scenario(small_scenario())).extras["engine_core"] == "compiled"


def test_many_small_runs_compile_the_core_once_they_add_up(monkeypatch):
    # a planner's hundreds of small runs: the SimPy engine until the process has run the threshold, then the core
    monkeypatch.delenv(engine.COMPILE_WHEN_COLD_ENV, raising=False)
    monkeypatch.setattr(engine, "core_in_cache", lambda: False)
    monkeypatch.setattr(engine, "_cold", {"prefer_simpy": True, "requests_run": 0})
    monkeypatch.setattr(engine, "COLD_CORE_MAX_REQUESTS", 50)
    scenario = validate_scenario(small_scenario())  # 20 requests a run
    cores = [simulate(scenario).extras["engine_core"] for _ in range(3)]
    assert cores[0].startswith("python (") and cores[1].startswith("python (") and cores[2] == "compiled"


def test_outside_a_one_shot_command_a_cold_core_compiles(monkeypatch):
    # the planner, sweeps, the dashboard: hundreds of runs, where compiling once pays
    monkeypatch.delenv(engine.COMPILE_WHEN_COLD_ENV, raising=False)
    monkeypatch.setattr(engine, "core_in_cache", lambda: False)
    monkeypatch.setattr(engine, "_cold", {"prefer_simpy": False, "requests_run": 0})
    assert simulate(validate_scenario(small_scenario())).extras["engine_core"] == "compiled"


def test_the_core_is_in_the_cache_once_it_ran():
    simulate(validate_scenario(small_scenario()))  # the suite compiles it (SERVESIM_COMPILE_WHEN_COLD=1)
    assert engine.core_in_cache()
