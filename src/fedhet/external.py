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

Runs of an external method carry the distribution's version and a hash of its code in their
identity (`identity_entry`), so an edited method gets new run ids. The code is every file the
distribution installs (`code_files`):
- an installed distribution (`pip install`, `pip install --target`): every file its `RECORD`
  lists, except its own metadata folder (`*.dist-info`), files installed outside the folder it
  is installed in (scripts, data under another prefix) and compiled caches (`*.pyc`); and every
  file in the top-level packages (folders with an `__init__.py`) those files are in, so that a
  file added to an installed package counts too;
- an editable install (`pip install -e`): every file, compiled caches and hidden files left out,
  of each top-level module and package its `.pth` file's folders hold (a `.py` file, or a
  folder with an `__init__.py`), or its import finder maps (setuptools' `__editable__` finder).
A distribution that lists no files (no `RECORD`), an editable install whose source folders
cannot be read (a `.pth` file of `import` lines only), and a package whose entry point module
or declared implementation module lies outside those files are refused: their runs' identity
could not follow an edit.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from fedhet.declare import Method

GROUP = "fedhet.methods"


@dataclass(frozen=True)
class Source:
    """What a distribution's run identity hashes: sha256 (16 hex digits) of the names and
    contents of its code files, how many they are, and which rule chose them."""

    digest: str
    files: int
    how: str  # "installed" (its RECORD) or "editable" (its source folders)

    def describe(self) -> str:
        what = ("the files its RECORD lists and the files of their packages" if
                self.how == "installed" else "the files of its modules in its source folders "
                "(editable install)")
        return f"sha256 {self.digest} of {self.files} files: {what}"


@dataclass(frozen=True)
class Package:
    """The installed distribution an external declaration comes from."""

    name: str
    version: str
    entry_point: str  # "name = value", as the distribution's metadata writes it
    location: str = ""  # its metadata folder (*.dist-info); "" when unknown
    source: Source | None = None  # its code's hash (set once discovery accepted it)

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
    location = str(getattr(dist, "_path", "")) if dist is not None else ""
    return Package(name, version, f"{ep.name} = {ep.value}", location)


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
            files = code_files(ep.dist)
            _check_covered(ep, decls, files)
        except ValueError as err:
            refused.append(Refusal(package, str(err)))
            continue
        source = Source(_digest(files[0]), len(files[0]), files[1])
        loaded.append((Package(package.name, package.version, package.entry_point,
                               package.location, source), decls))
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


class Uncovered(ValueError):
    """A distribution whose code cannot be hashed for its runs' identity, and why."""


COMPILED = (".pyc", ".pyo")


def _walk(base: Path, prefix: str) -> list[tuple[str, Path]]:
    """(prefix/relative name, path) of every file under folder `base`, compiled caches and
    hidden files and folders left out."""
    out = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        for file in files:
            if file.endswith(COMPILED) or file.startswith("."):
                continue
            path = Path(folder, file)
            out.append((f"{prefix}/{path.relative_to(base).as_posix()}", path))
    return out


def _editable(dist: importlib.metadata.Distribution, listed: list[PurePosixPath]) -> bool:
    """Whether `dist` is an editable install (PEP 610's direct_url.json, or setuptools'
    `__editable__` files)."""
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except (OSError, ValueError):
        direct = {}
    if (direct.get("dir_info") or {}).get("editable"):
        return True
    return any(p.name.startswith("__editable__") for p in listed)


def _finder_mapping(path: Path) -> dict[str, str]:
    """The top-level name → path mapping of a setuptools `__editable___*_finder.py`."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    for node in tree.body:
        target = (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1
                  else node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and target.id == "MAPPING" and node.value is not None:
            try:
                mapping = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return {str(k): str(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}
    return {}


def _editable_files(dist: importlib.metadata.Distribution,
                    listed: list[PurePosixPath]) -> list[tuple[str, Path]]:
    """The files of an editable install: its top-level modules and packages, from the folders
    its `.pth` files name and the mapping of its setuptools finder."""
    tops: dict[str, Path] = {}
    for rel in listed:
        path = Path(dist.locate_file(rel))
        if rel.suffix == ".pth" and path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                line = line.strip()
                if not line or line.startswith(("#", "import ", "import\t")):
                    continue
                folder = Path(line) if os.path.isabs(line) else path.parent / line
                if not folder.is_dir():
                    continue
                for child in sorted(folder.iterdir()):
                    name = child.stem if child.suffix == ".py" else child.name
                    if not name.isidentifier():
                        continue
                    if (child.suffix == ".py" and child.is_file()) or (
                            child.is_dir() and (child / "__init__.py").is_file()):
                        tops.setdefault(name, child)
        elif rel.name.startswith("__editable__") and rel.name.endswith("_finder.py"):
            for name, where in _finder_mapping(path).items():
                tops.setdefault(name, Path(where))
    out: list[tuple[str, Path]] = []
    for name, where in sorted(tops.items()):
        if where.is_dir():
            out += _walk(where, name)
        elif where.is_file():
            out.append((where.name, where))
    return out


def code_files(dist: importlib.metadata.Distribution | None) -> tuple[list[tuple[str, Path]], str]:
    """(name, path) of every code file of `dist` that its runs' identity hashes (see the module
    docstring), sorted, and which rule chose them ("installed" or "editable"). Uncovered (a
    ValueError) where they cannot be known."""
    if dist is None:
        raise Uncovered("its entry point belongs to no installed distribution: its code cannot "
                        "be hashed for the run ids; install the package with pip")
    listed = [PurePosixPath(str(f)) for f in dist.files or []]
    if dist.files is None:
        raise Uncovered("its metadata lists no installed files (no RECORD): its code cannot be "
                        "hashed for the run ids; install it with pip (pip install, or pip "
                        "install -e for an editable install)")
    if _editable(dist, listed):
        found = _editable_files(dist, listed)
        if not found:
            raise Uncovered("is an editable install whose source folders its .pth file or "
                            "import finder does not name: its code cannot be hashed for the "
                            "run ids; install it with pip install -e (setuptools or hatchling) "
                            "or pip install")
        return sorted(found), "editable"
    site = Path(dist.locate_file(""))
    out: dict[str, Path] = {}
    packages: set[str] = set()
    for rel in listed:
        parts = rel.parts
        if (not parts or parts[0] == ".." or parts[0].endswith((".dist-info", ".egg-info"))
                or "__pycache__" in parts or rel.suffix in COMPILED):
            continue
        out[rel.as_posix()] = site / rel
        if len(parts) > 1 and (site / parts[0] / "__init__.py").is_file():
            packages.add(parts[0])
    for package in packages:
        out.update(dict(_walk(site / package, package)))
    return sorted(out.items()), "installed"


def _digest(files: list[tuple[str, Path]]) -> str:
    """sha256 (16 hex digits) of the names and contents of `files`, as they are now (a file
    listed but missing counts as missing)."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0")
        try:
            digest.update(path.read_bytes() + b"\0")
        except OSError:
            digest.update(b"\0missing\0")
    return digest.hexdigest()[:16]


