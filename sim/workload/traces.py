"""Request traces: real arrival times and prompt/output lengths read from CSV and JSONL files.

The happy path is vectorized (pandas' C CSV parser, pyarrow's JSON reader, numpy checks). Only when a
check fails do we go looking for the offending line, so that every error is one line naming the
scenario field, the file and the 1-based line number.

Every numeric column passes one range check (`_checked`) before anything is cast or clipped: token counts are
whole numbers from 0 to MAX_TRACE_TOKENS, numeric arrival times finite and within MAX_TRACE_TIME_S, date-times
between FIRST_TRACE_DATE and LAST_TRACE_DATE. Date-times with UTC offsets are put on one timeline (UTC), even
where the offsets differ between lines; offsets on some lines and none on others are refused.

Known layouts (see shared/traces/README.md):
- Azure LLM inference traces: CSV `TIMESTAMP,ContextTokens,GeneratedTokens`, wall-clock timestamps.
- Mooncake (FAST'25) traces: JSONL `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.
- Vidur processed length files: CSV `num_prefill_tokens,num_decode_tokens,...`, no arrival times.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json
from pydantic import BaseModel, ConfigDict, ValidationError

from sim.errors import ConfigError, TraceError

TraceFormat = Literal["auto", "azure", "mooncake", "csv", "jsonl"]
TimeUnit = Literal["s", "ms"]

_SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3}
_DEFAULT_FIELD = "workload.arrival.path"
# A JSONL record must fit in one pyarrow block; Mooncake lines are a few kB, but leave ample room.
_JSON_BLOCK_BYTES = 1 << 24

# What a parsed cell may hold. Every numeric column of a trace passes one check (`_checked`): a finite number
# in its column's range, and a whole one for token counts. Nothing is clipped or cast before that check, so
# 1e20 tokens cannot wrap to a negative int64 (and then be clipped to a 1-token prompt) and 1e300 seconds
# cannot become an arrival time.
#
# Token counts: the longest context any released model advertises is 10M tokens (Llama 4 Scout), and the
# catalog's longest is 163,840. 2**24 is above both, so no real trace is refused, and it keeps every sum the
# simulator forms from counts (a trace's total tokens, tokens x KV bytes per token) exact in int64 and float64.
# A count above the model's context is read and then clipped by the workload (Workload.num_clipped), like any
# prompt too long for the model; a count above this limit is not a prompt length at all.
MAX_TRACE_TOKENS = 1 << 24
# Arrival times, once in seconds: +-1e10 s (317 years) holds Unix-epoch seconds and milliseconds to the year
# 2286 and any relative clock, while float64 still resolves a microsecond at that magnitude.
MAX_TRACE_TIME_S = 1e10
# Date-time strings: the years a datetime64[ns] holds (1677-2262) with a margin; pandas parses dates beyond
# them in coarser units, and converting those to nanoseconds would overflow silently.
FIRST_TRACE_DATE = np.datetime64("1700-01-01")
LAST_TRACE_DATE = np.datetime64("2200-01-01")
_DATE_EXAMPLE = "2023-11-16 18:15:46.6805900"


@dataclass(frozen=True)
class Trace:
    """One trace file, as arrays (read-only), in arrival order."""

    arrival_s: np.ndarray | None  # float64 seconds since the first request, non-decreasing; None: lengths-only file
    input_tokens: np.ndarray  # int64 prompt length per request
    output_tokens: np.ndarray  # int64 generated length per request
    hash_ids: list[np.ndarray] | None  # per request, one int64 id per prompt block (Mooncake: 512 tokens)
    source: str  # the file it was read from

    def __len__(self) -> int:
        return len(self.input_tokens)

    @property
    def num_requests(self) -> int:
        return len(self.input_tokens)


class TraceColumns(BaseModel):
    """Which columns of a generic CSV/JSONL file hold what (scenario key `workload.arrival.columns`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    arrival: str | None = None  # None: a lengths-only file
    input: str
    output: str
    hash_ids: str | None = None  # JSONL only: a list of prompt-block ids per request
    time_unit: TimeUnit = "s"  # unit of a numeric arrival column (datetime strings need none)


# Column layouts of the files described in shared/traces/README.md.
_AZURE = TraceColumns(arrival="TIMESTAMP", input="ContextTokens", output="GeneratedTokens")
_MOONCAKE = TraceColumns(
    arrival="timestamp", input="input_length", output="output_length", hash_ids="hash_ids", time_unit="ms"
)
_VIDUR_LENGTHS = TraceColumns(input="num_prefill_tokens", output="num_decode_tokens")
_KNOWN_LAYOUTS = (("azure", _AZURE), ("mooncake", _MOONCAKE), ("vidur lengths", _VIDUR_LENGTHS))


# --------------------------------------------------------------------------------------------------
# Public loaders


def load_azure_csv(path: str | os.PathLike, *, field: str = _DEFAULT_FIELD) -> Trace:
    """An Azure LLM inference trace (`TIMESTAMP,ContextTokens,GeneratedTokens`)."""
    return _load(_existing(path, field), _AZURE, "csv", field)


def load_mooncake_jsonl(path: str | os.PathLike, *, field: str = _DEFAULT_FIELD) -> Trace:
    """A Mooncake trace (`timestamp` in ms, `input_length`, `output_length`, `hash_ids`)."""
    return _load(_existing(path, field), _MOONCAKE, "jsonl", field)


def load_table(
    path: str | os.PathLike,
    *,
    arrival_column: str | None,
    input_column: str,
    output_column: str,
    hash_ids_column: str | None = None,
    time_unit: TimeUnit = "s",
    format: Literal["csv", "jsonl"] | None = None,
    field: str = _DEFAULT_FIELD,
) -> Trace:
    """A generic CSV or JSONL file with the given columns (format from the extension when None).

    The arrival column may hold numbers (in `time_unit`) or date-time strings; which one is decided by
    its first value. `arrival_column=None` reads a lengths-only file (`Trace.arrival_s` is None).
    """
    file = _existing(path, field)
    layout = TraceColumns(
        arrival=arrival_column, input=input_column, output=output_column, hash_ids=hash_ids_column, time_unit=time_unit
    )
    return _load(file, layout, format or _sniff_format(file), field)


def load_trace(
    path: str | os.PathLike,
    format: TraceFormat = "auto",
    columns: TraceColumns | Mapping[str, str] | None = None,
    *,
    field: str = _DEFAULT_FIELD,
) -> Trace:
    """Load a trace, detecting its layout from the extension and header unless told.

    `columns` (keys arrival/input/output/hash_ids/time_unit) maps a generic csv/jsonl file; without it,
    csv/jsonl/auto recognise the Azure, Mooncake and Vidur-lengths headers.
    """
    file = _existing(path, field)
    if columns is not None:
        if format in ("azure", "mooncake"):
            raise ConfigError(f"{field}: columns apply to format csv, jsonl or auto, not {format!r}")
        layout = _columns(columns, field)
        return _load(file, layout, format if format in ("csv", "jsonl") else _sniff_format(file), field)
    if format == "azure":
        return _load(file, _AZURE, "csv", field)
    if format == "mooncake":
        return _load(file, _MOONCAKE, "jsonl", field)
    fmt = format if format in ("csv", "jsonl") else _sniff_format(file)
    found = _header(file, fmt, field)
    for _, layout in _KNOWN_LAYOUTS:
        if _needed(layout) <= set(found):
            return _load(file, layout, fmt, field)
    known = "; ".join(f"{name}: {', '.join(sorted(_needed(layout)))}" for name, layout in _KNOWN_LAYOUTS)
    raise TraceError(
        f"{field}: cannot tell the layout of '{file}' (columns found: {', '.join(found)}); "
        f"known layouts are {known}; otherwise give columns: {{arrival, input, output}}"
    )


# --------------------------------------------------------------------------------------------------
# Reading


def _existing(path: str | os.PathLike, field: str) -> Path:
    file = Path(path).expanduser()
    if file.is_dir():
        raise TraceError(f"{field}: '{path}' is a directory; allowed: a trace file (CSV or JSONL)")
    if not file.is_file():
        raise TraceError(f"{field}: file '{path}' not found")
    return file


def _columns(columns: TraceColumns | Mapping[str, str], field: str) -> TraceColumns:
    if isinstance(columns, TraceColumns):
        return columns
    try:
        return TraceColumns.model_validate(columns)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'columns'}: {err['msg']}" for err in e.errors())
        raise ConfigError(
            f"{field}: columns {dict(columns)!r} are invalid ({problems}); "
            "allowed keys: arrival, input, output, hash_ids, time_unit"
        ) from None


