"""`sim.numba_cache`: the compiled core's numba caches go when any of its sources changes (numba itself
checks only the source of the module that defines a function, not of the modules it calls into)."""

import re
from pathlib import Path

from sim.numba_cache import COMPILED_IN, CORE_MODULES, NUMBA_MODULES, ROOT, purge_stale_caches, sources_digest

MODULES = ("pkg/a.py", "pkg/b.py")
STAMP = "pkg/__pycache__/stamp.sha256"


def _tree(tmp_path: Path) -> list[Path]:
    for name in MODULES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(f"# {name}\n")
    cache = tmp_path / "pkg" / "__pycache__"
    cache.mkdir(exist_ok=True)
    files = [cache / "a.run-10.py311.nbi", cache / "a.run-10.py311.1.nbc", cache / "b.f-3.py311.nbi"]
    for f in files:
        f.write_text("compiled")
    (cache / "a.cpython-311.pyc").write_text("bytecode")  # not numba's
    (cache / "ab.g-1.py311.nbi").write_text("another module's")  # a module whose name starts the same
    return files


def test_caches_go_when_any_core_source_changes_and_stay_while_none_does(tmp_path):
    files = _tree(tmp_path)
    assert purge_stale_caches(tmp_path, MODULES, STAMP)  # no stamp yet: whatever is there may be stale
    assert not any(f.exists() for f in files)
    cache = tmp_path / "pkg" / "__pycache__"
    assert (cache / "a.cpython-311.pyc").exists() and (cache / "ab.g-1.py311.nbi").exists()

    files = _tree(tmp_path)  # compiled again
    assert not purge_stale_caches(tmp_path, MODULES, STAMP)  # same sources: kept
    assert all(f.exists() for f in files)

    (tmp_path / "pkg" / "b.py").write_text("# b, edited\n")  # a module a's functions call into
    assert purge_stale_caches(tmp_path, MODULES, STAMP)
    assert not any(f.exists() for f in files)


def test_the_stamp_covers_every_module_with_compiled_core_functions_and_the_constants_they_compile_in():
    numba_modules = {str(p.relative_to(ROOT)) for p in (ROOT / "sim").rglob("*.py") if "@njit" in p.read_text()}
    assert numba_modules == set(NUMBA_MODULES) and set(CORE_MODULES) == numba_modules | set(COMPILED_IN)
    imported = {m.replace(".", "/") + ".py" for name in NUMBA_MODULES
                for m in re.findall(r"^from (sim\.[\w.]+) import", (ROOT / name).read_text(), re.M)}
    assert set(COMPILED_IN) <= imported  # each is there because a numba module reads its constants


def test_the_digest_changes_with_any_module_and_only_then(tmp_path):
    _tree(tmp_path)
    before = sources_digest(tmp_path, MODULES)
    assert sources_digest(tmp_path, MODULES) == before
    (tmp_path / "pkg" / "a.py").write_text("# a, edited\n")
    assert sources_digest(tmp_path, MODULES) != before