def _module_file(module: str) -> Path | None:
    """The file of `module` (its package's __init__.py), found without importing it (its
    parent packages are imported); None where it is not found."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None or not spec.has_location or not spec.origin:
        return None
    return Path(spec.origin)


def _check_covered(ep: importlib.metadata.EntryPoint, decls: list[Method],
                   files: tuple[list[tuple[str, Path]], str]) -> None:
    """Uncovered where the entry point's module, or a declared implementation module that
    exists, lies outside the files hashed."""
    hashed = {os.path.realpath(path) for _, path in files[0]}
    modules = [ep.module, *(d.module for d in decls if d.module)]
    for module in dict.fromkeys(modules):
        if module.split(".")[0] == "fedhet":
            continue
        path = _module_file(module)
        if path is None:
            if module == ep.module:
                raise Uncovered(f"its entry point module {module} has no file")
            continue  # a missing implementation is reported when a run imports it
        if os.path.realpath(path) not in hashed:
            raise Uncovered(f"module {module} ({path}) is not among the files of the "
                            f"distribution that its run ids hash ({len(files[0])} files, "
                            f"{files[1]}); install the module with the distribution")


def installed() -> str:
    """sha256 (16 hex digits) of the external method packages as this process finds them: each
    entry point of group `GROUP` with its distribution's name and version, and the hash of the
    distribution's code files (`code_files`). Installing, removing, upgrading or editing one
    changes it; nothing of the packages is imported, and it is read afresh at each call (the
    fork server compares it with its value at the start before each job, to run no stale
    code)."""
    digest = hashlib.sha256()
    for ep in sorted(importlib.metadata.entry_points(group=GROUP),
                     key=lambda ep: (_package(ep).name.lower(), ep.name, ep.value)):
        package = _package(ep)
        try:
            code = _digest(code_files(ep.dist)[0])
        except Uncovered as err:
            code = f"uncovered: {err}"
        digest.update(f"{package.label}\0{package.entry_point}\0{code}\n".encode())
    return digest.hexdigest()[:16]


def identity_entry(decl: Method, package: Package) -> dict[str, Any]:
    """What a run of an external method carries in its identity for it: the declaration's
    version, the distribution's name and version, and the hash of its code files (read once,
    when the process discovered the package)."""
    assert package.source is not None, "an accepted package has its source hash"
    return {"version": decl.version, "package": package.name,
            "package_version": package.version, "source": package.source.digest}
