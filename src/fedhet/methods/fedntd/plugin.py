"""FedNTD — not-true distillation (Lee et al., NeurIPS 2022) as a plug-in.

A local step adds to the task loss (FedNTD's L_NTD, weighted by β)

    β · τ² · KL( softmax(g̃/τ) ‖ softmax(l̃/τ) ),

the batch mean of the KL divergence between the received global model's and the local model's
predictions over the not-true classes: l̃ and g̃ are the local and the global logits with the
true class's column removed (C − 1 columns). The true class of a soft target (Mixup) is its
argmax. The global model is the server's copy, which holds the received w_g while clients
train; it runs in eval mode and without gradients on the step's inputs. Only the dataset's C
classes enter (VHL's virtual outputs are left out). With β = 0 nothing is computed.

FedBR's code differs (not reproduced): it averages the KL terms over all N·(C−1) entries, a
(C−1)× smaller term than the batch mean, and runs its copy of the global model in train mode.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedhet.algorithms.base import ClientContext, StackedStep, StepOutput, hard_labels
from fedhet.algorithms.losses import distillation_loss
from fedhet.engine.server import ServerView
from fedhet.plugins import PLUGINS, Plugin


def not_true(logits: Tensor, labels: Tensor) -> Tensor:
    """N×C logits → N×(C−1): each row without its true class's column, the others in order
    (a gather: a boolean mask would make the device report its size to the host)."""
    columns = torch.arange(logits.shape[1] - 1, device=logits.device).expand(len(logits), -1)
    return logits.gather(1, columns + (columns >= labels[:, None]).long())


def ntd_loss(local: Tensor, global_: Tensor, labels: Tensor, tau: float) -> Tensor:
    """τ² · KL(softmax(g̃/τ) ‖ softmax(l̃/τ)), batch mean (FedNTD's L_NTD): distillation
    from the global model over the not-true classes."""
    return distillation_loss(not_true(local, labels), not_true(global_, labels), tau)


@PLUGINS.register("fedntd")
class FedNTD(Plugin):
    """Distils the received global model's not-true-class predictions into local training."""

    name = "fedntd"

    def setup(self, server: ServerView) -> None:
        self.global_model = server.global_model.module
        self.num_classes = server.num_classes
        self.beta, self.tau = float(self.hp["beta"]), float(self.hp["tau"])

    def extra_loss(self, ctx: ClientContext, out: StepOutput) -> Tensor | None:
        if self.beta == 0:
            return None
        c = self.num_classes
        self.global_model.eval()
        with torch.no_grad():
            global_logits = self.global_model(out.inputs)[:, :c]
        labels = hard_labels(out.targets)
        return self.beta * ntd_loss(out.logits[:, :c], global_logits, labels, self.tau)

    def stacked_loss(self, step: StackedStep) -> Tensor | None:
        if self.beta == 0:
            return None
        c = self.num_classes
        global_logits = step.forward_with(step.global_params, step.global_buffers)[1]
        return self.beta * ntd_loss(step.logits[:, :c], global_logits[:, :c].detach(),
                                    step.labels, self.tau)
