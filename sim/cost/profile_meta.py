"""meta.json of a profile folder, per-op or whole-step: one reader, one set of one-line errors; the dtypes a
profile was measured in, which a scenario's quantization must match (`check_profile_dtypes`); and what a cell of its
tables may hold (`count_cell` for the whole-step table's line reader, `first_bad_cell` for a column of the per-op
tables and of `calibrate fit-engine`'s measurement tables, both bounded by MAX_CELL_COUNT and MAX_STEP_S)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sim.errors import ConfigError

PROFILE_FORMAT_VERSION = 1
# A table's counts are read, and priced, as float64 (pandas, the pricing kernels): whole numbers are exact up to 2^53
MAX_CELL_COUNT = 2 ** 53
# A table's times are seconds. One in milliseconds or microseconds read as seconds makes every step 1,000 or
# 1,000,000 times too slow (a 6.6 ms decode step becomes a TPOT of 6,629 s per token), so implausible times are
# refused with the unit named. No engine step takes ten minutes: the slowest shipped step is 1.0 s (Llama-3.1-70B,
# an 8,192-token prefill on 2 H100s), and a CPU prefill of thousands of tokens takes minutes at most; nor does one
# op of a step (the per-op tables).
MAX_STEP_S = 600.0


def _number(value: str) -> float | None:
    """A cell's number as pandas reads it: Python's float() also takes digits grouped by underscores ("1_000"),
    which pandas leaves as text, a TypeError in the tables' arithmetic."""
    if "_" in value:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def count_cell(value: str, minimum: int) -> int | None:
    """A table cell as a whole number from `minimum` to MAX_CELL_COUNT, else None."""
    number = _number(value)
    if number is None:
        return None
    if not (math.isfinite(number) and number == int(number) and minimum <= number <= MAX_CELL_COUNT):
        return None
    return int(number)


def count_words(minimum: int) -> str:
    return f"a whole number from {minimum} to {MAX_CELL_COUNT:,}"


def first_bad_cell(values: pd.Series, lo: float, hi: float, whole: bool, above_lo: bool = False,
                   optional: bool = False) -> tuple[int, str] | None:
    """(row, the cell as shown in an error) of the first cell of a measured table's column, as pandas read it, that
    is not a finite number from `lo` (above it with `above_lo`) to `hi`, a whole one where `whole`; None where every
    cell is. `optional`: an empty cell is allowed. Text that is not a number is not one (digits grouped by
    underscores, "1_000", included: pandas leaves them as text), nor is true or false. The one check of the
    per-op profile tables (sim/cost/calibrated.py) and of `calibrate fit-engine`'s measurement tables."""
    if values.dtype == bool:
        return 0, repr(values.iloc[0])
    numbers = pd.to_numeric(values, errors="coerce").to_numpy(float)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(numbers) | (numbers > hi) | ((numbers <= lo) if above_lo else (numbers < lo))
        if whole:
            bad |= numbers != np.floor(numbers)
    if optional:
        bad &= values.notna().to_numpy()
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    cell = values.iloc[i]
    return i, repr(cell) if isinstance(cell, str) else f"{cell:g}"


