"""Sweeps: the cross product of scenario keys, each point simulated in its own process.

A point is a set of key -> value overrides applied to one variant of a scenario file. Points run on a
backend (`serial`, a local `process` pool, or `ray`), and every finished point is appended to a journal
at once, so an interrupted sweep loses nothing and a rerun skips what is done.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pandas as pd
import yaml

from sim.config.deployment import gpu_spec
from sim.config.files import set_path, validate_arrival
from sim.errors import ConfigError, ServeSimError
from sim.workload.arrivals import MAX_RATE_PER_S

RATE_KEY = "rate"  # shorthand for the workload's mean arrival rate, whatever the arrival kind
OUTPUT_SUFFIXES = (".parquet", ".csv")
BACKENDS = ("process", "ray", "serial")


@dataclass(frozen=True)
class GridAxis:
    key: str  # dotted scenario path (hardware.gpu) or `rate`
    values: tuple


def parse_grid(specs: Iterable[str]) -> list[GridAxis]:
    """`key=v1,v2,...` strings -> axes; values are parsed as YAML scalars (8 -> int, h100-sxm -> str)."""
    axes: list[GridAxis] = []
    for text in specs:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--grid: {text!r} is not of the form key=v1,v2,...")
        if any(a.key == key for a in axes):
            raise ConfigError(f"--grid: key {key!r} is given twice; put all its values in one --grid")
        values = []
        for item in raw.split(","):
            item = item.strip()
            if not item:
                raise ConfigError(f"--grid: {text!r} has an empty value; allowed: a comma-separated list of values")
            try:
                values.append(yaml.safe_load(item))
            except yaml.YAMLError:
                values.append(item)
        if key == RATE_KEY and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                       and 0 < v <= MAX_RATE_PER_S for v in values):
            raise ConfigError(f"--grid: rate values {raw!r} must be positive numbers (requests per second), "
                              f"finite and <= {MAX_RATE_PER_S:g}")
        axes.append(GridAxis(key, tuple(values)))
    return axes


def grid_points(axes: list[GridAxis]) -> list[dict[str, Any]]:
    """Every combination, the first axis varying slowest."""
    if not axes:
        return [{}]
    return [dict(zip([a.key for a in axes], combo)) for combo in itertools.product(*[a.values for a in axes])]


def arrival_rate(raw: dict) -> float | None:
    """The mean arrival rate a raw scenario asks for (a trace at its own pace: read from the file);
    None where it has no arrival section or its kind has no rate (closed loop)."""
    arrival = (raw.get("workload") or {}).get("arrival")
    if arrival is None:
        return None
    spec = validate_arrival(arrival)
    return spec.mean_rate_per_s if spec.has_rate else None


def set_rate(raw: dict, rate_per_s: float) -> None:
    """Set the workload's mean arrival rate in place, keeping the arrival process's shape (`with_rate`)."""
    workload = raw.setdefault("workload", {})
    arrival = workload.get("arrival")
    spec = validate_arrival({"kind": "poisson", "rate_per_s": 1.0} if arrival is None else arrival)
    # Only the keys the file set (and the new rate), so a saved point reads like the file it came from.
    workload["arrival"] = spec.with_rate(rate_per_s).model_dump(mode="json", exclude_unset=True)


def variant_raw(raw: dict, variant: str | None) -> dict:
    """The raw scenario of one variant (base when None), without `variants:`."""
    raw = copy.deepcopy(raw)
    variants = raw.pop("variants", None) or {}
    if variant is None or (not variants and variant == raw.get("name", "scenario")):
        return raw
    if variant not in variants:
        raise ConfigError(f"variant: {variant!r} is not in the scenario; allowed: {', '.join(variants) or '(none)'}")
    from sim.config.files import deep_merge
    merged = deep_merge(raw, variants[variant] or {})
    merged["name"] = (variants[variant] or {}).get("name", str(variant))
    return merged


def apply_point(raw: dict, point: dict[str, Any]) -> dict:
    raw = copy.deepcopy(raw)
    for key, value in point.items():
        if key == RATE_KEY:
            set_rate(raw, float(value))
        else:
            set_path(raw, key, value, source="--grid")
    return raw


def canonical_hash(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class PointTask:
    """One simulation: a variant of a scenario with overrides. Plain data, so it pickles to any worker."""

    raw: dict  # the scenario file (relative paths already anchored), variants included
    variant: str | None
    point: dict
    point_id: str


def num_gpus(scenario) -> int:
    hw = scenario.hardware
    return hw.tensor_parallel * hw.pipeline_parallel * hw.num_replicas


def price_per_gpu_hour(scenario, prices: dict[str, float] | None = None) -> float:
    gpu = gpu_spec(scenario)
    prices = prices or {}
    name = scenario.hardware.gpu if isinstance(scenario.hardware.gpu, str) else gpu.name
    return float(prices.get(name, prices.get(gpu.name, gpu.price_per_hour)))


def priced_parts(scenario) -> list:
    """The parts of a deployment priced separately: the scenario itself, or, disaggregated, each pool's
    scenario (its own GPU, TP and replicas; sim/config/disaggregation.py)."""
    if scenario.hardware.disaggregation is None:
        return [scenario]
    from sim.config.disaggregation import POOLS, pool_scenario
    return [pool_scenario(scenario, pool) for pool in POOLS]


def cost_figures(scenario, summary: dict, prices: dict[str, float] | None = None) -> dict:
    """Cost per hour of the deployment (every pool's GPUs) and per million tokens it serves at the simulated load."""
    parts = priced_parts(scenario)
    per_hour = sum(num_gpus(part) * price_per_gpu_hour(part, prices) for part in parts)
    tokens_per_hour = summary.get("total_tokens_per_s", 0.0) * 3600.0
    output_per_hour = summary.get("output_tokens_per_s", 0.0) * 3600.0
    return {
        "num_gpus": sum(num_gpus(part) for part in parts),
        "cost_per_hour": per_hour,
        "cost_per_million_tokens": per_hour / tokens_per_hour * 1e6 if tokens_per_hour else math.nan,
        "cost_per_million_output_tokens": per_hour / output_per_hour * 1e6 if output_per_hour else math.nan,
    }


def _scalar_summary(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if v is None or isinstance(v, (bool, int, float, str))}


def run_point(task: PointTask) -> dict:
    """Simulate one point; a configuration error becomes the row's `error`, not an exception."""
    from sim.config.files import validate_scenario
    from sim.run import simulate
    row: dict[str, Any] = {"point_id": task.point_id, "variant": task.variant or ""}
    row.update({key: _cell(value) for key, value in task.point.items()})
    try:
        scenario = validate_scenario(apply_point(variant_raw(task.raw, task.variant), task.point))
        result = simulate(scenario)
    except ServeSimError as err:
        row["error"] = str(err)
        return row
    row["error"] = ""
    row.update(_scalar_summary(result.summary))
    row.update(cost_figures(scenario, result.summary))
    row["cost_model"] = result.extras.get("cost_model_label", "")  # which cost model priced this point
    return row


def _cell(value: Any) -> Any:
    """Grid values as table cells: scalars stay, mappings and lists become their YAML flow text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip()


# ---------------------------------------------------------------------------------------- backends

def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, as `taskset` sets it), not every CPU of the machine."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity outside Linux
        return os.cpu_count() or 1


def run_tasks(tasks: list, fn: Callable, *, backend: str = "process", workers: int | None = None,
              address: str | None = None) -> Iterator[tuple[Any, Any]]:
    """Yield (task, fn(task)) as tasks finish, on the chosen backend; a process pool has a worker per usable CPU
    unless `workers` says otherwise (one: the tasks run here, in turn)."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend: {backend!r} is not a backend; allowed: {', '.join(BACKENDS)}")
    if not tasks:
        return
    if backend == "serial" or (backend == "process" and (workers or usable_cpus()) == 1):
        for task in tasks:
            yield task, fn(task)
    elif backend == "process":
        yield from _run_process_pool(tasks, fn, workers or usable_cpus())
    else:
        yield from _run_ray(tasks, fn, workers, address)


