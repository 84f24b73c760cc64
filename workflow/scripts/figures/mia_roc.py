"""Membership-inference ROC by loss threshold (FedLGD Fig. 17): for every cell's first-seed run,
the final global model's cross entropy scores its clients' raw training images (members)
against test images (non-members), equally many of each; ROC on log-log axes, the legend
giving the AUC and the TPR at 1 % FPR. `fedhet figure-data membership` computes the ROCs
(`fedhet.analysis.mia`); this only plots them (Snakemake script; matplotlib, Agg backend).

Spec keys: `options.samples` (members and non-members each, at most; default 2000),
`options.seed` (default 0), `note`, `scale_note`.
"""

import json
import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])  # on the workflow's fork server, when one runs this job

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fedhet.figures.commands import cell_labels, figure_data  # noqa: E402


def main(sm) -> None:
    from fedhet.figures.footnote import add_footnote, item_notes
    from fedhet.figures.save import save_figure
    from fedhet.figures.labels import runs_label
    from fedhet.figures.titles import figure_title

    payload = sm.params.payload
    spec = payload["spec"]
    options = spec.get("options") or {}
    samples = int(options.get("samples", 2000))
    seed = int(options.get("seed", 0))
    cells = [c for c in payload["cells"] if c["run_ids"]]
    pending = [c for c in payload["cells"] if not c["run_ids"]]
    if not cells:
        reasons = "; ".join(c["pending"] or "no run" for c in pending)
        raise SystemExit(f"{payload.get('id', 'figure')}: no run to analyse ({reasons})")
    runs = [str(Path(sm.params.results) / "runs" / c["run_ids"][0]) for c in cells]
    data = figure_data("membership", ["--runs", *runs], {"samples": samples, "seed": seed},
                       getattr(sm.params, "device", "auto"))
    width = 6.4
    fig, ax = plt.subplots(figsize=(width, 4.6))
    summary = {}
    floor = 1.0
    for j, (result, label) in enumerate(zip(data["runs"], cell_labels(cells), strict=True)):
        fpr, tpr = np.asarray(result["fpr"]), np.asarray(result["tpr"])
        keep = (fpr > 0) & (tpr > 0)  # log axes: zero rates cannot be drawn
        floor = min(floor, 1.0 / max(result["nonmembers"], 1))
        ax.plot(fpr[keep], tpr[keep], color=f"C{j}", linewidth=1.3,
                label=f"{label}: AUC {result['auc']:.3f}, "
                      f"TPR@1%FPR {100 * result['tpr_at_1pct_fpr']:.1f}%")
        summary[label] = {"run": result["run"], "auc": result["auc"],
                          "tpr_at_1pct_fpr": result["tpr_at_1pct_fpr"],
                          "members": result["members"], "nonmembers": result["nonmembers"]}
    guess = np.logspace(np.log10(floor), 0, 50)
    ax.plot(guess, guess, color="grey", linestyle="--", linewidth=0.9,
            label="chance (random guess)")
    ax.axvline(0.01, color="grey", linestyle=":", linewidth=0.8, label="1% false-positive rate")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1.0)
    ax.set_ylim(floor, 1.05)
    ax.set_xlabel("false-positive rate (test images called members)")
    ax.set_ylabel("true-positive rate (training images called members)")
    ax.grid(alpha=0.3)
    # below the diagonal: where an attacker better than chance draws no line
    ax.legend(fontsize=7, framealpha=0.9, loc="lower right")
    figure_title(fig, spec["title"])
    n = next(iter(summary.values()))["members"]
    notes = [f"scale {sm.wildcards.scale}: {sm.params.note}",
             f"Score: minus the cross entropy of the final global model. Members: {n} of the "
             f"clients' raw training images; non-members: {n} test images (seeded subsample, "
             "balanced). First seed's run of each cell."]
    if pending:
        notes.append("not shown: " + "; ".join(
            f"{runs_label(c, spec)} ({c['pending']})" for c in pending))
    notes += item_notes(spec)
    add_footnote(fig, notes, width, 4.6)
    save_figure(fig, sm.output[0], tight=True)
    print(json.dumps(summary, indent=1), file=sys.stderr)


if __name__ == "__main__":
    with open(snakemake.log[0], "w") as log:  # noqa: F821 (set by Snakemake)
        sys.stderr = log
        main(snakemake)  # noqa: F821
