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
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = [
    "scale",
    "paper",
    "table",
    "row",
    "column",
    "metric",
    "paper_value",
    "our_mean",
    "our_std",
    "seeds",
    "delta",
    "status",
]

# status values
OK = "ok"
PENDING = "pending"  # the method is not implemented yet / not yet run
DIVERGED = "diverged"
NEVER = "never reached"
CONFIG = "config"

METRIC_NAMES = {
    "acc": "ACC (%)",
    "last_acc": "last ACC (%)",
    "top5_acc": "top-5 mean ACC (%)",
    "rounds": "ROUND",
    "speedup": "speed-up",
    "cost": "samples to target (× N)",
    "lr": "lr",
    "target": "target ACC (%)",
    "gain": "gain (pp)",
}
# metrics whose difference with the paper means something at every scale; rounds and targets
# depend on the round budget and are compared only at paper scale
SCALE_FREE = {"acc", "last_acc", "top5_acc", "speedup", "lr", "gain"}

NAN = math.nan


def is_nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


# ----------------------------------------------------------------------------- per-run maths


@dataclass
class RunResult:
    """What a table needs from one finished run."""

    status: str  # completed | diverged
    best_acc: float  # %, nan when diverged
    last_acc: float
    top5_acc: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (round, test acc %)
    gain: float = NAN  # post-hoc results only: accuracy after − before calibration (pp)


def load_run(run_dir: str | Path) -> RunResult:
    """Read `final.json` and `metrics.jsonl` of a run directory (accuracies → %)."""
    run_dir = Path(run_dir)
    final = json.loads((run_dir / "final.json").read_text())
    curve = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                acc = rec.get("test_acc")
                if acc is not None:
                    curve.append((int(rec["round"]), 100.0 * float(acc)))
    return result_from(final, curve)


def _pct(x: Any) -> float:
    return NAN if is_nan(x) else 100.0 * float(x)


def load_calibration(path: str | Path) -> RunResult:
    """A post-hoc calibration (CCVR) as a result: its accuracies are the calibrated model's
    test accuracy (`acc_after`; the run's last round, calibrated), its gain after − before."""
    cal = json.loads(Path(path).read_text())
    after = _pct(cal.get("acc_after"))
    before = _pct(cal.get("acc_before"))
    return RunResult(
        status="completed",
        best_acc=after,
        last_acc=after,
        top5_acc=after,
        gain=after - before,
    )


def calibration_key(path: str | Path) -> str:
    """Result key of `.../calibrations/<run_id>/<key>/calibration.json`: `<run_id>/<key>`."""
    path = Path(path)
    return f"{path.parent.parent.name}/{path.parent.name}"


def result_from(final: Mapping[str, Any], curve: Sequence[tuple[int, float]]) -> RunResult:
    diverged = final.get("status") == "diverged"
    return RunResult(
        status=str(final.get("status", "completed")),
        best_acc=NAN if diverged else _pct(final.get("best_acc")),
        last_acc=NAN if diverged else _pct(final.get("last_acc")),
        top5_acc=NAN if diverged else _pct(final.get("top5_mean_acc")),
        curve=list(curve),
    )


def rounds_to_target(curve: Iterable[tuple[int, float]], target: float) -> float:
    """First round whose accuracy (%) reaches `target` (%); NaN if never (or no target)."""
    if is_nan(target):
        return NAN
    for rnd, acc in sorted(curve):
        if not is_nan(acc) and acc >= target - 1e-9:
            return float(rnd)
    return NAN


def uses_rounds(metrics: Iterable[str]) -> bool:
    """Whether a cell shows a metric computed from its rounds to the target."""
    return bool({"rounds", "speedup", "cost"} & set(metrics))


def speedup(reference_rounds: float, rounds: float) -> float:
    """Rounds of the reference (FedAvg w/o the method) ÷ rounds of the method; NaN-safe."""
    if is_nan(reference_rounds) or is_nan(rounds) or rounds <= 0:
        return NAN
    return float(reference_rounds) / float(rounds)


def target_from_best(best_acc: float) -> float:
    """Our target at scales other than paper: the reference's best accuracy, whole percent down."""
    if is_nan(best_acc):
        return NAN
    return float(math.floor(best_acc + 1e-9))


