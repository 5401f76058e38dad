"""The presets' fitted numbers (engine_terms.json): each engine version's CPU terms and front-end latency, the
nearest fitted version where a version has none, and how far apart two releases are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sim.config.engines.base import ENGINE_LABELS, dotted_version, parse_version, version_suffix
from sim.errors import ConfigError


# The presets' fitted numbers (the engine's CPU time per step, the front-end's latency), per engine and version, with
# the runs they were fitted on: written by `benchmarks/bench_published.py --write-terms` (the published suite's
# held-out protocol, benchmarks/published_suite.py fit_preset), read here. Absent for a version: the nearest
# fitted version of the engine, and the preset says so; none at all: the estimates of sim/cost/overhead.py.
TERMS_PATH = Path(__file__).resolve().parents[1] / "engine_terms.json"


@lru_cache(maxsize=1)
def fitted_table() -> dict:
    """The shipped fits (TERMS_PATH). Unreadable is an install without its data (pyproject.toml's package-data), not
    "no fits": refused in one line rather than priced with the estimates."""
    try:
        return json.loads(TERMS_PATH.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"engine presets: their fitted terms, {TERMS_PATH}, cannot be read ({type(err).__name__}); "
                          "allowed: an install that ships them (the repository, or a wheel built from it)") from None


def fitted_terms(name: str, version: str, table: dict | None = None) -> tuple[dict, str] | None:
    """(the fitted numbers, where they come from) for this engine version, as a scenario names it ("0.5.5.post1",
    its suffix kept: `_is_version`): each term from its own fit, else from the nearest version whose fit identified
    it (said in the source); None when the engine has none. `table`: the fits to read, as engine_terms.json holds
    them (None: the shipped ones)."""
    table = fitted_table() if table is None else table
    nearest = nearest_fits(name, version, table)
    if not nearest:
        return None
    by_version: dict[tuple[str, bool], list[str]] = {}
    for term, fit in nearest.items():
        by_version.setdefault((fit.version, fit.borrowed), []).append(term)
    parts = []
    for (text, borrowed), terms in by_version.items():
        entry = table["engines"][name][text]
        part = f"fitted on {', '.join(entry.get('fitted_on', [])) or 'no run'} ({name} {text})"
        if len(by_version) > 1:
            part = f"{', '.join(terms)} {part}"
        if borrowed:
            part += f", taken for {name} {dotted_version(version)}, {why_borrowed(name, version, terms, table)}"
        parts.append(part)
    return {term: fit.value for term, fit in nearest.items()}, "; ".join(parts)


def fit_name(name: str, versions) -> str:
    """How a cost model's label names the fit of an engine's versions (`cost_model.overhead.fitted_for`)."""
    return f"{ENGINE_LABELS[name]} {', '.join(versions)}"


def why_borrowed(name: str, version: str, terms=(), table: dict | None = None) -> str:
    """Why a version takes `terms` from another version's fit: it has none, its own left a term at a bound (then none
    of its terms is used: `nearest_fits`), or its own did not pin them (a 90% range reaching past the bound:
    `calibrate.engine_fit.not_pinned`). `table`: as `nearest_fits`'s."""
    table = (fitted_table() if table is None else table).get("engines", {}).get(name, {})
    own = [entry for v, entry in table.items() if _is_version(v, version)]
    if not own:
        return "which has no fit of its own"
    if left_at_a_bound(own[0].get("at_bound", [])):
        bound = ", ".join(flag.removesuffix(" at bound") for flag in own[0]["at_bound"])
        return f"whose own fit left {bound} at a bound (its runs not reproduced; none of its terms is used)"
    if any(f"{t} not pinned" in own[0].get("not_pinned", []) for t in terms):
        return "whose own fit did not pin it (its 90% range reaches past the fit's bound)"
    return "whose own fit has no such term (its runs do not measure it)"


def release_distance(other: tuple[int, ...], version: tuple[int, ...]) -> tuple[int, ...]:
    """How far `other` lies from `version` in release order, as a sort key (smaller is nearer). The same release is
    nearest; then one that shares more leading numbers (0.5.6 is nearer 0.5.3 than 0.4.9 is); then the one whose
    first differing number is closer (for 0.4.6, 0.5.x before 0.7.x; for 1.0.0, 0.11.0 before 0.6.0); then a later
    release before an earlier one (a convention: for 0.4.6, 0.5.x before 0.3.x); then, of releases on one side, the
    one closer in order (for 0.4.6, 0.5.3 before 0.5.5; for 0.6.0, 0.5.5 before 0.5.3)."""
    width = max(len(other), len(version))
    a, b = other + (0,) * (width - len(other)), version + (0,) * (width - len(version))
    if a == b:
        return (0,)
    first = next(i for i in range(width) if a[i] != b[i])
    later = a > b
    rest = a[first + 1:] if later else tuple(-n for n in a[first + 1:])
    return (1, -first, abs(a[first] - b[first]), int(not later), *rest)


