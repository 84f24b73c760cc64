"""Methods declared outside fedhet, in other installed packages (torch-free).

A package makes its methods known with an entry point in group `fedhet.methods` naming the
module that holds its `DECLARATIONS` (the same `fedhet.declare.Method` list a built-in method
package has), e.g. in its `pyproject.toml`:

```toml
[project.entry-points."fedhet.methods"]
mine = "mine_fl.methods"
```

A package whose entry point fails to import, whose `DECLARATIONS` is not a list of `Method`s,
which declares a post-hoc step (their settings are fedhet's own), or which declares a name (or
an artefact family) that fedhet or another external package also declares is refused as a
whole: it is reported, with its distribution named, and the other methods are unaffected.
Runs of an external method carry the distribution's version and a hash of its source files in
their identity (`identity_entry`), so an edited method gets new run ids.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from fedhet.declare import Method

GROUP = "fedhet.methods"


@dataclass(frozen=True)
class Package:
    """The installed distribution an external declaration comes from."""

    name: str
    version: str
    entry_point: str  # "name = value", as the distribution's metadata writes it
    roots: tuple[str, ...]  # top-level modules whose files are the method's source

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class Refusal:
    """An external package left out, and why."""

    package: Package
    reason: str

    def __str__(self) -> str:
        return f"{self.package.label} (entry point {self.package.entry_point}): {self.reason}"


@dataclass(frozen=True)
class Found:
    """What discovery accepted and refused."""

    methods: dict[str, tuple[Method, Package]]
    refused: list[Refusal]


def _package(ep: importlib.metadata.EntryPoint) -> Package:
    dist = ep.dist
    name = dist.metadata["Name"] if dist is not None else "unknown distribution"
    version = dist.version if dist is not None else "unknown version"
    return Package(name, version, f"{ep.name} = {ep.value}", ())


def _load(ep: importlib.metadata.EntryPoint) -> list[Method]:
    """The declarations an entry point names; ValueError saying what is wrong with them."""
    try:
        target = ep.load()
    except Exception as err:  # a user's package may fail in any way; it must not stop ours
        raise ValueError(f"cannot import {ep.value}: {type(err).__name__}: {err}") from None
    decls = target if ep.attr else getattr(target, "DECLARATIONS", None)
    if decls is None:
        raise ValueError(f"module {ep.module} has no DECLARATIONS list")
    if not isinstance(decls, (list, tuple)) or not decls:
        raise ValueError(f"DECLARATIONS of {ep.value} must be a non-empty list of "
                         f"fedhet.declare.Method, got {type(decls).__name__}")
    bad = [d for d in decls if not isinstance(d, Method)]
    if bad:
        raise ValueError(f"DECLARATIONS of {ep.value} holds {bad[0]!r}, not a "
                         "fedhet.declare.Method")
    posthoc = [d.name for d in decls if d.kind == "posthoc"]
    if posthoc:
        raise ValueError(f"declares post-hoc step '{posthoc[0]}'; other packages may declare "
                         "algorithms and plug-ins only")
    names = [d.name for d in decls]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"declares '{twice[0]}' twice")
    return list(decls)


def _roots(ep: importlib.metadata.EntryPoint, decls: list[Method]) -> tuple[str, ...]:
    modules = [ep.module, *(d.module for d in decls if d.module)]
    return tuple(sorted({m.split(".")[0] for m in modules} - {"fedhet"}))


def discover(builtin: Mapping[str, Method]) -> Found:
    """Every external declaration in group `fedhet.methods`, checked against `builtin` (name →
    declaration) and each other; a package with any fault is refused whole."""
    loaded: list[tuple[Package, list[Method]]] = []
    refused: list[Refusal] = []
    eps = sorted(importlib.metadata.entry_points(group=GROUP),
                 key=lambda ep: (_package(ep).name.lower(), ep.name))
    for ep in eps:
        package = _package(ep)
        try:
            decls = _load(ep)
        except ValueError as err:
            refused.append(Refusal(package, str(err)))
            continue
        loaded.append((Package(package.name, package.version, package.entry_point,
                               _roots(ep, decls)), decls))
    families = {f.name for d in builtin.values() for f in d.artefact_families}
    methods: dict[str, tuple[Method, Package]] = {}
    for package, decls in loaded:
        reason = _clash(package, decls, builtin, families, loaded)
        if reason:
            refused.append(Refusal(package, reason))
            continue
        methods.update({d.name: (d, package) for d in decls})
    return Found(methods, refused)


def _clash(package: Package, decls: list[Method], builtin: Mapping[str, Method],
           families: set[str], loaded: list[tuple[Package, list[Method]]]) -> str:
    """Why `package`'s declarations clash with fedhet's or another package's ('' if not)."""
    for decl in decls:
        if decl.name in builtin:
            return f"declares '{decl.name}', which fedhet already declares; rename it"
        for family in decl.artefact_families:
            if family.name in families:
                return (f"declares artefact family '{family.name}', which fedhet already "
                        "declares; rename it")
    for other, others in loaded:
        if other == package:
            continue
        shared = {d.name for d in decls} & {d.name for d in others}
        if shared:
            return (f"declares '{sorted(shared)[0]}', as does {other.label}; one of the two "
                    "must rename it")
        shared = ({f.name for d in decls for f in d.artefact_families}
                  & {f.name for d in others for f in d.artefact_families})
        if shared:
            return (f"declares artefact family '{sorted(shared)[0]}', as does {other.label}; "
                    "one of the two must rename it")
    return ""


