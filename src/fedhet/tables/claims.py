"""Claims of the papers (the scorecard): one claim checked on our numbers and on the paper's."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

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


def evaluate_claim(
    claim: Mapping[str, Any],
    payloads: Mapping[str, Mapping[str, Any]],
    frames: Mapping[str, Any],
) -> dict[str, Any]:
    """Check one claim on our numbers and on the paper's own. `payloads` / `frames` are keyed by
    `<paper>_<table>`; frames are the long tables (DataFrames). A pair with a quoted cell (a number
    the paper quotes from elsewhere, no run of ours) counts on the paper's side only; a pair with
    a cell near chance (a run that learnt almost nothing) is not compared on ours."""
    paper = claim["paper"]
    metric = claim["metric"]
    direction = claim.get("direction", "higher")
    require = claim.get("require", "all")
    sides = {}
    # cells pair up on every label except those the two selections set differently
    wb = claim["better"].get("where") or {}
    wt = claim["than"].get("where") or {}
    where_keys = {k for k in set(wb) | set(wt) if wb.get(k) != wt.get(k)}
    for side in ("better", "than"):
        sel = claim[side]
        target = f"{paper}_{sel['table']}"
        df = frames[target]
        index = {(r.row, r.column): r for r in df[df["metric"] == metric].itertuples(index=False)}
        entries = []
        for cell in _select(payloads[target], sel.get("where") or {}):
            if metric not in cell["metrics"]:
                continue
            key = tuple(sorted((k, v) for k, v in cell["labels"].items() if k not in where_keys))
            entries.append((key, index.get((cell["row"], cell["column"]))))
        sides[side] = entries
    pairs = [(b, t) for kb, b in sides["better"] for kt, t in sides["than"] if kb == kt]
    n = len(pairs)
    pending = sum(1 for b, t in pairs if b is None or t is None or PENDING in (b.status, t.status))
    ran = [(b, t) for b, t in pairs
           if b is not None and t is not None and PENDING not in (b.status, t.status)]
    quoted = sum(1 for b, t in ran if QUOTED in (b.status, t.status))
    ran = [(b, t) for b, t in ran if QUOTED not in (b.status, t.status)]
    # a pair where either run learnt (almost) nothing says nothing about the claim
    chance = sum(1 for b, t in ran if _near_chance(b) or _near_chance(t))
    ran = [(b, t) for b, t in ran if not (_near_chance(b) or _near_chance(t))]
    compared = len(ran)
    ours_hold = sum(1 for b, t in ran if _better(b.our_mean, t.our_mean, direction))
    paper_pairs = [
        (b, t)
        for b, t in pairs
        if b is not None and t is not None and not (b.paper_value is None or t.paper_value is None)
    ]
    paper_hold = sum(1 for b, t in paper_pairs if _better(b.paper_value, t.paper_value, direction))

    def verdict(hold: int, total: int) -> bool:
        return hold == total if require == "all" else hold * 2 > total

    if n == 0 or pending:
        result = "not yet run"
    elif compared == 0:
        result = "near chance at this scale" if chance else "quoted only"
    else:
        result = "reproduced" if verdict(ours_hold, compared) else "not reproduced"
    if compared > 0 or chance:
        ours = f"{ours_hold}/{compared} pairs hold" + (f", {pending} pending" if pending else "")
        ours += f", {quoted} quoted" if quoted else ""
        ours += f", {chance} near chance (not compared)" if chance else ""
    elif quoted:
        ours = f"{quoted} pairs quoted" + (f", {pending} pending" if pending else "")
    else:
        ours = f"{n} pairs pending"
    return {
        "paper": paper,
        "claim": " ".join(str(claim["text"]).split()),
        "result": result,
        "ours": ours,
        "in_paper": f"{paper_hold}/{len(paper_pairs)} pairs hold",
        "require": require,
    }
