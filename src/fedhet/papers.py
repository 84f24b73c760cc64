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


def report_category(paper: str) -> str:
    """A paper's entry in the report's sidebar, "3 · FedImpro": the report sorts its entries
    as text, so the paper's position among the five keeps them in this order."""
    return f"{PAPERS.index(paper) + 1} · {paper_name(paper)}"


# The scorecard's entry in the report's sidebar: "0 · " sorts it before the papers' entries.
SCORECARD_CATEGORY = "0 · Scorecard"


def item_label(item_id: str, title: str) -> str:
    """A table's or figure's row in the report's sidebar: its id with every number padded to
    two digits, so that rows sorted as text follow the paper (t02 before t10, fig03a before
    fig18a), then its title."""
    key = re.sub(r"\d+", lambda number: number.group().zfill(2), item_id)
    return f"{key} · {title}"


def leaderboard_category(label: str) -> str:
    """A challenger's leaderboard in the report's sidebar, "6 · Leaderboard: Mine": after the
    papers' entries."""
    return f"{len(PAPERS) + 1} · Leaderboard: {label}"


def leaderboard_overview_category() -> str:
    """Every leaderboard entry side by side in the report's sidebar, "6 · Leaderboard": before
    the entries' own (a prefix of theirs)."""
    return f"{len(PAPERS) + 1} · Leaderboard"
