"""The scorecard: every claim of the built papers (or of the `ci` target's tables) checked on our
numbers and on the papers' (Snakemake script). Writes the long CSV, Markdown and the HTML page the
report shows first (fedhet.tables.scorecard), whose pairs link the tables' cells."""

import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import pandas as pd  # noqa: E402

from fedhet import atomic  # noqa: E402
from fedhet import tables as T  # noqa: E402
from fedhet.tables import scorecard as S  # noqa: E402

COLUMNS = ["paper", "claim", "scale", "seeds", "result", "scope", "ran_on", "ours", "in_paper",
           "require", "rule", "distinct", "holds", "ties", "against"]


def main(sm) -> None:
    payload = sm.params.payload
    scale = sm.wildcards.scale
    seeds = len(payload["seeds"])
    frames = {}
    for path in sm.input.tables:
        path = Path(path)
        frames[f"{path.parent.name}_{path.stem}"] = T.read_csv(path)
    margin = float(payload["tie_margin"])
    rows = [
        T.evaluate_claim(claim, payload["payloads"], frames, tie_margin=margin)
        for claim in payload["claims"]
    ]
    df = pd.DataFrame([{**r, "scale": scale, "seeds": seeds} for r in rows], columns=COLUMNS)
    df.to_csv(sm.output.csv, index=False)
    warning = payload["warning"]
    # the tables' files (results/<scale>/tables/...) from this one's folder (results/<scale>/
    # or results/<scale>/ci/)
    folder = Path(sm.output.html).parent.parts
    root = max(i for i in range(1, len(folder))
               if folder[i] == scale and folder[i - 1] == "results")
    tables = S.table_links(payload["payloads"], scale, "../" * (len(folder) - 1 - root))
    atomic.write_text(sm.output.md, S.render_markdown(rows, scale, seeds, warning, tables,
                                                      margin))
    atomic.write_text(sm.output.html, S.render_html(rows, scale, seeds, warning, tables, margin))
    print(f"{len(df)} claims", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