def _needed(layout: TraceColumns) -> set[str]:
    return {c for c in (layout.arrival, layout.input, layout.output, layout.hash_ids) if c is not None}


def _sniff_format(file: Path) -> Literal["csv", "jsonl"]:
    suffix = file.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix == ".csv":
        return "csv"
    with file.open("rb") as f:
        for raw in f:
            if raw.strip():
                return "jsonl" if raw.lstrip().startswith(b"{") else "csv"
    return "csv"


def _header(file: Path, fmt: str, field: str) -> list[str]:
    """Column names: the CSV header, or the keys of the first JSONL record."""
    if fmt == "csv":
        try:
            return [str(c) for c in pd.read_csv(file, nrows=0).columns]
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
            raise TraceError(f"{field}: '{file}' line 1: cannot read a CSV header ({_first_line(e)})") from None
    return list(_first_record(file, field)[1])


def _first_record(file: Path, field: str) -> tuple[int, dict]:
    with file.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if raw.strip():
                return number, _parse_json_line(raw, file, number, field)
    raise TraceError(f"{field}: '{file}' has no requests")


def _parse_json_line(raw: bytes, file: Path, number: int, field: str) -> dict:
    try:
        record = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(f"{field}: '{file}' line {number}: not valid JSON ({_first_line(e)})") from None
    if not isinstance(record, dict):
        raise TraceError(f"{field}: '{file}' line {number}: expected a JSON object, found {type(record).__name__}")
    return record


