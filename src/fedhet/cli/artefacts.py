"""The command that builds a cached artefact from its settings and prints its path: one command
under each name an artefact family's declared `command` uses (`fedhet virtual-data`, `fedhet
distill`; `fedhet.declare.ArtefactFamily`), running the family's `build`."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

from fedhet import catalog
from fedhet.declare import ArtefactFamily, BuildPlaces


def _command(family: ArtefactFamily) -> Any:
    def run(args: argparse.Namespace) -> int:
        module, name = str(family.build).split(":")
        build = getattr(importlib.import_module(module), name)
        path, what = build(json.loads(args.settings),
                           BuildPlaces(args.root, args.partitions, args.device))
        print(what, file=sys.stderr)
        print(path)
        return 0

    return run


def add_subcommands(sub: Any) -> None:
    """One subcommand per artefact family built by a `fedhet` subcommand of its own."""
    places = BuildPlaces()
    for family in catalog.artefact_families().values():
        if family.build is None or family.subcommand is None:
            continue
        p = sub.add_parser(family.subcommand, description=family.summary,
                           help=f"build a cached '{family.name}' artefact from its settings, "
                                "print its path")
        p.add_argument("--settings", required=True,
                       help=f"the artefact's settings as JSON (the '{family.name}' family's)")
        p.add_argument("--root", default=places.root,
                       help="dataset and artefact cache directory")
        p.add_argument("--partitions", default=places.partitions, help="partition cache")
        p.add_argument("--device", default=places.device)
        p.set_defaults(func=_command(family))
