"""`fedhet calibrate`: CCVR (or oracle) classifier calibration of a finished run.

    fedhet calibrate --run RUN_DIR --out OUT_DIR [--method ccvr|oracle] [--settings JSON]
                     [--device DEV]

Writes OUT_DIR/model.pt and OUT_DIR/calibration.json; prints the latter's summary.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from fedhet.cli.args import json_object


def cmd_calibrate(args: argparse.Namespace) -> int:
    from fedhet.posthoc.ccvr import calibrate

    settings = dict(args.settings or {})
    if args.method:
        settings["method"] = args.method
    if args.device:
        settings["device"] = args.device
    result = calibrate(args.run, args.out, settings)
    keys = ("method", "run_id", "acc_before", "acc_after", "gain", "num_retrain_samples",
            "mean_sliced_wasserstein")
    print(json.dumps({k: result.get(k) for k in keys}, indent=2))
    return 0


def add_subcommands(subparsers: Any) -> None:
    """Add `calibrate` to the `fedhet` command's subparsers."""
    from fedhet.posthoc.settings import DEFAULT_SETTINGS

    p = subparsers.add_parser(
        "calibrate", help="calibrate a finished run's classifier (CCVR or oracle)",
        description="Retrain only the classifier of a finished run: on virtual features "
        "sampled from the clients' merged class Gaussians (ccvr) or on real training features "
        "(oracle). Writes model.pt and calibration.json into --out. Settings (JSON) and their "
        "defaults: " + json.dumps(DEFAULT_SETTINGS),
    )
    p.add_argument("--run", required=True, help="directory of a finished run (resolved.yaml, model.pt)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--method", choices=("ccvr", "oracle"), default=None,
                   help="ccvr (default) or oracle; overrides 'method' in --settings")
    p.add_argument("--settings", type=json_object, help="calibration settings as a JSON object")
    p.add_argument("--device", help="cpu, cuda, cuda:1 or auto (default: auto)")
    p.set_defaults(func=cmd_calibrate)