def _load(file: Path, layout: TraceColumns, fmt: str, field: str) -> Trace:
    if fmt == "csv":
        return _load_csv(file, layout, field)
    if fmt == "jsonl":
        return _load_jsonl(file, layout, field)
    raise ConfigError(f"{field}: format {fmt!r} is not one of csv, jsonl")


def _missing_columns(file: Path, line: int, layout: TraceColumns, found: list[str], field: str) -> None:
    missing = [c for c in (layout.arrival, layout.input, layout.output, layout.hash_ids) if c and c not in found]
    if missing:
        raise TraceError(
            f"{field}: '{file}' line {line}: no column {', '.join(map(repr, missing))} "
            f"(columns found: {', '.join(map(str, found))})"
        )


def _load_csv(file: Path, layout: TraceColumns, field: str) -> Trace:
    if layout.hash_ids is not None:
        raise ConfigError(f"{field}: hash_ids column {layout.hash_ids!r} is only read from JSONL files")
    _missing_columns(file, 1, layout, _header(file, "csv", field), field)
    try:
        # Blank lines stay as all-NaN rows so that row k is always line k + 2 (after the header).
        # With usecols, fields beyond the header are ignored rather than rejected, as pandas does.
        frame = pd.read_csv(file, usecols=sorted(_needed(layout)), skip_blank_lines=False)
    except pd.errors.ParserError as e:
        # The C parser says "line N" (1-based) or "row N" (0-based, counting the header).
        found = re.search(r"\b(line|row) (\d+)", str(e))
        where = f"line {int(found.group(2)) + (found.group(1) == 'row')}" if found else "(line unknown)"
        raise TraceError(f"{field}: '{file}' {where}: {_first_line(e)}") from None
    except UnicodeDecodeError as e:
        raise TraceError(f"{field}: '{file}': not a text file ({e.reason})") from None
    lines = np.arange(len(frame)) + 2
    blank = frame.isna().all(axis=1).to_numpy()
    if blank.any():
        frame, lines = frame[~blank].reset_index(drop=True), lines[~blank]
    return _build(file, layout, {c: frame[c] for c in frame.columns}, None, lambda k: int(lines[k]), field)


