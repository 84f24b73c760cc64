"""Claims of the papers (the scorecard): one claim checked on our numbers and on the paper's.

The verdict rule, said on the scorecard page (`fedhet.tables.scorecard.RULE`):
- a claim's pairs: a cell of the method it favours and the cell it is compared with, alike in
  every other label; pairs not run at this scale, quoted by the paper, or with a cell near
  chance are not compared;
- identical runs count once: two rows of a table whose numbers are all the same (every column
  and metric, at least two numbers that are not whole or missing) are the same runs (FedAvg,
  FedProx and FedNova with one local step a round), so the pairs they give are one pair;
- a pair holds when the favoured cell is better by more than the tie threshold (the
  leaderboard's: `fedhet.tables.maths.tie_threshold`, the claim's own `margin` or the
  configured tie margin, the seeds' spread with three or more seeds); within it, a tie;
- universal wording ("every", "each", "all", "upper bound", "never", ...) needs every pair to
  hold, whatever the claim's `require` says; otherwise `require` (all, or majority: more than
  half);
- fewer than MIN_PAIRS distinct pairs compared: "not enough evidence", no verdict;
- at a scale that runs stand-ins, the verdict names the data that ran (`ran_on`)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fedhet.printed import join_labels
from fedhet.tables.maths import TIE_MARGIN, TIE_SLACK, parse_reference, tie_threshold
from fedhet.tables.metrics import TARGET, lookup
from fedhet.tables.schema import PENDING, QUOTED, is_nan


def _select(payload: Mapping[str, Any], where: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out = []
    for cell in payload["cells"]:
        ok = True
        for key, want in where.items():
            wants = [str(w) for w in want] if isinstance(want, list) else [str(want)]
            if cell["labels"].get(key) not in wants:
                ok = False
                break
        if ok:
            out.append(cell)
    return out


def _near_chance(line: Any) -> bool:
    """Whether a long-table line is marked near chance (tables written before the mark
    existed, and frames without the column, have none)."""
    return str(getattr(line, "near_chance", False)).lower() == "true"


def _better(a: float, b: float, direction: str) -> bool:
    worst = -math.inf if direction == "higher" else math.inf
    a = worst if is_nan(a) else a
    b = worst if is_nan(b) else b
    return a > b if direction == "higher" else a < b


NOT_RUN = "not run at this scale"
NEAR_CHANCE = "near chance at this scale"
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_ENOUGH = "not enough evidence"
# a verdict needs at least this many distinct pairs compared
MIN_PAIRS = 3
# words that make a claim universal: it needs every pair, whatever its config says...
UNIVERSAL = re.compile(
    r"\b(every|each|all|always|never|none|both|upper bound|lower bound)\b", re.I)
# ...unless it says "most" too ("most base algorithms in every setting": a majority of pairs)
MAJORITY = re.compile(r"\b(most|mostly|majority|usually|typically|on average)\b", re.I)
# what a pair's comparison came to
HOLDS, TIE, AGAINST = "holds", "tie", "against"
REPEAT = "repeat"  # the same runs as another pair's: counted once


def universal_words(text: str) -> list[str]:
    """The universal words of a claim's text ("every", "upper bound"), each once; none where
    it also says "most" (or the like: MAJORITY)."""
    if MAJORITY.search(text):
        return []
    return list(dict.fromkeys(m.group(1).lower() for m in UNIVERSAL.finditer(text)))


def required(claim: Mapping[str, Any]) -> tuple[str, str]:
    """What a claim needs, "all" or "majority", and the words that say so: "all" where its
    text is universal (`universal_words`: they need every pair, whatever `require` says),
    else its config's `require` (default all)."""
    words = universal_words(str(claim["text"]))
    if words:
        return "all", ", ".join(f"“{w}”" for w in words)
    return str(claim.get("require", "all")), ""


def _number(line: Any, key: str, default: float) -> float:
    value = getattr(line, key, default)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(value) else value


