"""Layer-wise weight divergence per round (FedImpro Figs. 3 and 9) from the runs' metric logs:
one row of panels per cell (dataset), (a) up to `layers` evenly spaced weight layers shallow to
deep, (b) the model's split stages and its head; each line divided by its own maximum, as the
paper does (Snakemake script; pandas + seaborn, Agg backend)."""

import json
import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fedhet.figures.footnote import add_footnote, figure_notes  # noqa: E402
from fedhet.figures.save import save_figure  # noqa: E402
from fedhet.figures.labels import layer_labels  # noqa: E402
from fedhet.figures.legends import legend_beside  # noqa: E402
from fedhet.figures.titles import figure_title  # noqa: E402

GROUPS = (("layer_divergence", "weight layers"), ("stage_divergence", "stages"))


def evenly_spaced(names: list[str], count: int) -> list[str]:
    """`count` names spread over `names` from the first to the last (all when fewer)."""
    if len(names) <= count:
        return names
    picks = np.linspace(0, len(names) - 1, count).round().astype(int)
    return [names[i] for i in dict.fromkeys(picks)]


def load(path: Path, key: str, count: int) -> pd.DataFrame:
    """Rounds × groups of one run, seeds averaged by the caller, each line ÷ its maximum; the
    groups by their printed names (layer k of n, block k, classifier)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get(key)]
    if not rows:
        return pd.DataFrame()
    names = list(rows[0][key])
    printed = dict(zip(names, layer_labels(names), strict=True))
    if key == "layer_divergence":
        names = evenly_spaced(names, count)
    frame = pd.DataFrame([{"round": r["round"], **{printed[n]: r[key][n] for n in names}}
                          for r in rows])
    long = frame.melt(id_vars="round", var_name="group", value_name="value")
    peak = long.groupby("group")["value"].transform("max")
    long["value"] = long["value"] / peak.where(peak > 0, 1.0)
    return long


def main(sm) -> None:
    payload = sm.params.payload
    spec = payload["spec"]
    count = int((spec.get("options") or {}).get("layers", 10))
    files = {Path(p).parent.name: Path(p) for p in sm.input}
    cells = [c for c in payload["cells"] if not c["pending"] and c["run_ids"]]
    sns.set_theme(style="whitegrid", context="paper")
    # two panels a row, 8.6 inches wide: the report's pane shows their legends readably
    rows = max(1, len(cells))
    fig, axes = plt.subplots(rows, 2, figsize=(8.6, 3.3 * rows + 0.5), squeeze=False)
    for row, cell in enumerate(cells):
        title = ", ".join(cell["display"][a] for a in ("dataset", "algorithm")
                          if a in cell["display"])
        for col, (key, what) in enumerate(GROUPS):
            ax = axes[row][col]
            parts = [load(files[rid], key, count).assign(seed=s)
                     for s, rid in enumerate(cell["run_ids"])]
            df = pd.concat(parts) if parts else pd.DataFrame()
            if df.empty:
                ax.text(0.5, 0.5, f"no {what} logged", ha="center", va="center")
                ax.set_axis_off()
                continue
            sns.lineplot(data=df, x="round", y="value", hue="group", errorbar=None, ax=ax)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("communication round")
            ax.set_ylabel("divergence ÷ its maximum")
            ax.set_title(f"({'ab'[col]}) {what}: {title}", fontsize=8)
            legend_beside(ax, fontsize=6.5, title=what, title_fontsize=6.5)
    width, height = fig.get_size_inches()
    figure_title(fig, spec["title"])
    add_footnote(fig, figure_notes(sm.wildcards.scale, sm.params.note, spec), width, height)
    save_figure(fig, sm.output[0])
    print(f"{len(cells)} runs", file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
