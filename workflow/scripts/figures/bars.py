"""A paper figure of grouped bars (FedBR Fig. 6): a final.json metric, one group per value of the
figure's `x` axis, one bar per value of its `hue` axis, mean over seeds (error bar: ± std when
there are several), the value printed on each bar (Snakemake script; matplotlib, Agg backend)."""

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

from fedhet.figures.footnote import add_footnote, item_notes  # noqa: E402
from fedhet.figures.save import save_figure  # noqa: E402
from fedhet.figures.labels import axis_title, metric_label  # noqa: E402
from fedhet.figures.titles import figure_title  # noqa: E402

# figure metric → final.json key (fractions, drawn in %)
FINAL_KEYS = {
    "top5_acc": "top5_mean_acc",
    "local_top5_acc": "local_top5_mean_acc",
    "last_acc": "last_acc",
}


def label(cell: dict, axis: str | None) -> str:
    """The cell's printed value of `axis` ("" without one)."""
    return cell["display"][axis] if axis else ""


def load_bars(payload: dict, final_files: dict[str, Path]) -> tuple[pd.DataFrame, list[str]]:
    """One row per run (x, hue, seed, value in %) and the cells not shown, with why."""
    spec = payload["spec"]
    metric = spec.get("metric", "top5_acc")
    key = FINAL_KEYS[metric]
    rows, missing = [], []
    for cell in payload["cells"]:
        x, hue = label(cell, spec.get("x")), label(cell, spec.get("hue"))
        name = " · ".join(n for n in (x, hue) if n) or "the bar"
        if cell["pending"]:
            missing.append(f"{name} ({cell['pending']})")
            continue
        for seed, run_id in enumerate(cell["run_ids"]):
            final = json.loads(final_files[run_id].read_text())
            if final.get(key) is None:
                missing.append(f"{name}, seed {seed} (no {metric}: run {final.get('status')})")
                continue
            rows.append({"x": x, "hue": hue, "seed": seed, "value": 100.0 * final[key]})
    return pd.DataFrame(rows, columns=["x", "hue", "seed", "value"]), missing


def draw(ax, df: pd.DataFrame, groups: list[str], hues: list[str]) -> None:
    """Bars at fixed slots (a missing cell leaves its slot empty), values printed on top."""
    stats = df.groupby(["x", "hue"])["value"].agg(["mean", "std", "count"])
    width = 0.8 / len(hues)
    top = 0.0
    for j, hue in enumerate(hues):
        shown = [(i, stats.loc[(g, hue)]) for i, g in enumerate(groups) if (g, hue) in stats.index]
        if not shown:
            continue
        pos = [i - 0.4 + width * (j + 0.5) for i, _ in shown]
        means = [s["mean"] for _, s in shown]
        errs = [s["std"] if s["count"] > 1 else 0.0 for _, s in shown]
        ax.bar(pos, means, width * 0.95, color=f"C{j}", label=hue or None)
        spread = [(p, m, e) for p, m, e in zip(pos, means, errs, strict=True) if e > 0]
        if spread:  # ± std of the seeds
            ax.errorbar(*zip(*spread, strict=True), fmt="none", ecolor="black", capsize=3)
        for p, m, e in zip(pos, means, errs, strict=True):
            ax.annotate(f"{m:.1f}", (p, m + e), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=6)
            top = max(top, m + e)
    ax.grid(axis="x", visible=False)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylim(0, top * 1.12 if top > 0 else 1)


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    files = {Path(p).parent.name: Path(p) for p in sm.input}
    df, missing = load_bars(payload, files)
    groups = list(dict.fromkeys(label(c, spec.get("x")) for c in payload["cells"]))
    hues = list(dict.fromkeys(label(c, spec.get("hue")) for c in payload["cells"]))
    sns.set_theme(style="whitegrid", context="paper")
    width = min(12.0, 3.6 + 0.45 * len(groups) * len(hues))
    fig, ax = plt.subplots(figsize=(width, 4.2))
    if df.empty:
        ax.text(0.5, 0.5, "no bars yet (every cell pending)", ha="center", va="center")
        ax.set_axis_off()
    else:
        draw(ax, df, groups, hues)
        ax.set_xlabel(axis_title(spec.get("x"), spec) or "")
        ax.set_ylabel(spec.get("ylabel") or metric_label(spec.get("metric", "top5_acc")))
        if spec.get("hue"):  # beside the axes: never over a bar
            ax.legend(title=axis_title(spec["hue"], spec), fontsize=7, title_fontsize=7,
                      frameon=False,
                      loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure_title(fig, spec["title"])
    notes = [f"scale {sm.wildcards.scale}: {sm.params.note}"]
    seeds = int(df["seed"].nunique()) if not df.empty else 0
    if seeds > 1:
        notes.append(f"Bars: mean over {seeds} seeds, error bars ± std.")
    notes += item_notes(spec)
    if missing:
        notes.append("not shown: " + "; ".join(missing))
    add_footnote(fig, notes, width)
    save_figure(fig, sm.output[0])
    print(f"{len(df)} runs, {len(missing)} not shown", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
