"""The package code that draws the report's results (tables, the scorecard, figures,
leaderboards), as one fingerprint. The rules that draw take it as a param, so that Snakemake's
params trigger redraws their results when that code is edited, as its code trigger does when
their script is edited. Training code is not part of it: an edit there redraws nothing (a run's
own identity says when it retrains)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import fedhet

# under src/fedhet/: the folders and modules whose code decides how a result is drawn
DRAWING_CODE = ("tables", "figures", "analysis", "leaderboard", "printed.py", "papers.py",
                "virtual/cli.py", "virtual/grid.py")


def drawing_files(root: Path | None = None) -> list[Path]:
    """The Python files of DRAWING_CODE under `root` (the installed package by default)."""
    base = root or Path(fedhet.__file__).parent
    files: list[Path] = []
    for name in DRAWING_CODE:
        path = base / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.is_file() else []
    return files


def drawing_fingerprint(root: Path | None = None) -> str:
    """A short hash of the drawing code's files, their paths and contents."""
    base = root or Path(fedhet.__file__).parent
    digest = hashlib.sha256()
    for path in drawing_files(base):
        digest.update(path.relative_to(base).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
