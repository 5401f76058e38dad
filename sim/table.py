"""Columns of equal length held as numpy arrays: what the summary is computed from.

A pandas operation costs tens of microseconds whatever its size, and a summary takes about a hundred of them:
~20 ms a run, more than the compiled core needs to simulate a planner's probe (issue 15). The summary therefore
reads `Table`s, and the request and step DataFrames a user sees are built from the same arrays only when asked
for (`sim.results.Result`). A DataFrame given to the summary functions (tests, read-back files) is turned into
a Table first (`as_table`), so both give the same numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Table:
    """Named columns of one length. `table[name]` is a column (the array itself, not a copy);
    `table[mask]` or `table[indices]` the selected rows of every column, as a new Table (a mask that keeps every
    row gives the same arrays: a Table's columns are never written in place)."""

    __slots__ = ("columns", "num_rows")

    def __init__(self, columns: dict[str, np.ndarray], num_rows: int | None = None):
        self.columns = columns
        lengths = {len(c) for c in columns.values()}
        if num_rows is None:
            num_rows = lengths.pop() if lengths else 0
        if lengths - {num_rows}:
            raise ValueError(f"Table columns of different lengths: {sorted(lengths)} (expected {num_rows})")
        self.num_rows = num_rows

    def __len__(self) -> int:
        return self.num_rows

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def __getitem__(self, key: Any):
        if isinstance(key, str):
            return self.columns[key]
        rows = np.asarray(key)
        num_rows = int(rows.sum()) if rows.dtype == bool else len(rows)
        if rows.dtype == bool and num_rows == self.num_rows == len(rows):
            # Every row (every request finished): the columns as they are, not a copy of each (0.3 s at 1M requests)
            return Table(dict(self.columns), num_rows)
        return Table({name: column[rows] for name, column in self.columns.items()}, num_rows)

    def __setitem__(self, name: str, column: np.ndarray) -> None:
        if len(column) != self.num_rows:
            raise ValueError(f"Table column {name!r}: {len(column)} rows, the table has {self.num_rows}")
        self.columns[name] = column


def as_table(frame, codes: dict[str, dict[str, int]] | None = None) -> Table:
    """`frame` as a Table: a Table as it is; a DataFrame's columns as numpy arrays, each categorical or string
    column named in `codes` as the integer codes that mapping gives its values."""
    if isinstance(frame, Table):
        return frame
    columns = {}
    for name in frame.columns:
        column = frame[name]
        if codes and name in codes:
            columns[name] = column.astype(object).map(codes[name]).to_numpy(dtype=np.int64)
        else:
            columns[name] = column.to_numpy()
    return Table(columns, len(frame))