def _is_version(fitted: str, version: str) -> bool:
    """Whether a fitted version's text names this version: its release numbers (a shorter text, "0.17", names every
    0.17.x) and its suffix (the fit of 0.5.3.post3 is not 0.5.3's)."""
    parsed, numbers = parse_version(fitted), parse_version(version)
    return (parsed is not None and numbers[:len(parsed)] == parsed
            and version_suffix(fitted) == version_suffix(version))


def _post_distance(fitted: str, version: str) -> tuple[bool, int]:
    """Between fits of one release, the suffix's distance (a sort key): the same suffix first, then the nearer post
    release (0.5.3.post3 before 0.5.3 for 0.5.3.post2)."""
    (pre, post), (wanted_pre, wanted_post) = version_suffix(fitted), version_suffix(version)
    steps = abs(max(post, 0) - max(wanted_post, 0)) + (pre != wanted_pre)  # the release itself one step from .post1
    return (pre, post) != (wanted_pre, wanted_post), steps


def left_at_a_bound(flags) -> bool:
    """Whether a fit left any term at a bound (`flags` as `usable_terms` reads them): then no version uses any of its
    terms (`usable_terms` gives none)."""
    return any(str(flag).endswith(" at bound") for flag in flags)


def usable_terms(terms: dict, flags) -> dict:
    """The fitted terms a preset may use: none of a fit that left any term at a bound (`left_at_a_bound`: its other
    terms took up what the model could not reproduce), else every one but those `flags` name "<term> not pinned"
    (`calibrate.engine_fit.not_pinned`): their runs did not identify them. The one rule for engine_terms.json's
    entries (`at_bound`, `not_pinned` lists) and the published suite's fits (the same names as keys)."""
    if left_at_a_bound(flags):
        return {}
    flagged = set(flags)
    return {k: v for k, v in terms.items() if f"{k} not pinned" not in flagged}


@dataclass(frozen=True)
class NearestFit:
    """One fitted term as a version's preset takes it: from `version`'s fit (`borrowed`: another version's)."""

    version: str
    value: float
    borrowed: bool


def nearest_fits(name: str, version: str, table: dict | None = None) -> dict[str, NearestFit]:
    """Per term, its fit for this engine version: the version's own, else the nearest fitted version's whose fit
    identified that term (a term the fit left at a bound, or whose 90% range reaches past the bound, was not
    identified by its runs: never used as if it had been); empty when the engine has none. Per term, so that a
    version whose own fit pinned only its CPU time still takes its front-end latency from the nearest version that
    pinned one, not from none.

    A fit that left any term at a bound is used by no version, its own included: the model could not reproduce its
    runs, and its other terms took up what that one could not, so they are not the quantities they name (vLLM 0.9.2's
    9.9 ms and SGLang 0.5.5.post1's 17 ms of CPU time a step, where SGLang 0.5.5.post1's own scheduler was measured at
    0.07 ms and 7 us a request: benchmarks/RESULTS.md, "A fit left at a bound serves no version"). Its version takes
    the nearest fit that reproduced its runs, as a version without a fit does. `table`: the fits to read, as
    engine_terms.json holds them (None: the shipped ones)."""
    numbers = parse_version(version)
    table = (fitted_table() if table is None else table).get("engines", {}).get(name, {})
    usable = {v: usable_terms(e.get("terms", {}), [*e.get("at_bound", []), *e.get("not_pinned", [])])
              for v, e in table.items()}
    candidates = [(text, parsed) for text, parsed in ((v, parse_version(v)) for v in usable) if parsed is not None]

    out: dict[str, NearestFit] = {}
    for term in sorted({t for text, _ in candidates for t in usable[text]}):
        having = [(text, parsed) for text, parsed in candidates if term in usable[text]]
        text, _ = min(having, key=lambda c: (release_distance(c[1], numbers), _post_distance(c[0], version), c[0]))
        out[term] = NearestFit(text, float(usable[text][term]), not _is_version(text, version))
    return out
