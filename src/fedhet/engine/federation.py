"""The federated training loop: sampled clients train on-device, the server aggregates.

Design for speed: each client's data stays on the training device as uint8 tensors and is
augmented there in batches; the global model and one working model are flat vectors
(`FlatModel`), so receiving the global model is one copy and returning a model one clone;
nothing in the inner loop waits for the device (losses are summed on the device and read
once per round).

Design for reproducibility: every random draw of client k in round r comes from seeds
derived from (seed, r, k), and client sampling from (seed, r), so a resumed run replays
exactly what an uninterrupted one would have done, and every method of a table sees the
same clients in the same rounds for a given seed.

A client's local training is `fedhet.engine.client`; on CUDA its step is captured once as a CUDA
graph and replayed, with the same numbers: `fedhet.engine.graphs`. Several clients of a round may
train at once on CPU, with the same numbers: `fedhet.engine.lanes`; or as one stacked model (for
a GPU), to float tolerance: `fedhet.engine.vectorised`.
"""

from __future__ import annotations

import copy
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedhet.algorithms import ClientUpdate, weighted_average
from fedhet.catalog import implementation, model_classes, plugins_of
from fedhet.engine.augment import Augmenter
from fedhet.engine.client import batch_slices, train_client
from fedhet.engine.divergence import (
    group_divergence, layer_groups, segment_sq_norms, stage_groups,
)
from fedhet.engine.evaluation import (
    KEEP_BYTES,
    PreparedTestSet,
    SliceMap,
    evaluate_inputs,
    evaluate_model,
    exact_slice,
)
from fedhet.engine.flat import FlatModel
from fedhet.engine.graphs import graph_mode
from fedhet.engine.lanes import Lane, LanePool, client_workers
from fedhet.engine.memory import keep_freed_memory
from fedhet.engine.modes import apply_modes
from fedhet.engine.seeding import derive_seed
from fedhet.engine.server import ClientData, ServerView
from fedhet.engine.vectorised import StackedClients, vectorise_decision
from fedhet.models import build_model
from fedhet.plugins import MODULES_PREFIX, eval_logit_map, plugin_modules


MAX_SCORED_DOMAINS = 100  # more test domains than this: no per-domain accuracy in the logs


@dataclass
class RoundResult:
    """What one round produced, kept on the device until it is logged."""

    round: int
    lr: float
    clients: list[int]
    train_loss: torch.Tensor  # mean over all local steps of the round
    client_drift: torch.Tensor  # mean_k ‖w_k − w_new‖²
    weight_divergence_total: torch.Tensor  # mean_k ‖w_k − w_new‖ (FedImpro Fig. 2b)
    weight_divergence: dict[str, torch.Tensor]  # mean_k ‖w_k,l − w_new,l‖ per module l
    stage_divergence: dict[str, torch.Tensor]  # the same per split stage (and head)
    layer_divergence: dict[str, torch.Tensor]  # the same per weight layer (conv, linear)
    client_head_norms: dict[int, torch.Tensor]  # per-class classifier weight norms
    updates: list[ClientUpdate]
    finite: bool
    seconds: float = 0.0  # wall time of local training and aggregation
    bytes_down: int = 0  # server → clients: the model and what algorithm and plug-ins add
    bytes_up: int = 0  # clients → server


def sample_clients(seed: int, round: int, num_clients: int, per_round: int) -> list[int]:
    """Clients of a round, drawn without replacement from a (seed, round)-keyed generator."""
    rng = np.random.default_rng(derive_seed(seed, "sample", round))
    return sorted(int(k) for k in rng.choice(num_clients, per_round, replace=False))


