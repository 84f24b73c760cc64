"""`fedhet distill`: build (or check) the cached initial virtual data of FedLGD's clients."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def cmd_distill(args: argparse.Namespace) -> int:
    from fedhet.distill.core import load_or_make_distilled

    data = load_or_make_distilled(json.loads(args.settings), args.root, args.partitions,
                                  args.device)
    shapes = ", ".join(str(tuple(x.shape)) for x in data.x[:3])
    print(f"{len(data.x)} clients ({shapes}{', …' if len(data.x) > 3 else ''}), global "
          f"{tuple(data.global_x.shape)}, sha256 {data.checksum}", file=sys.stderr)
    print(data.path)
    return 0


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("distill", help="build FedLGD's cached local virtual data, print its path")
    p.add_argument("--settings", required=True,
                   help="distillation settings as JSON (fedhet.distill.spec.settings_for_run)")
    p.add_argument("--root", default="resources/datasets", help="dataset cache directory")
    p.add_argument("--partitions", default="resources/partitions", help="partition cache")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_distill)
