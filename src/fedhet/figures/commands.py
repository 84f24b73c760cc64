"""What the figure scripts share (torch-free): the data a `fedhet figure-data` command computes
for a figure, and the printed names of a figure's cells."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def figure_data(kind: str, source: list[str], options: dict, device: str) -> dict:
    """The JSON `fedhet figure-data KIND` writes (its output goes to the log, stderr)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{kind}.json"
        command = ["fedhet", "figure-data", kind, *source, "--options", json.dumps(options),
                   "--out", str(out), "--device", device]
        subprocess.run(command, check=True, stdout=sys.stderr, stderr=sys.stderr)
        return json.loads(out.read_text())


def cell_labels(cells: list[dict]) -> list[str]:
    """Each cell's printed values of the axes that differ between the cells."""
    axes = list(dict.fromkeys(a for c in cells for a in c["display"]))
    varying = [a for a in axes if len({c["display"].get(a) for c in cells}) > 1]
    return [" · ".join(c["display"][a] for a in varying if a in c["display"])
            or c.get("column") or c.get("row") or f"cell {i + 1}" for i, c in enumerate(cells)]
