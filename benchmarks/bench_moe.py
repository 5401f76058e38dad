"""How ServeSim prices a mixture-of-experts layer the measured tables do not hold, against the fused-MoE times they do.

AIConfigurator's tables hold fused-MoE kernels measured for some configurations (hidden size, intermediate size,
top-k, experts, TP, EP) per dtype. A model outside them is priced one of two ways (sim/cost/measured.py):

- the tables hold fused-MoE rows of its dtype: the nearest measured configuration's ratio to the fused-MoE roofline,
  at the token count that gives this model's touched experts as many tokens each, applied to this model's roofline
  (`nearest_moe_config`, `carried_moe_curve`; at the same token count before 12-03, shown beside it);
- they hold none: the experts' GEMM rows, run as one fused kernel (`measured_kernel.fused_experts_s`: one launch,
  each further expert its GEMM time above a launch, never under its roofline).

Held out one configuration at a time, each is predicted for every measured token count, and compared with the
measured fused time; beside them, what the GEMM rows give when each expert is its own launch (before 11-28) and
when each further expert costs its roofline alone. The same held out for the skewed-routing rows (power law 1.01 and
1.2, `cost_model.moe_routing`), beside those rows predicted from the same configuration's balanced ones (how much
routing moves a kernel). Nothing is fitted.

Where aiconfigurator-core 0.12.0 is on the path (`pip install aiconfigurator-core==0.12.0`, or its wheel unpacked on
PYTHONPATH), also the rows vLLM's A100 tables borrow (calibrate/aic_import.py `MOE_BORROWED`): vLLM's Marlin MXFP4
fused-MoE rows, on every GPU where AIConfigurator measured them (H100, H200, L40S: at gpt-oss's own shapes on the
L40S), predicted from SGLang's Marlin MoE rows with int4 weights on the same GPU, the nearest configuration scaled by
the MXFP4 roofline, without expert parallelism (the A100 runs' split) and with it. The B200's NVFP4 fused-MoE rows
apart, each configuration held out, at the NVFP4 roofline (`study_nvfp4`). First, the expert-parallel rows that do
not split the work (`study_unsplit_ep_rows`: sim/cost/measured.py prices them as tensor parallelism); the EP studies
check against the other tables' EP rows only.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_moe.py
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.cost import measured_kernel as mk  # noqa: E402
from sim.cost.roofline_kernel import expert_load, touched_experts  # noqa: E402
from sim.cost.measured import MOE_KEYS as KEYS  # noqa: E402
from sim.cost.measured import of_moe_config as of_config  # noqa: E402
from sim.cost.measured import (  # noqa: E402
    TABLES,
    UNSPLIT_EP_RATIO,
    carried_moe_curve,
    device_roofline,
    ep_rows_from_another_dtype,
    ep_to_single_gpu,
    gemm_curve,
    load_tables,
    measured_gpus,
    nearest_moe_config,
    tables_dir,
    unsplit_dtypes,
)

WAYS = ("nearest measured configuration (used where the dtype has rows)",
        "expert GEMMs in one fused launch (used where it has none)",
        "expert GEMMs, one launch each (before 11-28)",
        "expert GEMMs, further experts at their roofline",
        "nearest measured configuration at the same token count (before 12-03)")
# The two ways of carrying the nearest configuration's rows, on the points where the top-k or the experts differ (the
# only points where they can differ).
CARRY_WAYS = ("top-k or experts differ: at as many tokens per touched expert (used)",
              "top-k or experts differ: at the same token count (before 12-03)")
# FP8 fused-MoE rows predicted without any FP8 fused-MoE row: from the bf16 rows (the nearest bf16 configuration's
# ratio to its bf16 roofline, applied to this configuration's FP8 roofline, SHAPE_MOE_FP8), against the FP8 GEMM
# rows in one fused launch, on the same points (the tables that hold both dtypes' fused-MoE rows).
FP8_WAYS = ("FP8 from the bf16 fused-MoE rows, at the FP8 roofline",
            "FP8 expert GEMMs in one fused launch (used before 11-28 evening)")
# Expert-parallel rows (moe_ep_size > 1, at most 8 GPUs), each configuration held out: from the nearest other
# configuration at the same split (what a model outside the tables gets), and from the same model's own rows at
# tensor parallelism over as many GPUs (what pricing expert parallelism as tensor parallelism would give).
EP_WAYS = ("EP: nearest measured configuration at the same split (used where the model is not in the table)",
           "EP priced as TP over as many GPUs (the same model's rows, scaled by the roofline)")
# Expert-parallel rows where their dtype has none at that EP size (vLLM's block-scaled FP8 rows, for one): each
# dtype's expert-parallel rows taken as missing in turn, under each routing, predicted from the same model's rows at
# TP over as many GPUs times another dtype's EP / TP ratio (`ep_rows_from_another_dtype`, used since 12-05), and from
# the same model's single-GPU rows split ep ways (what the nearest split gave before), on the same points.
EP_MISSING_WAYS = ("EP, dtype without EP rows: TP rows x another dtype's EP / TP ratio (used)",
                   "EP, dtype without EP rows: the model's single-GPU rows split ep ways (before 12-05)")
# Skewed routing (`cost_model.moe_routing`, the power-law rows, every split), each configuration held out: from the
# nearest other configuration's rows of the same routing and split (what a model outside the tables gets), and, to
# show how much the routing matters, from the same configuration's balanced rows (skew ignored).
NVFP4_WAY = "NVFP4 (B200): nearest measured NVFP4 configuration at the NVFP4 roofline"
APART = {"nvfp4"}  # dtypes held out on their own roofline (`study_nvfp4`), kept out of the other studies' rows
ROUTING_WAYS = ("skewed routing: nearest measured configuration, same routing and split",
                "skewed routing priced from the same configuration's balanced rows")


def seconds_by_tokens(rows) -> dict[float, float]:
    return dict(zip(rows["num_tokens"].astype(float), rows["latency_ms"] * 1e-3))


def moe_shape(config, roof, n, kind=mk.SHAPE_MOE):
    """One GPU's fused-MoE roofline (sim/cost/measured.py `_moe_curve`): its experts, the experts a token routes to
    among them and each one's intermediate width."""
    h, inter, k, e, tp, ep = config
    return mk.shape_at(kind, e / ep, k / ep, h, inter / tp, roof.flops_per_s, roof.bytes_per_s, float(n), 0.0)


