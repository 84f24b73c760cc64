"""Model parameters, gradients and buffers as views into flat buffers.

Loading the global model into a client's working model is then one `copy_`, a returned
client model is one `clone`, and algorithms write their update rules as vector maths on
the whole model (SCAFFOLD's correction, FedProx's gradient, an SGD step) instead of
looping over parameter tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Segment:
    """Where one tensor lives in a flat buffer."""

    name: str
    offset: int
    numel: int
    shape: torch.Size


def _segments(named: list[tuple[str, torch.Tensor]]) -> list[Segment]:
    out, offset = [], 0
    for name, t in named:
        out.append(Segment(name, offset, t.numel(), t.shape))
        offset += t.numel()
    return out


def segment_view(flat: torch.Tensor, seg: Segment, channels_last: bool = False) -> torch.Tensor:
    """The tensor `seg` of a flat buffer (a view; in channels-last storage for conv weights
    when the buffer was laid out so)."""
    chunk = flat[seg.offset : seg.offset + seg.numel]
    if channels_last and len(seg.shape) == 4:
        o, i, h, w = seg.shape
        return chunk.view(o, h, w, i).permute(0, 3, 1, 2)
    return chunk.view(seg.shape)


class FlatModel:
    """Rebinds a module's parameters, their gradients and its float buffers to flat storage.

    `params`, `grads` and `buffers` are 1-D tensors; `module` keeps working as usual
    because every parameter is a view into `params` (and its `.grad` a view into `grads`,
    into which autograd accumulates in place). Integer buffers (BatchNorm's
    `num_batches_tracked`) stay outside: they only count steps and are not aggregated.
    """

    def __init__(self, module: nn.Module, channels_last: bool = False) -> None:
        self.module = module
        named_params = [(n, p) for n, p in module.named_parameters()]
        named_buffers = [(n, b) for n, b in module.named_buffers() if b.is_floating_point()]
        device = named_params[0][1].device
        dtype = named_params[0][1].dtype
        self.param_segments = _segments(named_params)
        self.buffer_segments = _segments(named_buffers)
        self.params = torch.zeros(sum(s.numel for s in self.param_segments), device=device, dtype=dtype)
        self.grads = torch.zeros_like(self.params)
        self.buffers = torch.zeros(
            sum(s.numel for s in self.buffer_segments), device=device, dtype=dtype
        )
        with torch.no_grad():
            for seg, (_, p) in zip(self.param_segments, named_params):
                view = segment_view(self.params, seg, channels_last)
                view.copy_(p)
                p.data = view
                p.grad = segment_view(self.grads, seg, channels_last)
            for seg, (name, b) in zip(self.buffer_segments, named_buffers):
                view = segment_view(self.buffers, seg, channels_last)
                view.copy_(b)
                owner, attr = _owner(module, name)
                owner._buffers[attr] = view

    @property
    def num_params(self) -> int:
        return self.params.numel()

    def zero_grad(self) -> None:
        self.grads.zero_()

    def load(self, params: torch.Tensor, buffers: torch.Tensor) -> None:
        """Overwrite this model's state with the given flat vectors."""
        self.params.copy_(params)
        self.buffers.copy_(buffers)

    def param_groups_by_module(self) -> dict[str, list[Segment]]:
        """Parameter segments grouped by top-level module name (conv1, layer1, ..., head)."""
        groups: dict[str, list[Segment]] = {}
        for seg in self.param_segments:
            groups.setdefault(seg.name.split(".")[0], []).append(seg)
        return groups


def _owner(module: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    *path, attr = dotted.split(".")
    for part in path:
        module = getattr(module, part)
    return module, attr