def mean_std(values: Sequence[float], nan_if_any: bool = True) -> tuple[float, float, int]:
    """Mean and sample std over seeds. One NaN (diverged / never reached) makes the mean NaN."""
    vals = [float(v) for v in values]
    n = len(vals)
    if n == 0:
        return NAN, NAN, 0
    if any(math.isnan(v) for v in vals):
        if nan_if_any:
            return NAN, NAN, n
        vals = [v for v in vals if not math.isnan(v)]
        if not vals:
            return NAN, NAN, n
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, NAN, n
    var = sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)
    return mean, math.sqrt(var), n


def parse_reference(value: Any) -> tuple[float, float]:
    """Transcribed paper value → (value, std): `Nan` → nan (the paper prints Nan), null → None
    (not printed), [m, s] → both."""
    if value is None:
        return None, None
    if isinstance(value, list | tuple):
        mean = parse_reference(value[0])[0] if value else None
        std = parse_reference(value[1])[0] if len(value) > 1 else None
        return mean, std
    if isinstance(value, str):
        return (NAN, None) if value.strip().lower() == "nan" else (float(value), None)
    return float(value), None


def _nested(node: Any, keys: Sequence[str]) -> Any:
    for key in keys:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


# ----------------------------------------------------------------------------- tables


def _line(payload, scale, row, column, metric, paper, paper_std, mean, std, n, status, note=""):
    delta = NAN
    comparable = metric in SCALE_FREE or scale == "paper"
    if status in (OK, CONFIG) and comparable and not is_nan(paper) and not is_nan(mean):
        delta = mean - paper
    return {
        "scale": scale,
        "paper": payload["paper"],
        "table": payload["id"],
        "row": row,
        "column": column,
        "metric": metric,
        "paper_value": paper,
        "our_mean": mean,
        "our_std": std,
        "seeds": n,
        "delta": delta,
        "status": status,
        "paper_std": paper_std,
        "note": note,
    }


