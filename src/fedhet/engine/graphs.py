"""A client's local step captured once as a CUDA graph and replayed (`runtime.cuda_graphs`).

At a batch of 128 an eager step on a GPU waits on the host, which launches its few hundred
kernels one by one; a CUDA graph launches them all at once. On CUDA the engine captures the local
step (`fedhet.engine.client.ClientStep`: the batch's gather, the augmentation, the method's
forward pass and loss terms, backward, the gradient corrections, the SGD step and `after_step`)
once per batch shape and replays it for every step of every client of every round. A client's
short last batch gets a graph of its own, up to `MAX_GRAPHS` shapes a run (beyond them, eager).

A graph replays fixed kernels on fixed addresses with the scalars of its capture. The flat
parameter, gradient and buffer vectors (`FlatModel`) keep their addresses; what changes from
step to step, or client to client, reaches the graph through tensors kept for the run (`Held`),
into which each new value is copied before the graph replays: the batch's rows, its augmentation
draws, angles and domains (drawn outside the graph from the client's generator, in the order an
eager step draws them, so both draw the same numbers), the learning rate
(`ClientContext.step_lr`), the momentum buffer, the loss sum, and what a method holds itself
(`ClientContext.hold`: SCAFFOLD's correction, VHL's virtual batch). Dropout draws from torch's
default CUDA generator, which `torch.cuda.graph` registers: each replay reads its seed and offset
and advances it as the eager kernels would.

Before a shape is captured its first `WARMUP` steps run eagerly on a side stream, as PyTorch's
recipe asks (lazy initialisation, cuDNN's algorithm search at that shape); they are real steps.
The graphs of a lane share one memory pool, which is safe as a step keeps no tensor it made. On
CUDA the step reads the learning rate from a device tensor, and autocasts without a cache, in
both modes, so an eager step and a replayed one run the same kernels and give the same numbers:
`runtime.cuda_graphs` is a speed setting, outside the run identity. On a CPU nothing is
captured, held or moved to a tensor: the step computes as it always did.

Whether a run captures its steps (`graph_mode`): on CUDA, `runtime.cuda_graphs` on, clients not
stacked, and every method of the run declared capturable (`Method.cuda_graph`); otherwise its
steps run eager and the reason goes to the log and to resolved.yaml's `provenance.execution`.
`fedhet.engine.graphcheck.CheckedGraph` stands in for the graph on a CPU and checks that a step
replays as a graph would.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from fedhet.catalog import method

WARMUP = 3  # eager steps of a batch shape, on a side stream, before its capture
MAX_GRAPHS = 8  # batch shapes captured per lane; a further shape's steps run eager


class Graph(Protocol):
    """What the engine asks of a captured step (`torch.cuda.CUDAGraph`, or a stand-in)."""

    def capture(self, step: Callable[[], None], pool: Any) -> None:
        """Record `step` (without running it), sharing memory `pool` (None: a new one)."""

    def replay(self) -> None:
        """Run what was recorded."""

    def pool(self) -> Any:
        """The memory pool the next capture may share."""


class CudaGraph:
    """`torch.cuda.CUDAGraph`, captured on torch's capture stream."""

    def __init__(self) -> None:
        self.graph = torch.cuda.CUDAGraph()
        self.replays = 0

    def capture(self, step: Callable[[], None], pool: Any) -> None:
        with torch.cuda.graph(self.graph, pool=pool):
            step()

    def replay(self) -> None:
        self.graph.replay()
        self.replays += 1

    def pool(self) -> Any:
        return self.graph.pool()


@contextmanager
def side_stream() -> Iterator[None]:
    """Work on a CUDA side stream that starts after, and finishes before, the current stream's
    (PyTorch's warm-up before a capture)."""
    current = torch.cuda.current_stream()
    stream = torch.cuda.Stream()
    stream.wait_stream(current)
    with torch.cuda.stream(stream):
        yield
    current.wait_stream(stream)


@dataclass(frozen=True)
class GraphMode:
    """How a federation's local steps run: captured as graphs or eager, the reason in words
    (the log and `provenance.execution`), whether the device is CUDA, and what makes a graph,
    where the warm-up runs, how many steps it takes and how many shapes are captured (a CPU
    test swaps in stand-ins). Graphs of several shapes share one memory pool: a step keeps no
    tensor it made."""

    capture: bool
    note: str
    cuda: bool
    new_graph: Callable[[], Graph] = CudaGraph
    warm_up: Callable[[], AbstractContextManager] = side_stream
    warmup_steps: int = WARMUP
    max_graphs: int = MAX_GRAPHS

    @property
    def as_captured(self) -> bool:
        """Whether the step runs as a graph captures it (its learning rate read from a device
        tensor, autocast without a cache): on CUDA, captured or not, so that an eager step runs
        the kernels of a replayed one; and wherever steps are captured."""
        return self.cuda or self.capture


