"""Per-seed maths of the tables: rounds to a target, speed-ups, our target, mean ± std over
seeds, and the transcribed paper values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fedhet.tables.schema import NAN, is_nan


def rounds_to_target(curve: Iterable[tuple[int, float]], target: float) -> float:
    """First round whose accuracy (%) reaches `target` (%); NaN if never (or no target)."""
    if is_nan(target):
        return NAN
    for rnd, acc in sorted(curve):
        if not is_nan(acc) and acc >= target - 1e-9:
            return float(rnd)
    return NAN


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


# a share of the way from chance to 100 % below which an accuracy is "near chance"
NEAR_CHANCE = 0.1


def near_chance(acc: float, chance: float | None) -> bool:
    """Whether an accuracy (%) lies less than a tenth of the way from chance (`chance`, % of
    guessing among the classes) to 100 %: the run learnt (almost) nothing."""
    if chance is None or is_nan(acc):
        return False
    return acc < chance + NEAR_CHANCE * (100.0 - chance)


# Two means tie when they differ by no more than a margin, in the units compared (percentage
# points of accuracy, rounds): TIE_MARGIN unless a config sets its own (config.yaml →
# leaderboard.tie_margin, a claim's `margin`); where both cells have SPREAD_SEEDS or more seeds,
# by their spread instead (the larger of their sample standard deviations over seeds). The
# leaderboard and the scorecard judge ties alike.
TIE_MARGIN = 1.0
SPREAD_SEEDS = 3
TIE_SLACK = 1e-9  # float rounding, when a difference is compared with its threshold


def tie_threshold(margin: float, a_std: float, a_seeds: int, b_std: float,
                  b_seeds: int) -> float:
    """Within how much two cells' means tie: the seeds' spread when both have SPREAD_SEEDS
    or more seeds, else `margin`."""
    if min(a_seeds, b_seeds) >= SPREAD_SEEDS:
        spreads = [s for s in (a_std, b_std) if not is_nan(s)]
        if spreads:
            return max(spreads)
    return margin


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
