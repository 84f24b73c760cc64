"""Per-client pixel-intensity histograms of the raw training data (FedLGD App. D.3): the
dataset and partition of the item's first run (its resolved.yaml), the share of a client's
pixels in each intensity bin, one line per client, one panel per colour channel. `fedhet
figure-data pixel-hist` counts the pixels; this only plots the shares (Snakemake script;
matplotlib, Agg backend).

Spec keys: `clients` (how many clients, the first ones, default all up to 12; or a list of
0-based indices), `options.bins` (default 64, dividing 0-255 evenly), `yscale`, `note`,
`scale_note`.
"""

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
from fedhet.figures.labels import domain_label, runs_label  # noqa: E402
from fedhet.figures.legends import legend_beside, legend_in, panel_grid  # noqa: E402
from fedhet.figures.titles import figure_title  # noqa: E402

CHANNELS = {1: ["gray"], 3: ["red", "green", "blue"]}


def client_label(client: dict) -> str:
    """"client k: domain (n images)", or "client k (n images)" when the data has no domains."""
    k, n = client["client"], client["images"]
    return f"client {k}: {domain_label(client['domain'])} ({n} images)" if client["domain"] else \
        f"client {k} ({n} images)"


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    options = spec.get("options") or {}
    bins = int(options.get("bins", 64))
    run_dir = Path(sm.input[0]).parent
    data = figure_data("pixel-hist", ["--runs", str(run_dir)],
                       {"clients": spec.get("clients"), "bins": bins},
                       getattr(sm.params, "device", "auto"))
    clients = data["clients"]
    count = data["channels"]
    channels = CHANNELS.get(count, [f"channel {c}" for c in range(count)])
    edges = np.asarray(data["edges"])
    centres = (edges[:-1] + edges[1:]) / 2
    # two panels a row (three in a row are shrunk past reading in the report's pane); the
    # legend in the free slot after the last or beside it
    fig, axes, slot = panel_grid(len(channels), 3.7, 3.0, legend_w=2.4, sharey=True)
    width, height = fig.get_size_inches()
    height += 0.5  # the title
    cmap = plt.get_cmap("tab10" if len(clients) <= 10 else "tab20")
    for c, (ax, name) in enumerate(zip(axes, channels, strict=True)):
        for n, client in enumerate(clients):
            ax.plot(centres, 100 * np.asarray(client["shares"][c]), color=cmap(n % cmap.N),
                    linewidth=1.1, label=client_label(client))
        ax.set_xlim(0, 255)
        ax.set_xticks([0, 64, 128, 192, 255])
        ax.set_xlabel(f"pixel intensity ({name}, 0-255)")
        if spec.get("yscale"):
            ax.set_yscale(spec["yscale"])
        ax.grid(alpha=0.3)
    for k, ax in enumerate(axes):
        if k % 2 == 0:
            ax.set_ylabel(f"share of pixels (%, bins of {256 / bins:g})")
    if slot is not None:
        legend_in(slot, axes[-1], handles=axes[-1].get_legend_handles_labels()[0],
                  fontsize=7, title="client", title_fontsize=7)
    else:
        legend_beside(axes[-1], fontsize=7, title="client", title_fontsize=7)
    cell = next((c for c in payload["cells"] if c["run_ids"]), None)
    what = runs_label(cell, spec) if cell else ""
    figure_title(fig, spec["title"] + (f" ({what})" if what else ""))
    seeds = f"the first of {len(cell['run_ids'])} seeds" if cell and len(cell["run_ids"]) > 1 \
        else ""
    which = ", ".join(w for w in (what, seeds) if w)
    notes = [f"scale {sm.wildcards.scale}: {sm.params.note}",
             f"Raw 8-bit training images of each client{f' ({which})' if which else ''}, "
             "before normalisation."]
    if len(clients) < data["num_clients"]:
        notes.append(f"Clients shown: {', '.join(str(c['client']) for c in clients)} of "
                     f"{data['num_clients']}.")
    notes += item_notes(spec)
    add_footnote(fig, notes, width, height)
    save_figure(fig, sm.output[0], tight=True)
    print(f"{len(clients)} clients, {len(channels)} channels, {bins} bins", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
