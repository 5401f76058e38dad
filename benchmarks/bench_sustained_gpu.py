"""Does a GPU hold its matrix rate under sustained load? (issue 30: GPUStack's compute-bound H100 runs.)

Every whole-step profile and kernel table times a step in a short burst: a CUDA graph replayed 20 times, the clocks
at their boost. A serving engine runs for minutes, and a 700 W part may lower its clocks once its power or
temperature reaches the cap. This keeps one kernel busy for `--seconds` and records, per window of `--window-s`, the
rate it reached and, through NVML, the SM clock, the power drawn, the temperature and the reasons the driver gives
for holding the clock down.

Workloads: `gemm` (bf16 8192³ `torch.mm` on random normal data: compute-bound), `copy` (a 2 GiB device-to-device
copy: memory-bound). Prints one Markdown row per window and a summary (the first window's rate, the median of the
last third, their ratio); `--csv` writes the windows.

    python3 benchmarks/bench_sustained_gpu.py --seconds 60 --csv windows.csv      # on a CUDA machine
    python3 benchmarks/bench_sustained_gpu.py --dry-run                          # this code on a CPU, tiny sizes
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch


def nvml_reader():
    """A function giving (SM MHz, watts, °C, clock-limit reasons as text) now, or Nones without NVML. (`...All`, the
    mask of every reason, is no reason: the run of 12-04 printed it as "All+SwPowerCap".)"""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:  # noqa: BLE001  (no NVML: a CPU dry run, or a driver without it)
        return lambda: (None, None, None, "")
    names = {getattr(pynvml, n): n.replace("nvmlClocksThrottleReason", "").replace("nvmlClocksEventReason", "")
             for n in dir(pynvml) if n.startswith(("nvmlClocksThrottleReason", "nvmlClocksEventReason"))
             and not n.endswith(("None", "Mask", "All")) and isinstance(getattr(pynvml, n), int)}
    reasons_of = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons")

    def read():
        mask = reasons_of(handle)
        why = sorted({name for bit, name in names.items() if bit and mask & bit})
        return (pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU), "+".join(why) or "none")
    return read


def workload(name: str, device: str):
    """(one call, the work it does: FLOPs or bytes read + written, the unit's name)."""
    if name == "gemm":
        size = 8192 if device == "cuda" else 256
        a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
        b, c = torch.randn_like(a), torch.empty_like(a)
        return (lambda: torch.mm(a, b, out=c)), 2 * size ** 3, "TFLOP/s"
    elements = (1 << 30) if device == "cuda" else (1 << 20)
    src = torch.randn(elements, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * 2 * elements, "TB/s"


def run(name: str, device: str, seconds: float, window_s: float, read) -> list[dict]:
    call, work, unit = workload(name, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        call()
    sync()
    # calls per window, from one timed batch
    start = time.perf_counter()
    for _ in range(10):
        call()
    sync()
    per_call_s = (time.perf_counter() - start) / 10
    batch = max(1, int(window_s / per_call_s))
    windows, began = [], time.perf_counter()
    # at least two windows, whatever the timed batch foretold: the summary sets the first against the rest (a loaded
    # host made a dry run's first window outlast its whole second, and the run had one)
    while time.perf_counter() - began < seconds or len(windows) < 2:
        t0 = time.perf_counter()
        for _ in range(batch):
            call()
        sync()
        took = time.perf_counter() - t0
        mhz, watts, celsius, why = read()
        windows.append(dict(workload=name, t_s=round(time.perf_counter() - began, 3), rate=batch * work / took / 1e12,
                            unit=unit, sm_mhz=mhz, watts=watts, celsius=celsius, limits=why))
    return windows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="seconds of sustained load per workload")
    ap.add_argument("--window-s", type=float, default=1.0)
    ap.add_argument("--workloads", default="gemm,copy")
    ap.add_argument("--csv", default="")
    ap.add_argument("--dry-run", action="store_true", help="on this CPU, tiny sizes, a few seconds")
    args = ap.parse_args()
    kinds = args.workloads.split(",")
    if any(k not in ("gemm", "copy") for k in kinds):
        print(f"--workloads: '{args.workloads}' names an unknown workload; allowed: gemm, copy (comma-separated)",
              file=sys.stderr)
        sys.exit(2)
    if args.csv and Path(args.csv).exists():
        print(f"--csv: '{args.csv}' exists; allowed: a path that does not exist yet", file=sys.stderr)
        sys.exit(2)
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("--dry-run not given and no CUDA device; allowed: a CUDA machine, or --dry-run", file=sys.stderr)
        sys.exit(2)
    seconds = min(args.seconds, 2.0) if args.dry_run else args.seconds
    name = torch.cuda.get_device_name(0) if device == "cuda" else "cpu (a dry run)"
    print(f"machine: {name}, torch {torch.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S')} UTC; {seconds:.0f} s "
          f"per workload, windows of {args.window_s} s")
    read, rows = nvml_reader(), []
    for kind in kinds:
        windows = run(kind, device, seconds, args.window_s, read)
        rows += windows
        print(f"\n| {kind}: t s | rate | SM MHz | W | °C | clock held down by |")
        print("| --- | ---: | ---: | ---: | ---: | --- |")
        for w in windows:
            print(f"| {w['t_s']:.1f} | {w['rate']:.3f} {w['unit']} | {w['sm_mhz']} | {w['watts']} | {w['celsius']} | "
                  f"{w['limits']} |")
        last = [w["rate"] for w in windows[len(windows) * 2 // 3:]]
        first, tail = windows[0]["rate"], statistics.median(last)
        print(f"\n{kind}: first window {first:.3f} {windows[0]['unit']}, median of the last third {tail:.3f}, "
              f"ratio {tail / first:.3f}; max over all windows {max(w['rate'] for w in windows):.3f}", flush=True)
    if args.csv:
        with open(args.csv, "x") as f:
            f.write("workload,t_s,rate,unit,sm_mhz,watts,celsius,limits\n")
            f.writelines(",".join(str(w[k]) for k in ("workload", "t_s", "rate", "unit", "sm_mhz", "watts",
                                                       "celsius", "limits")) + "\n" for w in rows)


if __name__ == "__main__":
    main()
