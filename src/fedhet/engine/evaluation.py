"""Test-set evaluation of a model on device-resident uint8 tensors.

Two things keep evaluation cheap without changing a single bit of its metrics:
- `PreparedTestSet` prepares a test set's batches (to float, rotation, normalisation) once per run
  and keeps them while they fit a memory budget, instead of on every evaluation and for every
  model scored (Local-only scores ten client models on ten rotated copies each round);
- on CPU the forward pass of an evaluation batch may run in slices of `CPU_SLICE` samples,
  where small slices stay in the cache (a 512-image batch of the demo ConvNet takes 1.8x as
  long in one piece). Whether a sample's logits then stay the same bit for bit depends on the
  model, the CPU and the thread count (a 1x1 convolution or a linear layer may reduce in
  another order for another batch size), so `exact_slice` checks it on the run's own batch
  shapes before slicing is used. Losses and accuracies are summed per evaluation batch, in
  the same order either way. With clients trained concurrently the slices run concurrently
  too (`map_slices`), each computed as it would be alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from fedhet.engine.augment import Augmenter

CPU_SLICE = 128
# How the slices of a batch are computed: (model, slices) → their logits, in order.
SliceMap = Callable[[nn.Module, Iterable[torch.Tensor]], Iterable[torch.Tensor]]
# Prepared float inputs a run may keep for its test sets (bytes, all sets together).
KEEP_BYTES = 512 * 2**20


class PreparedTestSet:
    """A test set as the model sees it: its evaluation batches normalised (and rotated by
    `angles` degrees, per sample), prepared once if `keep`, else on every pass."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, augmenter: Augmenter,
                 batch_size: int, angles: torch.Tensor | None = None, keep: bool = False) -> None:
        self.x, self.y, self.augmenter = x, y, augmenter
        self.batch_size, self.angles = int(batch_size), angles
        self._kept = list(self._prepare()) if keep else None

    @staticmethod
    def float_bytes(x: torch.Tensor, augmenter: Augmenter) -> int:
        """Memory that the prepared copy of `x` takes."""
        return x.numel() * torch.empty((), dtype=augmenter.dtype).element_size()

    def _prepare(self) -> Iterator[torch.Tensor]:
        bs = self.batch_size
        for start in range(0, self.y.numel(), bs):
            angles = None if self.angles is None else self.angles[start:start + bs]
            yield self.augmenter.test(self.x[start:start + bs], angles)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(inputs, labels) per evaluation batch."""
        batches = self._kept if self._kept is not None else self._prepare()
        bs = self.batch_size
        for i, xb in enumerate(batches):
            yield xb, self.y[i * bs:(i + 1) * bs]

    def edge_batches(self) -> list[torch.Tensor]:
        """The first and the last evaluation batch (the only two batch sizes there are)."""
        n, bs = self.y.numel(), self.batch_size
        starts = sorted({0, (n - 1) // bs * bs})
        if self._kept is not None:
            return [self._kept[start // bs] for start in starts]
        return [self.augmenter.test(self.x[s:s + bs],
                                    None if self.angles is None else self.angles[s:s + bs])
                for s in starts]


def forward_sliced(model: nn.Module, x: torch.Tensor, slice_size: int | None,
                   map_slices: SliceMap | None = None) -> torch.Tensor:
    """`model(x)`, computed in slices of `slice_size` samples (all at once with None), the
    slices by `map_slices` if given (e.g. on several threads), else one after another."""
    if slice_size is None or x.shape[0] <= slice_size:
        return model(x)
    parts = x.split(slice_size)
    return torch.cat(list(map_slices(model, parts) if map_slices else map(model, parts)))


@torch.no_grad()
def exact_slice(model: nn.Module, inputs: PreparedTestSet,
                autocast: AbstractContextManager | None = None) -> int | None:
    """`CPU_SLICE` if slicing the forward passes of `inputs` leaves every logit of `model`
    unchanged bit for bit (checked on both batch sizes of the set, in eval mode, with this
    CPU and thread count), else None; always None off the CPU."""
    if inputs.y.device.type != "cpu":
        return None
    model.eval()
    with autocast or nullcontext():
        for xb in inputs.edge_batches():
            if not torch.equal(model(xb), forward_sliced(model, xb, CPU_SLICE)):
                return None
    return CPU_SLICE


@torch.no_grad()
def evaluate_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor, augmenter: Augmenter,
                   batch_size: int = 512,
                   autocast: AbstractContextManager | None = None,
                   logit_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
                   angles: torch.Tensor | None = None,
                   ) -> tuple[float, float]:
    """Accuracy and mean cross-entropy over (x, y) (images rotated by `angles` degrees, if
    given), each batch in one forward pass; one device sync at the end."""
    inputs = PreparedTestSet(x, y, augmenter, batch_size, angles)
    acc, loss, _ = evaluate_inputs(model, inputs, autocast, logit_map)
    return acc, loss


@torch.no_grad()
def evaluate_inputs(model: nn.Module, inputs: PreparedTestSet,
                    autocast: AbstractContextManager | None = None,
                    logit_map: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    groups: torch.Tensor | None = None,
                    slice_size: int | None = None,
                    map_slices: SliceMap | None = None,
                    ) -> tuple[float, float, dict[int, tuple[float, float]]]:
    """(accuracy, mean loss, {group: (accuracy, mean loss)}) of `model` over prepared test
    inputs, the forward passes in slices of `slice_size` samples (see `exact_slice`), computed
    by `map_slices` if given."""
    model.eval()
    autocast = autocast or nullcontext()
    device = inputs.y.device
    correct = torch.zeros((), device=device, dtype=torch.long)
    loss = torch.zeros((), device=device)
    hits = [] if groups is not None else None
    losses = [] if groups is not None else None
    for xb, yb in inputs:
        with autocast:
            logits = forward_sliced(model, xb, slice_size, map_slices)
            if logit_map is not None:
                logits = logit_map(logits)
        loss += F.cross_entropy(logits.float(), yb, reduction="sum")
        right = logits.argmax(1) == yb
        correct += right.sum()
        if hits is not None:
            hits.append(right)
            # per sample, besides the sum above, so the overall loss keeps its summation order
            losses.append(F.cross_entropy(logits.float(), yb, reduction="none"))
    n = inputs.y.numel()
    per_group: dict[int, tuple[float, float]] = {}
    if hits is not None:
        right, each = torch.cat(hits), torch.cat(losses)
        ids = groups.to(right.device)
        for g in torch.unique(ids).tolist():
            mask = ids == g
            per_group[int(g)] = (right[mask].float().mean().item(), each[mask].mean().item())
    return correct.item() / n, loss.item() / n, per_group
