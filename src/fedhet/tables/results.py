"""What a table reads of one run: `final.json` and `metrics.jsonl` of a run directory, or a
post-hoc calibration's `calibration.json` (CCVR), as a `RunResult` (accuracies in %)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedhet.tables.schema import NAN, is_nan


@dataclass
class RunResult:
    """What a table needs from one finished run."""

    status: str  # completed | diverged
    best_acc: float  # %, nan when diverged
    last_acc: float
    top5_acc: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (round, test acc %)
    local_top5_acc: float = NAN  # %, the client models' mean accuracy, mean of the 5 best
    params_m: float = NAN  # millions of parameters sent to a client per round
    step_seconds: float = NAN  # seconds of one local step of all the round's clients
    gain: float = NAN  # post-hoc results only: accuracy after − before calibration (pp)
    # multi-domain test sets: accuracy per domain of the last evaluated round and their
    # unweighted mean (%)
    domain_acc: dict[str, float] = field(default_factory=dict)
    mean_domain_acc: float = NAN


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
    return _scaled(x, 100.0)


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
    """A run's result from its `final.json` content and its test-accuracy curve (in %)."""
    diverged = final.get("status") == "diverged"
    return RunResult(
        status=str(final.get("status", "completed")),
        best_acc=NAN if diverged else _pct(final.get("best_acc")),
        last_acc=NAN if diverged else _pct(final.get("last_acc")),
        top5_acc=NAN if diverged else _pct(final.get("top5_mean_acc")),
        curve=list(curve),
        local_top5_acc=NAN if diverged else _pct(final.get("local_top5_mean_acc")),
        params_m=_scaled(final.get("communicated_params"), 1e-6),
        step_seconds=_scaled(final.get("mean_step_seconds"), 1.0),
        domain_acc={} if diverged else {str(k): _pct(v) for k, v in
                                        (final.get("last_domain_acc") or {}).items()},
        mean_domain_acc=NAN if diverged else _pct(final.get("mean_domain_acc_last")),
    )


def _scaled(x: Any, factor: float) -> float:
    return NAN if is_nan(x) else factor * float(x)
