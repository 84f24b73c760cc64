"""Figure kinds (torch-free): the workflow's one figure rule family dispatches on these.

A kind says which files its figure reads (from the item's runs, calibrations and artefacts),
which script under `workflow/scripts/figures/` draws it, whether it is cheap enough to run on
the submitting machine, and a caption paragraph for the report. Adding a kind is adding an entry
here and its script; no rule changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedhet.registry import Registry

if TYPE_CHECKING:  # only named in annotations: the experiments read this registry
    from fedhet.experiments.cells import Experiment, Item

# (item, experiment, results/<scale>) → files the figure reads
Inputs = Callable[["Item", "Experiment", str], list[str]]


@dataclass(frozen=True)
class FigureKind:
    name: str
    inputs: Inputs
    script: str  # workflow/scripts/figures/<script>.py
    caption: str  # what the figure shows, for the report
    local: bool = True  # cheap: runs on the submitting machine, not as a cluster job


def run_files(*names: str) -> Inputs:
    def inputs(item: Item, exp: Experiment, base: str) -> list[str]:
        return [f"{base}/runs/{rid}/{name}" for rid in item.run_ids() for name in names]

    return inputs


def calibration_files(with_models: bool) -> Inputs:
    def inputs(item: Item, exp: Experiment, base: str) -> list[str]:
        out = [f"{base}/calibrations/{cid}/calibration.json" for cid in item.calibration_ids()]
        if with_models:
            out += [f"{base}/calibrations/{cid}/model.pt" for cid in item.calibration_ids()]
            out += [f"{base}/runs/{rid}/model.pt" for rid in item.run_ids()]
        return out

    return inputs


def first_artefact(item: Item, exp: Experiment, base: str) -> list[str]:
    """The cached artefact (e.g. virtual dataset) of the item's first run that has one."""
    for rid in item.run_ids():
        for aid in exp.run_artefacts.get(rid, []):
            return [f"resources/datasets/{aid}.pt"]
    raise ValueError(f"{item.target}: none of its runs reads a cached artefact")


def first_run_files(*names: str) -> Inputs:
    """`names` of the item's first run (the first seed of its first cell with runs)."""
    def inputs(item: Item, exp: Experiment, base: str) -> list[str]:
        rids = item.run_ids()
        if not rids:
            raise ValueError(f"{item.target}: no cell has a run yet")
        return [f"{base}/runs/{rids[0]}/{name}" for name in names]

    return inputs


def cell_run_files(*names: str) -> Inputs:
    """`names` of the first seed's run of every cell that has runs."""
    def inputs(item: Item, exp: Experiment, base: str) -> list[str]:
        rids = dict.fromkeys(cell.run_ids[0] for cell in item.cells if cell.run_ids)
        return [f"{base}/runs/{rid}/{name}" for rid in rids for name in names]

    return inputs


