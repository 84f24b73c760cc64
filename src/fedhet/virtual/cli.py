"""`fedhet virtual-grid` and `fedhet client-tsne` (the image grids of VHL's cached virtual
datasets and the t-SNE of client features); added to `fedhet` by `fedhet.cli`. The datasets
themselves are built by `fedhet virtual-data` (`fedhet.cli.artefacts`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MARKERS = ("o", "^", "s", "D", "v", "P")


def cmd_virtual_grid(args: argparse.Namespace) -> int:
    """Image grid (one row per class) of a cached virtual dataset file."""
    import torch

    from fedhet.virtual import virtual_grid_png
    from fedhet.virtual.spec import KIND_NAMES

    data = torch.load(args.data, map_location="cpu", weights_only=True)
    s = data["settings"]
    what = f"{s['num_classes']} classes × {s['images_per_class']} images, {s['size']} px"
    title = f"{args.title} ({what})" if args.title else f"{KIND_NAMES[s['kind']]} ({what})"
    virtual_grid_png(data["x"], data["y"], args.out, per_class=args.per_class, title=title,
                     notes=args.note)
    print(args.out)
    return 0


def client_features(run_dir: Path, clients: int, per_client: int) -> dict[str, Any]:
    """Features (classifier input) of the first `clients` client models a run saved at its last
    saved round, on `per_client` test images each (the same images for every client)."""
    import numpy as np
    import torch

    from fedhet.saved import extract_features, open_run

    saved = open_run(run_dir, device="cpu")
    files = saved.client_model_files()
    data = saved.data
    feats, classes, owners = [], [], []
    for client, path in list(files.items())[:clients]:
        idx = torch.randperm(len(data.y_test), generator=torch.Generator().manual_seed(0))
        idx = idx[:per_client]
        model = saved.load_model(path)
        feats.append(extract_features(model, data.x_test[idx], saved.augmenter).cpu().numpy())
        classes.append(data.y_test[idx].numpy())
        owners.append(np.full(len(idx), client))
    return {"features": np.concatenate(feats), "class": np.concatenate(classes),
            "client": np.concatenate(owners), "round": int(path.parent.name.split("_")[1])}


def client_tsne_figure(panels: list[dict[str, Any]], title: str = "",
                       notes: Sequence[str] = ()) -> Any:
    """One t-SNE panel per run (VHL Fig. 2): `panels` are {"title", "frame"} with a frame of
    columns x, y, class, client; colour: class, marker: client, both explained in a legend
    beside the last panel (in the free slot of a row of two, where there is one); `notes` as
    its notes (its caption in the report)."""
    import matplotlib

    matplotlib.use("Agg")

    from fedhet.figures.footnote import add_footnote
    from fedhet.figures.legends import (class_colours, class_handles, class_legend, legend_in,
                                        marker_handles, panel_grid)
    from fedhet.figures.titles import figure_title

    num_classes = max(int(p["frame"]["class"].max()) for p in panels) + 1
    cmap = class_colours(num_classes)
    # two panels a row (three in a row are shrunk past reading in the report's pane)
    fig, axes, slot = panel_grid(len(panels), 3.4, 3.3, legend_w=1.5)
    width, height = fig.get_size_inches()
    height += 0.4  # the title
    clients: list[Any] = []
    for ax, panel in zip(axes, panels, strict=True):
        for client, part in panel["frame"].groupby("client"):
            if client not in clients:
                clients.append(client)
            ax.scatter(part["x"], part["y"], c=[cmap(int(c) % cmap.N) for c in part["class"]],
                       s=5, marker=MARKERS[clients.index(client) % len(MARKERS)], alpha=0.7,
                       linewidths=0)
        ax.set_title(panel["title"], fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    markers = {f"client {c}": MARKERS[m % len(MARKERS)] for m, c in enumerate(clients)}
    if slot is not None:
        handles = marker_handles(markers) + class_handles(num_classes)
        legend_in(slot, handles=handles, fontsize=7, ncol=1 if len(handles) <= 16 else 2)
    else:
        class_legend(axes[-1], marker_handles(markers), num_classes)
    if title:
        figure_title(fig, title)
    add_footnote(fig, list(notes), width, height)
    return fig


def cmd_client_tsne(args: argparse.Namespace) -> int:
    """One t-SNE panel per run of a few clients' test features (VHL Fig. 2)."""
    import matplotlib.pyplot as plt

    from fedhet.analysis.tsne import tsne_frame

    labels = args.labels or [Path(r).name for r in args.runs]
    panels = []
    for run, label in zip(args.runs, labels, strict=True):
        f = client_features(Path(run), args.clients, args.per_client)
        frame = tsne_frame(f["features"], {"class": f["class"], "client": f["client"]},
                           seed=0, max_points=None)
        panels.append({"title": f"{label} (round {f['round']})", "frame": frame})
    from fedhet.figures.save import save_figure

    fig = client_tsne_figure(panels, args.title, args.note)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, args.out)
    plt.close(fig)
    print(args.out)
    return 0


def add_subcommands(sub: Any) -> None:
    p = sub.add_parser("virtual-grid", help="image grid of a cached virtual dataset (PNG)")
    p.add_argument("--data", required=True, help="virtual dataset file (.pt)")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--per-class", type=int, default=8)
    p.add_argument("--title", default="")
    p.add_argument("--note", action="append", default=[],
                   help="a paragraph of the figure's notes (repeat for more)")
    p.set_defaults(func=cmd_virtual_grid)

    p = sub.add_parser("client-tsne",
                       help="t-SNE of saved client models' test features, a panel per run (PNG)")
    p.add_argument("--runs", nargs="+", required=True, help="run directories")
    p.add_argument("--labels", nargs="+", help="panel titles, one per run")
    p.add_argument("--clients", type=int, default=3)
    p.add_argument("--per-client", type=int, default=300)
    p.add_argument("--out", required=True)
    p.add_argument("--title", default="")
    p.add_argument("--note", action="append", default=[],
                   help="a paragraph of the figure's notes (repeat for more)")
    p.set_defaults(func=cmd_client_tsne)
