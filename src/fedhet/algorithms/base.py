"""The algorithm interface: how clients train and how the server aggregates.

An algorithm sees models as flat vectors (see `fedhet.engine.flat`), so its update rules
read like the papers' equations. The engine calls, per round:

    for each sampled client k:
        client_begin(ctx)                      # receive w_g, set up local state
        per local step:
            prepare_step(ctx)                  # host-side draws, outside the step's CUDA graph
            loss = task loss + extra_loss(ctx, out)
            backward → ctx.grads
            correct_gradient(ctx)              # FedProx, FedDyn
            SGD step on the flat vectors
            after_step(ctx)                    # SCAFFOLD's control-variate correction
        client_end(ctx, update)                # control variates, normalisers
    aggregate(round, w_g, updates) → new w_g   # FedAvg, FedNova, FedAvgM, ...

Plug-ins (`fedhet.plugins`) change the data or the objective and compose with any of them.

On CUDA the step (from the batch to `after_step`) may be captured once as a CUDA graph and
replayed (`fedhet.engine.graphs`): what its hooks read that changes between steps or clients
comes from tensors held with `ctx.hold`, the learning rate from `ctx.step_lr` (the capture
contract: docs/ARCHITECTURE.md, "A local step as a CUDA graph").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from fedhet.registry import Registry


@dataclass
class ClientUpdate:
    """What a client returns after local training."""

    client: int
    params: torch.Tensor
    buffers: torch.Tensor
    num_samples: int
    steps: int
    extra: dict[str, Any] = field(default_factory=dict)
    module_params: torch.Tensor | None = None  # the plug-ins' modules (flat), if any
    module_buffers: torch.Tensor | None = None


@dataclass
class ClientContext:
    """One client's local training in one round."""

    client: int
    round: int
    lr: float
    params: torch.Tensor  # the working model's flat parameters (views back the module)
    grads: torch.Tensor
    buffers: torch.Tensor
    global_params: torch.Tensor  # w_g received at the start of the round (read-only)
    global_buffers: torch.Tensor
    num_samples: int
    model: torch.nn.Module
    steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    domains: torch.Tensor | None = None  # domain ids of the current batch (when the data has)
    modules: torch.nn.ModuleDict | None = None  # the plug-ins' modules being trained
    # a spare model of this client's own (a `FlatModel`), for algorithms that declare
    # `needs_reference_models` (MOON's previous local model)
    reference: Any = None
    # the learning rate as a local step reads it: `lr`, or (on CUDA) a 0-dim device tensor
    # holding it, which a CUDA graph reads anew at each replay (`fedhet.engine.sgd.descend`)
    step_lr: float | torch.Tensor | None = None
    # `hold(name, value)`: `value` as a local step may read it, for what changes between clients
    # or steps (client_begin, prepare_step): when the step is a CUDA graph, a tensor kept for the
    # run under `name` (and shape) into which `value` is copied; otherwise `value` itself
    hold: Callable[[str, torch.Tensor], torch.Tensor] = field(default=lambda name, value: value)

    def __post_init__(self) -> None:
        if self.step_lr is None:
            self.step_lr = self.lr


