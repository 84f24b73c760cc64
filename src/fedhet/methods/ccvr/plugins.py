"""CCVR's classifier regularisers (Luo et al., 2021, §3.3) as plug-ins for any base algorithm.

``clsnorm``: the classifier's weight vectors are L2-normalised in training *and* inference,

    logits_i = φ_iᵀ z / ‖φ_i‖          (paper: no temperature, no scale, no bias)

The head normalises itself: `apply_clsnorm` registers a forward hook on ``model.head`` that
returns ``F.linear(z, W / ‖W‖_row, b?)``. The parameter objects stay as they are, so the
flat-vector views of `FlatModel` keep backing them, the state dict keeps its keys and
shapes, and a saved ``model.pt`` holds the raw (unnormalised) weights; the hook is applied by
`Plugin.prepare_model`, which the engine and the saved-run reader (`fedhet.saved`) call on every
model they build. With ``bias: false`` (the default, as in the paper's formula) the
head's bias does not enter the logits (it keeps its initial value and gets no gradient);
``bias: true`` adds it after the normalised product. The logged classifier norms are those
of the raw weights.

``clsprox``: a proximal term on the classifier only,

    (μ/2) ‖φ_k − φ_g‖²,   gradient μ (φ_k − φ_g) on the head's weight and bias, 0 elsewhere,

with φ_g the classifier received from the server at the start of the round.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.algorithms.base import ClientContext, StepOutput
from fedhet.engine.server import ServerView
from fedhet.plugins import PLUGINS, Plugin

CLSNORM_ATTR = "_clsnorm_bias"  # set on a head that normalises its weights (value: keep bias)


def _clsnorm_hook(module: nn.Linear, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
    """Forward hook: replace the plain linear output by the weight-normalised one."""
    weight = F.normalize(module.weight, dim=1)
    bias = module.bias if getattr(module, CLSNORM_ATTR) else None
    return F.linear(args[0], weight, bias)


def apply_clsnorm(model: nn.Module, bias: bool = False) -> nn.Module:
    """Make ``model.head`` compute ``z · (W/‖W‖_row)ᵀ (+ b if bias)``. Idempotent; returns model.

    The parameters are not replaced (a forward hook recomputes the output), so flat views,
    optimisers and state-dict keys are unaffected; deepcopy carries the hook along.
    """
    head = model.head
    if not isinstance(head, nn.Linear):
        raise TypeError(f"clsnorm needs an nn.Linear head, got {type(head).__name__}")
    if hasattr(head, CLSNORM_ATTR):
        if bool(getattr(head, CLSNORM_ATTR)) != bool(bias):
            raise ValueError("clsnorm is already applied to this head with another bias setting")
        return model
    setattr(head, CLSNORM_ATTR, bool(bias))
    head.register_forward_hook(_clsnorm_hook)
    return model


def has_clsnorm(model: nn.Module) -> bool:
    return hasattr(model.head, CLSNORM_ATTR)


@PLUGINS.register("clsnorm")
class ClsNorm(Plugin):
    """L2-normalised classifier weight vectors in training and inference (CCVR §3.3)."""

    name = "clsnorm"

    def prepare_model(self, model: nn.Module) -> None:
        apply_clsnorm(model, bias=bool(self.hp["bias"]))


def head_segments(model: nn.Module) -> list[tuple[str, int, int, torch.Size]]:
    """(name, offset, numel, shape) of the head's parameters in the flat parameter vector
    (`FlatModel` lays parameters out in ``named_parameters()`` order)."""
    out, offset = [], 0
    for name, p in model.named_parameters():
        if name.startswith("head."):
            out.append((name, offset, p.numel(), p.shape))
        offset += p.numel()
    if not out:
        raise ValueError("the model has no 'head.' parameters")
    return out


@PLUGINS.register("clsprox")
class ClsProx(Plugin):
    """(μ/2)‖φ − φ_g‖² on the classifier's parameters only (CCVR §3.3)."""

    name = "clsprox"

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self._segments: list[tuple[str, int, int, torch.Size]] | None = None

    def setup(self, server: ServerView) -> None:
        self._segments = head_segments(server.work_model.module)

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> torch.Tensor:
        if self._segments is None:
            self._segments = head_segments(ctx.model)
        params = dict(ctx.model.named_parameters())
        total = None
        for name, offset, numel, shape in self._segments:
            ref = ctx.global_params[offset:offset + numel].view(shape).detach()
            term = (params[name] - ref).pow(2).sum()
            total = term if total is None else total + term
        return 0.5 * float(self.hp["mu"]) * total
