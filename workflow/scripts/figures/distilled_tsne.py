"""Pixel t-SNE of original vs initial distilled images (FedLGD Fig. 1): two clients' training
images (a seeded subsample per class, normalised as the runs normalise them) and their initial
local virtual images from the cached `distilled` artefact, embedded together, one panel per
client; colour = class, marker = original or distilled. `fedhet figure-data distilled-tsne`
computes the embedding; this only plots it (Snakemake script; matplotlib, Agg).

Spec keys: `clients` (a list of two 0-based client indices, default [0, 1]; an integer n
takes the first n), `options.per_class` (original images per class and client, default 50),
`options.seed` (default 0), `options.perplexity` (default 30), `note`, `scale_note`.
The artefact lives at `<datasets>/distilled/<key>.pt`; the dataset is read from `<datasets>`
and the partition from `<datasets>/../partitions` (resources/datasets, resources/partitions).
"""

import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from fedhet.figures.commands import figure_data  # noqa: E402
from fedhet.figures.footnote import add_footnote, item_notes  # noqa: E402
from fedhet.figures.save import save_figure  # noqa: E402
from fedhet.figures.labels import domain_label  # noqa: E402
from fedhet.figures.legends import class_colours, class_legend  # noqa: E402
from fedhet.figures.titles import figure_title  # noqa: E402

SOURCES = {"original": dict(marker="o", s=9, alpha=0.55, linewidths=0),
           "distilled": dict(marker="*", s=60, alpha=0.95, edgecolors="black", linewidths=0.4)}


def client_name(client: dict) -> str:
    """"client k", with the domain most of its images come from when the data has domains."""
    domain = f" ({domain_label(client['domain'])})" if client["domain"] else ""
    return f"client {client['client']}{domain}"


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    options = spec.get("options") or {}
    path = Path(sm.input[0])
    wanted = {"clients": spec.get("clients", [0, 1]), "seed": int(options.get("seed", 0)),
              "per_class": int(options.get("per_class", 50)),
              "perplexity": float(options.get("perplexity", 30.0))}
    data = figure_data("distilled-tsne", ["--artefact", str(path)], wanted,
                       getattr(sm.params, "device", "auto"))
    clients, points = data["clients"], data["points"]
    num_classes = data["num_classes"]
    cmap = class_colours(num_classes)
    width = 3.6 * len(clients) + 1.6
    fig, axes = plt.subplots(1, len(clients), figsize=(width, 4.0), squeeze=False,
                             sharex=True, sharey=True)
    for ax, client in zip(axes[0], clients, strict=True):
        for source, style in SOURCES.items():
            part = [p for p in points if p["client"] == client["client"] and p["kind"] == source]
            ax.scatter([p["x"] for p in part], [p["y"] for p in part],
                       c=[cmap(p["class"] % cmap.N) for p in part], **style)
        ax.set_title(client_name(client), fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    handles = [Line2D([], [], linestyle="", marker=s["marker"], color="grey",
                      markeredgecolor="black" if source == "distilled" else "grey",
                      markersize=7 if source == "distilled" else 4,
                      label=f"{source} images") for source, s in SOURCES.items()]
    class_legend(axes[0][-1], handles, num_classes)
    figure_title(fig, spec["title"])
    counts = {s: sum(p["kind"] == s for p in points) for s in SOURCES}
    notes = [f"scale {sm.wildcards.scale}: {sm.params.note}",
             f"One t-SNE of raw normalised pixels over both panels (perplexity "
             f"{options.get('perplexity', 30)}): {counts['original']} original training images "
             f"(at most {options.get('per_class', 50)} per class and client, seeded) and "
             f"{counts['distilled']} initial distilled images (the local virtual data as "
             "distilled before any federated round)."]
    notes += item_notes(spec)
    add_footnote(fig, notes, width, 4.0)
    save_figure(fig, sm.output[0], tight=True)
    print(f"{len(points)} points: {counts}", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