def _load_jsonl(file: Path, layout: TraceColumns, field: str) -> Trace:
    first_line, first = _first_record(file, field)
    _missing_columns(file, first_line, layout, list(first), field)
    # An explicit schema keeps pyarrow from inferring (and tripping over) columns we do not need. Token
    # counts are read as doubles so that 12.5 is caught by our check, with its line, not by the parser.
    schema = [(layout.input, pa.float64()), (layout.output, pa.float64())]
    if layout.arrival is not None:
        schema.append((layout.arrival, pa.string() if isinstance(first[layout.arrival], str) else pa.float64()))
    if layout.hash_ids is not None:
        schema.append((layout.hash_ids, pa.list_(pa.int64())))
    try:
        table = pa_json.read_json(
            file,
            read_options=pa_json.ReadOptions(block_size=_JSON_BLOCK_BYTES),
            parse_options=pa_json.ParseOptions(explicit_schema=pa.schema(schema), unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid as e:
        _find_bad_json_line(file, layout, field)
        raise TraceError(f"{field}: '{file}': {_first_line(e)}") from None

    line_of = _nonblank_line_finder(file)
    hash_ids = None
    if layout.hash_ids is not None:
        hash_ids = _split_lists(table.column(layout.hash_ids).combine_chunks(), file, layout.hash_ids, line_of, field)
    raw = {c: table.column(c).to_pandas() for c in _needed(layout) if c != layout.hash_ids}
    return _build(file, layout, raw, hash_ids, line_of, field)


def _nonblank_line_finder(file: Path) -> Callable[[int], int]:
    """Record k -> its line number; pyarrow skips blank lines, so count only the others (error path only)."""

    def line_of(k: int) -> int:
        seen = -1
        with file.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                seen += bool(raw.strip())
                if seen == k:
                    return number
        return number  # pragma: no cover - k is always a record index

    return line_of


def _find_bad_json_line(file: Path, layout: TraceColumns, field: str) -> None:
    """pyarrow rejected the file without a usable line number: re-read it line by line to find one."""
    arrival_is_text: bool | None = None
    with file.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            record = _parse_json_line(raw, file, number, field)
            where = f"{field}: '{file}' line {number}"
            for column in (layout.input, layout.output):
                value = record.get(column)
                if value is not None and not _within(value, _COUNT):
                    raise TraceError(f"{where}: {_problem(column, value, _COUNT.allowed)}")
            if layout.arrival is not None and record.get(layout.arrival) is not None:
                value = record[layout.arrival]
                if arrival_is_text is None:
                    arrival_is_text = isinstance(value, str)
                if isinstance(value, str) != arrival_is_text or not (isinstance(value, str) or _is_number(value)):
                    kind = "a date-time string" if arrival_is_text else "a number"
                    raise TraceError(f"{where}: {layout.arrival}={value!r} is not {kind} like the first record's")
                times = _time_range(layout.time_unit)
                if not arrival_is_text and not _within(value, times):
                    raise TraceError(f"{where}: {_problem(layout.arrival, value, times.allowed)}")
            if layout.hash_ids is not None and record.get(layout.hash_ids) is not None:
                ids = record[layout.hash_ids]
                if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                        and _INT64_MIN <= i <= _INT64_MAX for i in ids):
                    raise TraceError(f"{where}: {layout.hash_ids} must be a list of integers from {_INT64_MIN} to "
                                     f"{_INT64_MAX}, got {_clip(ids)}")


def _split_lists(
    ids: pa.ListArray, file: Path, column: str, line_of: Callable[[int], int], field: str
) -> list[np.ndarray]:
    if ids.null_count:
        k = int(np.flatnonzero(ids.is_null().to_numpy(zero_copy_only=False))[0])
        raise TraceError(f"{field}: '{file}' line {line_of(k)}: {column} is missing")
    offsets = ids.offsets.to_numpy()
    values = ids.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]].astype(np.int64, copy=True)
    values.setflags(write=False)
    # Views into one buffer: one small array object per request, no per-element Python work.
    return np.split(values, offsets[1:-1] - offsets[0])


