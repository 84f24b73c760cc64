"""The paper-like layout of a table's long lines, as Markdown and HTML; each cell reads
`paper / ours (ours − paper)`, a pending one `paper / pending`, a quoted one `paper (quoted)`."""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Mapping, Sequence
from typing import Any

from fedhet.papers import paper_name
from fedhet.printed import subscripts_html
from fedhet.tables.identical import identical_legend
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
    return header, body


def _anchor(line: Mapping[str, Any]) -> str:
    """A shown line's `cell_anchor`, by the row it has in the long table."""
    return cell_anchor(line.get("source_row", line["row"]), line["column"], line["metric"])


# how a table's own target was set (`fedhet.tables.compute`), in words
TARGET_HOW = {
    "ours: reference best, floored": "ours is the best accuracy of the table's reference "
                                     "(FedAvg without the method), rounded down to a whole "
                                     "percent",
    "printed target": "ours is the paper's printed target",
}


def _target_legend(lines: Sequence[Mapping[str, Any]]) -> str:
    """What the target column of a table with a target per row means ("" without one)."""
    target = TARGET.name
    rows = {ln["row"] for ln in lines if ln["metric"] != target}
    hows = [t["status"] for t in lines if t["metric"] == target and t["row"] in rows]
    if not hows:
        return ""
    words = "; ".join(TARGET_HOW.get(h, h) for h in dict.fromkeys(hows))
    return f"{TARGET.header}: the accuracy a run must reach, paper / ours ({words})."


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
    return f"<td{own}>{inner}{_html(text)}</td>"


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


def _quoted_sources(lines: Sequence[Mapping[str, Any]], paper: str = "") -> str:
    """Where the quoted cells' numbers come from, per quoted method ("" when no cell is
    quoted): "FedDyn: FedSpeed (Sun et al., ICLR 2023); FedDF: its source is not given". The
    paper that quotes them (", as quoted by FedImpro") is said once, by the legend."""
    quoted = [ln for ln in lines if ln["status"] == QUOTED]
    if not quoted:
        return ""
    # the quoted methods are the columns where no column of theirs holds a number of ours,
    # else the rows
    ours = {ln["column"] for ln in lines if ln["status"] != QUOTED}
    axis = "row" if {ln["column"] for ln in quoted} & ours else "column"
    tail = re.compile(rf",?\s*as quoted by {re.escape(paper_name(paper))}\s*$" if paper
                      else r"$^")
    sources: dict[str, str] = {}
    for ln in quoted:
        source = tail.sub("", str(ln.get("note") or "")).strip()
        sources.setdefault(str(ln[axis]), source or "its source is not given")
    return "; ".join(f"{name}: {source}" for name, source in sources.items())


def _quoted_legend(lines: Sequence[Mapping[str, Any]], paper: str, mark: str = "{}") -> str:
    sources = _quoted_sources(lines, paper)
    if not sources:
        return ""
    return (f"{mark.format(QUOTED_MARK)}: a number {paper_name(paper)} quotes from another "
            f"paper, not run here ({sources}).")


def _dash_legend(body: Sequence[Sequence[str]]) -> str:
    """What "–" (the paper prints no number) and an empty cell mean, where some cell has
    one ("" otherwise)."""
    cells = [c for row in body if not GROUP_ROW.fullmatch(row[0]) for c in row[1:]]
    out = []
    if any(c == "–" or c.startswith("– ") for c in cells):
        out.append("–: the paper has no number to compare there.")
    if any(not c.strip() for c in cells):
        out.append("An empty cell: the paper's table has no such cell.")
    return " ".join(out)


# what a cell reads, with and without its difference from the paper
CELL_LEGEND = {
    True: "Each cell: paper / ours (ours − paper).",
    False: "Each cell: paper / ours. Their difference is not shown: at this scale our numbers "
           "are not comparable with the paper's (the table's CSV keeps it).",
}


def _note_parts(note: str | Sequence[str],
                spec: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The table's notes: what this scale changed (`note`: one text, or a sentence per part:
    `scale_notes.item_note_parts`), and the item's own note and what this scale left out of
    it, a paragraph each."""
    def clean(parts: Sequence[Any]) -> list[str]:
        return [" ".join(str(n).split()) for n in parts if n and str(n).strip()]

    changes = [note] if isinstance(note, str) else list(note)
    return clean(changes), clean([spec.get("note"), spec.get("scale_note")])


def _legends(lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any],
             body: Sequence[Sequence[str]], scale: str, deltas: bool, mark: str) -> list[str]:
    """The legend's sentences (plain text; each word standing for a missing number set in
    `mark`), in the order a reader needs them."""
    if _only_settings(lines):
        return [f"Scale {scale}.", SETTINGS_LEGEND]
    out = [f"Scale {scale}.", CELL_LEGEND[deltas]]
    if any(ln["status"] == PENDING for ln in lines):
        out.append(f"{mark.format('pending')}: the method is not implemented yet.")
    out += [_quoted_legend(lines, payload.get("paper", ""), mark), _missing_legend(body, mark),
            _near_chance_legend(lines), _dash_legend(body), _target_legend(lines)]
    return [part for part in out if part]


def render_markdown(
    lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], scale: str,
    note: str | Sequence[str] = "", deltas: bool = True, alike: Mapping[str, str] | None = None,
) -> str:
    """The table as Markdown: title, legend, notes and the paper-like grid; without the cells'
    differences from the paper unless `deltas` (the scale's `comparable`)."""
    header, body = layout(lines, payload, deltas)
    spec = payload["spec"]
    out = [f"# {paper_name(payload['paper'])} {spec.get('title', payload['id'])}", ""]
    out.append(" ".join(_legends(lines, payload, body, scale, deltas, "`{}`")))
    identical = identical_legend(lines, payload, alike)
    if identical:
        out += ["", f"Identical rows: {identical}"]
    changes, others = _note_parts(note, spec)
    if changes:
        out += ["", " ".join(changes)]
    for paragraph in others:
        out += ["", paragraph]
    out.append("")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(["---"] * len(header)) + "|")
    for row in body:
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


