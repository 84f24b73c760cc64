"""A round's clients trained as one stacked model (`training.vectorise_clients: true`).

The sampled clients' flat parameters (and buffers: BatchNorm's running statistics stay each
client's own) are rows of one `[K, P]` tensor; every local step runs the model once for all of
them (`torch.func.vmap` of the gradient of a functional call), then one SGD step on the stacked
rows. That is what pays on a GPU, where a small model's step is bound by kernel launches
rather than arithmetic; on a CPU it is usually slower than clients one at a time (use
`runtime.client_workers` there).

Each client's maths is unchanged: the same batches (drawn from the same per-client generator
as the sequential path), the same loss of its own batch, the same algorithm hooks on its own
row, and as many steps as it would take alone. Clients are stacked by their step count,
largest first, so the clients still training are always the first rows; clients whose batch
is shorter that step (the end of a pass) run as a group of their own. Batched kernels sum in
another order than one client's, so the numbers equal the sequential path's to float
tolerance, not bit for bit: the setting is part of a run's identity.

A method qualifies when its declaration says so (`vectorised_clients`): its client-side hooks
act on the flat vectors of its client's context (FedProx's and SCAFFOLD's corrections,
FedNova's step count), and a loss term of its own comes as `stacked_loss`, written for one
client, which vmap runs for all (MOON's contrastive term against the global and the client's
previous model, FedNTD's distillation). Dropout, gradient clipping and methods not declared
train one client at a time, and the log says why.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.func import functional_call, grad_and_value, vmap

from fedhet.algorithms import ClientContext, ClientUpdate, StackedStep
from fedhet.algorithms.base import task_loss
from fedhet.engine.client import client_batches
from fedhet.engine.flat import FlatModel, segment_view
from fedhet.engine.lanes import draws_dropout, methods_without
from fedhet.engine.modes import PRECISIONS
from fedhet.engine.seeding import generator, seed_global
from fedhet.engine.sgd import sgd_step
from fedhet.engine.view import FederationView



def vectorise_decision(run: dict[str, Any], model: torch.nn.Module) -> tuple[bool, str]:
    """Whether this run's clients train stacked, and the reason, in words, for the log."""
    if not run["training"]["vectorise_clients"]:
        return False, ""
    unfit = methods_without(run, "vectorised_clients")
    why = None
    if unfit:
        why = ", ".join(unfit) + " not declared vectorisable"
    elif draws_dropout(model):
        why = "the model's dropout draws from torch's global generator"
    elif run["training"]["max_grad_norm"]:
        why = "gradient clipping is not vectorised"
    elif PRECISIONS[run["runtime"]["precision"]].autocast is not None:
        # torch.func's batching of BatchNorm and of autocast's backward mixes bf16 and float32
        # tensors and fails (measured with torch 2.11 on CPU and CUDA)
        why = f"{run['runtime']['precision']} autocast is not vectorised"
    if why:
        return False, f"clients train one at a time (vectorise_clients asked, but {why})"
    return True, "clients train stacked (vectorise_clients: torch.func.vmap over the clients)"