# --------------------------------------------------------------------------------------------------
# Checking and assembling


def _build(
    file: Path,
    layout: TraceColumns,
    raw: dict[str, pd.Series],
    hash_ids: list[np.ndarray] | None,
    line_of: Callable[[int], int],
    field: str,
) -> Trace:
    def where(k: int) -> str:
        return f"{field}: '{file}' line {line_of(k)}"

    inputs = _checked(raw[layout.input], layout.input, _COUNT, where).astype(np.int64)
    if len(inputs) == 0:
        raise TraceError(f"{field}: '{file}' has no requests")
    outputs = _checked(raw[layout.output], layout.output, _COUNT, where).astype(np.int64)
    arrival_s = None
    if layout.arrival is not None:
        arrival_s = _arrival_seconds(raw[layout.arrival], layout.arrival, layout.time_unit, where, line_of)
        if np.any(np.diff(arrival_s) < 0):
            # Real traces are sorted, but a merged file may not be; ties keep their file order.
            order = np.argsort(arrival_s, kind="stable")
            arrival_s, inputs, outputs = arrival_s[order], inputs[order], outputs[order]
            hash_ids = None if hash_ids is None else [hash_ids[i] for i in order]
        arrival_s = arrival_s - arrival_s[0]
    for array in (arrival_s, inputs, outputs):
        if array is not None:
            array.setflags(write=False)
    return Trace(arrival_s, inputs, outputs, hash_ids, str(file))


