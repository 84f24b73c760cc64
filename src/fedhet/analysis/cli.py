"""`fedhet invert`, `fedhet bias` and `fedhet figure-data`: their arguments, without importing
torch until one of them runs (the other commands start faster)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

from fedhet.cli.args import json_object

# the kinds of `fedhet figure-data` (fedhet.analysis.figure_data.KINDS)
FIGURE_DATA_KINDS = ("membership", "domain-tsne", "distilled-tsne", "pixel-hist",
                     "virtual-images")


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)

    return run


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("invert", help="model inversion from a run's split features and shared "
                                      "class statistics (PNG)")
    p.add_argument("--run", required=True, help="run directory")
    p.add_argument("--statistics", required=True,
                   help="class statistics (.pt with mu [C, D], split, shape), e.g. "
                        "plugins/fedimpro/shared_statistics.pt of a FedImpro run")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--errors", help="JSON of the final relative feature errors")
    p.add_argument("--classes", type=int, default=10, help="images shown (one per class)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--tv", type=float, default=0.01, help="total-variation weight (assumed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--title", default="")
    p.add_argument("--note", action="append", default=[],
                   help="a paragraph of the figure's notes (repeat for more)")
    p.set_defaults(func=_command("fedhet.analysis.inversion", "cmd_invert"))

    p = sub.add_parser("bias", help="local learning bias of a run's model trained on half the "
                                    "classes (FedBR Figs. 2-3: bias.json, bias.png)")
    p.add_argument("--run", required=True, help="run directory (a centralized run's)")
    p.add_argument("--out", required=True, help="directory for bias.json and bias.png")
    p.add_argument("--local-steps", type=int, default=250,
                   help="SGD steps on X1 (default 250: 5 rounds of FedBR's 50 steps, assumed)")
    p.add_argument("--samples", type=int, default=600, help="t-SNE points in all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, help="CPU threads (torch, t-SNE); default: all")
    p.add_argument("--title", default="")
    p.add_argument("--note", action="append", default=[],
                   help="a paragraph of the figure's notes (repeat for more)")
    p.set_defaults(func=_command("fedhet.analysis.bias", "cmd_bias"))

    p = sub.add_parser("figure-data", help="the data of a model- or dataset-based figure "
                                           "(membership ROC, t-SNEs, pixel histograms, "
                                           "virtual images) as JSON")
    p.add_argument("kind", choices=FIGURE_DATA_KINDS)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--runs", nargs="+", help="run directories (pixel-hist: one)")
    source.add_argument("--artefact", help="cached artefact .pt (distilled-tsne), or a "
                                           "fedlgd_virtual.pt (virtual-images)")
    p.add_argument("--options", type=json_object, default={},
                   help="the kind's options as a JSON object (e.g. {\"samples\": 2000})")
    p.add_argument("--out", required=True, help="JSON to write")
    p.add_argument("--device", default="auto", help="for the kinds that run a model")
    p.set_defaults(func=_command("fedhet.analysis.figure_data", "cmd_figure_data"))
