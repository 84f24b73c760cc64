"""Base federated algorithms, registered by name in `ALGORITHMS`."""

from fedhet.algorithms import baselines as _baselines  # noqa: F401  (registers the baselines)
from fedhet.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    ClientContext,
    ClientUpdate,
    StepOutput,
    weighted_average,
)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "ClientContext",
    "ClientUpdate",
    "StepOutput",
    "weighted_average",
]
