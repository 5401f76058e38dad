"""Sliding-window attention: the measured model's price from full-attention rows against AIConfigurator's window rows.

Since 12-03 (sixty-seventh session) the measured model prices a sliding-window layer from the engine's own window
rows where its tables measured the model's window (calibrate/aic_import.py keeps them apart,
`*_window_attention.parquet`; sim/cost/measured_kernel.py `_layer_attention` with them). Where they did not (the
A100's tables, which measured no window; a window the tables lack) it prices the layer from the full-attention rows
(`_layer_attention` with the window): a prefill chunk longer than the window as a batch of fresh prompts two windows
long, one per window the chunk spans, at that batch's time per query-key pair, times the chunk's windowed pairs
(`windowed_chunks`; before 12-03 full causal attention over the chunk), and a decode as full attention at the
context the window caps. This checks that fallback against the window rows of every GPU whose vLLM tables measured
them:

- prefill: every shape measured with a window and the full-attention rows the estimate needs (batch 1, a prompt
  longer than two windows, bf16 KV; the batch-of-windows rows at batch prompt / window and two windows' length, both
  measured exactly, so nothing is interpolated);
- decode: every window row at a context past the window (bf16 KV) against the full-attention row of its batch and
  heads at the window's own context (AIConfigurator's step window - 1: the window's tokens, the new one included).

Nothing is fitted: the rows it checks against are not the rows it prices from.

Needs aiconfigurator-core 0.12.0 on the path (`pip install aiconfigurator-core==0.12.0`, or its wheel unpacked on
PYTHONPATH):

    PYTHONPATH=.:/path/to/unpacked/wheel .venv/bin/python benchmarks/bench_window_attention.py
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import yaml

from calibrate.aic_import import FRAMEWORK, SYSTEMS, installed_systems_root
from sim.cost.measured_kernel import windowed_chunks

HEADS = ["num_heads", "num_key_value_heads", "head_dim"]


def compare(rows: pd.DataFrame) -> pd.DataFrame:
    """Per window-row shape: measured, the batch-of-windows estimate, and full causal attention over the prompt."""
    rows = rows[rows["kv_cache_dtype"] == "bfloat16"]
    full = rows[rows["window_size"] == 0].groupby(["batch_size", "isl", *HEADS])["latency"].median()
    windowed = rows[(rows["window_size"] > 0) & (rows["batch_size"] == 1)]
    windowed = windowed.groupby(["window_size", "isl", *HEADS])["latency"].median()
    out = []
    for (window, isl, *heads), measured in windowed.items():
        if isl <= 2 * window or isl % window:
            continue
        blocks, span, factor = windowed_chunks(1.0, float(isl), 0.0, float(window))  # one fresh prompt
        block, whole = full.get((int(blocks), int(span), *heads)), full.get((1, isl, *heads))
        if block is None or whole is None:
            continue
        out.append({"window": window, "isl": isl, "measured": measured, "estimate": block * factor, "full": whole})
    return pd.DataFrame(out)


def compare_decode(rows: pd.DataFrame) -> pd.DataFrame:
    """Per decode window-row shape past the window: measured, and the full-attention row at the window's context."""
    rows = rows[rows["kv_cache_dtype"] == "bfloat16"]
    full = rows[rows["window_size"] == 0].groupby(["batch_size", "step", *HEADS])["latency"].median()
    windowed = rows[(rows["window_size"] > 0) & (rows["step"] >= rows["window_size"])]
    windowed = windowed.groupby(["window_size", "batch_size", "step", *HEADS])["latency"].median()
    out = []
    for (window, batch, step, *heads), measured in windowed.items():
        capped = full.get((batch, window - 1, *heads))
        if capped is not None:
            out.append({"window": window, "batch": batch, "context": step + 1, "measured": measured,
                        "capped": capped})
    return pd.DataFrame(out)


def main() -> int:
    systems = installed_systems_root()
    if systems is None:
        return 2
    versions = yaml.safe_load((systems / "query_versions.yaml").read_text())
    print("AIConfigurator's vLLM attention rows with a sliding window (bf16 KV) against the measured model's price "
          "from the full-attention rows, its fallback: |log(price / measured)|, median and p90")
    for gpu, system in SYSTEMS.items():
        version = (versions.get("overrides", {}).get(system, {}).get(FRAMEWORK, {}).get("current")
                   or versions["defaults"][FRAMEWORK]["current"])
        path = systems / "data" / system / "attention" / FRAMEWORK / version / "context_attention_perf.parquet"
        if not path.is_file():
            continue
        rows = pd.read_parquet(path)
        if "window_size" not in rows.columns:
            print(f"  {gpu} (vLLM {version}): no window rows")
            continue
        table = compare(rows)
        if table.empty:
            print(f"  {gpu} (vLLM {version}): no window rows with the full-attention rows the estimate needs")
            continue
        for name in ("estimate", "full"):
            err = np.log(table[name] / table["measured"])
            label = "batch of windows (now)" if name == "estimate" else "full causal (before)"
            print(f"  {gpu} (vLLM {version}), {label}: {len(table)} shapes, median |log| {err.abs().median():.3f}, "
                  f"p90 {err.abs().quantile(0.9):.3f}, median signed {err.median():+.3f}")
        by_isl = table.assign(now=table["estimate"] / table["measured"], before=table["full"] / table["measured"])
        print("    price / measured by prompt length (median over shapes and windows):\n"
              + by_isl.groupby("isl")[["now", "before"]].median().round(2).T.to_string())
        gen_path = path.with_name("generation_attention_perf.parquet")
        decode = compare_decode(pd.read_parquet(gen_path)) if gen_path.is_file() else pd.DataFrame()
        if decode.empty:
            continue
        err = np.log(decode["capped"] / decode["measured"])
        print(f"  {gpu} (vLLM {version}), decode at the capped context: {len(decode)} shapes, median |log| "
              f"{err.abs().median():.3f}, p90 {err.abs().quantile(0.9):.3f}, median signed {err.median():+.3f}; "
              "price / measured by window: " + ", ".join(
                  f"{w:,} {r:.2f}" for w, r in (decode["capped"] / decode["measured"]).groupby(decode["window"])
                  .median().items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
