"""Clients of a round trained concurrently on CPU (`runtime.client_workers` > 1).

Each client trains in a `Lane` of its own (working model, momentum buffer, spare model) on a
thread of its own, with the same number of torch threads as a sequential run; the ops and
their order within a client are the same, so every client's model, and the run's numbers, are
bit-identical to the sequential path. Only methods declared `concurrent_clients` run this way,
and a draw from torch's global generator during the round (which thread timing would reorder)
stops the run.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from fedhet.catalog import method
from fedhet.engine.evaluation import SliceMap
from fedhet.engine.flat import FlatModel

T = TypeVar("T")


@dataclass
class Lane:
    """What one client in training has to itself: the working model (and the plug-ins'
    modules), a momentum buffer for clients that keep none, a spare model for algorithms
    that run reference models (`ClientContext.reference`), and how its local steps run
    (`fedhet.engine.graphs.StepGraphs`: their CUDA graphs; made on first use)."""

    work: FlatModel
    modules: FlatModel | None
    fresh_buffer: torch.Tensor
    reference: FlatModel | None
    steps: Any = None


def methods_without(run: dict[str, Any], flag: str) -> list[str]:
    """The run's algorithm and plug-ins whose declaration does not set `flag` (a capability
    such as `concurrent_clients`)."""
    names = [run["algorithm"]["name"], *(p["name"] for p in run.get("plugins") or [])]
    return [name for name in names if not getattr(method(name), flag)]


def draws_dropout(model: torch.nn.Module) -> bool:
    """Whether the model has active dropout (which draws from torch's global generator)."""
    return any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0
               for m in model.modules())


def client_workers(run: dict[str, Any], device: torch.device, model: torch.nn.Module,
                   num_clients: int) -> tuple[int, str]:
    """How many clients train at once (`runtime.client_workers`, where the device, the methods
    and the model allow it), and the reason, in words, for the log."""
    asked = int(run["runtime"]["client_workers"])
    if asked == 1:
        return 1, "clients train one at a time"
    if device.type != "cpu":
        return 1, (f"clients train one at a time (client_workers applies to CPU; the device "
                   f"is {device})")
    unsafe = methods_without(run, "concurrent_clients")
    if unsafe:
        return 1, ("clients train one at a time: " + ", ".join(unsafe)
                   + " not declared safe to train clients concurrently")
    if draws_dropout(model):
        return 1, ("clients train one at a time: the model's dropout draws from torch's "
                   "global generator")
    n = min(asked, run["training"]["clients_per_round"], num_clients)
    return n, f"{n} clients train at once, {torch.get_num_threads()} torch thread(s) each"


class LanePool:
    """The lanes and one thread per lane (started on first use)."""

    def __init__(self, lanes: list[Lane]) -> None:
        self.lanes = lanes
        self._executor: ThreadPoolExecutor | None = None

    def _threads(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(len(self.lanes), thread_name_prefix="fedhet-client")
        return self._executor

    def train(self, clients: list[int], train: Callable[[int, Lane], T],
              size: Callable[[int], int]) -> list[T]:
        """`train(client, lane)` for every client on a free lane, the largest clients first
        (the round ends sooner); the results in client order. Stops the run if anything drew
        from torch's global generator meanwhile: those draws would land in an order set by
        thread timing."""
        free: queue.SimpleQueue[Lane] = queue.SimpleQueue()
        for lane in self.lanes:
            free.put(lane)

        def on_a_free_lane(client: int) -> T:
            lane = free.get()
            try:
                return train(client, lane)
            finally:
                free.put(lane)

        rng = torch.random.get_rng_state()
        largest_first = sorted(clients, key=lambda k: -size(k))
        futures = {k: self._threads().submit(on_a_free_lane, k) for k in largest_first}
        trained = [futures[k].result() for k in clients]
        if not torch.equal(rng, torch.random.get_rng_state()):
            raise RuntimeError(
                "a method drew from torch's global random generator while clients trained "
                "concurrently, so its numbers would depend on thread timing; set "
                "runtime.client_workers: 1, or draw from a generator seeded per client "
                "(fedhet.engine.seeding.generator) and keep the method's concurrent_clients"
            )
        return trained

    def slice_map(self) -> SliceMap:
        """Evaluation slices computed on the lanes' threads, each as it would be alone, in
        order (grad mode is per thread, so each thread turns it off itself)."""

        def forward(model: torch.nn.Module, part: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                return model(part)

        def map_slices(model: torch.nn.Module,
                       parts: Iterable[torch.Tensor]) -> Iterable[torch.Tensor]:
            parts = list(parts)
            return self._threads().map(forward, [model] * len(parts), parts)

        return map_slices
