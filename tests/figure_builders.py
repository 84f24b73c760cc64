"""Every figure kind drawn from small synthetic inputs, as its drawing code produces it (the
figure tests share them): a payload's cells, the runs' files a script reads, and per kind a
function of (tmp_path, monkeypatch) that returns its figure; `FIGURES` maps a case to its kind
and builder."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from fedhet.analysis.bias import SETS, bias_figure  # noqa: E402
from fedhet.analysis.inversion import inversion_figure  # noqa: E402
from fedhet.analysis.mia import roc_summary  # noqa: E402
from fedhet.virtual.cli import client_tsne_figure  # noqa: E402
from fedhet.virtual.grid import virtual_grid_figure  # noqa: E402
from test_fedbr_figures import bars_payload  # noqa: E402
from test_fedlgd_figures import sm_of, sweep_payload, write_finals  # noqa: E402
from test_figures import load_script  # noqa: E402

DEMO = ("Offline demo: digits10/digits100 stand-ins (built from scikit-learn's handwritten "
        "digits) at 16×16 pixels instead of CIFAR-10, FMNIST, SVHN and CIFAR-100; a narrow "
        "ConvNet instead of ResNet-18/50 and MobileNetV2; 2% of the papers' rounds (at least 3).")
SCALE_NOTE = ("This scale runs only mc: M_c = 0, M_c = 100, M_c = 1000 "
              "(config/scales → restrict).")
NOTE = f"scale demo: {DEMO}"  # the first paragraph of every footnote


def cell(display: dict, run_ids: list[str], pending: str | None = None,
         calibrations: list[str] = ()) -> dict:
    """A cell of a figure's payload, as the workflow hands it to the script."""
    labels = {k: v.lower().replace(" ", "-") for k, v in display.items()}
    return {"display": display, "labels": labels, "run_ids": run_ids, "pending": pending,
            "calibrations": list(calibrations), "row": "", "column": ""}


def write_runs(tmp_path: Path, name: str, rows: dict[str, list[dict] | dict]) -> list[str]:
    """results/runs/<rid>/<name> of every run: JSON lines from a list, JSON from a dict."""
    paths = []
    for rid, content in rows.items():
        path = tmp_path / "results" / "runs" / rid / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in content)
                        if isinstance(content, list) else json.dumps(content))
        paths.append(str(path))
    return paths


def run_script(name: str, payload: dict, tmp_path: Path, inputs: list[str] | None = None,
               answer: dict | None = None) -> Figure:
    """The figure the script `name` draws; with `answer`, what its `fedhet figure-data` call
    returns instead of running the command."""
    plt.close("all")
    module = load_script(name)
    if answer is not None:
        module.figure_data = lambda kind, source, options, device: json.loads(json.dumps(answer))
    module.main(sm_of(payload, tmp_path, inputs, note=DEMO))
    return plt.gcf()


def curve_figure(tmp_path, monkeypatch):
    """FedBR Fig. 5a: six methods' accuracy per round, two seeds each; the curves cross and
    run along the top and the bottom, so no place in the panel is free for a legend."""
    shapes = {"FedAvg": lambda r: 10 + 4 * r, "FedProx": lambda r: 85 - 3.5 * r,
              "SCAFFOLD": lambda r: 40 + 0 * r, "MOON": lambda r: 20 + 3 * r,
              "FedDyn": lambda r: 88 + 0 * r, "FedBR": lambda r: 15 + 0 * r}
    runs, cells = {}, []
    for name, shape in shapes.items():
        ids = [f"{name}-{s}" for s in range(2)]
        for s, rid in enumerate(ids):
            runs[rid] = [{"round": r, "test_acc": (shape(r) + s) / 100} for r in range(1, 21)]
        cells.append(cell({"method": name}, ids))
    payload = {"spec": {"metric": "test_acc", "title": "Figure 5a: test accuracy per round",
                        "hue": "method", "ylabel": "test accuracy (%)", "scale_note": SCALE_NOTE},
               "cells": cells}
    return run_script("curve", payload, tmp_path, write_runs(tmp_path, "metrics.jsonl", runs))


