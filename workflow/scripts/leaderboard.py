"""A challenger's leaderboard from its comparable tables' runs (Snakemake script): the per-run
cells (cells.csv), the ranking against each paper's methods (leaderboard.csv, each row saying
what the entry is), its Markdown and HTML pages and the entry's manifest (entry.json: what it
is and what it was built from) (fedhet.leaderboard.rows, fedhet.leaderboard.ranking)."""

import json
import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

from fedhet import atomic  # noqa: E402
from fedhet import tables as T  # noqa: E402
from fedhet.leaderboard import ranking as L  # noqa: E402
from fedhet.leaderboard.rows import results_frame, run_costs  # noqa: E402


def main(sm) -> None:
    payload = sm.params.payload
    scale = sm.wildcards.scale
    challenger = payload["challenger"]
    results, costs = {}, {}
    for path in map(Path, sm.input.runs):
        if path.name == "final.json":
            results[path.parent.name] = T.load_run(path.parent)
            costs[path.parent.name] = run_costs(path.parent)
    for path in map(Path, getattr(sm.input, "calibrations", [])):
        results[T.calibration_key(path)] = T.load_calibration(path)
    cells = results_frame(payload["tables"], results, costs, scale)
    board = L.build_leaderboard(cells, challenger["name"], tie_margin=payload["tie_margin"])
    entry = payload["entry"]
    atomic.write_text(sm.output.cells, cells.to_csv(index=False, float_format="%.6g"))
    atomic.write_text(sm.output.csv, L.with_entry(board, entry).to_csv(index=False,
                                                                       float_format="%.6g"))
    margin, label = payload["tie_margin"], challenger["label"]
    atomic.write_text(sm.output.md, L.render_markdown(board, label, margin, scale, entry=entry))
    atomic.write_text(sm.output.html, L.render_html(board, label, margin, scale, entry=entry))
    # last: the folder is this entry's from now on (another config's entry of this name is
    # refused)
    atomic.write_text(sm.output.entry, json.dumps(dict(entry), indent=2, sort_keys=True) + "\n")
    print(f"{challenger['name']}: {len(cells)} runs in {len(payload['tables'])} tables, "
          f"{len(board)} rows", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
