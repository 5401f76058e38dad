"""A user's profile folder with a bad cell (found by a random search of per-op and whole-step profiles, 12-06):
each was a TypeError, a ValueError, a math domain error, an OverflowError, a ZeroDivisionError or infinite steps.
Each is now refused in one line naming the file, the line, the column and the value."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from helpers import small_scenario
from sim.config.files import validate_scenario
from sim.errors import ConfigError
from sim.run import simulate

SHIPPED = Path(__file__).resolve().parents[2] / "calibrate" / "profiles" / "h100-sxm" / "llama-3.1-8b" / "tp1"


def _copy(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    shutil.copytree(SHIPPED / ("ops" if kind == "ops" else "steps/fused"), folder)
    return folder


def _set_cell(csv: Path, row: int, column: str, value: str) -> None:
    cells = pd.read_csv(csv, dtype=str, keep_default_na=False)
    cells.loc[row, column] = value
    cells.to_csv(csv, index=False)


def _run(folder: Path):
    raw = small_scenario({"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm"},
                          "cost_model": {"kind": "calibrated", "profile": str(folder)}, "run": {"num_requests": 20}})
    return simulate(validate_scenario(raw))


@pytest.mark.parametrize("family, row, column, value, shown, allowed", [
    # (`shown`: the cell as pandas read it: text quoted, a number as a number)
    ("linear", 30, "num_tokens", "True", "'True'", "a whole number from 1 to 9,007,199,254,740,992"),
    ("linear", 3, "median_s", "[1]", "'[1]'", "seconds > 0, at most 600 (finite)"),
    ("decode_attention", 53, "context_tokens", "x", "'x'", "a whole number from 0 to"),
    ("decode_attention", 98, "median_s", "inf", "inf", "seconds > 0"),  # priced infinite steps
    ("decode_attention", 2, "layout", "ring", "'ring'", "contiguous, paged"),
    ("prefill_attention", 36, "context_tokens", "-1", "-1", "a whole number from 0 to"),
    ("sampling", 3, "num_rows", "-1", "-1", "a whole number from 1 to"),  # a math domain error
    ("sampling", 3, "num_rows", "1e20", "1e+20", "a whole number from 1 to"),  # past what float64 counts exactly
    ("step_overhead", 4, "num_seqs", "2.5", "2.5", "a whole number from 1 to"),
    ("step_overhead", 4, "p80_s", "-inf", "-inf", "seconds > 0"),
    ("elementwise", 0, "median_s", "1e4", "10000", "at most 600"),  # a table in microseconds
    # digits grouped by underscores: float() takes them, pandas leaves the cell as text (a TypeError after review)
    ("linear", 3, "num_tokens", "1_0", "'1_0'", "a whole number from 1 to"),
    ("linear", 3, "median_s", "2_0e-05", "'2_0e-05'", "seconds > 0"),
])
def test_a_bad_cell_in_a_per_op_profile_is_one_line(tmp_path, family, row, column, value, shown, allowed):
    folder = _copy(tmp_path, "ops")
    _set_cell(folder / f"{family}.csv", row, column, value)
    with pytest.raises(ConfigError) as err:
        _run(folder)
    csv = folder / f"{family}.csv"
    head = f"cost_model.profile: '{csv}' line {row + 2}: {column} {shown} is not allowed; allowed: "
    assert str(err.value).startswith(head) and allowed in str(err.value), str(err.value)


def test_a_per_op_profile_with_blank_spreads_still_prices(tmp_path):
    """p20_s and p80_s may be left blank (or nan, which pandas reads as blank); only median_s prices."""
    folder = _copy(tmp_path, "ops")
    _set_cell(folder / "linear.csv", 0, "p20_s", "")
    _set_cell(folder / "linear.csv", 1, "p80_s", "nan")
    assert _run(folder).summary["num_finished"] == 20


@pytest.mark.parametrize("value", ["1e300", "1e20", "-3", "4.5"])
def test_a_count_past_what_float64_holds_in_a_whole_step_profile_is_one_line(tmp_path, value):
    """1e20 and 1e300 were read as whole numbers and met the compiled pricing's int64 as an OverflowError."""
    folder = _copy(tmp_path, "steps")
    _set_cell(folder / "steps.csv", 12, "decode_batch", value)
    with pytest.raises(ConfigError, match=r"line 14: decode_batch '.*' is not allowed; allowed: a whole number from "
                                          r"0 to 9,007,199,254,740,992"):
        _run(folder)


@pytest.mark.parametrize("tp", [0, 1.5, True, "1"])
def test_a_whole_step_profile_of_tensor_parallel_zero_is_one_line(tmp_path, tp):
    """0 divided the shard's shapes by zero (ZeroDivisionError); 1.5 was read as 1."""
    folder = _copy(tmp_path, "steps")
    meta = json.loads((folder / "meta.json").read_text())
    meta["tensor_parallel"] = tp
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"lacks a valid model or tensor_parallel \(a whole number >= 1\)"):
        _run(folder)


@pytest.mark.parametrize("kind", ["ops", "steps"])
@pytest.mark.parametrize("key, value, words", [
    ("shard", -1, "has a shard section that is not llama-3.1-8b's at tensor_parallel 1"),
    ("shard", "hidden_size", "has a shard section that is not llama-3.1-8b's"),
    ("model", {"name": "x"}, "lacks a valid model or tensor_parallel"),
    ("profile_kind", {}, r"has profile_kind \{\}; allowed: the name of a profile's kind"),  # was a TypeError
])
def test_a_malformed_meta_json_is_one_line_for_either_kind_of_profile(tmp_path, kind, key, value, words):
    """A per-op profile's shard section reached its tables' arithmetic as it was: -1 or a mapping with a
    mapping for hidden_size raised a TypeError. Both kinds now check the model, tensor_parallel and shard alike
    (`profile_model`)."""
    folder = _copy(tmp_path, kind)
    meta = json.loads((folder / "meta.json").read_text())
    if value == "hidden_size":
        meta["shard"]["hidden_size"] = {}
    else:
        meta[key] = value
    (folder / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=words):
        _run(folder)


def test_a_per_op_table_edited_in_place_is_read_again(tmp_path):
    """The per-op loader's cache was keyed by meta.json's time alone: a table edited after a first load (the
    dashboard's long-lived process) was priced as it was. Its tables' times are in the key now, as the whole-step
    loader's table is."""
    import os
    from sim.cost.calibrated import load_profile
    folder = _copy(tmp_path, "ops")
    assert "linear:qkv" in load_profile(folder).tables  # loaded, and cached
    _set_cell(folder / "linear.csv", 3, "median_s", "2_0e-05")
    stat = (folder / "linear.csv").stat()
    os.utime(folder / "linear.csv", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # a later time, surely
    with pytest.raises(ConfigError, match="line 5: median_s '2_0e-05' is not allowed"):
        load_profile(folder)
