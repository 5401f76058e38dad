"""The all-reduce of a part priced from another GPU's measured rows (`sim.cost.measured.allreduce_on_links`): each
row's time past the fastest row of its GPU count scaled by the ratio of the two GPUs' catalog link rates. The H800
and A800 take it from their twins' rows (the same silicon with slower NVLink), where no table measured them; nothing
measured them, so this checks the rule where both sides were measured: every pair of GPUs that shipped all-reduce
tables and talk over NVLink, one predicted from the other's rows, against its own.

Both backends (the engine's custom kernel under CUDA graphs, eager), every measured GPU count both hold and every
message size. Reported per pair: the median ratio predicted / measured and the mean |log error|, over every message
and over a decode step's messages (at most 1,048,576 elements: 128 sequences of an 8,192-wide model); beside them the
rows taken as they are (no stretch). Pairs of one silicon (the GB200 and the B200) or one link rate (the H200 and
the H100) have a stretch of 1 and only say how far the silicon alone moves the rows. Nothing is fitted: the link
rates are the catalog's datasheet figures, the rule was written before this check was run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_link_stretch.py
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sim.cost.measured import MEASURED_DIR, allreduce_on_links, measured_gpus
from sim.model.catalog import GPUS
from sim.model.interconnects import interconnect_class

DECODE_ELEMENTS = 128 * 8192


def _rows(gpu: str) -> pd.DataFrame | None:
    path = MEASURED_DIR / gpu / "allreduce.parquet"
    return pd.read_parquet(path) if path.is_file() else None


def _errors(predicted: pd.DataFrame, measured: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(log error of every row both hold, whether it is a decode-sized message)."""
    keys = ["backend", "num_gpus", "message_elements"]
    both = predicted.merge(measured, on=keys, suffixes=("_p", "_m"))
    log_error = np.log(both["latency_ms_p"].to_numpy() / both["latency_ms_m"].to_numpy())
    return log_error, both["message_elements"].to_numpy() <= DECODE_ELEMENTS


def _summary(log_error: np.ndarray) -> str:
    return f"{math.exp(float(np.median(log_error))):.2f}x ({float(np.mean(np.abs(log_error))):.2f})"


def main() -> None:
    nvlink = [g for g in measured_gpus() if _rows(g) is not None and interconnect_class(GPUS[g]) == "nvlink"]
    print("| from -> to | stretch | every message | decode messages | as measured, every / decode |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for source in nvlink:
        for target in nvlink:
            if source == target:
                continue
            stretch = GPUS[source].interconnect_bytes_per_s / GPUS[target].interconnect_bytes_per_s
            # (each backend's fastest row its own)
            predicted = pd.concat(allreduce_on_links(rows, stretch) for _, rows in _rows(source).groupby("backend"))
            stretched, decode = _errors(predicted, _rows(target))
            plain, _ = _errors(_rows(source), _rows(target))
            print(f"| {source} -> {target} | {stretch:g} | {_summary(stretched)} | {_summary(stretched[decode])} | "
                  f"{_summary(plain)} / {_summary(plain[decode])} |")


if __name__ == "__main__":
    main()
