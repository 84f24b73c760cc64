"""Model inversion of a FedImpro run (Figs. 11-13): runs `fedhet invert` on the first seed's
run of the figure's cell, with the class statistics the run's plug-in saved (Snakemake
script)."""

import json
import subprocess
import sys
from pathlib import Path

from fedhet.figures.footnote import figure_notes

STATISTICS = "shared_statistics.pt"  # the class statistics a plug-in leaves beside model.pt


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    cell = next(c for c in payload["cells"] if c["run_ids"])
    run = Path(sm.params.results) / "runs" / cell["run_ids"][0]
    files = json.loads((run / "final.json").read_text()).get("files", [])
    found = [f for f in files if f.endswith(STATISTICS)]
    if not found:
        raise SystemExit(f"{run} saved no {STATISTICS} (final.json files: {files})")
    options = spec.get("options") or {}
    notes = figure_notes(sm.wildcards.scale, sm.params.note, spec)
    command = [
        "fedhet", "invert", "--run", str(run), "--statistics", str(run / found[0]),
        "--out", sm.output[0], "--title", spec["title"],
        *(arg for note in notes for arg in ("--note", note)),
        "--steps", str(options.get("steps", 2000)), "--tv", str(options.get("tv", 0.01)),
        "--device", sm.params.device if sm.params.device != "auto" else "cpu",
    ]
    subprocess.run(command, check=True, stdout=sys.stderr, stderr=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
