"""The scorecard as a reader sees it: one row per claim with the paper's name, its verdict and the
rule that decided it, under the scale's warning and a legend of what "pairs" and the rules mean.
The scale and seeds, the same on every row, are said once above the table."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from fedhet.papers import paper_name

RULES = {"all": "needs every pair", "majority": "needs a majority of pairs"}

LEGEND = (
    "A claim compares pairs of cells of a paper's table: a cell of the method the claim favours "
    "and the cell it is compared with, alike in every other label (dataset, setting, model). "
    "“k/n pairs hold”: the claim holds in k of the n pairs that ran. The result is "
    "reproduced when the claim holds in every pair (“needs every pair”: the paper "
    "says every, each, all) or in more than half of them (“needs a majority of pairs”: the "
    "paper says most); pairs near chance (a run that learnt almost nothing) or quoted by the "
    "paper from elsewhere are not compared. Where only part of a claim could be compared "
    "(a scale runs some datasets, settings or models of a table, or some runs sit near chance), "
    "the result says which part: “reproduced on CIFAR-10 only; SVHN not run at this scale”; "
    "“not tested at this scale” where none of it ran. “In the paper”: the same count on the "
    "paper's own numbers over all of the claim's pairs, run here or not, a check of our "
    "transcription."
)

STYLE = (
    "body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}"
    ".warning{border:2px solid #b45309;background:#fffbeb;padding:6px 10px;max-width:60em}"
)


def heading(scale: str, seeds: int) -> str:
    return f"Each claim of the papers checked at scale {scale} with {seeds} seed(s)."


def render_html(rows: Sequence[Mapping[str, Any]], scale: str, seeds: int, warning: str) -> str:
    """The scorecard as a standalone HTML page, styled like the paper tables."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>Scorecard, scale {esc(scale)}</title><style>{STYLE}</style></head><body>",
        "<h3>Scorecard</h3>",
        f"<p class='warning'><b>Scale {esc(scale)}.</b> {esc(warning)}</p>",
        f"<p>{esc(heading(scale, seeds))} {esc(LEGEND)}</p>",
        "<table><tr><th>Paper</th><th>Claim</th><th>Result</th><th>Ours</th>"
        "<th>In the paper</th></tr>",
    ]
    for row in rows:
        # the part of the claim tested, where not all of it, on its own line under the verdict
        part = f"<br>{esc(row['scope'].strip())}" if row.get("scope") else ""
        parts.append(
            f"<tr><td>{esc(paper_name(row['paper']))}</td><td>{esc(row['claim'])}</td>"
            f"<td><b>{esc(row['result'])}</b> ({esc(RULES.get(row['require'], row['require']))})"
            f"{part}</td><td>{esc(row['ours'])}</td><td>{esc(row['in_paper'])}</td></tr>"
        )
    if not rows:
        parts.append("<tr><td colspan='5'>No claims of the built papers.</td></tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts) + "\n"


def render_markdown(
    rows: Sequence[Mapping[str, Any]], scale: str, seeds: int, warning: str
) -> str:
    """The same page as Markdown."""
    out = ["# Scorecard", "", f"> **Scale {scale}.** {warning}", "",
           f"{heading(scale, seeds)} {LEGEND}", "",
           "| Paper | Claim | Result | Ours | In the paper |", "|---|---|---|---|---|"]
    out += [
        f"| {paper_name(r['paper'])} | {r['claim']} | **{r['result']}**{r.get('scope', '')} "
        f"({RULES.get(r['require'], r['require'])}) | {r['ours']} | {r['in_paper']} |"
        for r in rows
    ]
    return "\n".join(out) + "\n"
