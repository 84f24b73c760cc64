"""The leaderboard of a challenger: per paper and table, the challenger's result next to each of
our methods', its rank among them, its wins, ties and losses over the table's settings, and the
cost of both (torch-free).

The input is one row per run: (paper, table, setting, method, seed) with the run's `value` of
the table's scored `metric` (higher is better unless `lower_is_better`: rounds to a target), its
`status`, the cell's `chance` level and the paper's printed number, and the run's costs
(`COLUMNS`). A cell is the runs of one method in one setting (all seeds). Cells are judged as the
tables and the scorecard judge them: an accuracy cell is near chance when its mean over seeds is
(`fedhet.tables.maths.near_chance`), a cell diverged when any of its runs diverged
(`fedhet.tables.schema.DIVERGED`); such settings are left out of a comparison and counted. A
rounds cell where a seed never reached the target (`fedhet.tables.schema.NEVER`) is compared:
it loses to a cell that reached it and ties with another that did not.
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from fedhet.papers import paper_name
from fedhet.tables.maths import (
    NEAR_CHANCE,
    SPREAD_SEEDS,
    TIE_SLACK,
    mean_std,
    near_chance,
    tie_threshold,
)
from fedhet.tables.metrics import lookup
from fedhet.tables.render import fmt
from fedhet.tables.schema import DIVERGED, NEVER
from fedhet.tables.scorecard import STYLE

KEY = ["paper", "table", "setting", "method"]
COSTS = ["train_flops", "bytes_per_round", "seconds"]
COLUMNS = [*KEY, "label", "seed", "value", "status", "chance", "paper_value", "metric",
           "lower_is_better", *COSTS]
STATUSES = ("completed", DIVERGED, NEVER)
# both cells have at least SPREAD_SEEDS seeds: a tie is judged by their spread, not the margin;
# SLACK: float rounding when a difference is compared with its tie threshold (fedhet.tables.maths)
SLACK = TIE_SLACK

BOARD = ["paper", "table", "metric", "lower_is_better", "method", "label", "ours",
         "paper_value", "challenger", "rank", "ranked", "wins", "ties", "losses", "excluded",
         "train_flops", "challenger_train_flops", "bytes_per_round",
         "challenger_bytes_per_round", "seconds", "challenger_seconds"]


@dataclass(frozen=True)
class Cell:
    """One method's runs in one setting."""

    mean: float
    std: float  # sample std over seeds (NaN under two seeds)
    seeds: int
    excluded: bool  # near chance, diverged, or without a value (other than `unreached`)
    paper_value: float
    unreached: bool = False  # a seed never reached a rounds table's target (no value)


def build_leaderboard(results: pd.DataFrame, challenger: str, *,
                      tie_margin: float) -> pd.DataFrame:
    """One row per (paper, table, method other than `challenger`), in the order the methods
    first appear in `results`; tables without the challenger give none.

    Per setting both the method and the challenger ran, their cells are compared unless either
    is near chance or diverged (a run diverged, or the cell has no value: then the setting
    counts in `excluded`; a setting only one of them ran is not counted): with c and m the two
    means over seeds, the challenger wins when c − m exceeds the tie threshold (m − c where
    lower is better), loses when the other way round does, and ties otherwise. The threshold
    is the seeds' spread, the larger of the two cells' sample standard deviations over seeds,
    when both cells have at least three seeds; else `tie_margin` (in the units of `value`). A
    cell that never reached a rounds table's target loses to one that did and ties with one
    that did not.

    `ours` and `challenger` are the two methods' means over the compared settings (mean of the
    cells' means; in a rounds table over those both reached), `paper_value` the mean of the
    paper's numbers for the method over the same settings (NaN where the paper prints none for
    one of them). `rank` is 1 + the number of methods of the table whose `ours` beats the
    `challenger` of their row (each pair compared on the settings both were compared in: on a
    full grid without exclusions, the rank by table mean; in a rounds table, fewer settings
    never reached comes first), out of `ranked` (the methods with a compared setting, and the
    challenger); <NA> when the challenger was compared with none. Costs are means per run over
    every setting both ran: training work (images × FLOPs), bytes per round and seconds, the
    method's and the challenger's (`challenger_<cost>`)."""
    _check(results, challenger, tie_margin)
    cells = _cells(results)
    rows = []
    for (paper, table), runs in results.groupby(["paper", "table"], sort=False):
        mine = cells.get((paper, table, challenger))
        if mine is None:
            continue
        lower = bool(runs["lower_is_better"].iloc[0])
        methods = [m for m in dict.fromkeys(runs["method"]) if m != challenger]
        table_rows = [
            _pair(runs, cells[(paper, table, method)], mine, method, challenger, tie_margin,
                  lower)
            for method in methods
        ]
        _rank(table_rows, lower)
        rows += [{"paper": paper, "table": table, "metric": runs["metric"].iloc[0],
                  "lower_is_better": lower, **row} for row in table_rows]
    board = pd.DataFrame(rows, columns=BOARD)
    for column in ("rank", "ranked", "wins", "ties", "losses", "excluded"):
        board[column] = board[column].astype("Int64")
    return board


