"""The scorecard as a reader sees it: a coloured count of the verdicts, how a verdict is reached,
then one row per claim with the paper's name, its verdict (with the data it ran on and the part
of the claim it covers), the counts behind it and every pair it compared, each cell linked to its
place in its table. The scale and seeds, the same on every row, are said once above the table.

Links: in a file of its own the scorecard links each table's HTML file beside it (with the cell's
anchor, `fedhet.tables.render.cell_anchor`); inside the report (an iframe) a click asks the report
page to open that table's entry at the cell (`fedhet.report.page`'s script)."""

from __future__ import annotations

import csv
import html
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedhet.papers import paper_name
from fedhet.tables.claims import (
    AGAINST,
    HOLDS,
    MIN_PAIRS,
    NEAR_CHANCE,
    NOT_ENOUGH,
    NOT_REPRODUCED,
    REPEAT,
    REPRODUCED,
    TIE,
    UNIVERSAL,
)
from fedhet.tables.maths import SPREAD_SEEDS, TIE_MARGIN
from fedhet.tables.render import BODY_STYLE, cell_anchor, fmt

RULES = {"all": "needs every pair", "majority": "needs a majority of pairs"}

# the verdicts in the order a summary counts them, each with its colours (text, background)
VERDICTS = {
    REPRODUCED: ("#14532d", "#dcfce7"),
    NOT_REPRODUCED: ("#7f1d1d", "#fee2e2"),
    NOT_ENOUGH: ("#78350f", "#fef3c7"),
    NEAR_CHANCE: ("#374151", "#e5e7eb"),
    "not tested at this scale": ("#374151", "#e5e7eb"),
    "quoted only": ("#374151", "#e5e7eb"),
    "not yet run": ("#374151", "#e5e7eb"),
}
OTHER = ("#374151", "#e5e7eb")


def _words() -> str:
    """The universal words the rule lists, as the claims' texts are searched for them."""
    pattern = UNIVERSAL.pattern
    inner = pattern[pattern.index("(") + 1:pattern.rindex(")")]
    return ", ".join(f"“{w}”" for w in inner.split("|"))


def rule(tie_margin: float = TIE_MARGIN) -> list[str]:
    """How a verdict is reached, one sentence a point (the page lists them)."""
    return [
        "Pairs. A claim compares pairs of cells of a paper's table: a cell of the method the "
        "claim favours and the cell it is compared with, alike in every other label (dataset, "
        "setting, model). A pair is compared when both of its runs ran at this scale; a pair "
        "with a cell near chance (the run learnt almost nothing) or quoted by the paper from "
        "elsewhere is not.",
        "Identical runs count once. Rows of a table whose numbers are all the same (every "
        "column and metric) are the same runs, whatever their labels (FedAvg, FedProx and "
        "FedNova with one local step a round): the pairs they give count as one pair.",
        f"Ties. A pair holds when the favoured cell is better by more than {tie_margin:g} "
        "(percentage points of accuracy; rounds for a rounds-to-target claim; the "
        "leaderboard's tie margin, unless a claim states its own), or, where both cells have "
        f"{SPREAD_SEEDS} or more seeds, by more than the seeds' spread (the larger standard "
        "deviation over seeds). A smaller difference is a tie: it does not count for the "
        "claim. A missing number (a target never reached) loses to any number.",
        "Every pair or a majority. A claim in universal words "
        f"({_words()}) is reproduced only when every distinct pair holds, whatever its "
        "configuration says; a claim on “most” when more than half of them hold; any other "
        "as configured (every pair unless the configuration says a majority).",
        f"Not enough evidence. With fewer than {MIN_PAIRS} distinct pairs compared a claim "
        "gets no verdict.",
        "What ran. Where the scale ran stand-ins, the verdict names the data that ran "
        "(“on colour handwritten digits … standing in for CIFAR-10”), not the paper's "
        "dataset, and settings that ran otherwise than the table's labels say (“IPC=2 in "
        "place of the paper's IPC=10”). Where only part of a claim could be compared, the verdict says "
        "which part (“on CIFAR-10 only; SVHN not run at this scale”); “not tested at this "
        "scale” where none of it ran.",
        "Counts. “k/n pairs hold”: the claim holds in k of the n distinct pairs compared; the "
        "rest are tied or against it. “In the paper”: the same count on the paper's own "
        "numbers over all of the claim's pairs, run here or not, strictly (a check of our "
        "transcription). Under each verdict, every pair it compared, each cell linked to its "
        "place in its table.",
    ]


