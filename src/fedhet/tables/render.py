"""The paper-like layout of a table's long lines, as Markdown and HTML; each cell reads
`paper / ours (ours − paper)`, a pending one `paper / pending`, a quoted one `paper (quoted)`."""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fedhet.papers import paper_name
from fedhet.tables.metrics import TARGET, lookup
from fedhet.tables.schema import CONFIG, DIVERGED, NEVER, PENDING, QUOTED, is_nan

# metrics a cell's calibration gain is printed next to (CCVR), in parentheses
GAIN_HOSTS = ("acc", "last_acc")
QUOTED_MARK = "(quoted)"
NEAR_CHANCE_MARK = "†"
NEAR_CHANCE_LEGEND = (
    f"{NEAR_CHANCE_MARK}: ours is near chance (less than a tenth of the way from guessing among "
    "the classes to 100%): the run learns (almost) nothing at this scale, so it is not compared "
    "with the paper."
)


GROUP_ROW = re.compile(r"\*\*(.+?)\*\*(.*)")  # a group header row of the markdown table


def cell_anchor(row: str, column: str, metric: str) -> str:
    """The HTML id of a table's cell (a line's row, column and metric), which the scorecard
    links to: readable, and unique through a digest of the exact labels."""
    text = f"{row}\x1f{column}\x1f{metric}"
    slug = re.sub(r"[^0-9A-Za-z]+", "-", f"{row} {column} {metric}").strip("-")[:48]
    return f"cell-{slug}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


# what a missing number of ours means, by the line's status
MISSING = {NEVER: "not reached", DIVERGED: "diverged"}
MISSING_LEGEND = {
    "not reached": "the target accuracy is not reached within the rounds run (the paper "
                   "prints Nan)",
    "diverged": "training diverged (its loss or weights stopped being finite)",
    "n/a": "the runs logged no such number",
}


def fmt(value: Any, metric: str, std: Any = None, status: str | None = None) -> str:
    """A value as the paper prints it: `–` when not printed, digits by metric, `±std`; a
    number that is missing says why: `not reached` (the target, within the rounds; the
    paper's own Nan means that), `diverged`, else `n/a`."""
    if value is None:
        return "–"
    known = lookup(metric)
    if is_nan(value):
        if status in MISSING:
            return MISSING[status]
        rounds_based = known is not None and known.needs_rounds
        return "not reached" if status is None and rounds_based else "n/a"
    digits = known.text if known is not None else (lambda v: f"{v:.2f}")
    text = digits(value)
    if std is not None and not is_nan(std):  # at the value's precision
        text += f"±{digits(std)}"
    return text


def signed(value: float, metric: str) -> str:
    """A difference at the precision its metric's values are printed with (+1.5, -47.4,
    +174K)."""
    known = lookup(metric)
    text = known.text(abs(value)) if known is not None else f"{abs(value):.2f}"
    return ("-" if value < 0 else "+") + text


def header_of(metric: str) -> str:
    """The printed name of a metric (the name itself for an unknown one)."""
    known = lookup(metric)
    return metric if known is None else known.header


def cell_text(line: Mapping[str, Any], deltas: bool = True) -> str:
    """One cell: `paper / ours (delta)` (`paper / ours` without `deltas`); `paper / pending`;
    `paper (quoted)`."""
    metric = line["metric"]
    paper = fmt(line["paper_value"], metric, line.get("paper_std"))
    if line["status"] == PENDING:
        return f"{paper} / pending"
    if line["status"] == QUOTED:
        return f"{paper} {QUOTED_MARK}"
    ours = fmt(line["our_mean"], metric, line.get("our_std"), line["status"])
    if line["status"] == CONFIG:  # a setting: its value here, and the paper's where it differs
        return ours if line["paper_value"] is None or paper == ours else f"{paper} / {ours}"
    return _compared(paper, ours, line, deltas)


def _compared(paper: str, ours: str, line: Mapping[str, Any], deltas: bool = True) -> str:
    """`paper / ours (ours − paper)`; `paper / ours †` where ours is near chance; `paper /
    ours` without `deltas` (a scale whose numbers are not comparable with the papers')."""
    text = f"{paper} / {ours}"
    if line.get("near_chance"):
        return f"{text} {NEAR_CHANCE_MARK}"
    if deltas and not is_nan(line["delta"]):
        text += f" ({signed(line['delta'], line['metric'])})"
    return text