def _check(results: pd.DataFrame, challenger: str, tie_margin: float) -> None:
    """ValueError naming what is wrong with the input and how to fix it."""
    missing = [c for c in COLUMNS if c not in results.columns]
    if missing:
        raise ValueError(f"results lack column(s) {', '.join(missing)}; give one row per run "
                         f"with columns {', '.join(COLUMNS)}")
    if not (isinstance(tie_margin, numbers.Real) and not isinstance(tie_margin, bool)
            and math.isfinite(tie_margin) and tie_margin >= 0):
        raise ValueError(f"tie_margin is {tie_margin!r}; give a finite number >= 0")
    if challenger not in set(results["method"]):
        present = ", ".join(sorted(set(results["method"])))
        raise ValueError(f"challenger '{challenger}' has no results; methods present: "
                         f"{present or 'none'}")
    bad = sorted(set(results["status"]) - set(STATUSES))
    if bad:
        raise ValueError(f"unknown run status {bad[0]!r}; valid: {', '.join(STATUSES)}")
    mixed = results.groupby(["paper", "table"])[["metric", "lower_is_better"]].nunique()
    if (mixed > 1).any(axis=None):
        paper, table = mixed[(mixed > 1).any(axis=1)].index[0]
        raise ValueError(f"table {table} of {paper} is scored on more than one metric or "
                         "direction; give one metric per table")
    twice = results.duplicated([*KEY, "seed"])
    if twice.any():
        row = results[twice].iloc[0]
        raise ValueError("results hold a run twice: " + ", ".join(
            f"{k}={row[k]}" for k in [*KEY, "seed"]))


def _cells(results: pd.DataFrame) -> dict[tuple, dict[str, Cell]]:
    """(paper, table, method) → setting → its cell."""
    out: dict[tuple, dict[str, Cell]] = {}
    for (paper, table, setting, method), runs in results.groupby(KEY, sort=False):
        mean, std, n = mean_std(runs["value"].astype(float).tolist())
        chance = _float(runs["chance"].iloc[0])
        metric = lookup(str(runs["metric"].iloc[0]))
        diverged = bool((runs["status"] == DIVERGED).any())
        unreached = not diverged and bool((runs["status"] == NEVER).any())
        accuracy = metric is not None and metric.accuracy
        excluded = (
            (math.isnan(mean) and not unreached)
            or diverged
            or (accuracy and near_chance(mean, None if math.isnan(chance) else chance))
        )
        out.setdefault((paper, table, method), {})[setting] = Cell(
            mean, std, n, excluded, _float(runs["paper_value"].iloc[0]), unreached)
    return out


def _float(value: object) -> float:
    """A number of the input; NaN for a missing one (None, NaN, <NA>)."""
    return math.nan if pd.isna(value) else float(value)