def compute_table(
    payload: Mapping[str, Any], results: Mapping[str, RunResult], scale: str
) -> list[dict[str, Any]]:
    """Long rows of one table. `payload` is `fedhet.experiments.Item.payload()`; `results` maps
    run ids to their RunResult (every non-pending cell's runs must be there)."""
    spec = payload["spec"]
    kind = payload["kind"]
    cells = payload["cells"]
    lines: list[dict[str, Any]] = []
    # per-cell accuracies
    acc: dict[int, tuple[float, float, int, str]] = {}
    for i, cell in enumerate(cells):
        if cell["pending"] or kind == "settings":
            continue
        runs = [results[r] for r in cell.get("calibrations") or cell["run_ids"]]
        m, s, n = mean_std([r.best_acc for r in runs])
        status = DIVERGED if any(r.status == "diverged" for r in runs) else OK
        acc[i] = (m, s, n, status)

    # group → (ours, paper, how, label, seeds)
    targets: dict[tuple, tuple[float, float | None, str, str, int]] = {}
    rounds: dict[int, tuple[float, float, int, str]] = {}
    if kind == "rounds_to_target":
        tspec = spec["target"]
        group_by = tspec["group_by"]
        ref_where = tspec["cell"]
        for i, cell in enumerate(cells):
            labels = cell["labels"]
            if not all(a in labels for a in group_by):
                continue
            if not all(labels.get(k) == v for k, v in ref_where.items()):
                continue
            if not uses_rounds(cell["metrics"]):
                continue
            key = tuple(labels[a] for a in group_by)
            paper_t = parse_reference(_nested(tspec.get("paper") or {}, key))[0]
            if scale == "paper":
                ours, how = paper_t, "printed target"
            else:
                ours = target_from_best(acc[i][0]) if i in acc else NAN
                how = "ours: reference best, floored"
            label = " · ".join(cell["display"][a] for a in group_by)
            n_ref = len(cell["run_ids"])
            targets[key] = (ours, paper_t, how, label, n_ref)
        for i, cell in enumerate(cells):
            if i not in acc or not uses_rounds(cell["metrics"]):
                continue
            key = tuple(cell["labels"].get(a) for a in group_by)
            target = targets.get(key, (NAN,))[0]
            per_seed = [rounds_to_target(results[r].curve, target) for r in cell["run_ids"]]
            m, s, n = mean_std(per_seed)
            rounds[i] = (m, s, n, NEVER if is_nan(m) else OK)
        for ours, paper_t, how, label, n_ref in targets.values():
            lines.append(
                _line(
                    payload, scale, label, "target", "target", paper_t, None, ours, NAN, n_ref, how
                )
            )

    ref_rounds: dict[tuple, float] = {}
    if kind == "rounds_to_target":
        group_by = spec["target"]["group_by"]
        for i, cell in enumerate(cells):
            if i in rounds and all(
                cell["labels"].get(k) == v for k, v in spec["target"]["cell"].items()
            ):
                ref_rounds[tuple(cell["labels"].get(a) for a in group_by)] = rounds[i][0]

    for i, cell in enumerate(cells):
        for metric in cell["metrics"]:
            paper, paper_std = parse_reference(cell["reference"].get(metric))

            def cell_line(mean, std, n, status, note=""):
                return _line(payload, scale, cell["row"], cell["column"], metric, paper,
                             paper_std, mean, std, n, status, note)

            if kind == "settings":
                value = cell["values"].get(metric)
                mean = NAN if value is None else float(value)
                lines.append(cell_line(mean, NAN, 0, CONFIG))
                continue
            if cell["pending"]:
                lines.append(cell_line(NAN, NAN, 0, PENDING, cell["pending"]))
                continue
            if metric == "gain":
                # post-hoc cells: calibrated − uncalibrated accuracy, per seed, then mean ± std
                runs = [results[r] for r in cell.get("calibrations") or []]
                m, s, n = mean_std([r.gain for r in runs])
                status = acc[i][3] if runs else PENDING
            elif metric in ("acc", "last_acc", "top5_acc"):
                runs = [results[r] for r in cell.get("calibrations") or cell["run_ids"]]
                attr = {"acc": "best_acc", "last_acc": "last_acc", "top5_acc": "top5_acc"}[metric]
                m, s, n = mean_std([getattr(r, attr) for r in runs])
                status = acc[i][3]
            elif metric == "rounds":
                m, s, n, status = rounds.get(i, (NAN, NAN, 0, NEVER))
                if acc[i][3] == DIVERGED and is_nan(m):
                    status = DIVERGED
            elif metric == "cost":
                r = rounds.get(i, (NAN, NAN, 0, NEVER))
                factor = float(cell["values"].get("cost_factor", NAN))
                m, s, n = r[0] * factor, r[1] * factor, r[2]
                status = r[3]
                if acc[i][3] == DIVERGED and is_nan(m):
                    status = DIVERGED
            elif metric == "speedup":
                group_by = spec["target"]["group_by"]
                key = tuple(cell["labels"].get(a) for a in group_by)
                r = rounds.get(i, (NAN, NAN, 0, NEVER))
                m = speedup(ref_rounds.get(key, NAN), r[0])
                s, n = NAN, r[2]
                status = OK if not is_nan(m) else (DIVERGED if acc[i][3] == DIVERGED else NEVER)
            else:
                raise ValueError(f"table {payload['id']}: unknown metric '{metric}'")
            lines.append(cell_line(m, s, n, status))

    averages = spec.get("averages")
    if averages:
        lines.extend(_averages(payload, averages, lines, scale))
    return lines


