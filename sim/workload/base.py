"""The base of every workload section: strict (unknown keys refused) and frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # inf and nan are never a setting
