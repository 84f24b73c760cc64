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
    # what the run logged each round (its losses, FINGERPRINT_KEYS), flattened: two runs that
    # logged the same (to float rounding) trained alike (`alike_runs`)
    logged: list[float] = field(default_factory=list, repr=False)

def load_run(run_dir: str | Path) -> RunResult:
    """Read `final.json` and `metrics.jsonl` of a run directory (accuracies → %)."""
    run_dir = Path(run_dir)
    final = json.loads((run_dir / "final.json").read_text())
    curve, logged = [], []
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                acc = rec.get("test_acc")
                if acc is not None:
                    curve.append((int(rec["round"]), 100.0 * float(acc)))
                logged.extend(NAN if rec.get(k) is None else float(rec[k])
                              for k in FINGERPRINT_KEYS)
    result = result_from(final, curve)
    result.logged = logged
    return result


# what each logged round adds to a run's `logged`: its losses (not its accuracy, which a
# near-tie of one test image flips on float rounding alone; not its timings)
FINGERPRINT_KEYS = ("round", "test_loss", "train_loss")
# runs whose logs agree to this relative tolerance trained alike: the same arithmetic in
# another order (FedNova's normalisation by one step) differs in float32's last bits
ALIKE_RTOL = 1e-5


def _same_log(a: Sequence[float], b: Sequence[float]) -> bool:
    if len(a) != len(b) or not a:
        return False
    for x, y in zip(a, b, strict=True):
        if is_nan(x) or is_nan(y):
            if not (is_nan(x) and is_nan(y)):
                return False
        elif abs(x - y) > ALIKE_RTOL * max(abs(x), abs(y)) + 1e-12:
            return False
    return True


def alike_runs(results: Mapping[str, RunResult]) -> dict[str, str]:
    """Run id → the first run id (in sorted order) that logged the same losses each round (to
    float rounding), for every run that has such a twin: runs that trained alike, which a
    table must count once, however their settings differ."""
    firsts: list[str] = []
    out = {}
    for run_id in sorted(results):
        log = results[run_id].logged
        if not log:
            continue
        twin = next((f for f in firsts if _same_log(results[f].logged, log)), None)
        if twin is None:
            firsts.append(run_id)
        else:
            out[run_id] = twin
            out.setdefault(twin, twin)
    return out


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
