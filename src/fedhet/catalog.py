"""Every declared method, found in the subpackages of `fedhet.methods` (torch-free).

```python
method("vhl").defaults()          # parameters with defaults
names("algorithm")                # declared algorithms, implemented or pending
implementation("vhl")             # the plug-in class (imports its module, and torch)
```

Declarations are read once per process. Adding a method is adding a subpackage of
`fedhet.methods` with a `DECLARATIONS` list; nothing here or in any other common module names it.
Methods of other installed packages join them through entry points (`fedhet.external`).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import cache
from typing import Any

from fedhet import external
from fedhet.declare import KINDS, ArtefactFamily, Method, resolve_params
from fedhet.registry import UnknownNameError


@cache
def _builtin() -> dict[str, Method]:
    import fedhet.methods

    found: dict[str, Method] = {}
    for info in sorted(pkgutil.iter_modules(fedhet.methods.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"fedhet.methods.{info.name}")
        for decl in getattr(module, "DECLARATIONS", []):
            if decl.name in found:
                raise ValueError(f"method '{decl.name}' declared twice")
            found[decl.name] = decl
    return found


@cache
def _external() -> external.Found:
    return external.discover(_builtin())


@cache
def _declarations() -> dict[str, Method]:
    return {**_builtin(), **{name: decl for name, (decl, _) in _external().methods.items()}}


def package(name: str) -> external.Package | None:
    """The installed distribution that declares `name`; None for fedhet's own methods."""
    entry = _external().methods.get(name)
    return None if entry is None else entry[1]


def refused() -> list[external.Refusal]:
    """External method packages left out, each with its distribution and the reason."""
    return list(_external().refused)


def refusal_note() -> str:
    """For errors about an unknown name: the refused external packages, if any ('' if none)."""
    found = refused()
    if not found:
        return ""
    return ("; refused external method packages (see `fedhet methods`): "
            + "; ".join(str(r) for r in found))


def methods(kind: str | None = None, implemented: bool | None = None) -> list[Method]:
    """Declared methods, sorted by name; optionally of one kind, implemented or pending only."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown method kind '{kind}'; valid: {', '.join(KINDS)}")
    return [
        m
        for name, m in sorted(_declarations().items())
        if (kind is None or m.kind == kind)
        and (implemented is None or m.implemented == implemented)
    ]


def names(kind: str | None = None, implemented: bool | None = None) -> list[str]:
    """Names of `methods(kind, implemented)`."""
    return [m.name for m in methods(kind, implemented)]


def method(name: str, kind: str | None = None) -> Method:
    """The declaration of `name` (of `kind`, when given); the error lists the valid names."""
    decl = _declarations().get(name)
    if decl is None or (kind is not None and decl.kind != kind):
        label = "method" if kind is None else kind
        valid = ", ".join(names(kind))
        raise UnknownNameError(f"unknown {label} '{name}'; valid: {valid}{refusal_note()}")
    return decl


def version(name: str) -> int:
    """Implementation version of a declared method (1 for a name nobody declares: the engine,
    the data and partition code carry theirs in `fedhet.config`)."""
    decl = _declarations().get(name)
    return 1 if decl is None else decl.version


def identity_version(name: str) -> int | dict[str, Any]:
    """What a run using `name` carries for it in its identity: `version(name)` for fedhet's own
    methods (their run ids never change); for an external method, also its distribution's
    version and a hash of its code files (`fedhet.external.identity_entry`)."""
    origin = package(name)
    if origin is None:
        return version(name)
    return external.identity_entry(method(name), origin)


def origin(name: str) -> dict[str, Any]:
    """Where a declared method's code comes from, as resolved.yaml's provenance and the
    leaderboard state it: its kind, package and version, and for an external method the hash of
    its distribution's code (`fedhet.external.Source`) and what it covers."""
    decl = method(name)
    found = package(name)
    if found is None:
        import fedhet

        return {"kind": decl.kind, "package": "fedhet", "version": fedhet.__version__}
    assert found.source is not None
    return {"kind": decl.kind, "package": found.name, "version": found.version,
            "source": found.source.digest, "source_covers": found.source.describe()}


def run_methods(run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`origin` of each training method a resolved run names (its algorithm, then its
    plug-ins), by name."""
    names = [run["algorithm"]["name"], *(p["name"] for p in run.get("plugins") or [])]
    return {name: origin(name) for name in dict.fromkeys(names)}


def artefact_families() -> dict[str, ArtefactFamily]:
    """Every artefact family some method declares, by name."""
    out: dict[str, ArtefactFamily] = {}
    for decl in methods():
        for family in decl.artefact_families:
            if family.name in out and out[family.name] is not family:
                raise ValueError(f"artefact family '{family.name}' declared twice")
            out[family.name] = family
    return out


def implementation(name: str) -> Any:
    """The registered class of an implemented algorithm or plug-in (imports its module)."""
    decl = method(name)
    if not decl.implemented:
        raise NotImplementedError(f"{decl.kind} '{name}' is declared but not implemented yet")
    origin = package(name)
    try:
        importlib.import_module(decl.module)
    except Exception as err:
        if origin is None:
            raise
        raise ImportError(f"{decl.kind} '{name}' of {origin.label}: cannot import its module "
                          f"{decl.module}: {type(err).__name__}: {err}") from err
    if decl.kind == "algorithm":
        from fedhet.algorithms.base import ALGORITHMS

        return ALGORITHMS.get(name)
    if decl.kind == "plugin":
        from fedhet.plugins import PLUGINS

        return PLUGINS.get(name)
    raise ValueError(f"'{name}' is a post-hoc step, not a training method")


def plugins_of(run: Mapping[str, Any]) -> list[Any]:
    """The plug-in objects of a run, in its order, with their declared parameters filled in
    and checked, each told the run's number of clients (`Plugin.num_clients`), which a module
    built before `setup` may be sized by (a discriminator over the clients)."""
    plugins = [
        implementation(p["name"])(
            resolve_params(method(p["name"], "plugin").params, p.get("params"),
                           f"plugins({p['name']}).params.")
        )
        for p in run.get("plugins") or []
    ]
    clients = 1 if run["training"]["centralized"] else int(run["partition"]["num_clients"])
    for plugin in plugins:
        plugin.num_clients = clients
    return plugins


def model_classes(run: Mapping[str, Any], num_classes: int) -> int:
    """Classifier outputs of a run's model: the dataset's classes plus what its plug-ins add
    (VHL's virtual classes)."""
    return num_classes + sum(
        implementation(p["name"]).extra_classes(num_classes, p["params"])
        for p in run.get("plugins") or []
    )
