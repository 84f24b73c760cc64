"""Rows of a table a reader must not take for separate evidence: their cells are the same runs
(the paper's table repeats a configuration, or this scale makes two of its configurations one),
or runs that trained alike; and the legend sentence that says which, where and why."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fedhet.tables.metrics import TARGET


def identical_rows(lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any],
                   alike: Mapping[str, str] | None = None
                   ) -> list[tuple[list[str], str, list[str] | None]]:
    """Groups of rows a reader must not take for separate evidence, in every column of the rows
    or in a family of columns (e.g. every IPC=10 column): their cells are the same runs (and
    calibrations) — `"paper"` where the paper's table repeats one configuration too (the same
    settings as the paper gives them), `"scale"` where only this scale makes them one — or
    runs that trained alike, `"alike"` (`alike`: run id → its twin's,
    `fedhet.tables.alike_runs`). Each group: its rows, that kind, and the columns where they
    agree (None: all)."""
    alike = alike or {}
    runs: dict[str, dict[str, tuple[frozenset[str], str]]] = {}
    for cell in payload.get("cells", []):
        if cell.get("run_ids") and not cell.get("pending"):
            ids = frozenset(cell["run_ids"]) | {f"calibration {c}" for c in
                                               cell.get("calibrations") or []}
            runs.setdefault(str(cell.get("row", "")), {})[str(cell.get("column", ""))] = (
                ids, str(cell.get("paper_run", "")))
    shown = {ln["row"] for ln in lines}
    rows = [r for r in runs if r in shown]
    columns = list(dict.fromkeys(ln["column"] for ln in lines if ln["metric"] != TARGET.name))

    def twin(ids: frozenset[str]) -> frozenset[str]:
        return frozenset(alike.get(i, i) for i in ids)

    found: dict[tuple[frozenset, str], list[tuple[str, str]]] = {}
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            common = [c for c in runs[a] if c in runs[b]]
            equal = [c for c in common if twin(runs[a][c][0]) == twin(runs[b][c][0])]
            if not equal:
                continue
            if equal != common and (len(equal) < 2 or not _column_family(equal, columns)):
                continue
            if not all(runs[a][c][0] == runs[b][c][0] for c in equal):
                kind = "alike"
            elif all(runs[a][c][1] and runs[a][c][1] == runs[b][c][1] for c in equal):
                kind = "paper"
            else:
                kind = "scale"
            key = (frozenset() if equal == common else frozenset(equal), kind)
            found.setdefault(key, []).append((a, b))
    out = []
    for (cells, kind), pairs in found.items():
        groups: list[list[str]] = []
        for a, b in pairs:  # rows linked by a pair, in table order
            hit = [g for g in groups if a in g or b in g]
            merged = sorted({a, b, *(r for g in hit for r in g)}, key=rows.index)
            groups = [g for g in groups if g not in hit] + [merged]
        for group in groups:
            out.append((group, kind, [c for c in columns if c in cells] if cells else None))
    return out


def _column_family(cells: Sequence[str], columns: Sequence[str]) -> str:
    """The part of the column names ("IPC=10") that exactly `cells` of `columns` have, or ""."""
    for part in dict.fromkeys(p for col in cells for p in str(col).split(" · ")):
        if [c for c in columns if part in str(c).split(" · ")] == [c for c in columns
                                                                   if c in cells]:
            return part
    return ""


def _row_name(row: str) -> str:
    """A row as a reader names it: "FedAvg (ResNet-18)" for the row "FedAvg · ResNet-18"."""
    block, _, name = row.partition(" · ")
    return f"{block} ({name})" if name else block


def _cells_name(cells: list[str], lines: Sequence[Mapping[str, Any]]) -> str:
    """Where rows agree, as a reader finds it: "in the IPC=10 columns"."""
    columns = list(dict.fromkeys(ln["column"] for ln in lines if ln["metric"] != TARGET.name))
    family = _column_family(cells, columns)
    return f"in the {family} columns" if family else "in " + ", ".join(cells)


# why some methods train exactly as FedAvg at a small scale
ALIKE_WHY = {
    "FedProx": "FedProx's proximal term is zero when a client takes a single local step a round",
    "FedNova": "FedNova's normalisation changes nothing when every client takes as many local "
               "steps",
}


def identical_legend(lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any],
                      alike: Mapping[str, str] | None = None) -> str:
    """Which rows are the same runs or runs that trained alike, where, and why ("" when no
    rows are)."""
    said: dict[str, list[str]] = {"paper": [], "scale": [], "alike": []}
    methods = []
    for rows, kind, cells in identical_rows(lines, payload, alike):
        names = " = ".join(_row_name(r) for r in rows)
        said[kind].append(f"{names} {_cells_name(cells, lines)}" if cells else names)
        if kind == "alike":
            methods += [m for m in ALIKE_WHY if any(r.split(" · ")[0] == m for r in rows)]
    out = []
    if said["paper"]:
        out.append(f"{'; '.join(said['paper'])}: one run, as in the paper (its table repeats "
                   "this configuration in these rows).")
    if said["scale"]:
        out.append(f"{'; '.join(said['scale'])}: one run at this scale (the settings that tell "
                   "them apart in the paper come out the same here: see the methods' settings "
                   "this scale changed).")
    if said["alike"]:
        why = "; ".join(ALIKE_WHY[m] for m in dict.fromkeys(methods))
        out.append(f"{'; '.join(said['alike'])}: separate runs that trained alike (the same "
                   "losses every round, to float rounding): what tells them apart has no "
                   f"effect at this scale{f' ({why})' if why else ''}. Count them once.")
    return " ".join(out)