@dataclass(frozen=True)
class _Range:
    """What one numeric column may hold: a finite number in [low, high], whole where `whole`."""

    low: float
    high: float
    whole: bool
    allowed: str  # the words of an error: "a whole number from 0 to 16,777,216"

    def bad(self, values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            out = ~np.isfinite(values) | (values < self.low) | (values > self.high)
            if self.whole:
                out |= values != np.floor(values)
        return out


_COUNT = _Range(0, MAX_TRACE_TOKENS, True, f"a whole number from 0 to {MAX_TRACE_TOKENS:,} (MAX_TRACE_TOKENS)")


def _time_range(unit: TimeUnit) -> _Range:
    limit = MAX_TRACE_TIME_S / _SECONDS_PER_UNIT[unit]
    return _Range(-limit, limit, False, f"a number from {-limit:g} to {limit:g} (in {unit}; MAX_TRACE_TIME_S)")


def _as_numbers(raw: pd.Series) -> np.ndarray:
    """Float64 values of a parsed column; anything that is not a number is NaN (and so refused)."""
    return pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _checked(raw: pd.Series, column: str, rule: _Range, where: Callable[[int], str]) -> np.ndarray:
    """The column as float64 numbers, every one within `rule`; else one line naming the first bad cell."""
    with np.errstate(over="ignore", invalid="ignore"):
        values = _as_numbers(raw)
    bad = rule.bad(values)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise TraceError(f"{where(k)}: {_problem(column, raw.iloc[k], rule.allowed)}")
    return values


def _arrival_seconds(raw: pd.Series, column: str, unit: TimeUnit, where: Callable[[int], str],
                     line_of: Callable[[int], int]) -> np.ndarray:
    """Seconds relative to the earliest request; numeric (in `unit`) or date-time strings, by the first value."""
    numeric = _is_number(raw.iloc[0]) or pd.notna(pd.to_numeric(raw.iloc[:1], errors="coerce").iloc[0])
    if numeric:
        values = _checked(raw, column, _time_range(unit), where)
        # Subtract before scaling: absolute epoch times keep their sub-millisecond digits.
        return (values - values.min()) * _SECONDS_PER_UNIT[unit]
    stamps = _datetimes(raw, column, where, line_of)
    values = stamps.to_numpy()  # datetime64 in pandas' unit for these strings; NaT where unparsed
    with np.errstate(invalid="ignore"):
        bad = np.isnat(values) | (values < FIRST_TRACE_DATE) | (values >= LAST_TRACE_DATE)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        expected = (f"a date-time from {FIRST_TRACE_DATE} to {LAST_TRACE_DATE} like {_DATE_EXAMPLE}, "
                    "with a UTC offset (+01:00, Z) on every line or on none")
        raise TraceError(f"{where(k)}: {_problem(column, raw.iloc[k], expected)}")
    nanoseconds = values.astype("datetime64[ns]").astype(np.int64)
    return (nanoseconds - nanoseconds.min()) / 1e9


def _datetimes(raw: pd.Series, column: str, where: Callable[[int], str], line_of: Callable[[int], int]) -> pd.Series:
    """Date-time strings on one timeline, as naive UTC where they carry UTC offsets.

    Offsets that differ from line to line (a trace merged from two zones, or across a daylight-saving change)
    are converted to UTC. Offsets on some lines and none on others are refused: a time without an offset has no
    place on the others' timeline."""
    try:
        stamps = pd.to_datetime(raw, format="ISO8601", errors="coerce")
    except (ValueError, TypeError, OverflowError):
        # pandas refuses a column with different offsets (or offsets and none); find out which it is.
        stamps = pd.to_datetime(raw, format="ISO8601", errors="coerce", utc=True)
        first = None
        for k in np.flatnonzero(stamps.notna().to_numpy()):
            aware = _has_offset(raw.iloc[k])
            if aware is None:
                continue
            if first is None:
                first = (int(k), aware)
            elif aware != first[1]:
                one, other = (("has a UTC offset", "has none") if aware else ("has no UTC offset", "has one"))
                raise TraceError(
                    f"{where(int(k))}: {column}={_clip(raw.iloc[k])} {one}, but line {line_of(first[0])} "
                    f"({_clip(raw.iloc[first[0]])}) {other}; allowed: a UTC offset on every timestamp "
                    "(converted to UTC) or on none")
    if stamps.dt.tz is not None:
        stamps = stamps.dt.tz_convert(None)
    return stamps


def _has_offset(value: object) -> bool | None:
    """Whether one date-time string carries a UTC offset; None where it is not one."""
    if not isinstance(value, str):
        return None
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError, OverflowError):
        return None
    return None if pd.isna(stamp) else stamp.tzinfo is not None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


_INT64_MIN, _INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)


def _within(value: object, rule: _Range) -> bool:
    """One value (a JSON record's) against a column's rule, as `_checked` judges a whole column."""
    if not _is_number(value):
        return False
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float64
        return False
    return not rule.bad(np.array([number]))[0]


def _problem(column: str, value: object, expected: str) -> str:
    """`column=value is not allowed; allowed: expected` (or `column is missing; ...`): the cell as read."""
    if value is None or (not isinstance(value, (list, dict, str)) and bool(pd.isna(value))):
        return f"{column} is missing; allowed: {expected}"
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)  # 374.0 read from a CSV column with blanks was written 374
    return f"{column}={_clip(value)} is not allowed; allowed: {expected}"


def _clip(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
