"""Every leaderboard entry side by side (Snakemake script): per paper and table, each entry's
mean, rank and wins / ties / losses with what it is (method, package, version, code hash,
settings): overview.csv, .md and .html (fedhet.leaderboard.ranking.build_overview)."""

import sys

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import pandas as pd  # noqa: E402

from fedhet import atomic  # noqa: E402
from fedhet.leaderboard import ranking as L  # noqa: E402


def main(sm) -> None:
    entries = sm.params.payload["entries"]
    scale = sm.wildcards.scale
    parts = [
        (entry, pd.read_csv(ranking), pd.read_csv(cells))
        for entry, ranking, cells in zip(entries, sm.input.rankings, sm.input.cells)
    ]
    frame = L.build_overview(parts)
    atomic.write_text(sm.output.csv, frame.to_csv(index=False, float_format="%.6g"))
    atomic.write_text(sm.output.md, L.render_overview_markdown(frame, entries, scale))
    atomic.write_text(sm.output.html, L.render_overview_html(frame, entries, scale))
    print(f"{len(entries)} entries, {len(frame)} rows", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
