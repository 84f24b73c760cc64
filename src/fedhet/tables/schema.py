"""The long CSV schema every table is written in, and the statuses of its lines."""

from __future__ import annotations

import math
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
    "near_chance",  # ours lies near chance: the run learnt (almost) nothing, not compared
]

# status values
OK = "ok"
PENDING = "pending"  # the method is not implemented yet / not yet run
DIVERGED = "diverged"
NEVER = "never reached"
CONFIG = "config"
QUOTED = "quoted"  # a number the paper quotes from elsewhere (the cell names its source): no run

NAN = math.nan


def is_nan(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))