def layer_divergence_figure(tmp_path, monkeypatch):
    """FedImpro Fig. 3: ten weight layers and four stages, decaying over twelve rounds."""
    layers = [f"layer{i}.conv.weight" for i in range(10)]
    stages = ["stage1", "stage2", "stage3", "head"]
    rows = [{"round": r,
             "layer_divergence": {n: (i + 1) / (r + i) for i, n in enumerate(layers)},
             "stage_divergence": {n: (i + 2) / (r + 1) for i, n in enumerate(stages)}}
            for r in range(1, 13)]
    payload = {"spec": {"title": "Figure 3: layer-wise weight divergence", "options": {}},
               "cells": [cell({"dataset": "CIFAR-10", "algorithm": "FedAvg"}, ["r1"])]}
    return run_script("layer_divergence", payload, tmp_path,
                      write_runs(tmp_path, "metrics.jsonl", {"r1": rows}))


def bars_figure(tmp_path, monkeypatch):
    """FedBR Fig. 6: two datasets × two methods, one pending."""
    values = {"a0": 0.50, "a1": 0.60, "b0": 0.70, "c0": 0.40}
    inputs = write_runs(tmp_path, "final.json", {rid: {"top5_mean_acc": acc} for rid, acc
                                                 in values.items()})
    return run_script("bars", bars_payload(), tmp_path, inputs)


def sweep_figure(tmp_path, monkeypatch):
    """FedLGD Fig. 3: a final accuracy against λ, one line per regulariser."""
    payload = sweep_payload("last_acc")
    inputs, _ = write_finals(tmp_path / "results", payload)
    return run_script("sweep", payload, tmp_path, inputs)


# CCVR's analyses: the analysis functions answer with small synthetic frames

CCVR_CELLS = [cell({"data": "CIFAR-10 IID"}, ["iid"]), cell({"data": "CIFAR-10 α=0.1"}, ["a01"])]


def cka_frame(*args, **kwargs) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame([{"layer": layer, "client_a": a, "client_b": b,
                          "cka": 1.0 if a == b else rng.uniform(0.3, 0.9)}
                         for layer in ("conv1", "conv2", "conv3", "fc1", "classifier")
                         for a in range(4) for b in range(4)])


def cka_figure(tmp_path, monkeypatch, view="pairwise"):
    """CCVR Figs. 1 (pairwise) and 2 (mean): CKA between four client models, IID vs α=0.1."""
    monkeypatch.setattr("fedhet.analysis.similarity.client_cka", cka_frame)
    payload = {"kind": "cka", "spec": {"title": "Figure 1: pairwise CKA between client models",
                                       "options": {"view": view}}, "cells": CCVR_CELLS}
    return run_script("ccvr_analysis", payload, tmp_path)


def norms_figure(tmp_path, monkeypatch):
    """CCVR Fig. 3: samples per class and classifier norms of five clients at three rounds."""
    rng = np.random.default_rng(0)
    labels = pd.DataFrame([{"client": k, "class": c, "count": int(rng.integers(0, 50))}
                           for k in range(5) for c in range(10)])
    norms = pd.DataFrame([{"round": r, "model": "client", "client": k, "class": c,
                           "norm": float(rng.uniform(0.5, 2))}
                          for r in (1, 5, 10) for k in range(5) for c in range(10)])
    monkeypatch.setattr("fedhet.analysis.norms.label_distribution_frame", lambda run: labels)
    monkeypatch.setattr("fedhet.analysis.norms.classifier_norms_frame", lambda run: norms)
    payload = {"kind": "norms", "spec": {"title": "Figure 3: label distribution and classifier "
                                                  "weight norms", "options": {}},
               "cells": CCVR_CELLS}
    return run_script("ccvr_analysis", payload, tmp_path)


def write_calibrations(tmp_path: Path, cells: list[dict], record) -> None:
    """results/calibrations/<cid>/calibration.json of every cell, from record(cell, seed)."""
    for c in cells:
        for seed, cid in enumerate(c["calibrations"]):
            path = tmp_path / "results" / "calibrations" / cid / "calibration.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(record(c, seed)))