class _FeaturesAndLogits(torch.nn.Module):
    """The model's forward returning (features, logits), for `functional_call`."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.model.features(x)
        return features, self.model.head(features)


Tensors = dict[str, torch.Tensor]


class StackedClients:
    """Trains a round's clients of `fed` (a `Federation`) as rows of one stacked model."""

    def __init__(self, fed: FederationView) -> None:
        self.fed = fed
        work: FlatModel = fed.work
        wrapper = _FeaturesAndLogits(work.module)
        self.methods = methods = [fed.algorithm, *fed.plugins]
        layout = [(seg, fed.channels_last) for seg in work.param_segments]
        self.buffer_segments = work.buffer_segments
        # integer buffers (BatchNorm's step counters) are counted per client, never aggregated
        self.counter_names = [n for n, b in work.module.named_buffers()
                              if not b.is_floating_point()]

        def params_of(flat: torch.Tensor) -> Tensors:
            return {f"model.{seg.name}": segment_view(flat, seg, cl) for seg, cl in layout}

        def reference(params: torch.Tensor, buffers: torch.Tensor, x: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
            # a reference model runs in eval mode: its statistics are read, never updated
            state = params_of(params)
            state.update({f"model.{seg.name}": segment_view(buffers, seg)
                          for seg in self.buffer_segments})
            wrapper.eval()
            try:
                return functional_call(wrapper, state, (x,))
            finally:
                wrapper.train()

        def client_loss(params: torch.Tensor, statistics: Tensors, x: torch.Tensor,
                        y: torch.Tensor, inputs: Tensors, global_params: torch.Tensor,
                        global_buffers: torch.Tensor) -> torch.Tensor:
            # one client's loss of its batch: the task loss and every method's own term; the
            # model updates `statistics` (BatchNorm's, one tensor each) in place
            state = params_of(params)
            state.update({f"model.{name}": value for name, value in statistics.items()})
            features, logits = functional_call(wrapper, state, (x,))
            loss = task_loss(logits, y)
            step = StackedStep(x, y, features, logits, global_params, global_buffers, inputs,
                               lambda p, b: reference(p, b, x))
            for m in methods:
                term = m.stacked_loss(step)
                if term is not None:
                    loss = loss + term
            return loss

        self.grads_and_losses: Callable[..., tuple[torch.Tensor, torch.Tensor]] = vmap(
            grad_and_value(client_loss), in_dims=(0, 0, 0, 0, 0, None, None)
        )

    def train(self, clients: list[int], round: int,
              lr: float) -> list[tuple[ClientUpdate, torch.Tensor]]:
        """Local training of `clients`; their updates and summed step losses, in client order."""
        fed, t = self.fed, self.fed.training
        work, glob = fed.work, fed.global_
        work.module.train()
        methods = self.methods
        data = {k: fed.client_data(k, round) for k in clients}
        steps = {k: fed.local_steps(data[k].size) for k in clients}
        order = sorted(clients, key=lambda k: -steps[k])  # still training: the first rows
        rows = len(order)
        params = glob.params.expand(rows, -1).clone()
        # each client's BatchNorm statistics, one contiguous [K, ...] tensor per buffer (vmap
        # writes a batched in-place update through to those, not to views of a flat vector)
        statistics = {seg.name: segment_view(glob.buffers, seg).expand(rows, *seg.shape).clone()
                      for seg in self.buffer_segments}
        statistics.update({name: torch.zeros(rows, dtype=torch.long, device=fed.device)
                           for name in self.counter_names})
        momentum = torch.stack([fed.momentum_buffer(k, fed.lanes[0]) for k in order])
        contexts, inputs = [], []
        for j, k in enumerate(order):
            ctx = ClientContext(
                client=k, round=round, lr=lr, params=params[j], grads=work.grads,
                buffers=glob.buffers, global_params=glob.params, global_buffers=glob.buffers,
                num_samples=data[k].size, model=work.module,
            )
            for m in methods:
                m.client_begin(ctx)
            contexts.append(ctx)
            inputs.append({name: v for m in methods for name, v in m.stacked_inputs(ctx).items()})
        per_client = {name: torch.stack([row[name] for row in inputs]) for name in inputs[0]}
        batches = [client_batches(fed, data[k], generator(fed.device, fed.seed, "batches",
                                                          round, k), steps[k]) for k in order]
        losses = torch.zeros(rows, device=fed.device)
        for step in range(steps[order[0]]):
            active = sum(steps[k] > step for k in order)
            parts = [next(b) for b in batches[:active]]
            grads = torch.empty(active, params.shape[1], device=fed.device)
            for group in self._groups(parts):
                x = torch.stack([parts[j][1] for j in group])
                y = torch.stack([parts[j][2] for j in group])
                # rows of one group: consecutive in the usual case (all of them)
                at = slice(group[0], group[-1] + 1) if group[-1] - group[0] + 1 == len(group) \
                    else torch.tensor(group, device=fed.device)
                stats = {n: v[at].clone() for n, v in statistics.items()}
                with fed.autocast:
                    g, loss = self.grads_and_losses(
                        params[at], stats, x, y, {n: v[at] for n, v in per_client.items()},
                        glob.params, glob.buffers,
                    )
                for n, v in stats.items():
                    statistics[n][at] = v
                grads[at] = g
                losses[at] += loss.detach().float()
            with torch.no_grad():
                for j in range(active):
                    contexts[j].grads = grads[j]
                    fed.algorithm.correct_gradient(contexts[j])
                sgd_step(params[:active], grads, lr, t["momentum"], t["weight_decay"],
                         momentum[:active])
                for j in range(active):
                    fed.algorithm.after_step(contexts[j])
                    contexts[j].steps += 1
        trained = {}
        for j, k in enumerate(order):
            if t["keep_client_optimizer_state"]:
                fed.momentum_buffers[k].copy_(momentum[j])
            buffers = torch.cat([statistics[seg.name][j].reshape(-1)
                                 for seg in self.buffer_segments]) \
                if self.buffer_segments else glob.buffers.clone()
            contexts[j].buffers = buffers
            update = ClientUpdate(k, params[j].clone(), buffers, data[k].size,
                                  contexts[j].steps)
            for m in methods:
                m.client_end(contexts[j], update)
            trained[k] = (update, losses[j])
        # torch's global generator as one client at a time leaves it (each client seeds it;
        # no declared method draws from it): what comes after the round draws the same
        seed_global(fed.device, fed.seed, "client", round, clients[-1])
        return [trained[k] for k in clients]

    @staticmethod
    def _groups(parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> list[list[int]]:
        """Rows whose batches have the same length (stacked together), in row order."""
        groups: dict[int, list[int]] = {}
        for j, (_, x, _) in enumerate(parts):
            groups.setdefault(x.shape[0], []).append(j)
        return list(groups.values())
