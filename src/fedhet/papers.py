"""The five papers this workflow reproduces (config/papers/<paper>.yaml each) and how their
names are written (imports nothing of the package)."""

from __future__ import annotations

PAPERS = ("vhl", "fedlgd", "fedimpro", "ccvr", "fedbr")

# How each paper's method is written in titles.
PAPER_NAMES = {"vhl": "VHL", "fedlgd": "FedLGD", "fedimpro": "FedImpro", "ccvr": "CCVR",
               "fedbr": "FedBR"}


def paper_name(paper: str) -> str:
    """A paper's name as its authors write it (FedImpro, not FEDIMPRO)."""
    return PAPER_NAMES.get(paper, paper)
