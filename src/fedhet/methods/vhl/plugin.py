"""VHL — Virtual Homogeneity Learning (Tang et al., ICML 2022) as a plug-in.

Every client trains on its natural batch plus a batch of a shared virtual dataset (images
from an untrained StyleGAN-v2, one Gaussian latent mean per class; see `fedhet.virtual`):

    loss = CE(f(x), y) + w_v · CE(f(x_v), k + C)
           + w_cal · SupCon([ẑ(x); ẑ(x_v).detach()], [y; k])      (feature calibration)
           + w_vs · SupCon(ẑ(x_v), k)                              (virtual features alone)

with ẑ the L2-normalised feature at `calibration_layer` (conv activations are average-pooled),
SupCon the supervised contrastive loss of Khosla et al. (τ = 0.07, contrast mode "all"), natural
class k and virtual class k positives of each other. Natural and virtual batches go through the
model in one forward pass (BatchNorm sees both, as the authors' code). The classifier has
C + C_v outputs; the engine builds it so via `VHL.extra_classes` and maps test logits through
`VHL.eval_logits`.

Variants (`variant`, VHL Table 6): `vhl`; `naive` (virtual data, no calibration, no virtual
SupCon); `vfa` (no virtual images: `virtual_batch_size` features a step drawn from per-class
Gaussians at the calibration layer, calibration only, C outputs); `vftl` (before round 1 the
server model is trained on the virtual data alone for `vftl_steps` SGD steps at the training
lr, momentum and weight decay; then plain training of the base algorithm, C + C_v outputs).

Which details come from the paper, which from the authors' code, and which are assumed is said
next to each parameter in its declaration (`fedhet.methods.vhl`).

With `virtual_classes: 0`, `virtual_batch_size: 0` and `calibration_weight: 0` the plug-in does
nothing at all (no extra outputs, no extra random draws), so the run equals its base run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from fedhet import declare
from fedhet.algorithms.base import ClientContext, StepOutput, hard_labels, task_loss
from fedhet.algorithms.losses import supcon_loss
from fedhet.catalog import method
from fedhet.engine.augment import Augmenter
from fedhet.engine.seeding import derive_seed, generator
from fedhet.engine.server import ServerView
from fedhet.engine.sgd import sgd_step
from fedhet.plugins import PLUGINS, Plugin

CODE_MEAN, CODE_STD = 0.5, 0.25  # the authors' Normalize for virtual images


@dataclass
class VirtualStream:
    """One client's draws of virtual data in a round (kept in its context, so clients that
    train at once draw independently): its generator and its place in the current pass."""

    gen: torch.Generator
    order: Tensor | None = None
    cursor: int = 0


def calibration_loss(natural: Tensor, virtual: Tensor, y: Tensor, y_virtual: Tensor,
                     temperature: float = 0.07) -> Tensor:
    """SupCon on L2-normalised [natural; virtual] features with the virtual ones detached:
    natural features of class k are pulled towards virtual features of class k, and no
    gradient reaches the virtual features (VHL App. C.2)."""
    z = torch.cat([F.normalize(natural.float(), dim=1),
                   F.normalize(virtual.detach().float(), dim=1)])
    return supcon_loss(z, torch.cat([y, y_virtual]), temperature)


def pooled(h: Tensor) -> Tensor:
    """A split-point activation as `[B, D]`: conv maps average-pooled, others flattened."""
    return h.mean(dim=(2, 3)) if h.dim() == 4 else h.flatten(1)


def resolve_params(params: dict[str, Any]) -> dict[str, Any]:
    """The plug-in's declared defaults with `params` checked and filled in."""
    return declare.resolve_params(method("vhl").params, params, "plugins(vhl).params.")


def num_virtual_classes(num_classes: int, hp: dict[str, Any]) -> int:
    """C_v: `virtual_classes`, or C when it is None (the paper's choice)."""
    cv = hp["virtual_classes"]
    return int(num_classes if cv is None else cv)


