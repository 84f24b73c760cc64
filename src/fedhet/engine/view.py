"""The federation as a client's local training sees it (`FederationView`): what
`fedhet.engine.client` and `fedhet.engine.vectorised` read of the `Federation` that runs them.

Declared here, below all three, so that the local step and the stacked clients name the type
of the federation that calls them without importing it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

import torch

from fedhet.algorithms.base import Algorithm
from fedhet.engine.augment import Augmenter
from fedhet.engine.flat import FlatModel
from fedhet.engine.graphs import GraphMode
from fedhet.engine.lanes import Lane
from fedhet.engine.server import ClientData
from fedhet.plugins import Plugin


class FederationView(Protocol):
    """A round's models, settings and per-client state, as local training uses them."""

    algorithm: Algorithm
    augmenter: Augmenter
    autocast: AbstractContextManager[Any]
    channels_last: bool
    client_workers: int
    device: torch.device
    global_: FlatModel
    graphs: GraphMode
    lanes: list[Lane]
    modules_global: FlatModel | None
    momentum_buffers: dict[int, torch.Tensor]
    plugins: list[Plugin]
    seed: int
    training: dict[str, Any]
    work: FlatModel

    def client_data(self, client: int, round: int) -> ClientData:
        """The client's training data of `round` (its partition, or what a plug-in supplies)."""
        ...

    def local_steps(self, n: int) -> int:
        """Local steps of a client holding `n` samples (training.local_steps, else its epochs'
        worth of batches)."""
        ...

    def momentum_buffer(self, client: int, lane: Lane) -> torch.Tensor:
        """The client's momentum buffer, or the lane's, zeroed."""
        ...
