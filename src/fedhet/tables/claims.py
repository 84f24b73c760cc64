"""Claims of the papers (the scorecard): one claim checked on our numbers and on the paper's."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fedhet.printed import join_labels
from fedhet.tables.maths import parse_reference
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


def evaluate_claim(
    claim: Mapping[str, Any],
    payloads: Mapping[str, Mapping[str, Any]],
    frames: Mapping[str, Any],
) -> dict[str, Any]:
    """Check one claim on our numbers and on the paper's own. `payloads` / `frames` are keyed by
    `<paper>_<table>`; frames are the long tables (DataFrames). A payload's `left_out` cells are
    the paper's cells this scale does not run (config/scales: restrict): their pairs count on the
    paper's side, so that it counts the paper's whole claim, and narrow the verdict on ours to
    the part that ran. A pair with a quoted cell (a number the paper quotes from elsewhere, no
    run of ours) counts on the paper's side only; a pair with a cell near chance (a run that
    learnt almost nothing) is not compared on ours."""
    paper = claim["paper"]
    metric = claim["metric"]
    direction = claim.get("direction", "higher")
    require = claim.get("require", "all")
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
                entries.append((tuple(sorted(labels.items())), _Side(cell, line, left_out)))
        sides[side] = entries
    # a pair is told from the others by the labels both cells share and those they differ in
    pairs = [(kb + _own(b, where_keys, "") + _own(t, where_keys, THAN), b, t)
             for kb, b in sides["better"] for kt, t in sides["than"] if kb == kt]
    n = len(pairs)
    left_out = [(k, b, t) for k, b, t in pairs
                if (b.left_out or t.left_out) and not (b.quoted or t.quoted)]
    ran = [(k, b.line, t.line) for k, b, t in pairs if not (b.left_out or t.left_out)]
    pending = sum(1 for _, b, t in ran if b is None or t is None
                  or PENDING in (b.status, t.status))
    ran = [(k, b, t) for k, b, t in ran
           if b is not None and t is not None and PENDING not in (b.status, t.status)]
    quoted = sum(1 for _, b, t in ran if QUOTED in (b.status, t.status))
    ran = [(k, b, t) for k, b, t in ran if QUOTED not in (b.status, t.status)]
    # a pair where either run learnt (almost) nothing says nothing about the claim
    chance = [(k, b, t) for k, b, t in ran if _near_chance(b) or _near_chance(t)]
    ran = [(k, b, t) for k, b, t in ran if not (_near_chance(b) or _near_chance(t))]
    compared = len(ran)
    ours_hold = sum(1 for _, b, t in ran if _better(b.our_mean, t.our_mean, direction))
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
        result = "reproduced" if verdict(ours_hold, compared) else "not reproduced"
        untested = [(k, NOT_RUN) for k, _, _ in left_out]
        untested += [(k, NEAR_CHANCE) for k, _, _ in chance]
        part = scope([k for k, _, _ in ran], untested, shown)
    if compared > 0 or chance:
        ours = f"{ours_hold}/{compared} pairs hold" + (f", {pending} pending" if pending else "")
        ours += f", {quoted} quoted" if quoted else ""
        ours += f", {len(chance)} near chance (not compared)" if chance else ""
    elif quoted:
        ours = f"{quoted} pairs quoted" + (f", {pending} pending" if pending else "")
    elif left_out and not pending:
        ours = f"{len(left_out)} pairs not run at this scale"
    else:
        ours = f"{n} pairs pending"
    if (compared > 0 or chance) and left_out:
        ours += f", {len(left_out)} not run at this scale"
    return {
        "paper": paper,
        "claim": " ".join(str(claim["text"]).split()),
        "result": result,
        "scope": part,
        "ours": ours,
        "in_paper": f"{paper_hold}/{len(paper_values)} pairs hold",
        "require": require,
    }


Key = tuple[tuple[str, str], ...]


class _Side:
    """One cell of a pair: the payload's cell, its long-table line (None when the table has
    none or the scale leaves the cell out) and whether the scale leaves it out."""

    def __init__(self, cell: Mapping[str, Any], line: Any, left_out: bool) -> None:
        self.cell, self.line, self.left_out = cell, line, left_out
        self.quoted = bool(cell.get("quoted"))

    def paper_value(self, metric: str) -> float | None:
        """The paper's number: the long table's, else the cell's transcription (which tells a
        printed Nan, a target never reached, from a number the paper does not print)."""
        value = None if self.line is None else self.line.paper_value
        if value is None or is_nan(value):
            value = parse_reference((self.cell.get("reference") or {}).get(metric))[0]
        return value


THAN = "|than"  # marks the labels of a pair's second cell in its key


def _own(side: _Side, where_keys: Iterable[str], tag: str) -> Key:
    """The labels a pair's cell is selected by (method: VHL), as part of the pair's key (the
    second cell's tagged, as both cells have them)."""
    return tuple((k + tag, str(side.cell["labels"].get(k))) for k in sorted(where_keys))


def scope(compared: Sequence[Key], untested: Sequence[tuple[Key, str]],
          shown: Mapping[tuple[str, str], str]) -> str:
    """What part of a claim a verdict covers, when some of its pairs were not compared ("" when
    all were): " on CIFAR-10 only; SVHN, CIFAR-100 not run at this scale" where the compared
    pairs are all those of some values of some labels (datasets, settings, models), else
    " on 12 of 24 pairs; 12 near chance at this scale". Pairs are given by their keys (the
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
        return f" on {len(compared)} of {len(keys)} pairs; {', '.join(parts)}"
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
    return f" on {' and '.join(on)} only; " + "; ".join(
        f"{join_labels(labels)} {why}" for why, labels in off.items())

