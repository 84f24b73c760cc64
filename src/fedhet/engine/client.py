"""One client's local training (`Federation.train_client`): its batches, and the local step as a
function of its batch (`ClientStep`), run eagerly or replayed from a CUDA graph
(`fedhet.engine.graphs`).

A step's batch is made in two parts. Outside the step, on the host's schedule: the positions of
the batch in the client's data (a fresh permutation per pass), the random draws of its
augmentation (from the client's generator, in the order they were always drawn), the rows,
angles and domain ids of those positions, and whatever the methods decide in `prepare_step`
(`StepInputs`). Inside the step, what a graph replays: the gather of the images and labels, the
augmentation with those draws, the forward pass and losses, backward, the corrections and the
SGD step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial

import torch

from fedhet.algorithms import ClientContext, ClientUpdate, StepOutput
from fedhet.algorithms.base import task_loss
from fedhet.engine.augment import Augmenter, Draws
from fedhet.engine.flat import FlatModel
from fedhet.engine.graphs import StepGraphs
from fedhet.engine.lanes import Lane
from fedhet.engine.seeding import generator, seed_global
from fedhet.engine.server import ClientData
from fedhet.engine.sgd import sgd_step
from fedhet.engine.view import FederationView


Hold = Callable[[str, torch.Tensor], torch.Tensor]


def batch_slices(n: int, batch_size: int) -> list[slice]:
    """Consecutive batches of a permutation; a trailing batch of one sample joins the previous
    one (BatchNorm cannot train on a single sample)."""
    bounds = list(range(0, n, batch_size)) + [n]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] == 1:
        del bounds[-2]
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def batch_positions(n: int, batch_size: int, steps: int,
                    gen: torch.Generator) -> Iterator[torch.Tensor]:
    """The positions, in a client's data of `n` samples, of its `steps` batches: a fresh
    permutation per pass, drawn from `gen` when the pass begins."""
    done = 0
    while done < steps:
        perm = torch.randperm(n, device=gen.device, generator=gen)
        for sl in batch_slices(n, batch_size)[:steps - done]:
            yield perm[sl]
            done += 1


@dataclass(frozen=True)
class StepInputs:
    """What a local step reads of its batch, made outside the step: the rows of the client's
    data tensors, its augmentation's random draws (None: the data are augmented and normalised
    already), and the rotation angles and domain ids of its positions (None: the data have
    none)."""

    rows: torch.Tensor
    draws: Draws | None
    angles: torch.Tensor | None
    domains: torch.Tensor | None

    @classmethod
    def of(cls, data: ClientData, take: torch.Tensor, augmenter: Augmenter,
           gen: torch.Generator) -> StepInputs:
        """The inputs of the batch at positions `take` of `data`, augmentation drawn from
        `gen`."""
        return cls(rows=data.rows(take),
                   draws=None if data.normalized else augmenter.draw(len(take), gen),
                   angles=None if data.angles is None else data.angles[take],
                   domains=None if data.domains is None else data.domains[take])

    def held(self, hold: Hold) -> StepInputs:
        """These inputs through `hold` (`StepGraphs.hold`), as `batch.*`."""
        return StepInputs(hold("batch.rows", self.rows),
                          None if self.draws is None else self.draws.held(hold, "batch.draws"),
                          None if self.angles is None else hold("batch.angles", self.angles),
                          None if self.domains is None else hold("batch.domains", self.domains))

    def batch(self, data: ClientData, augmenter: Augmenter) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's images (augmented and normalised) and labels."""
        x = data.x[self.rows]
        if self.draws is not None:
            x = augmenter.apply(x, self.draws, self.angles)
        return x, data.y[self.rows]


def client_batches(fed: FederationView, data: ClientData, gen: torch.Generator,
                   steps: int) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """A client's `steps` training batches (positions in its data, augmented images, labels),
    drawn from `gen`, one after another (stacked clients)."""
    for take in batch_positions(data.size, fed.training["batch_size"], steps, gen):
        yield take, *StepInputs.of(data, take, fed.augmenter, gen).batch(data, fed.augmenter)


def forward(fed: FederationView, ctx: ClientContext, x: torch.Tensor,
            y: torch.Tensor) -> StepOutput:
    """The task loss of one step: a plug-in's forward pass, or features → head → CE (soft
    targets, N×C floats, are accepted)."""
    for plugin in fed.plugins:
        out = plugin.forward(ctx, x, y)
        if out is not None:
            return out
    features = ctx.model.features(x)
    logits = ctx.model.head(features)
    return StepOutput(features, logits, y, task_loss(logits, y), inputs=x)


