"""The floor plan holds: imports in sim/ point down the layers, and no modules import each other in a cycle.

Layers, bottom to top (a module may import its own package and any lower layer, never a higher one):
errors; atomic_files and table; model and workload; core; kv and cost; sched; config and compiled (the numba engine
loop, which stands in for core's SimPy loop over kv, cost and sched); gap_scan and slot_seconds (the
summary's compiled passes over the step log); results; frontend (the API front-end's passes
around the engine loop, over its records); run; band_curves (a run's curves for the ribbons); bands (a run's replications); api
(the public facade); tools; views. `sim/__init__.py` only re-exports lazily and is exempt. Function-level imports count too:
a lazy import that points up a layer is still a dependency upwards.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[2] / "sim"
LAYER_OF = {
    "sim.errors": 0, "sim.machine": 0, "sim.atomic_files": 0.5, "sim.table": 0.5,  # outputs and tables raise sim.errors' errors
    "sim.numba_cache": 0, "sim.jit": 0.5,  # numba's njit (or none) for every layer's compiled arithmetic
    "sim.model": 1, "sim.workload": 1,
    "sim.core": 2,
    "sim.kv": 3, "sim.cost": 3,
    "sim.sched": 4,
    "sim.config": 5, "sim.compiled": 5,
    "sim.gap_scan": 5.9,  # the summary's compiled scan of the step log for inter-token gaps (sim.results)
    "sim.slot_seconds": 5.9,  # the summary's compiled KV integrals over the decode runs' steps (sim.results)
    "sim.results": 6,
    "sim.frontend": 6.5,  # passes before and after the engine loop, over the results' request records
    "sim.run": 7,
    "sim.band_curves": 7.4,  # the curves a report draws, kept per band run for the ribbons (issue 31)
    "sim.bands": 7.5,  # a run's replications around `sim.run.simulate` (issue 31)
    "sim.api": 8,
    "sim.tools": 9,
    "sim.views": 10,
}


def unit_of(module: str) -> str:
    """The layer unit a dotted module belongs to: its package under sim/, or the top-level module."""
    parts = module.split(".")
    return ".".join(parts[:2])


def sim_modules() -> dict[str, Path]:
    out = {}
    for path in SIM.rglob("*.py"):
        rel = path.relative_to(SIM.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(path: Path, module: str) -> list[tuple[str, int]]:
    """Every sim module this file imports (at any depth of the code), with its line."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.startswith("sim")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("sim"):
                found.append((target, node.lineno))
                # `from sim.pkg import module` imports that module too
                found += [(f"{target}.{alias.name}", node.lineno) for alias in node.names]
    return found


def graph() -> dict[str, set[str]]:
    modules = sim_modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for target, _ in imports_of(path, module):
            if target in modules and target != module:
                edges[module].add(target)
    return edges


def test_every_sim_module_has_a_layer():
    unplaced = sorted(m for m in sim_modules() if m != "sim" and unit_of(m) not in LAYER_OF)
    assert not unplaced, f"modules with no layer in the floor plan: {unplaced}"


def test_imports_point_down_the_layers():
    modules = sim_modules()
    upward = []
    for module, path in modules.items():
        if module == "sim":
            continue
        mine = LAYER_OF[unit_of(module)]
        for target, line in imports_of(path, module):
            if target not in modules or unit_of(target) == unit_of(module) or target == "sim":
                continue
            theirs = LAYER_OF[unit_of(target)]
            if theirs >= mine:
                upward.append(f"{path.relative_to(SIM.parent)}:{line} imports {target} "
                              f"(layer {theirs} from layer {mine})")
    assert not upward, "imports that point up or sideways:\n" + "\n".join(upward)


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycles():
    cycle = find_cycle({m: {t for t in ts if t != "sim"} for m, ts in graph().items() if m != "sim"})
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("edges, expect_cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"a": {"a2"}, "a2": set(), "b": {"a", "b2"}, "b2": {"b"}}, True),
])
def test_the_cycle_finder_finds_cycles(edges, expect_cycle):
    assert (find_cycle(edges) is not None) == expect_cycle


def test_the_layer_check_sees_an_upward_import(tmp_path):
    # A model-layer module importing the runner must be reported: the check reads function-level imports.
    source = "def f():\n    from sim.run import simulate\n    return simulate\n"
    path = tmp_path / "x.py"
    path.write_text(source)
    targets = [t for t, _ in imports_of(path, "sim.model.x")]
    assert "sim.run" in targets and LAYER_OF[unit_of("sim.run")] > LAYER_OF[unit_of("sim.model.x")]


def test_simulation_core_imports_without_torch():
    import subprocess
    import sys
    code = ("import sys, sim.run, sim.cost.calibrated, sim.cost.steps, sim.views.cli; "
            "sys.exit(1 if 'torch' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code], cwd=SIM.parent).returncode == 0