def outcome(b: Any, t: Any, direction: str, margin: float) -> str:
    """HOLDS when the favoured line `b` beats `t` by more than the tie threshold (the
    margin, or the seeds' spread when both have three or more seeds), AGAINST when `t` beats
    `b` by more, else TIE. A missing number (a target never reached, a diverged run) loses to
    any number and ties with another missing one."""
    bv, tv = b.our_mean, t.our_mean
    if is_nan(bv) or is_nan(tv):
        if is_nan(bv) and is_nan(tv):
            return TIE
        return AGAINST if is_nan(bv) else HOLDS
    threshold = tie_threshold(margin, _number(b, "our_std", math.nan),
                              int(_number(b, "seeds", 1)), _number(t, "our_std", math.nan),
                              int(_number(t, "seeds", 1)))
    diff = bv - tv if direction == "higher" else tv - bv
    if abs(diff) <= threshold + TIE_SLACK:
        return TIE
    return HOLDS if diff > 0 else AGAINST


def _informative(value: Any) -> bool:
    """A number that says something when two rows share it: finite and not whole (a whole
    number of rounds, or a missing one, is often shared by different runs)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(value) and not value.is_integer()


def same_rows(frame: Any) -> dict[str, str]:
    """Rows of a long table that repeat an earlier row's numbers: row → the first row with
    the same numbers in every column and metric (means, spreads and statuses), where they
    hold at least two informative numbers (`_informative`). Such rows are the same runs
    (FedProx and FedNova with one local step a round are FedAvg), however the config labels
    them."""
    if frame is None or len(frame) == 0:
        return {}
    prints: dict[str, list[tuple]] = {}
    for line in frame.itertuples(index=False):
        if line.metric == TARGET.name:
            continue
        std = getattr(line, "our_std", math.nan)
        prints.setdefault(line.row, []).append((
            str(line.column), str(line.metric), _token(line.our_mean), _token(std),
            str(getattr(line, "status", "")), _informative(line.our_mean)))
    first: dict[tuple, str] = {}
    out = {}
    for row, values in prints.items():
        if sum(v[-1] for v in values) < 2:
            continue
        key = tuple(sorted(v[:-1] for v in values))
        if key in first:
            out[row] = first[key]
        else:
            first[key] = row
    return out


def _token(value: Any) -> str:
    """A number as a comparable token (NaN equals NaN)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "nan" if math.isnan(value) else repr(value)


