"""FedLGD's plug-ins. `distilled`: a client trains on its cached local virtual data (FedLGD's
initialisation, `fedhet.distill`), never on its partition of the raw training set. `fedlgd`:
FedLGD itself on top of it (schedule, distribution and gradient matching: shared/specs)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedhet.algorithms.base import ClientContext, ClientUpdate, StepOutput, hard_labels, task_loss
from fedhet.algorithms.losses import supcon_loss
from fedhet.distill.matching import (
    dm_step_loss,
    gm_distance,
    match,
    per_sample_norm,
    synthetic_gradient,
    update_target,
)
from fedhet.engine.server import ClientData, ServerView
from fedhet.plugins import PLUGINS, Plugin


@PLUGINS.register("distilled")
class Distilled(Plugin):
    """Replaces each client's data by its virtual images (already normalised, so the engine
    neither augments nor normalises them again: FedLGD trains without augmentation)."""

    name = "distilled"

    def setup(self, server: ServerView) -> None:
        from fedhet.distill.core import load_or_make_distilled
        from fedhet.distill.spec import settings_for_run

        run = server.run
        if run["training"]["centralized"]:
            raise ValueError("distilled: the virtual data is per client; a centralized run "
                             "has none (drop the plug-in or training.centralized)")
        settings = settings_for_run(run, self.hp)
        data = load_or_make_distilled(settings, run["dataset"]["root"],
                                      run["partition"]["root"], server.device)
        if len(data.x) != server.num_clients:
            raise ValueError(f"distilled: the artefact {data.path} holds {len(data.x)} clients, "
                             f"the run has {server.num_clients}")
        self.x = [x.to(server.device) for x in data.x]
        self.y = [y.to(server.device) for y in data.y]
        self.artefact = data

    def client_data(self, client: int, round: int, data: ClientData) -> ClientData:
        return ClientData(x=self.x[client], y=self.y[client], normalized=True)


def selected_rounds(every: int, times: int) -> set[int]:
    """τ: the rounds of global distillation, 1 + every·i for i = 0 … times (the code's
    `a_iter % every == 0 and a_iter < every·times + 1`, 1-based)."""
    return {1 + every * i for i in range(times + 1)}


def mmd_loss(a: Tensor, b: Tensor) -> Tensor:
    """Class-agnostic RBF MMD² between two feature sets: kernel Σ_{k=0..4} exp(−d²/(b₀·2^{k−2}))
    with b₀ the mean pairwise squared distance of the pooled set (detached); MMD² = mean K_aa
    + mean K_bb − mean K_ab − mean K_ba (FedLGD Fig. 3a's alternative regulariser)."""
    pooled = torch.cat([a, b])
    d2 = torch.cdist(pooled, pooled) ** 2
    n = pooled.shape[0]
    bandwidth = d2.detach().sum() / (n * n - n)
    kernel = sum(torch.exp(-d2 / (bandwidth * 2.0 ** (k - 2))) for k in range(5))
    m = a.shape[0]
    return (kernel[:m, :m].mean() + kernel[m:, m:].mean()
            - kernel[:m, m:].mean() - kernel[m:, :m].mean())


@PLUGINS.register("fedlgd")
class FedLGD(Distilled):
    """FedLGD: clients train on local virtual data refined by distribution matching with the
    global model at the selected rounds τ, and regularised towards the server's global
    virtual data, which the server distils by federated gradient matching (Eqs. 2-5)."""

    name = "fedlgd"

    def setup(self, server: ServerView) -> None:
        super().setup(server)
        hp = self.hp
        self.fed = server
        self.tau = selected_rounds(int(hp["distill_every"]), int(hp["distill_times"]))
        self.global_x = self.artefact.global_x.to(server.device)
        self.global_y = self.artefact.global_y.to(server.device)
        self.w_old: Tensor | None = None
        self.log: list[dict[str, Any]] = []

    # -- the server's schedule ---------------------------------------------------------------
    def round_begin(self, round: int, clients: list[int]) -> None:
        """Iterative distribution matching of the selected clients' virtual data with the
        global model's features (rounds of τ after the first), and w_old for GM."""
        fed = self.fed
        self.round = round
        self.w_old = fed.global_model.params.clone()
        if round not in self.tau or round == 1:
            return
        model = fed.global_model.module
        with torch.enable_grad():
            for k in clients:
                self.x[k], losses = self._match_local(model, k, round)
                self.log.append({"round": round, "client": k, "dm_loss": losses[-1]})

    def _match_local(self, model: torch.nn.Module, client: int,
                     round: int) -> tuple[Tensor, list[float]]:
        hp, fed = self.hp, self.fed
        idx = fed.client_indices[client]
        x_real = fed.augmenter.test(fed.x_train[idx])
        y_real = fed.y_train[idx]
        ipc, ratios = int(hp["ipc"]), dict(hp["dsa"])
        model.train()
        batched = per_sample_norm(model)

        def loss_of(images: Tensor, step: int) -> Tensor:
            return dm_step_loss(model.features, x_real, y_real, images, ipc,
                                int(hp["real_batch"]), ratios,
                                (fed.seed, "dm-real", round, client, step),
                                (fed.seed, "dsa", round, client, step), batched)

        return match(self.x[client], loss_of, int(hp["local_steps"]), float(hp["lr_img"]),
                     float(hp["img_momentum"]))

    def round_end(self, round: int, updates: list[ClientUpdate]) -> None:
        """Federated gradient matching (Eq. 5) of the global virtual data against the round's
        averaged update, at the rounds of τ."""
        if round not in self.tau:
            return
        fed = self.fed
        work = fed.work_model
        work.load(self.w_old, fed.global_model.buffers)
        module = work.module
        module.train()
        names = [name for name, _ in module.named_parameters()]
        old, new = {}, {}
        for seg in work.param_segments:
            old[seg.name] = self.w_old[seg.offset:seg.offset + seg.numel].view(seg.shape)
            new[seg.name] = fed.global_model.params[seg.offset:seg.offset + seg.numel].view(
                seg.shape)
        # D is invariant to each row's scale, so η_r (and the clients' step count) drop out
        target = update_target([old[n] for n in names], [new[n] for n in names], lr=1.0)
        with torch.enable_grad():
            self.global_x, losses = match(
                self.global_x,
                lambda s, step: gm_distance(synthetic_gradient(module, s, self.global_y), target),
                int(self.hp["server_steps"]), float(self.hp["lr_img"]),
                float(self.hp["img_momentum"]))
        self.log.append({"round": round, "gm_loss": losses[-1] if losses else None})

    # -- local training -------------------------------------------------------------------
    def client_data(self, client: int, round: int, data: ClientData) -> ClientData:
        x, y = self.x[client], self.y[client]
        if self.hp["ce_on_global"]:  # the code trains on D̃_k ∪ S̃
            x, y = torch.cat([x, self.global_x]), torch.cat([y, self.global_y])
        return ClientData(x=x, y=y, normalized=True)

    def forward(self, ctx: ClientContext, x: Tensor, y: Tensor) -> StepOutput | None:
        """CE on the batch, + λ · SupCon (or MMD) between the batch's features and all the
        global virtual data's (not detached), outside the rounds of τ (Eqs. 3-4)."""
        weight = float(self.hp["lambda"])
        if weight == 0 or (ctx.round in self.tau and not self.hp["reg_at_distill_rounds"]):
            return None
        n = x.shape[0]
        inputs = torch.cat([x, self.global_x])
        features = ctx.model.features(inputs)
        logits = ctx.model.head(features[:n])
        loss = task_loss(logits, y)
        if self.hp["reg"] == "supcon":
            z = F.normalize(features.flatten(1).float(), dim=1)
            reg = supcon_loss(z, torch.cat([hard_labels(y), self.global_y]),
                              float(self.hp["temperature"]))
        else:
            reg = mmd_loss(features[:n].flatten(1).float(), features[n:].flatten(1).float())
        return StepOutput(features[:n], logits, y, loss + weight * reg, inputs=x)

    # -- what is sent, kept and written ------------------------------------------------------
    def broadcast_tensors(self) -> list[Tensor]:
        return [self.global_x]

    def files(self) -> dict[str, Any]:
        return {"fedlgd_virtual.pt": {"x": [x.cpu() for x in self.x], "y": [y.cpu() for y in self.y],
                                      "global_x": self.global_x.cpu(),
                                      "global_y": self.global_y.cpu()},
                "fedlgd_log.json": self.log}

    def state_dict(self) -> dict[str, Any]:
        return {"x": [x.clone() for x in self.x], "global_x": self.global_x.clone(),
                "log": list(self.log)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.x = [x.to(self.fed.device) for x in state["x"]]
        self.global_x = state["global_x"].to(self.fed.device)
        self.log = list(state["log"])