def read_meta(path: str | Path, field: str = "cost_model.profile") -> dict:
    """meta.json of any ServeSim profile folder (per-op or whole-step), with one-line errors."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ConfigError(f"{field}: '{path}' is not a folder; give a profile written by `python -m calibrate run`, "
                          "`calibrate steps` or `calibrate import-steps`")
    meta_path = p / "meta.json"
    if not meta_path.is_file():
        raise ConfigError(f"{field}: '{path}' has no meta.json; give a profile written by `python -m calibrate run`, "
                          "`calibrate steps` or `calibrate import-steps`")
    try:
        meta = json.loads(meta_path.read_text())
    except (ValueError, UnicodeDecodeError) as err:  # ValueError: JSONDecodeError, or an integer of > 4,300 digits
        raise ConfigError(f"{field}: '{meta_path}' is not valid JSON ({getattr(err, 'msg', err)})") from None
    if not isinstance(meta, dict) or meta.get("format_version") != PROFILE_FORMAT_VERSION or "shard" not in meta:
        raise ConfigError(f"{field}: '{meta_path}' is not a ServeSim profile (format_version "
                          f"{PROFILE_FORMAT_VERSION} with a shard section)")
    kind = meta.get("profile_kind")
    if kind is not None and not isinstance(kind, str):  # (a mapping was looked up among the kinds: a TypeError)
        raise ConfigError(f"{field}: '{meta_path}' has profile_kind {kind!r}; allowed: the name of a profile's kind "
                          "(steps, engine_steps), or none for per-op kernel times")
    return meta


# A profile's dtype: `python -m calibrate run` and `calibrate steps` measure weights, activations and the KV cache in
# one torch dtype, recorded as meta.json `dtype` (calibrate/cli.py; TORCH_DTYPES of calibrate/bench.py and
# calibrate/steps.py: fp32, fp16, bf16); a profile without it was measured at calibrate's default, bf16
# (`--dtype` default in calibrate/cli.py). A profile of a quantized engine would say so with `weight_dtype` /
# `kv_dtype`, which take precedence.
UNQUANTIZED = ("bf16", "fp16", "fp32")


def profile_dtypes(meta: dict) -> tuple[str, str]:
    """(weights, KV cache) dtypes a profile was measured in."""
    dtype = str(meta.get("dtype") or "bf16")
    return str(meta.get("weight_dtype") or dtype), str(meta.get("kv_dtype") or dtype)


def check_profile_dtypes(meta: dict, path: str | Path, weight_dtype: str = "bf16", kv_dtype: str = "bf16",
                         fp8_compute: bool = False, fp8_block: bool = False) -> None:
    """One-line ConfigError where the scenario's quantization is not what the profile was measured in. An
    unquantized scenario (bf16, fp16) takes an unquantized profile's own dtype (its repr names it); a quantized one
    (fp8, int8, int4 weights; fp8, int8 KV; fp8 matrix products) must be the profile's, never priced as bf16."""
    weights, kv = profile_dtypes(meta)
    where = f"in profile '{path}' (measured in {weights} weights, {kv} KV cache)"
    escape = "or cost_model.kind roofline"

    def allowed(measured: str) -> str:
        return "bf16, fp16" if measured in UNQUANTIZED else measured

    def fits(asked: str, measured: str) -> bool:
        return asked == measured or (asked in UNQUANTIZED and measured in UNQUANTIZED)

    if not fits(weight_dtype, weights):
        raise ConfigError(f"quantization.weights: {weight_dtype!r} is not measured {where}; allowed: "
                          f"{allowed(weights)}, {escape}")
    if fp8_compute and weights != "fp8":
        raise ConfigError(f"quantization.fp8_compute: true is not measured {where}; allowed: false, {escape}")
    if weights == "fp8" and meta.get("fp8_compute") and not fp8_compute:
        raise ConfigError(f"quantization.fp8_compute: false is not measured {where}, whose matrix products ran in "
                          f"fp8; allowed: true, {escape}")
    if fp8_block and not meta.get("fp8_block_scales"):
        raise ConfigError(f"quantization.fp8_block_scales: true is not measured {where} (per-tensor scales); allowed: "
                          f"false, {escape}")
    if not fits(kv_dtype, kv):
        raise ConfigError(f"quantization.kv_cache: {kv_dtype!r} is not measured {where}; allowed: {allowed(kv)}, "
                          f"{escape}")


def measured_in(quantization: dict) -> dict:
    """A scenario's `quantization` section (validated and dumped, or raw) as `check_profile_dtypes` / `profile_fits`
    keywords, the schema's defaults where a key is absent."""
    from sim.model.memory import FP8_COMPUTE_DEFAULT
    return dict(weight_dtype=quantization.get("weights", "bf16"), kv_dtype=quantization.get("kv_cache", "bf16"),
                fp8_compute=quantization.get("fp8_compute", FP8_COMPUTE_DEFAULT),
                fp8_block=quantization.get("fp8_block_scales", False))


def profile_fits(meta: dict, weight_dtype: str = "bf16", kv_dtype: str = "bf16", fp8_compute: bool = False,
                 fp8_block: bool = False) -> bool:
    """Whether a scenario of this quantization may use the profile (`check_profile_dtypes` passes)."""
    try:
        check_profile_dtypes(meta, "", weight_dtype, kv_dtype, fp8_compute, fp8_block)
    except ConfigError:
        return False
    return True
