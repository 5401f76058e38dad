"""Import NVIDIA AIConfigurator's measured kernel tables into compact per-GPU tables ServeSim ships.

    python -m calibrate.aic_import --out calibrate/measured/        # run with a venv that has
                                                                    # aiconfigurator-core==0.12.0

AIConfigurator (`aiconfigurator-core`, Apache-2.0) ships Parquet tables of kernel latencies measured on
real GPUs under `aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/`. This reads the
vLLM tables of the version AIConfigurator itself queries (`systems/query_versions.yaml`: vllm 0.24.0,
a100_sxm 0.14.0), keeps what ServeSim prices a dense or MoE decoder with, and writes per ServeSim GPU:

- gemm.parquet: dtype (bf16, fp8 = per-tensor W8A8), m (tokens), n (out features), k (in features), latency_ms
- context_attention.parquet: kv_dtype, batch_size, isl (prompt tokens, empty cache), num_heads,
  num_kv_heads, head_dim, latency_ms  (full attention only: window_size 0)
- generation_attention.parquet: kv_dtype, batch_size, kv_tokens (step + 1: AIConfigurator's `step` is the
  context before the new token), num_heads, num_kv_heads, head_dim, latency_ms
- allreduce.parquet: backend (graph = under CUDA graphs, eager), num_gpus, message_elements (bf16
  elements: AIConfigurator's `message_size` is an element count: one decode token of llama-3.1-8b at
  tp 2 queries 4096), latency_ms
- moe.parquet: dtype, num_tokens, hidden_size, inter_size, topk, num_experts, moe_tp_size, latency_ms
  (expert parallelism 1: ServeSim shards experts by tensor parallelism)
- meta.json: source package and version, system, framework and version of each table (and any fallback
  to another version), the kernel each table keeps, the device name, units.

Latencies are AIConfigurator's, unchanged (ms of one call). A table vLLM lacks is taken from the newest
older vLLM version holding it, and meta.json says so; a system with no data is listed in
`missing.json` and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

import pandas as pd
import yaml

# ServeSim catalog GPU (sim/model/catalog.py GPUS) -> AIConfigurator system.
SYSTEMS = {
    "h100-sxm": "h100_sxm",  # device "NVIDIA H100 80GB HBM3"
    "h200": "h200_sxm",  # device "NVIDIA H200"
    "a100-80gb": "a100_sxm",  # device "NVIDIA A100-SXM4-80GB"
    "l40s": "l40s",
    "l4": "l4",  # AIConfigurator 0.12.0 ships an empty l4 folder: reported in missing.json
}
FRAMEWORK = "vllm"
PACKAGE = "aiconfigurator-core"
_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}


def _data_root() -> Path:
    import aiconfigurator_core
    return Path(aiconfigurator_core.__file__).parent / "systems"


def _versions(path: Path) -> list[str]:
    def key(v: str):
        return tuple(int(p) if p.isdigit() else 0 for p in v.replace("rc", ".").replace("post", ".").split("."))
    return sorted((p.name for p in path.iterdir() if p.is_dir()), key=key) if path.is_dir() else []


def _pick(system_dir: Path, op: str, filename: str, current: str) -> tuple[Path, str] | None:
    """The table at the queried vLLM version, else the newest older version that has it."""
    versions = [v for v in _versions(system_dir / op / FRAMEWORK)
                if (system_dir / op / FRAMEWORK / v / filename).is_file()]
    if not versions:
        return None
    older = [v for v in versions if _versions_le(v, current)]
    version = current if current in versions else (older[-1] if older else versions[-1])
    return system_dir / op / FRAMEWORK / version / filename, version


def _versions_le(a: str, b: str) -> bool:
    ka = tuple(int(p) for p in a.split(".") if p.isdigit())
    kb = tuple(int(p) for p in b.split(".") if p.isdigit())
    return ka <= kb


def _main_kernel(df: pd.DataFrame) -> str:
    """The kernel with the most measured rows (the one the framework runs by default for this table)."""
    return str(df["kernel_source"].value_counts().idxmax())


def _gemm(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    keep, kernels = [], {}
    for src_dtype, dtype in (("bfloat16", "bf16"), ("fp8", "fp8")):
        rows = df[df["gemm_dtype"] == src_dtype]
        if rows.empty:
            continue
        kernel = _main_kernel(rows)
        rows = rows[rows["kernel_source"] == kernel]
        kernels[dtype] = kernel
        keep.append(pd.DataFrame({"dtype": dtype, "m": rows["m"], "n": rows["n"], "k": rows["k"],
                                  "latency_ms": rows["latency"]}))
    out = pd.concat(keep, ignore_index=True)
    return out.groupby(["dtype", "m", "n", "k"], as_index=False)["latency_ms"].median(), kernels


def _attention(df: pd.DataFrame, generation: bool) -> tuple[pd.DataFrame, dict]:
    if "window_size" in df.columns:
        df = df[df["window_size"] == 0]
    df = df[df["attn_dtype"] == "bfloat16"]
    keep, kernels = [], {}
    for src_dtype, dtype in _DTYPES.items():
        rows = df[df["kv_cache_dtype"] == src_dtype]
        if rows.empty:
            continue
        kernel = _main_kernel(rows)
        rows = rows[rows["kernel_source"] == kernel]
        kernels[dtype] = kernel
        cols = {"kv_dtype": dtype, "batch_size": rows["batch_size"]}
        if generation:
            cols["kv_tokens"] = rows["step"] + 1
        else:
            cols["isl"] = rows["isl"]
        cols.update(num_heads=rows["num_heads"], num_kv_heads=rows["num_key_value_heads"],
                    head_dim=rows["head_dim"], latency_ms=rows["latency"])
        keep.append(pd.DataFrame(cols))
    out = pd.concat(keep, ignore_index=True)
    keys = [c for c in out.columns if c != "latency_ms"]
    return out.groupby(keys, as_index=False)["latency_ms"].median(), kernels


def _allreduce(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    df = df[df["allreduce_dtype"] == "bfloat16"]
    backend = df["backend"].str.replace("vllm_", "", regex=False)
    out = pd.DataFrame({"backend": backend, "num_gpus": df["num_gpus"], "message_elements": df["message_size"],
                        "latency_ms": df["latency"]})
    kernels = dict(zip(backend, df["kernel_source"]))
    return out.groupby(["backend", "num_gpus", "message_elements"], as_index=False)["latency_ms"].median(), kernels


def _moe(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    df = df[(df["moe_dtype"] == "bfloat16") & (df["moe_ep_size"] == 1)]
    if df.empty:
        return pd.DataFrame(), {}
    dists = set(df["distribution"])
    distribution = "balanced" if "balanced" in dists else min(dists)
    df = df[df["distribution"] == distribution]
    kernel = _main_kernel(df)
    df = df[df["kernel_source"] == kernel]
    out = pd.DataFrame({"dtype": "bf16", "num_tokens": df["num_tokens"], "hidden_size": df["hidden_size"],
                        "inter_size": df["inter_size"], "topk": df["topk"], "num_experts": df["num_experts"],
                        "moe_tp_size": df["moe_tp_size"], "latency_ms": df["latency"]})
    keys = [c for c in out.columns if c != "latency_ms"]
    return (out.groupby(keys, as_index=False)["latency_ms"].median(),
            {"bf16": kernel, "distribution": distribution})


TABLES = {
    # name: (AIConfigurator op folder, file, converter)
    "gemm": ("gemm", "gemm_perf.parquet", _gemm),
    "context_attention": ("attention", "context_attention_perf.parquet", lambda d: _attention(d, False)),
    "generation_attention": ("attention", "generation_attention_perf.parquet", lambda d: _attention(d, True)),
    "allreduce": ("comm", "custom_allreduce_perf.parquet", _allreduce),
    "moe": ("moe", "moe_perf.parquet", _moe),
}
REQUIRED = ("gemm", "context_attention", "generation_attention")


def convert_system(system_dir: Path, current: str, out_dir: Path, gpu: str, system: str,
                   package_version: str) -> dict:
    """Convert one system's tables into out_dir; returns its meta (raises LookupError if it has no data)."""
    found = {name: _pick(system_dir, op, fname, current) for name, (op, fname, _) in TABLES.items()}
    missing = [n for n in REQUIRED if found[n] is None]
    if missing:
        raise LookupError(f"no vLLM {', '.join(missing)} table under {system_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    tables, device = {}, None
    for name, (op, fname, convert) in TABLES.items():
        if found[name] is None:
            tables[name] = {"status": "absent", "note": f"no vLLM {fname} for {system}"}
            continue
        path, version = found[name]
        raw = pd.read_parquet(path)
        device = device or str(raw["device"].iloc[0])
        df, kernels = convert(raw)
        if df.empty:
            tables[name] = {"status": "absent", "note": f"{fname} has no bf16 rows usable here"}
            continue
        df.to_parquet(out_dir / f"{name}.parquet", index=False, compression="zstd")
        entry = {"status": "ok", "framework": FRAMEWORK, "framework_version": version,
                 "source_file": str(path.relative_to(system_dir.parent.parent)), "rows": len(df),
                 "kernels": kernels}
        if version != current:
            entry["note"] = f"vLLM {current} lacks {fname} for {system}; taken from vLLM {version}"
        tables[name] = entry
    meta = {
        "format_version": 1,
        "source": {"package": PACKAGE, "version": package_version, "license": "Apache-2.0",
                   "path": "aiconfigurator_core/systems/data"},
        "gpu": gpu, "system": system, "device_name": device, "framework": FRAMEWORK,
        "framework_version": current, "activation_dtype": "bf16", "units": {"latency_ms": "milliseconds per call"},
        "tables": tables,
    }
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibrate.aic_import", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="calibrate/measured", help="output folder (one subfolder per GPU)")
    ap.add_argument("--gpus", default=",".join(SYSTEMS), help=f"comma-separated; allowed: {', '.join(SYSTEMS)}")
    args = ap.parse_args(argv)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    bad = [g for g in gpus if g not in SYSTEMS]
    if bad:
        print(f"--gpus: {bad[0]!r} is not allowed; allowed: {', '.join(SYSTEMS)}", file=sys.stderr)
        return 2
    try:
        root = _data_root()
    except ImportError:
        print(f"{PACKAGE} is not installed in this Python; allowed: a venv with {PACKAGE}==0.12.0", file=sys.stderr)
        return 2
    versions = yaml.safe_load((root / "query_versions.yaml").read_text())
    out = Path(args.out)
    missing = {}
    for gpu in gpus:
        system = SYSTEMS[gpu]
        current = versions.get("overrides", {}).get(system, {}).get(FRAMEWORK, {}).get("current") \
            or versions["defaults"][FRAMEWORK]["current"]
        try:
            meta = convert_system(root / "data" / system, current, out / gpu, gpu, system, metadata.version(PACKAGE))
        except LookupError as err:
            missing[gpu] = {"system": system, "reason": str(err).replace(str(root), "aiconfigurator_core/systems")}
            print(f"{gpu}: skipped ({missing[gpu]['reason']})")
            continue
        size = sum(p.stat().st_size for p in (out / gpu).iterdir())
        rows = ", ".join(f"{name} {t.get('rows', 0)}" for name, t in meta["tables"].items())
        print(f"{gpu}: {meta['device_name']}, vLLM {current}, "
              f"{rows} rows, {size / 1e6:.2f} MB")
    (out / "missing.json").write_text(json.dumps(missing, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
