"""An image grid of a cached virtual dataset, one row per class (VHL Figs. 4–7): runs
`fedhet virtual-grid` on the figure's artefact, with the scale's note as its footnote
(Snakemake script)."""

import subprocess
import sys

from fedhet.figures.footnote import figure_notes


def main(sm) -> None:
    spec = sm.params.payload["spec"]
    notes = figure_notes(sm.wildcards.scale, sm.params.note, spec)
    command = [
        "fedhet", "virtual-grid", "--data", sm.input[0], "--out", sm.output[0],
        "--per-class", str(spec.get("per_class", 8)), "--title", spec["title"],
        *(arg for note in notes for arg in ("--note", note)),
    ]
    subprocess.run(command, check=True, stdout=sys.stderr, stderr=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
