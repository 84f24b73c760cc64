"""The interface of base federated algorithms and their registry `ALGORITHMS` (implementations
register themselves when `fedhet.catalog.implementation` imports their module)."""

from fedhet.algorithms.base import (
    ALGORITHMS,
    Algorithm,
    ClientContext,
    ClientUpdate,
    StackedStep,
    StepOutput,
    weighted_average,
)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "ClientContext",
    "ClientUpdate",
    "StackedStep",
    "StepOutput",
    "weighted_average",
]
