"""A stand-in for a CUDA graph that runs on any device and checks that a step would replay as a
captured graph does: `GraphMode(capture=True, ..., new_graph=CheckedGraph)`.

A CUDA graph records its step's kernels once and replays them with the scalars and on the
addresses of its capture. A step that reads a Python value that changes (the learning rate as a
float, the client's id), a tensor made anew for each client or step instead of one held for the
run (`ClientContext.hold`), or that branches on the round, the step or a tensor's value, replays
stale numbers, silently. `CheckedGraph` runs the step at each replay, like the eager step, and
compares what it dispatches with its first replay's record:

- the same operators in the same order (else a Python branch took another way);
- the same non-tensor arguments (else a value was baked in at capture: `alpha=lr`, a fill value);
- every tensor the step did not make itself in the same storage, offset, shape and strides (else
  it reads a tensor a graph would not see: another client's, a step's fresh one);
- no host synchronisation (`.item()`, `float(t)`, a boolean mask's data-dependent shape), which
  a capture refuses;
- no tensor it made kept once it returned (a hook stored a tensor: Python state a replay does
  not change, in memory that the graphs of other batch shapes share).

Any difference raises `GraphBreak`, naming the operator and what changed. Tensors made from
Python data inside the step (`torch.tensor(x)`) are compared by value.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

aten = torch.ops.aten
# operators that make the host wait for the device: a capture refuses them
SYNCS = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
         aten._unique2.default, aten.unique_dim.default, aten.unique_consecutive.default,
         aten.item.default}
FRESH = {aten.lift_fresh.default, aten.lift_fresh_copy.default}  # torch.tensor(python data)


class GraphBreak(AssertionError):
    """A step that a CUDA graph would not replay as it ran."""


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class _Record(TorchDispatchMode):
    """Every operator a step dispatches, with its non-tensor arguments and where the tensors it
    did not make live."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[Any, tuple[Any, ...]]] = []
        self.made: set[int] = set()  # storages of tensors the step made
        self.outputs: list[tuple[int, weakref.ref]] = []  # (operator, a tensor it made)

    def kept(self) -> list[int]:
        """The operators whose tensors outlive the step (after it returned)."""
        gc.collect(0)  # the young generation: what the step made and dropped in a cycle
        return sorted({i for i, ref in self.outputs if ref() is not None})

    def describe(self, func: Any, arg: Any) -> Any:
        if not isinstance(arg, torch.Tensor):
            return ("value", arg)
        if func in FRESH:
            return ("data", arg.dtype, arg.tolist())
        if _storage(arg) in self.made:
            return ("made", tuple(arg.shape), arg.dtype)
        return ("read", _storage(arg), arg.storage_offset(), tuple(arg.shape), arg.stride(),
                arg.dtype)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        if func in SYNCS:
            raise GraphBreak(f"{func} synchronises with the host (.item(), float() or bool() of "
                             "a tensor, a data-dependent shape): a CUDA graph cannot capture it")
        if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default) and any(
                isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in flat[1:]):
            raise GraphBreak(f"{func} with a boolean mask has a data-dependent shape: a CUDA "
                             "graph cannot capture it (use torch.where or a masked sum)")
        self.ops.append((func, tuple(self.describe(func, a) for a in flat)))
        out = func(*args, **kwargs)
        inputs = {_storage(a) for a in flat if isinstance(a, torch.Tensor)}
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        self.made |= {_storage(o) for o in outputs} - inputs
        self.outputs += [(len(self.ops) - 1, weakref.ref(o)) for o in outputs
                         if _storage(o) in self.made]
        return out


class CheckedGraph:
    """Stands in for `torch.cuda.CUDAGraph`: `capture` keeps the step (a capture does not run
    it), every `replay` runs it; the first replay records what it dispatches, and each later one
    raises `GraphBreak` where it dispatches anything else."""

    def __init__(self) -> None:
        self.step: Callable[[], None] | None = None
        self.record: list[tuple[Any, tuple[Any, ...]]] | None = None
        self.replays = 0

    def capture(self, step: Callable[[], None], pool: Any = None) -> None:
        self.step = step

    def pool(self) -> Any:
        return None

    def replay(self) -> None:
        assert self.step is not None, "replay before capture"
        with _Record() as now:
            self.step()
        self.replays += 1
        kept = now.kept()
        if kept:
            raise GraphBreak(f"replay {self.replays} kept the tensors that operators {kept} made "
                             "once it returned: Python state changed inside the step, which a "
                             "graph's replay does not change, in memory the graphs of other "
                             "batch shapes share")
        if self.record is None:
            self.record = now.ops
            return
        for i, ((func, args), (then_func, then_args)) in enumerate(zip(now.ops, self.record)):
            if func != then_func:
                raise GraphBreak(f"replay {self.replays}, operator {i}: {func} where the capture "
                                 f"ran {then_func} (a Python branch took another way)")
            for j, (a, b) in enumerate(zip(args, then_args)):
                if a != b:
                    raise GraphBreak(f"replay {self.replays}, operator {i} ({func}), argument "
                                     f"{j}: {_said(a)} where the capture had {_said(b)}; "
                                     f"{HINTS[b[0]]}")
        if len(now.ops) != len(self.record):
            raise GraphBreak(f"replay {self.replays} ran {len(now.ops)} operators, the capture "
                             f"{len(self.record)} (a Python branch took another way)")


HINTS = {
    "value": "a graph replays the values of its capture: what changes must come from a held "
             "tensor (ctx.hold, ctx.step_lr)",
    "data": "a graph replays the data of its capture: hold what changes (ctx.hold)",
    "made": "the step made another tensor than at its capture",
    "read": "a graph reads the tensors of its capture: copy what changes into a held tensor "
            "(ctx.hold) outside the step",
}


def _said(arg: tuple[Any, ...]) -> str:
    kind, *rest = arg
    if kind == "value":
        return f"the value {rest[0]!r}"
    if kind == "data":
        return f"a tensor made from the Python data {rest[1]!r}"
    if kind == "made":
        return f"a tensor the step made, of shape {list(rest[0])}"
    return f"the tensor at storage {rest[0]:#x}+{rest[1]} of shape {list(rest[2])}"
