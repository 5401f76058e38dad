"""How well each cost model predicts whole steps measured on an H100 (issue 17).

For every row of the two shared whole-step tables (llama-3.1-8b, one H100, unfused and compiled engines),
prices the row with:
- the roofline (sim.cost.RooflineCostModel for h100-sxm at the catalog's efficiencies, as a scenario builds it);
- the per-op calibrated model from the H100 per-op profile (h100_calibrate_profiles_044c1d6.tgz), contiguous
  and paged decode attention;
- the whole-step model fitted on all rows of the table, and refitted without the row (held out);
and prints Markdown tables of step times and errors (paste into benchmarks/RESULTS.md). All through the same
code as `python -m calibrate check`, communication off (tp 1: there is none).

    .venv/bin/python benchmarks/bench_steps.py                     # reads ../shared/gpu beside the repository
    .venv/bin/python benchmarks/bench_steps.py --shared /path/to/shared/gpu
"""

from __future__ import annotations

import argparse
import platform
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from calibrate.fidelity.machine import cpuinfo  # noqa: E402
from calibrate.stepcheck import check_rows, import_steps, make_target  # noqa: E402
from sim.cost.steps import StepFitWarning  # noqa: E402
from sim.model.catalog import get_model  # noqa: E402

TABLES = {"unfused": "h100_llama-3.1-8b_whole_steps.csv", "compiled": "h100_llama-3.1-8b_whole_steps_compiled.csv"}
PER_OP_TGZ = "h100_calibrate_profiles_044c1d6.tgz"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "gpu")
    args = parser.parse_args()
    model = get_model("llama-3.1-8b")
    warnings.simplefilter("ignore", StepFitWarning)
    print(f"benchmark CPU: {cpuinfo()['cpu_model']}, {platform.python_implementation()} {platform.python_version()}\n")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with tarfile.open(args.shared / PER_OP_TGZ) as tar:
            tar.extractall(tmp, filter="data")
        per_op = tmp / "prof" / "h100-sxm" / "llama-3.1-8b" / "tp1"
        summary = []
        for engine, name in TABLES.items():
            table = args.shared / name
            profile = tmp / f"steps-{engine}"
            import_steps(table, model, 1, device_name="NVIDIA H100 80GB HBM3", out=profile, engine=engine,
                         engine_description=None, source="bench_steps.py", method=None, dtype="bf16", device="cuda",
                         kv_layout="dense")
            reports = {
                "roofline": check_rows(make_target("roofline", model=model, tensor_parallel=1, gpu_name="h100-sxm",
                                                   kv_layout="dense"), table),
                "per-op contiguous": check_rows(make_target(str(per_op), model=None, tensor_parallel=None,
                                                            gpu_name=None, kv_layout="contiguous"), table),
                "per-op paged": check_rows(make_target(str(per_op), model=None, tensor_parallel=None, gpu_name=None,
                                                       kv_layout="paged"), table),
                "whole-step": check_rows(make_target(str(profile), model=None, tensor_parallel=None, gpu_name=None,
                                                     kv_layout="dense"), table, loo=True),
            }
            cols = [("roofline", "error_pct", "predicted_s"), ("per-op contiguous", "error_pct", "predicted_s"),
                    ("per-op paged", "error_pct", "predicted_s"), ("whole-step", "error_pct", "predicted_s"),
                    ("whole-step", "loo_error_pct", "loo_predicted_s")]
            labels = ["roofline", "per-op, contiguous", "per-op, paged", "whole-step, all rows",
                      "whole-step, held out"]
            print(f"### {name} ({engine})\n")
            print("| step | measured (ms) | " + " | ".join(labels) + " |")
            print("| --- | ---: | " + " | ".join("---:" for _ in labels) + " |")
            for i, row in enumerate(reports["roofline"]["rows"]):
                cells = [f"{reports[m]['rows'][i][p] * 1e3:.2f} ({reports[m]['rows'][i][e]:+.1f}%)" for m, e, p in cols]
                print(f"| {row['shape']} | {row['measured_s'] * 1e3:.2f} | " + " | ".join(cells) + " |")
            errs = [np.abs([r[e] for r in reports[m]["rows"]]) for m, e, _ in cols]
            print("| median abs error | | " + " | ".join(f"{np.median(x):.1f}%" for x in errs) + " |")
            print("| max abs error | | " + " | ".join(f"{x.max():.1f}%" for x in errs) + " |\n")
            for note in reports["whole-step"]["notes"]:
                print(f"note: {note}\n")
            summary.append((engine, labels, errs))
        print("### Summary: absolute error over the 21 rows of each table (median / max)\n")
        print("| table | " + " | ".join(summary[0][1]) + " |")
        print("| --- | " + " | ".join("---:" for _ in summary[0][1]) + " |")
        for engine, _, errs in summary:
            print(f"| {engine} | " + " | ".join(f"{np.median(x):.2f}% / {x.max():.2f}%" for x in errs) + " |")


if __name__ == "__main__":
    main()
