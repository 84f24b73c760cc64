"""Local learning bias (FedBR Figs. 2-3): what a model learns when it trains on half the classes.

F_g is a finished (centralized) run's model; F_1 is F_g after `local_steps` SGD steps (the run's
lr, momentum, weight decay and batch size; no augmentation) on the training images of the first
half of the classes, X1 = classes 0 … C/2 − 1. On the test images:

- (a) a joint t-SNE of the penultimate features F_g(X1), F_1(X1) and F_1(X2) (X2: the other
  classes), coloured by class, one marker per model and set (Fig. 2);
- (b) F_1's softmax on one test image of the last class (Fig. 3a; the paper shows a class-8 one);
- (c) the histogram of F_1's argmax over X2 (Fig. 3b): a locally trained model assigns images of
  classes it never saw to its own classes.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedhet.engine.seeding import derive_seed

if TYPE_CHECKING:
    from fedhet.engine.augment import Augmenter
    from fedhet.saved import SavedRun

SETS = ("F_g(X1)", "F_1(X1)", "F_1(X2)")
# how the figure writes them
SET_NAMES = {"F_g(X1)": "$F_g(X_1)$", "F_1(X1)": "$F_1(X_1)$", "F_1(X2)": "$F_1(X_2)$"}


def local_model(saved: SavedRun, classes: int, steps: int, seed: int) -> nn.Module:
    """F_1: a copy of the run's model after `steps` SGD steps on its training images of classes
    0 … classes − 1 (shuffled epochs, seeded)."""
    t = saved.run["training"]
    x, y = saved.data.x_train, saved.data.y_train
    keep = torch.nonzero(torch.as_tensor(y) < classes).flatten()
    x, y = x[keep].to(saved.device), torch.as_tensor(y)[keep].to(saved.device)
    model = copy.deepcopy(saved.model).train()
    opt = torch.optim.SGD(model.parameters(), lr=t["lr"], momentum=t["momentum"],
                          weight_decay=t["weight_decay"])
    gen = torch.Generator().manual_seed(derive_seed(seed, "bias", "batches"))
    torch.manual_seed(derive_seed(seed, "bias", "dropout"))  # dropout draws from the global one
    batch = min(int(t["batch_size"]), len(y))
    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        if len(order) < batch:
            order = torch.cat([order, torch.randperm(len(y), generator=gen)])
        idx, order = order[:batch].to(saved.device), order[batch:]
        logits = model(saved.augmenter.test(x[idx]))[:, : saved.num_classes]
        opt.zero_grad()
        F.cross_entropy(logits, y[idx]).backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def outputs(model: nn.Module, x: Tensor, augmenter: Augmenter,
            num_classes: int) -> tuple[Tensor, Tensor]:
    """Penultimate features [n, d] and softmax over the natural classes [n, C] of uint8 images."""
    from fedhet.saved import extract_features

    z = extract_features(model, x, augmenter)
    return z, model.head(z)[:, :num_classes].softmax(1)


def local_bias(saved: SavedRun, local_steps: int = 250, samples: int = 600,
               seed: int = 0) -> dict[str, Any]:
    """The numbers of Figs. 2-3 for the run `saved` (`fedhet.saved.open_run`): accuracies of
    F_g and F_1 on X1 and X2, the share of X2 each assigns to X1's classes, F_1's softmax on the
    first test image of the last class, the argmax histograms over X2, and t-SNE points of
    `samples` features in all (a third per set)."""
    from fedhet.analysis.tsne import tsne_frame

    num_classes = saved.num_classes
    half = num_classes // 2
    local = local_model(saved, half, local_steps, seed)
    x, y = saved.test_set()
    first = y < half
    z_g, p_g = outputs(saved.model, x, saved.augmenter, num_classes)
    z_1, p_1 = outputs(local, x, saved.augmenter, num_classes)
    pred_g, pred_1 = p_g.argmax(1), p_1.argmax(1)

    def accuracy(pred: Tensor, where: Tensor) -> float:
        return float((pred[where] == y[where]).float().mean())

    def histogram(pred: Tensor) -> list[int]:
        return torch.bincount(pred[~first], minlength=num_classes).tolist()

    probe = int(torch.nonzero(y == num_classes - 1).flatten()[0])
    gen = torch.Generator().manual_seed(derive_seed(seed, "bias", "tsne"))
    per_set = max(1, samples // len(SETS))
    pick = [ix[torch.randperm(len(ix), generator=gen)[:per_set]].to(x.device)
            for ix in (torch.nonzero(first.cpu()).flatten(), torch.nonzero(~first.cpu()).flatten())]
    parts = ((z_g, pick[0]), (z_1, pick[0]), (z_1, pick[1]))
    frame = tsne_frame(torch.cat([z[ix] for z, ix in parts]),
                       {"class": torch.cat([y[ix] for _, ix in parts]),
                        "set": [s for s, (_, ix) in zip(SETS, parts, strict=True)
                                for _ in range(len(ix))]},
                       seed=seed, max_points=None)
    t = saved.run["training"]
    return {
        "run": str(saved.dir),
        "num_classes": num_classes,
        "x1_classes": list(range(half)),
        "local_steps": local_steps,
        "lr": t["lr"],
        "batch_size": t["batch_size"],
        "seed": seed,
        "x2_size": int((~first).sum()),
        "accuracy": {"F_g": {"X1": accuracy(pred_g, first), "X2": accuracy(pred_g, ~first)},
                     "F_1": {"X1": accuracy(pred_1, first), "X2": accuracy(pred_1, ~first)}},
        "x2_predicted_in_x1": {"F_g": float((pred_g[~first] < half).float().mean()),
                               "F_1": float((pred_1[~first] < half).float().mean())},
        "probe": {"test_index": probe, "class": num_classes - 1,
                  "F_1_softmax": p_1[probe].tolist(), "F_g_softmax": p_g[probe].tolist()},
        "x2_argmax_histogram": {"F_1": histogram(pred_1), "F_g": histogram(pred_g)},
        "tsne": {k: frame[k].tolist() for k in ("x", "y", "class", "set")},
    }


def bias_figure(result: dict[str, Any], title: str = "", notes: Sequence[str] = ()) -> Any:
    """The three panels (t-SNE, probe softmax, X2 argmax histogram) of a `local_bias` result,
    with `notes` and what the panels show as its notes (its caption in the report)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    from fedhet.figures.footnote import add_footnote
    from fedhet.figures.titles import figure_title
    from fedhet.figures.legends import legend_in

    sns.set_theme(style="whitegrid", context="paper")
    num_classes, half = result["num_classes"], len(result["x1_classes"])
    classes = list(range(num_classes))
    colors = ["C0" if c < half else "C3" for c in classes]
    # (a) on top, its legend beside it, (b) and (c) under it: three panels in a row are shrunk
    # past reading in the report's pane
    width, height = 8.0, 7.6
    fig = plt.figure(figsize=(width, height))
    grid = fig.add_gridspec(2, 2, height_ratios=(1.25, 1))
    axes = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, 0]),
            fig.add_subplot(grid[1, 1])]
    slot = fig.add_subplot(grid[0, 1])  # (a)'s legend
    slot.set_axis_off()
    frame = pd.DataFrame(result["tsne"])
    frame["set"] = frame["set"].map(SET_NAMES).fillna(frame["set"])
    sns.scatterplot(data=frame, x="x", y="y", hue="class", style="set",
                    style_order=[SET_NAMES[s] for s in SETS],
                    palette=sns.color_palette("tab10" if num_classes <= 10 else "husl",
                                              num_classes),
                    s=14, ax=axes[0])
    legend_in(slot, axes[0], fontsize=7, ncol=2)
    axes[0].set(xticks=[], yticks=[], xlabel="", ylabel="")
    axes[0].set_title("(a) t-SNE of penultimate features (test images)", fontsize=8)
    probe = result["probe"]
    axes[1].bar(classes, [100 * p for p in probe["F_1_softmax"]], color=colors)
    axes[1].set(xlabel="class", ylabel="$F_1$ softmax (%)")
    axes[1].set_title(f"(b) $F_1$ on a test image of class {probe['class']}", fontsize=8)
    axes[2].bar(classes, result["x2_argmax_histogram"]["F_1"], color=colors)
    axes[2].set(xlabel="predicted class", ylabel="$X_2$ test images")
    axes[2].set_title(f"(c) $F_1$'s predictions on $X_2$ ({result['x2_size']} images)",
                      fontsize=8)
    for ax in axes[1:]:
        ax.set_xticks(classes if num_classes <= 20 else classes[::num_classes // 10])
    share = result["x2_predicted_in_x1"]
    acc = result["accuracy"]
    text = (f"F_1 = F_g after {result['local_steps']} SGD steps (lr {result['lr']}, batch "
            f"{result['batch_size']}) on the training images of X_1 = classes 0-{half - 1} "
            f"(blue bars); X_2 = the other classes (red). X_2 images predicted as an X_1 class: "
            f"{100 * share['F_g']:.0f}% by F_g, {100 * share['F_1']:.0f}% by F_1. Accuracy "
            f"X_1 / X_2: F_g {100 * acc['F_g']['X1']:.0f}% / {100 * acc['F_g']['X2']:.0f}%, "
            f"F_1 {100 * acc['F_1']['X1']:.0f}% / {100 * acc['F_1']['X2']:.0f}%.")
    figure_title(fig, title)
    add_footnote(fig, [*notes, text], width, height)
    return fig


def cmd_bias(args: argparse.Namespace) -> int:
    """Write OUT/bias.json (the numbers) and OUT/bias.png (the three panels)."""
    import matplotlib.pyplot as plt
    from threadpoolctl import threadpool_limits

    from fedhet.saved import open_run

    if args.threads:
        torch.set_num_threads(args.threads)
    saved = open_run(args.run, device=args.device)
    # small models and a 600-point t-SNE: extra threads only spin on a busy machine (10× slower)
    with threadpool_limits(args.threads):
        result = local_bias(saved, args.local_steps, args.samples, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bias.json").write_text(json.dumps(result, indent=1) + "\n")
    from fedhet.figures.save import save_figure

    fig = bias_figure(result, args.title, args.note)
    save_figure(fig, out / "bias.png")
    plt.close(fig)
    print(out / "bias.png")
    return 0