def _run_process_pool(tasks, fn, workers: int):
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    # forkserver: workers start from a clean interpreter, not a fork of one running progress-bar threads.
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context) as pool:
        pending = {pool.submit(fn, task): task for task in tasks}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield pending.pop(future), future.result()
        finally:
            for future in pending:
                future.cancel()


def _run_ray(tasks, fn, workers: int | None, address: str | None):
    try:
        import ray
    except ImportError:
        raise ServeSimError("--backend: 'ray' needs the ray package; install it with pip install 'servesim[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            if address:
                ray.init(address=address, log_to_driver=False)
            else:
                ray.init(num_cpus=workers or usable_cpus(), include_dashboard=False, log_to_driver=False,
                         _node_ip_address="127.0.0.1")
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ServeSimError(f"--address: cannot connect to a Ray cluster at {address!r}: {err}") from None
    refs: dict = {}
    try:
        remote = ray.remote(fn)
        refs = {remote.remote(task): task for task in tasks}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            for ref in done:
                yield refs.pop(ref), ray.get(ref)
    finally:
        for ref in refs:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


# ------------------------------------------------------------------------------------------ output

@dataclass
class SweepOutput:
    """A sweep's table on disk: the output file plus an append-only journal of points finished since.

    Every finished point is one JSON line, flushed and fsynced, so an interrupted sweep loses nothing;
    `finish()` folds the journal into the output file (temporary name, then rename) and removes it.
    """

    path: Path
    scenario_hash: str
    rows: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.path.suffix not in OUTPUT_SUFFIXES:
            raise ConfigError(f"--out: {str(self.path)!r} must end in {' or '.join(OUTPUT_SUFFIXES)}")
        self.journal = self.path.with_name(self.path.name + ".journal.jsonl")
        if self.path.exists():
            try:
                frame = pd.read_parquet(self.path) if self.path.suffix == ".parquet" else pd.read_csv(self.path)
            except Exception as err:  # noqa: BLE001 - any reader error: not a sweep table we can resume
                raise ConfigError(f"--out: {str(self.path)!r} exists but is not a readable sweep table "
                                  f"({type(err).__name__}); choose another output file or delete it") from None
            if len(frame) and "point_id" not in frame.columns:
                raise ConfigError(f"--out: {str(self.path)!r} exists but is not a sweep table (no point_id "
                                  "column); choose another output file or delete it")
            self.rows = frame.to_dict("records")
        if self.journal.exists():
            for line in self.journal.read_text().splitlines():
                try:
                    self.rows.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line torn by an interrupt: that point runs again
        hashes = {r.get("scenario_hash") for r in self.rows}
        if hashes - {self.scenario_hash}:
            raise ConfigError(f"--out: {str(self.path)!r} holds a sweep of a different scenario or grid base; "
                              "choose another output file or delete it")

    @property
    def done_ids(self) -> set[str]:
        return {r["point_id"] for r in self.rows}

    def append(self, row: dict) -> None:
        row = {"scenario_hash": self.scenario_hash, **row}
        self.rows.append(row)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.journal, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def finish(self, tasks: list[PointTask] | None = None) -> pd.DataFrame:
        frame = order_rows(self.frame(), tasks) if tasks else self.frame()
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.suffix == ".parquet":
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)
        os.replace(tmp, self.path)
        self.journal.unlink(missing_ok=True)
        return frame


@dataclass(frozen=True)
class SweepPlan:
    tasks: list[PointTask]  # every point of the grid
    todo: list[PointTask]  # those not yet in the output
    output: SweepOutput


def plan_sweep(raw: dict, axes: list[GridAxis], out: Path, variants: list[str | None]) -> SweepPlan:
    """The points of a sweep and which of them still need running."""
    base_hash = canonical_hash(raw)
    tasks = []
    for variant in variants:
        for point in grid_points(axes):
            pid = canonical_hash({"variant": variant, "point": point})
            tasks.append(PointTask(raw, variant, point, pid))
    output = SweepOutput(out, base_hash)
    done = output.done_ids
    return SweepPlan(tasks, [t for t in tasks if t.point_id not in done], output)


def order_rows(frame: pd.DataFrame, tasks: list[PointTask]) -> pd.DataFrame:
    """Rows in grid order, whatever order the workers finished in."""
    if frame.empty:
        return frame
    rank = {t.point_id: i for i, t in enumerate(tasks)}
    return (frame.assign(_order=frame["point_id"].map(rank)).sort_values("_order", kind="stable")
            .drop(columns="_order").reset_index(drop=True))
