"""An image grid of a cached virtual dataset, one row per class (VHL Figs. 4–7): runs
`fedhet virtual-grid` on the figure's artefact (Snakemake script)."""

import subprocess
import sys


def main(sm) -> None:
    spec = sm.params.payload["spec"]
    command = [
        "fedhet", "virtual-grid", "--data", sm.input[0], "--out", sm.output[0],
        "--per-class", str(spec.get("per_class", 8)), "--title", spec["title"],
    ]
    subprocess.run(command, check=True, stdout=sys.stderr, stderr=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