class Federation:
    """A model, clients holding data, a base algorithm and plug-ins, trained round by round."""

    def __init__(self, run: dict[str, Any], data: Any, client_indices: list[np.ndarray],
                 device: torch.device, client_angles: list[np.ndarray] | None = None) -> None:
        keep_freed_memory()  # no page faults for every step's activations (same numbers)
        self.run = run
        self.device = device
        self.seed = run["seed"]
        t = run["training"]
        self.training = t
        self.num_clients = len(client_indices)
        self.modes = apply_modes(run, device)  # precision, memory format, deterministic kernels
        self.autocast = self.modes.autocast
        self.channels_last = self.modes.channels_last

        self.num_classes = data.num_classes
        self.model_classes = model_classes(run, self.num_classes)
        self.plugins = plugins_of(run)  # set up below, once data, models and algorithm exist
        channels, size = int(data.x_train.shape[1]), int(data.x_train.shape[-1])
        self.global_ = self._build_model(channels, size)
        self.work = self._build_model(channels, size)
        self.work.load(self.global_.params, self.global_.buffers)
        # the plug-ins' own modules: averaged like the model, outside the algorithm's rules
        modules = plugin_modules(self.plugins, self.global_.module, self.seed)
        self.modules_global = None if modules is None else FlatModel(modules.to(device))
        self.modules_work = None if modules is None else FlatModel(copy.deepcopy(modules))
        self.client_workers, self.execution = client_workers(run, device, self.global_.module,
                                                             self.num_clients)

        self.x_train = data.x_train.to(device)
        self.y_train = data.y_train.to(device)
        self.x_test = data.x_test.to(device)
        self.y_test = data.y_test.to(device)
        domains = getattr(data, "domain_train", None)
        self.domain_train = None if domains is None else torch.as_tensor(domains).to(device)
        domains = getattr(data, "domain_test", None)
        self.domain_test = None if domains is None else torch.as_tensor(domains).to(device)
        self.domain_names = getattr(data, "domain_names", None)
        # accuracy per test domain, unless the domains are writers by the thousand (FEMNIST)
        few = (self.domain_test is not None
               and torch.unique(self.domain_test).numel() <= MAX_SCORED_DOMAINS)
        self.domains_scored = self.domain_test if few else None
        self.test_rotations = [float(a) for a in run["eval"]["rotations"]]
        self.client_indices = [torch.as_tensor(ix, dtype=torch.long, device=device)
                               for ix in client_indices]
        self.client_angles = None if client_angles is None else [
            torch.as_tensor(a, dtype=torch.float32, device=device) for a in client_angles
        ]
        mode = t["augment"]
        if mode == "auto":
            mode = "crop_flip" if channels == 3 else "none"
        # inputs in the model's float type (float32, or float64 under torch's default dtype)
        self.augmenter = Augmenter(mode, data.mean, data.std, size, device,
                                   dtype=self.global_.params.dtype)
        self._test_inputs: dict[tuple[int, float | None], PreparedTestSet] = {}
        self._eval_slice: dict[int, int | None] = {}  # by evaluation batch size

        algo = run["algorithm"]
        self.algorithm = implementation(algo["name"])(algo["params"], self.num_clients, t["momentum"])
        self.algorithm.setup(self.global_.params)
        references = getattr(self.algorithm, "needs_reference_models", False)
        if references:
            self.algorithm.attach(self.global_)
        self.lanes = [Lane(self.work, self.modules_work, torch.zeros_like(self.global_.params),
                           self._build_model(channels, size) if references else None)]
        self.server = ServerView(
            run=run, seed=self.seed, device=device, num_classes=self.num_classes,
            num_clients=self.num_clients, global_model=self.global_, work_model=self.work,
            augmenter=self.augmenter, autocast=self.autocast, channels_last=self.channels_last,
            x_train=self.x_train, y_train=self.y_train, x_test=self.x_test, y_test=self.y_test,
            domain_train=self.domain_train,
            client_indices=self.client_indices, client_angles=self.client_angles,
            logit_map=eval_logit_map(self.plugins, self.num_classes),
            new_model=lambda: self._build_model(channels, size),
            plugin_modules=None if self.modules_global is None else self.modules_global.module,
        )
        for plugin in self.plugins:
            plugin.setup(self.server)

        self.momentum_buffers: dict[int, torch.Tensor] = {}
        self.module_ranges = {
            name: (segs[0].offset, segs[-1].offset + segs[-1].numel)
            for name, segs in self.global_.param_groups_by_module().items()
        }
        self.stage_groups = stage_groups(self.global_)
        self.layer_groups = layer_groups(self.global_)
        head = next(s for s in self.global_.param_segments if s.name == "head.weight")
        self.head_weight = (head.offset, head.numel, head.shape)
        stacked, why = vectorise_decision(run, self.global_.module)
        self.stacked = StackedClients(self) if stacked else None
        if why:
            self.client_workers, self.execution = 1, why
        self.graphs = graph_mode(run, device, stacked)  # local steps as CUDA graphs, or eager
        with torch.random.fork_rng(devices=[]):  # as if there were one lane only
            self.lanes += [self._build_lane(channels, size, references)
                           for _ in range(self.client_workers - 1)]
        self.lane_pool = LanePool(self.lanes)

    # -- construction -------------------------------------------------------------------
    def _build_model(self, channels: int, size: int) -> FlatModel:
        m = self.run["model"]
        torch.manual_seed(derive_seed(self.seed, "init"))
        module = build_model(m["name"], self.model_classes, channels, size, m["width"], **m["options"])
        for plugin in self.plugins:
            plugin.prepare_model(module)
        module = module.to(self.device)
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        return FlatModel(module, channels_last=self.channels_last)

    def _build_lane(self, channels: int, size: int, reference: bool) -> Lane:
        work = self._build_model(channels, size)
        modules = self.modules_work
        return Lane(work, None if modules is None else FlatModel(copy.deepcopy(modules.module)),
                    torch.zeros_like(self.global_.params),
                    self._build_model(channels, size) if reference else None)

    # -- one client ---------------------------------------------------------------------
    def lr_at(self, round: int) -> float:
        """Learning rate of round `round` (1-based): lr · decay^(round−1)."""
        return self.training["lr"] * self.training["lr_decay"] ** (round - 1)

    def local_steps(self, n: int) -> int:
        t = self.training
        if t["local_steps"]:
            return int(t["local_steps"])
        return t["local_epochs"] * len(batch_slices(n, t["batch_size"]))

    def momentum_buffer(self, client: int, lane: Lane) -> torch.Tensor:
        """Client momentum: its own kept buffer, or the lane's, zeroed."""
        if self.training["keep_client_optimizer_state"]:
            if client not in self.momentum_buffers:
                self.momentum_buffers[client] = torch.zeros_like(self.global_.params)
            return self.momentum_buffers[client]
        return lane.fresh_buffer.zero_()

    def client_data(self, client: int, round: int) -> ClientData:
        """The client's training data of this round: its partition of the training set,
        unless a plug-in supplies other tensors (in plug-in order, each sees the previous)."""
        idx = self.client_indices[client]
        data = ClientData(
            x=self.x_train, y=self.y_train, index=idx,
            angles=None if self.client_angles is None else self.client_angles[client],
            domains=None if self.domain_train is None else self.domain_train[idx],
        )
        for plugin in self.plugins:
            data = plugin.client_data(client, round, data) or data
        return data

    def train_client(self, client: int, round: int, lr: float,
                     lane: Lane | None = None) -> tuple[ClientUpdate, torch.Tensor]:
        """Local training of one client (in `lane`, by default the first): its update and the
        summed step losses (`fedhet.engine.client`)."""
        return train_client(self, client, round, lr, lane or self.lanes[0])

    # -- one round ----------------------------------------------------------------------
    def clients_of_round(self, round: int) -> list[int]:
        per_round = min(self.training["clients_per_round"], self.num_clients)
        return sample_clients(self.seed, round, self.num_clients, per_round)

    def run_round(self, round: int) -> RoundResult:
        """Train the sampled clients, aggregate, and measure how far clients drifted."""
        began = time.perf_counter()
        lr = self.lr_at(round)
        clients = self.clients_of_round(round)
        for plugin in self.plugins:
            plugin.round_begin(round, clients)
        updates, losses, steps = [], torch.zeros((), device=self.device), 0
        if self.stacked is not None:
            trained = self.stacked.train(clients, round, lr)
        elif self.client_workers > 1:
            trained = self.lane_pool.train(
                clients, lambda k, lane: self.train_client(k, round, lr, lane),
                size=lambda k: self.client_indices[k].numel())
        else:
            trained = [self.train_client(k, round, lr) for k in clients]
        for update, loss_sum in trained:  # in client order, whatever order they finished in
            updates.append(update)
            losses += loss_sum
            steps += update.steps
        with torch.no_grad():
            params, buffers = self.algorithm.aggregate(
                round, self.global_.params, self.global_.buffers, updates
            )
            self.global_.load(params, buffers)
            if self.modules_global is not None:
                self.modules_global.load(weighted_average(updates, "module_params"),
                                         weighted_average(updates, "module_buffers"))
            for plugin in self.plugins:
                plugin.round_end(round, updates)
            diffs = torch.stack([u.params for u in updates]) - self.global_.params
            norms = diffs.pow(2).sum(1)
            drift, total = norms.mean(), norms.sqrt().mean()
            divergence = {name: diffs[:, a:b].norm(dim=1).mean()
                          for name, (a, b) in self.module_ranges.items()}
            sq = segment_sq_norms(self.global_, diffs)
            stages = group_divergence(sq, self.stage_groups)
            layers = group_divergence(sq, self.layer_groups)
            off, numel, shape = self.head_weight
            head_norms = {u.client: u.params[off:off + numel].view(shape).norm(dim=1)
                          for u in updates}
            finite = bool(torch.isfinite(losses) & torch.isfinite(self.global_.params).all())
        down, up = self.communication(updates)
        return RoundResult(round, lr, clients, losses / max(steps, 1), drift, total, divergence,
                           stages, layers, head_norms, updates, finite,
                           time.perf_counter() - began, down, up)

    def communication(self, updates: list[ClientUpdate]) -> tuple[int, int]:
        """Bytes sent to the round's clients and back: the model (parameters and buffers)
        each way, plus what the algorithm and the plug-ins declare they send."""
        model = _nbytes([self.global_.params, self.global_.buffers])
        if self.modules_global is not None:
            model += _nbytes([self.modules_global.params, self.modules_global.buffers])
        broadcast = model + _nbytes(self.extra_broadcast())
        up = 0
        for u in updates:
            up += _nbytes(self.algorithm.upload_tensors(u))
            up += _nbytes([t for t in (u.module_params, u.module_buffers) if t is not None])
            up += sum(_nbytes(p.upload_tensors(u)) for p in self.plugins)
        return broadcast * len(updates), up

    def extra_broadcast(self) -> list[torch.Tensor]:
        """What the algorithm and the plug-ins send each sampled client besides the model."""
        return [*self.algorithm.broadcast_tensors(),
                *(t for p in self.plugins for t in p.broadcast_tensors())]

    def communicated_params(self) -> int:
        """Parameters sent to each sampled client a round: the model's, the plug-ins' modules'
        and what the algorithm and the plug-ins send besides (FedBR Table 7's count)."""
        n = self.global_.params.numel() + sum(t.numel() for t in self.extra_broadcast())
        if self.modules_global is not None:
            n += self.modules_global.params.numel()
        return n

    # -- evaluation ---------------------------------------------------------------------
    def evaluate(self, batch_size: int = 512,
                 updates: list[ClientUpdate] | None = None) -> tuple[float, float, dict]:
        """Test accuracy and mean test loss of the global model, plus what else there is to
        score: accuracy per test domain (from the same passes), on the plug-ins' extra test
        sets, and, with `eval.client_models`, of each of the round's local client models."""
        logit_map = self.server.logit_map
        model = self.global_.module
        more: dict[str, Any] = {}
        if self.test_rotations:
            acc, loss, more["rotation_acc"] = self.evaluate_rotated(model, batch_size)
            per_domain = {}
        else:
            acc, loss, per_domain = self.evaluate_on(model, batch_size,
                                                     groups=self.domains_scored)
        if per_domain:
            names = self.domain_names or ()
            named = {(names[d] if d < len(names) else str(d)): v
                     for d, v in sorted(per_domain.items())}
            more["domain_acc"] = {name: a for name, (a, _) in named.items()}
            more["domain_loss"] = {name: ls for name, (_, ls) in named.items()}
            # the papers' "Average" over client domains: unweighted
            more["mean_domain_acc"] = sum(a for a, _ in named.values()) / len(named)
            more["mean_domain_loss"] = sum(ls for _, ls in named.values()) / len(named)
        sets = [s for p in self.plugins for s in p.test_sets()]
        if sets:
            more["test_sets"] = {
                s.name: evaluate_model(model, s.x, s.y, self.augmenter, batch_size,
                                       self.autocast, logit_map, angles=s.angles)[0]
                for s in sets
            }
        by_clients = updates and self.algorithm.scores_client_models
        if updates and (self.run["eval"]["client_models"] or by_clients):
            scores = {}
            for u in updates:
                self.work.load(u.params, u.buffers)
                scores[str(u.client)] = self.score(self.work.module, batch_size)
            more["client_acc"] = {k: a for k, (a, _) in scores.items()}
            # the local models' mean accuracy (FedBR Table 6)
            more["local_test_acc"] = sum(a for a, _ in scores.values()) / len(scores)
            if by_clients:  # Local-only training: its clients' own models are its score
                acc = more["local_test_acc"]
                loss = sum(l for _, l in scores.values()) / len(scores)
        return acc, loss, more

    def score(self, model: torch.nn.Module, batch_size: int) -> tuple[float, float]:
        """Test accuracy and mean loss of `model`: over the rotated copies of the test set with
        `eval.rotations`, else over the test set."""
        if self.test_rotations:
            return self.evaluate_rotated(model, batch_size)[:2]
        return self.evaluate_on(model, batch_size)[:2]

    def evaluate_rotated(self, model: torch.nn.Module,
                         batch_size: int) -> tuple[float, float, dict[str, float]]:
        """Accuracy and loss as the mean over the test set's copies rotated by each angle of
        `eval.rotations` (FedBR: "mean accuracy on all local test datasets"), and the accuracy
        per angle."""
        accs, losses = {}, []
        for angle in self.test_rotations:
            acc, loss, _ = self.evaluate_on(model, batch_size, angle)
            accs[f"{angle:g}"] = acc
            losses.append(loss)
        return sum(accs.values()) / len(accs), sum(losses) / len(losses), accs

    def evaluate_on(self, model: torch.nn.Module, batch_size: int, angle: float | None = None,
                    groups: torch.Tensor | None = None,
                    ) -> tuple[float, float, dict[int, tuple[float, float]]]:
        """`evaluate_inputs` of `model` on the test set (rotated by `angle` degrees), with the
        run's autocast, logit map, evaluation slices and the lanes' threads."""
        return evaluate_inputs(model, self.test_inputs(batch_size, angle), self.autocast,
                               self.server.logit_map, groups=groups,
                               slice_size=self.eval_slice(batch_size),
                               map_slices=self.slice_map())

    def test_inputs(self, batch_size: int, angle: float | None = None) -> PreparedTestSet:
        """The test set (rotated by `angle` degrees) prepared for evaluation batches of
        `batch_size`: prepared once for the run when all its copies (one per angle of
        `eval.rotations`) fit `KEEP_BYTES`, else on every pass."""
        key = (int(batch_size), angle)
        if key not in self._test_inputs:
            copies = 1 + len(self.test_rotations)  # the upright set decides `eval_slice`
            keep = copies * PreparedTestSet.float_bytes(self.x_test, self.augmenter) <= KEEP_BYTES
            angles = None if angle is None else torch.full(
                (self.y_test.numel(),), float(angle), device=self.device)
            self._test_inputs[key] = PreparedTestSet(self.x_test, self.y_test, self.augmenter,
                                                batch_size, angles, keep)
        return self._test_inputs[key]

    def eval_slice(self, batch_size: int) -> int | None:
        """The slice size of the evaluation forward passes: decided once per run by
        `exact_slice` on the model and the test set (None: whole batches)."""
        if batch_size not in self._eval_slice:
            self._eval_slice[batch_size] = exact_slice(
                self.global_.module, self.test_inputs(batch_size), self.autocast)
        return self._eval_slice[batch_size]

    def slice_map(self) -> SliceMap | None:
        """With concurrent clients (and no autocast, whose state is per thread), evaluation
        slices run on the lanes' threads; else None (one after another)."""
        if self.client_workers == 1 or not isinstance(self.autocast, nullcontext):
            return None
        return self.lane_pool.slice_map()

    def global_head_norms(self) -> torch.Tensor:
        off, numel, shape = self.head_weight
        return self.global_.params[off:off + numel].view(shape).norm(dim=1)

    def state_dict_of(self, update: ClientUpdate) -> dict[str, torch.Tensor]:
        """A client's model as a regular state dict (CPU), with the plug-ins' modules."""
        self.work.load(update.params, update.buffers)
        state = _cpu(self.work.module.state_dict())
        if self.modules_work is not None:
            self.modules_work.load(update.module_params, update.module_buffers)
            state.update(_cpu(self.modules_work.module.state_dict(), MODULES_PREFIX))
        return state

    def global_state_dict(self) -> dict[str, torch.Tensor]:
        """The global model as a regular state dict (CPU), with the plug-ins' modules under
        `plugin_modules.` (what the saved-run reader loads)."""
        state = _cpu(self.global_.module.state_dict())
        if self.modules_global is not None:
            state.update(_cpu(self.modules_global.module.state_dict(), MODULES_PREFIX))
        return state

    # -- checkpoints --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue training exactly where it stopped."""
        return {
            "global_state": self.global_.module.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "plugins": [p.state_dict() for p in self.plugins],
            "momentum_buffers": self.momentum_buffers,
            **({} if self.modules_global is None
               else {"plugin_modules": self.modules_global.module.state_dict()}),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.global_.module.load_state_dict(state["global_state"])  # copies into the flat views
        self.algorithm.load_state_dict(_to(state["algorithm"], self.device))
        for plugin, ps in zip(self.plugins, state["plugins"]):
            plugin.load_state_dict(_to(ps, self.device))
        self.momentum_buffers = {int(k): v.to(self.device)
                                 for k, v in state["momentum_buffers"].items()}
        if self.modules_global is not None:
            self.modules_global.module.load_state_dict(state["plugin_modules"])


def _cpu(state: dict[str, torch.Tensor], prefix: str = "") -> dict[str, torch.Tensor]:
    dot = f"{prefix}." if prefix else ""
    return {dot + k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _to(obj: Any, device: torch.device) -> Any:
    """Move every tensor inside nested dicts/lists to `device`."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to(v, device) for v in obj]
    return obj

