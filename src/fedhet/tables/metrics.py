"""The table metrics, one declaration each, in one registry (`METRICS`).

A declaration says what a metric is called, how its column is headed, whether its difference
with the paper means something at every scale, where it comes from and how a cell's value is
computed from the cell's runs. `compute_table` dispatches through the registry, and other code
lists the valid metrics from it (`metric_names`), so a new metric is one declaration here.

Kinds (where the numbers come from):
- run: each seed's `final.json` (a post-hoc cell's: its calibration's `acc_after`);
- derived: each seed's curve (`metrics.jsonl`) and the table's target accuracy;
- settings: a resolved run setting of the cell (settings tables, no run);
- posthoc: a post-hoc calibration of each seed's run (CCVR's gain);
- analytic: a registered function of the cell's labels (analytic tables, no run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fedhet.registry import Registry
from fedhet.tables.maths import mean_std, speedup
from fedhet.tables.results import RunResult
from fedhet.tables.schema import CONFIG, DIVERGED, NAN, NEVER, OK, PENDING, is_nan

KINDS = ("run", "derived", "settings", "posthoc", "analytic")

# mean, std, seeds, status of one cell's metric
Value = tuple[float, float, int, str]


@dataclass
class CellState:
    """What a metric's computation sees of one cell of a table (built by `compute_table`)."""

    metric: str
    cell: Mapping[str, Any]  # a payload cell (`fedhet.experiments.Cell.key()`)
    results: Mapping[str, RunResult]  # run (or calibration) id → its result
    status: str = OK  # the cell's runs: OK, or DIVERGED when one of them diverged
    rounds: Value = (NAN, NAN, 0, NEVER)  # rounds to the table's target over the seeds
    reference_rounds: float = NAN  # rounds of the cell's reference (FedAvg w/o the method)

    def runs(self) -> list[RunResult]:
        """The cell's results: its calibrations for post-hoc cells, else its runs."""
        return [self.results[r] for r in self.cell.get("calibrations") or self.cell["run_ids"]]

    def calibrations(self) -> list[RunResult]:
        return [self.results[r] for r in self.cell.get("calibrations") or []]


def _two_decimals(value: float) -> str:
    return f"{value:.2f}"


def _one_decimal(value: float) -> str:
    return f"{value:.1f}"


def _general(value: float) -> str:
    return f"{value:g}"


def _significant(value: float) -> str:
    return f"{value:.3g}"


def _three_digits(value: float) -> str:
    """Three significant digits, trailing zeros kept (11.0, 23.5, 311, 0.500)."""
    return f"{value:#.3g}".rstrip(".")


