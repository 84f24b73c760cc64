"""FedDF — ensemble distillation for model fusion (Lin et al., NeurIPS 2020) as a plug-in.

After the base algorithm aggregated a round, the averaged model (the student) is trained to
match the ensemble of the round's client models (the teachers) on unlabeled data:

    min_w  KL( softmax(mean_k f_k(x) / T) ‖ softmax(f_w(x) / T) ) · T²,   x ~ unlabeled data

with the teachers' logits averaged (FedDF's `avg_logits`), Adam (lr 1e-3, fresh each round),
`steps` steps of `batch_size` images. Unlabeled data is a registered dataset's training images
converted to the run's channels and size (FedDF uses CIFAR-100 for CIFAR-10; the offline demo
uses `digits100`), augmented like the training data and normalised with the natural data's
statistics, or, with `unlabeled: noise`, Gaussian noise images drawn directly in the
normalised input space (VHL Table 8's "FedDF + noise"; assumed N(0, 1) per pixel).

Early stopping, as FedDF: every `eval_every` steps the student is scored on `validation_size`
labelled validation images; distillation stops after `patience` steps without improvement and
the student is reset to its best-scoring state, the aggregated model before distillation
included, so a round's distillation never lowers validation accuracy. Deviation (assumed):
FedDF holds its validation split out of the clients' data; here the images are a seeded
sample of the natural training set that the clients also hold. Teachers run in eval mode, the
student in train mode (its BatchNorm statistics follow the unlabeled data, as in FedDF).

The client models are recorded in `client_end` (the update's flat parameters and buffers) and
run one after the other in the federation's working model, which is idle after aggregation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fedhet.algorithms.base import ClientUpdate
from fedhet.algorithms.losses import distillation_loss
from fedhet.engine.evaluation import evaluate_model
from fedhet.engine.seeding import derive_seed, generator
from fedhet.engine.server import ServerView
from fedhet.plugins import PLUGINS, Plugin


@PLUGINS.register("feddf")
class FedDF(Plugin):
    """Server-side ensemble distillation of the aggregated model from the client models."""

    name = "feddf"

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self.last_loss: float | None = None
        self.last_steps = 0  # distillation steps taken in the last round
        self.last_gain = 0.0  # validation accuracy gained in the last round
        self._teachers: list[Any] = []  # FlatModels the round's client models are loaded into

    def setup(self, server: ServerView) -> None:
        fed = self.fed = server
        hp = self.hp
        self.device = fed.device
        batch = hp["batch_size"]
        self.batch = int(fed.run["training"]["batch_size"] if batch is None else batch)
        self.channels, self.size = int(fed.x_train.shape[1]), int(fed.x_train.shape[-1])
        self._setup_validation(fed, int(hp["validation_size"]))
        if hp["unlabeled"] == "noise":
            self.x_unlabeled = None
            return
        from fedhet.data import load_dataset
        from fedhet.data.imageops import conform

        data = load_dataset(hp["unlabeled"], fed.run["dataset"]["root"],
                            dict(hp["unlabeled_options"] or {}))
        x = data.x_train
        if hp["unlabeled_size"] is not None and int(hp["unlabeled_size"]) < len(x):
            gen = torch.Generator()
            gen.manual_seed(derive_seed(int(hp["seed"]), "feddf", "subset"))
            pick = torch.randperm(len(x), generator=gen)[: int(hp["unlabeled_size"])].sort().values
            x = x[pick]
        self.x_unlabeled = conform(x.clone(), self.channels, self.size).to(self.device)
        self.unlabeled_source = data.stands_in_for or data.name

    def _setup_validation(self, fed: ServerView, size: int) -> None:
        """`size` labelled natural training images (seeded), for early stopping."""
        if size < 0 or int(self.hp["eval_every"]) < 1 or int(self.hp["patience"]) < 1:
            raise ValueError("feddf: validation_size must be >= 0, eval_every and patience >= 1")
        self.x_val = self.y_val = None
        if size == 0:
            return
        gen = torch.Generator()
        gen.manual_seed(derive_seed(int(self.hp["seed"]), "feddf", "validation"))
        n = len(fed.y_train)
        pick = torch.randperm(n, generator=gen)[: min(size, n)].sort().values.to(self.device)
        self.x_val, self.y_val = fed.x_train[pick], fed.y_train[pick]

    def _validation_accuracy(self, fed: ServerView) -> float:
        acc, _ = evaluate_model(fed.global_model.module, self.x_val, self.y_val, fed.augmenter,
                                fed.run["eval"]["batch_size"], fed.autocast,
                                logit_map=fed.logit_map)
        return acc

    def _batch(self, gen: torch.Generator) -> Tensor:
        fed = self.fed
        if self.x_unlabeled is None:
            return torch.randn(self.batch, self.channels, self.size, self.size,
                               device=self.device, generator=gen)
        take = torch.randint(len(self.x_unlabeled), (self.batch,), device=self.device,
                             generator=gen)
        if self.hp["augment"]:
            return fed.augmenter.train(self.x_unlabeled[take], gen)
        return fed.augmenter.test(self.x_unlabeled[take])

    def round_end(self, round: int, updates: list[ClientUpdate]) -> None:
        teachers = [(u.params, u.buffers) for u in updates]
        steps = int(self.hp["steps"])
        if not teachers or steps <= 0:
            return
        fed = self.fed
        with torch.enable_grad():  # the engine calls round_end under no_grad
            self._distill(fed, teachers, steps, round)

    def _teacher_models(self, fed: ServerView,
                        teachers: list[tuple[Tensor, Tensor]]) -> list[torch.nn.Module]:
        """The teachers as models in eval mode, loaded once per distillation (the models are
        built once and kept across rounds; building leaves torch's global generator as it was)."""
        cuda = [fed.device.index or 0] if fed.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            while len(self._teachers) < len(teachers):
                self._teachers.append(fed.new_model())
        for model, (p, b) in zip(self._teachers, teachers):
            model.load(p, b)
            model.module.eval()
        return [model.module for model in self._teachers[:len(teachers)]]

    def _distill(self, fed: ServerView, teachers: list[tuple[Tensor, Tensor]], steps: int,
                 round: int) -> None:
        student = fed.global_model
        models = self._teacher_models(fed, teachers)
        gen = generator(self.device, fed.seed, "feddf", round)
        torch.manual_seed(derive_seed(fed.seed, "feddf", round))
        params = list(student.module.parameters())
        # Adam updates the parameters in place, so they stay views of the flat vector.
        opt = torch.optim.Adam(params, lr=float(self.hp["lr"]))
        t = float(self.hp["temperature"])
        validate = self.x_val is not None
        every, patience = int(self.hp["eval_every"]), int(self.hp["patience"])
        if validate:
            best_acc = start_acc = self._validation_accuracy(fed)
            best = (student.params.clone(), student.buffers.clone())
            best_step = 0
        student.module.train()
        total = torch.zeros((), device=self.device)
        for step in range(1, steps + 1):
            x = self._batch(gen)
            if fed.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.no_grad(), fed.autocast:
                ensemble = torch.zeros((), device=self.device)
                for teacher in models:
                    ensemble = ensemble + teacher(x).float()
                ensemble = ensemble / len(teachers)
            student.zero_grad()
            with fed.autocast:
                loss = distillation_loss(student.module(x), ensemble, t)
            loss.backward()
            opt.step()
            total += loss.detach()
            if validate and (step % every == 0 or step == steps):
                acc = self._validation_accuracy(fed)
                student.module.train()
                if acc > best_acc:
                    best_acc, best_step = acc, step
                    best = (student.params.clone(), student.buffers.clone())
                elif step - best_step >= patience:
                    break
        student.zero_grad()
        if validate:
            student.load(*best)
            self.last_gain = best_acc - start_acc
        self.last_steps = step
        self.last_loss = float(total) / step
