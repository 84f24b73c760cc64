"""One paper table from its runs: long CSV (shared schema), Markdown and HTML (Snakemake script)."""

import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

from fedhet import tables as T  # noqa: E402


def main(sm) -> None:
    payload = sm.params.payload
    scale = sm.wildcards.scale
    results = {}
    for path in sm.input:
        path = Path(path)
        if path.name == "final.json":
            results[path.parent.name] = T.load_run(path.parent)
        elif path.name == "calibration.json":  # post-hoc cells (CCVR)
            results[T.calibration_key(path)] = T.load_calibration(path)
    lines = T.compute_table(payload, results, scale)
    T.write_csv(lines, sm.output.csv)
    deltas = sm.params.comparable  # the scale's: a difference from the paper means something
    alike = T.alike_runs({k: r for k, r in results.items() if "/" not in k})  # runs, not calibrations
    note = sm.params.note
    Path(sm.output.md).write_text(T.render_markdown(lines, payload, scale, note, deltas, alike))
    Path(sm.output.html).write_text(T.render_html(lines, payload, scale, note, deltas, alike))
    done = sum(1 for ln in lines if ln["status"] == T.OK)
    pending = sum(1 for ln in lines if ln["status"] == T.PENDING)
    quoted = sum(1 for ln in lines if ln["status"] == T.QUOTED)
    quoted_text = f"{quoted} quoted, " if quoted else ""
    print(
        f"{payload['paper']} {payload['id']}: {len(lines)} numbers, {done} ok, "
        f"{pending} pending, {quoted_text}from {len(results)} runs",
        file=sys.stderr,
    )


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