def nearest(others, config):
    """The configuration of `others` nearest `config` (None where there are none) and its seconds by token count."""
    near = nearest_moe_config(others, config) if len(others) else None
    return near, ({} if near is None else seconds_by_tokens(others[of_config(others, near)]))


def same_tokens(config, near, near_seconds, roof, n):
    """`config`'s time at n tokens from `near`'s measured time at n, by the ratio of their rooflines (before 12-03)."""
    return moe_shape(config, roof, n) * near_seconds / moe_shape(near, roof, n)


def carried(config, near, rows, roof, kind=mk.SHAPE_MOE, rows_kind=None):
    """`config`'s fused-MoE curve from `near`'s rows (`rows`: a table's, `near`'s among them), as the measured model
    carries them: at the `kind` roofline, from the rows' ratios to the `rows_kind` one (`kind` by default)."""
    near_rows = rows[of_config(rows, near)]
    return carried_moe_curve(near_rows, near, config, kind, kind if rows_kind is None else rows_kind, roof, Counter())


def tensor_parallel_only(moe):
    return moe[moe["moe_ep_size"] == 1] if "moe_ep_size" in moe.columns else moe.assign(moe_ep_size=1)


def tables_with_expert_parallel_rows():
    """Every shipped table whose fused-MoE rows keep the expert-parallel split, with its device roofline."""
    for tables in ("vllm", "sglang", "trtllm"):
        for gpu in measured_gpus(tables=tables):
            t = load_tables(tables_dir(gpu, tables))
            if t.moe is not None and "moe_ep_size" in t.moe.columns:
                yield t, device_roofline(t.gemm)