def _gain_text(line: Mapping[str, Any] | None, value_key: str) -> str:
    value = None if line is None else line[value_key]
    if value is None or is_nan(value) or (line["status"] == PENDING and value_key == "our_mean"):
        return ""
    return f" ({'↑' if value >= 0 else '↓'}{abs(value):.2f})"


def gain_cell_text(acc: Mapping[str, Any], gain: Mapping[str, Any] | None,
                   deltas: bool = True) -> str:
    """An accuracy cell with its calibration gain in parentheses, as CCVR prints it:
    `paper (↑gain) / ours (↑gain) (ours − paper)`."""
    metric = acc["metric"]
    paper = fmt(acc["paper_value"], metric, acc.get("paper_std")) + _gain_text(gain, "paper_value")
    if acc["status"] == PENDING:
        return f"{paper} / pending"
    if acc["status"] == QUOTED:
        return f"{paper} {QUOTED_MARK}"
    ours = fmt(acc["our_mean"], metric, acc.get("our_std"), acc["status"]) + _gain_text(
        gain, "our_mean")
    return _compared(paper, ours, acc, deltas)


def layout(lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], deltas: bool = True,
           anchors: list[list[list[str]]] | None = None):
    """The paper-like grid: header + body rows; block headers where rows have a block part;
    cells without their difference from the paper unless `deltas`.
    A `gain` next to an accuracy of the same cell (CCVR's calibrations) is shown inside the
    accuracy cell, in parentheses, as the paper prints it (the CSV keeps it as its own line).
    `anchors`, when given, receives per body row the `cell_anchor`s of each of its cells (of
    the lines it shows: none for labels and group rows, two for an accuracy with its gain)."""
    record = anchors if anchors is not None else []
    spec = payload["spec"]
    target = TARGET.name
    gains = {(ln["row"], ln["column"]): ln for ln in lines if ln["metric"] == "gain"}
    accs = {(ln["row"], ln["column"]) for ln in lines if ln["metric"] in GAIN_HOSTS}
    if gains and set(gains) <= accs:
        lines = [ln for ln in lines if ln["metric"] != "gain"]
    else:
        gains = {}
    blocks = len(spec.get("rows", [])) >= 2
    lines = _block_level_into_first_rows(lines, target) if blocks else list(lines)
    metrics: list[str] = []
    columns: list[str] = []
    for ln in sorted(lines, key=lambda ln: not ln.get("block_level", False)):
        if ln["metric"] == target:
            continue
        if ln["metric"] not in metrics:
            metrics.append(ln["metric"])
        if ln["column"] not in columns:
            columns.append(ln["column"])
    heads = [(m, c) for m in metrics for c in columns]
    used = {(ln["metric"], ln["column"]) for ln in lines}
    heads = [h for h in heads if h in used]
    if len(metrics) == 1:
        header = ["", *[c or header_of(m) for m, c in heads]]
    else:
        header = ["", *[f"{header_of(m)} {c}".strip() for m, c in heads]]
    targets = {ln["row"]: ln for ln in lines if ln["metric"] == target}
    body: list[list[str]] = []
    by_row: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
    order: list[str] = []
    for ln in lines:
        if ln["metric"] == target:
            continue
        if ln["row"] not in by_row:
            by_row[ln["row"]] = {}
            order.append(ln["row"])
        by_row[ln["row"]][(ln["metric"], ln["column"])] = ln
    if blocks:  # the rows of a block together (e.g. a block's "Average" row after its rows)
        firsts: dict[str, int] = {}
        for k, row in enumerate(order):
            firsts.setdefault(row.split(" · ", 1)[0], k)
        order.sort(key=lambda row: firsts[row.split(" · ", 1)[0]])
    # a target per whole row (FedImpro Table 2) gets its own first column; a target per block of
    # rows (VHL Tables 1, 2, 4, 5) goes into the block's header line
    row_targets = any(row in targets for row in order)
    if row_targets:
        header.insert(1, TARGET.header)
    shown_blocks = {row.split(" · ", 1)[0] for row in order if blocks and " · " in row}
    table_wide = [t for key, t in targets.items() if key not in by_row and key not in shown_blocks]
    if table_wide:  # a target for the whole table (FedImpro Tables 8, 9): a line above the rows
        body.append([_target_line(table_wide), *[""] * (len(header) - 1)])
        record.append([[] for _ in header])
    current = None
    for row in order:
        name = row
        if blocks and " · " in row:
            block, name = row.split(" · ", 1)
            if block != current:
                current = block
                title = f"**{block}**"
                if block in targets:
                    t = targets[block]
                    title += (
                        f" (target ACC: paper {fmt(t['paper_value'], target)}"
                        f" / ours {fmt(t['our_mean'], target)}, {t['status']})"
                    )
                body.append([title, *[""] * (len(header) - 1)])
                record.append([[] for _ in header])
        cells = by_row[row]
        line = [name]
        if row_targets:
            t = targets.get(row)
            line.append(
                f"{fmt(t['paper_value'], target)} / {fmt(t['our_mean'], target)}" if t else ""
            )
        texts = []
        ids: list[list[str]] = [[] for _ in line]
        for h in heads:
            if h not in cells:
                texts.append("")
                ids.append([])
            elif (row, h[1]) in gains and h[0] in GAIN_HOSTS:
                texts.append(gain_cell_text(cells[h], gains[(row, h[1])], deltas))
                ids.append([_anchor(cells[h]), _anchor(gains[(row, h[1])])])
            else:
                texts.append(cell_text(cells[h], deltas))
                ids.append([_anchor(cells[h])])
        body.append(line + texts)
        record.append(ids)
    if row_targets:
        statuses = sorted({t["status"] for t in targets.values()})
        body.append([f"target: {', '.join(statuses)}", *[""] * (len(header) - 1)])
        record.append([[] for _ in header])
    return header, body


