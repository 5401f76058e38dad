"""The verdict every view opens with: which variants meet the SLOs and at what goodput, the winner and by how
much, why the others trail, and which cost model and engine core priced the runs.

Pure Python over summary dicts (`Result.summary`, or a `summary.json`), so the CLI, the HTML report, the
dashboard and the tests all read the same answer. `decide(entries)` returns a `Verdict`; `verdict_of(results)`
builds the entries from `Result`s; `Verdict.text()` / `.html()` / `.markdown()` render it.

The rule (also in docs/dashboard.md, "The verdict"):

1. A variant *meets the SLOs* when its summary says so (`slo_met`: every limit met at the SLO percentile,
   every request finished, and `min_goodput_fraction` where set). Without limits (`slo_met` None everywhere)
   every finished request counts as goodput.
2. The candidates are the variants that meet the SLOs; when none does, every variant (the first is then the
   *closest*: it serves the most requests within every limit).
3. Candidates are compared on the deciding metrics in order, `CRITERIA`: goodput (higher is better), then the
   SLO-percentile TTFT, TPOT and E2E (lower is better), then throughput; a scenario's `slo.rank_by` names the
   metrics to take first (`criteria_of`), the rest following in that order. At each metric, the candidates *level*
   with the best stay and the others drop out. Level: within `LEVEL_TOLERANCE` (2 %) of each other, or, where
   `bands` (confidence intervals per variant and summary key) are given, bands that overlap ("within the
   band"). On goodput, variants that ran the same requests and had as many meet every SLO are level whatever
   their rates: a rate counts the whole run, drain included, so it differs only by how long the last answers took.
4. Those left are the winners; the first of them by the exact values (same order, then scenario order) is
   *the* winner, and the others are "level with" it. The margin is read against the best of the rest.
5. Why: each variant that misses the SLOs or trails gets one sentence, the first diagnosis of `DIAGNOSES` that
   applies, each with its numbers: rejected requests, static batching waiting for the longest answer, KV
   memory reserved but unused (contiguous), preemptions, an overloaded queue, unfinished requests, slow
   decode steps (TPOT), slow prefill (TTFT), else the metric it trails on.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from sim.config.schema import VERDICT_METRICS
from sim.results import good_requests

LEVEL_TOLERANCE = 0.02  # relative: two values closer than this are level (no bands given)
Band = tuple[float, float]  # (low, high) of a summary value
Bands = Mapping[str, Mapping[str, Band]]  # variant name -> summary key -> band
# (A, B) -> summary key -> the band of B − A over replications with common random numbers (sim/bands.py
# `pair_differences`): with it the decision says whether the winner's margin holds across the band (issue 31).
Differences = Mapping[tuple[str, str], Mapping[str, Band]]


@dataclass(frozen=True)
class Limits:
    """A scenario's SLO section, as plain numbers (None: no such limit)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: float = 99.0
    min_goodput_fraction: float | None = None
    rank_by: tuple[str, ...] | None = None  # the deciding metrics to take first (slo.rank_by)

    def of(self, metric: str) -> float | None:
        return getattr(self, f"{metric}_s")


@dataclass(frozen=True)
class Entry:
    """One variant as the verdict reads it: its summary, and what its scenario says where a diagnosis needs it
    (None where unknown, e.g. a bare summary.json)."""

    name: str
    summary: Mapping[str, Any]
    limits: Limits | None = None
    batching: str | None = None  # "static" | "continuous"
    layout: str | None = None  # "paged" | "contiguous"
    reserve: str | None = None  # contiguous: "max_len" | "oracle" | ...
    preemption: str | None = None  # "recompute" | "swap"
    cost_model: str | None = None  # Result.extras["cost_model_label"]
    engine: str | None = None  # Result.extras["engine_core"]
    reject_reason: str | None = None  # why the first rejected request can never run (Result.first_reject_reason)


@dataclass(frozen=True)
class Criterion:
    key: str  # "goodput", "ttft", "tpot", "e2e", "throughput"
    label: str
    higher_is_better: bool
    unit: str


_CRITERION = {c.key: c for c in (
    Criterion("goodput", "goodput", True, "req/s"), Criterion("ttft", "TTFT", False, "s"),
    Criterion("tpot", "TPOT", False, "s"), Criterion("e2e", "E2E", False, "s"),
    Criterion("throughput", "throughput", True, "req/s"))}
CRITERIA = tuple(_CRITERION[key] for key in VERDICT_METRICS)  # the default order
_LATENCIES = ("ttft", "tpot", "e2e")


def criteria_of(entry: Entry) -> tuple[Criterion, ...]:
    """The deciding metrics in the order this variant's scenario ranks by: those `slo.rank_by` names, then the others
    in the default order. A file's variants share one order (sim/config/files.py checks it)."""
    first = entry.limits.rank_by if entry.limits is not None and entry.limits.rank_by else ()
    return tuple(_CRITERION[key] for key in first) + tuple(c for c in CRITERIA if c.key not in first)


