"""What `fedhet methods` prints: every installed method, fedhet's own and those of other
packages, with its kind, package, whether its local step can be a CUDA graph and its parameters,
then the refused external packages (torch-free)."""

from __future__ import annotations

from fedhet import catalog
from fedhet.declare import Method


def _package(decl: Method) -> str:
    origin = catalog.package(decl.name)
    return "fedhet" if origin is None else origin.label


def describe(kind: str | None = None) -> str:
    """The listing, one block per method (of `kind`, when given), sorted by kind and name."""
    lines = []
    for decl in sorted(catalog.methods(kind), key=lambda d: (d.kind, d.name)):
        pending = "" if decl.implemented else ", not implemented yet"
        lines.append(f"{decl.name} ({decl.kind}, {_package(decl)}{pending}): {decl.summary}")
        if decl.kind != "posthoc":  # a client's local step: captured as a CUDA graph or not
            why = decl.graph_blocker
            lines.append("    local step as a CUDA graph: "
                         + ("yes" if why is None else f"no, runs eager: {why}"))
        for name, param in decl.params.items():
            lines.append(f"    {name} = {param.default!r}: {param.meaning} "
                         f"[{param.allowed()}]")
    refused = catalog.refused()
    if refused:
        lines.append("")
        lines.append("refused external method packages (their methods are left out):")
        lines.extend(f"    {r}" for r in refused)
    return "\n".join(lines)