@dataclass
class ClientStep:
    """One client's local step as a function of its batch, reading the client's state through
    tensors that keep their addresses from client to client when steps are captured (the
    lane's models, the held momentum buffers, learning rate and loss sum):

        x, y = batch;  loss = task loss + Σ extra_loss;  g = ∇loss;  correct_gradient(g)
        w ← SGD(w, g, η);  after_step;  loss_sum += loss
    """

    fed: FederationView
    ctx: ClientContext
    data: ClientData
    work: FlatModel
    modules: FlatModel | None
    momentum: torch.Tensor
    modules_momentum: torch.Tensor | None
    loss_sum: torch.Tensor
    autocast: AbstractContextManager

    def __call__(self, inputs: StepInputs) -> None:
        fed, ctx, t = self.fed, self.ctx, self.fed.training
        x, y = inputs.batch(self.data, fed.augmenter)
        ctx.domains = inputs.domains
        for plugin in fed.plugins:
            x, y = plugin.transform_batch(ctx, x, y)
        if fed.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        self.work.zero_grad()
        if self.modules is not None:
            self.modules.zero_grad()
        with self.autocast:
            out = forward(fed, ctx, x, y)
            loss = out.loss
            for term in [fed.algorithm.extra_loss(ctx, out),
                         *(p.extra_loss(ctx, out) for p in fed.plugins)]:
                if term is not None:
                    loss = loss + term
        loss.backward()
        momentum, wd = t["momentum"], t["weight_decay"]
        with torch.no_grad():
            fed.algorithm.correct_gradient(ctx)
            if t["max_grad_norm"]:
                torch.nn.utils.clip_grad_norm_(self.work.module.parameters(), t["max_grad_norm"])
            sgd_step(self.work.params, self.work.grads, ctx.step_lr, momentum, wd, self.momentum)
            fed.algorithm.after_step(ctx)
            if self.modules is not None:
                sgd_step(self.modules.params, self.modules.grads, ctx.step_lr, momentum, wd,
                         self.modules_momentum)
        self.loss_sum += loss.detach().float()


def lane_steps(fed: FederationView, lane: Lane) -> StepGraphs:
    """The lane's local steps, run as the federation's `graphs` mode says (made on first use)."""
    if lane.steps is None or lane.steps.mode is not fed.graphs:
        lane.steps = StepGraphs(fed.graphs)
    return lane.steps


def train_client(fed: FederationView, client: int, round: int, lr: float,
                 lane: Lane) -> tuple[ClientUpdate, torch.Tensor]:
    """Local training of one client of `fed` in `lane`; its update and summed step losses."""
    t = fed.training
    work, mods = lane.work, lane.modules
    steps = lane_steps(fed, lane)
    work.load(fed.global_.params, fed.global_.buffers)
    work.module.train()
    if fed.client_workers == 1:  # concurrent clients draw nothing from it (checked)
        seed_global(fed.device, fed.seed, "client", round, client)  # dropout etc.
    gen = generator(fed.device, fed.seed, "batches", round, client)
    data = fed.client_data(client, round)
    steps.begin_client(data.x, data.y, data.normalized)
    n = data.size
    ctx = ClientContext(
        client=client, round=round, lr=lr, params=work.params, grads=work.grads,
        buffers=work.buffers, global_params=fed.global_.params,
        global_buffers=fed.global_.buffers, num_samples=n, model=work.module,
        reference=lane.reference, step_lr=steps.lr(lr, work.params), hold=steps.hold,
    )
    mods_momentum = None
    if mods is not None:
        mods.load(fed.modules_global.params, fed.modules_global.buffers)
        mods.module.train()
        ctx.modules = mods.module
        mods_momentum = steps.hold("modules.momentum", torch.zeros_like(mods.params))
    methods = [fed.algorithm, *fed.plugins]
    for m in methods:
        m.client_begin(ctx)
    kept = fed.momentum_buffer(client, lane)
    step = ClientStep(fed, ctx, data, work, mods, steps.hold("momentum", kept), mods_momentum,
                      steps.hold("loss_sum", torch.zeros((), device=fed.device)),
                      steps.autocast(fed.autocast))
    for take in batch_positions(n, t["batch_size"], fed.local_steps(n), gen):
        for m in methods:
            m.prepare_step(ctx)
        inputs = StepInputs.of(data, take, fed.augmenter, gen).held(steps.hold)
        steps.run(partial(step, inputs), shape=len(take))
        ctx.steps += 1
    if step.momentum is not kept and t["keep_client_optimizer_state"]:
        kept.copy_(step.momentum)
    update = ClientUpdate(client, work.params.clone(), work.buffers.clone(), n, ctx.steps)
    if mods is not None:
        update.module_params, update.module_buffers = mods.params.clone(), mods.buffers.clone()
    for m in methods:
        m.client_end(ctx, update)
    return update, step.loss_sum.clone()