def percentile_of(entry: Entry) -> float:
    """The SLO percentile: the scenario's, else read off the summary's `slo_<metric>_p<q>` keys, else 99."""
    if entry.limits is not None:
        return entry.limits.percentile
    for key in entry.summary:
        if key.startswith("slo_") and "_p" in key and key.split("_")[1] in _LATENCIES:
            try:
                return float(key.rsplit("_p", 1)[1])
            except ValueError:
                continue
    return 99.0


def _pct(q: float) -> str:
    return f"p{q:g}"


def as_number(value: Any) -> float:
    """A summary value as a float; NaN for a missing, boolean or non-numeric one (the dashboard reads it too)."""
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def summary_key(entry: Entry, criterion: str) -> str:
    """The summary key a criterion reads: goodput_rps, throughput_rps, or a latency at the SLO percentile
    (`slo_ttft_p99`, else `ttft_s_p99`-style keys)."""
    if criterion == "goodput":
        return "goodput_rps"
    if criterion == "throughput":
        return "throughput_rps"
    q = _pct(percentile_of(entry))
    for key in (f"slo_{criterion}_{q}", f"{criterion}_s_{q}", f"{criterion}_s_p99"):
        if key in entry.summary:
            return key
    return f"{criterion}_s_p99"


def value(entry: Entry, criterion: str) -> float:
    return as_number(entry.summary.get(summary_key(entry, criterion)))


def meets(entry: Entry) -> bool | None:
    met = entry.summary.get("slo_met")
    return None if met is None else bool(met)


# ------------------------------------------------------------------------------------------------ deciding

def is_level(a: Entry, b: Entry, criterion: Criterion, bands: Bands | None = None,
             tolerance: float = LEVEL_TOLERANCE) -> bool:
    """Whether two variants cannot be told apart on a criterion: overlapping bands where both have one, else
    values within `tolerance` of each other (relative). NaN is level only with NaN."""
    x, y = value(a, criterion.key), value(b, criterion.key)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):  # a percentile on a rejected request (sim.results.percentile_with_refused)
        return x == y
    if criterion.key == "goodput" and _same_requests_met(a, b):
        return True
    band_a, band_b = _band(a, criterion, bands), _band(b, criterion, bands)
    if band_a is not None and band_b is not None:
        return band_a[0] <= band_b[1] and band_b[0] <= band_a[1]
    return abs(x - y) <= tolerance * max(abs(x), abs(y))


def _same_requests_met(a: Entry, b: Entry) -> bool:
    """Whether two variants ran the same requests (as many, at the same offered rate: `compare` runs every variant
    on the same generated requests) and as many of them met every SLO. Their goodput rates then differ only by how
    long each ran on after its last arrival (the rate counts the whole run, drain included), so they are level on
    goodput: a run that finishes its longest answer sooner does not serve more."""
    keys = ("num_requests", "offered_rps", "goodput_rps", "elapsed_s")
    (na, oa, ga, ea), (nb, ob, gb, eb) = ([_get(e, k) for k in keys] for e in (a, b))
    if any(math.isnan(v) for v in (na, oa, ga, ea, nb, ob, gb, eb)):
        return False
    return na == nb and oa == ob and good_requests(a.summary) == good_requests(b.summary)


def _band(entry: Entry, criterion: Criterion, bands: Bands | None) -> Band | None:
    if not bands or entry.name not in bands:
        return None
    band = bands[entry.name].get(summary_key(entry, criterion.key))
    return (float(band[0]), float(band[1])) if band is not None else None


def _exact_key(entry: Entry, index: int) -> tuple:
    """The full order by exact values: meets the SLOs, then every criterion (NaN last), then scenario order."""
    met = meets(entry)
    out: list = [0 if met else (1 if met is None else 2)]
    for c in criteria_of(entry):
        v = value(entry, c.key)
        out.append(math.inf if math.isnan(v) else (-v if c.higher_is_better else v))
    return (*out, index)


def _best(entries: Sequence[Entry], criterion: Criterion) -> float:
    values = [value(e, criterion.key) for e in entries]
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan
    return max(values) if criterion.higher_is_better else min(values)


def top_group(candidates: Sequence[Entry], bands: Bands | None = None,
              tolerance: float = LEVEL_TOLERANCE) -> list[Entry]:
    """Sequential elimination (rule 3): at each criterion keep the candidates level with the best one."""
    group = list(candidates)
    for c in criteria_of(group[0]) if group else ():
        best = _best(group, c)
        if math.isnan(best):
            continue
        leader = next(e for e in group if value(e, c.key) == best)
        group = [e for e in group if is_level(e, leader, c, bands, tolerance)]
        if len(group) == 1:
            break
    return group