def _anchor(line: Mapping[str, Any]) -> str:
    """A shown line's `cell_anchor`, by the row it has in the long table."""
    return cell_anchor(line.get("source_row", line["row"]), line["column"], line["metric"])


def _target_line(targets: Sequence[Mapping[str, Any]]) -> str:
    """The group row giving targets that belong to no row or block: `**target ACC** (CIFAR-10:
    paper 82 / ours 66, how ours is set)`."""
    name = TARGET.name
    values = "; ".join(f"{t['row']}: paper {fmt(t['paper_value'], name)} / ours "
                       f"{fmt(t['our_mean'], name, status=t['status'])}" for t in targets)
    how = ", ".join(dict.fromkeys(str(t["status"]) for t in targets))
    return f"**{TARGET.header}** ({values}, {how})"


def _block_level_into_first_rows(lines: Sequence[Mapping[str, Any]],
                                 target: str) -> list[Mapping[str, Any]]:
    """A value line whose row is a whole block (FedImpro Table 1's centralized accuracy per
    dataset, row "CIFAR-10") is shown in the first row of that block, in a column of its own
    placed first, as the paper prints it (a block's target stays in the block's header)."""
    rows = [ln["row"] for ln in lines]
    first_of = {}
    for row in rows:
        if " · " in row:
            first_of.setdefault(row.split(" · ", 1)[0], row)
    out = []
    for ln in lines:
        if ln["row"] in first_of and ln["metric"] != target:
            ln = {**ln, "row": first_of[ln["row"]], "block_level": True, "source_row": ln["row"]}
        out.append(ln)
    return out


def _td(text: str, ids: Sequence[str]) -> str:
    """A cell with its anchor (the first id; a gain shown inside it, an empty link's)."""
    own = f" id='{ids[0]}'" if ids else ""
    inner = "".join(f"<a id='{i}'></a>" for i in ids[1:])
    return f"<td{own}>{inner}{html.escape(text)}</td>"


SETTINGS_LEGEND = (
    "Each cell: the value the runs use at this scale, as the paper's hyper-parameter table gives "
    "it (paper / ours where they differ)."
)


def _only_settings(lines: Sequence[Mapping[str, Any]]) -> bool:
    """A settings table (values of the configuration, no results)."""
    return bool(lines) and all(ln["status"] == CONFIG for ln in lines)


def _near_chance_legend(lines: Sequence[Mapping[str, Any]]) -> str:
    """The legend of the near-chance mark ("" when no cell carries it)."""
    return NEAR_CHANCE_LEGEND if any(ln.get("near_chance") for ln in lines) else ""


