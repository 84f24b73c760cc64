"""Figure kinds (torch-free): the workflow's one figure rule family dispatches on these.

A kind says which files its figure reads (from the item's runs, calibrations and artefacts),
which script under `workflow/scripts/figures/` draws it, whether it is cheap enough to run on
the submitting machine, and a caption paragraph for the report. Adding a kind is adding an entry
here and its script; no rule changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fedhet.experiments.cells import Experiment, Item
from fedhet.registry import Registry

# (item, experiment, results/<scale>) → files the figure reads
Inputs = Callable[[Item, Experiment, str], list[str]]


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
        "implemented yet are listed under the plot and left out.",
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
        "± std when there are several). Cells not run yet are listed under the plot.",
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
):
    FIGURE_KINDS.add(_kind.name, _kind)
del _kind
