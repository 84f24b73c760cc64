"""The dataset commands of `fedhet`: `prepare-data` (a dataset's cached tensor file, as the
workflow's prepare_data jobs build it), `datasets` (what each dataset is and where it comes
from) and `seed-fmnist` (Fashion-MNIST's raw files from a local copy, for offline use).

`fedhet.data` is imported only when a command runs: importing it registers every dataset and
loads numpy, which the other commands and `fedhet --help` do without.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fedhet.cli.args import json_object
from fedhet.config import ConfigError


def cmd_prepare_data(args: argparse.Namespace) -> int:
    from fedhet.data import (
        DATASETS,
        prepare_dataset,
        resolve_options,
        verify_cache_file,
    )

    options = dict(args.options or {})
    if args.download:
        if "download" not in DATASETS.get(args.dataset).options:
            raise ConfigError(f"dataset '{args.dataset}' is not downloaded; "
                              f"see `fedhet datasets` for how it is obtained")
        options["download"] = True
    resolved = resolve_options(args.dataset, options)
    path = prepare_dataset(args.dataset, args.root, options)
    checksum = verify_cache_file(path, args.dataset, resolved)
    # the log of the workflow's prepare_data job: what was prepared, from what, verified
    print(f"{args.dataset} {json.dumps(resolved, sort_keys=True)}: {path} "
          f"(sha256 {checksum}, verified)", file=sys.stderr)
    print(path)
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    """One line per registered dataset: classes, image shape, source and description."""
    from fedhet.data import DATASETS, describe

    for name in DATASETS:
        info = describe(name)
        shape = "x".join(map(str, info["shape"]))
        classes = f"{info['num_classes']:4d} classes"
        print(f"{name:15} {classes}  {shape:9} {info['source']:11} {info['description']}")
    return 0


def cmd_seed_fmnist(args: argparse.Namespace) -> int:
    """Copy and verify Fashion-MNIST's IDX files into the dataset cache; print the folder."""
    from fedhet.data import seed_fmnist_from
    from fedhet.data.fmnist import DEBIAN_FMNIST_DIR

    print(seed_fmnist_from(args.source or DEBIAN_FMNIST_DIR, args.root))
    return 0


def add_subcommands(sub: Any) -> None:
    """Add `prepare-data`, `datasets` and `seed-fmnist` to the `fedhet` command's subparsers."""
    p = sub.add_parser("prepare-data", help="build a dataset's cached tensor file and print its path")
    p.add_argument("--dataset", required=True, help="dataset name (see `fedhet datasets`)")
    p.add_argument("--root", default="resources/datasets", help="dataset cache directory")
    p.add_argument("--options", type=json_object, help="dataset options as JSON")
    p.add_argument("--download", action="store_true", help="download raw files if missing")
    p.set_defaults(func=cmd_prepare_data)

    p = sub.add_parser("datasets", help="list the datasets with their classes, image shape and "
                       "source")
    p.set_defaults(func=cmd_datasets)

    p = sub.add_parser("seed-fmnist", help="copy Fashion-MNIST's IDX files from a local copy "
                       "into the dataset cache, for offline use",
                       description="Copy Fashion-MNIST's four IDX files (.gz or not) into "
                       "torchvision's raw folder under ROOT, each checked against its known "
                       "sha256, and print that folder.")
    p.add_argument("source", nargs="?",
                   help="folder with the IDX files (default: Debian's dataset-fashion-mnist, "
                   "/usr/share/datasets/fashion-mnist)")
    p.add_argument("--root", default="resources/datasets", help="dataset cache directory")
    p.set_defaults(func=cmd_seed_fmnist)