def _averages(payload, averages, lines, scale):
    """Mean over one axis (the paper's "Average" rows), from the first grid's cells."""
    over = averages["over"]
    label = averages.get("label", "Average")
    spec = payload["spec"]
    by_rc = {(ln["row"], ln["column"], ln["metric"]): ln for ln in lines}
    groups: dict[tuple, list] = {}
    order: list[tuple] = []
    for cell in payload["cells"]:
        if cell["grid"] != 0 or over not in cell["labels"]:
            continue
        rows = [a for a in spec.get("rows", []) if a != over]
        cols = list(spec.get("columns", []))
        key = tuple(cell["labels"][a] for a in rows + cols)
        disp_row = " · ".join([*(cell["display"][a] for a in rows), label])
        disp_col = " · ".join(cell["display"][a] for a in cols)
        for metric in cell["metrics"]:
            gkey = (key, disp_row, disp_col, metric)
            if gkey not in groups:
                groups[gkey] = []
                order.append(gkey)
            groups[gkey].append(by_rc[(cell["row"], cell["column"], metric)])
    out = []
    for gkey in order:
        key, disp_row, disp_col, metric = gkey
        members = groups[gkey]
        paper = parse_reference(_nested(averages.get("reference") or {}, key))[0]
        if any(m["status"] == PENDING for m in members):
            out.append(
                _line(payload, scale, disp_row, disp_col, metric, paper, NAN, NAN, NAN, 0, PENDING)
            )
            continue
        vals = [m["our_mean"] for m in members]
        mean = NAN if any(is_nan(v) for v in vals) else sum(vals) / len(vals)
        n = min(m["seeds"] for m in members)
        out.append(
            _line(
                payload,
                scale,
                disp_row,
                disp_col,
                metric,
                paper,
                NAN,
                mean,
                NAN,
                n,
                OK if not is_nan(mean) else DIVERGED,
            )
        )
    return out


def to_frame(lines: Sequence[Mapping[str, Any]]):
    """The long table as a pandas DataFrame in the CSV schema (`SCHEMA` columns first)."""
    import pandas as pd

    df = pd.DataFrame(list(lines))
    if df.empty:
        df = pd.DataFrame(columns=[*SCHEMA, "paper_std", "note"])
    return df


