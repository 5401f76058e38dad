"""What a trace cell may hold (issue 28): every numeric column through one range check, time zones on one
timeline. A bad cell is one TraceError line naming the file, the line, the column, the value and what is
allowed; a good one is read exactly, never cast, wrapped or clipped on the way in."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.errors import TraceError
from sim.workload.traces import (
    FIRST_TRACE_DATE,
    LAST_TRACE_DATE,
    MAX_TRACE_TIME_S,
    MAX_TRACE_TOKENS,
    load_table,
    load_trace,
)

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
MOONCAKE_OK = {"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
FILES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def refusal(path: Path, **kwargs) -> str:
    with pytest.raises(TraceError) as err:
        load_trace(path, **kwargs)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"workload.arrival.path: '{path}' line "), message
    return message


# --------------------------------------------------------------------------------------------------
# Time zones


def test_different_utc_offsets_are_put_on_one_utc_timeline(tmp_path):
    # 18:15:46Z, 19:15:47+01:00 (= 18:15:47Z), 13:15:49-05:00 (= 18:15:49Z), 18:16:46.5+00:00
    rows = ["2023-11-16 18:15:46Z,10,1", "2023-11-16 19:15:47+01:00,11,2", "2023-11-16T13:15:49-05:00,12,3",
            "2023-11-16 18:16:46.5+00:00,13,4"]
    trace = load_trace(write(tmp_path, "zones.csv", AZURE_HEADER + "\n".join(rows) + "\n"))
    np.testing.assert_allclose(trace.arrival_s, [0.0, 1.0, 3.0, 60.5])
    np.testing.assert_array_equal(trace.input_tokens, [10, 11, 12, 13])


def test_offsets_put_requests_in_utc_order(tmp_path):
    # Written in file order 18:00+01:00 (17:00Z) after 17:30Z: the later line arrived first.
    rows = ["2023-11-16 17:30:00Z,1,1", "2023-11-16 18:00:00+01:00,2,1"]
    trace = load_trace(write(tmp_path, "order.csv", AZURE_HEADER + "\n".join(rows) + "\n"))
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 1800.0])
    np.testing.assert_array_equal(trace.input_tokens, [2, 1])


@pytest.mark.parametrize("rows, line, kinds", [
    (["2023-11-16 18:15:46,1,1", "2023-11-16 18:15:47+01:00,1,1"], 3,
     ("TIMESTAMP='2023-11-16 18:15:47+01:00' has a UTC offset", "line 2 ('2023-11-16 18:15:46') has none")),
    (["2023-11-16 18:15:46Z,1,1", "2023-11-16 18:15:47+01:00,1,1", "2023-11-16 18:15:48,1,1"], 4,
     ("TIMESTAMP='2023-11-16 18:15:48' has no UTC offset", "line 2 ('2023-11-16 18:15:46Z') has one")),
])
def test_offsets_on_some_lines_and_none_on_others_are_refused_in_one_line(tmp_path, rows, line, kinds):
    path = write(tmp_path, "mixed.csv", AZURE_HEADER + "\n".join(rows) + "\n")
    message = refusal(path)
    assert f"line {line}: " in message
    for words in kinds:
        assert words in message, message
    assert "allowed: a UTC offset on every timestamp (converted to UTC) or on none" in message


def test_jsonl_date_times_follow_the_same_rules(tmp_path):
    columns = {"arrival": "t", "input": "i", "output": "o"}
    lines = [{"t": "2023-11-16T18:00:00+02:00", "i": 5, "o": 1}, {"t": "2023-11-16T16:00:02Z", "i": 6, "o": 1}]
    good = write(tmp_path, "z.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    np.testing.assert_array_equal(load_trace(good, columns=columns).arrival_s, [0.0, 2.0])
    lines.append({"t": "2023-11-16T16:00:03", "i": 7, "o": 1})
    bad = write(tmp_path, "m.jsonl", "".join(json.dumps(r) + "\n" for r in lines))
    assert "line 3: t='2023-11-16T16:00:03' has no UTC offset" in refusal(bad, columns=columns)


ZONES = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))


@FILES
@given(offsets_s=st.lists(st.floats(0, 30 * 86400, allow_nan=False), min_size=1, max_size=25),
       zones=st.lists(ZONES, min_size=25, max_size=25), separator=st.sampled_from([" ", "T"]))
def test_any_mix_of_offsets_gives_the_utc_gaps(tmp_path, offsets_s, zones, separator):
    start = datetime(2023, 11, 16, 18, 15, 46, tzinfo=timezone.utc)
    utc = [start + timedelta(microseconds=round(s * 1e6)) for s in offsets_s]
    text = "".join(f"{t.astimezone(z).isoformat(sep=separator)},{i + 1},1\n"
                   for i, (t, z) in enumerate(zip(utc, zones)))
    trace = load_trace(write(tmp_path, "h.csv", AZURE_HEADER + text))
    expected = np.array(sorted((t - min(utc)).total_seconds() for t in utc))
    np.testing.assert_allclose(trace.arrival_s, expected, atol=1e-6)


@FILES
@given(aware=st.lists(st.booleans(), min_size=2, max_size=20).filter(lambda a: len(set(a)) == 2), zone=ZONES)
def test_any_mix_of_naive_and_offset_times_is_refused_at_the_first_change(tmp_path, aware, zone):
    t = datetime(2023, 11, 16, 18, 15, 46)
    text = "".join(f"{(t.replace(tzinfo=zone) if a else t).isoformat(sep=' ')},1,1\n" for a in aware)
    message = refusal(write(tmp_path, "n.csv", AZURE_HEADER + text))
    first_change = aware.index(not aware[0])
    assert f"line {first_change + 2}: TIMESTAMP=" in message
    assert ("has a UTC offset" if aware[first_change] else "has no UTC offset") in message
    assert "line 2 (" in message


# --------------------------------------------------------------------------------------------------
# Numeric cells


@pytest.mark.parametrize("cell, column, shown", [
    ("1e20", "ContextTokens", "ContextTokens=1e+20"),
    ("123456789012345678901234567890", "ContextTokens", "ContextTokens=123456789012345678901234567890"),
    (str(MAX_TRACE_TOKENS + 1), "ContextTokens", f"ContextTokens={MAX_TRACE_TOKENS + 1}"),
    ("-1", "ContextTokens", "ContextTokens=-1"),
    ("12.5", "ContextTokens", "ContextTokens=12.5"),
    ("inf", "ContextTokens", "ContextTokens=inf"),
    ("-inf", "GeneratedTokens", "GeneratedTokens=-inf"),
    ("1e300", "GeneratedTokens", "GeneratedTokens=1e+300"),
])
def test_a_token_count_out_of_range_names_file_line_column_value_and_range(tmp_path, cell, column, shown):
    good = "2023-11-16 18:15:46,374,44\n"
    row = "2023-11-16 18:15:47,{},9\n".format(cell) if column == "ContextTokens" else f"2023-11-16 18:15:47,9,{cell}\n"
    message = refusal(write(tmp_path, "t.csv", AZURE_HEADER + good + row))
    assert "line 3: " in message and shown in message, message
    assert f"allowed: a whole number from 0 to {MAX_TRACE_TOKENS:,}" in message


def test_the_largest_count_is_read_exactly(tmp_path):
    path = write(tmp_path, "max.csv", AZURE_HEADER + f"2023-11-16 18:15:46,{MAX_TRACE_TOKENS},0\n")
    trace = load_trace(path)
    assert trace.input_tokens[0] == MAX_TRACE_TOKENS and trace.input_tokens.dtype == np.int64


@pytest.mark.parametrize("cell, shown", [("1e300", "t=1e+300"), ("-1e300", "t=-1e+300"), ("inf", "t=inf"),
                                         (f"{MAX_TRACE_TIME_S * 1.5:g}", "t=15000000000")])
def test_a_numeric_time_out_of_range_is_refused(tmp_path, cell, shown):
    path = write(tmp_path, "t.csv", f"t,i,o\n0,5,1\n{cell},5,1\n")
    message = refusal(path, columns={"arrival": "t", "input": "i", "output": "o"})
    assert "line 3: " in message and shown in message
    assert "allowed: a number from -1e+10 to 1e+10 (in s" in message


def test_a_millisecond_clock_has_its_range_in_milliseconds(tmp_path):
    path = write(tmp_path, "ms.csv", "t,i,o\n1700000000000,5,1\n1700000001500,5,1\n")  # epoch ms: fine
    trace = load_trace(path, columns={"arrival": "t", "input": "i", "output": "o", "time_unit": "ms"})
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 1.5])
    bad = write(tmp_path, "us.csv", "t,i,o\n1700000000000000000,5,1\n1700000000000000001,5,1\n")  # ns as ms
    message = refusal(bad, columns={"arrival": "t", "input": "i", "output": "o", "time_unit": "ms"})
    assert "line 2: t=1700000000000000000" in message and "-1e+13 to 1e+13 (in ms" in message


@pytest.mark.parametrize("stamp", ["9999-12-31 18:15:46", "0001-01-01 00:00:00", "1600-01-01 00:00:00"])
def test_a_date_beyond_the_range_is_refused_not_wrapped(tmp_path, stamp):
    # pandas parses these in coarse units; converted to nanoseconds they used to wrap to a wrong, finite span.
    path = write(tmp_path, "d.csv", AZURE_HEADER + f"2023-11-16 18:15:46,1,1\n{stamp},1,1\n")
    message = refusal(path)
    assert f"line 3: TIMESTAMP='{stamp}'" in message
    assert f"from {FIRST_TRACE_DATE} to {LAST_TRACE_DATE}" in message


@pytest.mark.parametrize("field, value, shown", [
    ("input_length", "1e20", "input_length=1e+20"),
    ("input_length", "1" + "0" * 30, "input_length=1e+30"),
    ("input_length", "Infinity", "input_length=inf"),
    ("output_length", "-3", "output_length=-3"),
    ("output_length", "2.5", "output_length=2.5"),
    ("timestamp", "1e300", "timestamp=1e+300"),
])
def test_jsonl_cells_pass_the_same_check(tmp_path, field, value, shown):
    bad = json.dumps(MOONCAKE_OK).replace(f'"{field}": {MOONCAKE_OK[field]}', f'"{field}": {value}')
    path = write(tmp_path, "m.jsonl", json.dumps(MOONCAKE_OK) + "\n" + bad + "\n")
    message = refusal(path)
    assert "line 2: " in message and shown in message, message
    assert "allowed: " in message


def test_a_hash_id_beyond_int64_is_refused_on_its_line(tmp_path):
    bad = {**MOONCAKE_OK, "hash_ids": [1, 2 ** 70]}
    path = write(tmp_path, "h.jsonl", json.dumps(MOONCAKE_OK) + "\n" + json.dumps(bad) + "\n")
    assert "line 2: hash_ids must be a list of integers from" in refusal(path)


# Cell texts: numbers of every size and sign as written by people and programs, and things that are no number.
NUMBERS = st.one_of(
    st.integers(-(10 ** 30), 10 ** 30).map(str),
    st.integers(0, MAX_TRACE_TOKENS + 2).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(-1e12, 1e12).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e20", "1e300", "-0.0", "16777216.0", "16777217", "1e10", "-1e10",
                     "10000000000.5", "x", "12x", " ", "0x10"]),
)


def meaning(text: str) -> float | None:
    """What a cell's text means as a number (None: not a number, or missing)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


