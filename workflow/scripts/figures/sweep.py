"""A paper figure of a final metric against one setting (FedLGD Figs. 3 and 7): one line per value
of the figure's `hue` axis, the mean over seeds with ± std error bars, one panel per value of
`facet` when it has one (Snakemake script; matplotlib, Agg backend).

Spec keys: `x` (the swept axis, required), `hue`, `facet`, `metric` (last_acc, top5_acc,
local_top5_acc, best_acc, mean_domain_acc, mean_domain_loss; the domain means are unweighted
means over final.json's last_domain_acc / last_domain_loss), `xlabel`, `ylabel`, `yscale`, `note`,
`scale_note`, and `options.x_scale`: `categorical` (default: the x values evenly spaced, in
numeric order when all of them are numbers), `linear` or `log` (numeric positions).
"""

import json
import re
import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fedhet.figures.footnote import add_footnote, item_notes  # noqa: E402
from fedhet.figures.save import save_figure  # noqa: E402
from fedhet.figures.labels import axis_title, metric_label  # noqa: E402
from fedhet.figures.titles import figure_title  # noqa: E402

# figure metric → final.json key (fractions, drawn in %)
FINAL_KEYS = {
    "top5_acc": "top5_mean_acc",
    "local_top5_acc": "local_top5_mean_acc",
    "last_acc": "last_acc",
    "best_acc": "best_acc",
}
# figure metric → final.json dict (domain name → value of the last evaluated round)
DOMAIN_KEYS = {"mean_domain_acc": "last_domain_acc", "mean_domain_loss": "last_domain_loss"}
NOT_PERCENT = {"mean_domain_loss"}
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def metric_value(final: dict, metric: str) -> float | None:
    """The metric of one run's final.json as a fraction (None when the run has none)."""
    if metric in DOMAIN_KEYS:  # unweighted mean over the domains of the last round
        domains = final.get(DOMAIN_KEYS[metric])
        if not domains:
            return None
        return float(np.mean([float(v) for v in domains.values()]))
    if metric not in FINAL_KEYS:
        raise ValueError(f"sweep figures draw {sorted([*FINAL_KEYS, *DOMAIN_KEYS])}, "
                         f"not {metric!r}")
    value = final.get(FINAL_KEYS[metric])
    return None if value is None else float(value)


def number_of(cell: dict, axis: str) -> float | None:
    """The numeric value of `axis` in a cell: its printed label or its vocabulary key when
    either holds exactly one number, else None."""
    for text in (cell["display"].get(axis), cell.get("labels", {}).get(axis)):
        found = NUMBER.findall(str(text)) if text is not None else []
        if len(found) == 1:
            return float(found[0])
    return None


def load_sweep(payload: dict, final_files: dict[str, Path]) -> tuple[pd.DataFrame, list[str]]:
    """One row per run (x label, x number, hue, facet, seed, value in %) and the cells not
    shown, with why."""
    spec = payload["spec"]
    metric = spec.get("metric", "last_acc")
    axis, hue, facet = spec["x"], spec.get("hue"), spec.get("facet")
    rows, missing = [], []
    for cell in payload["cells"]:
        d = cell["display"]
        name = " · ".join(d[a] for a in (facet, hue, axis) if a)
        if cell["pending"]:
            missing.append(f"{name} ({cell['pending']})")
            continue
        for seed, run_id in enumerate(cell["run_ids"]):
            final = json.loads(final_files[run_id].read_text())
            value = metric_value(final, metric)
            if value is None:
                missing.append(f"{name}, seed {seed} (no {metric}: run {final.get('status')})")
                continue
            rows.append({"x": d[axis], "x_value": number_of(cell, axis),
                         "hue": d[hue] if hue else "", "facet": d[facet] if facet else "",
                         "seed": seed, "value": value if metric in NOT_PERCENT else 100.0 * value})
    columns = ["x", "x_value", "hue", "facet", "seed", "value"]
    return pd.DataFrame(rows, columns=columns), missing


def x_positions(payload: dict, scale: str) -> dict[str, float]:
    """x label → position: evenly spaced (categorical) or the numbers themselves."""
    axis = payload["spec"]["x"]
    labels = list(dict.fromkeys(c["display"][axis] for c in payload["cells"]))
    numbers = {c["display"][axis]: number_of(c, axis) for c in payload["cells"]}
    numeric = all(numbers[x] is not None for x in labels)
    if scale in ("linear", "log"):
        if not numeric:
            raise ValueError(f"options.x_scale {scale!r} needs numeric values of {axis!r}, "
                             f"got {labels}")
        return {x: numbers[x] for x in labels}
    if numeric:
        labels.sort(key=lambda x: numbers[x])
    return {x: float(i) for i, x in enumerate(labels)}