def unsplit_ep_rows() -> list[tuple]:
    """(median EP / single-GPU time at many tokens, GPU, tables, routing, dtype, EP size) of every shipped table's
    fused-MoE rows, each routing (`sim.cost.measured.ep_to_single_gpu`)."""
    found = []
    for tables in TABLES:
        for gpu in measured_gpus(tables=tables):
            t = load_tables(tables_dir(gpu, tables))
            if t.moe is None:
                continue
            for routing in ["balanced", *(r for r in (t.moe_by_routing or {}) if r != "balanced")]:
                rows, measured_as = t.moe_rows(routing)
                for (dtype, ep), ratio in ep_to_single_gpu(rows).items():
                    found.append((ratio, gpu, tables, measured_as, dtype, ep))
    return sorted(found)


def study_unsplit_ep_rows() -> None:
    """The EP rows that do not split the work (sim/cost/measured.py UNSPLIT_EP_RATIO), and the gap they sit past."""
    found = unsplit_ep_rows()
    split = [f for f in found if f[0] < UNSPLIT_EP_RATIO]
    unsplit = [f for f in found if f[0] >= UNSPLIT_EP_RATIO]
    print(f"EP rows at 8,192 tokens and more, over the single GPU's: {len(split)} medians split the work "
          f"({split[0][0]:.2f}-{split[-1][0]:.2f}); {len(unsplit)} do not ({unsplit[0][0]:.2f}-{unsplit[-1][0]:.2f}), "
          "in the dtypes:")
    for gpu, tables, dtype in sorted({(f[1], f[2], f[4]) for f in unsplit}):
        print(f"  {gpu} {tables} {dtype}")


def study_ep():
    errors = {w: [] for w in EP_WAYS}
    for t, roof in tables_with_expert_parallel_rows():
        # (against the EP rows that split the work only: sim/cost/measured.py prices the others as TP)
        for dtype in sorted(set(t.moe["dtype"].unique()) - APART - unsplit_dtypes(t.moe)):
            rows = t.moe[t.moe["dtype"] == dtype]
            ep_rows = rows[rows["moe_ep_size"] > 1]
            configs = ep_rows[KEYS].drop_duplicates().itertuples(index=False)
            for config in [tuple(int(v) for v in c) for c in configs]:
                h, inter, k, e, tp, ep = config
                measured = seconds_by_tokens(rows[of_config(rows, config)])
                others = ep_rows[~of_config(ep_rows, config)]
                near = nearest_moe_config(others, config) if len(others) else None
                if near is not None and near[4:] != config[4:]:
                    near = None  # no other configuration at this split
                near_rows = {} if near is None else seconds_by_tokens(others[of_config(others, near)])
                curve = None if near is None else carried(config, near, others, roof)
                as_tp = (h, inter, k, e, tp * ep, 1)
                tp_rows = seconds_by_tokens(rows[of_config(rows, as_tp)])
                for n, seconds in measured.items():
                    if n not in near_rows or n not in tp_rows:
                        continue  # the same points for both ways
                    pred = curve(n, note=False)
                    errors[EP_WAYS[0]].append(math.log(pred / seconds))
                    pred = moe_shape(config, roof, n) * tp_rows[n] / moe_shape(as_tp, roof, n)
                    errors[EP_WAYS[1]].append(math.log(pred / seconds))
    return errors


