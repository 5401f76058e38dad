"""The base of every workload section: strict (unknown keys refused) and frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# The most requests one run may simulate: ten times the largest shipped benchmark (benchmarks/bench_engine.py,
# 1,000,000 requests: 5.5 s and 1.6 GB peak memory, benchmarks/RESULTS.md), so about a minute and 16 GB at
# the limit. A count beyond it (1e10, or a duration of 1e9 s at a few req/s) would exhaust memory first.
MAX_NUM_REQUESTS = 10_000_000


class StrictSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # inf and nan are never a setting