def calibration_figure(tmp_path, monkeypatch):
    """CCVR Fig. 7: accuracy after CCVR against M_c, one line per partition; the lines rise
    from their dashed level before calibration across the whole panel."""
    alphas = {"CIFAR-10 α=0.05": 0.30, "CIFAR-10 α=0.1": 0.45, "CIFAR-10 α=0.5": 0.62}
    cells = [cell({"data": d, "mc": f"M_c = {m}"}, [f"r{i}"], calibrations=[f"r{i}/ccvr-{m}"])
             for i, d in enumerate(alphas) for m in (0, 100, 1000)]

    def record(c, seed):
        m = int(c["display"]["mc"].split()[-1])
        before = alphas[c["display"]["data"]]
        return {"method": "ccvr", "acc_before": before,
                "acc_after": before + 0.12 * (m > 0) + 0.02 * (m > 100),
                "mean_sliced_wasserstein": 0.1,
                "settings": {"fraction": 1.0, "samples_per_class": m}}

    write_calibrations(tmp_path, cells, record)
    payload = {"kind": "calibration", "cells": cells,
               "spec": {"title": "Figure 7: CCVR accuracy vs virtual features per class M_c, "
                                 "FedAvg on CIFAR-10", "x": "samples_per_class", "hue": "data",
                        "scale_note": SCALE_NOTE}}
    return run_script("ccvr_analysis", payload, tmp_path)


def wasserstein_figure(tmp_path, monkeypatch):
    """CCVR Fig. 6: accuracy gain against the distance between class Gaussians, four
    algorithms × two calibrations."""
    cells = [cell({"algorithm": a, "calibration": c}, [f"r{i}"], calibrations=[f"r{i}/{c}"])
             for i, a in enumerate(("FedAvg", "FedProx", "FedAvgM", "MOON"))
             for c in ("ccvr", "oracle")]

    def record(c, seed):
        i = int(c["run_ids"][0][1:])
        return {"method": c["display"]["calibration"], "acc_before": 0.4,
                "acc_after": 0.45 + 0.03 * i, "mean_sliced_wasserstein": 0.2 + 0.1 * i,
                "settings": {"fraction": 1.0, "samples_per_class": 100}}

    write_calibrations(tmp_path, cells, record)
    payload = {"kind": "wasserstein", "cells": cells,
               "spec": {"title": "Figure 6: mean sliced Wasserstein distance vs accuracy gain",
                        "hue": "algorithm", "style": "calibration"}}
    return run_script("ccvr_analysis", payload, tmp_path)


def calibration_tsne_figure(tmp_path, monkeypatch):
    """CCVR Fig. 5: t-SNE of 300 test features, coloured by truth and predictions."""
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 10, 300)
    frame = pd.DataFrame({"x": rng.normal(size=300) + 3 * truth, "y": rng.normal(size=300),
                          "truth": truth, "pred_before": rng.integers(0, 10, 300),
                          "pred_after": truth})
    monkeypatch.setattr("fedhet.analysis.tsne.calibration_tsne", lambda *a, **k: frame)
    payload = {"kind": "calibration_tsne",
               "cells": [cell({"data": "CINIC-10"}, ["r1"], calibrations=["r1/ccvr"])],
               "spec": {"title": "Figure 5: t-SNE of FedAvg's CINIC-10 test features: truth, "
                                 "predictions before and after CCVR"}}
    return run_script("ccvr_analysis", payload, tmp_path)


# FedLGD's kinds: `fedhet figure-data` answers with small synthetic data

def tsne_points(rng, count: int, **fields) -> list[dict]:
    return [{"x": float(x), "y": float(y), "class": int(c), **fields}
            for x, y, c in zip(rng.normal(size=count), rng.normal(size=count),
                               rng.integers(0, 10, count), strict=True)]