def evaluate_claim(
    claim: Mapping[str, Any],
    payloads: Mapping[str, Mapping[str, Any]],
    frames: Mapping[str, Any],
    tie_margin: float = TIE_MARGIN,
) -> dict[str, Any]:
    """Check one claim on our numbers and on the paper's own. `payloads` / `frames` are keyed by
    `<paper>_<table>`; frames are the long tables (DataFrames). A payload's `left_out` cells are
    the paper's cells this scale does not run (config/scales: restrict): their pairs count on the
    paper's side, so that it counts the paper's whole claim, and narrow the verdict on ours to
    the part that ran. A pair with a quoted cell (a number the paper quotes from elsewhere, no
    run of ours) counts on the paper's side only; a pair with a cell near chance (a run that
    learnt almost nothing) is not compared on ours. The rest is the module's rule: identical
    runs once, ties within `tie_margin` (or the claim's `margin`), universal wording needs every
    pair, fewer than MIN_PAIRS distinct pairs is not enough evidence.

    Returns the scorecard's row: `result` (the verdict), `scope` (the part of the claim it
    covers where not all of it), `ran_on` (the stand-ins and changed settings that ran),
    `ours` / `in_paper` (the counts), `require` and `rule` (what the verdict needed and why),
    and `evidence` (every pair with a run: its two cells, their numbers and what the pair
    came to), with the counts `distinct`, `holds`, `ties`, `against`."""
    paper = claim["paper"]
    metric = claim["metric"]
    direction = claim.get("direction", "higher")
    require, words = required(claim)
    margin = float(claim.get("margin", tie_margin))
    sides = {}
    # cells pair up on every label except those the two selections set differently
    wb = claim["better"].get("where") or {}
    wt = claim["than"].get("where") or {}
    where_keys = {k for k in set(wb) | set(wt) if wb.get(k) != wt.get(k)}
    shown: dict[tuple[str, str], str] = {}  # (axis, key) → the label the cells print
    for side in ("better", "than"):
        sel = claim[side]
        target = f"{paper}_{sel['table']}"
        df = frames[target]
        index = {(r.row, r.column): r for r in df[df["metric"] == metric].itertuples(index=False)}
        entries = []
        payload = payloads[target]
        for left_out, cells in ((False, payload["cells"]), (True, payload.get("left_out") or [])):
            for cell in _select({"cells": cells}, sel.get("where") or {}):
                if metric not in cell["metrics"]:
                    continue
                labels = {k: v for k, v in cell["labels"].items() if k not in where_keys}
                shown.update(((k, v), str((cell.get("display") or {}).get(k, v)))
                             for k, v in cell["labels"].items())
                line = None if left_out else index.get((cell["row"], cell["column"]))
                entries.append((tuple(sorted(labels.items())),
                                _Side(cell, line, left_out, target)))
        sides[side] = entries
    # a pair is told from the others by the labels both cells share and those they differ in
    pairs = [(kb + _own(b, where_keys, "") + _own(t, where_keys, THAN), b, t)
             for kb, b in sides["better"] for kt, t in sides["than"] if kb == kt]
    n = len(pairs)
    left_out = [(k, b, t) for k, b, t in pairs
                if (b.left_out or t.left_out) and not (b.quoted or t.quoted)]
    ran = [(k, b, t) for k, b, t in pairs if not (b.left_out or t.left_out)]
    pending = sum(1 for _, b, t in ran if b.line is None or t.line is None
                  or PENDING in (b.line.status, t.line.status))
    ran = [(k, b, t) for k, b, t in ran if b.line is not None and t.line is not None
           and PENDING not in (b.line.status, t.line.status)]
    quoted = sum(1 for _, b, t in ran if QUOTED in (b.line.status, t.line.status))
    ran = [(k, b, t) for k, b, t in ran if QUOTED not in (b.line.status, t.line.status)]
    # a pair where either run learnt (almost) nothing says nothing about the claim
    chance = [(k, b, t) for k, b, t in ran if _near_chance(b.line) or _near_chance(t.line)]
    ran = [(k, b, t) for k, b, t in ran if not (_near_chance(b.line) or _near_chance(t.line))]
    compared = len(ran)
    # identical runs count once: a pair whose cells sit in rows repeating other rows'
    # numbers (and in the same columns) is the pair of those rows
    repeats_of = {target: same_rows(frames[target]) for target in
                  dict.fromkeys(s.target for _, b, t in ran for s in (b, t))}
    distinct: list[tuple[Key, _Side, _Side]] = []
    first_of: dict[tuple, int] = {}
    repeated: list[tuple[Key, _Side, _Side, int]] = []  # ..., the distinct pair it repeats
    for k, b, t in ran:
        identity = (b.identity(repeats_of), t.identity(repeats_of))
        if identity in first_of:
            repeated.append((k, b, t, first_of[identity]))
        else:
            first_of[identity] = len(distinct)
            distinct.append((k, b, t))
    outcomes = [outcome(b.line, t.line, direction, margin) for _, b, t in distinct]
    counts = Counter(outcomes)
    holds, ties, against = counts[HOLDS], counts[TIE], counts[AGAINST]
    paper_values = [(b.paper_value(metric), t.paper_value(metric)) for _, b, t in pairs]
    paper_values = [(b, t) for b, t in paper_values if b is not None and t is not None]
    paper_hold = sum(1 for b, t in paper_values if _better(b, t, direction))

    def verdict(hold: int, total: int) -> bool:
        return hold == total if require == "all" else hold * 2 > total

    part = ""  # which part of the claim the verdict covers, where not all of it
    if n == 0 or pending:
        result = "not yet run"
    elif compared == 0:
        if chance:
            result = NEAR_CHANCE
        else:
            result = "not tested at this scale" if left_out else "quoted only"
    else:
        if len(distinct) < MIN_PAIRS:
            result = NOT_ENOUGH
        else:
            result = REPRODUCED if verdict(holds, len(distinct)) else NOT_REPRODUCED
        untested = [(k, NOT_RUN) for k, _, _ in left_out]
        untested += [(k, NEAR_CHANCE) for k, _, _ in chance]
        part = scope([k for k, _, _ in ran], untested, shown)
    ours = []
    if distinct:
        ours.append(f"{holds}/{len(distinct)} pairs hold")
        ours += [f"{count} {what}" for count, what in ((ties, "tied"), (against, "against"))
                 if count]
    if repeated:
        same = _repeats(repeated, distinct, shown)
        verb = "repeats" if len(repeated) == 1 else "repeat"
        ours.append(f"{len(repeated)} more {verb} identical runs ({same})")
    for count, what in ((quoted, "quoted"), (len(chance), "near chance (not compared)"),
                        (pending, "pending"), (len(left_out), "not run at this scale")):
        if count:  # the first count says what it counts
            ours.append(f"{count} {what}" if ours else f"{_pairs(count)} {what}")
    if not ours:
        ours.append(f"{_pairs(n)} pending")
    evidence = [_evidence(b, t, metric, outcomes[i])
                for i, (_, b, t) in enumerate(distinct)]
    evidence += [_evidence(b, t, metric, REPEAT, repeats=i) for _, b, t, i in repeated]
    evidence += [_evidence(b, t, metric, NEAR_CHANCE) for _, b, t in chance]
    return {
        "paper": paper,
        "claim": " ".join(str(claim["text"]).split()),
        "result": result,
        "scope": part,
        "ran_on": ran_on([s for _, b, t in ran for s in (b, t)], shown) if ran else "",
        "ours": ", ".join(ours),
        "in_paper": (f"{paper_hold}/{len(paper_values)} pairs hold" if paper_values
                     else "no numbers in the paper"),
        "require": require,
        "rule": rule_text(require, words, margin, metric),
        "distinct": len(distinct),
        "holds": holds,
        "ties": ties,
        "against": against,
        "evidence": evidence,
    }