def _si(value: float) -> str:
    """A count with an SI prefix at three significant digits (311K, 11.0M, 23.5K): the paper's
    value, ours and their difference all printed alike."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor * (1 - 5e-4):  # 999,999 prints 1.00M, not 1.00e+03K
            return f"{_three_digits(value / factor)}{prefix}"
    return _three_digits(value)


def _whole(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


@dataclass(frozen=True)
class Metric:
    """One table metric."""

    name: str
    header: str  # printed above its column (Markdown / HTML)
    # whether the difference with the paper means something at every scale; rounds and targets
    # depend on the round budget and are compared only at paper scale
    scale_free: bool
    kind: str  # one of KINDS ("target": the per-block target line, not a table metric)
    source: str  # where it comes from, in words
    compute: Callable[[CellState], Value] | None  # None: computed per block (the target)
    text: Callable[[float], str] = _two_decimals  # a value as the paper prints it
    # an accuracy in %: whether it lies near chance is judged on the cell's own value (else on
    # the best accuracy of the cell's runs)
    accuracy: bool = False
    # fewer is better (rounds to a target, its cost): how a leaderboard ranks on it
    lower_is_better: bool = False

    @property
    def needs_rounds(self) -> bool:
        """Whether it is computed from the cell's rounds to the table's target."""
        return self.kind == "derived"


def _final(attribute: str) -> Callable[[CellState], Value]:
    def compute(state: CellState) -> Value:
        m, s, n = mean_std([getattr(r, attribute) for r in state.runs()])
        return m, s, n, state.status

    return compute


def _domain_acc(state: CellState) -> Value:
    """The last round's accuracy on the cell's test domain, per seed, then mean ± std. The
    vocabulary's `domain:` names the domain, or gives its position in the dataset's domain
    order (an integer: a stand-in's domains are named differently from the real sites), or
    `mean` for the unweighted mean over the run's domains."""
    domain = state.cell["values"].get("domain")
    if domain is None:
        raise ValueError(
            f"metric domain_acc needs a test domain; cell {state.cell['labels']} has none: give "
            "one of its axis values `domain: <name or position>` or `domain: mean`")
    values = []
    for run in state.runs():
        names = list(run.domain_acc)
        if run.status == DIVERGED:
            values.append(NAN)
        elif domain == "mean":
            values.append(run.mean_domain_acc)
        elif domain in run.domain_acc:
            values.append(run.domain_acc[domain])
        elif domain.isdigit() and int(domain) < len(names):
            values.append(run.domain_acc[names[int(domain)]])
        else:
            raise ValueError(
                f"cell {state.cell['labels']} reads test domain '{domain}', which its runs do "
                f"not score (they score: {', '.join(names) or 'no domains'}); fix the "
                "vocabulary's `domain:` entry")
    m, s, n = mean_std(values)
    return m, s, n, state.status


def _rounds(state: CellState) -> Value:
    m, s, n, status = state.rounds
    if state.status == DIVERGED and is_nan(m):
        status = DIVERGED
    return m, s, n, status


def _cost(state: CellState) -> Value:
    """Rounds × passes over the clients' data per round (VHL Table 10)."""
    r = state.rounds
    factor = float(state.cell["values"].get("cost_factor", NAN))
    m, s, n = r[0] * factor, r[1] * factor, r[2]
    status = r[3]
    if state.status == DIVERGED and is_nan(m):
        status = DIVERGED
    return m, s, n, status


def _speedup(state: CellState) -> Value:
    m = speedup(state.reference_rounds, state.rounds[0])
    status = OK if not is_nan(m) else (DIVERGED if state.status == DIVERGED else NEVER)
    return m, NAN, state.rounds[2], status


def setting_value(state: CellState) -> Value:
    """A settings table's cell: the resolved setting the table shows (no run)."""
    value = state.cell["values"].get(state.metric)
    return (NAN if value is None else float(value)), NAN, 0, CONFIG


def analytic_value(state: CellState) -> Value:
    """An analytic table's cell: its function (`fedhet.tables.analytic`) of its labels."""
    from fedhet.tables.analytic import ANALYTIC

    function = ANALYTIC.get(state.cell["values"]["function"])
    return function(state.cell["labels"]), NAN, 0, OK


def _gain(state: CellState) -> Value:
    """Post-hoc cells: calibrated − uncalibrated accuracy, per seed, then mean ± std."""
    runs = state.calibrations()
    m, s, n = mean_std([r.gain for r in runs])
    return m, s, n, (state.status if runs else PENDING)


_DECLARED = (
    Metric(
        name="acc",
        header="ACC (%)",
        scale_free=True,
        kind="run",
        source="final.json: best test accuracy during training",
        compute=_final("best_acc"),
        accuracy=True,
    ),
    Metric(
        name="last_acc",
        header="last ACC (%)",
        scale_free=True,
        kind="run",
        source="final.json: the last round's test accuracy",
        compute=_final("last_acc"),
        accuracy=True,
    ),
    Metric(
        name="top5_acc",
        header="top-5 mean ACC (%)",
        scale_free=True,
        kind="run",
        source="final.json: mean of the five best test accuracies",
        compute=_final("top5_acc"),
        accuracy=True,
    ),
    Metric(
        name="local_top5_acc",
        header="local models' ACC (%)",
        scale_free=True,
        kind="run",
        source="final.json: mean test accuracy of the round's client models, mean of the five "
        "best rounds (eval.client_models)",
        compute=_final("local_top5_acc"),
        accuracy=True,
    ),
    Metric(
        name="domain_acc",
        header="ACC (%)",
        scale_free=True,
        kind="run",
        source="final.json: the last round's accuracy on the cell's test domain, or the "
        "unweighted mean over the domains (vocabulary `domain:`)",
        compute=_domain_acc,
        text=_one_decimal,
        accuracy=True,
    ),
    Metric(
        name="params_m",
        header="Params (M)",
        scale_free=False,
        kind="run",
        source="final.json: parameters sent to a client per round (model, plug-in modules, "
        "what the algorithm sends besides), in millions",
        compute=_final("params_m"),
        text=_significant,  # demo models hold tens of thousands of parameters
    ),
    Metric(
        name="step_seconds",
        header="time per step (s)",
        scale_free=False,
        kind="run",
        source="final.json: training seconds of a round ÷ the local steps of a client (one step "
        "of all the round's clients); hardware-dependent",
        compute=_final("step_seconds"),
    ),
    Metric(
        name="rounds",
        header="ROUND",
        scale_free=False,
        kind="derived",
        source="metrics.jsonl: the first round whose test accuracy reaches the table's target",
        compute=_rounds,
        text=_whole,
        lower_is_better=True,
    ),
    Metric(
        name="speedup",
        header="speed-up",
        scale_free=True,
        kind="derived",
        source="rounds of the cell's reference (FedAvg w/o the method) ÷ rounds of the cell",
        compute=_speedup,
    ),
    Metric(
        name="cost",
        header="samples to target (× N)",
        scale_free=False,
        kind="derived",
        source="rounds × passes over the clients' data per round (cell values: cost_factor)",
        compute=_cost,
        text=_one_decimal,
        lower_is_better=True,
    ),
    Metric(
        name="lr",
        header="lr",
        scale_free=True,
        kind="settings",
        source="the cell's resolved run setting (the table's setting_key), no run",
        compute=setting_value,
        text=_general,
    ),
    Metric(
        name="count",
        header="count",
        scale_free=True,
        kind="analytic",
        source="the analytic table's function: parameters of the paper's model or values of "
        "its virtual data, computed from the model and image sizes (no run)",
        compute=analytic_value,
        text=_si,
    ),
    Metric(
        name="flops",
        header="FLOPs",
        scale_free=True,
        kind="analytic",
        source="the analytic table's function: floating-point operations of the paper's "
        "setting from torch's FLOP counter (2 per multiply-add; no run)",
        compute=analytic_value,
        text=_si,
    ),
    Metric(
        name="gain",
        header="gain (pp)",
        scale_free=True,
        kind="posthoc",
        source="calibration.json: test accuracy after − before calibration, per seed",
        compute=_gain,
    ),
)

METRICS: Registry[Metric] = Registry("table metric")
for _metric in _DECLARED:
    METRICS.add(_metric.name, _metric)
del _metric

# the line of a rounds-to-target table that gives a block's (or row's) target accuracy
TARGET = Metric(
    name="target",
    header="target ACC (%)",
    scale_free=False,
    kind="target",
    source="at paper scale the printed target, else the reference cell's best accuracy, floored",
    compute=None,
    text=_whole,
)


def metric_names(kind: str | None = None) -> list[str]:
    """The valid table metrics (of one kind of KINDS), in declaration order."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown kind of table metric '{kind}'; valid: {', '.join(KINDS)}")
    return [m.name for m in _DECLARED if kind is None or m.kind == kind]


def lookup(name: str) -> Metric | None:
    """A metric or the target line by name; None for a name that is neither."""
    if name == TARGET.name:
        return TARGET
    return METRICS.get(name) if name in METRICS else None


def uses_rounds(metrics: Iterable[str]) -> bool:
    """Whether a cell shows a metric computed from its rounds to the target."""
    return any(m in METRICS and METRICS.get(m).needs_rounds for m in metrics)


METRIC_NAMES = {m.name: m.header for m in (*_DECLARED, TARGET)}
SCALE_FREE = {m.name for m in _DECLARED if m.scale_free}