def study_ep_without_dtype_rows():
    errors = {}
    for t, roof in tables_with_expert_parallel_rows():
        for routing, all_rows in sorted((t.moe_by_routing or {"balanced": t.moe}).items()):
            unsplit = unsplit_dtypes(all_rows)
            all_rows = all_rows[~all_rows["dtype"].isin(unsplit) | (all_rows["moe_ep_size"] == 1)]
            for dtype in sorted(set(all_rows["dtype"].unique()) - APART - unsplit):
                rows = all_rows[all_rows["dtype"] == dtype]
                missing = all_rows[~all_rows["dtype"].isin(APART)]
                missing = missing[(missing["dtype"] != dtype) | (missing["moe_ep_size"] == 1)]
                ep_configs = rows[rows["moe_ep_size"] > 1][KEYS].drop_duplicates().itertuples(index=False)
                for config in [tuple(int(v) for v in c) for c in ep_configs]:
                    h, inter, k, e, tp, ep = config
                    derived = ep_rows_from_another_dtype(rows[rows["moe_ep_size"] == 1], missing, config)
                    single = (h, inter, k, e, tp, 1)
                    if derived is None or not of_config(rows, single).any():
                        continue
                    way = seconds_by_tokens(derived[0])
                    split = carried(config, single, rows, roof)
                    for n, seconds in seconds_by_tokens(rows[of_config(rows, config)]).items():
                        if n not in way:
                            continue
                        for name, pred in zip(EP_MISSING_WAYS, (way[n], split(n, note=False))):
                            errors.setdefault(f"{name}, {routing} routing", []).append(math.log(pred / seconds))
    return errors


