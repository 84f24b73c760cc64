"""CCVR's analysis figures (Snakemake script): CKA between client models (Figs. 1–2), label
distribution and classifier weight norms (Fig. 3), calibrated accuracy against a calibration
setting (Figs. 4 and 7), mean sliced Wasserstein distance vs gain (Fig. 6) and t-SNE before /
after CCVR (Fig. 5). Reads saved models, logs and calibration outputs; never trains."""

import json
import sys
import textwrap
import traceback
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from fedhet.figures.footnote import add_footnote, figure_notes  # noqa: E402
from fedhet.figures.save import save_figure  # noqa: E402
from fedhet.figures.labels import axis_title, layer_labels  # noqa: E402
from fedhet.figures.legends import (  # noqa: E402
    class_colours,
    class_handles,
    class_legend,
    legend_beside,
    legend_in,
    panel_grid,
    retitle,
)
from fedhet.figures.titles import figure_title  # noqa: E402

# the three layers of the pairwise CKA figure, by position (CCVR Fig. 1)
PAIRWISE = ("first", "middle", "last")


def cell_name(cell, axes):
    return " · ".join(cell["display"][a] for a in axes if a and a in cell["display"])


def varying_axes(payload):
    """Axes whose value differs between the cells (what tells them apart in a legend)."""
    cells = payload["cells"]
    axes = list(cells[0]["labels"])
    return [a for a in axes if len({c["labels"].get(a) for c in cells}) > 1]


def calibration_records(payload, cal_root):
    rows = []
    for cell in payload["cells"]:
        for seed, cid in enumerate(cell["calibrations"]):
            cal = json.loads((Path(cal_root) / cid / "calibration.json").read_text())
            rows.append(
                {
                    **cell["display"],
                    "run_id": cid.split("/")[0],
                    "seed": seed,
                    "method": cal["method"],
                    "acc_before": 100 * cal["acc_before"],
                    "acc_after": 100 * cal["acc_after"],
                    "gain": 100 * (cal["acc_after"] - cal["acc_before"]),
                    "msw": cal.get("mean_sliced_wasserstein"),
                    "fraction": cal["settings"]["fraction"],
                    "samples_per_class": cal["settings"]["samples_per_class"],
                }
            )
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- kinds