def distilled_grid_figure(tmp_path, monkeypatch):
    """FedLGD Fig. D.2: three clients' and the server's virtual images, 4 classes × 3."""
    rng = np.random.default_rng(0)

    def panel(client, count):
        return {"client": client, "count": count, "labels": [c for c in range(4) for _ in range(3)],
                "images": rng.integers(0, 256, (12, 8, 8, 3)).tolist()}

    answer = {"panels": [panel(0, 20), panel(1, 20), panel(2, 20), panel(None, 8)],
              "num_classes": 4, "height": 8, "width": 8, "channels": 3, "num_clients": 3}
    payload = {"spec": {"title": "Figure D.2: virtual data after training", "per_class": 3},
               "cells": [cell({"dataset": "DIGITS"}, ["r1"])]}
    final = tmp_path / "results" / "runs" / "r1" / "final.json"
    return run_script("distilled_grid", payload, tmp_path, [str(final)], answer)


def distilled_tsne_figure(tmp_path, monkeypatch):
    """FedLGD Fig. 1: two clients' original and distilled images in one t-SNE."""
    rng = np.random.default_rng(0)
    points = [p for client in (2, 3) for kind, n in (("original", 80), ("distilled", 20))
              for p in tsne_points(rng, n, client=client, kind=kind)]
    answer = {"clients": [{"client": 2, "domain": "svhn"}, {"client": 3, "domain": "usps"}],
              "points": points, "num_classes": 10, "artefact": "a1"}
    payload = {"spec": {"title": "Figure 1: t-SNE of original and distilled images",
                        "clients": [2, 3]}, "cells": []}
    return run_script("distilled_tsne", payload, tmp_path, [str(tmp_path / "a1.pt")], answer)


def pixel_hist_figure(tmp_path, monkeypatch):
    """FedLGD Fig. D.3: five clients' pixel histograms per colour channel."""
    rng = np.random.default_rng(0)
    clients = [{"client": k, "domain": d, "images": 120,
                "shares": rng.dirichlet(np.ones(32), 3).tolist()}
               for k, d in enumerate(("mnist", "svhn", "usps", "synthdigits", "mnistm"))]
    answer = {"clients": clients, "channels": 3, "edges": np.linspace(0, 256, 33).tolist(),
              "num_clients": 5}
    payload = {"spec": {"title": "Figure D.3: pixel histograms", "options": {"bins": 32}},
               "cells": [cell({"dataset": "DIGITS"}, ["r1"])]}
    resolved = tmp_path / "results" / "runs" / "r1" / "resolved.yaml"
    return run_script("pixel_hist", payload, tmp_path, [str(resolved)], answer)


def mia_roc_figure(tmp_path, monkeypatch):
    """FedLGD Fig. 17: ROC of the loss-threshold attack on two runs."""
    rng = np.random.default_rng(0)

    def result(run, shift):
        summary = roc_summary(rng.normal(shift, 1, 150), rng.normal(0, 1, 150))
        return {"run": run, "fpr": summary["fpr"].tolist(), "tpr": summary["tpr"].tolist(),
                "auc": summary["auc"], "tpr_at_1pct_fpr": summary["tpr_at_1pct_fpr"],
                "members": 150, "nonmembers": 150}

    answer = {"runs": [result("r1", 0.5), result("r2", 0.1)]}
    payload = {"id": "fig17", "spec": {"title": "Figure 17: membership inference ROC"},
               "cells": [cell({"method": "FedAvg"}, ["r1"]), cell({"method": "FedLGD"}, ["r2"])]}
    return run_script("mia_roc", payload, tmp_path, answer=answer)


def domain_tsne_figure(tmp_path, monkeypatch):
    """FedLGD Fig. 4: two runs' features on two domains."""
    rng = np.random.default_rng(0)
    runs = [{"domains": ["usps", "synthdigits"], "num_classes": 10,
             "points": [p for d in ("usps", "synthdigits") for p in tsne_points(rng, 60, domain=d)]}
            for _ in range(2)]
    payload = {"spec": {"title": "Figure 4: t-SNE of the global model's features",
                        "domains": ["usps", "synthdigits"]},
               "cells": [cell({"method": "FedAvg"}, ["r1"]), cell({"method": "FedLGD"}, ["r2"])]}
    return run_script("domain_tsne", payload, tmp_path, answer={"runs": runs})


# kinds whose script runs a `fedhet` command: the command's figure function, fed directly

