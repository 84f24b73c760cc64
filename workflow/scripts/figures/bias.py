"""Local learning bias of one centralized run (FedBR Figs. 2-3): runs `fedhet bias` on the first
seed's run of the figure's cell and keeps its PNG; its numbers (bias.json, without the t-SNE
points) go to the log (Snakemake script)."""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fedhet.figures.footnote import figure_notes


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    cell = next((c for c in payload["cells"] if c["run_ids"]), None)
    if cell is None:
        reasons = "; ".join(c["pending"] for c in payload["cells"] if c["pending"])
        raise SystemExit(f"{payload['id']}: no run to analyse ({reasons})")
    run = Path(sm.params.results) / "runs" / cell["run_ids"][0]
    options = spec.get("options") or {}
    notes = figure_notes(sm.wildcards.scale, sm.params.note, spec)
    with tempfile.TemporaryDirectory() as out:
        command = [
            "fedhet", "bias", "--run", str(run), "--out", out,
            "--local-steps", str(options.get("local_steps", 250)),
            "--samples", str(options.get("samples", 600)), "--seed", str(options.get("seed", 0)),
            "--threads", str(sm.threads), "--title", spec["title"],
            *(arg for note in notes for arg in ("--note", note)),
            "--device", sm.params.device if sm.params.device != "auto" else "cpu",
        ]
        subprocess.run(command, check=True, stdout=sys.stderr, stderr=sys.stderr)
        shutil.copyfile(Path(out) / "bias.png", sm.output[0])
        result = json.loads((Path(out) / "bias.json").read_text())
    print(json.dumps({k: v for k, v in result.items() if k != "tsne"}, indent=1), file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
