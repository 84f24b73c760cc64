"""Table maths and rendering (torch-free).

Every table of every paper is written in one long CSV schema (`SCHEMA`): one line per
(row, column, metric) with the paper's value, ours (mean and std over seeds), the number of seeds,
the difference and a status. The Markdown / HTML renderings lay the same numbers out like the
paper's table, each cell reading `paper / ours (Δ)`.

Definitions follow the papers (VHL §5.2, FedImpro §5.1):
- accuracy: the best test accuracy during training, in %; a diverged run has none ("Nan");
- target accuracy: at paper scale the printed one; at other scales the best accuracy of the
  table's reference cell (FedAvg without the method) rounded down to a whole percent, as the
  papers' printed targets are;
- rounds: the first round whose test accuracy reaches the target; never reached → NaN;
- speed-up: rounds of the reference cell ÷ rounds of the cell; NaN when either is NaN.
- post-hoc cells (CCVR): the accuracies of a calibrated cell are its calibration's `acc_after`
  (the run's last-round model with the classifier calibrated); gain = `acc_after` − `acc_before`
  per seed, then mean ± std; Markdown/HTML print it in parentheses inside the accuracy cell.
- quoted cells: a number the paper quotes from elsewhere (the cell's `quoted` names the source);
  no run of ours, status `quoted`, printed as the paper's value followed by `(quoted)`.

Modules: `schema` (CSV columns, statuses), `results` (a run's or calibration's files →
`RunResult`), `maths` (per-seed maths), `metrics` (the metric registry, `METRICS`), `compute`
(`compute_table`, averages, CSV), `render` (layout, Markdown, HTML), `identical` (rows that are
the same runs, and their legend), `claims` (the scorecard).
"""

from fedhet.tables.claims import _better, _select, evaluate_claim
from fedhet.tables.compute import (
    _averages,
    _line,
    compute_table,
    read_csv,
    to_frame,
    write_csv,
)
from fedhet.tables.maths import (
    _nested,
    mean_std,
    parse_reference,
    rounds_to_target,
    speedup,
    target_from_best,
)
from fedhet.tables.metrics import (
    KINDS,
    METRIC_NAMES,
    METRICS,
    SCALE_FREE,
    TARGET,
    CellState,
    Metric,
    lookup,
    metric_names,
    uses_rounds,
)
from fedhet.tables.identical import identical_rows
from fedhet.tables.render import (
    _gain_text,
    cell_text,
    fmt,
    gain_cell_text,
    header_of,
    layout,
    render_html,
    render_markdown,
)
from fedhet.tables.results import (
    RunResult,
    _pct,
    alike_runs,
    calibration_key,
    load_calibration,
    load_run,
    result_from,
)
from fedhet.tables.schema import (
    CONFIG,
    DIVERGED,
    NAN,
    NEVER,
    OK,
    PENDING,
    QUOTED,
    SCHEMA,
    is_nan,
)

__all__ = [
    "CONFIG",
    "DIVERGED",
    "KINDS",
    "METRICS",
    "METRIC_NAMES",
    "NAN",
    "NEVER",
    "OK",
    "PENDING",
    "QUOTED",
    "SCALE_FREE",
    "SCHEMA",
    "TARGET",
    "CellState",
    "Metric",
    "RunResult",
    "alike_runs",
    "identical_rows",
    # private helpers some tests reach (kept importable as before the split)
    "_averages",
    "_better",
    "_gain_text",
    "_line",
    "_nested",
    "_pct",
    "_select",
    "calibration_key",
    "cell_text",
    "compute_table",
    "evaluate_claim",
    "fmt",
    "gain_cell_text",
    "header_of",
    "is_nan",
    "layout",
    "load_calibration",
    "load_run",
    "lookup",
    "mean_std",
    "metric_names",
    "parse_reference",
    "read_csv",
    "render_html",
    "render_markdown",
    "result_from",
    "rounds_to_target",
    "speedup",
    "target_from_best",
    "to_frame",
    "uses_rounds",
    "write_csv",
]