@FILES
@given(cell=NUMBERS, row=st.integers(0, 4), column=st.sampled_from(["t", "i", "o"]))
def test_any_damaged_cell_is_read_exactly_or_refused_on_its_line(tmp_path, cell, row, column):
    rows = [{"t": str(10 * k), "i": str(100 + k), "o": str(k)} for k in range(5)]
    rows[row][column] = cell
    path = write(tmp_path, "d.csv", "t,i,o\n" + "".join(f"{r['t']},{r['i']},{r['o']}\n" for r in rows))
    value = meaning(cell)
    if column == "t":
        valid = value is not None and abs(value) <= MAX_TRACE_TIME_S
    else:
        valid = value is not None and 0 <= value <= MAX_TRACE_TOKENS and value == int(value)
    if row == 0 and column == "t" and value is None:
        valid = False  # the first arrival decides numbers or date-times; text there is a date-time that fails
    try:
        trace = load_table(path, arrival_column="t", input_column="i", output_column="o")
    except TraceError as err:
        message = str(err)
        assert not valid, message
        assert "\n" not in message and f"'{path}' line {row + 2}: {column}" in message, message
        assert "allowed: " in message
        return
    assert valid, (cell, row, column)
    if column == "t":
        times = [value if k == row else 10.0 * k for k in range(5)]
        np.testing.assert_allclose(np.sort(trace.arrival_s), np.sort(np.array(times) - min(times)), rtol=1e-12)
    else:
        read = trace.input_tokens if column == "i" else trace.output_tokens
        assert int(value) in read.tolist() and read.dtype == np.int64 and read.min() >= 0