def graph_blockers(run: dict[str, Any]) -> list[str]:
    """'name: reason' of each method of the run whose step cannot be a CUDA graph."""
    names = [run["algorithm"]["name"], *(p["name"] for p in run.get("plugins") or [])]
    blockers = ((name, method(name).graph_blocker) for name in names)
    return [f"{name}: {why}" for name, why in blockers if why]


def graph_mode(run: dict[str, Any], device: torch.device, stacked: bool) -> GraphMode:
    """Whether the run's local steps are captured as CUDA graphs, and why not if not."""
    cuda = device.type == "cuda"

    def eager(why: str) -> GraphMode:
        return GraphMode(False, f"local steps run eager: {why}", cuda)

    if not cuda:
        return eager(f"CUDA graphs are for CUDA devices, the device is {device}")
    if not run["runtime"]["cuda_graphs"]:
        return eager("runtime.cuda_graphs is false")
    if stacked:
        return eager("clients train stacked (training.vectorise_clients)")
    blockers = graph_blockers(run)
    if blockers:
        return eager("not capturable: " + "; ".join(blockers))
    return GraphMode(True, "local steps replay a CUDA graph captured once per batch shape", cuda)


class Held:
    """The tensors a captured step reads, kept for the run: one per name and shape (and dtype,
    device), into which each new value is copied."""

    def __init__(self) -> None:
        self.tensors: dict[tuple[Any, ...], torch.Tensor] = {}

    def __call__(self, name: str, value: torch.Tensor) -> torch.Tensor:
        key = (name, tuple(value.shape), value.dtype, value.device)
        kept = self.tensors.get(key)
        if kept is None:
            kept = self.tensors[key] = value.detach().clone()
        else:
            kept.copy_(value)
        return kept


def uncached(autocast: AbstractContextManager) -> AbstractContextManager:
    """`autocast` without its cache of cast weights, which a graph must not keep (the same
    numbers: the casts are recomputed)."""
    if isinstance(autocast, torch.autocast):
        return torch.autocast(autocast.device, dtype=autocast.fast_dtype, cache_enabled=False)
    return autocast


class StepGraphs:
    """One lane's local steps: replayed from a graph per batch shape, or run eagerly."""

    def __init__(self, mode: GraphMode) -> None:
        self.mode = mode
        self.held = Held()
        self.graphs: dict[Any, Graph] = {}
        self.warm: Counter[Any] = Counter()
        self.pool: Any = None
        self.bound: tuple[Any, ...] | None = None  # the client data the graphs read
        self.replaying = False  # this client's steps replay (its data are the bound ones)
        self.in_step = False
        self.step: Callable[[], None] = lambda: None

    def hold(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """`ClientContext.hold`: `value` copied into the run's tensor `name` when steps are
        captured, else `value` itself."""
        if self.in_step:
            raise RuntimeError(f"ctx.hold('{name}', ...) inside a local step: hold values in "
                               "client_begin or prepare_step, which run outside the step")
        return self.held(name, value) if self.mode.capture else value

    def lr(self, lr: float, like: torch.Tensor) -> float | torch.Tensor:
        """`ClientContext.step_lr`: on CUDA a 0-dim tensor of `like`'s type holding `lr`."""
        if not self.mode.as_captured:
            return lr
        return self.hold("lr", torch.full((), lr, dtype=like.dtype, device=like.device))

    def autocast(self, autocast: AbstractContextManager) -> AbstractContextManager:
        """The autocast context of the steps: without a cache as a graph captures them."""
        return uncached(autocast) if self.mode.as_captured else autocast

    def begin_client(self, x: torch.Tensor, y: torch.Tensor, normalized: bool) -> None:
        """A new client, training on `x`, `y`: its steps replay the graphs if those read these
        tensors (the run's training set, or what a plug-in supplies to every client alike);
        others run eager."""
        if not self.mode.capture:
            return
        binding = (x, y, normalized)
        if self.bound is None:
            self.bound = binding
        self.replaying = all(a is b for a, b in zip(binding, self.bound))
        if not self.replaying:
            warnings.warn("a client trains on other data tensors than those its lane's CUDA "
                          "graphs read: its steps run eager", stacklevel=2)

    def run(self, step: Callable[[], None], shape: Any) -> None:
        """One local step (`step` reads only held tensors when steps are captured): replayed
        from the graph of its batch `shape`, after that shape's warm-up steps and capture."""
        self.in_step, self.step = True, step
        try:
            self._run(shape)
        finally:
            self.in_step = False

    def _run(self, shape: Any) -> None:
        graph = self.graphs.get(shape)
        if not self.replaying or (graph is None and len(self.graphs) >= self.mode.max_graphs):
            self.step()
            return
        if graph is None and self.warm[shape] < self.mode.warmup_steps:
            self.warm[shape] += 1
            with self.mode.warm_up():
                self.step()
            return
        if graph is None:
            graph = self.graphs[shape] = self.mode.new_graph()
            graph.capture(self._current, self.pool)
            if self.pool is None:
                self.pool = graph.pool()
        graph.replay()

    def _current(self) -> None:
        """The step being run (what a graph records once; a stand-in may run it again)."""
        self.step()