def _pairs(count: int) -> str:
    return f"{count} pair{'' if count == 1 else 's'}"


def rule_text(require: str, words: str, margin: float, metric: str) -> str:
    """What a verdict needed, in words: "needs every pair (the claim says “every”); ties
    within 1 point"."""
    need = "needs every pair" if require == "all" else "needs a majority of pairs"
    if words:
        need += f" (the claim says {words})"
    known = lookup(metric)
    unit = ("point" if metric == "gain" or (known is not None and known.accuracy)
            else "round" if metric == "rounds" else "")
    unit += "s" if unit and margin != 1 else ""
    return f"{need}; ties within {margin:g}{' ' + unit if unit else ''}"


def _repeats(repeated: Sequence[tuple[Key, Any, Any, int]],
             distinct: Sequence[tuple[Key, Any, Any]],
             shown: Mapping[tuple[str, str], str]) -> str:
    """Which labels repeat which in the pairs counted once: "FedProx, FedNova = FedAvg"."""
    same: dict[str, list[str]] = {}
    for key, _, _, i in repeated:
        mine, theirs = dict(key), dict(distinct[i][0])
        axes = [a for a in mine if mine[a] != theirs.get(a)]

        def name(k: Mapping[str, str], axes: list[str] = axes) -> str:
            return " · ".join(shown.get((a.removesuffix(THAN), k[a]), str(k[a])) for a in axes)

        others = same.setdefault(name(theirs), [])
        if name(mine) not in others:
            others.append(name(mine))
    return "; ".join(f"{', '.join(others)} = {first}" for first, others in same.items())


def ran_on(cells: Iterable[_Side], shown: Mapping[tuple[str, str], str]) -> str:
    """What the compared cells ran on where the scale changed what their labels say: the
    stand-ins for the papers' datasets and the axis values that ran otherwise ("colour
    handwritten digits (16 px, 200 training images a class) standing in for CIFAR-10; IPC=2
    in place of the paper's IPC=10"); "" where everything ran as labelled."""
    stand_ins: dict[str, list[str]] = {}
    changed: dict[str, str] = {}
    for side in cells:
        data = side.cell.get("stand_in")
        if data:
            names = stand_ins.setdefault(data["name"], [])
            if data["for"] not in names:
                names.append(data["for"])
        for axis, ran in (side.cell.get("runs_as") or {}).items():
            value = side.cell["labels"].get(axis)
            label = shown.get((axis, value), str(value))
            changed.setdefault(label, ran)
    parts = [f"{name} standing in for {' and '.join(real)}" for name, real in stand_ins.items()]
    parts += [f"{ran} in place of the paper's {label}" for label, ran in changed.items()]
    return "; ".join(parts)


def _evidence(b: _Side, t: _Side, metric: str, what: str, repeats: int | None = None) -> dict:
    """One pair as the scorecard links it: both cells (table, row, column, metric, our number)
    and what the pair came to (HOLDS, TIE, AGAINST, REPEAT of pair `repeats`, NEAR_CHANCE)."""
    out = {"better": b.where(metric), "than": t.where(metric), "outcome": what}
    if repeats is not None:
        out["repeats"] = repeats
    return out


Key = tuple[tuple[str, str], ...]


