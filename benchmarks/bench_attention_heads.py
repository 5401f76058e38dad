"""Decode attention at head configurations the tables did not measure: how the measured model carries rows over.

A model whose heads per GPU (query heads / KV heads / head size) the engine's tables did not measure takes the
nearest measured configuration's rows (sim/cost/measured.py `_select_heads`). Decode attention reads the KV cache,
so the measured model takes those rows at the context that reads as many KV bytes per sequence
(`decode_rows_for_heads`, since 12-03 15:40); before, it took their ratio to the measured configuration's roofline
and applied it to the model's, which scales a launch-bound time (a short context, a small batch) by the bytes too.

Held out: every configuration a GPU's tables measured (bf16 KV) is predicted from the nearest other one, by both
rules, at every one of its own rows; |log(predicted / measured)|. Nothing is fitted. Shipped tables only:

    PYTHONPATH=. .venv/bin/python benchmarks/bench_attention_heads.py
"""

from __future__ import annotations

import math
import sys
from collections import Counter

import pandas as pd

from sim.cost import measured_kernel
from sim.cost.measured import (
    Grid2D,
    Shape,
    decode_rows_for_heads,
    device_roofline,
    heads_rows,
    load_tables,
    measured_gpus,
    nearest_heads,
    tables_dir,
)

HEADS = ["num_heads", "num_kv_heads", "head_dim"]


def held_out(gen: pd.DataFrame, roof) -> pd.DataFrame:
    """Per measured configuration and row: the log error of each rule, predicting it from the nearest other one."""
    configs = sorted(set(map(tuple, gen[HEADS].to_numpy())))
    out = []
    for h in configs:
        others = gen.drop(heads_rows(gen, h).index)
        if others.empty:
            continue
        near = nearest_heads(others, *h)  # the measured model's own choice, this configuration left out
        rows, mine = heads_rows(gen, near), heads_rows(gen, h)

        def shape(c: tuple) -> Shape:
            return Shape(measured_kernel.SHAPE_DECODE, (*c, 2), roof)
        by_ratio = Grid2D(rows, "batch_size", "kv_tokens", shape(near), "ratio", Counter())
        by_ratio.shape = shape(h)
        by_bytes = Grid2D(decode_rows_for_heads(rows, h[1], h[2]), "batch_size", "kv_tokens", shape(h), "bytes",
                          Counter())
        differs = (near[1], near[2]) != (h[1], h[2])
        for r in mine.itertuples():
            t = r.latency_ms * 1e-3
            out.append({"differs": differs, "batch": r.batch_size,
                        "bytes": math.log(by_bytes(r.batch_size, r.kv_tokens) / t),
                        "ratio": math.log(by_ratio(r.batch_size, r.kv_tokens) / t)})
    return pd.DataFrame(out)


def main() -> int:
    print("Decode attention (bf16 KV) of each measured head configuration predicted from the nearest other one: "
          "median / p90 |log(predicted / measured)|, KV bytes matched (now) against the roofline ratio (before)")
    print("| GPU | tables | rows | all: now | all: before | KV heads or size differ: rows | now | before | "
          "batch <= 8: now | before | batch >= 64: now | before |")
    print("| --- | --- | ---: | --- | --- | ---: | --- | --- | --- | --- | --- | --- |")

    def cell(err: pd.Series) -> str:
        return f"{err.abs().median():.3f} / {err.abs().quantile(0.9):.3f}" if len(err) else "-"
    for gpu in measured_gpus():
        for framework in ("vllm", "sglang", "trtllm"):
            folder = tables_dir(gpu, framework)
            if not (folder / "meta.json").is_file():
                continue
            t = load_tables(folder)
            d = held_out(t.generation[t.generation["kv_dtype"] == "bf16"], device_roofline(t.gemm))
            if d.empty:
                continue
            diff = d[d["differs"]]
            small, large = diff[diff["batch"] <= 8], diff[diff["batch"] >= 64]
            print(f"| {gpu} | {framework} | {len(d)} | {cell(d['bytes'])} | {cell(d['ratio'])} | {len(diff)} | "
                  f"{cell(diff['bytes'])} | {cell(diff['ratio'])} | {cell(small['bytes'])} | {cell(small['ratio'])} | "
                  f"{cell(large['bytes'])} | {cell(large['ratio'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