def plot_cka(payload, sm):
    from fedhet.analysis.similarity import client_cka, mean_cka_per_layer

    spec = payload["spec"]
    opts = spec.get("options") or {}
    names = varying_axes(payload) or ["data"]
    frames = []
    for cell in payload["cells"]:
        for seed, rid in enumerate(cell["run_ids"]):
            df = client_cka(
                Path(f"{sm.params.results}/runs") / rid,
                num_samples=opts.get("num_samples", 500),
                seed=seed,
                device=sm.params.device,
            )
            df["setting"] = cell_name(cell, names)
            df["seed"] = seed
            frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    layers = list(dict.fromkeys(df["layer"]))
    df["layer"] = df["layer"].map(dict(zip(layers, layer_labels(layers), strict=True)))
    layers = layer_labels(layers)
    settings = list(dict.fromkeys(df["setting"]))
    if opts.get("view", "pairwise") == "mean":
        means = []
        for setting in settings:
            part = df[(df["setting"] == setting) & (df["seed"] == 0)]
            m = mean_cka_per_layer(part)
            m["setting"] = setting
            means.append(m)
        m = pd.concat(means, ignore_index=True)
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        sns.barplot(data=m, x="layer", y="mean_cka", hue="setting", order=layers, ax=ax)
        ax.set_xlabel("layer (shallow to deep)")
        ax.set_ylabel("mean CKA over client pairs")
        ax.set_ylim(0, 1.05)
        legend_beside(ax, fontsize=7, title=axis_title(names[0]) if len(names) == 1 else None)
        return fig, f"{len(m)} bars"
    # pairwise: the first, the middle and the last layer (the classifier), as the paper shows
    shown = dict(zip(PAIRWISE, (layers[0], layers[len(layers) // 2], layers[-1]), strict=True))
    fig, axes = plt.subplots(
        len(settings), len(shown), figsize=(3.2 * len(shown), 2.9 * len(settings)), squeeze=False
    )
    for i, setting in enumerate(settings):
        for j, (where, layer) in enumerate(shown.items()):
            part = df[(df["setting"] == setting) & (df["layer"] == layer) & (df["seed"] == 0)]
            mat = part.pivot(index="client_a", columns="client_b", values="cka")
            sns.heatmap(mat, vmin=0, vmax=1, cmap="viridis", ax=axes[i][j],
                        cbar=j == len(shown) - 1, cbar_kws={"label": "CKA"})
            name = layer if layer == "classifier" else f"{where} layer ({layer})"
            axes[i][j].set_title(f"{setting}: {name}", fontsize=8)
            axes[i][j].set_xlabel("client")
            axes[i][j].set_ylabel("client")
    return fig, f"{len(df)} CKA values"


def plot_norms(payload, sm):
    from fedhet.analysis.norms import (
        classifier_norms_frame,
        label_distribution_frame,
        norm_matrix,
    )

    opts = payload["spec"].get("options") or {}
    wanted = opts.get("rounds", ["first", "middle", "last"])
    names = varying_axes(payload) or ["data"]
    cells = [c for c in payload["cells"] if c["run_ids"]]
    # a column per cell, a row per panel kind (the label counts, then each round): four panels
    # in a row are shrunk past reading in the report's pane
    fig, grid = plt.subplots(
        1 + len(wanted), len(cells), figsize=(3.4 * len(cells), 2.6 * (1 + len(wanted)) + 0.5),
        squeeze=False,
    )
    axes = grid.T  # axes[cell][panel]
    runs = []  # per cell: its name, label counts and the norm matrix of each wanted round
    for cell in cells:
        run_dir = Path(f"{sm.params.results}/runs") / cell["run_ids"][0]
        frame = classifier_norms_frame(run_dir)
        rounds = sorted(frame["round"].unique())
        pick = {"first": rounds[0], "middle": rounds[len(rounds) // 2], "last": rounds[-1]}
        norms = [(int(pick.get(r, r)), norm_matrix(frame, int(pick.get(r, r))).T) for r in wanted]
        counts = label_distribution_frame(run_dir).pivot(index="class", columns="client",
                                                         values="count")
        runs.append((cell_name(cell, names), counts, norms))
    # one colour scale for every norm panel (and one for the label counts): panels compare
    top = max(float(np.nanmax(m.to_numpy())) for _, _, norms in runs for _, m in norms)
    most = max(float(np.nanmax(c.to_numpy())) for _, c, _ in runs)
    for i, (name, counts, norms) in enumerate(runs):
        sns.heatmap(counts, cmap="Reds", ax=axes[i][0], annot=False, vmin=0, vmax=most,
                    cbar_kws={"label": "samples", "shrink": 0.8})
        axes[i][0].set_title(f"{name}: samples per class", fontsize=8)
        for j, (rnd, matrix) in enumerate(norms):
            ax = axes[i][1 + j]
            sns.heatmap(matrix, cmap="Blues", ax=ax, vmin=0, vmax=top,
                        cbar_kws={"label": "classifier weight norm", "shrink": 0.8})
            ax.set_title(f"{name}: classifier norm, round {rnd}", fontsize=8)
            ax.set_xlabel("client")
            ax.set_ylabel("class")
    return fig, f"{len(cells)} runs"


def plot_calibration(payload, sm):
    spec = payload["spec"]
    df = calibration_records(payload, f"{sm.params.results}/calibrations")
    x = spec.get("x", "samples_per_class")
    hue = spec.get("hue")
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    values = sorted(df[x].unique())
    pos = {v: i for i, v in enumerate(values)}
    df["pos"] = df[x].map(pos)
    groups = df.groupby(hue, sort=False) if hue else [("", df)]
    for k, (name, part) in enumerate(groups):
        color = f"C{k}"
        agg = part.groupby("pos")["acc_after"].agg(["mean", "std"]).reset_index()
        ax.errorbar(agg["pos"], agg["mean"], yerr=agg["std"].fillna(0), marker="o", color=color,
                    label=f"{name} calibrated".strip(), capsize=3)
        ax.axhline(part["acc_before"].mean(), color=color, ls="--", lw=1,
                   label=f"{name} before calibration".strip())
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels([f"{v:g}" for v in values])
    ax.set_xlabel({"fraction": "share of the training data (IID)",
                   "samples_per_class": "virtual features per class, $M_c$"}.get(x, x))
    ax.set_ylabel("test accuracy (%)")
    legend_beside(ax, fontsize=7)  # the lines span the panel: no place inside is free
    return fig, f"{len(df)} calibrations"


def plot_wasserstein(payload, sm):
    spec = payload["spec"]
    df = calibration_records(payload, f"{sm.params.results}/calibrations")
    # the distance is a property of the run's class Gaussians (computed by its ccvr calibration)
    msw = df[df["method"] == "ccvr"].groupby("run_id")["msw"].first()
    df["msw"] = df["run_id"].map(msw)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    sns.scatterplot(data=df, x="msw", y="gain", hue=spec.get("hue"), style=spec.get("style"),
                    s=60, ax=ax)
    retitle(legend_beside(ax, fontsize=7), spec)
    ax.set_xlabel("mean sliced Wasserstein distance between class Gaussians")
    ax.set_ylabel("accuracy gain (pp)")
    if df["msw"].notna().sum() >= 3:
        r = np.corrcoef(df["msw"].astype(float), df["gain"])[0, 1]
        ax.set_title(f"Pearson r = {r:.2f}", fontsize=8, loc="right")
    return fig, f"{len(df)} points"


def plot_calibration_tsne(payload, sm):
    from fedhet.analysis.tsne import calibration_tsne

    opts = payload["spec"].get("options") or {}
    cell = next(c for c in payload["cells"] if c["calibrations"])
    cid = cell["calibrations"][0]
    frame = calibration_tsne(
        Path(f"{sm.params.results}/runs") / cid.split("/")[0],
        Path(f"{sm.params.results}/calibrations") / cid,
        max_points=opts.get("max_points", 1000),
        device=sm.params.device,
    )
    classes = int(frame[["truth", "pred_before", "pred_after"]].to_numpy().max()) + 1
    cmap = class_colours(classes)
    # two panels a row, the class legend in the free slot after the third (three in a row are
    # shrunk past reading in the report's pane)
    fig, axes, slot = panel_grid(3, 3.5, 3.4, legend_w=1.2)
    for ax, col, title in zip(
        axes,
        ("truth", "pred_before", "pred_after"),
        ("ground truth", "prediction before CCVR", "prediction after CCVR"),
        strict=True,
    ):
        ax.scatter(frame["x"], frame["y"], c=[cmap(int(c) % cmap.N) for c in frame[col]], s=6,
                   linewidths=0)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    if slot is not None:
        legend_in(slot, handles=class_handles(classes), fontsize=7,
                  ncol=1 if classes <= 12 else 2)
    else:
        class_legend(axes[-1], [], classes)
    return fig, f"{len(frame)} points"


KINDS = {
    "cka": plot_cka,
    "norms": plot_norms,
    "calibration": plot_calibration,
    "wasserstein": plot_wasserstein,
    "calibration_tsne": plot_calibration_tsne,
}


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    sns.set_theme(style="whitegrid", context="paper")
    try:
        fig, summary = KINDS[payload["kind"]](payload, sm)
    except Exception as err:  # noqa: BLE001
        # e.g. a run trained before its client models were asked for (runtime settings do not
        # retrain): the figure says why it is empty instead of stopping the whole build
        traceback.print_exc(file=sys.stderr)
        fig, ax = plt.subplots(figsize=(6.4, 3.0))
        ax.set_axis_off()
        text = textwrap.fill(f"analysis unavailable: {type(err).__name__}: {err}", 90)
        ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=8)
        summary = f"FAILED: {err}"
    width, height = fig.get_size_inches()
    figure_title(fig, spec["title"])
    add_footnote(fig, figure_notes(sm.wildcards.scale, sm.params.note, spec),
                 width, height)
    save_figure(fig, sm.output[0])
    print(summary, file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