def write_csv(lines: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    df = to_frame(lines)[SCHEMA]
    df.to_csv(path, index=False, float_format="%.6g", na_rep="NaN")


def read_csv(path: str | Path):
    import pandas as pd

    return pd.read_csv(path, keep_default_na=True, na_values=["NaN"])


# ----------------------------------------------------------------------------- rendering


def fmt(value: Any, metric: str, std: Any = None) -> str:
    if value is None:
        return "–"
    if is_nan(value):
        return "Nan"
    if metric == "lr":
        text = f"{value:g}"
    elif metric in ("rounds", "target"):
        text = f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    elif metric == "speedup":
        text = f"{value:.2f}"
    elif metric == "cost":
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    if std is not None and not is_nan(std):
        text += f"±{std:.2f}"
    return text


def cell_text(line: Mapping[str, Any]) -> str:
    metric = line["metric"]
    paper = fmt(line["paper_value"], metric, line.get("paper_std"))
    if line["status"] == PENDING:
        return f"{paper} / pending"
    ours = fmt(line["our_mean"], metric, line.get("our_std"))
    if line["status"] == CONFIG:
        return f"{paper} / {ours}"
    text = f"{paper} / {ours}"
    if not is_nan(line["delta"]):
        text += f" ({line['delta']:+.2f})"
    return text


def _gain_text(line: Mapping[str, Any] | None, value_key: str) -> str:
    value = None if line is None else line[value_key]
    if value is None or is_nan(value) or (line["status"] == PENDING and value_key == "our_mean"):
        return ""
    return f" ({'↑' if value >= 0 else '↓'}{abs(value):.2f})"


def gain_cell_text(acc: Mapping[str, Any], gain: Mapping[str, Any] | None) -> str:
    """An accuracy cell with its calibration gain in parentheses, as CCVR prints it:
    `paper (↑gain) / ours (↑gain) (ours − paper)`."""
    metric = acc["metric"]
    paper = fmt(acc["paper_value"], metric, acc.get("paper_std")) + _gain_text(gain, "paper_value")
    if acc["status"] == PENDING:
        return f"{paper} / pending"
    ours = fmt(acc["our_mean"], metric, acc.get("our_std")) + _gain_text(gain, "our_mean")
    text = f"{paper} / {ours}"
    if not is_nan(acc["delta"]):
        text += f" ({acc['delta']:+.2f})"
    return text


def layout(lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any]):
    """The paper-like grid: header + body rows; block headers where rows have a block part.
    A `gain` next to an accuracy of the same cell (CCVR's calibrations) is shown inside the
    accuracy cell, in parentheses, as the paper prints it (the CSV keeps it as its own line)."""
    spec = payload["spec"]
    gains = {(ln["row"], ln["column"]): ln for ln in lines if ln["metric"] == "gain"}
    accs = {(ln["row"], ln["column"]) for ln in lines if ln["metric"] in ("acc", "last_acc")}
    if gains and set(gains) <= accs:
        lines = [ln for ln in lines if ln["metric"] != "gain"]
    else:
        gains = {}
    metrics: list[str] = []
    columns: list[str] = []
    for ln in lines:
        if ln["metric"] == "target":
            continue
        if ln["metric"] not in metrics:
            metrics.append(ln["metric"])
        if ln["column"] not in columns:
            columns.append(ln["column"])
    heads = [(m, c) for m in metrics for c in columns]
    used = {(ln["metric"], ln["column"]) for ln in lines}
    heads = [h for h in heads if h in used]
    if len(metrics) == 1:
        header = ["", *[c or METRIC_NAMES.get(m, m) for m, c in heads]]
    else:
        header = ["", *[f"{METRIC_NAMES.get(m, m)} {c}".strip() for m, c in heads]]
    targets = {ln["row"]: ln for ln in lines if ln["metric"] == "target"}
    body: list[list[str]] = []
    by_row: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
    order: list[str] = []
    for ln in lines:
        if ln["metric"] == "target":
            continue
        if ln["row"] not in by_row:
            by_row[ln["row"]] = {}
            order.append(ln["row"])
        by_row[ln["row"]][(ln["metric"], ln["column"])] = ln
    blocks = len(spec.get("rows", [])) >= 2
    # a target per whole row (FedImpro Table 2) gets its own first column; a target per block of
    # rows (VHL Tables 1, 2, 4, 5) goes into the block's header line
    row_targets = any(row in targets for row in order)
    if row_targets:
        header.insert(1, "target ACC (%)")
    current = None
    for row in order:
        name = row
        if blocks and " · " in row:
            block, name = row.split(" · ", 1)
            if block != current:
                current = block
                title = f"**{block}**"
                if block in targets:
                    t = targets[block]
                    title += (
                        f" (target ACC: paper {fmt(t['paper_value'], 'target')}"
                        f" / ours {fmt(t['our_mean'], 'target')}, {t['status']})"
                    )
                body.append([title, *[""] * (len(header) - 1)])
        cells = by_row[row]
        line = [name]
        if row_targets:
            t = targets.get(row)
            line.append(
                f"{fmt(t['paper_value'], 'target')} / {fmt(t['our_mean'], 'target')}" if t else ""
            )
        texts = []
        for h in heads:
            if h not in cells:
                texts.append("")
            elif (row, h[1]) in gains and h[0] in ("acc", "last_acc"):
                texts.append(gain_cell_text(cells[h], gains[(row, h[1])]))
            else:
                texts.append(cell_text(cells[h]))
        body.append(line + texts)
    if row_targets:
        statuses = sorted({t["status"] for t in targets.values()})
        body.append([f"target: {', '.join(statuses)}", *[""] * (len(header) - 1)])
    return header, body


def render_markdown(
    lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], scale: str, note: str = ""
) -> str:
    header, body = layout(lines, payload)
    spec = payload["spec"]
    note = " ".join(n for n in (note, spec.get("note"), spec.get("scale_note")) if n)
    out = [f"# {payload['paper'].upper()} {spec.get('title', payload['id'])}", ""]
    out.append(
        f"Scale: `{scale}`. Each cell: paper / ours (ours − paper). "
        "`pending`: the method is not implemented yet. `Nan`: target never reached "
        "or training diverged."
    )
    if note:
        out += ["", note]
    out.append("")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(["---"] * len(header)) + "|")
    for row in body:
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def render_html(
    lines: Sequence[Mapping[str, Any]], payload: Mapping[str, Any], scale: str, note: str = ""
) -> str:
    import html

    header, body = layout(lines, payload)
    spec = payload["spec"]
    note = " ".join(n for n in (note, spec.get("note"), spec.get("scale_note")) if n)
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        "<style>body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
        "td:first-child{text-align:left}</style></head><body>",
        f"<h3>{html.escape(payload['paper'].upper())} {html.escape(spec.get('title', ''))}</h3>",
        f"<p>Scale <b>{html.escape(scale)}</b>. Each cell: paper / ours (ours − paper). "
        "<i>pending</i>: method not implemented yet; <i>Nan</i>: target never reached or "
        f"diverged. {html.escape(note)}</p>",
        "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>",
    ]
    for row in body:
        first = row[0]
        if first.startswith("**"):
            parts.append(
                f"<tr><td colspan='{len(header)}'><b>{html.escape(first.strip('*'))}</b></td></tr>"
            )
            continue
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts)


