"""FedLGD's final virtual data as image grids (App. D.2): one panel per client's local virtual
data and one for the server's global virtual data, one row per class, the first `per_class`
images of each class, from the first run's `plugins/fedlgd/fedlgd_virtual.pt` (the input is
the run's final.json beside it). `fedhet figure-data virtual-images` reads and rescales the
images; this only lays them out (Snakemake script; matplotlib, Agg backend).

Spec keys: `per_class` (images per class, default 4), `clients` (how many clients, the first
ones, default all up to 12; or a list of 0-based client indices), `note`, `scale_note`.
The images live in normalised input space; each is rescaled to its own [min, max] for display.
"""

import math
import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedhet.figures.commands import figure_data  # noqa: E402
from fedhet.figures.footnote import add_footnote, item_notes  # noqa: E402
from fedhet.figures.save import save_figure  # noqa: E402
from fedhet.figures.labels import runs_label  # noqa: E402
from fedhet.figures.titles import figure_title  # noqa: E402

PAD = 1  # pixels between images


def mosaic(panel: dict, per_class: int, height: int, width: int,
           channels: int) -> tuple[np.ndarray, list[int]]:
    """An [rows·(H+PAD), per_class·(W+PAD), ch] image in [0, 1] of a panel's images, one row per
    class present (white where a class has fewer), and the classes of the rows."""
    images = np.asarray(panel["images"], dtype=np.float32).reshape(-1, height, width, channels)
    labels = np.asarray(panel["labels"], dtype=np.int64)
    classes = sorted(set(labels.tolist()))
    h, w = height + PAD, width + PAD
    out = np.ones((h * len(classes), w * per_class, channels), dtype=np.float32)
    for r, c in enumerate(classes):
        for j, i in enumerate(np.flatnonzero(labels == c)[:per_class]):
            out[r * h:r * h + height, j * w:j * w + width] = images[i] / 255
    return out, classes


def images_per_class(panels: list[dict], wanted: int) -> int:
    """How many images of a class a row shows: `wanted`, or fewer when no panel holds as
    many of any class (a scale with fewer virtual images per class)."""
    held = [np.bincount(np.asarray(p["labels"], dtype=np.int64)).max()
            for p in panels if len(p["labels"])]
    return max(1, min(wanted, max(held, default=wanted)))


def panel_title(panel: dict) -> str:
    if panel["client"] is None:
        return f"server (global, {panel['count']} images)"
    return f"client {panel['client']} (local, {panel['count']} images)"


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    per_class = int(spec.get("per_class", 4))
    data = figure_data("virtual-images", ["--runs", str(Path(sm.input[0]).parent)],
                       {"per_class": per_class, "clients": spec.get("clients")},
                       getattr(sm.params, "device", "auto"))
    panels, num_classes = data["panels"], data["num_classes"]
    h, w, ch = data["height"], data["width"], data["channels"]
    wanted, per_class = per_class, images_per_class(panels, per_class)
    cols = min(len(panels), 6)
    rows = math.ceil(len(panels) / cols)
    aspect = (num_classes * (h + PAD)) / (per_class * (w + PAD))
    panel_w = 1.0 + 0.35 * per_class
    width = min(16.0, max(6.4, cols * panel_w))
    height = min(22.0, rows * (panel_w * aspect + 0.5) + 0.4)
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    for n, (ax, panel) in enumerate(zip(axes.flat, panels, strict=False)):
        image, classes = mosaic(panel, per_class, h, w, ch)
        gray = ch == 1
        ax.imshow(image[..., 0] if gray else image, cmap="gray" if gray else None,
                  vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(panel_title(panel), fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([(r + 0.5) * (h + PAD) for r in range(len(classes))])
        ax.set_yticklabels([str(c) for c in classes], fontsize=5)
        ax.tick_params(length=0, pad=1)
        if n % cols == 0:
            ax.set_ylabel("class", fontsize=7)
    cell = next((c for c in payload["cells"] if c["run_ids"]), None)
    what = runs_label(cell, spec) if cell else ""
    figure_title(fig, spec["title"] + (f" ({what})" if what else ""))
    fewer = (f" (the runs hold {per_class} per class at this scale, not {wanted})"
             if per_class < wanted else "")
    notes = [f"scale {sm.wildcards.scale}: {sm.params.note}",
             f"The first {per_class} images of each class{fewer} (one row per class, labelled "
             "on the left) of the virtual data after the last round; each image rescaled to "
             "its own minimum and maximum (the data lives in normalised input space)."]
    if cell and len(cell["run_ids"]) > 1:
        notes.append(f"Run of the first of {len(cell['run_ids'])} seeds.")
    shown = [p["client"] for p in panels if p["client"] is not None]
    if len(shown) < data["num_clients"]:
        notes.append(f"Clients shown: {', '.join(map(str, shown))} of {data['num_clients']}.")
    notes += item_notes(spec)
    add_footnote(fig, notes, width, height)
    save_figure(fig, sm.output[0], tight=True)
    print(f"{len(panels)} panels, {num_classes} classes, {per_class} per class", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
