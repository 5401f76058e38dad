"""How many replications a band of a given level needs (issue 31): the arithmetic the schema checks `run.band`
with and `sim.bands` draws by (its docstring says why these numbers)."""

from __future__ import annotations

import math

MIN_REPLICATIONS = 19  # a distribution-free 90% band (the default level) needs 19; see the docstring
MAX_REPLICATIONS = 199  # a 99% band; RunSpec.band_replications' bound


def replications_for(level_pct: float, asked: int | None = None) -> int:
    """R for a band of `level_pct` percent: `asked`, or the fewest that bound the level (at least 19)."""
    return max(MIN_REPLICATIONS, _needed(level_pct)) if asked is None else asked


def _needed(level_pct: float) -> int:
    """The fewest replications whose outermost two bound a band of `level_pct` (rounded: 2 / 0.1 is 20.000000000000004)."""
    return math.ceil(round(2 / (1 - level_pct / 100) - 1, 9))


def order_index(level_pct: float, replications: int) -> int:
    """k: the band is the k-th smallest and k-th largest of `replications` values (0 when too few)."""
    return int(math.floor((replications + 1) * (1 - level_pct / 100) / 2 + 1e-9))


def check_band_size(level_pct: float, replications: int | None) -> None:
    """ValueError (the schema turns it into a one-line error) when the level needs more replications than
    allowed or given."""
    need = _needed(level_pct)
    if replications is None and need > MAX_REPLICATIONS:
        raise ValueError(f"band: {level_pct:g} needs {need} replications, over the {MAX_REPLICATIONS} allowed; "
                         "allowed: a level in (0, 99]")
    if replications is not None and order_index(level_pct, replications) < 1:
        raise ValueError(f"band_replications: {replications} is too few for a {level_pct:g}% band; allowed: at "
                         f"least {need}")