def _files(root: str) -> list[tuple[str, Path]]:
    """(name relative to the module's parent, path) of every file of top-level module `root`,
    compiled caches left out."""
    spec = importlib.util.find_spec(root)
    if spec is None:
        return []
    if spec.submodule_search_locations:
        out = []
        for location in spec.submodule_search_locations:
            base = Path(location)
            for folder, dirs, files in os.walk(base):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for file in files:
                    if not file.endswith((".pyc", ".pyo")):
                        path = Path(folder, file)
                        out.append((f"{root}/{path.relative_to(base).as_posix()}", path))
        return sorted(out)
    if spec.origin and os.path.isfile(spec.origin):
        return [(Path(spec.origin).name, Path(spec.origin))]
    return []


def _source_digest(roots: tuple[str, ...]) -> str:
    """sha256 (16 hex digits) of the names and contents of the source files of `roots`, as
    they are now."""
    digest = hashlib.sha256()
    for root in roots:
        for name, path in _files(root):
            digest.update(name.encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@cache
def source_hash(roots: tuple[str, ...]) -> str:
    """`_source_digest(roots)`, read once per process (a run's identity)."""
    return _source_digest(roots)


def installed() -> str:
    """sha256 (16 hex digits) of the external method packages as this process finds them: each
    entry point of group `GROUP` with its distribution's name and version, and the source hash
    of the top-level module it names (where the declarations and, as a package lays them out,
    their code live). Installing, removing, upgrading or editing one changes it; nothing of the
    packages is imported, and it is read afresh at each call (the fork server compares it with
    its value at the start before each job, to run no stale code)."""
    digest = hashlib.sha256()
    for ep in sorted(importlib.metadata.entry_points(group=GROUP),
                     key=lambda ep: (_package(ep).name.lower(), ep.name, ep.value)):
        package = _package(ep)
        roots = tuple(sorted({ep.module.split(".")[0]} - {"fedhet"}))
        digest.update(f"{package.label}\0{package.entry_point}\0{_source_digest(roots)}\n"
                      .encode())
    return digest.hexdigest()[:16]


def identity_entry(decl: Method, package: Package) -> dict[str, Any]:
    """What a run of an external method carries in its identity for it: the declaration's
    version, the distribution's name and version, and the hash of its source files."""
    return {"version": decl.version, "package": package.name,
            "package_version": package.version, "source": source_hash(package.roots)}
