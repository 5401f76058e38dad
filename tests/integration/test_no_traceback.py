"""No input gets a traceback: any value at any key of any shipped scenario, through the path the CLI takes.

For every scalar key of the shipped scenarios (and of their variants), hypothesis sets odd values: huge and
tiny numbers, NaN and infinities, negative numbers, strings, lists, mappings, null. Loading, resolving and
building the workload, the scheduler and the cost model either succeeds or raises ServeSimError with one line
that names the key; nothing else escapes. (Simulating is left out: a legal but slow value would only be slow.)
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.files import load_scenario_set
from sim.errors import ServeSimError
from sim.run import deployment_of, make_cost_model, make_scheduler, make_workload

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def leaf_keys(node, prefix: str = "") -> list[str]:
    """Dotted paths of every scalar (and list) in a raw scenario, variants' keys under their base path."""
    keys = []
    if isinstance(node, dict):
        for key, value in node.items():
            if prefix == "" and key == "variants" and isinstance(value, dict):
                for variant in value.values():
                    keys += leaf_keys(variant or {}, "")
                continue
            keys += leaf_keys(value, f"{prefix}{key}.")
    else:
        keys.append(prefix.rstrip("."))
    return keys


KEYS = sorted({(path.name, key) for path in SCENARIOS for key in leaf_keys(yaml.safe_load(path.read_text()))
               if key and key != "name"})
ODD_VALUES = st.one_of(
    st.sampled_from(["1e10", "1e300", "-1", "0", "-0.0", ".nan", ".inf", "-.inf", "1e-300", "99999999999999999999",
                     "true", "null", "[]", "{}", "[1, 2]", "{a: 1}", "''", "x", "~/nowhere", "/etc/passwd"]),
    st.integers(min_value=-(10 ** 30), max_value=10 ** 30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: "nan" if math.isnan(x) else repr(x)),
)


def build_everything(scenario) -> None:
    """What `servesim run` builds before its first simulated step."""
    deployment = deployment_of(scenario)
    make_workload(scenario, deployment if scenario.hardware.disaggregation is None else None)
    if scenario.hardware.disaggregation is None:
        make_scheduler(scenario, 0, deployment)
        make_cost_model(scenario, deployment)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(KEYS), value=ODD_VALUES)
def test_an_odd_value_anywhere_is_run_or_refused_in_one_line(case, value):
    file, key = case
    try:
        scenario_set = load_scenario_set(str(ROOT / "scenarios" / file), [f"{key}={value}"])
        for scenario in scenario_set.variants.values():
            build_everything(scenario)
    except ServeSimError as err:
        message = str(err)
        assert "\n" not in message and message.strip(), message
    except MemoryError:  # a value so large that building it exhausted memory: it should have been refused
        pytest.fail(f"{file}: {key}={value} exhausted memory instead of being refused with its limit")