def study_fp8():
    """Each FP8 configuration of the tables that hold both dtypes, predicted from their bf16 fused-MoE rows alone
    and from their FP8 GEMM rows alone."""
    errors = {w: [] for w in FP8_WAYS}
    for tables in ("vllm", "sglang", "trtllm"):
        for gpu in measured_gpus(tables=tables):
            t = load_tables(tables_dir(gpu, tables))
            if t.moe is None or not {"bf16", "fp8"} <= set(t.moe["dtype"]):
                continue
            roof = device_roofline(t.gemm)
            launch_s = float(t.gemm["latency_ms"].min()) * 1e-3
            moe = tensor_parallel_only(t.moe)
            bf16, fp8 = moe[moe["dtype"] == "bf16"], moe[moe["dtype"] == "fp8"]
            for config in [tuple(int(v) for v in c) for c in fp8[KEYS].drop_duplicates().itertuples(index=False)]:
                h, inter, k, e, tp, _ = config
                near = nearest_moe_config(bf16, config)
                near_rows = seconds_by_tokens(bf16[of_config(bf16, near)])
                curve = carried(config, near, bf16, roof, mk.SHAPE_MOE_FP8, mk.SHAPE_MOE)
                curves = None
                if "fp8" in set(t.gemm["dtype"]) and inter % tp == 0:
                    notes, key = Counter(), f"{gpu}{tables}fp8"
                    curves = (gemm_curve(t.gemm, "fp8", 2 * inter // tp, h, roof, notes, "gate_up", key),
                              gemm_curve(t.gemm, "fp8", h, inter // tp, roof, notes, "down", key))
                for n, seconds in seconds_by_tokens(fp8[of_config(fp8, config)]).items():
                    if n not in near_rows or curves is None:
                        continue  # the same points for both ways
                    pred = curve(n, note=False)
                    errors[FP8_WAYS[0]].append(math.log(pred / seconds))
                    touched = touched_experts(e, k, n)
                    m = expert_load(e, k, n)
                    fused = sum(mk.fused_experts_s(c(m), c.shape(m), touched, launch_s) for c in curves)
                    errors[FP8_WAYS[1]].append(math.log(fused / seconds))
    return errors


def study():
    errors = {w: [] for w in WAYS + CARRY_WAYS}
    for tables in ("vllm", "sglang", "trtllm"):
        for gpu in measured_gpus(tables=tables):
            t = load_tables(tables_dir(gpu, tables))
            if t.moe is None:
                continue
            roof = device_roofline(t.gemm)
            launch_s = float(t.gemm["latency_ms"].min()) * 1e-3
            gemm_dtypes = set(t.gemm["dtype"])
            moe = tensor_parallel_only(t.moe)
            for dtype in sorted(set(moe["dtype"].unique()) - APART):
                rows = moe[moe["dtype"] == dtype]
                configs = [tuple(int(v) for v in c) for c in rows[KEYS].drop_duplicates().itertuples(index=False)]
                for config in configs:
                    others = rows[~of_config(rows, config)]
                    measured = seconds_by_tokens(rows[of_config(rows, config)])
                    near = nearest_moe_config(others, config) if len(others) else None
                    near_rows = {} if near is None else seconds_by_tokens(others[of_config(others, near)])
                    carry = None if near is None else carried(config, near, others, roof)
                    differ = near is not None and (near[2], near[3]) != (config[2], config[3])
                    h, inter, k, e, tp, _ = config
                    curves = None
                    if dtype in gemm_dtypes and inter % tp == 0:
                        notes = Counter()
                        key = f"{gpu}{tables}"
                        curves = (gemm_curve(t.gemm, dtype, 2 * inter // tp, h, roof, notes, "gate_up", key),
                                  gemm_curve(t.gemm, dtype, h, inter // tp, roof, notes, "down", key))
                    for n, seconds in measured.items():
                        if n in near_rows:
                            pred = carry(n, note=False)
                            errors[WAYS[0]].append(math.log(pred / seconds))
                            before = same_tokens(config, near, near_rows[n], roof, n)
                            errors[WAYS[4]].append(math.log(before / seconds))
                            if differ:
                                errors[CARRY_WAYS[0]].append(math.log(pred / seconds))
                                errors[CARRY_WAYS[1]].append(math.log(before / seconds))
                        if curves is None:
                            continue
                        touched = touched_experts(e, k, n)
                        m = expert_load(e, k, n)
                        fused = own = roofline = 0.0
                        for curve in curves:
                            one, r = curve(m), curve.shape(m)
                            fused += mk.fused_experts_s(one, r, touched, launch_s)
                            own += touched * one
                            roofline += one + (touched - 1.0) * r
                        for way, pred in zip(WAYS[1:4], (fused, own, roofline)):
                            errors[way].append(math.log(pred / seconds))
    return errors


def study_nvfp4():
    """The B200's NVFP4 fused-MoE rows (each engine's), each configuration held out (tensor parallelism, the default
    routing's rows): the nearest other NVFP4 configuration's ratio to the NVFP4 roofline (SHAPE_MOE_NVFP4), applied
    to this one's, as `_moe_curve` prices an NVFP4 model outside the tables."""
    errors = {NVFP4_WAY: []}
    for tables in ("vllm", "sglang", "trtllm"):
        for gpu in measured_gpus(tables=tables):
            t = load_tables(tables_dir(gpu, tables))
            if t.moe is None or "nvfp4" not in set(t.moe["dtype"]):
                continue
            roof = device_roofline(t.gemm)
            moe = tensor_parallel_only(t.moe)
            rows = moe[moe["dtype"] == "nvfp4"]
            for config in [tuple(int(v) for v in c) for c in rows[KEYS].drop_duplicates().itertuples(index=False)]:
                others = rows[~of_config(rows, config)]
                near, near_rows = nearest(others, config)
                curve = carried(config, near, others, roof, mk.SHAPE_MOE_NVFP4)
                for n, seconds in seconds_by_tokens(rows[of_config(rows, config)]).items():
                    if n in near_rows:
                        errors[NVFP4_WAY].append(math.log(curve(n, note=False) / seconds))
    return errors


def study_routing():
    errors = {w: [] for w in ROUTING_WAYS}
    for tables in ("vllm", "sglang", "trtllm"):
        for gpu in measured_gpus(tables=tables):
            t = load_tables(tables_dir(gpu, tables))
            by_routing = t.moe_by_routing or {}
            if "balanced" not in by_routing:
                continue
            roof = device_roofline(t.gemm)
            for routing, moe in by_routing.items():
                if routing == "balanced":
                    continue
                balanced = by_routing["balanced"]
                for dtype in sorted(set(moe["dtype"].unique()) - APART):
                    rows, plain = moe[moe["dtype"] == dtype], balanced[balanced["dtype"] == dtype]
                    configs = rows[KEYS].drop_duplicates().itertuples(index=False)
                    for config in [tuple(int(v) for v in c) for c in configs]:
                        measured = seconds_by_tokens(rows[of_config(rows, config)])
                        split = rows[(rows["moe_tp_size"] == config[4]) & (rows["moe_ep_size"] == config[5])]
                        others = split[~of_config(split, config)]
                        near, near_rows = nearest(others, config)
                        curve = None if near is None else carried(config, near, others, roof)
                        plain_rows = seconds_by_tokens(plain[of_config(plain, config)])
                        for n, seconds in measured.items():
                            if n in near_rows and n in plain_rows:  # the same points for both ways
                                pred = curve(n, note=False)
                                errors[ROUTING_WAYS[0]].append(math.log(pred / seconds))
                                errors[ROUTING_WAYS[1]].append(math.log(plain_rows[n] / seconds))
    return errors


# vLLM's Marlin MXFP4 rows from SGLang's Marlin int4 rows of the same GPU (AIConfigurator's raw tables): per GPU, the
# SGLang version whose int4 Marlin rows are compared (0.5.14 where it measured them, as the import queries it; A100's
# borrowed rows are 0.5.10's, the only version there: compared on H100 too).
BORROWED_MARLIN = (("l40s", "l40s", "0.5.14"), ("h100_sxm", "h100-sxm", "0.5.14"), ("h200_sxm", "h200", "0.5.14"),
                   ("h100_sxm", "h100-sxm", "0.5.10"))


def study_borrowed_marlin():
    """Each measured point of vLLM's Marlin MXFP4 rows predicted from SGLang's Marlin int4 rows on the same GPU (as
    vLLM's A100 tables price gpt-oss's experts); {} where aiconfigurator-core is not installed."""
    try:
        import aiconfigurator_core
    except ImportError:
        print("(vLLM's Marlin MXFP4 rows from SGLang's int4 ones: skipped, aiconfigurator-core 0.12.0 is not "
              "installed)")
        return {}
    import pandas as pd
    data = Path(aiconfigurator_core.__file__).parent / "systems" / "data"

    def marlin_rows(system, framework, version, dtype):
        raw = pd.read_parquet(data / system / "moe" / framework / version / "moe_perf.parquet")
        raw = raw[(raw["moe_dtype"] == dtype) & raw["kernel_source"].str.contains("marlin", regex=False)]
        raw = raw[raw["kernel_source"] == raw["kernel_source"].value_counts().idxmax()]
        return raw.assign(latency_ms=raw["latency"])

    errors = {}
    for system, gpu, version in BORROWED_MARLIN:
        roof = device_roofline(load_tables(tables_dir(gpu)).gemm)
        lender = marlin_rows(system, "sglang", version, "int4_wo")
        target = marlin_rows(system, "vllm", "0.24.0", "w4a16_mxfp4")
        for split in ("no expert parallelism", "expert parallelism"):
            way = f"vLLM's Marlin MXFP4 from SGLang {version}'s Marlin int4, {gpu}, {split}"
            errors[way] = []
            for distribution in sorted(set(target["distribution"]) & set(lender["distribution"])):
                lent = lender[lender["distribution"] == distribution]
                own = target[target["distribution"] == distribution]
                own = own[(own["moe_ep_size"] == 1) == (split == "no expert parallelism")]
                for config in [tuple(int(v) for v in c) for c in own[KEYS].drop_duplicates().itertuples(index=False)]:
                    near, near_rows = nearest(lent, config)
                    curve = carried(config, near, lent, roof, mk.SHAPE_MOE_MXFP4)
                    for n, seconds in seconds_by_tokens(own[of_config(own, config)]).items():
                        if n in near_rows:
                            pred = curve(n, note=False)
                            errors[way].append(math.log(pred / seconds))
    return errors


def main() -> int:
    study_unsplit_ep_rows()
    errors = {**study(), **study_fp8(), **study_ep(), **study_ep_without_dtype_rows(), **study_routing(),
              **study_nvfp4(), **study_borrowed_marlin()}
    print("| way | points | predicted / measured, median | mean abs log error |")
    print("| --- | ---: | ---: | ---: |")
    for way, e in errors.items():
        e = np.array(e)
        print(f"| {way} | {len(e):,} | {math.exp(np.median(e)):.2f} | {np.mean(np.abs(e)):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