FIGURE_KINDS: Registry[FigureKind] = Registry("figure kind")
_CCVR = (
    "An analysis of finished runs: saved client models (CKA), the classifier weight norms every "
    "run logs, or the outputs of the post-hoc calibrations (CCVR and the oracle, which retrain "
    "only the classifier of a run's saved model). Nothing here retrains a federation."
)
for _kind in (
    FigureKind(
        "curve",
        run_files("metrics.jsonl"),
        "curve",
        "A metric per round, mean over seeds (band: ± std when there are several). Methods not "
        "implemented yet are listed in the notes below and left out.",
    ),
    FigureKind(
        "layer_divergence",
        run_files("metrics.jsonl"),
        "layer_divergence",
        "Weight divergence per round (mean over the round's clients of the distance between a "
        "client's model and the new global model), (a) for evenly spaced weight layers "
        "(convolutions and linear maps, shallow to deep), (b) for the model's split stages and "
        "its classifier; each line is divided by its own maximum.",
    ),
    FigureKind(
        "inversion",
        run_files("final.json", "model.pt"),
        "inversion",
        "Model inversion: inputs optimised from noise until the model's feature at the split "
        "point matches a target, (top) the original test images, (middle) inverted from each "
        "image's own split feature, (bottom) inverted from the class mean the clients share. "
        "What a shared feature reveals of the data.",
        local=False,
    ),
    FigureKind(
        "bars",
        run_files("final.json"),
        "bars",
        "A final metric (e.g. the mean of the 5 best rounds' accuracy) as grouped bars, one group "
        "per value of one axis and one bar per value of another, mean over seeds (error bar: "
        "± std when there are several). Cells not run yet are listed in the notes below.",
    ),
    FigureKind(
        "bias",
        run_files("final.json", "resolved.yaml", "model.pt"),
        "bias",
        "Local learning bias: a centralized run's model F_g trained further on the first half of "
        "the classes only (F_1); (a) t-SNE of the penultimate features of F_g and F_1 on test "
        "images of those classes and of F_1 on the others, (b) F_1's softmax on a test image of "
        "the last class, (c) the classes F_1 predicts for the images of classes it did not "
        "train on.",
        local=False,
    ),
    FigureKind(
        "virtual_grid",
        first_artefact,
        "virtual_grid",
        "The first images of each class of a cached virtual dataset, one row per class (the "
        "dataset every run with these virtual-data settings trains on).",
    ),
    FigureKind(
        "tsne",
        run_files("final.json", "model.pt"),
        "tsne",
        "t-SNE of the features (input of the classifier) of a few clients' models of the last "
        "round on the natural test set, coloured by class, one marker per client.",
        local=False,
    ),
    FigureKind("cka", run_files("model.pt"), "ccvr_analysis", _CCVR, local=False),
    FigureKind("norms", run_files("final.json"), "ccvr_analysis", _CCVR, local=False),
    FigureKind("calibration", calibration_files(False), "ccvr_analysis", _CCVR, local=False),
    FigureKind("wasserstein", calibration_files(False), "ccvr_analysis", _CCVR, local=False),
    FigureKind(
        "calibration_tsne", calibration_files(True), "ccvr_analysis", _CCVR, local=False
    ),
    FigureKind(
        "sweep",
        run_files("final.json"),
        "sweep",
        "A final metric (last-round accuracy, mean of the 5 best rounds, or the unweighted mean "
        "over the domains of the last round's per-domain accuracy) against one setting, one line "
        "per value of another, mean over seeds (error bars: ± std when there are several). "
        "Cells not run yet are listed in the notes below.",
    ),
    FigureKind(
        "distilled_grid",
        # the run's final.json: the training rule declares no plug-in files, so the script
        # reads plugins/fedlgd/fedlgd_virtual.pt beside it
        first_run_files("final.json"),
        "distilled_grid",
        "FedLGD's virtual data at the end of training (the first seed's run): the first images "
        "of each class (one row per class) of every client's local virtual data and of the "
        "server's global virtual data, one panel each. Each image is rescaled to its own "
        "minimum and maximum for display (the data lives in normalised input space).",
    ),
    FigureKind(
        "distilled_tsne",
        first_artefact,
        "distilled_tsne",
        "t-SNE of raw pixels (normalised as the runs normalise them) of two clients' original "
        "training images (a seeded subsample per class) and of their initial distilled virtual "
        "images (the cached artefact, before federated training), in one embedding, one panel "
        "per client; colour: class, marker: original or distilled.",
        local=False,
    ),
    FigureKind(
        "pixel_hist",
        first_run_files("resolved.yaml"),
        "pixel_hist",
        "Pixel-intensity histograms (share of pixels per intensity bin, all images of a client) "
        "of every client's raw training data in the first seed's run, one line per client, one "
        "panel per colour channel: how far apart the clients' input distributions are.",
        local=False,
    ),
    FigureKind(
        "mia_roc",
        cell_run_files("final.json", "resolved.yaml", "model.pt"),
        "mia_roc",
        "Membership inference by loss threshold (a simplification of LiRA): the final global "
        "model's cross entropy decides whether an image was a client's raw training image "
        "(member) or a test image (non-member), on equally many of each (seeded subsample). "
        "ROC on log-log axes, one line per cell (first seed); the legend gives the AUC and the "
        "true-positive rate at 1 % false positives. The diagonal is a guessing attacker.",
        local=False,
    ),
    FigureKind(
        "domain_tsne",
        cell_run_files("final.json", "resolved.yaml", "model.pt"),
        "domain_tsne",
        "t-SNE of the final global model's features (the classifier input) on test images of "
        "two domains (a seeded subsample), one panel per cell (first seed); colour: class, "
        "marker: domain. Features of one class that mix across domains mean the model "
        "learned a domain-invariant representation.",
        local=False,
    ),
):
    FIGURE_KINDS.add(_kind.name, _kind)
del _kind
