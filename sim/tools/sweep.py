"""Sweeps: the cross product of scenario keys, each point simulated in its own process.

A point is a set of key -> value overrides applied to one variant of a scenario file. Points run on a
backend (`serial`, a local `process` pool, or `ray`), and every finished point is appended to a journal
at once, so an interrupted sweep loses nothing and a rerun skips what is done (`SweepOutput` says what a
rerun resumes from and what it refuses).
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import itertools
import json
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import pandas as pd
import yaml

from sim.atomic_files import keep_permissions, new_temporary
from sim.config.deployment import gpu_spec
from sim.config.files import load_yaml_text, set_path, validate_arrival
from sim.config.schema import scenario_key_problem
from sim.errors import ConfigError, ServeSimError
from sim.machine import usable_cpus
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
        problem = None if key == RATE_KEY else scenario_key_problem(key)
        if problem:  # a key no point can have is a typo, not a table whose every row says so
            raise ConfigError(f"--grid: {problem}")
        if any(a.key == key for a in axes):
            raise ConfigError(f"--grid: key {key!r} is given twice; put all its values in one --grid")
        values = []
        for item in raw.split(","):
            item = item.strip()
            if not item:
                raise ConfigError(f"--grid: {text!r} has an empty value; allowed: a comma-separated list of values")
            try:
                values.append(load_yaml_text(item))  # the scenario files' reader: no duplicate keys, no huge ints
            except yaml.constructor.ConstructorError as err:  # YAML, but a value the scenario reader refuses
                raise ConfigError(f"--grid: {item!r}: {err.problem}") from None
            except yaml.YAMLError:  # not YAML at all: the text itself
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
    cost_model_choice: str | None = None  # the sweep's shared default model (`shared_cost_choice`), or None


def shared_cost_choice(raw: dict, axes: list[GridAxis]) -> str | None:
    """The `cost_model_choice` that gives every point of a sweep naming no cost model the same kind of default
    model, as `compare` gives a file's variants (sim/config/cost_choice.py `shared_choice`): a sweep over GPUs must
    not set one GPU's whole-step profile against another's kernel tables. Over every variant of the file, not only
    those run, so that it is a function of what the sweep's identity (`sweep_hash`) covers; a point that cannot run
    (a model that does not fit: its row says why) decides nothing. None when every point gets the same anyway."""
    from sim.config.cost_choice import shared_choice
    from sim.config.files import validates
    raws = []
    for variant in list((raw.get("variants") or {}).keys()) or [None]:
        for point in grid_points(axes):
            try:
                raws.append(apply_point(variant_raw(raw, variant), point))
            except ServeSimError:
                continue  # that point's row says why
    return shared_choice(raws, runs=validates)


def check_sweep_scenario(raw: dict, axes: list[GridAxis], source: str, variants: list[str] | None = None) -> None:
    """Every variant of the file valid before a sweep runs (its keys and values: a point whose hardware cannot hold
    the model gets its reason in its row), as written or else with some grid point's values, where the grid gives
    what the file leaves out (`--grid engine.version=0.9.2,0.11.0` over `--set engine.name=vllm`). Where no point
    completes it, the first point's error is raised: it names the grid's value where that is what is wrong.
    `variants` (`--variant`): only these are checked here, the caller having checked the file's other parts as `run
    --variant` does (sim/config/files.py `check_every_part`)."""
    from sim.config.files import build_scenario_set, validate_scenario

    def check(candidate: dict) -> None:
        if not variants:
            build_scenario_set(dict(candidate), source, resolve=False)
        for name in variants or []:
            validate_scenario(variant_raw(candidate, name), prefix=f"variants.{name}.", resolve=False)
    try:
        check(raw)
        return
    except ServeSimError as err:
        problem = err
    for index, point in enumerate(grid_points(axes) if axes else []):
        try:
            check(apply_point(raw, point))
            return
        except ServeSimError as err:
            problem = err if index == 0 else problem
    raise problem


def point_raw(task: PointTask) -> dict:
    """The raw scenario one point simulates: its variant with the point's overrides, and the sweep's shared
    default model where it names none."""
    from sim.config.cost_choice import with_shared_choice
    return with_shared_choice(apply_point(variant_raw(task.raw, task.variant), task.point), task.cost_model_choice)


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


def served_tokens_per_s(summary: dict) -> tuple[float, float]:
    """(all, output) tokens a second a deployment serves at a run's load (sim/results.py
    load_and_sustained_rates): the load offered where the run met its SLOs, which it keeps up with by the user's own
    limits, less the requests it refused (the SLO's percentile may allow a few); else, or without SLOs, the rate it
    sustained (over the run's steady-state window, or the arrivals' second half). Not the whole-run rates: their time
    includes the drain."""
    kind = "admitted" if summary.get("slo_met") else "sustained"
    return summary.get(f"{kind}_tokens_per_s", 0.0), summary.get(f"{kind}_output_tokens_per_s", 0.0)


def cost_figures(scenario, summary: dict, prices: dict[str, float] | None = None) -> dict:
    """Cost per hour of the deployment (every pool's GPUs) and per million tokens it serves at the simulated load
    (`served_tokens_per_s`)."""
    parts = priced_parts(scenario)
    per_hour = sum(num_gpus(part) * price_per_gpu_hour(part, prices) for part in parts)
    tokens_per_hour, output_per_hour = (rate * 3600.0 for rate in served_tokens_per_s(summary))
    return {
        "num_gpus": sum(num_gpus(part) for part in parts),
        "cost_per_hour": per_hour,
        "cost_per_million_tokens": per_hour / tokens_per_hour * 1e6 if tokens_per_hour else math.nan,
        "cost_per_million_output_tokens": per_hour / output_per_hour * 1e6 if output_per_hour else math.nan,
    }


def scalar_summary(summary: dict) -> dict:
    """A summary's scalar entries: a table's columns (a sweep's rows, plan-pools' splits.csv)."""
    return {k: v for k, v in summary.items() if v is None or isinstance(v, (bool, int, float, str))}


def run_point(task: PointTask) -> dict:
    """Simulate one point; a configuration error becomes the row's `error`, not an exception."""
    from sim.bands import simulate_with_band as simulate  # with run.band: the band's columns too
    from sim.config.files import validate_scenario
    row: dict[str, Any] = {"point_id": task.point_id, "variant": task.variant or ""}
    row.update({key: _cell(value) for key, value in task.point.items()})
    try:
        scenario = validate_scenario(point_raw(task))
        result = simulate(scenario)
    except ServeSimError as err:
        row["error"] = str(err)
        return row
    row["error"] = ""
    row.update(scalar_summary(result.summary))
    row.update(cost_figures(scenario, result.summary))
    row["cost_model"] = result.extras.get("cost_model_label", "")  # which cost model priced this point
    row.update(band_columns(result.summary.get("band")))
    return row


def band_columns(band: dict | None) -> dict:
    """A banded point's columns (issue 31): `<metric>_lo` / `<metric>_hi` for each headline figure
    (sim/bands.py BAND_METRICS), and the band's level, replications and how many of them met the SLOs."""
    if not band:
        return {}
    from sim.bands import BAND_METRICS
    out: dict[str, Any] = {"band_level": band["level"], "band_replications": band["replications"],
                           "band_slo_met_replications": band.get("slo_met_replications")}
    for name in BAND_METRICS:
        edges = band.get(name)
        out[f"{name}_lo"], out[f"{name}_hi"] = (edges[0], edges[1]) if edges else (None, None)
    return out


def _cell(value: Any) -> Any:
    """Grid values as table cells: scalars stay, mappings and lists become their YAML flow text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip()


# ---------------------------------------------------------------------------------------- backends

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

JOURNAL_SUFFIX = ".journal.jsonl"
# The cells every row ServeSim writes has: a table without them is not a sweep table, and is never replaced.
IDENTITY_COLUMNS = ("scenario_hash", "point_id", "variant", "error")
_HASH_FORM = re.compile(r"[0-9a-f]{16}")  # what canonical_hash gives: point ids and scenario hashes
# A journal record is one line, {"digest": canonical_hash(row), "row": row}, the digest first: a line torn by an
# interrupt starts with this prefix (or is the start of it), which tells it from a line of anything else.
_RECORD_PREFIX = b'{"digest": "'
_TABLE_ALLOWED = "allowed: a new file, or a sweep table ServeSim wrote (to resume it)"
_JOURNAL_ALLOWED = "allowed: the journal file a sweep appends to (moved away, the points it holds run again)"
_OTHER_SWEEP = "a sweep of a different scenario or over other --grid keys"


def journal_path(out: Path) -> Path:
    """Where the points finished since the table was last written are kept: beside it, named after it."""
    return out.with_name(out.name + JOURNAL_SUFFIX)


def sweep_hash(raw: dict, axes: list[GridAxis]) -> str:
    """What a table's rows must share to be resumed together: the scenario and the grid's keys (not its values,
    so a grid can be extended). Rows of other keys would leave each other's grid cells empty."""
    return canonical_hash({"scenario": raw, "grid_keys": sorted(a.key for a in axes)})


def _is_hash(value: Any) -> bool:
    return isinstance(value, str) and _HASH_FORM.fullmatch(value) is not None


def _is_missing(value: Any) -> bool:
    """An empty cell: None, NaN or NA (a list or array in a cell is a value)."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _read_plain_file(path: Path, refuse: Callable[[str], ConfigError]) -> bytes | None:
    """The bytes of `path`, None where nothing is there. A folder, a link (replacing it would destroy the user's
    link), a device or pipe (reading would block) or a file that cannot be read is refused with one line."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as err:
        raise refuse(f"cannot be examined ({err.strerror or err})") from None
    if stat.S_ISLNK(mode):
        raise refuse("is a symbolic link, not a plain file")
    if stat.S_ISDIR(mode):
        raise refuse("is a folder")
    if not stat.S_ISREG(mode):
        raise refuse("is not a plain file")
    try:
        return path.read_bytes()
    except OSError as err:
        raise refuse(f"cannot be read ({err.strerror or err})") from None


# -------------------------------------------------------------------------------- reading the table

def read_table_rows(path: Path, scenario_hash: str, grid_keys: Iterable[str] = ()) -> list[dict]:
    """The rows of the sweep table at `path` ([] where there is none). `finish()` replaces this file, so anything
    but a whole table ServeSim wrote for this scenario and these grid keys is refused, before any simulating."""
    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"--out: {str(path)!r} {problem}; {_TABLE_ALLOWED}")

    data = _read_plain_file(path, refuse)
    if data is None:
        return []
    frame = _parse_parquet(data, refuse) if path.suffix == ".parquet" else _parse_csv(data, refuse)
    return _table_rows(frame, scenario_hash, [*IDENTITY_COLUMNS, *grid_keys], refuse)


def _parse_parquet(data: bytes, refuse: Callable[[str], ConfigError]) -> pd.DataFrame:
    try:
        return pd.read_parquet(io.BytesIO(data))
    except Exception as err:  # noqa: BLE001 - any reader error: not a table we can resume
        raise refuse(f"exists but is not a readable sweep table ({type(err).__name__})") from None


def _parse_csv(data: bytes, refuse: Callable[[str], ConfigError]) -> pd.DataFrame:
    """A CSV table ServeSim wrote, whole: UTF-8, every row as wide as the header, ending with a line end (pandas
    would fill a row cut short with empty cells, and the cut point would count as done)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise refuse(f"is not UTF-8 text (byte {err.start}), so not a sweep table ServeSim wrote") from None
    if not text:
        raise refuse("is empty, so not a sweep table ServeSim wrote")
    if not text.endswith("\n"):
        raise refuse("ends mid-row (the file was cut short)")
    try:
        records = list(csv.reader(io.StringIO(text)))
    except csv.Error as err:
        raise refuse(f"exists but is not a readable sweep table ({err})") from None
    width = len(records[0])
    for number, record in enumerate(records[1:], 1):
        if len(record) != width:
            raise refuse(f"row {number} has {len(record)} of its {width} cells (cut short or edited)")
    try:
        # Ids as text (a point id of digits only must not become a number); only an empty cell is missing (a grid
        # value "None" or "NA" stays the text it was).
        return pd.read_csv(io.StringIO(text), dtype={c: str for c in IDENTITY_COLUMNS if c in records[0]},
                           keep_default_na=False, na_values=[""])
    except Exception as err:  # noqa: BLE001 - any reader error: not a table we can resume
        raise refuse(f"exists but is not a readable sweep table ({type(err).__name__})") from None


def _table_rows(frame: pd.DataFrame, scenario_hash: str, columns: list[str],
                refuse: Callable[[str], ConfigError]) -> list[dict]:
    """The rows of a parsed table, each of a point of this sweep; else one line saying what is wrong. `columns`:
    the cells every row of this sweep has (its ids and grid keys), which a row restored must not leave empty."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise refuse(f"is not a sweep table ServeSim wrote for this grid (no {missing[0]} column)")
    if frame.empty:
        raise refuse("is not a sweep table ServeSim wrote (no rows)")
    rows = frame.to_dict("records")
    for number, row in enumerate(rows, 1):
        if not _is_hash(row["point_id"]):
            raise refuse(f"is not a sweep table ServeSim wrote (row {number} has no valid point_id)")
        if row["scenario_hash"] != scenario_hash:
            raise refuse(f"holds {_OTHER_SWEEP} (row {number})")
        for key in ("variant", "error"):  # a fresh row has "" here; CSV reads an empty cell as missing
            if _is_missing(row[key]):
                row[key] = ""
    return rows


# ------------------------------------------------------------------------------ reading the journal

@dataclass(frozen=True)
class JournalContents:
    rows: list[dict]
    whole_bytes: int  # where its last whole line ends: a torn line after it is cut off before the next append
    size: int  # as it was read


def read_journal(path: Path, scenario_hash: str) -> JournalContents:
    """The points a journal holds. Its last line, torn by an interrupt (no line end), is dropped and that point
    runs again; any other line that is not a record ServeSim wrote for this sweep is refused with one line naming
    the file and the line: the journal is appended to and then removed, so it must be ServeSim's own."""
    def refuse(problem: str) -> ConfigError:
        return ConfigError(f"--out: journal {str(path)!r} {problem}; {_JOURNAL_ALLOWED}")

    data = _read_plain_file(path, refuse)
    if data is None:
        return JournalContents([], 0, 0)
    whole_bytes = data.rfind(b"\n") + 1
    lines = data[:whole_bytes].split(b"\n")[:-1]
    rows = [_journal_row(line, f"line {number}", scenario_hash, refuse) for number, line in enumerate(lines, 1)]
    torn = data[whole_bytes:]
    if torn and torn[:len(_RECORD_PREFIX)] != _RECORD_PREFIX[:len(torn)]:
        raise refuse(f"line {len(lines) + 1} is not a record ServeSim wrote (and has no line end)")
    return JournalContents(rows, whole_bytes, len(data))


def _journal_row(line: bytes, where: str, scenario_hash: str, refuse: Callable[[str], ConfigError]) -> dict:
    """The row of one whole journal line; its digest proves it is the line `append` wrote, byte for byte in
    meaning (bytes inserted into a number would otherwise pass as a result)."""
    try:
        record = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        raise refuse(f"{where} is not UTF-8 text") from None
    except (ValueError, RecursionError):
        raise refuse(f"{where} is not JSON") from None
    if not (isinstance(record, dict) and set(record) == {"digest", "row"} and isinstance(record["row"], dict)):
        raise refuse(f"{where} is {_json_kind(record)}, not a record of a finished point")
    row = record["row"]
    if record["digest"] != canonical_hash(row):
        raise refuse(f"{where} does not match its digest (edited or damaged)")
    if not _is_hash(row.get("point_id")):
        raise refuse(f"{where} has no valid point_id")
    if row.get("scenario_hash") != scenario_hash:
        raise refuse(f"{where} belongs to {_OTHER_SWEEP}")
    return row


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object without digest and row"
    return {list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def journal_line(row: dict) -> bytes:
    """One journal record, ASCII, with its line end: what `read_journal` reads back as `row`."""
    record = {"digest": canonical_hash(row), "row": row}
    return (json.dumps(record, default=str) + "\n").encode("ascii")


# ------------------------------------------------------------------------------------------ writing

def _one_row_per_point(rows: Iterable[dict]) -> dict[str, dict]:
    """Each point once. A point found twice (a table row whose journal line outlived a `finish()` killed before
    it removed the journal; two sweeps writing one output) has two records of the same simulation of the same
    scenario, both ServeSim's: the last (the most recent) is kept, in the place of the first, so the order of
    the table stays."""
    by_id: dict[str, dict] = {}
    for row in rows:
        by_id[row["point_id"]] = row
    return by_id


def _file_state(path: Path) -> tuple | None:
    """Enough of a file's metadata to tell whether anything replaced or changed it since."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _fsync_folder(folder: Path) -> None:
    """Make a file's creation or rename in `folder` durable (where the system allows opening a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _parquet_ready(frame: pd.DataFrame) -> pd.DataFrame:
    """Parquet holds one type per column: a column mixing kinds of value (a grid key swept over 8 and 'abc') is
    written as text, which reads back as the same text on resume."""
    mixed = [c for c in frame.columns if frame[c].dtype == object
             and len({type(v) for v in frame[c] if not _is_missing(v)}) > 1]
    if not mixed:
        return frame
    frame = frame.copy()
    for column in mixed:
        frame[column] = [None if _is_missing(v) else str(v) for v in frame[column]]
    return frame


def _write_table(frame: pd.DataFrame, path: Path) -> None:
    """`frame` at `path` in one rename: written under a unique temporary name beside it and synced first, so a
    kill leaves the old table or the new one, never part of one. On failure the temporary file goes."""
    tmp = new_temporary(path)
    try:
        if path.suffix == ".parquet":
            _parquet_ready(frame).to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        keep_permissions(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


class SweepOutput:
    """A sweep's table on disk: the output file plus an append-only journal of the points finished since.

    Every finished point is one checksummed line of the journal, written and synced before the next point is
    taken, so a sweep killed at any moment loses at most the point it was writing; `finish()` folds the journal
    into the table (temporary name, then rename) and removes it.

    Resuming: the table and the journal must be ServeSim's own, of this scenario and these grid keys; anything
    else (a user's file, a folder, damage anywhere but a torn last journal line) is refused with one line naming
    the file, before any simulating, and nothing is changed. Each point is held once (`_one_row_per_point`).
    Points of the same scenario and grid keys that the current grid no longer lists (other values) stay in the
    table, after the current grid's: a grid can be extended or narrowed without losing what was computed.
    """

    def __init__(self, path: Path | str, scenario_hash: str, grid_keys: Iterable[str] = ()) -> None:
        self.path = Path(path)
        if self.path.suffix not in OUTPUT_SUFFIXES:
            raise ConfigError(f"--out: {str(self.path)!r} must end in {' or '.join(OUTPUT_SUFFIXES)}")
        self.scenario_hash = scenario_hash
        self.journal = journal_path(self.path)
        self._table_state = _file_state(self.path)  # taken before reading: any change since is seen by finish()
        table_rows = read_table_rows(self.path, scenario_hash, grid_keys)
        journal = read_journal(self.journal, scenario_hash)
        self._torn_line = (journal.whole_bytes, journal.size) if journal.size > journal.whole_bytes else None
        self._rows = _one_row_per_point([*table_rows, *journal.rows])

    @property
    def rows(self) -> list[dict]:
        return list(self._rows.values())

    @property
    def done_ids(self) -> set[str]:
        return set(self._rows)

    def append(self, row: dict) -> None:
        """Record a finished point: one line, synced before this returns."""
        row = {"scenario_hash": self.scenario_hash, **row}
        try:
            self._append_line(journal_line(row))
        except OSError as err:
            raise ConfigError(f"--out: cannot append to journal {str(self.journal)!r} ({err.strerror or err}); "
                              "allowed: a folder that takes new files; the points finished so far are kept") from None
        self._rows[row["point_id"]] = row

    def _append_line(self, line: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._cut_torn_line()
        created = not os.path.lexists(self.journal)
        # O_APPEND: one write at the end, so an interrupt leaves at most this line torn; O_NOFOLLOW: a link put
        # there since the journal was read is not followed.
        fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        try:
            _write_all(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            _fsync_folder(self.journal.parent)

    def _cut_torn_line(self) -> None:
        """Before the first append: drop the torn line an interrupt left, else the new line would join it and both
        would read as damage. Only while the journal is as it was read (another sweep may be writing it)."""
        if self._torn_line is None:
            return
        (whole_bytes, size_read), self._torn_line = self._torn_line, None
        state = _file_state(self.journal)
        if state is not None and state[1] == size_read:
            os.truncate(self.journal, whole_bytes)

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def finish(self, tasks: list[PointTask] | None = None) -> pd.DataFrame:
        """Write every point into the table (grid order where `tasks` are given) and remove the journal."""
        frame = pd.DataFrame(order_rows(self.rows, tasks) if tasks else self.rows)
        if _file_state(self.path) != self._table_state:
            raise ConfigError(f"--out: {str(self.path)!r} changed while the sweep ran, so it is left as it is; the "
                              f"finished points are kept in {str(self.journal)!r}; allowed: run the sweep again to "
                              "write them")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _write_table(frame, self.path)
        except OSError as err:
            raise ConfigError(f"--out: {str(self.path)!r} cannot be written ({err.strerror or err}); the finished "
                              f"points are kept in {str(self.journal)!r}; allowed: a writable path (then run the "
                              "sweep again)") from None
        self.journal.unlink(missing_ok=True)
        self._table_state = _file_state(self.path)
        return frame


@dataclass(frozen=True)
class SweepPlan:
    tasks: list[PointTask]  # every point of the grid
    todo: list[PointTask]  # those not yet in the output
    output: SweepOutput


def plan_sweep(raw: dict, axes: list[GridAxis], out: Path, variants: list[str | None]) -> SweepPlan:
    """The points of a sweep and which of them still need running."""
    base_hash = sweep_hash(raw, axes)
    shared = shared_cost_choice(raw, axes)
    tasks = []
    for variant in variants:
        for point in grid_points(axes):
            pid = canonical_hash({"variant": variant, "point": point})
            tasks.append(PointTask(raw, variant, point, pid, shared))
    output = SweepOutput(out, base_hash, [a.key for a in axes])
    done = output.done_ids
    return SweepPlan(tasks, [t for t in tasks if t.point_id not in done], output)


def order_rows(rows: list[dict], tasks: list[PointTask]) -> list[dict]:
    """Rows in grid order, whatever order the workers finished in; rows of points the grid no longer lists (kept
    from an earlier sweep of other values) after them, in their earlier order. Ordered before they become a
    table, so its columns come in the same order however the points finished."""
    rank = {t.point_id: i for i, t in enumerate(tasks)}
    return sorted(rows, key=lambda row: rank.get(row["point_id"], len(rank)))