# a table of more columns than this is set smaller and tighter, so that it fits the report's pane
WIDE_COLUMNS = 8
# a page's body (tables, the scorecard): its right margin keeps a table clear of the pane's edge
RIGHT_MARGIN = 24  # CSS pixels
BODY_STYLE = f"body{{font-family:sans-serif;font-size:13px;margin:12px {RIGHT_MARGIN}px 24px 16px}}"
STYLE = (
    BODY_STYLE
    + "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 6px;"
    "text-align:right;white-space:nowrap}th{white-space:normal;vertical-align:bottom}"
    "td:first-child,th:first-child{text-align:left;white-space:normal}"
    "table.wide{font-size:12px}table.wide td,table.wide th{padding:2px 4px}"
    "table.names td:first-child{white-space:nowrap}"
    "table td[colspan],table.names td[colspan]{white-space:normal;text-align:left}"
    "p{max-width:75em}details{max-width:75em;margin:0.5em 0}summary{cursor:pointer}"
    ".legend{color:#333}"
    # the cell a scorecard's link opens
    "td:target,td:has(>a:target){outline:2px solid #b45309;background:#fffbeb}"
)
# a table wider than its page (the report's pane) is set smaller, to 9 px at the least, until it
# fits inside the body's right margin; again when the page is resized
FIT_SCRIPT = (
    "<script>(function(){var t=document.querySelector('table');if(!t)return;"
    "var base=parseFloat(getComputedStyle(t).fontSize);function fit(){t.style.fontSize='';"
    f"var size=base,room=document.documentElement.clientWidth-{RIGHT_MARGIN};"
    "while(t.getBoundingClientRect().right>room&&size>9){size-=0.5;"
    "t.style.fontSize=size+'px';}}fit();addEventListener('resize',fit);})();</script>"
)
# row names up to this long stay on one line (ResNet-18 unbroken)
SHORT_NAMES = 28


def _html(text: str) -> str:
    return subscripts_html(html.escape(text))


def _notes_html(changes: list[str], others: list[str]) -> str:
    """The notes: what this scale changed to every run shown, the methods' own settings it
    changed behind a toggle (each said once, under the method's name), then the item's notes."""
    out = []
    if changes:
        out.append(f"<p>{_html(changes[0])}</p>")
    if len(changes) > 1:
        names = ", ".join(part.split(":", 1)[0] for part in changes[1:])
        inner = "".join(f"<p>{_html(part)}</p>" for part in changes[1:])
        out.append(f"<details><summary>The methods' settings this scale changed ({_html(names)})"
                   f"</summary>{inner}</details>")
    out += [f"<p>{_html(paragraph)}</p>" for paragraph in others]
    return "".join(out)


def render_html(
    lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], scale: str,
    note: str | Sequence[str] = "", deltas: bool = True, alike: Mapping[str, str] | None = None,
) -> str:
    """The table as a standalone HTML page (the same grid as the Markdown): each cell on one
    line, anchored for the scorecard's links; a wide table set smaller so that it fits the
    report's pane; a long note of what this scale changed folded after its first clauses."""
    anchors: list[list[list[str]]] = []
    header, body = layout(lines, payload, deltas, anchors)
    spec = payload["spec"]
    legend = _legends(lines, payload, body, scale, deltas, "<i>{}</i>")
    legend_html = " ".join(
        part if "<i>" in part else _html(part) for part in legend)
    legend_html = legend_html.replace(f"Scale {html.escape(scale)}.",
                                      f"Scale <b>{html.escape(scale)}</b>.", 1)
    identical = identical_legend(lines, payload, alike)
    classes = ["wide"] if len(header) > WIDE_COLUMNS else []
    if all(len(row[0]) <= SHORT_NAMES for row in body if not GROUP_ROW.fullmatch(row[0])):
        classes.append("names")
    wide = f" class='{' '.join(classes)}'" if classes else ""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<style>{STYLE}</style></head><body>",
        f"<h3>{_html(paper_name(payload['paper']))} {_html(spec.get('title', ''))}</h3>",
        f"<p class='legend'>{legend_html}</p>",
        f"<p><b>Identical rows.</b> {_html(identical)}</p>" if identical else "",
        _notes_html(*_note_parts(note, spec)),
        f"<table{wide}><tr>" + "".join(f"<th>{_html(h)}</th>" for h in header) + "</tr>",
    ]
    for row, ids in zip(body, anchors, strict=True):
        first = row[0]
        group = GROUP_ROW.fullmatch(first)
        if group:  # a group header, markdown "**name** (details)"
            name, details = group.groups()
            parts.append(f"<tr><td colspan='{len(header)}'><b>{_html(name)}</b>"
                         f"{_html(details)}</td></tr>")
            continue
        parts.append("<tr>" + "".join(_td(c, i) for c, i in zip(row, ids, strict=True))
                     + "</tr>")
    parts.append(f"</table>{FIT_SCRIPT}</body></html>")
    return "\n".join(part for part in parts if part)
