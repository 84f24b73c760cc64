"""The five papers this workflow reproduces (config/papers/<paper>.yaml each) and how their
names are written (imports nothing of the package)."""

from __future__ import annotations

import re

PAPERS = ("vhl", "fedlgd", "fedimpro", "ccvr", "fedbr")

# How each paper's method is written in titles.
PAPER_NAMES = {"vhl": "VHL", "fedlgd": "FedLGD", "fedimpro": "FedImpro", "ccvr": "CCVR",
               "fedbr": "FedBR"}


def paper_name(paper: str) -> str:
    """A paper's name as its authors write it (FedImpro, not FEDIMPRO)."""
    return PAPER_NAMES.get(paper, paper)


# The report's sidebar sorts its entries as text; each is named "KEY · what a reader sees", the
# key setting its place. `python -m fedhet.report` orders the finished page by these keys and
# shows the entries without them (fedhet.report.page); `split_sort_key` splits one.
SORT_KEY = re.compile(r"^(\d[0-9a-z]*) · (.+)$", re.S)


def split_sort_key(name: str) -> tuple[str | None, str]:
    """("1t02", "Table 2: ...") of "1t02 · Table 2: ..."; (None, name) of a name without one."""
    match = SORT_KEY.match(name)
    return (match.group(1), match.group(2)) if match else (None, name)


def report_category(paper: str) -> str:
    """A paper's entry in the report's sidebar, "3 · FedImpro": its position among the five
    keeps the papers in this order."""
    return f"{PAPERS.index(paper) + 1} · {paper_name(paper)}"


# The scorecard's entry in the report's sidebar: "0 · " puts it before the papers' entries.
SCORECARD_CATEGORY = "0 · Scorecard"
# a paper's tables before its figures
TABLES_SUBCATEGORY = "1 · Tables"
FIGURES_SUBCATEGORY = "2 · Figures"

# the order of a paper's tables and figures by the prefix of their ids: the paper's main tables
# (t1, t2, ...), the tables of a figure's numbers (tf1), the appendix's (a1), extras (x1); the
# main figures (fig2, fig3a), the appendix's (figd2); anything else after them
ITEM_ORDER = {"t": 1, "tf": 2, "a": 3, "x": 4, "fig": 1, "figd": 2}


def item_sort_key(item_id: str) -> str:
    """The sort key of a table or figure: the rank of its id's prefix, then the id with every
    number padded to two digits (t02 before t10, fig03a before fig18a): "1t02", "3a01"."""
    prefix = re.match(r"[a-z]*", item_id).group()
    rank = ITEM_ORDER.get(prefix, 9)
    return str(rank) + re.sub(r"\d+", lambda number: number.group().zfill(2), item_id)


def item_label(item_id: str, title: str) -> str:
    """A table's or figure's row in the report's sidebar: its sort key, then its title."""
    return f"{item_sort_key(item_id)} · {title}"


def leaderboard_category(label: str) -> str:
    """A challenger's leaderboard in the report's sidebar, "6 · Leaderboard: Mine": after the
    papers' entries."""
    return f"{len(PAPERS) + 1} · Leaderboard: {label}"


def leaderboard_overview_category() -> str:
    """Every leaderboard entry side by side in the report's sidebar, "6 · Leaderboard": before
    the entries' own (a prefix of theirs)."""
    return f"{len(PAPERS) + 1} · Leaderboard"