@PLUGINS.register("vhl")
class VHL(Plugin):
    """Virtual data in the batch, C + C_v outputs, feature calibration by SupCon."""

    name = "vhl"

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(params)
        self.hp = resolve_params(self.hp)
        self.mode = "off"  # off | images | features

    # -- hooks the engine calls before and after training ----------------------------------
    @classmethod
    def extra_classes(cls, num_classes: int, params: dict[str, Any]) -> int:
        """Outputs the classifier needs beyond the C natural classes: C_v (0 for VFA)."""
        hp = resolve_params(params)
        return 0 if hp["variant"] == "vfa" else num_virtual_classes(num_classes, hp)

    def eval_logits(self, logits: Tensor, num_classes: int) -> Tensor:
        """Test logits → logits whose argmax is the prediction on natural classes.

        `natural`: only the C natural logits compete. `all` (the authors' code): all C + C_v
        compete, so predicting a virtual class counts as an error.
        """
        if self.hp["eval_protocol"] == "natural":
            return logits[:, :num_classes]
        return logits

    # -- setup -------------------------------------------------------------------------------
    def setup(self, server: ServerView) -> None:
        hp = self.hp
        fed = self.fed = server
        self.num_classes = fed.num_classes
        self.cv = num_virtual_classes(fed.num_classes, hp)
        self.device = fed.device
        self.seed = fed.seed
        batch = hp["virtual_batch_size"]
        self.batch = int(fed.run["training"]["batch_size"] if batch is None else batch)
        self.layer = hp["calibration_layer"]
        variant = hp["variant"]
        self.w_cal = 0.0 if variant == "naive" else float(hp["calibration_weight"])
        self.w_vsup = 0.0 if variant == "naive" else float(hp["virtual_supcon_weight"])
        self.w_vce = float(hp["virtual_ce_weight"])
        module = fed.global_model.module
        self.layer = module.split_point(self.layer)  # a name, or a 1-based position
        expected = fed.num_classes + self.extra_classes(fed.num_classes, hp)
        if module.num_classes != expected:
            raise ValueError(
                f"vhl: the model has {module.num_classes} outputs but needs {expected} "
                f"(C = {fed.num_classes} natural + virtual classes); the engine must build "
                "models with num_classes + Plugin.extra_classes(num_classes, params) outputs")
        if self.cv == 0 or self.batch == 0:
            if self.cv == 0 and self.batch > 0:
                raise ValueError("vhl: virtual_batch_size > 0 needs virtual_classes > 0")
            if self.w_cal and variant in ("vhl", "vfa"):
                raise ValueError("vhl: calibration needs virtual classes and a virtual batch "
                                 "(virtual_classes > 0, virtual_batch_size > 0)")
            return  # nothing to do: the run is the base algorithm's run
        if variant == "vfa":
            if self.w_cal:
                self._setup_features(module)
                self.mode = "features"
            return
        if variant == "vftl":
            if int(hp["vftl_steps"]) > 0:
                self._setup_images(fed)
                self._pretrain_server(fed, int(hp["vftl_steps"]))
            return
        self._setup_images(fed)
        self.mode = "images"

    def _setup_images(self, fed: ServerView) -> None:
        from fedhet.virtual import load_or_make_virtual, plugin_settings

        hp = self.hp
        channels, size = int(fed.x_train.shape[1]), int(fed.x_train.shape[-1])
        settings = plugin_settings(hp, fed.num_classes, channels, size)
        data = load_or_make_virtual(settings, fed.run["dataset"]["root"])
        self.virtual = data
        self.xv = data.x.to(self.device)
        self.yv = data.y.to(self.device)
        if hp["virtual_normalization"] == "code":
            mean, std = (CODE_MEAN,) * channels, (CODE_STD,) * channels
        else:
            mean = tuple(fed.augmenter.mean.flatten().tolist())
            std = tuple(fed.augmenter.std.flatten().tolist())
        mode = "crop_flip" if hp["virtual_augment"] else "none"  # the code's virtual loader
        self.augmenter = Augmenter(mode, mean, std, size, self.device)

    def _setup_features(self, module: torch.nn.Module) -> None:
        dim = module.split_shapes[self.layer][0]
        gen = torch.Generator()
        gen.manual_seed(derive_seed(int(self.hp["virtual_seed"]), "vfa", "means"))
        means = torch.randn(self.cv, dim, generator=gen) * float(self.hp["vfa_mean_std"])
        self.feature_means = means.to(self.device)

    # -- local training ----------------------------------------------------------------------
    def client_begin(self, ctx: ClientContext) -> None:
        if self.mode == "off":
            return
        ctx.extra["vhl"] = VirtualStream(generator(self.device, self.seed, "vhl", ctx.round,
                                                   ctx.client))

    def prepare_step(self, ctx: ClientContext) -> None:
        """The step's virtual batch, drawn from the client's stream outside the step and held
        (a step replayed as a CUDA graph reads it): the images' positions and augmentation
        draws, or, for VFA, the classes and noise of its virtual features."""
        if self.mode == "off":
            return
        stream = ctx.extra["vhl"]
        if self.mode == "images":
            take = self.virtual_positions(stream)
            draws = self.augmenter.draw(len(take), stream.gen)
            ctx.extra["vhl.batch"] = ctx.hold("vhl.take", take), draws.held(ctx.hold, "vhl.draws")
            return
        dim = self.feature_means.shape[1]
        labels = torch.randint(self.cv, (self.batch,), device=self.device, generator=stream.gen)
        noise = torch.randn(self.batch, dim, device=self.device, generator=stream.gen)
        ctx.extra["vhl.features"] = ctx.hold("vhl.labels", labels), ctx.hold("vhl.noise", noise)

    def virtual_positions(self, stream: VirtualStream) -> Tensor:
        """The positions of the next virtual batch of `stream`: a fresh permutation of the
        virtual dataset per pass (the last incomplete batch of a pass is dropped)."""
        n = self.yv.numel()
        if self.batch > n:
            return torch.randint(n, (self.batch,), device=self.device, generator=stream.gen)
        if stream.order is None or stream.cursor + self.batch > n:
            stream.order = torch.randperm(n, device=self.device, generator=stream.gen)
            stream.cursor = 0
        take = stream.order[stream.cursor:stream.cursor + self.batch]
        stream.cursor += self.batch
        return take

    def virtual_batch(self, stream: VirtualStream) -> tuple[Tensor, Tensor]:
        """The next virtual batch of `stream`, augmented and normalised (VFTL's pre-training)."""
        take = self.virtual_positions(stream)
        return self.augmenter.train(self.xv[take], stream.gen), self.yv[take]

    def _run(self, model: torch.nn.Module, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Activation at the calibration layer, penultimate feature and logits, one pass."""
        if self.layer == "penultimate":
            h = model.features(x)
            return h, h, model.head(h)
        captured: list[Tensor] = []
        handle = model.head.register_forward_pre_hook(lambda _, args: captured.append(args[0]))
        try:
            h = model.forward_to(x, self.layer)
            logits = model.forward_from(h, self.layer)
        finally:
            handle.remove()
        return h, captured[0], logits

    def forward(self, ctx: ClientContext, x: Tensor, y: Tensor) -> StepOutput | None:
        if self.mode == "off":
            return None
        if self.mode == "features":
            return self._forward_vfa(ctx, x, y)
        take, draws = ctx.extra["vhl.batch"]
        xv, yv = self.augmenter.apply(self.xv[take], draws), self.yv[take]
        n = x.shape[0]
        inputs = torch.cat([x, xv])
        if self.fed.channels_last:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        h, feats, logits = self._run(ctx.model, inputs)
        loss = task_loss(logits[:n], y)  # y: labels, or soft targets of a batch hook
        y = hard_labels(y)
        targets = torch.cat([y, yv + self.num_classes])
        if self.w_vce:
            loss = loss + self.w_vce * F.cross_entropy(logits[n:], targets[n:])
        if self.w_cal or self.w_vsup:
            z = pooled(h)
            tau = self.hp["temperature"]
            if self.w_cal:
                loss = loss + self.w_cal * calibration_loss(z[:n], z[n:], y, yv, tau)
            if self.w_vsup:
                zv = F.normalize(z[n:].float(), dim=1)
                loss = loss + self.w_vsup * supcon_loss(zv, yv, tau)
        return StepOutput(feats, logits, targets, loss, inputs=inputs)

    def _forward_vfa(self, ctx: ClientContext, x: Tensor, y: Tensor) -> StepOutput:
        h, feats, logits = self._run(ctx.model, x)
        loss = task_loss(logits, y)
        y = hard_labels(y)
        labels, noise = ctx.extra["vhl.features"]
        virtual = self.feature_means[labels] + float(self.hp["vfa_std"]) * noise
        loss = loss + self.w_cal * calibration_loss(pooled(h), virtual, y, labels,
                                                    self.hp["temperature"])
        return StepOutput(feats, logits, y, loss, inputs=x)

    # -- VFTL: pre-train the server model on virtual data ------------------------------------
    def _pretrain_server(self, fed: ServerView, steps: int) -> None:
        """`steps` SGD steps (training lr, momentum, weight decay) of the global model on the
        virtual data alone (labels k + C), before round 1."""
        t = fed.run["training"]
        lr, momentum, wd = t["lr"], t["momentum"], t["weight_decay"]
        flat = fed.global_model
        flat.module.train()
        stream = VirtualStream(generator(self.device, self.seed, "vftl"))
        torch.manual_seed(derive_seed(self.seed, "vftl"))
        buf = torch.zeros_like(flat.params)
        for _ in range(steps):
            xv, yv = self.virtual_batch(stream)
            if fed.channels_last:
                xv = xv.contiguous(memory_format=torch.channels_last)
            flat.zero_grad()
            with fed.autocast:
                loss = F.cross_entropy(flat.module(xv), yv + self.num_classes)
            loss.backward()
            sgd_step(flat.params, flat.grads, lr, momentum, wd, buf)
        flat.zero_grad()
        fed.work_model.load(flat.params, flat.buffers)
        self.pretrain_loss = float(loss.detach())
