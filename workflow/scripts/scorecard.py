"""The scorecard: every claim of the built papers checked on our numbers and on the papers'
(Snakemake script). Also writes the report's front page (reports/workflow.rst + scorecard)."""

import sys
from pathlib import Path

import pandas as pd

from fedhet import tables as T
from fedhet.papers import paper_name

COLUMNS = ["paper", "claim", "scale", "seeds", "result", "ours", "in_paper", "require"]
RULES = {"all": "needs every pair", "majority": "needs a majority of pairs"}


def verdict(row) -> str:
    """The result with the rule that decided it (all pairs, or a majority)."""
    return f"**{row.result}** ({RULES.get(row.require, row.require)})"


def rst_table(df: pd.DataFrame, scale: str, seeds: int) -> str:
    out = [
        "Scorecard",
        "---------",
        "",
        f"Each claim of the papers checked at scale **{scale}** with {seeds} seed(s), on our "
        "numbers and, as a check of the transcription, on the papers' own.",
        "",
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 8 52 12 14 14",
        "",
        "   * - Paper",
        "     - Claim",
        "     - Result",
        "     - Ours",
        "     - In the paper",
    ]
    for row in df.itertuples(index=False):
        out += [
            f"   * - {paper_name(row.paper)}",
            f"     - {row.claim}",
            f"     - {verdict(row)}",
            f"     - {row.ours}",
            f"     - {row.in_paper}",
        ]
    if df.empty:
        out += ["   * - –", "     - no claims configured", "     -", "     -", "     -"]
    return "\n".join(out) + "\n"


def main(sm) -> None:
    payload = sm.params.payload
    scale = sm.wildcards.scale
    frames = {}
    for path in sm.input.tables:
        path = Path(path)
        frames[f"{path.parent.name}_{path.stem}"] = T.read_csv(path)
    rows = []
    for claim in payload["claims"]:
        result = T.evaluate_claim(claim, payload["payloads"], frames)
        rows.append({**result, "scale": scale, "seeds": len(payload["seeds"])})
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.to_csv(sm.output.csv, index=False)
    md = [
        "# Scorecard",
        "",
        f"Scale `{scale}`, {len(payload['seeds'])} seed(s).",
        "",
        "| paper | claim | result | ours | in the paper |",
        "|---|---|---|---|---|",
    ]
    md += [
        f"| {r.paper} | {r.claim} | {verdict(r)} | {r.ours} | {r.in_paper} |"
        for r in df.itertuples(index=False)
    ]
    Path(sm.output.md).write_text("\n".join(md) + "\n")
    html = df.rename(columns={"in_paper": "in the paper"}).to_html(index=False, border=0)
    Path(sm.output.html).write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><style>body{font-family:sans-serif;"
        "font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}table{border-collapse:"
        f"collapse}}</style></head><body><h3>Scorecard (scale {scale})</h3>{html}</body></html>"
    )
    front = Path(sm.input.text).read_text()
    Path(sm.output.text).write_text(
        front.rstrip() + "\n\n" + rst_table(df, scale, len(payload["seeds"]))
    )
    print(f"{len(df)} claims", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