def task_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy with class labels or soft targets (N×C floats; a model with more outputs
    than C, such as VHL's virtual classes, gets zero target mass on the extra ones)."""
    if targets.is_floating_point() and targets.shape[1] < logits.shape[1]:
        targets = F.pad(targets, (0, logits.shape[1] - targets.shape[1]))
    return F.cross_entropy(logits, targets)


def hard_labels(targets: torch.Tensor) -> torch.Tensor:
    """Class indices of a batch's targets, whether labels or soft targets (N×C, argmax)."""
    return targets.argmax(1) if targets.is_floating_point() else targets


def as_soft(targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Soft targets (N×C floats) of a batch: one-hot rows for class labels, soft targets as
    they are (so label-mixing methods such as Mixup compose with each other)."""
    return targets if targets.is_floating_point() else F.one_hot(targets, num_classes).float()


@dataclass
class StepOutput:
    """One forward pass of a local step."""

    features: torch.Tensor
    logits: torch.Tensor
    targets: torch.Tensor
    loss: torch.Tensor
    inputs: torch.Tensor | None = None


@dataclass
class StackedStep:
    """One client's batch inside stacked training (`fedhet.engine.vectorised`), as a method's
    `stacked_loss` sees it: written for one client, it runs for all of them at once under
    `torch.func.vmap`, so it may use tensor operations only (no `.item()`, no branching on
    values, no in-place change of what it did not create)."""

    x: torch.Tensor
    labels: torch.Tensor
    features: torch.Tensor  # of the client's model being trained
    logits: torch.Tensor
    global_params: torch.Tensor  # w_g, flat
    global_buffers: torch.Tensor
    inputs: dict[str, torch.Tensor]  # the client's `stacked_inputs`
    # (features, logits) of `x` under other flat parameters and buffers: a reference model,
    # in eval mode as a reference model runs
    forward_with: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def weighted_average(updates: list[ClientUpdate], attr: str) -> torch.Tensor:
    """Σ_k (n_k / Σn) v_k over the returned clients (FedAvg's aggregation)."""
    total = float(sum(u.num_samples for u in updates))
    out = torch.zeros_like(getattr(updates[0], attr))
    for u in updates:
        out.add_(getattr(u, attr), alpha=u.num_samples / total)
    return out


class Algorithm:
    """FedAvg's behaviour; subclasses override the hooks their method changes."""

    name = "fedavg"
    # True: the run is scored by its clients' own models (test accuracy and loss = the mean over
    # the round's client models), not by the aggregate (Local-only training)
    scores_client_models = False

    def __init__(self, params: dict[str, Any], num_clients: int, momentum: float) -> None:
        self.hp = dict(params)
        self.num_clients = num_clients
        self.momentum = momentum

    def setup(self, global_params: torch.Tensor) -> None:
        """Allocate server and client state shaped like the model."""

    def client_begin(self, ctx: ClientContext) -> None:
        """Called after the working model received w_g."""

    def prepare_step(self, ctx: ClientContext) -> None:
        """Before each local step, outside it (and its CUDA graph): what the step will read that
        is decided on the host (draws from a per-client generator), put in `ctx.extra` through
        `ctx.hold`."""

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> torch.Tensor | None:
        """A term added to the task loss of a local step (None: nothing)."""
        return None

    def stacked_inputs(self, ctx: ClientContext) -> dict[str, torch.Tensor]:
        """Stacked training: the per-client tensors `stacked_loss` reads (after client_begin)."""
        return {}

    def stacked_loss(self, step: StackedStep) -> torch.Tensor | None:
        """Stacked training: `extra_loss` of one client's batch written as a function of
        `step` (the same maths); None: nothing."""
        return None

    def correct_gradient(self, ctx: ClientContext) -> None:
        """Modify `ctx.grads` in place before the optimizer step."""

    def after_step(self, ctx: ClientContext) -> None:
        """Modify `ctx.params` in place after the optimizer step."""

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        """Update client state and attach what the server needs to `update.extra`."""

    def aggregate(
        self, round: int, global_params: torch.Tensor, global_buffers: torch.Tensor,
        updates: list[ClientUpdate],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The new global model: sample-weighted average of the returned models."""
        return weighted_average(updates, "params"), weighted_average(updates, "buffers")

    def broadcast_tensors(self) -> list[torch.Tensor]:
        """What the server sends each sampled client besides the model (communication cost)."""
        return []

    def upload_tensors(self, update: ClientUpdate) -> list[torch.Tensor]:
        """What a client sends back (communication cost): its model, by default."""
        return [update.params, update.buffers]

    def state_dict(self) -> dict[str, Any]:
        """Server and client state to checkpoint."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")
