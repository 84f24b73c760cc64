"""t-SNE of the final global model's features on two domains' test images (FedLGD Fig. 4): one
panel per cell (its first seed's run), colour = class, marker = domain. `fedhet figure-data
domain-tsne` computes the embeddings; this only plots them (Snakemake script; matplotlib, Agg
backend).

Spec keys: `domains` (two domain names or ids, default the dataset's first two),
`options.per_domain` (test images per domain, at most; default 500), `options.seed`
(default 0), `options.perplexity` (default 30), `note`, `scale_note`.
"""

import json
import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fedhet.figures.commands import cell_labels, figure_data  # noqa: E402

MARKERS = ("o", "^", "s", "D")


def main(sm) -> None:
    from fedhet.figures.footnote import add_footnote, item_notes
    from fedhet.figures.save import save_figure
    from fedhet.figures.labels import domain_label, runs_label
    from fedhet.figures.legends import (class_colours, class_handles, class_legend, legend_in,
                                        marker_handles, panel_grid)
    from fedhet.figures.titles import figure_title

    payload = sm.params.payload
    spec = payload["spec"]
    options = spec.get("options") or {}
    seed = int(options.get("seed", 0))
    per_domain = int(options.get("per_domain", 500))
    cells = [c for c in payload["cells"] if c["run_ids"]]
    pending = [c for c in payload["cells"] if not c["run_ids"]]
    if not cells:
        reasons = "; ".join(c["pending"] or "no run" for c in pending)
        raise SystemExit(f"{payload.get('id', 'figure')}: no run to analyse ({reasons})")
    runs = [str(Path(sm.params.results) / "runs" / c["run_ids"][0]) for c in cells]
    wanted = {"domains": spec.get("domains"), "per_domain": per_domain, "seed": seed,
              "perplexity": float(options.get("perplexity", 30.0))}
    data = figure_data("domain-tsne", ["--runs", *runs], wanted,
                       getattr(sm.params, "device", "auto"))
    # two panels a row: more in a row are shrunk past reading in the report's pane
    fig, axes, slot = panel_grid(len(cells), 3.4, 3.4, legend_w=1.6)
    width, height = fig.get_size_inches()
    height += 0.5  # the title
    num_classes, shown, counts = 0, [], {}
    for ax, result, label in zip(axes, data["runs"], cell_labels(cells), strict=True):
        shown = result["domains"]
        num_classes = max(num_classes, result["num_classes"])
        points = result["points"]
        cmap = class_colours(num_classes)
        for m, name in enumerate(shown):
            part = [p for p in points if p["domain"] == name]
            ax.scatter([p["x"] for p in part], [p["y"] for p in part],
                       c=[cmap(p["class"] % cmap.N) for p in part],
                       marker=MARKERS[m % len(MARKERS)], s=8, alpha=0.75, linewidths=0)
            counts[name] = int(len(part))
        ax.set_title(label, fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    markers = {f"domain: {domain_label(name)}": MARKERS[m % len(MARKERS)]
               for m, name in enumerate(shown)}
    if slot is not None:
        legend_in(slot, handles=marker_handles(markers) + class_handles(num_classes),
                  fontsize=7)
    else:
        class_legend(axes[-1], marker_handles(markers), num_classes)
    figure_title(fig, spec["title"])
    notes = [f"scale {sm.wildcards.scale}: {sm.params.note}",
             "Features: the final global model's classifier input on test images "
             f"({', '.join(f'{n} of {domain_label(d)}' for d, n in counts.items())}; seeded "
             "subsample), one "
             "t-SNE per panel. First seed's run of each cell."]
    if pending:
        notes.append("not shown: " + "; ".join(
            f"{runs_label(c, spec)} ({c['pending']})" for c in pending))
    notes += item_notes(spec)
    add_footnote(fig, notes, width, height)
    save_figure(fig, sm.output[0], tight=True)
    print(json.dumps({"domains": shown, "points": counts}), file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