class _Side:
    """One cell of a pair: the payload's cell, its long-table line (None when the table has
    none or the scale leaves the cell out), whether the scale leaves it out, and its table
    (`<paper>_<table>`)."""

    def __init__(self, cell: Mapping[str, Any], line: Any, left_out: bool,
                 target: str = "") -> None:
        self.cell, self.line, self.left_out, self.target = cell, line, left_out, target
        self.quoted = bool(cell.get("quoted"))

    def paper_value(self, metric: str) -> float | None:
        """The paper's number: the long table's, else the cell's transcription (which tells a
        printed Nan, a target never reached, from a number the paper does not print)."""
        value = None if self.line is None else self.line.paper_value
        if value is None or is_nan(value):
            value = parse_reference((self.cell.get("reference") or {}).get(metric))[0]
        return value

    def identity(self, repeats_of: Mapping[str, Mapping[str, str]]) -> tuple[str, str, str]:
        """The runs behind the cell: its table, row and column, a row that repeats an earlier
        row's numbers standing for that row."""
        row = self.cell["row"]
        return self.target, repeats_of.get(self.target, {}).get(row, row), self.cell["column"]

    def where(self, metric: str) -> dict[str, Any]:
        """The cell as a reader finds it: table, row, column, metric and our number."""
        line = self.line
        out = {"table": self.target, "row": self.cell["row"], "column": self.cell["column"],
               "metric": metric}
        if line is not None:
            out["ours"] = line.our_mean
            out["std"] = getattr(line, "our_std", math.nan)
        return out


THAN = "|than"  # marks the labels of a pair's second cell in its key


def _own(side: _Side, where_keys: Iterable[str], tag: str) -> Key:
    """The labels a pair's cell is selected by (method: VHL), as part of the pair's key (the
    second cell's tagged, as both cells have them)."""
    return tuple((k + tag, str(side.cell["labels"].get(k))) for k in sorted(where_keys))


def scope(compared: Sequence[Key], untested: Sequence[tuple[Key, str]],
          shown: Mapping[tuple[str, str], str]) -> str:
    """What part of a claim a verdict covers, when some of its pairs were not compared ("" when
    all were): "on CIFAR-10 only; SVHN, CIFAR-100 not run at this scale" where the compared
    pairs are all those of some values of some labels (datasets, settings, models), else
    "on 12 of 24 pairs; 12 near chance at this scale". Pairs are given by their keys (the
    (label, value) pairs of both cells), `untested` with why; `shown` prints a label's value."""
    if not untested or not compared:
        return ""
    keys = [dict(k) for k in compared] + [dict(k) for k, _ in untested]
    axes = list(dict.fromkeys(axis for key in keys for axis in key))
    tested = {axis: {dict(key).get(axis) for key in compared} for axis in axes}
    narrowed = [axis for axis in axes if {key.get(axis) for key in keys} - tested[axis]]

    def apart(names: Sequence[str]) -> bool:
        """Whether the values tested of these labels hold every compared pair, no other."""
        return bool(names) and not any(
            all(dict(k).get(axis) in tested[axis] for axis in names) for k, _ in untested)

    # the fewest labels that tell the compared pairs from the others (FedBR's CIFAR-100 grid
    # also has another backbone: its dataset alone says it), those with fewer values first out
    for axis in sorted(narrowed, key=lambda a: len({key.get(a) for key in keys})):
        if apart([a for a in narrowed if a != axis]):
            narrowed.remove(axis)
    if not apart(narrowed):
        counts = Counter(why for _, why in untested)
        parts = [f"{count} {why}" for why, count in counts.items()]
        return f"on {len(compared)} of {len(keys)} pairs; {', '.join(parts)}"
    on, off = [], {}
    for axis in narrowed:
        order = list(dict.fromkeys(key.get(axis) for key in keys))
        label = axis.removesuffix(THAN)
        on.append(join_labels(shown.get((label, v), str(v)) for v in order if v in tested[axis]))
        for v in order:
            if v not in tested[axis]:
                whys = sorted({why for k, why in untested if dict(k).get(axis) == v})
                why = " or ".join(whys).replace(" at this scale or ", " or ")
                off.setdefault(why, []).append(shown.get((label, v), str(v)))
    return f"on {' and '.join(on)} only; " + "; ".join(
        f"{join_labels(labels)} {why}" for why, labels in off.items())