@dataclass
class Verdict:
    """What a view shows first. `winner` is a name (None only without variants); `level_with` the variants
    that tie with it; `meeting` the variants meeting the SLOs (None: no SLO limits set)."""

    headline: str
    winner: str | None = None
    level_with: list[str] = field(default_factory=list)
    decision: str = ""
    why: list[tuple[str, str]] = field(default_factory=list)  # (variant, one sentence)
    priced_by: str = ""
    rule: str = ""
    meeting: list[str] | None = None
    ranking: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [self.headline]
        if self.decision:
            out.append(self.decision)
        out += [f"Why {name}: {text}" for name, text in self.why]
        if self.priced_by:
            out.append(self.priced_by)
        return out

    def text(self) -> str:
        """For the terminal: "Verdict: " and one line per part."""
        return "\n".join(["Verdict: " + self.lines()[0], *self.lines()[1:]])

    def markdown(self) -> str:
        parts = [f"**Verdict:** {_md(self.headline)}"]
        if self.decision:
            parts.append(_md(self.decision))
        parts += [f"- *{_md(name)}*: {_md(text)}" for name, text in self.why]
        tail = " ".join(x for x in (self.priced_by, self.rule) if x)
        body = "\n\n".join(parts[:2])
        if len(parts) > 2:
            body += "\n\n" + "\n".join(parts[2:])
        return body + (f"\n\n_{_md(tail)}_" if tail else "")

    def html(self) -> str:
        """A <section id="verdict">: the winner is marked with data-winner (the browser test reads it)."""
        esc = html.escape
        winner = (f' data-winner="{esc(self.winner)}"' if self.winner is not None else "")
        why = "".join(f"<li><b>{esc(name)}</b>: {esc(text)}</li>" for name, text in self.why)
        return (f'<section id="verdict" class="verdict"{winner}><h2>Verdict</h2>'
                f'<p class="headline">{esc(self.headline)}</p>'
                + (f'<p class="decision">{esc(self.decision)}</p>' if self.decision else "")
                + (f'<ul class="why">{why}</ul>' if why else "")
                + (f'<p class="priced">{esc(self.priced_by)}</p>' if self.priced_by else "")
                + (f'<p class="rule">{esc(self.rule)}</p>' if self.rule else "")
                + "</section>")


def _md(text: str) -> str:
    """Plain text safe in Streamlit markdown (variant names hold + ( ) _ * and the like)."""
    for ch in "\\`*_[]<>#|$~":
        text = text.replace(ch, "\\" + ch)
    return text


def decide(entries: Sequence[Entry], bands: Bands | None = None, tolerance: float = LEVEL_TOLERANCE,
           differences: Differences | None = None) -> Verdict:
    """The verdict over these variants (in scenario order) by the module's rule; `bands` optional;
    `differences` (a band was asked for) adds one sentence: whether the winner's margin holds across the band."""
    entries = list(entries)
    if not entries:
        return Verdict("No results to judge.")
    order = {e.name: i for i, e in enumerate(entries)}
    ranked = sorted(entries, key=lambda e: _exact_key(e, order[e.name]))
    has_slo = any(meets(e) is not None for e in entries)
    meeting = [e for e in entries if meets(e)] if has_slo else None
    candidates = meeting if meeting else entries
    group = sorted(top_group(candidates, bands, tolerance), key=lambda e: _exact_key(e, order[e.name]))
    winner, level = group[0], group[1:]
    rest = [e for e in ranked if e not in group]
    level_words = "within the band" if bands else f"level (within {tolerance:.0%})"
    v = Verdict(headline=_headline(entries, meeting, winner, level), winner=winner.name,
                level_with=[e.name for e in level], meeting=None if meeting is None else [e.name for e in meeting],
                ranking=[e.name for e in ranked])
    if len(entries) > 1:
        v.decision = _decision(winner, level, rest[0] if rest else None, bands, tolerance, level_words,
                               none_meet=has_slo and not meeting, differences=differences)
        if winner.limits is not None and winner.limits.rank_by:  # the order asked for, where the terminal shows it
            named = criteria_of(winner)[:len(winner.limits.rank_by)]
            v.decision += " Ranked by " + _names([_label(winner, c) for c in named]) + " first (slo.rank_by)."
    for e in ([winner] if has_slo and not meeting else []) + rest:
        v.why.append((e.name, diagnose(e, winner)))
    v.priced_by = priced_by(entries)
    v.rule = (f"Rule: meets the SLOs first, {_order_words(winner)}; "
              + ("values whose bands overlap are within the band" if bands else
                 f"values within {tolerance:.0%} of each other are level")
              + "; on goodput, as many of the same requests within every limit are level (a rate counts the drain).")
    return v


def _label(entry: Entry, c: Criterion) -> str:
    """ "goodput", or a latency at the SLO percentile: "p99 TTFT"."""
    return c.label if c.key not in _LATENCIES else f"{_pct(percentile_of(entry))} {c.label}"


def _order_words(entry: Entry) -> str:
    """ "then the highest goodput, then the lowest p99 TTFT, TPOT and E2E, then the highest throughput", in this
    variant's order, with "(slo.rank_by)" where the scenario set it."""
    runs: list[tuple[bool, list[str]]] = []  # (higher is better, labels): consecutive latencies share one phrase
    after_latency = False
    for c in criteria_of(entry):
        latency = c.key in _LATENCIES
        if latency and after_latency:
            runs[-1][1].append(c.label)
        else:
            runs.append((c.higher_is_better, [_label(entry, c)]))
        after_latency = latency
    words = ", ".join(f"then the {'highest' if higher else 'lowest'} {_names(labels)}" for higher, labels in runs)
    return words + (" (slo.rank_by)" if entry.limits is not None and entry.limits.rank_by else "")


