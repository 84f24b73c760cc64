"""How a method declares itself (torch-free).

Every algorithm, plug-in and post-hoc step is declared once, in the `__init__.py` of its package
under `fedhet.methods` (beside its implementation), as a `Method`: its parameters with defaults and
meanings, its implementation version, whether it is implemented, the datasets and cached
artefacts it reads, how it scales the cost of a round and how its clients may train (at once,
stacked, their step as a CUDA graph). `fedhet.catalog` collects the
declarations; the run settings, the workflow's DAG and the tables read them from there, so no
common module names a method.

Run identity rule: a parameter (or run setting, `fedhet.config.SETTINGS`) declared with
`since=N > 0` was added after the first released run ids; it is left out of a run's hash while it
holds its default, so adding it changed no existing run id.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("algorithm", "plugin", "posthoc")
UNDECLARED = "undeclared"  # a method that does not say whether its step can be a CUDA graph


class ConfigError(ValueError):
    """A setting is missing, misspelled, of the wrong type or out of range."""


# A number as YAML 1.1 leaves it a string ("1e-3", "1E4": no dot, or no sign on the exponent).
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_KIND_OF_DEFAULT = {bool: "bool", int: "int", float: "number", str: "str", dict: "mapping",
                    list: "list", tuple: "list"}
_KIND_WORDS = {"bool": "true or false", "int": "an integer", "number": "a number",
               "str": "a string", "mapping": "a mapping", "list": "a list", "any": "any value"}


@dataclass(frozen=True)
class Param:
    """One setting: its default, what it means, the identity epoch it was added in, and what
    values it accepts (`check`).

    `kind` is one of int, number, bool, str, mapping, list, any; left out, it is the default's
    type (None as default: any). Bounds apply to numbers (and to the items of an int list).
    """

    default: Any
    meaning: str
    since: int = 0  # 0: part of every run id; N > 0: hashed only when not at its default
    kind: str | None = None
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None  # a str must match this regex in full
    items: str | None = None  # a list's item kind (int | number | str)
    nullable: bool | None = None  # None may be given; left out: only when the default is None

    def __post_init__(self) -> None:
        if self.kind is not None and self.kind not in _KIND_WORDS:
            raise ValueError(f"Param kind must be one of {sorted(_KIND_WORDS)}, got {self.kind!r}")

    @property
    def value_kind(self) -> str:
        if self.kind is not None:
            return self.kind
        return _KIND_OF_DEFAULT.get(type(self.default), "any")

    def allowed(self) -> str:
        """What this setting accepts, in words (for error messages and docs)."""
        kind = self.value_kind
        if self.choices:
            text = "one of " + ", ".join(self.choices)
        elif kind == "list" and self.items:
            text = f"a list of {_KIND_WORDS[self.items].split(' ', 1)[1]}s"
        else:
            text = _KIND_WORDS[kind]
        bounds = [f"{op} {_num(v)}" for op, v in ((">=", self.at_least), (">", self.above),
                                                  ("<=", self.at_most), ("<", self.below))
                  if v is not None]
        if bounds:
            text += (" (each " if kind == "list" else " ") + " and ".join(bounds)
            text += ")" if kind == "list" else ""
        if self.pattern:
            text += f" matching {self.pattern}"
        if self.nullable or (self.nullable is None and self.default is None):
            text += ", or null"
        return text

    def check(self, value: Any, where: str) -> Any:
        """`value` if this setting accepts it (a number written as text, e.g. "1e-3", becomes a
        number); else a ConfigError naming `where`, the value and what is allowed."""
        if value is None and (self.nullable or (self.nullable is None and self.default is None)):
            return None
        kind = self.value_kind
        ok, out = _coerce(value, kind)
        if ok and kind == "list" and self.items:
            pairs = [_coerce(v, self.items) for v in out]
            ok = all(good for good, _ in pairs)
            out = [v for _, v in pairs]
        if ok:
            numbers = out if kind == "list" else [out] if kind in ("int", "number") else []
            ok = all(self._in_bounds(v) for v in numbers)
        if ok and self.choices:
            ok = out in self.choices
        if ok and self.pattern:
            ok = re.fullmatch(self.pattern, out) is not None
        if not ok:
            raise ConfigError(f"setting '{where}' is {value!r}; allowed: {self.allowed()}")
        return out

    def _in_bounds(self, v: float) -> bool:
        return ((self.at_least is None or v >= self.at_least)
                and (self.above is None or v > self.above)
                and (self.at_most is None or v <= self.at_most)
                and (self.below is None or v < self.below))


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _coerce(value: Any, kind: str) -> tuple[bool, Any]:
    """(accepted, value as `kind`); ints stay ints where a number is asked for (run ids)."""
    if kind == "any":
        return True, value
    if kind == "bool":
        return isinstance(value, bool), value
    if kind in ("int", "number"):
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False, value
        if not math.isfinite(value):
            return False, value
        if kind == "int":
            if isinstance(value, float):
                return value.is_integer(), int(value) if value.is_integer() else value
        return True, value
    if kind == "str":
        return isinstance(value, str), value
    if kind == "mapping":
        return isinstance(value, Mapping), value
    if kind == "list":
        return isinstance(value, (list, tuple)), list(value) if isinstance(value, tuple) else value
    raise ValueError(f"unknown kind {kind!r}")


def resolve_params(params: Mapping[str, Param], given: Mapping[str, Any] | None,
                   where: str) -> dict[str, Any]:
    """Declared defaults with `given` checked and filled in; unknown keys are errors."""
    if given is None:
        given = {}
    if not isinstance(given, Mapping):
        raise ConfigError(f"setting '{where.rstrip('.')}' must be a mapping, got {given!r}")
    out = {}
    for key, value in given.items():
        if key not in params:
            valid = ", ".join(sorted(params)) or "none"
            raise ConfigError(f"unknown setting '{where}{key}'; valid keys here: {valid}")
        out[key] = params[key].check(value, f"{where}{key}")
    return {key: out[key] if key in out else copy.deepcopy(p.default)
            for key, p in params.items()}


@dataclass(frozen=True)
class DatasetParam:
    """A parameter naming a registered dataset (with its options), mapped by each scale like
    the run's own dataset (e.g. FedDF's unlabeled images)."""

    name: str  # dotted path of the dataset name inside the params
    options: str  # dotted path of its options inside the params


@dataclass(frozen=True)
class Artefact:
    """One cached file a run needs before it trains, built once by the workflow's artefact rule
    of its family and shared by every run that asks for the same key."""

    family: str
    key: str
    settings: dict[str, Any]  # what the family's build command receives
    sources: tuple[Mapping[str, Any], ...] = ()  # datasets ({name, options}) the build reads


@dataclass(frozen=True)
class BuildPlaces:
    """Where an artefact's build reads datasets and partitions and writes the artefact
    (`<root>/<family>/<key>.pt`), and the device it computes on."""

    root: str = "resources/datasets"
    partitions: str = "resources/partitions"
    device: str = "cpu"


@dataclass(frozen=True)
class ArtefactFamily:
    """A kind of cached artefact, written to `resources/datasets/<name>/<key>.pt` (+ `.sha256`).

    `command` is the shell command that builds one, with `{settings}` standing for the
    artefact's settings as JSON; the artefacts' directory is `resources/datasets`. Where it is
    a `fedhet` subcommand, `build` names the function that subcommand runs ("module:function",
    called with the settings and the `BuildPlaces`, returning the file it built or found and a
    line saying what it holds): every such family's subcommand is the same command
    (`fedhet.cli.artefacts`), which prints the file's path."""

    name: str
    command: str
    summary: str
    runtime_factor: float = 2.0  # minutes, in units of the scale's `runtime_base`
    build: str | None = None

    def shell(self, settings: str) -> str:
        """The command that builds the artefact of these settings (JSON), quoted for a shell."""
        import shlex

        return self.command.format(settings=shlex.quote(settings))

    @property
    def subcommand(self) -> str | None:
        """The `fedhet` subcommand of `command` (`virtual-data`), None for another program."""
        words = self.command.split()
        return words[1] if len(words) > 1 and words[0] == "fedhet" else None


