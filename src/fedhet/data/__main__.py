"""`python -m fedhet.data`: list the datasets, or seed Fashion-MNIST from a local copy.

python -m fedhet.data list
python -m fedhet.data seed-fmnist [SOURCE_DIR] [--root ROOT]
"""

from __future__ import annotations

import argparse

from fedhet.data import DATASETS, describe, seed_fmnist_from
from fedhet.data.core import DEFAULT_ROOT
from fedhet.data.fmnist import DEBIAN_FMNIST_DIR


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen command."""
    parser = argparse.ArgumentParser(
        prog="python -m fedhet.data", description=__doc__.splitlines()[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="datasets with their classes, image shape and source")
    seed = commands.add_parser(
        "seed-fmnist", help="copy Fashion-MNIST's IDX files into the raw folder"
    )
    seed.add_argument("source", nargs="?", default=str(DEBIAN_FMNIST_DIR))
    seed.add_argument("--root", default=DEFAULT_ROOT)
    args = parser.parse_args(argv)
    if args.command == "seed-fmnist":
        print(seed_fmnist_from(args.source, args.root))
    else:
        for name in DATASETS:
            info = describe(name)
            shape = "x".join(map(str, info["shape"]))
            classes = f"{info['num_classes']:4d} classes"
            print(f"{name:15} {classes}  {shape:9} {info['source']:11} {info['description']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