def _outcome(challenger: Cell, method: Cell, tie_margin: float, lower: bool) -> str:
    """'wins', 'ties' or 'losses' of the challenger's cell against the method's (`lower`:
    lower values are better)."""
    if challenger.unreached or method.unreached:
        if challenger.unreached and method.unreached:
            return "ties"
        return "losses" if challenger.unreached else "wins"
    threshold = tie_threshold(tie_margin, challenger.std, challenger.seeds, method.std,
                              method.seeds)
    diff = (method.mean - challenger.mean) if lower else (challenger.mean - method.mean)
    if abs(diff) <= threshold + SLACK:
        return "ties"
    return "wins" if diff > 0 else "losses"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _pair(runs: pd.DataFrame, theirs: dict[str, Cell], mine: dict[str, Cell], method: str,
          challenger: str, tie_margin: float, lower: bool) -> dict:
    """The leaderboard row of one method against the challenger in one table (no rank yet)."""
    shared = [s for s in theirs if s in mine]
    compared = [s for s in shared if not (theirs[s].excluded or mine[s].excluded)]
    counts = {"wins": 0, "ties": 0, "losses": 0}
    for setting in compared:
        counts[_outcome(mine[setting], theirs[setting], tie_margin, lower)] += 1
    # means over the settings where both have a value (in a rounds table: both reached)
    valued = [s for s in compared if not (theirs[s].unreached or mine[s].unreached)]
    in_shared = runs["setting"].isin(shared)
    own = runs[in_shared & (runs["method"] == method)]
    other = runs[in_shared & (runs["method"] == challenger)]
    label = runs.loc[runs["method"] == method, "label"].iloc[0]
    return {
        "method": method, "label": label,
        # settings compared where one never reached a rounds table's target (for the rank)
        "unreached": sum(theirs[s].unreached for s in compared),
        "challenger_unreached": sum(mine[s].unreached for s in compared),
        "ours": _mean([theirs[s].mean for s in valued]),
        "paper_value": _mean([theirs[s].paper_value for s in valued]),
        "challenger": _mean([mine[s].mean for s in valued]),
        **counts, "excluded": len(shared) - len(compared),
        **{cost: _mean(own[cost].astype(float).tolist()) for cost in COSTS},
        **{f"challenger_{cost}": _mean(other[cost].astype(float).tolist()) for cost in COSTS},
    }


def _rank(rows: list[dict], lower: bool) -> None:
    """Set the challenger's rank among the table's methods on each of its rows (`lower`: lower
    means are better). A method beats the challenger when it never reached a rounds table's
    target in fewer of their compared settings, or as often and with the better mean."""

    def beats(r: dict) -> bool:
        if r["unreached"] != r["challenger_unreached"]:
            return r["unreached"] < r["challenger_unreached"]
        return r["ours"] < r["challenger"] if lower else r["ours"] > r["challenger"]

    ranked = [r for r in rows if r["wins"] + r["ties"] + r["losses"] > 0]
    rank = 1 + sum(1 for r in ranked if beats(r))
    for row in rows:
        row["rank"] = rank if ranked else pd.NA
        row["ranked"] = len(ranked) + 1 if ranked else pd.NA


# ----------------------------------------------------------------------------- report


def _number(value: float, digits: int) -> str:
    """A value with `digits` decimals; `–` where there is none."""
    return "–" if pd.isna(value) else f"{value:.{digits}f}"


def _both(challenger: float, ours: float) -> str:
    """Two costs as `challenger / method`, with SI prefixes (1.2T), `–` for a missing one."""
    return " / ".join("–" if pd.isna(v) else fmt(float(v), "flops") for v in (challenger, ours))


def _scored_on(metric: str, lower: bool) -> str:
    """The scored metric as its tables head it, with its direction when lower is better."""
    known = lookup(metric)
    header = known.header if known is not None else metric
    return f"{header}, fewer is better" if lower else header