RunFn = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]  # (resolved run, params) → …


@dataclass(frozen=True)
class Method:
    """The declaration of one method (see the module docstring)."""

    name: str
    kind: str  # "algorithm" | "plugin" | "posthoc"
    summary: str  # one line: what it is, with its paper
    params: dict[str, Param] = field(default_factory=dict)
    version: int = 1  # bump when a fix changes what it computes: its runs get new ids
    implemented: bool = True  # False: its table cells print "pending"
    module: str | None = None  # module whose import registers the implementation
    dataset_params: tuple[DatasetParam, ...] = ()
    # datasets the training job reads besides its own ({name, options} each)
    reads_datasets: RunFn | None = None
    # cached artefacts the training job reads (`Artefact`s), built before it by the workflow
    artefacts: RunFn | None = None
    artefact_families: tuple[ArtefactFamily, ...] = ()
    # multiplier of the passes over the clients' data per round (VHL Table 10's cost)
    cost_factor: RunFn | None = None
    # True: its client hooks may run for several clients at once (`runtime.client_workers`):
    # they keep a client's state in the ClientContext or in per-client entries, only read
    # shared state, and draw random numbers from generators seeded per client
    concurrent_clients: bool = False
    # True: its client hooks act on the flat vectors of ClientContext alone (params, grads,
    # global_params, steps, per-client state; never the model, a forward pass or a loss), so a
    # round's clients may train as rows of one stacked model (`training.vectorise_clients`)
    vectorised_clients: bool = False
    # True: its hooks of a local step may be captured in a CUDA graph and replayed
    # (`runtime.cuda_graphs`): no host sync (.item(), float() or bool() of a tensor), no shape or
    # Python branch that depends on tensor values, the round, the client or the step, and what
    # changes between steps or clients read from tensors held with `ctx.hold` (the contract:
    # docs/ARCHITECTURE.md). Otherwise, why not, in words: a run using it trains eagerly, saying
    # so. Left out: not captured, "undeclared".
    cuda_graph: bool | str = UNDECLARED

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"method '{self.name}': kind must be one of {KINDS}, got {self.kind!r}")
        if self.implemented and self.module is None:
            raise ValueError(f"method '{self.name}': implemented methods name their `module`")
        if self.cuda_graph is not True and not (isinstance(self.cuda_graph, str)
                                                and self.cuda_graph.strip()):
            raise ValueError(f"method '{self.name}': cuda_graph is True or the reason, in words, "
                             f"why its step cannot be captured; got {self.cuda_graph!r}")

    @property
    def graph_blocker(self) -> str | None:
        """Why a local step with this method cannot be a CUDA graph (None: it can)."""
        return None if self.cuda_graph is True else str(self.cuda_graph)

    def defaults(self) -> dict[str, Any]:
        """Parameter name → default (a fresh copy each call)."""
        return {name: copy.deepcopy(p.default) for name, p in self.params.items()}


def late_defaults(params: Mapping[str, Param]) -> dict[str, Any]:
    """Parameters added after the first run ids (`since > 0`) → their defaults."""
    return {name: p.default for name, p in params.items() if p.since > 0}
