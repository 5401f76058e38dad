"""Modules share only public names: nothing imports another module's `_private` name (sim/, calibrate/, app.py)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def private_imports(path: Path, label: str | None = None) -> list[str]:
    found, label = [], label or str(path.relative_to(ROOT))
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in ("sim", "calibrate"):
            found += [f"{label}:{node.lineno} {node.module}.{a.name}" for a in node.names
                      if a.name.startswith("_") and not a.name.endswith("__")]  # dunders are public
    return found


def test_no_module_imports_a_private_name_of_another():
    files = [ROOT / "app.py", *(ROOT / "sim").rglob("*.py"), *(ROOT / "calibrate").rglob("*.py")]
    assert len(files) > 50
    assert [hit for path in files for hit in private_imports(path)] == []


def test_the_checker_sees_a_private_import(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("from sim.views.report import _KV_PARTS\nfrom sim import COLORS, __version__\n")
    assert private_imports(path, "probe.py") == ["probe.py:1 sim.views.report._KV_PARTS"]
