"""What a report was built from: the commit of the source tree (and whether it had uncommitted
changes), the fedhet and torch versions, the scale, its seeds and the date, and the runs whose
resolved.yaml records another commit (results kept from an earlier build)."""

from __future__ import annotations

import datetime
import html
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import yaml

import fedhet

try:
    from yaml import CSafeLoader as Loader
except ImportError:  # PyYAML without libyaml
    from yaml import SafeLoader as Loader  # type: ignore[assignment]


@dataclass(frozen=True)
class Provenance:
    commit: str | None  # None outside a git checkout
    dirty: bool  # tracked files differ from the commit
    fedhet_version: str
    torch_version: str | None
    scale: str
    seeds: Sequence[int]
    built: str  # UTC, ISO 8601 to the minute
    other_commits: dict[str, list[str]] = field(default_factory=dict)  # commit → run ids


def git_state(root: Path) -> tuple[str | None, bool]:
    """The checkout's commit and whether a tracked file has uncommitted changes."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=30, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=root, capture_output=True, text=True, timeout=60,
                                check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, False
    return commit, bool(status.strip())


def torch_version() -> str | None:
    """torch's installed version, read without importing it."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


def run_commits(runs: Path) -> dict[str, str | None]:
    """Run id → the commit its resolved.yaml records (None where it records none)."""
    out = {}
    for path in sorted(runs.glob("*/resolved.yaml")):
        resolved = yaml.load(path.read_text(), Loader=Loader) or {}
        out[path.parent.name] = (resolved.get("provenance") or {}).get("git_commit")
    return out


def collect(root: Path, runs: Path, scale: str, seeds: Sequence[int],
            now: datetime.datetime | None = None) -> Provenance:
    """The provenance of a report built now from the checkout at `root` and the runs under
    `runs` (results/<scale>/runs)."""
    commit, dirty = git_state(root)
    others: dict[str, list[str]] = {}
    for run, recorded in run_commits(runs).items():
        if recorded != commit:
            others.setdefault(recorded or "none recorded", []).append(run)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return Provenance(
        commit=commit, dirty=dirty, fedhet_version=fedhet.__version__,
        torch_version=torch_version(), scale=scale, seeds=list(seeds),
        built=now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        other_commits=others,
    )


def to_html(p: Provenance) -> str:
    """The provenance as an HTML list for the report's landing text."""
    esc = html.escape
    if p.commit is None:
        source = "an unknown commit (not a git checkout, or no git installed)"
    else:
        source = f"commit <code>{esc(p.commit)}</code>"
        if p.dirty:
            source += " <b>with uncommitted changes</b> (the report may not match the commit)"
    seeds = ", ".join(str(s) for s in p.seeds)
    items = [
        f"Built {esc(p.built)} from {source}.",
        f"fedhet {esc(p.fedhet_version)}, torch {esc(p.torch_version or 'not installed')}.",
        f"Scale <b>{esc(p.scale)}</b>; seeds {esc(seeds)}.",
    ]
    if not p.other_commits:
        items.append("Every run under <code>results/"
                     f"{esc(p.scale)}/runs/</code> was trained by this commit.")
    else:
        count = sum(len(r) for r in p.other_commits.values())
        groups = "".join(
            f"<li><code>{esc(commit)}</code> ({len(runs)}): "
            f"{esc(', '.join(runs))}</li>"
            for commit, runs in sorted(p.other_commits.items())
        )
        items.append(
            f"<details><summary>{count} run(s) under <code>results/{esc(p.scale)}/runs/</code> "
            "were trained by another commit (kept from an earlier build): their numbers may "
            f"differ from this commit's.</summary><ul>{groups}</ul></details>"
        )
    return "<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>"
