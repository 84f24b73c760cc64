"""t-SNE of a few clients' features, one panel per cell (VHL Fig. 2): runs `fedhet client-tsne`
on the first seed's run of every cell (Snakemake script)."""

import subprocess
import sys
from pathlib import Path

from fedhet.figures.footnote import figure_notes


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    cells = [c for c in payload["cells"] if c["run_ids"]]
    notes = figure_notes(sm.wildcards.scale, sm.params.note, spec)
    runs = [str(Path(sm.params.results) / "runs" / c["run_ids"][0]) for c in cells]
    labels = [c["display"].get("method", c["column"]) for c in cells]
    command = [
        "fedhet", "client-tsne", "--runs", *runs, "--labels", *labels,
        "--clients", str(spec.get("clients", 3)), "--out", sm.output[0],
        "--title", spec["title"], *(arg for note in notes for arg in ("--note", note)),
    ]
    subprocess.run(command, check=True, stdout=sys.stderr, stderr=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