def _limits_text(entry: Entry) -> str:
    """ "p99 TTFT ≤ 2 s, p99 TPOT ≤ 0.1 s" (the limits the summary checked)."""
    q = _pct(percentile_of(entry))
    parts = []
    for m in _LATENCIES:
        if f"slo_{m}_met" not in entry.summary:
            continue
        limit = entry.limits.of(m) if entry.limits is not None else None
        parts.append(f"{q} {m.upper()} ≤ {limit:g} s" if limit is not None else f"{q} {m.upper()}")
    if entry.limits is not None and entry.limits.min_goodput_fraction is not None:
        parts.append(f"≥ {entry.limits.min_goodput_fraction:.0%} of requests within every limit")
    return ", ".join(parts)


def _names(names: Sequence[str]) -> str:
    names = list(names)
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def fmt(x: float, unit: str = "") -> str:
    """A number as the verdict writes it: 3 significant digits, thousands separated."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    x = float(x)
    if math.isinf(x):  # a latency percentile that falls on a rejected request
        return "unbounded" if x > 0 else "-unbounded"
    if x == 0:
        text = "0"
    elif abs(x) >= 1000:
        text = f"{x:,.0f}"
    elif abs(x) >= 0.01:
        text = f"{x:.3g}"
    else:
        text = f"{x:.2g}"
    return f"{text} {unit}".rstrip()


def _same_load(entries: list[Entry]) -> bool:
    """Whether every variant was offered the same load (within LEVEL_TOLERANCE)."""
    rates = [_get(e, "offered_rps") for e in entries]
    rates = [r for r in rates if not math.isnan(r)]
    return not rates or max(rates) - min(rates) <= LEVEL_TOLERANCE * max(abs(r) for r in rates)


def _headline(entries: list[Entry], meeting: list[Entry] | None, winner: Entry, level: list[Entry]) -> str:
    offered = as_number(winner.summary.get("offered_rps"))
    at = f" at {fmt(offered, 'req/s')} offered" if not math.isnan(offered) else ""
    if not _same_load(entries):
        at = " (at different offered loads: goodput compares the loads as well as the policies)"
    n = len(entries)
    if meeting is None:
        lead = [winner] + level
        return (f"No SLO limits are set, so every finished request counts as goodput{at}. Best: "
                f"{_names([e.name for e in lead])} at {fmt(value(winner, 'goodput'), 'req/s')}.")
    limits = _limits_text(winner)
    limits = f" ({limits})" if limits else ""
    if n == 1:
        e = entries[0]
        if meeting:
            return (f"{e.name} meets the SLOs{limits}{at}: {fmt(value(e, 'goodput'), 'req/s')} goodput, "
                    f"{fmt(value(e, 'throughput'), 'req/s')} served{_over_the_run(e)}.")
        return (f"{e.name} misses the SLOs{limits}{at}: {_misses(e)}; {fmt(value(e, 'goodput'), 'req/s')} "
                f"goodput of {fmt(value(e, 'throughput'), 'req/s')} served{_over_the_run(e)}.")
    if not meeting:
        return (f"None of the {n} variants meets the SLOs{limits}{at}. Closest: {winner.name}, "
                f"{fmt(value(winner, 'goodput'), 'req/s')} goodput ({_misses(winner)}).")
    names = [e.name for e in meeting]
    goodputs = [value(e, "goodput") for e in meeting]
    if len(meeting) > 1 and all(_same_requests_met(e, meeting[0]) for e in meeting[1:]):  # level whatever drains
        met, total = good_requests(meeting[0].summary), int(_get(meeting[0], "num_requests"))
        each = f"each {met:,} of the same {total:,} requests within every limit"
    elif max(goodputs) - min(goodputs) <= LEVEL_TOLERANCE * max(abs(g) for g in goodputs):
        each = f"{fmt(goodputs[0], 'req/s')} goodput" + (" each" if len(meeting) > 1 else "")
    else:
        each = ", ".join(f"{e.name} {fmt(value(e, 'goodput'), 'req/s')}" for e in meeting) + " goodput"
    verb = "meets" if len(meeting) == 1 else "meet"
    who = f"{len(meeting)} of {n} variants {verb}" if len(meeting) > 1 else f"1 of {n} variants meets"
    missing = [e for e in entries if e not in meeting]
    tail = ""
    if missing:
        tail = " Missing them: " + "; ".join(
            f"{e.name} ({fmt(value(e, 'goodput'), 'req/s')} goodput, {fmt(value(e, 'throughput'), 'req/s')} "
            f"served)" for e in missing) + "."
    return f"{who} the SLOs{limits}{at}: {_names(names)}, {each}.{tail}"


def _over_the_run(entry: Entry) -> str:
    """Why the rates served sit below the offered one in a run that keeps up: goodput and throughput count the whole
    run, its drain after the last arrival included (as vLLM's benchmark client counts them), so a run whose last
    answers take long after its last arrival serves "half" of what it was offered with no queue at all. Said when
    the run lasts a tenth longer than its arrivals span; nothing where the summary lacks the counts."""
    elapsed, offered, arrived = _get(entry, "elapsed_s"), _get(entry, "offered_rps"), _get(entry, "num_arrived")
    if math.isnan(elapsed) or math.isnan(offered) or math.isnan(arrived) or offered <= 0 or arrived < 2:
        return ""
    arrivals_s = (arrived - 1) / offered  # first to last arrival (the offered rate's own span)
    if elapsed < 1.1 * arrivals_s:
        return ""
    return f" over the run's {fmt(elapsed, 's')}, drain included (its arrivals span {fmt(arrivals_s, 's')})"


def _misses(entry: Entry) -> str:
    """What the variant misses, with numbers: "p99 TTFT 5.44 s > 2 s"."""
    q = _pct(percentile_of(entry))
    out = []
    for m in _LATENCIES:
        if entry.summary.get(f"slo_{m}_met") is False:
            limit = entry.limits.of(m) if entry.limits is not None else None
            measured = value(entry, m)
            if math.isinf(measured):  # the percentile reaches a rejected request (sim.results.slo_metrics)
                out.append(f"{q} {m.upper()} falls on a rejected request")
                continue
            out.append(f"{q} {m.upper()} {fmt(measured, 's')}" + (f" > {limit:g} s" if limit is not None else
                                                                     " over its limit"))
    share = as_number(entry.summary.get("slo_goodput_share"))
    if entry.limits is not None and entry.limits.min_goodput_fraction is not None and not math.isnan(share) \
            and share < entry.limits.min_goodput_fraction:
        out.append(f"{share:.0%} of requests within every limit < {entry.limits.min_goodput_fraction:.0%}")
    left = int(as_number(entry.summary.get("num_unfinished")) or 0) + int(as_number(entry.summary.get("num_rejected")) or 0)
    if left > 0 and not out:
        out.append(f"{left:,} requests not finished")
    if not out and entry.summary.get("stopped_early_s") is not None:
        out.append("stopped early once the SLOs were certain to be missed")
    return ", ".join(out) or "misses the SLOs"


def _compare(winner: Entry, other: Entry, c: Criterion) -> str:
    """ "goodput 21.4 vs 11.3 req/s (1.9×)" or "p99 TTFT 0.061 vs 5.44 s (89× lower)"."""
    a, b = value(winner, c.key), value(other, c.key)
    label = _label(winner, c)
    text = f"{label} {fmt(a)} vs {fmt(b, c.unit)}"
    if not (math.isfinite(a) and math.isfinite(b)):  # NaN, or unbounded (a percentile on a rejected request)
        return text
    if c.higher_is_better:
        if b > 0 and a / b >= 1.5:
            return f"{text} ({a / b:.3g}×)"
        return f"{text} ({(a - b) / abs(b):+.0%})" if b else text
    if a > 0 and b / a >= 1.5:
        return f"{text} ({b / a:.3g}× lower)"
    return f"{text} ({(a - b) / abs(b):+.0%})" if b else text


def _decision(winner: Entry, level: list[Entry], runner: Entry | None, bands: Bands | None, tolerance: float,
              level_words: str, none_meet: bool, differences: Differences | None = None) -> str:
    word = "Closest" if none_meet else "Winner"
    text = f"{word}: {winner.name}"
    if level:
        text += f", {level_words} with {_names([e.name for e in level])} on " + ", ".join(
            _label(winner, c) for c in criteria_of(winner))
    if runner is None:
        return text + "."
    deciding = [c for c in criteria_of(winner) if not is_level(winner, runner, c, bands, tolerance)]
    why_ahead = ""
    if meets(winner) and meets(runner) is False:
        why_ahead = " (which misses the SLOs)"
    if not deciding:
        return text + f". {runner.name} is {level_words} on every deciding metric."
    margin = _compare(winner, runner, deciding[0])
    if why_ahead and not _better(winner, runner, deciding[0]):  # it wins by meeting the SLOs, not on this metric
        return (text + f". Ahead of {runner.name}, which misses the SLOs, though {margin}."
                + _margin_in_band(winner, runner, deciding[0], differences))
    if len(deciding) > 1:  # the next metric that differs: "and" where the winner leads there too, else "though"
        word = "and" if _better(winner, runner, deciding[1]) else "though"
        margin += f", {word} " + _compare(winner, runner, deciding[1])
    return text + f". Ahead of {runner.name}{why_ahead} on {margin}." + _margin_in_band(winner, runner, deciding[0],
                                                                                    differences)


def _margin_in_band(winner: Entry, runner: Entry, c: Criterion, differences: Differences | None) -> str:
    """One sentence (with a leading space) on the band of runner − winner on the deciding metric: whether the
    winner leads in the whole band or the margin is inside it; "" without a difference band."""
    band = ((differences or {}).get((winner.name, runner.name)) or {}).get(summary_key(winner, c.key))
    if band is None:
        return ""
    lo, hi = float(band[0]), float(band[1])
    label = _label(winner, c)
    span = f"{runner.name} − {winner.name} on {label} is [{fmt(lo)}, {fmt(hi, c.unit)}]"
    if (hi < 0) if c.higher_is_better else (lo > 0):
        return f" The margin holds across the band: {span}."
    return f" That margin is inside the band: {span}, which holds 0, so the order could flip."


def _better(a: Entry, b: Entry, c: Criterion) -> bool:
    x, y = value(a, c.key), value(b, c.key)
    if math.isnan(y):
        return True
    if math.isnan(x):
        return False
    return x > y if c.higher_is_better else x < y


# ------------------------------------------------------------------------------------------------ diagnoses

def _get(entry: Entry, key: str) -> float:
    return as_number(entry.summary.get(key))


def _more(e: Entry, winner: Entry, key: str, factor: float = 2.0) -> bool:
    """Whether `e` has clearly more of `key` than the winner (any at all when it is the winner itself): a
    diagnosis names what sets a variant apart, not what they all share."""
    n = _get(e, key)
    if not n > 0:
        return False
    return winner is e or n > factor * max(_get(winner, key), 0.0)


def _rejected(e: Entry, winner: Entry) -> str | None:
    n = _get(e, "num_rejected")
    if _more(e, winner, "num_rejected", 1.0):
        total = _get(e, "num_requests")
        of = f" of {int(total):,}" if not math.isnan(total) else ""
        why = (f"the first {e.reject_reason}" if e.reject_reason else
               "too long for its KV cache, its max_model_len or, without chunked prefill, its token budget")
        return f"it rejected {int(n):,}{of} requests, which it can never run ({why}); each counts over every limit"
    return None


def _static_batching(e: Entry, winner: Entry) -> str | None:
    if e.batching != "static":
        return None
    queued = _get(e, "max_num_waiting")
    text = (f"static batching waits for its longest answer: mean batch {fmt(_get(e, 'mean_batch_size'))} "
            f"but {int(queued):,} queued" if not math.isnan(queued) else
            f"static batching waits for its longest answer: mean batch {fmt(_get(e, 'mean_batch_size'))}")
    ttft = value(e, "ttft")
    if not math.isnan(ttft):
        text += f", {_pct(percentile_of(e))} TTFT {fmt(ttft, 's')}"
    served, offered = value(e, "throughput"), _get(e, "offered_rps")
    if not math.isnan(served) and not math.isnan(offered):
        text += f"; it sustains {fmt(served, 'req/s')} of {fmt(offered, 'req/s')} offered"
    return text


def _reserved_unused(e: Entry, winner: Entry) -> str | None:
    share = _get(e, "kv_token_share")
    unused = _get(e, "kv_internal_fraction") + _get(e, "kv_reserved_fraction")
    tokens = _get(e, "kv_token_fraction")
    if e.layout not in (None, "contiguous") or math.isnan(share) or share >= 0.5 or not unused > tokens:
        return None
    if e.layout is None and _get(e, "kv_internal_fraction") < 0.2:
        return None
    if winner is not e and not _get(winner, "kv_token_share") >= 1.5 * share:
        return None  # the winner holds no more token states per byte: not what sets them apart
    what = f"reserves {e.reserve} per request up front" if e.reserve else "reserves room per request up front"
    text = (f"contiguous KV {what}: token states fill only {share:.0%} of the KV memory in use "
            f"({unused:.0%} reserved but unused), so batches stay at {fmt(_get(e, 'mean_batch_size'))}")
    queued = _get(e, "max_num_waiting")
    if queued > 0:
        text += f" and {int(queued):,} queued"
    return text


def _preempted(e: Entry, winner: Entry) -> str | None:
    n, theirs = _get(e, "preemptions"), max(_get(winner, "preemptions"), 0.0)
    if not _more(e, winner, "preemptions"):
        return None
    how = {"swap": "swapped out", "recompute": "evicted and recomputed"}.get(e.preemption or "", "preempted")
    text = f"the KV cache ran out mid-generation: {int(n):,} preemptions ({how})"
    return text + (f" against {int(theirs):,} for {winner.name}" if winner is not e else "")


def _overloaded(e: Entry, winner: Entry) -> str | None:
    queued, total = _get(e, "max_num_waiting"), _get(e, "num_requests")
    served, offered = value(e, "throughput"), _get(e, "offered_rps")
    if math.isnan(queued) or math.isnan(total) or total <= 0 or queued < max(0.05 * total, 10):
        return None
    if not _more(e, winner, "max_num_waiting"):
        return None
    text = f"overloaded: the queue grew to {int(queued):,} requests"
    if not math.isnan(served) and not math.isnan(offered):
        text += f" while it served {fmt(served, 'req/s')} of {fmt(offered, 'req/s')} offered"
    mean_q = _get(e, "queueing_s_mean")
    if not math.isnan(mean_q):
        text += f" (mean wait {fmt(mean_q, 's')})"
    return text


def _unfinished(e: Entry, winner: Entry) -> str | None:
    n = _get(e, "num_unfinished")
    if _more(e, winner, "num_unfinished", 1.0):
        return f"{int(n):,} requests were still unfinished when the run ended"
    return None


def _slow_decode(e: Entry, winner: Entry) -> str | None:
    if e.summary.get("slo_tpot_met") is not False or (winner is not e and winner.summary.get("slo_tpot_met") is False):
        return None
    limit = e.limits.tpot_s if e.limits is not None else None
    text = (f"decode steps are too slow: {_pct(percentile_of(e))} TPOT {fmt(value(e, 'tpot'), 's')}"
            + (f" > {limit:g} s" if limit is not None else " over its limit")
            + f" at a mean batch of {fmt(_get(e, 'mean_batch_size'))}")
    return text


def _slow_prefill(e: Entry, winner: Entry) -> str | None:
    metric = next((m for m in ("ttft", "e2e") if e.summary.get(f"slo_{m}_met") is False
                   and (winner is e or winner.summary.get(f"slo_{m}_met") is not False)), None)
    if metric is None:
        return None
    limit = e.limits.of(metric) if e.limits is not None else None
    return (f"{_pct(percentile_of(e))} {metric.upper()} {fmt(value(e, metric), 's')}"
            + (f" > {limit:g} s" if limit is not None else " over its limit")
            + f" with a mean wait in the queue of {fmt(_get(e, 'queueing_s_mean'), 's')}")


def _trails(e: Entry, winner: Entry) -> str:
    for c in criteria_of(winner):
        if not is_level(e, winner, c):
            return f"it trails {winner.name} on " + _compare(e, winner, c)
    return f"level with {winner.name} on every deciding metric"


DIAGNOSES: tuple[Callable[[Entry, Entry], str | None], ...] = (
    _rejected, _static_batching, _reserved_unused, _preempted, _overloaded, _unfinished, _slow_decode, _slow_prefill)


def diagnose(entry: Entry, winner: Entry) -> str:
    """One sentence on why `entry` misses the SLOs or trails `winner`: the first diagnosis that applies."""
    for rule in DIAGNOSES:
        found = rule(entry, winner)
        if found:
            return found + "."
    return _trails(entry, winner) + "."


# ------------------------------------------------------------------------------------------------ priced by

def _engine_words(engine: str) -> str:
    if engine == "compiled":
        return "the compiled engine core (numba)"
    if engine.startswith("python"):
        rest = engine[len("python"):].strip()
        rest = rest[1:-1] if rest.startswith("(") and rest.endswith(")") else rest
        return "the Python engine core" + (f" (not compiled: {rest})" if rest else "")
    return f"the {engine} engine core"


def priced_by(entries: Sequence[Entry]) -> str:
    """ "Priced by the roofline cost model; simulated by the compiled engine core (numba)." One phrase per
    distinct label, naming the variants where they differ."""
    def phrase(values: list[str | None], words: Callable[[str], str]) -> str | None:
        by_label: dict[str, list[str]] = {}
        for e, v in zip(entries, values):
            if v:
                by_label.setdefault(v, []).append(e.name)
        if not by_label:
            return None
        if len(by_label) == 1 and all(values):  # one label for every variant
            return words(next(iter(by_label)))
        return "; ".join(f"{words(v)} for {_names(names)}" for v, names in by_label.items())

    cost = phrase([e.cost_model for e in entries], lambda v: f"the {v} cost model")
    engine = phrase([e.engine for e in entries], _engine_words)
    if cost and engine:
        return f"Priced by {cost}; simulated by {engine}."
    if cost:
        return f"Priced by {cost}."
    return f"Simulated by {engine}." if engine else ""


# ------------------------------------------------------------------------------------------------ from results

def entry_of(result) -> Entry:
    """An Entry from a sim.results.Result (its scenario may be None, as for a summary.json read back)."""
    sc = getattr(result, "scenario", None)
    limits = batching = layout = reserve = preemption = None
    if sc is not None and hasattr(sc, "slo"):
        s = sc.slo
        limits = Limits(s.ttft_s, s.tpot_s, s.e2e_s, s.percentile, s.min_goodput_fraction,
                        tuple(s.rank_by) if s.rank_by else None)
        batching = sc.scheduler.batching
        layout = sc.kv_cache.layout
        spec = getattr(sc.scheduler, "preemption", None)
        preemption = getattr(spec, "mode", None) or sc.kv_cache.preemption
        reserve = sc.kv_cache.reserve if layout == "contiguous" else None
    extras = getattr(result, "extras", None) or {}
    rejected = result.summary.get("num_rejected") and hasattr(result, "first_reject_reason")
    return Entry(result.name, result.summary, limits, batching, layout, reserve, preemption,
                 extras.get("cost_model_label"), extras.get("engine_core"),
                 result.first_reject_reason() or None if rejected else None)


def verdict_of(results, bands: Bands | None = None, differences: Differences | None = None) -> Verdict:
    """The verdict over `Result`s, in their order."""
    return decide([entry_of(r) for r in results], bands, differences=differences)


# ------------------------------------------------------------------------------------------------ the planner

def plan_verdict(result) -> Verdict:
    """The capacity plan's verdict (sim.tools.planner.PlanResult): which candidates meet the SLOs at the
    target and at what cost, the cheapest and by how much, why the others fail, what priced them. The rule is
    the planner's own ranking (sim.tools.planner.rank)."""
    s, slo = result.settings, result.slo
    outcomes = list(result.outcomes)
    feasible = [o for o in outcomes if o.status == "feasible"]
    q = _pct(slo.get("percentile", 99))
    limits = ", ".join(f"{q} {m.upper()} ≤ {slo[f'{m}_s']:g} s" for m in _LATENCIES if slo.get(f"{m}_s") is not None)
    limits = f" ({limits})" if limits else ""
    n = len(outcomes)
    v = Verdict(headline="", meeting=[o.candidate.name for o in feasible],
                ranking=[o.candidate.name for o in outcomes])
    if not feasible:
        v.headline = (f"None of the {n} candidates meets the SLOs{limits} at {s.target_rate_per_s:g} req/s with "
                      f"at most {s.max_replicas} replicas.")
        reach = [(o.reachable_rate_per_s, o) for o in outcomes
                 if math.isfinite(o.reachable_rate_per_s) and o.reachable_rate_per_s > 0]
        if reach:
            rate, best = max(reach, key=lambda t: t[0])
            v.winner = best.candidate.name
            v.decision = (f"Closest: {best.candidate.name}, about {fmt(rate, 'req/s')} with "
                          f"{s.max_replicas} replicas.")
    else:
        rec = feasible[0]
        v.winner = rec.candidate.name
        v.headline = (f"{len(feasible)} of {n} candidates meet the SLOs{limits} at {s.target_rate_per_s:g} req/s: "
                      f"the cheapest is {rec.num_replicas} × {rec.candidate.name} at "
                      f"{_money(rec.costs.get('cost_per_hour'))} per hour.")
        if len(feasible) > 1:
            nxt = feasible[1]
            a, b = as_number(rec.costs.get("cost_per_hour")), as_number(nxt.costs.get("cost_per_hour"))
            if not math.isnan(a) and not math.isnan(b) and abs(b - a) <= LEVEL_TOLERANCE * max(a, b):
                v.level_with = [nxt.candidate.name]
                v.decision = (f"Winner: {rec.num_replicas} × {rec.candidate.name}, level (within "
                              f"{LEVEL_TOLERANCE:.0%}) on cost per hour with {nxt.num_replicas} × "
                              f"{nxt.candidate.name} ({_money(b)}); first on the planner's tie-breaks: cost "
                              "per million tokens, then p99 E2E.")
            else:
                more = f" ({(b - a) / a:+.0%})" if a and not math.isnan(a) and not math.isnan(b) else ""
                v.decision = (f"Winner: {rec.num_replicas} × {rec.candidate.name}. The next cheapest, "
                              f"{nxt.num_replicas} × {nxt.candidate.name}, costs {_money(b)} per hour{more}.")
        else:
            v.decision = f"Winner: {rec.num_replicas} × {rec.candidate.name}, the only candidate that meets the SLOs."
    level = getattr(s, "band", None)
    if level is not None:  # one sentence: which verdicts flip inside the band (issue 31)
        flips = [o for o in outcomes if getattr(o, "band_flip", "")]
        v.decision = (v.decision + " " if v.decision else "") + (
            f"Each candidate is held to the SLOs at the {level:g}% band's pessimistic edge; the verdict flips "
            "inside the band for " + "; ".join(f"{o.candidate.name} ({o.band_flip})" for o in flips) + "."
            if flips else f"Each candidate is held to the SLOs at the {level:g}% band's pessimistic edge; no "
            "candidate's verdict flips inside the band.")
    failing = [o for o in outcomes if o.status != "feasible"]
    v.why = [(o.candidate.name, (o.reason or o.status).rstrip(".") + ".") for o in failing[:6]]
    if len(failing) > 6:
        v.why.append((f"{len(failing) - 6} more", "see the excluded and infeasible candidates below."))
    v.priced_by = _plan_priced_by(outcomes, v.winner)
    v.rule = ("Rule: candidates that meet every SLO at the target with the fewest replicas, cheapest per hour "
              "first, then per million tokens, then lower p99 E2E.")
    if slo.get("rank_by"):  # a ranking the scenario asks for, which this rule does not follow: said, not ignored
        v.rule += (f" The scenario's slo.rank_by ({', '.join(slo['rank_by'])}) orders the verdicts of run and "
                   "compare, not the plan's.")
    return v


def _plan_priced_by(outcomes, winner: str | None) -> str:
    """Which cost model priced the winner, and the others in a few words."""
    by_label: dict[str, list[str]] = {}
    for o in outcomes:
        if o.cost_model:
            by_label.setdefault(o.cost_model, []).append(o.candidate.name)
    if len(by_label) <= 1:
        return f"Priced by the {next(iter(by_label))} cost model." if by_label else ""
    first = next((o.cost_model for o in outcomes if o.candidate.name == winner and o.cost_model), None)
    others = [f"the {label} cost model ({_names(names) if len(names) <= 2 else f'{len(names)} candidates'})"
              for label, names in by_label.items() if label != first]
    if first is None:
        return "Priced by " + "; ".join(others) + "."
    same = len(by_label[first]) - 1
    return (f"{winner} is priced by the {first} cost model" + (f", as are {same} others" if same else "")
            + "; the rest by " + "; ".join(others) + ".")


def _money(x) -> str:
    x = as_number(x)
    return "-" if math.isnan(x) else f"${x:,.2f}"