JSON_VALUES = st.one_of(st.integers(-(10 ** 25), 10 ** 25), st.integers(0, MAX_TRACE_TOKENS + 2),
                        st.floats(allow_nan=False, allow_infinity=False), st.floats(-1e12, 1e12),
                        st.sampled_from([1e20, 1e300, -0.0, 16777216.0, 2.5]))


@FILES
@given(value=JSON_VALUES, row=st.integers(0, 3), field=st.sampled_from(["timestamp", "input_length", "output_length"]))
def test_any_damaged_json_number_is_read_exactly_or_refused_on_its_line(tmp_path, value, row, field):
    records = [{**MOONCAKE_OK, "timestamp": 1000 * k} for k in range(4)]
    records[row][field] = value
    path = write(tmp_path, "d.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    number = float(value)
    if field == "timestamp":
        valid = abs(number) <= MAX_TRACE_TIME_S * 1e3  # Mooncake times are in ms
    else:
        valid = 0 <= number <= MAX_TRACE_TOKENS and number == int(number)
    try:
        trace = load_trace(path)
    except TraceError as err:
        message = str(err)
        assert not valid, message
        assert "\n" not in message and f"'{path}' line {row + 1}: {field}" in message, message
        return
    assert valid, (value, row, field)
    if field != "timestamp":
        read = trace.input_tokens if field == "input_length" else trace.output_tokens
        assert int(number) in read.tolist()
