"""How far the round's client models are from the new global model, per group of parameters.

The weight divergence of a group g of parameters is mean_k ‖w_k,g − w_g‖ over the round's
clients k (FedImpro Figs. 2b, 3 and 9; the code's `calc_client_divergence`). Groups: the whole
model, each top-level module, each split stage of the model (`FedModel.split_points`, then the
head) and each weight layer (every convolution and linear map, by module path).
"""

from __future__ import annotations

import torch
from torch import nn

from fedhet.engine.flat import FlatModel

WEIGHT_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Linear)


def layer_groups(flat: FlatModel) -> dict[str, list[int]]:
    """Weight layer path → indices of its parameter segments, in model order."""
    layers = {id(m): name for name, m in flat.module.named_modules()
              if isinstance(m, WEIGHT_LAYERS)}
    owner = {f"{layers[id(m)]}.{p}": layers[id(m)] for m in flat.module.modules()
             if id(m) in layers for p, _ in m.named_parameters(recurse=False)}
    groups: dict[str, list[int]] = {}
    for i, seg in enumerate(flat.param_segments):
        if seg.name in owner:
            groups.setdefault(owner[seg.name], []).append(i)
    return groups


def stage_groups(flat: FlatModel) -> dict[str, list[int]]:
    """Split stage name (then `head`) → indices of its parameter segments; empty for a model
    without split stages."""
    module = flat.module
    stages = getattr(module, "_stages", None)
    if not stages:
        return {}
    index = {seg.name: i for i, seg in enumerate(flat.param_segments)}
    named = {id(p): n for n, p in module.named_parameters()}
    groups = {name: [index[named[id(p)]] for p in stage.parameters()] for name, stage in stages}
    groups["head"] = [index[named[id(p)]] for p in module.head.parameters()]
    return {name: sorted(ix) for name, ix in groups.items() if ix}


def segment_sq_norms(flat: FlatModel, diffs: torch.Tensor) -> torch.Tensor:
    """‖w_k,s − w_s‖² for every client k (rows of `diffs`) and parameter segment s: `[S, K]`."""
    return torch.stack([diffs[:, s.offset:s.offset + s.numel].pow(2).sum(1)
                        for s in flat.param_segments])


def group_divergence(sq: torch.Tensor, groups: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """mean_k ‖w_k,g − w_g‖ for each group g of segments, from `segment_sq_norms`."""
    return {name: sq[ix].sum(0).sqrt().mean() for name, ix in groups.items()}
