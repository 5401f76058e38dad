"""How well a profile predicts shapes it did not use: hold out grid values, interpolate from the
rest, compare with what was measured there.

Along each axis of an op, every k-th interior grid value (index 1, 1+k, 1+2k, ...) is held out with
all its points; the grid's edges stay, so this measures interpolation, the way a simulation uses
the profile between its measured shapes. (The roofline shape's launch cost is taken from all of an
op's points; it is the smallest measured-minus-roofline gap, which sits at the smallest shapes, the
grid edge that is never held out.)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from sim.cost.calibrated import Interpolator, OpTable, Profile


def _held_values(values: np.ndarray, every: int) -> list:
    return [v for i, v in enumerate(values) if 0 < i < len(values) - 1 and i % every == 1 % every]


def held_out_errors(table: OpTable, every: int = 3) -> list[float]:
    """Absolute relative errors of the held-out points of one op."""
    errors: list[float] = []
    for axis in table.axes:
        values = np.sort(table.points[axis].unique())
        for held in _held_values(values, every):
            train = table.points[table.points[axis] != held]
            test = table.points[table.points[axis] == held]
            predict = Interpolator(table, train)
            for _, row in test.iterrows():
                predicted = predict(*(float(row[a]) for a in table.axes))
                errors.append(abs(predicted - row["median_s"]) / row["median_s"])
    return errors


def fit_report(profile: Profile, every: int = 3) -> pd.DataFrame:
    rows = []
    for name, table in profile.tables.items():
        errors = held_out_errors(table, every)
        spread = (table.points["p80_s"] - table.points["p20_s"]) / table.points["median_s"]
        rows.append({
            "op": name,
            "points": len(table.points),
            "held_out": len(errors),
            "median_ape_pct": 100 * float(np.median(errors)) if errors else float("nan"),
            "max_ape_pct": 100 * float(np.max(errors)) if errors else float("nan"),
            # Timing noise: the measured p20-p80 spread relative to the median, for comparison.
            "noise_p20_p80_pct": 100 * float(spread.median()),
        })
    return pd.DataFrame(rows)
