"""The public Python API: what a notebook, the planner and the dashboard call.

`simulate` lives in `sim.run` (the one entry point the applications share); this module only names
the stable entry points so `from sim.api import simulate` keeps working as the layout evolves.
"""

from sim.config.files import load_scenario_set
from sim.config.schema import Scenario, ScenarioSet
from sim.results import Result
from sim.run import make_workload, simulate

__all__ = ["Result", "Scenario", "ScenarioSet", "load_scenario_set", "make_workload", "simulate"]
