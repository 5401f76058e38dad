"""ServeSim: a discrete-event simulator of LLM serving systems."""

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy re-exports keep `import sim` light (no pandas/simpy until used).
    if name in ("simulate", "make_workload"):
        from sim import run as _simulate
        return getattr(_simulate, name)
    if name == "load_scenario_set":
        from sim.config.files import load_scenario_set
        return load_scenario_set
    if name == "Scenario":
        from sim.config.schema import Scenario
        return Scenario
    raise AttributeError(name)
