"""Plug-ins: methods that change a client's data or objective on top of any base algorithm.

A plug-in may take over the forward pass of a local step (e.g. append virtual samples to
the batch, or continue from a split point on synthetic features), add loss terms, and keep
state across rounds. Hooks run in the order the plug-ins are listed in the run; base
algorithm hooks (FedProx's gradient, SCAFFOLD's correction, ...) run after them, so
VHL × SCAFFOLD is the SCAFFOLD update applied to VHL's objective.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fedhet.algorithms.base import ClientContext, ClientUpdate, StackedStep, StepOutput
from fedhet.engine.server import ClientData, EvalSet, ServerView
from fedhet.registry import Registry


class Plugin:
    """Does nothing; subclasses override the hooks their method needs."""

    name = "plugin"
    # the run's clients (1 when centralized), set by `fedhet.catalog.plugins_of` before any
    # hook runs: what `modules` may size a module by, before `setup` gives the ServerView
    num_clients: int = 1

    def __init__(self, params: dict[str, Any]) -> None:
        # complete and checked by the declaration (`fedhet.catalog.plugins_of` resolves them)
        self.hp = dict(params)

    def modules(self, model: torch.nn.Module) -> dict[str, torch.nn.Module]:
        """Trainable modules this plug-in adds beside the model (a projection head, a domain
        discriminator), built for `model`. The engine averages them over the round's clients
        like the model (sample-weighted) but outside the base algorithm's corrections, counts
        them in the bytes sent and saves them in model.pt; the saved-run reader rebuilds them.
        During local training they are `ctx.modules[self.module_key(name)]`."""
        return {}

    def module_key(self, name: str) -> str:
        """The key of this plug-in's module `name` in `ctx.modules` and in saved state dicts
        (under `plugin_modules.`)."""
        return f"{self.name}-{name}"

    def prepare_model(self, model: torch.nn.Module) -> None:
        """Change a model's own forward pass (clsnorm's normalised head). Called on every model
        the engine builds and on every model read back from a saved run (`fedhet.saved`)."""

    def setup(self, server: ServerView) -> None:
        """Called once the federation (data, models, algorithm) is built."""

    def round_begin(self, round: int, clients: list[int]) -> None:
        """Called on the server before the round's clients train (pseudo-data of the round,
        re-distillation at chosen rounds)."""

    def client_data(self, client: int, round: int, data: ClientData) -> ClientData | None:
        """The tensors `client` trains on this round (None: keep `data`, the partition or what
        an earlier plug-in supplied), e.g. distilled images with soft labels."""
        return None

    def client_begin(self, ctx: ClientContext) -> None:
        """Called after the working model received the global model."""

    def prepare_step(self, ctx: ClientContext) -> None:
        """Before each local step, outside it (and its CUDA graph): what the step will read that
        is decided on the host (the next positions of a second data stream, draws from a
        per-client generator), put in `ctx.extra` through `ctx.hold`."""

    def transform_batch(self, ctx: ClientContext, x: torch.Tensor,
                        y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A local batch before the forward pass (augmented, normalised) → the batch trained
        on; `y` may become soft targets (N×C floats), e.g. Mixup."""
        return x, y

    def forward(self, ctx: ClientContext, x: torch.Tensor, y: torch.Tensor) -> StepOutput | None:
        """Replace the default forward pass and task loss (None: keep the default)."""
        return None

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> torch.Tensor | None:
        """A term added to the loss of a local step."""
        return None

    def stacked_inputs(self, ctx: ClientContext) -> dict[str, torch.Tensor]:
        """Stacked training: the per-client tensors `stacked_loss` reads (after client_begin)."""
        return {}

    def stacked_loss(self, step: StackedStep) -> torch.Tensor | None:
        """Stacked training (`fedhet.engine.vectorised`): `extra_loss` of one client's batch
        written as a function of `step` (the same maths); None: nothing."""
        return None

    def client_end(self, ctx: ClientContext, update: ClientUpdate) -> None:
        """Called when the client finished local training."""

    def round_end(self, round: int, updates: list[ClientUpdate]) -> None:
        """Called after aggregation, with the round's client updates."""

    def files(self) -> dict[str, Any]:
        """Files this plug-in leaves beside `model.pt` when the run ends: name → content
        (`*.json`: a JSON-able object; `*.pt`: tensors). They are written to
        `plugins/<plug-in>/<name>` in the run directory and listed in final.json's `files`."""
        return {}

    def test_sets(self) -> list[EvalSet]:
        """Evaluation sets besides the run's test set (e.g. rotated copies of it), scored
        with the global model at every evaluation."""
        return []

    def broadcast_tensors(self) -> list[torch.Tensor]:
        """What the server sends each sampled client besides the model (communication cost)."""
        return []

    def upload_tensors(self, update: ClientUpdate) -> list[torch.Tensor]:
        """What a client sends besides its model (communication cost)."""
        return []

    @classmethod
    def extra_classes(cls, num_classes: int, params: dict[str, Any]) -> int:
        """Classifier outputs this plug-in needs beyond the dataset's classes (VHL: C_v)."""
        return 0

    def eval_logits(self, logits: torch.Tensor, num_classes: int) -> torch.Tensor:
        """Test logits → logits whose argmax is the prediction on the dataset's classes."""
        return logits

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned."""


PLUGINS: Registry[type[Plugin]] = Registry("plug-in")


MODULES_PREFIX = "plugin_modules"  # state-dict prefix of the plug-ins' modules in model.pt


def plugin_modules(plugins: list[Plugin], model: torch.nn.Module,
                   seed: int) -> torch.nn.ModuleDict | None:
    """The modules the plug-ins add for `model`, initialised from `seed` (None: none)."""
    from fedhet.engine.seeding import derive_seed

    with torch.random.fork_rng(devices=[]):  # the caller's random stream is left as it was
        torch.manual_seed(derive_seed(seed, "plugin_modules"))
        found = {p.module_key(k): m for p in plugins for k, m in p.modules(model).items()}
    return torch.nn.ModuleDict(found) if found else None


def eval_logit_map(plugins: list[Plugin], num_classes: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """Test logits → what the plug-ins score (VHL: natural classes only, or all outputs)."""

    def apply(logits: torch.Tensor) -> torch.Tensor:
        for plugin in plugins:
            logits = plugin.eval_logits(logits, num_classes)
        return logits

    return apply

