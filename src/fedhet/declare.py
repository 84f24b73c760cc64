"""How a method declares itself (torch-free).

Every algorithm, plug-in and post-hoc step is declared once, in the `__init__.py` of its package
under `fedhet.methods` (beside its implementation), as a `Method`: its parameters with defaults and
meanings, its implementation version, whether it is implemented, the datasets and cached
artefacts it reads and how it scales the cost of a round. `fedhet.catalog` collects the
declarations; the run settings, the workflow's DAG and the tables read them from there, so no
common module names a method.

Run identity rule: a parameter (or run setting, `fedhet.config.SETTINGS`) declared with
`since=N > 0` was added after the first released run ids; it is left out of a run's hash while it
holds its default, so adding it changed no existing run id.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("algorithm", "plugin", "posthoc")


@dataclass(frozen=True)
class Param:
    """One setting: its default, what it means, and the identity epoch it was added in."""

    default: Any
    meaning: str
    since: int = 0  # 0: part of every run id; N > 0: hashed only when not at its default


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
class ArtefactFamily:
    """A kind of cached artefact, written to `resources/datasets/<name>/<key>.pt` (+ `.sha256`).

    `command` is the shell command that builds one, with `{params.settings:q}` standing for the
    artefact's settings as JSON; the artefacts' directory is `resources/datasets`."""

    name: str
    command: str
    summary: str
    runtime_factor: float = 2.0  # minutes, in units of the scale's `runtime_base`


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

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"method '{self.name}': kind must be one of {KINDS}, got {self.kind!r}")
        if self.implemented and self.module is None:
            raise ValueError(f"method '{self.name}': implemented methods name their `module`")

    def defaults(self) -> dict[str, Any]:
        """Parameter name → default (a fresh copy each call)."""
        import copy

        return {name: copy.deepcopy(p.default) for name, p in self.params.items()}


def late_defaults(params: Mapping[str, Param]) -> dict[str, Any]:
    """Parameters added after the first run ids (`since > 0`) → their defaults."""
    return {name: p.default for name, p in params.items() if p.since > 0}
