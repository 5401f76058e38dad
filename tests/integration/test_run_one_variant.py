"""`servesim run` validates and simulates only the scenario it runs: another variant of the file that cannot run
(a model the GPU a --set names cannot hold) does not stop it (sim/config/files.py one_scenario)."""

from __future__ import annotations

import copy

import pytest
import yaml

from helpers import one_error_line, servesim, small_scenario
from sim.config.files import build_scenario_set, one_scenario
from sim.errors import ConfigError

# two variants: the 8B fits one H100, the 70B's bf16 weights do not
FILE = small_scenario(variants={"small": {}, "large": {"model": "llama-3.1-70b"}})


def test_a_variant_runs_when_another_cannot_and_compare_still_refuses_the_file(tmp_path):
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(FILE))
    done = servesim("run", path, "--variant", "small", "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Best: small at" in done.stdout
    line = one_error_line(servesim("compare", path, "-q", "--out", tmp_path / "out", cwd=tmp_path))
    assert line.startswith("error: variants.large.hardware:") and "llama-3.1-70b" in line
    assert not (tmp_path / "out").exists()


def test_a_variant_run_alone_is_the_one_compare_runs_where_every_variant_runs():
    raw = small_scenario(variants={"h100": {}, "l4": {"hardware": {"gpu": "l4"}}})
    raw.pop("cost_model")  # the default model: the two GPUs' best tiers differ, so the file shares one
    whole = build_scenario_set(copy.deepcopy(raw))
    assert whole.variants["h100"].cost_model_choice  # (the shared tier is set: this checks something)
    for name in ("h100", "l4"):
        alone = one_scenario(copy.deepcopy(raw), "f.yaml", [], name)
        assert alone.model_dump() == whole.variants[name].model_dump()
    assert one_scenario(copy.deepcopy(raw), "f.yaml", [], None).model_dump() == whole.base.model_dump()


def test_an_unknown_variant_is_refused_with_the_files_names():
    with pytest.raises(ConfigError, match=r"^--variant: 'zz' is not in f.yaml; allowed: small, large$"):
        one_scenario(small_scenario(FILE), "f.yaml", [], "zz")
    # a file without variants is its own only one
    assert one_scenario(small_scenario(), "f.yaml", [], "small").name == "small"
    with pytest.raises(ConfigError, match=r"allowed: small$"):
        one_scenario(small_scenario(), "f.yaml", [], "zz")
