"""ServeSim: a discrete-event simulator of LLM serving systems."""

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy re-exports keep `import sim` light (no pandas/simpy until used).
    if name in ("simulate", "make_workload"):
        from sim import run as _simulate
        return getattr(_simulate, name)
    if name in ("load_scenario_set", "Scenario"):
        from sim.config import scenario as _scenario
        return getattr(_scenario, name)
    raise AttributeError(name)