def tsne_figure(tmp_path, monkeypatch):
    """VHL Fig. 2: three clients' features under two methods, coloured by class."""
    rng = np.random.default_rng(0)

    def frame():
        return pd.DataFrame({"x": rng.normal(size=300), "y": rng.normal(size=300),
                             "class": rng.integers(0, 10, 300),
                             "client": np.repeat([0, 1, 2], 100)})

    panels = [{"title": "FedAvg (round 5)", "frame": frame()},
              {"title": "FedAvg + VHL (round 5)", "frame": frame()}]
    return client_tsne_figure(panels, "Figure 2: t-SNE of client features",
                              [NOTE])


def virtual_data_figure(tmp_path, monkeypatch):
    """VHL Fig. 4: eight images of each of ten classes of a virtual dataset."""
    x = torch.randint(0, 256, (80, 3, 16, 16), dtype=torch.uint8,
                      generator=torch.Generator().manual_seed(0))
    y = torch.arange(10).repeat_interleave(8)
    title = "Figure 4: virtual data (stylegan, 10 classes × 100 images, 32 px)"
    return virtual_grid_figure(x, y, per_class=8, title=title, notes=[NOTE])


def local_bias_figure(tmp_path, monkeypatch):
    """FedBR Figs. 2-3: t-SNE of three feature sets, a softmax and a histogram of 10 classes."""
    rng = np.random.default_rng(0)
    sets = [s for s in SETS for _ in range(30)]
    result = {"num_classes": 10, "x1_classes": list(range(5)), "local_steps": 250, "lr": 0.05,
              "batch_size": 64, "x2_size": 50,
              "tsne": {"x": rng.normal(size=90).tolist(), "y": rng.normal(size=90).tolist(),
                       "class": rng.integers(0, 10, 90).tolist(), "set": sets},
              "probe": {"class": 9, "F_1_softmax": rng.dirichlet(np.ones(10)).tolist()},
              "x2_argmax_histogram": {"F_1": rng.integers(0, 20, 10).tolist()},
              "x2_predicted_in_x1": {"F_g": 0.1, "F_1": 0.8},
              "accuracy": {m: {"X1": 0.9, "X2": 0.3} for m in ("F_g", "F_1")}}
    return bias_figure(result, "Figures 2-3: local learning bias", [NOTE])


def model_inversion_figure(tmp_path, monkeypatch):
    """FedImpro Figs. 11-13: three rows of ten inverted images."""
    rng = np.random.default_rng(0)
    rows = [(name, rng.uniform(size=(10, 16, 16, 3)))
            for name in ("original test image (Fig. 11)", "from its own layer2 feature (Fig. 12)",
                         "from the shared class mean at layer2 (Fig. 13)")]
    return inversion_figure(rows, list(range(10)), "Figures 11-13: model inversion",
                            [NOTE, "Relative feature error after 2000 Adam "
                             "steps: 0.120 from a raw feature, 0.450 from a class mean."])


FIGURES = {  # case → (kind, the kind's figure drawn from synthetic inputs)
    "curve": ("curve", curve_figure),
    "layer_divergence": ("layer_divergence", layer_divergence_figure),
    "bars": ("bars", bars_figure),
    "sweep": ("sweep", sweep_figure),
    "cka_pairwise": ("cka", cka_figure),
    "cka_mean": ("cka", lambda tmp_path, mp: cka_figure(tmp_path, mp, view="mean")),
    "norms": ("norms", norms_figure),
    "calibration": ("calibration", calibration_figure),
    "wasserstein": ("wasserstein", wasserstein_figure),
    "calibration_tsne": ("calibration_tsne", calibration_tsne_figure),
    "distilled_grid": ("distilled_grid", distilled_grid_figure),
    "distilled_tsne": ("distilled_tsne", distilled_tsne_figure),
    "pixel_hist": ("pixel_hist", pixel_hist_figure),
    "mia_roc": ("mia_roc", mia_roc_figure),
    "domain_tsne": ("domain_tsne", domain_tsne_figure),
    "tsne": ("tsne", tsne_figure),
    "virtual_grid": ("virtual_grid", virtual_data_figure),
    "bias": ("bias", local_bias_figure),
    "inversion": ("inversion", model_inversion_figure),
}