def readable(board: pd.DataFrame, challenger_label: str, *, digits: int = 2) -> pd.DataFrame:
    """The leaderboard as the report shows it: text cells under readable column names, every
    result with `digits` decimals, costs with SI prefixes as `challenger / method`."""
    who = challenger_label
    rows = []
    for r in board.itertuples(index=False):
        compared = not pd.isna(r.rank)
        rows.append({
            "Paper": paper_name(r.paper),
            "Table": r.table,
            "Scored on": _scored_on(r.metric, bool(r.lower_is_better)),
            "Method": r.label,
            "Ours": _number(r.ours, digits),
            "In the paper": _number(r.paper_value, digits),
            who: _number(r.challenger, digits),
            f"Rank of {who}": f"{r.rank} of {r.ranked}" if compared else "–",
            "Wins / ties / losses": f"{r.wins} / {r.ties} / {r.losses}",
            "Left out": str(r.excluded),
            f"Training work, {who} / method": _both(r.challenger_train_flops, r.train_flops),
            f"Bytes per round, {who} / method": _both(r.challenger_bytes_per_round,
                                                     r.bytes_per_round),
            f"Seconds, {who} / method": " / ".join(
                _number(v, 0) for v in (r.challenger_seconds, r.seconds)),
        })
    columns = ["Paper", "Table", "Scored on", "Method", "Ours", "In the paper", who,
               f"Rank of {who}", "Wins / ties / losses", "Left out",
               f"Training work, {who} / method", f"Bytes per round, {who} / method",
               f"Seconds, {who} / method"]
    return pd.DataFrame(rows, columns=columns)


def legend(challenger_label: str, tie_margin: float) -> str:
    """What the leaderboard's columns mean, the tie rule and its margin included."""
    who = challenger_label
    return (
        f"Per paper and table, {who} against each of our methods, both run under the same "
        f"protocol, scale and seeds. Ours, {who}: the two methods' mean over the settings "
        "compared; in the paper: the paper's number for the method over the same settings. "
        f"Rank: {who}'s place among our methods by mean (1 = best). Wins / ties / losses: per "
        f"setting, {who}'s mean over seeds against the method's; a tie is a difference within "
        f"the seeds' spread (the larger of the two standard deviations over seeds) when both "
        f"have {SPREAD_SEEDS} or more seeds, else within {tie_margin:g} (in the units scored). "
        "Rounds-to-target tables are scored on each seed's rounds to the table's target, "
        "fewer is better: a method that never reached it in a setting loses there to one "
        "that did (ties with one that did not), and the means leave such settings out. Left "
        "out: settings where either method is near chance (less than "
        f"{NEAR_CHANCE:.0%} of the way from chance to 100%) or diverged, not compared. Costs: "
        "mean per run; training work in images × FLOPs (fedhet's counter), bytes sent per "
        "round; seconds measured, for reference only."
    )