def ran_at_scale(payload: dict) -> dict[str, str]:
    """x label (the paper's value) → the value that ran at this scale, where the scale changed
    it (a fifth of |τ|, at least 1: the paper's 2 and 5 both run as 1)."""
    axis = payload["spec"]["x"]
    return {c["display"][axis]: c["ran"][axis] for c in payload["cells"]
            if axis in (c.get("ran") or {})}


def tick_labels(labels: list[str], ran: dict[str, str]) -> list[str]:
    """What ran, over the paper's value it stands for, where the two differ."""
    return [f"{ran[x]}\n(paper {x})" if x in ran else x for x in labels]


def draw(ax, df: pd.DataFrame, hues: list[str], where: dict[str, float]) -> None:
    """One line per hue value: mean over seeds, ± std error bars where there are several."""
    stats = df.groupby(["hue", "x"])["value"].agg(["mean", "std", "count"]).reset_index()
    for j, hue in enumerate(hues):
        part = stats[stats["hue"] == hue].copy()
        if part.empty:
            continue
        part["pos"] = part["x"].map(where)
        part = part.sort_values("pos")
        err = np.where(part["count"] > 1, part["std"].fillna(0.0), 0.0)
        ax.errorbar(part["pos"].to_numpy(float), part["mean"].to_numpy(float),
                    yerr=err if err.any() else None,
                    color=f"C{j}", marker="o", markersize=4, capsize=3, linewidth=1.2,
                    label=hue or None)


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    options = spec.get("options") or {}
    scale = options.get("x_scale", "categorical")
    metric = spec.get("metric", "last_acc")
    files = {Path(p).parent.name: Path(p) for p in sm.input}
    df, missing = load_sweep(payload, files)
    where = x_positions(payload, scale)
    ran = ran_at_scale(payload)
    ticks = tick_labels(sorted(where, key=where.get), ran)
    hues = list(dict.fromkeys(c["display"][spec["hue"]] for c in payload["cells"])) \
        if spec.get("hue") else [""]
    facet = spec.get("facet")
    panels = list(dict.fromkeys(c["display"][facet] for c in payload["cells"])) \
        if facet else [""]
    width = min(14.0, 4.4 + 3.2 * (len(panels) - 1) + (1.6 if spec.get("hue") else 0.0))
    fig, axes = plt.subplots(1, len(panels), figsize=(width, 4.2), sharey=True, squeeze=False)
    axes = axes[0]
    if df.empty:
        axes[0].text(0.5, 0.5, "no point yet (every cell pending)", ha="center", va="center")
        for ax in axes:
            ax.set_axis_off()
    else:
        for k, (ax, panel) in enumerate(zip(axes, panels, strict=True)):
            draw(ax, df[df["facet"] == panel], hues, where)
            ax.grid(alpha=0.3)
            if scale == "categorical":
                ax.set_xticks(sorted(where.values()))
                ax.set_xticklabels(ticks)
                ax.set_xlim(-0.4, len(where) - 0.6)
            else:
                ax.set_xscale(scale)
                ax.set_xticks(sorted(where.values()))
                ax.set_xticklabels(ticks)
                ax.minorticks_off()
            if spec.get("yscale"):
                ax.set_yscale(spec["yscale"])
            ax.set_xlabel(spec.get("xlabel") or axis_title(spec["x"], spec) or "")
            if k == 0:
                ax.set_ylabel(spec.get("ylabel", metric_label(metric)))
            if panel:
                ax.set_title(panel, fontsize=8)
        if spec.get("hue"):  # beside the last panel: never over a line
            axes[-1].legend(title=axis_title(spec["hue"], spec), fontsize=7, title_fontsize=7,
                            frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure_title(fig, spec["title"])
    notes = [f"scale {sm.wildcards.scale}: {sm.params.note}"]
    seeds = int(df["seed"].nunique()) if not df.empty else 0
    if seeds > 1:
        notes.append(f"Points: mean over {seeds} seeds, error bars ± std.")
    elif seeds == 1:
        notes.append("One seed per point (no error bars).")
    if ran:
        pairs = ", ".join(f"{ran[x]} (paper {x})" for x in sorted(where, key=where.get)
                          if x in ran)
        what = spec.get("xlabel") or axis_title(spec["x"], spec) or "the x axis"
        notes.append(f"At this scale {what} ran as {pairs}: points at the same number ran "
                     "the same setting.")
    notes += item_notes(spec)
    if missing:
        notes.append("not shown: " + "; ".join(missing))
    add_footnote(fig, notes, width)
    save_figure(fig, sm.output[0], tight=True)
    print(f"{len(df)} runs, {len(missing)} not shown", file=sys.stderr)
    if not df.empty:
        print(df.groupby(["facet", "hue", "x"])["value"].agg(["mean", "std", "count"])
              .to_string(), file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
