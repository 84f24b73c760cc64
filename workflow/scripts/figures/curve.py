"""A paper figure of per-round curves (test accuracy, client drift, ...) from the runs' metric
logs (Snakemake script; pandas + seaborn, Agg backend)."""

import json
import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fedhet.figures.footnote import add_footnote, figure_notes  # noqa: E402
from fedhet.figures.save import save_figure  # noqa: E402
from fedhet.figures.legends import legend_beside, legend_in, panel_grid, retitle  # noqa: E402
from fedhet.figures.titles import figure_title  # noqa: E402

PERCENT = {"test_acc", "mean_domain_acc"}


def load_curves(payload, metric_files):
    spec = payload["spec"]
    metric = spec["metric"]
    rows, pending = [], []
    for cell in payload["cells"]:
        name = " · ".join(cell["display"][a] for a in (spec.get("hue"), spec.get("style")) if a)
        if cell["pending"]:
            pending.append(f"{name} ({cell['pending']})")
            continue
        for seed, run_id in enumerate(cell["run_ids"]):
            for line in metric_files[run_id].read_text().splitlines():
                if not line.strip():
                    continue
                rec = json.loads(line)
                value = rec.get(metric)
                if value is None:
                    continue
                rows.append(
                    {
                        "round": int(rec["round"]),
                        "train_seconds": rec.get("train_seconds"),
                        "value": 100.0 * value if metric in PERCENT else float(value),
                        "seed": seed,
                        **{axis: cell["display"][axis] for axis in cell["display"]},
                    }
                )
    return pd.DataFrame(rows), pending


def draw(ax, df, spec, several: bool, legend: bool) -> None:
    """One panel: the metric against the round, a line per hue (and style) value."""
    by_time = spec.get("x") == "train_seconds"
    sns.lineplot(
        data=df,
        x="train_seconds" if by_time else "round",
        y="value",
        hue=spec.get("hue"),
        style=spec.get("style"),
        errorbar="sd" if several else None,
        legend="auto" if legend else False,
        ax=ax,
    )
    if ax.get_legend() is not None:  # beside the panel: over no curve
        retitle(legend_beside(ax, fontsize=7, title_fontsize=7), spec)
    if spec.get("yscale"):
        ax.set_yscale(spec["yscale"])
    if by_time:
        ax.set_xlabel("training time (s, measured on this machine)")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
        ax.set_xlabel("communication round")
    ax.set_ylabel(spec.get("ylabel", spec["metric"]))


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    files = {Path(p).parent.name: Path(p) for p in sm.input}
    df, pending = load_curves(payload, files)
    sns.set_theme(style="whitegrid", context="paper")
    facet = spec.get("facet")
    panels = list(dict.fromkeys(df[facet])) if facet and not df.empty else [None]
    keyed = spec.get("hue") or spec.get("style")
    if len(panels) == 1:
        width, height = 6.4 + (1.6 if keyed else 0.0), 4.2
        fig, axes = plt.subplots(1, 1, figsize=(width, height), squeeze=False)
        axes, slot = list(axes[0]), None
    else:  # two panels a row: four in a row are shrunk past reading in the report's pane
        fig, axes, slot = panel_grid(len(panels), 3.6, 3.1, 1.6 if keyed else 0.0, sharey=True)
        width, height = fig.get_size_inches()
        height += 0.5  # the title
    if df.empty:
        axes[0].text(0.5, 0.5, "no curve yet (all methods pending)", ha="center", va="center")
        axes[0].set_axis_off()
    else:
        fraction = spec.get("max_round_fraction")
        if fraction:
            df = df[df["round"] <= max(1, round(df["round"].max() * fraction))]
        several = df["seed"].nunique() > 1
        for k, (ax, panel) in enumerate(zip(axes, panels)):
            part = df if panel is None else df[df[facet] == panel]
            draw(ax, part, spec, several, legend=k == len(panels) - 1)
            if panel is not None:
                ax.set_title(panel, fontsize=8)
            if slot is not None and ax.get_legend() is not None:
                legend_in(slot, ax, fontsize=7, title_fontsize=7)
    figure_title(fig, spec["title"])
    notes = figure_notes(sm.wildcards.scale, sm.params.note, spec)
    if pending:
        notes.append("not shown (pending): " + "; ".join(pending))
    add_footnote(fig, notes, width, height)
    save_figure(fig, sm.output[0])
    print(f"{len(df)} points, {len(pending)} pending", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