def render_markdown(board: pd.DataFrame, challenger_label: str, tie_margin: float,
                    scale: str, *, digits: int = 2, entry: dict | None = None) -> str:
    """The leaderboard as a Markdown page; with `entry` (its manifest), what the challenger is
    (method, package, version, code hash, settings) under the title."""
    table = readable(board, challenger_label, digits=digits)
    about = [f"- {line}" for line in entry_lines(entry)] + [""] if entry else []
    out = [f"# Leaderboard of {challenger_label}", "", *about,
           f"Scale: `{scale}`. {legend(challenger_label, tie_margin)}", "",
           "| " + " | ".join(table.columns) + " |", "|" + "|".join(["---"] * table.shape[1]) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(out) + "\n"


def render_html(board: pd.DataFrame, challenger_label: str, tie_margin: float, scale: str,
                *, digits: int = 2, entry: dict | None = None) -> str:
    """The leaderboard as a standalone HTML page, styled like the scorecard; with `entry`, what
    the challenger is under the title."""
    esc = html.escape
    table = readable(board, challenger_label, digits=digits)
    about = (["<p>" + "<br>".join(esc(line) for line in entry_lines(entry)) + "</p>"]
             if entry else [])
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Leaderboard of {esc(challenger_label)}, scale {esc(scale)}</title>"
        f"<style>{STYLE}</style></head><body>",
        f"<h3>Leaderboard of {esc(challenger_label)}</h3>", *about,
        f"<p>Scale <b>{esc(scale)}</b>. {esc(legend(challenger_label, tie_margin))}</p>",
        "<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in table.columns) + "</tr>",
    ]
    parts += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
              for row in table.itertuples(index=False)]
    if table.empty:
        parts.append(f"<tr><td colspan='{table.shape[1]}'>No table holds both "
                     f"{esc(challenger_label)} and one of our methods.</td></tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts) + "\n"


# ----------------------------------------------------------------------------- the entries

ENTRY_COLUMNS = ["entry", "entry_label", "entry_method", "entry_kind", "entry_package",
                 "entry_version", "entry_source", "entry_settings"]


def with_entry(board: pd.DataFrame, entry: dict) -> pd.DataFrame:
    """The leaderboard with what its challenger is on every row (`ENTRY_COLUMNS`): the entry's
    name and label, its method, kind, package, version, code hash (empty for fedhet's own
    methods) and its settings in the row's paper's tables (`entry`: the entry's manifest,
    `fedhet.experiments.challengers.about`)."""
    columns = [c for c in board.columns if c not in ENTRY_COLUMNS]  # a board read back
    out = board[columns].copy()
    per_paper = entry.get("settings_per_paper") or {}
    values = {"entry": entry["name"], "entry_label": entry["label"],
              "entry_method": entry["method"], "entry_kind": entry["kind"],
              "entry_package": entry["package"], "entry_version": entry["version"],
              "entry_source": entry.get("source", "")}
    for column, value in values.items():
        out[column] = value
    out["entry_settings"] = [per_paper.get(p, entry["settings"]) for p in out["paper"]]
    return out[[*ENTRY_COLUMNS, *columns]]


def entry_lines(entry: dict) -> list[str]:
    """What an entry is, in words, one line each: its method with package, version and code
    hash, and its settings (per paper where they differ)."""
    kind = "plug-in" if entry["kind"] == "plugin" else entry["kind"]
    lines = [f"Entry {entry['name']} ({entry['label']}): {kind} {entry['method']} of "
             f"{entry['package']} {entry['version']}"]
    if entry.get("source"):
        lines.append(f"Code: {entry.get('source_covers') or entry['source']}")
    lines.append(f"Settings: {entry['settings']}")
    for paper, text in (entry.get("settings_per_paper") or {}).items():
        lines.append(f"Settings in {paper_name(paper)}'s tables: {text}")
    return lines


OVERVIEW = ["paper", "table", "metric", "lower_is_better", *ENTRY_COLUMNS, "mean", "rank",
            "ranked", "wins", "ties", "losses", "excluded", "methods"]


def build_overview(entries: Sequence[tuple[dict, pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """Every entry side by side: one row per (paper, table, entry), tables in the order they
    first appear and entries in the given order within each, from each entry's manifest, its
    leaderboard (`build_leaderboard`) and its cells (the ranking's input). `mean`: the entry's
    mean over the table's settings of its mean over seeds (seeds without a value, such as a
    rounds target never reached, left out); rank and ranked as on its leaderboard; wins, ties,
    losses and excluded summed over the table's methods (`methods` of them)."""
    rows = []
    for order, (entry, board, cells) in enumerate(entries):
        with_it = with_entry(board, entry)
        for (paper, table), part in with_it.groupby(["paper", "table"], sort=False):
            mine = cells[(cells["paper"] == paper) & (cells["table"].astype(str) == str(table))
                         & (cells["method"] == entry["name"])]
            per_setting = mine.groupby("setting")["value"].mean()
            first = part.iloc[0]
            rows.append({
                "paper": paper, "table": table, "metric": first["metric"],
                "lower_is_better": bool(first["lower_is_better"]),
                **{c: first[c] for c in ENTRY_COLUMNS},
                "mean": float(per_setting.mean()) if len(per_setting) else math.nan,
                "rank": first["rank"], "ranked": first["ranked"],
                **{c: int(part[c].fillna(0).sum()) for c in ("wins", "ties", "losses",
                                                             "excluded")},
                "methods": len(part), "_order": order,
            })
    frame = pd.DataFrame(rows, columns=[*OVERVIEW, "_order"])
    if frame.empty:
        return frame[OVERVIEW]
    tables = {key: i for i, key in enumerate(dict.fromkeys(zip(frame["paper"], frame["table"])))}
    frame["_table"] = [tables[key] for key in zip(frame["paper"], frame["table"])]
    frame = frame.sort_values(["_table", "_order"], kind="stable")
    for column in ("rank", "ranked"):
        frame[column] = frame[column].astype("Int64")
    return frame[OVERVIEW].reset_index(drop=True)


OVERVIEW_LEGEND = (
    "Every leaderboard entry side by side: per paper and table, each entry (a method under "
    "its settings: a sweep of one method's settings gives one entry per setting) with its "
    "mean over the table's settings, its rank among our methods (1 = best) and its wins / "
    "ties / losses summed over the table's methods, as on its own leaderboard. Each entry "
    "states its method, the method's package and version, the hash of its code (another "
    "package's method) and its settings in that paper's tables."
)


def readable_overview(frame: pd.DataFrame, *, digits: int = 2) -> pd.DataFrame:
    """The overview as the report shows it."""
    rows = []
    for r in frame.itertuples(index=False):
        code = f" · {r.entry_source}" if isinstance(r.entry_source, str) and r.entry_source \
            else ""
        rows.append({
            "Paper": paper_name(r.paper),
            "Table": str(r.table),
            "Scored on": _scored_on(r.metric, bool(r.lower_is_better)),
            "Entry": r.entry_label,
            "Method": f"{r.entry_method} ({r.entry_package} {r.entry_version}{code})",
            "Settings": r.entry_settings,
            "Mean": _number(r.mean, digits),
            "Rank": "–" if pd.isna(r.rank) else f"{r.rank} of {r.ranked}",
            "Wins / ties / losses": f"{r.wins} / {r.ties} / {r.losses}",
            "Left out": str(r.excluded),
        })
    columns = ["Paper", "Table", "Scored on", "Entry", "Method", "Settings", "Mean", "Rank",
               "Wins / ties / losses", "Left out"]
    return pd.DataFrame(rows, columns=columns)


def render_overview_markdown(frame: pd.DataFrame, entries: Sequence[dict], scale: str,
                             *, digits: int = 2) -> str:
    table = readable_overview(frame, digits=digits)
    out = ["# Leaderboard: every entry", "", f"Scale: `{scale}`. {OVERVIEW_LEGEND}", "",
           "| " + " | ".join(table.columns) + " |", "|" + "|".join(["---"] * table.shape[1]) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in table.itertuples(index=False)]
    out += ["", "## Entries", ""]
    for entry in entries:
        out += [f"- {line}" if i == 0 else f"  {line}" for i, line in
                enumerate(entry_lines(entry))]
    return "\n".join(out) + "\n"


def render_overview_html(frame: pd.DataFrame, entries: Sequence[dict], scale: str,
                         *, digits: int = 2) -> str:
    esc = html.escape
    table = readable_overview(frame, digits=digits)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Leaderboard: every entry, scale {esc(scale)}</title>"
        f"<style>{STYLE}</style></head><body>",
        "<h3>Leaderboard: every entry</h3>",
        f"<p>Scale <b>{esc(scale)}</b>. {esc(OVERVIEW_LEGEND)}</p>",
        "<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in table.columns) + "</tr>",
    ]
    parts += ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>"
              for row in table.itertuples(index=False)]
    parts.append("</table><h4>Entries</h4><ul>")
    parts += ["<li>" + "<br>".join(esc(line) for line in entry_lines(e)) + "</li>"
              for e in entries]
    parts.append("</ul></body></html>")
    return "\n".join(parts) + "\n"