# kept for readers of the old page's wording (the caption): what "pairs" and the rules mean
LEGEND = " ".join(rule())

STYLE = (
    BODY_STYLE
    + "table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}"
    ".warning{border:2px solid #b45309;background:#fffbeb;padding:6px 10px;max-width:60em}"
)
# the scorecard's own: verdict badges, the rule's list, the pairs under a verdict
OWN_STYLE = (
    ".verdict{font-weight:bold;padding:0 4px;border-radius:3px;white-space:nowrap}"
    ".summary{font-size:14px;margin:6px 0}.summary .verdict{margin-right:6px}"
    "ol.rule{max-width:60em;padding-left:1.5em}ol.rule li{margin:2px 0}"
    "details{margin-top:3px}summary{cursor:pointer;color:#1d4ed8}"
    "ul.pairs{margin:3px 0;padding-left:1.2em}ul.pairs li{margin:1px 0}"
    ".holds{color:#14532d}.against{color:#7f1d1d}.tie,.repeat,.near{color:#6b7280}"
    "table.scorecard{max-width:100%}table.scorecard td{overflow-wrap:anywhere}"
)

# what a pair came to, as the list of pairs says it
OUTCOMES = {HOLDS: ("holds", "holds"), TIE: ("tie", "tied (within the margin)"),
            AGAINST: ("against", "against the claim"), REPEAT: ("repeat", "repeats pair {}"),
            NEAR_CHANCE: ("near", "near chance, not compared")}


def heading(scale: str, seeds: int) -> str:
    return f"Each claim of the papers checked at scale {scale} with {seeds} seed(s)."