# ----------------------------------------------------------------------------- claims


def _select(payload: Mapping[str, Any], where: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    out = []
    for cell in payload["cells"]:
        ok = True
        for key, want in where.items():
            wants = [str(w) for w in want] if isinstance(want, list) else [str(want)]
            if cell["labels"].get(key) not in wants:
                ok = False
                break
        if ok:
            out.append(cell)
    return out


def _better(a: float, b: float, direction: str) -> bool:
    worst = -math.inf if direction == "higher" else math.inf
    a = worst if is_nan(a) else a
    b = worst if is_nan(b) else b
    return a > b if direction == "higher" else a < b


def evaluate_claim(
    claim: Mapping[str, Any],
    payloads: Mapping[str, Mapping[str, Any]],
    frames: Mapping[str, Any],
) -> dict[str, Any]:
    """Check one claim on our numbers and on the paper's own. `payloads` / `frames` are keyed by
    `<paper>_<table>`; frames are the long tables (DataFrames)."""
    paper = claim["paper"]
    metric = claim["metric"]
    direction = claim.get("direction", "higher")
    require = claim.get("require", "all")
    sides = {}
    # cells pair up on every label except those the two selections set differently
    wb = claim["better"].get("where") or {}
    wt = claim["than"].get("where") or {}
    where_keys = {k for k in set(wb) | set(wt) if wb.get(k) != wt.get(k)}
    for side in ("better", "than"):
        sel = claim[side]
        target = f"{paper}_{sel['table']}"
        df = frames[target]
        index = {(r.row, r.column): r for r in df[df["metric"] == metric].itertuples(index=False)}
        entries = []
        for cell in _select(payloads[target], sel.get("where") or {}):
            if metric not in cell["metrics"]:
                continue
            key = tuple(sorted((k, v) for k, v in cell["labels"].items() if k not in where_keys))
            entries.append((key, index.get((cell["row"], cell["column"]))))
        sides[side] = entries
    pairs = [(b, t) for kb, b in sides["better"] for kt, t in sides["than"] if kb == kt]
    n = len(pairs)
    pending = sum(1 for b, t in pairs if b is None or t is None or PENDING in (b.status, t.status))
    ours_hold = sum(
        1
        for b, t in pairs
        if b is not None
        and t is not None
        and PENDING not in (b.status, t.status)
        and _better(b.our_mean, t.our_mean, direction)
    )
    paper_pairs = [
        (b, t)
        for b, t in pairs
        if b is not None and t is not None and not (b.paper_value is None or t.paper_value is None)
    ]
    paper_hold = sum(1 for b, t in paper_pairs if _better(b.paper_value, t.paper_value, direction))

    def verdict(hold: int, total: int) -> bool:
        return hold == total if require == "all" else hold * 2 > total

    if n == 0:
        result = "not yet run"
    elif pending:
        result = "not yet run"
    else:
        result = "reproduced" if verdict(ours_hold, n) else "not reproduced"
    return {
        "paper": paper,
        "claim": " ".join(str(claim["text"]).split()),
        "result": result,
        "ours": (
            f"{ours_hold}/{n - pending} pairs hold" + (f", {pending} pending" if pending else "")
            if pending < n
            else f"{n} pairs pending"
        ),
        "in_paper": f"{paper_hold}/{len(paper_pairs)} pairs hold",
        "require": require,
    }
