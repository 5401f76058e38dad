"""What an install outside the repository holds: pyproject.toml's package-data must cover every data file the code
reads at run time. A wheel built before these patterns listed them had neither sim/config/engine_terms.json (the
presets' fitted CPU terms, dropped for vLLM's estimates) nor calibrate/measured/ (`cost_model: measured` fell back
to the roofline), while an editable install, reading the repository, had both."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Files in the packages that are the repository's own tools, not read by an installed ServeSim.
REPOSITORY_ONLY = ("calibrate/fidelity/", "calibrate/gpu_run.sh")


def _package_data() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]


def _data_files(package: str) -> set[str]:
    """Every file under the package that is not Python source or a cache, relative to the repository."""
    found = set()
    for path in (ROOT / package).rglob("*"):
        rel = path.relative_to(ROOT).as_posix()
        if (path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
                and not rel.startswith(REPOSITORY_ONLY)):
            found.add(rel)
    return found


def test_every_data_file_the_code_reads_is_in_the_package_data():
    data = _package_data()
    assert set(data) == {"sim", "calibrate"}
    for package, patterns in data.items():
        covered = {path.relative_to(ROOT).as_posix() for pattern in patterns for path in (ROOT / package).glob(pattern)
                   if path.is_file()}
        missing = sorted(_data_files(package) - covered)
        assert not missing, f"{package}: not in pyproject.toml's package-data: {missing[:5]}"


def test_the_shipped_tables_and_terms_are_among_them():
    """The files whose absence degraded an installed run without failing it."""
    data = _package_data()
    covered = {path.relative_to(ROOT).as_posix() for package, patterns in data.items() for pattern in patterns
               for path in (ROOT / package).glob(pattern)}
    assert "sim/config/engine_terms.json" in covered
    assert "calibrate/measured/h100-sxm/gemm.parquet" in covered
    assert "calibrate/measured/h100-sxm/sglang/gemm.parquet" in covered
    assert "calibrate/measured/learned_roofline.json" in covered
    assert "calibrate/residuals.json" in covered