def verdict_counts(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """(verdict, how many claims have it), in VERDICTS order, then any other verdict."""
    counts = Counter(str(r["result"]) for r in rows)
    order = [v for v in VERDICTS if counts[v]] + sorted(v for v in counts if v not in VERDICTS)
    return [(v, counts[v]) for v in order]


def badge(verdict: str, text: str | None = None) -> str:
    """A verdict in its colours."""
    fg, bg = VERDICTS.get(verdict, OTHER)
    return (f"<span class='verdict' style='color:{fg};background:{bg};font-weight:bold;"
            "padding:0 4px;border-radius:3px;white-space:nowrap'>"
            f"{html.escape(text if text is not None else verdict)}</span>")


def summary_html(counts: Sequence[tuple[str, int]], link: str = "") -> str:
    """The verdicts counted and coloured ("10 reproduced · 13 not reproduced · ..."), then
    `link` (HTML) where given."""
    total = sum(n for _, n in counts)
    if not total:
        return "<p class='summary'>No claims checked.</p>"
    badges = " ".join(badge(v, f"{n} {v}") for v, n in counts)
    return (f"<p class='summary'><b>{total} claim{'s' if total != 1 else ''}:</b> {badges}"
            f"{' ' + link if link else ''}</p>")


def summary_from_csv(path: Path, result: str) -> str:
    """The landing text's verdicts: those of the scorecard CSV at `path` counted and coloured,
    with a link that opens the scorecard's entry `result` of the report."""
    link = (f"<a href='#' data-fedhet-result='{html.escape(result)}'>Open the scorecard</a>: "
            "each claim, its verdict, how it is reached and the cells it used.")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError:
        return (f"<p>The scorecard's verdicts are not counted here (no "
                f"{html.escape(str(path))}). {link}</p>")
    return summary_html(verdict_counts(rows), link)


def table_links(payloads: Mapping[str, Mapping[str, Any]], scale: str,
                prefix: str = "") -> dict[str, dict[str, str]]:
    """Per table (`<paper>_<id>`): its title, the HTML file beside the scorecard
    (`<prefix>tables/<paper>/<id>.html`) and its path in the workflow (the report's key)."""
    out = {}
    for target, payload in payloads.items():
        paper, table = payload.get("paper"), payload.get("id")
        if not paper or not table:
            paper, table = target.split("_", 1)
        out[target] = {
            "title": str((payload.get("spec") or {}).get("title") or table),
            "href": f"{prefix}tables/{paper}/{table}.html",
            "result": f"results/{scale}/tables/{paper}/{table}.html",
        }
    return out


def _value(cell: Mapping[str, Any]) -> str:
    if "ours" not in cell:
        return "–"
    std = cell.get("std")
    return fmt(cell["ours"], cell["metric"], std)


def short_title(title: str) -> str:
    """A table's name without its description: "Table 2" of "Table 2: accuracy on ..."."""
    return title.split(":", 1)[0].strip()


def _table_name(target: str, tables: Mapping[str, Mapping[str, str]]) -> str:
    table = tables.get(target)
    return short_title(table["title"]) if table else target


def _cell_link(cell: Mapping[str, Any], tables: Mapping[str, Mapping[str, str]],
               named: bool = True) -> str:
    """A pair's cell: "Table 2 · FedAvg · CCVR, α=0.5" (without the table unless `named`)
    linked to the cell in its table."""
    where = " · ".join(x for x in (cell["row"], cell["column"]) if x)
    table = tables.get(cell["table"])
    text = f"{_table_name(cell['table'], tables)} · {where}" if named else where
    if table is None:
        return html.escape(text)
    anchor = cell_anchor(cell["row"], cell["column"], cell["metric"])
    return (f"<a href='{html.escape(table['href'])}#{anchor}' "
            f"data-result='{html.escape(table['result'])}' data-anchor='{anchor}'>"
            f"{html.escape(text)}</a>")


def pairs_html(row: Mapping[str, Any], tables: Mapping[str, Mapping[str, str]]) -> str:
    """The pairs a verdict used, numbered, each cell linked, folded under a summary line."""
    evidence = row.get("evidence") or []
    if not evidence:
        return ""
    # the table named once where every cell is of one table, else at each cell
    used = list(dict.fromkeys(p[side]["table"] for p in evidence for side in ("better", "than")))
    named = len(used) > 1
    items = []
    for i, pair in enumerate(evidence, 1):
        kind, words = OUTCOMES.get(pair["outcome"], ("", str(pair["outcome"])))
        if pair["outcome"] == REPEAT:
            words = words.format(pair.get("repeats", 0) + 1)
        items.append(
            f"<li value='{i}'>{_cell_link(pair['better'], tables, named)} "
            f"<b>{html.escape(_value(pair['better']))}</b> vs "
            f"{_cell_link(pair['than'], tables, named)} "
            f"<b>{html.escape(_value(pair['than']))}</b>: "
            f"<span class='{kind}'>{html.escape(words)}</span></li>")
    n = len(evidence)
    where = "" if named else f" of {_table_name(used[0], tables)}"
    return (f"<details><summary>the {n} pair{'s' if n != 1 else ''}{html.escape(where)} with "
            f"runs, cell by cell</summary><ol class='pairs'>{''.join(items)}</ol></details>")


def _result_html(row: Mapping[str, Any]) -> str:
    parts = [badge(str(row["result"]))]
    if row.get("ran_on"):
        parts.append(f" on {html.escape(row['ran_on'])}")
    if row.get("scope"):  # the part of the claim tested, where not all of it, on its own line
        parts.append(f"<br>{html.escape(str(row['scope']).strip())}")
    words = row.get("rule") or RULES.get(row["require"], row["require"])
    parts.append(f"<br><i>{html.escape(words)}</i>")
    return "".join(parts)


# inside the report (an iframe), a click on a cell's link asks the report page to open it
SCRIPT = (
    "<script>document.addEventListener('click',function(e){"
    "var a=e.target.closest&&e.target.closest('a[data-result]');"
    "if(!a||window.parent===window)return;e.preventDefault();"
    "window.parent.postMessage({fedhet:'open',result:a.getAttribute('data-result'),"
    "anchor:a.getAttribute('data-anchor')||''},'*');});</script>"
)


def render_html(rows: Sequence[Mapping[str, Any]], scale: str, seeds: int, warning: str,
                tables: Mapping[str, Mapping[str, str]] | None = None,
                tie_margin: float = TIE_MARGIN) -> str:
    """The scorecard as a standalone HTML page, styled like the paper tables; `tables`
    (`table_links`) links each pair's cells to their tables."""
    esc = html.escape
    tables = tables or {}
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Scorecard, scale {esc(scale)}</title><style>{STYLE}{OWN_STYLE}</style></head>"
        "<body>",
        "<h3>Scorecard</h3>",
        f"<p class='warning'><b>Scale {esc(scale)}.</b> {esc(warning)}</p>",
        summary_html(verdict_counts(rows)),
        f"<p>{esc(heading(scale, seeds))} How a verdict is reached:</p>",
        "<ol class='rule'>" + "".join(f"<li>{esc(point)}</li>" for point in rule(tie_margin))
        + "</ol>",
        "<table class='scorecard'><tr><th>Paper</th><th>Claim</th><th>Result</th><th>Ours</th>"
        "<th>In the paper</th></tr>",
    ]
    for i, row in enumerate(rows, 1):
        parts.append(
            f"<tr id='claim-{i}'><td>{esc(paper_name(row['paper']))}</td>"
            f"<td>{esc(row['claim'])}</td><td>{_result_html(row)}</td>"
            f"<td>{esc(row['ours'])}{pairs_html(row, tables)}</td>"
            f"<td>{esc(row['in_paper'])}</td></tr>"
        )
    if not rows:
        parts.append("<tr><td colspan='5'>No claims of the built papers.</td></tr>")
    parts.append(f"</table>{SCRIPT}</body></html>")
    return "\n".join(parts) + "\n"