def _missing_legend(body: Sequence[Sequence[str]], mark: str = "`{}`") -> str:
    """What the words standing for a missing number mean, each word set in `mark` ("" when no
    cell has one)."""
    text = " ".join(c for row in body for c in row[1:])
    return " ".join(f"{mark.format(word)}: {meaning}." for word, meaning
                    in MISSING_LEGEND.items() if word in text)


def _quoted_sources(lines: Sequence[Mapping[str, Any]]) -> str:
    """Where the quoted cells' numbers come from ("" when no cell is quoted)."""
    quoted = [ln.get("note") or "" for ln in lines if ln["status"] == QUOTED]
    return ", ".join(dict.fromkeys(quoted))


# what a cell reads, with and without its difference from the paper
CELL_LEGEND = {
    True: "Each cell: paper / ours (ours − paper).",
    False: "Each cell: paper / ours. Their difference is not shown: at this scale our numbers "
           "are not comparable with the paper's (the table's CSV keeps it).",
}


def render_markdown(
    lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], scale: str, note: str = "",
    deltas: bool = True,
) -> str:
    """The table as Markdown: title, legend, notes and the paper-like grid; without the cells'
    differences from the paper unless `deltas` (the scale's `comparable`)."""
    header, body = layout(lines, payload, deltas)
    spec = payload["spec"]
    note = " ".join(n for n in (note, spec.get("note"), spec.get("scale_note")) if n)
    out = [f"# {paper_name(payload['paper'])} {spec.get('title', payload['id'])}", ""]
    legend = f"Scale: `{scale}`. " + (
        SETTINGS_LEGEND if _only_settings(lines) else
        f"{CELL_LEGEND[deltas]} `pending`: the method is not implemented yet."
    )
    sources = _quoted_sources(lines)
    if sources:
        legend += f" `{QUOTED_MARK}`: a number the paper quotes ({sources}); not run here."
    missing = _missing_legend(body)
    legend = " ".join(part for part in (legend, missing, _near_chance_legend(lines)) if part)
    out.append(legend)
    if note:
        out += ["", note]
    out.append("")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(["---"] * len(header)) + "|")
    for row in body:
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def render_html(
    lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], scale: str, note: str = "",
    deltas: bool = True,
) -> str:
    """The table as a standalone HTML page (the same grid as the Markdown)."""
    anchors: list[list[list[str]]] = []
    header, body = layout(lines, payload, deltas, anchors)
    spec = payload["spec"]
    note = " ".join(n for n in (note, spec.get("note"), spec.get("scale_note")) if n)
    sources = _quoted_sources(lines)
    marks = (  # the legends of the marks some cell carries
        f"<i>{QUOTED_MARK}</i>: a number the paper quotes ({html.escape(sources)}); not run here. "
        if sources
        else ""
    )
    missing = _missing_legend([[html.escape(c) for c in row] for row in body], "<i>{}</i>")
    marks += f"{missing} " if missing else ""
    near = _near_chance_legend(lines)
    marks += f"{html.escape(near)} " if near else ""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        (
            "<style>body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse}"
            "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
            "td:first-child{text-align:left}"
            # the cell a scorecard's link opens
            "td:target,td:has(>a:target){outline:2px solid #b45309;background:#fffbeb}"
            "</style></head><body>"
        ),
        f"<h3>{html.escape(paper_name(payload['paper']))} {html.escape(spec.get('title', ''))}</h3>",
        (
            f"<p>Scale <b>{html.escape(scale)}</b>. "
            + (html.escape(SETTINGS_LEGEND) + " " if _only_settings(lines) else
               f"{html.escape(CELL_LEGEND[deltas])} <i>pending</i>: method not implemented "
               "yet. ")
            + f"{marks}</p>"
            + (f"<p>{html.escape(note)}</p>" if note else "")  # what this scale changed
        ),
        "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>",
    ]
    for row, ids in zip(body, anchors, strict=True):
        first = row[0]
        group = GROUP_ROW.fullmatch(first)
        if group:  # a group header, markdown "**name** (details)"
            name, details = group.groups()
            parts.append(f"<tr><td colspan='{len(header)}'><b>{html.escape(name)}</b>"
                         f"{html.escape(details)}</td></tr>")
            continue
        parts.append("<tr>" + "".join(_td(c, i) for c, i in zip(row, ids, strict=True))
                     + "</tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts)
