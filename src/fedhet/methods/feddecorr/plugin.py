"""FedDecorr (Shi et al., ICLR 2023) as a plug-in: the task loss plus β·L_dc on the step's
penultimate features z (N×d).

The paper z-scores the batch's features per dimension, ẑ = (z − mean)/std, takes the
correlation matrix K = ẑᵀẑ/N and penalises its squared Frobenius norm (the diagonal is constant
after z-scoring, so only the correlations between dimensions matter). Two codes compute it
differently:

- `official` (github.com/bytedance/FedDecorr, loss.py): ẑ = (z − mean)/√(var + 1e-8) with the
  unbiased variance, and L_dc = mean_{a≠b} ((ẑᵀẑ)_ab)² / N — off-diagonal entries only (the
  diagonal is constant after z-scoring), of ẑᵀẑ without the 1/N, divided by N once.
- `fedbr_code` (FedBR's `feddecorr_loss`): ẑ = (z − mean)/(std + 1e-4) with the unbiased
  std, and L_dc = mean_{a,b} ((ẑᵀẑ/N)_ab)², the diagonal included.

With β = 0 nothing is computed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fedhet.algorithms.base import ClientContext, StackedStep, StepOutput
from fedhet.algorithms.losses import at_least_float32
from fedhet.plugins import PLUGINS, Plugin


def decorrelation_official(z: Tensor) -> Tensor:
    """FedDecorr's code: mean_{a≠b} ((ẑᵀẑ)_ab)² / N with ẑ = (z − mean)/√(var + 1e-8)."""
    n, d = z.shape
    z = z - z.mean(0, keepdim=True)
    z = z / torch.sqrt(1e-8 + z.var(0, keepdim=True))
    squared = (z.T @ z).pow(2)
    off_diagonal = squared.sum() - squared.diagonal().sum()
    return off_diagonal / (d * (d - 1)) / n


def decorrelation_fedbr(z: Tensor) -> Tensor:
    """FedBR's code: mean_{a,b} ((ẑᵀẑ/N)_ab)² with ẑ = (z − mean)/(std + 1e-4)."""
    n = z.shape[0]
    z = (z - z.mean(0)) / (z.std(0) + 1e-4)
    return (z.T @ z / n).pow(2).mean()


FORMULAS = {"official": decorrelation_official, "fedbr_code": decorrelation_fedbr}


@PLUGINS.register("feddecorr")
class FedDecorr(Plugin):
    """Decorrelates the dimensions of the penultimate features within each local batch."""

    name = "feddecorr"

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self.beta = float(self.hp["beta"])
        self.loss = FORMULAS[self.hp["formula"]]

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> Tensor | None:
        if self.beta == 0:
            return None
        return self.beta * self.loss(at_least_float32(out.features))

    def stacked_loss(self, step: StackedStep) -> Tensor | None:
        if self.beta == 0:
            return None
        return self.beta * self.loss(at_least_float32(step.features))