def _md_cell(cell: Mapping[str, Any], tables: Mapping[str, Mapping[str, str]]) -> str:
    where = " · ".join(x for x in (cell["row"], cell["column"]) if x)
    table = tables.get(cell["table"])
    if table is None:
        return f"{cell['table']} · {where}"
    href = table["href"].removesuffix(".html") + ".md"
    return f"[{short_title(table['title'])} · {where}]({href})"


def render_markdown(
    rows: Sequence[Mapping[str, Any]], scale: str, seeds: int, warning: str,
    tables: Mapping[str, Mapping[str, str]] | None = None, tie_margin: float = TIE_MARGIN,
) -> str:
    """The same page as Markdown: the pairs of each claim listed after the table."""
    tables = tables or {}
    counts = " · ".join(f"{n} {v}" for v, n in verdict_counts(rows))
    out = ["# Scorecard", "", f"> **Scale {scale}.** {warning}", "",
           f"**{len(rows)} claims:** {counts}" if rows else "No claims checked.", "",
           f"{heading(scale, seeds)} How a verdict is reached:", ""]
    out += [f"{i}. {point}" for i, point in enumerate(rule(tie_margin), 1)]
    out += ["", "| Paper | Claim | Result | Ours | In the paper |", "|---|---|---|---|---|"]
    for r in rows:
        result = f"**{r['result']}**"
        result += f" on {r['ran_on']}" if r.get("ran_on") else ""
        result += f" {r['scope']}" if r.get("scope") else ""
        rule_words = r.get("rule") or RULES.get(r["require"], r["require"])
        out.append(f"| {paper_name(r['paper'])} | {r['claim']} | {result} ({rule_words}) | "
                   f"{r['ours']} | {r['in_paper']} |")
    listed = [(i, r) for i, r in enumerate(rows, 1) if r.get("evidence")]
    if listed:
        out += ["", "## The pairs of each claim", ""]
    for i, r in listed:
        out += [f"{i}. {paper_name(r['paper'])}: {r['claim']}", ""]
        for j, pair in enumerate(r["evidence"], 1):
            words = OUTCOMES.get(pair["outcome"], ("", str(pair["outcome"])))[1]
            if pair["outcome"] == REPEAT:
                words = words.format(pair.get("repeats", 0) + 1)
            out.append(f"   {j}. {_md_cell(pair['better'], tables)} {_value(pair['better'])} "
                       f"vs {_md_cell(pair['than'], tables)} {_value(pair['than'])}: {words}")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"
