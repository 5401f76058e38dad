"""Two runs of the published suite side by side: what moved between two `bench_published.py --csv` files.

    PYTHONPATH=. .venv/bin/python benchmarks/published_diff.py BEFORE.csv AFTER.csv [--all-metrics]

Prints, over the held-out runs, each engine's median / max |error| of the three headline metrics before -> after,
the same per engine version where any of its figures moved, then every figure whose error moved (case, role,
metric, before -> after, closer or not; the headline metrics only unless `--all-metrics`) and the counts. The history
entries of benchmarks/results/*.md quote these: a change names every run it moved. Compares what the two files hold;
simulates nothing.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from published_suite import ENGINE_LABELS, HEADLINE  # noqa: E402

KEY = ["case", "metric"]
COLUMNS = ("case", "engine", "version", "role", "metric", "error")


class DiffInputError(ValueError):
    """A file that is not a `bench_published.py --csv` output: one line naming it and what it lacks."""


def read_rows(path: Path) -> pd.DataFrame:
    """One suite CSV's rows, keyed by (case, metric)."""
    try:
        rows = pd.read_csv(path)
    except FileNotFoundError:
        raise DiffInputError(f"{path}: no such file") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DiffInputError(f"{path}: not a CSV ({' '.join(str(e).split())})") from None
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise DiffInputError(f"{path}: no column {missing[0]!r}; allowed: a bench_published.py --csv file (columns "
                             f"{', '.join(COLUMNS)}, ...)")
    if rows.duplicated(KEY).any():
        case, metric = rows.loc[rows.duplicated(KEY), KEY].iloc[0]
        raise DiffInputError(f"{path}: case {case!r} has metric {metric!r} twice; allowed: one row per case and metric")
    rows["version"] = rows["version"].astype(str)
    return rows.set_index(KEY)


def moved(before: pd.Series, after: pd.Series) -> pd.Series:
    """Whether each error changed, bit for bit (NaN on both sides: unchanged)."""
    return (before != after) & ~(before.isna() & after.isna())


def spread(errors: pd.Series) -> str:
    """'median / max |error|' in percent, with the count; '-' where there is none."""
    e = errors.dropna().abs() * 100
    return f"{e.median():.1f} / {e.max():.0f} (n={len(e)})" if len(e) else "-"


def summary_rows(rows: pd.DataFrame, by: list[str]) -> dict[tuple, list[str]]:
    held = rows[rows["role"] == "held-out"]
    out: dict[tuple, list[str]] = {}
    for group, part in held.groupby(by, sort=False):
        group = group if isinstance(group, tuple) else (group,)
        errors = part["error"]
        out[group] = [spread(errors[part.index.get_level_values("metric") == m]) for m in HEADLINE]
    return out


def print_summary(before: pd.DataFrame, after: pd.DataFrame, by: list[str], only: set | None = None) -> None:
    old, new = summary_rows(before, by), summary_rows(after, by)
    print("| " + " | ".join(by) + " | throughput | TTFT | TPOT/ITL |")
    print("| " + " | ".join("---" for _ in by) + " | --- | --- | --- |")
    for group in sorted(set(old) | set(new), key=lambda g: tuple(map(str, g))):
        if only is not None and group not in only:
            continue
        cells = [f"{a} -> {b}" if a != b else a for a, b in zip(old.get(group, ["-"] * 3), new.get(group, ["-"] * 3))]
        label = [ENGINE_LABELS.get(group[0], group[0])] + [str(g) for g in group[1:]]
        print("| " + " | ".join(label + cells) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--all-metrics", action="store_true", help="list moved ITL, median TPOT, duration and peak "
                    "figures too (the summaries are always the headline metrics')")
    args = ap.parse_args(argv)
    try:
        before, after = read_rows(args.before), read_rows(args.after)
    except DiffInputError as e:
        print(f"published_diff: {e}", file=sys.stderr)
        return 2
    common = before.index.intersection(after.index)
    changed = common[moved(before.loc[common, "error"], after.loc[common, "error"]).to_numpy()]
    figures = changed if args.all_metrics else changed[changed.get_level_values("metric").isin(HEADLINE)]
    versions = set(before.loc[changed, ["engine", "version"]].itertuples(index=False, name=None))

    print(f"# {args.before} -> {args.after}\n\n## Per engine, held-out runs: median / max |error| %\n")
    print_summary(before, after, ["engine"])
    print("\n## Per engine version with a figure that moved, held-out runs\n")
    if versions:
        print_summary(before, after, ["engine", "version"], only=versions)
    else:
        print("none")
    print(f"\n## Figures that moved ({'every metric' if args.all_metrics else 'headline metrics'})\n")
    closer = 0
    print("| case | role | metric | before | after | closer |\n| --- | --- | --- | ---: | ---: | --- |"
          if len(figures) else "none")
    for case, metric in figures:
        a, b = before.loc[(case, metric), "error"], after.loc[(case, metric), "error"]
        nearer = not math.isnan(b) and (math.isnan(a) or abs(b) < abs(a))
        closer += nearer
        print(f"| {case} | {after.loc[(case, metric), 'role']} | {metric} | {a:+.1%} | {b:+.1%} | "
              f"{'yes' if nearer else 'no'} |")
    print(f"\n{len(figures)} figures moved, {closer} came closer; {len(changed)} moved in all metrics.")
    only_before, only_after = before.index.difference(after.index), after.index.difference(before.index)
    if len(only_before) or len(only_after):
        print(f"In one file only: {len(only_before)} figures before, {len(only_after)} after (not compared).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
