"""The data of FedLGD's model- and dataset-based figures (`fedhet figure-data KIND`): each kind
reads saved runs or a cached artefact and returns a JSON-serialisable dict that a figure script
only has to plot, so the scripts need neither torch nor the datasets."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedhet.engine.seeding import derive_seed

MAX_CLIENTS = 12  # clients shown when a figure names none
ROC_POINTS = 400  # at most this many ROC points per run
VIRTUAL = "plugins/fedlgd/fedlgd_virtual.pt"  # a FedLGD run's final virtual data


# -- membership ------------------------------------------------------------------------------

def downsample_roc(fpr: np.ndarray, tpr: np.ndarray, floor: float,
                   max_points: int = ROC_POINTS) -> np.ndarray:
    """Positions (ascending) of at most `max_points` ROC points that keep its shape on log-log axes:
    evenly spaced along the curve's length in (log fpr, log tpr) (rates clipped to `floor`),
    plus both endpoints and the two points around 1 % FPR."""
    n = len(fpr)
    if n <= max_points:
        return np.arange(n)
    u = np.log10(np.maximum(fpr, floor))
    v = np.log10(np.maximum(tpr, floor))
    length = np.concatenate([[0.0], np.cumsum(np.hypot(np.diff(u), np.diff(v)))])
    picked = np.searchsorted(length, np.linspace(0.0, length[-1], max_points - 4))
    low = max(int(np.searchsorted(fpr, 0.01 + 1e-12, side="right")) - 1, 0)  # fpr ascends
    keep = np.concatenate([picked, [0, n - 1, low, min(low + 1, n - 1)]])
    return np.unique(np.clip(keep, 0, n - 1))


def membership(runs: Sequence[Path], samples: int = 2000, seed: int = 0,
               device: str = "auto") -> dict[str, Any]:
    """Loss-threshold membership inference (`fedhet.analysis.mia.run_membership`) on each run's
    final global model, `samples` members and non-members at most: {"runs": [{run (directory
    name), auc, tpr_at_1pct_fpr, members, nonmembers, fpr, tpr}]}, the ROC downsampled to at
    most `ROC_POINTS` points (AUC and TPR at 1 % FPR are those of the full ROC)."""
    from fedhet.analysis.mia import run_membership
    from fedhet.saved import open_run

    out = []
    for run in runs:
        r = run_membership(open_run(run, device=device), int(samples), int(seed))
        keep = downsample_roc(r["fpr"], r["tpr"], 1.0 / max(r["nonmembers"], 1))
        out.append({"run": Path(run).name, "auc": r["auc"],
                    "tpr_at_1pct_fpr": r["tpr_at_1pct_fpr"], "members": r["members"],
                    "nonmembers": r["nonmembers"], "fpr": r["fpr"][keep].tolist(),
                    "tpr": r["tpr"][keep].tolist()})
    return {"runs": out}


# -- domain-tsne -----------------------------------------------------------------------------

def domain_ids(data: Any, wanted: list | None) -> list[tuple[int, str]]:
    """(id, name) of the chosen domains (names or ids; default the first two)."""
    if data.domain_test is None:
        raise ValueError(f"dataset {data.name} has no domains: domain-tsne needs a "
                         "multi-domain dataset")
    present = sorted(int(d) for d in torch.as_tensor(data.domain_test).unique())
    names = list(data.domain_names or [])
    name = {d: names[d] if d < len(names) else f"domain {d}" for d in present}
    if not wanted:
        return [(d, name[d]) for d in present[:2]]
    out = []
    for w in wanted:
        if isinstance(w, str) and w in names:
            d = names.index(w)
        elif isinstance(w, int) or str(w).isdigit():
            d = int(w)
        else:
            raise ValueError(f"domain {w!r} is none of {names or present}")
        if d not in name:
            raise ValueError(f"domain {w!r} has no test images (present: {present})")
        out.append((d, name[d]))
    return out


def domain_features(saved: Any, domains: list[tuple[int, str]], per_domain: int,
                    seed: int) -> dict[str, np.ndarray]:
    """Features (classifier input) of the run's model on at most `per_domain` test images of
    each domain (seeded): {features, class, domain (name)}."""
    from fedhet.saved import extract_features

    data = saved.data
    dom = torch.as_tensor(data.domain_test).numpy()
    rng = np.random.default_rng(derive_seed(seed, "domain-tsne", "subset"))
    feats, classes, owners = [], [], []
    for d, name in domains:
        idx = np.flatnonzero(dom == d)
        idx = torch.as_tensor(np.sort(rng.choice(idx, min(per_domain, len(idx)), replace=False)))
        x = data.x_test[idx].to(saved.device)
        feats.append(extract_features(saved.model, x, saved.augmenter).flatten(1).cpu().numpy())
        classes.append(data.y_test[idx].numpy())
        owners.append(np.full(len(idx), name, dtype=object))
    return {"features": np.concatenate(feats), "class": np.concatenate(classes),
            "domain": np.concatenate(owners)}


def domain_tsne(runs: Sequence[Path], domains: list | None = None, per_domain: int = 500,
                seed: int = 0, perplexity: float = 30.0, device: str = "auto") -> dict[str, Any]:
    """t-SNE of each run's final global model features on at most `per_domain` test images of
    two domains (names or ids; default the first two): {"runs": [{run, domains (names, in
    order), num_classes, points: [{x, y, class, domain (name)}]}]}."""
    from fedhet.analysis.tsne import tsne_frame
    from fedhet.saved import open_run

    out = []
    for run in runs:
        saved = open_run(run, device=device)
        chosen = domain_ids(saved.data, domains)
        f = domain_features(saved, chosen, int(per_domain), int(seed))
        frame = tsne_frame(f["features"], {"class": f["class"], "domain": f["domain"]},
                           seed=int(seed), max_points=None, perplexity=float(perplexity))
        points = [{"x": float(x), "y": float(y), "class": int(c), "domain": str(d)}
                  for x, y, c, d in zip(frame["x"], frame["y"], frame["class"],
                                        frame["domain"], strict=True)]
        out.append({"run": Path(run).name, "domains": [name for _, name in chosen],
                    "num_classes": saved.num_classes, "points": points})
    return {"runs": out}


# -- distilled-tsne --------------------------------------------------------------------------

def main_domain(data: Any, indices: np.ndarray) -> str | None:
    """The name of the domain most of these training images come from (None without domains)."""
    if data.domain_train is None or not len(indices):
        return None
    d = int(np.bincount(np.asarray(data.domain_train)[indices]).argmax())
    names = data.domain_names or ()
    return names[d] if d < len(names) else f"domain {d}"


def distilled_pixels(artefact: dict, datasets: Path, partitions: Path, clients: list[int],
                     per_class: int, seed: int) -> dict[str, Any]:
    """Flattened normalised pixels of the chosen clients' original images (at most `per_class`
    per class, seeded) and of their initial distilled images: {pixels [n, d], class, client,
    kind ("original"/"distilled"), domains (client → main domain or None), num_classes}."""
    from fedhet.data import load_dataset
    from fedhet.engine.augment import Augmenter
    from fedhet.partition import load_or_make_partition

    settings = artefact["settings"]
    d = settings["dataset"]
    data = load_dataset(d["name"], str(datasets), d["options"])
    part = load_or_make_partition(data, {**settings["partition"], "root": str(partitions)},
                                  settings["partition_seed"])
    bad = [k for k in clients if not 0 <= k < min(len(part.client_indices), len(artefact["x"]))]
    if bad:
        raise ValueError(f"clients {bad} do not exist (the artefact has {len(artefact['x'])})")
    augmenter = Augmenter("none", data.mean, data.std, int(data.x_train.shape[-1]),
                          torch.device("cpu"))
    rng = np.random.default_rng(derive_seed(seed, "distilled-tsne", "subset"))
    y_train = data.y_train.numpy()
    pixels, classes, owners, kinds, domains = [], [], [], [], {}
    for k in clients:
        idx = np.asarray(part.client_indices[k], dtype=np.int64)
        domains[k] = main_domain(data, idx)
        keep = [np.zeros(0, dtype=np.int64)]
        for c in range(int(data.num_classes)):
            own = idx[y_train[idx] == c]
            keep.append(np.sort(rng.choice(own, min(per_class, len(own)), replace=False)))
        keep = np.concatenate(keep)
        pixels.append(augmenter.test(data.x_train[torch.as_tensor(keep)]).float().flatten(1)
                      .numpy())
        classes.append(y_train[keep])
        vx, vy = artefact["x"][k].float(), artefact["y"][k]
        vy = vy.argmax(1) if vy.ndim > 1 else vy
        pixels.append(vx.flatten(1).numpy())
        classes.append(vy.numpy())
        owners += [np.full(len(keep), k), np.full(len(vy), k)]
        kinds += [np.full(len(keep), "original", dtype=object),
                  np.full(len(vy), "distilled", dtype=object)]
    return {"pixels": np.concatenate(pixels), "class": np.concatenate(classes),
            "client": np.concatenate(owners), "kind": np.concatenate(kinds),
            "domains": domains, "num_classes": int(data.num_classes)}


def distilled_tsne(artefact: Path, clients: Sequence[int] | int = (0, 1), per_class: int = 50,
                   seed: int = 0, perplexity: float = 30.0) -> dict[str, Any]:
    """One t-SNE of raw normalised pixels of the chosen clients' (a list, or n: the first n)
    original training images (at most `per_class` per class and client, seeded) and of their
    initial distilled images in the cached artefact `<datasets>/distilled/<key>.pt` (dataset
    from `<datasets>`, partition from `<datasets>/../partitions`): {artefact (file stem),
    num_classes, clients: [{client, domain (main domain name or None)}], points: [{x, y,
    class, client, kind ("original"/"distilled")}]}."""
    from fedhet.analysis.tsne import tsne_frame

    path = Path(artefact)
    chosen = ([int(k) for k in clients] if isinstance(clients, (list, tuple))
              else list(range(int(clients))))
    payload = torch.load(path, map_location="cpu", weights_only=True)
    datasets = path.parent.parent
    p = distilled_pixels(payload, datasets, datasets.parent / "partitions", chosen,
                         int(per_class), int(seed))
    frame = tsne_frame(p["pixels"], {k: p[k] for k in ("class", "client", "kind")},
                       seed=int(seed), max_points=None, perplexity=float(perplexity))
    points = [{"x": float(x), "y": float(y), "class": int(c), "client": int(k), "kind": str(s)}
              for x, y, c, k, s in zip(frame["x"], frame["y"], frame["class"], frame["client"],
                                       frame["kind"], strict=True)]
    return {"artefact": path.stem, "num_classes": p["num_classes"],
            "clients": [{"client": k, "domain": p["domains"][k]} for k in chosen],
            "points": points}


# -- pixel-hist ------------------------------------------------------------------------------

def run_data(run_dir: Path) -> tuple[Any, list[np.ndarray]]:
    """The training data of a saved run (its resolved.yaml) and its clients' indices."""
    from fedhet.saved import read_settings

    saved = read_settings(run_dir)
    indices, _ = saved.partition()
    return saved.data, [np.asarray(i, dtype=np.int64) for i in indices]


def chosen_clients(wanted: list[int] | int | None, count: int) -> list[int]:
    """Clients a figure shows: a list of 0-based indices, or n (the first n), or None (the
    first `MAX_CLIENTS`); never more than there are."""
    if isinstance(wanted, list):
        bad = [k for k in wanted if not 0 <= int(k) < count]
        if bad:
            raise ValueError(f"clients {bad} do not exist (the run has {count})")
        return [int(k) for k in wanted]
    return list(range(min(count, int(wanted) if wanted else MAX_CLIENTS)))


def histograms(x_train: torch.Tensor, indices: list[np.ndarray], clients: list[int],
               bins: int = 64) -> np.ndarray:
    """[client, channel, bin] share of each client's uint8 pixels per intensity bin (bins of
    equal width over 0-255; every row sums to 1)."""
    lookup = torch.arange(256) * bins // 256  # intensity → bin
    out = np.zeros((len(clients), int(x_train.shape[1]), bins))
    for n, k in enumerate(clients):
        x = x_train[torch.as_tensor(indices[k])]
        for c in range(x.shape[1]):
            counts = torch.bincount(x[:, c].reshape(-1).long(), minlength=256)
            binned = torch.zeros(bins, dtype=torch.float64).index_add_(0, lookup,
                                                                       counts.double())
            total = binned.sum()
            out[n, c] = (binned / total).numpy() if total > 0 else 0.0
    return out


def pixel_hist(run: Path, clients: list[int] | int | None = None,
               bins: int = 64) -> dict[str, Any]:
    """Per-client pixel-intensity histograms of a run's raw uint8 training images: {run,
    num_clients, channels, edges (bins + 1 intensities, 0 to 256), clients: [{client, domain
    (main domain name or None), images, shares: [channel][bin] (each row sums to 1)]}."""
    data, indices = run_data(run)
    chosen = chosen_clients(clients, len(indices))
    hist = histograms(data.x_train, indices, chosen, int(bins))
    return {"run": Path(run).name, "num_clients": len(indices), "channels": hist.shape[1],
            "edges": (np.arange(int(bins) + 1) * 256 / int(bins)).tolist(),
            "clients": [{"client": k, "domain": main_domain(data, indices[k]),
                         "images": len(indices[k]), "shares": hist[n].tolist()}
                        for n, k in enumerate(chosen)]}


# -- virtual-images --------------------------------------------------------------------------

def virtual_file(path: Path) -> Path:
    """The virtual data file: `path` itself (a .pt file) or the one in a run directory."""
    path = Path(path)
    if path.suffix == ".pt":
        return path
    out = path / VIRTUAL
    if not out.exists():
        raise FileNotFoundError(f"{out} does not exist: is {path.name} a FedLGD run?")
    return out


def hard_labels(y: torch.Tensor) -> np.ndarray:
    """Class indices of hard or soft (one row per example) labels."""
    y = y.detach().cpu()
    return (y.argmax(1) if y.ndim > 1 else y).numpy()


def first_per_class(x: torch.Tensor, y: np.ndarray, per_class: int) -> dict[str, Any]:
    """{count, labels, images} of the first `per_class` images of every class in the order of
    the data, each rescaled to [0, 255] by its own minimum and maximum: uint8 values [H][W][ch]."""
    keep = [np.flatnonzero(y == c)[:per_class] for c in np.unique(y)]
    keep = np.sort(np.concatenate(keep)) if keep else np.zeros(0, dtype=np.int64)
    x = x.detach().float().cpu()[torch.as_tensor(keep)]
    flat = x.flatten(1)
    lo, hi = flat.min(1, keepdim=True).values, flat.max(1, keepdim=True).values
    scaled = torch.where(hi > lo, (flat - lo) / (hi - lo).clamp_min(1e-12), 0.0).view_as(x)
    images = (scaled * 255).round().to(torch.uint8).permute(0, 2, 3, 1)
    return {"count": len(y), "labels": y[keep].tolist(), "images": images.tolist()}


def virtual_images(path: Path, per_class: int = 4,
                   clients: list[int] | int | None = None) -> dict[str, Any]:
    """FedLGD's final virtual data (a run directory's `plugins/fedlgd/fedlgd_virtual.pt`, or
    that file): {num_classes, num_clients, height, width, channels, per_class, panels: [{client
    (None: the server's global data), count (its images in all), labels, images}]}, one panel
    per chosen client then the server's, each the first `per_class` images of every class
    (see `first_per_class`)."""
    data = torch.load(virtual_file(path), map_location="cpu", weights_only=True)
    xs, ys = list(data["x"]), [hard_labels(y) for y in data["y"]]
    gx, gy = data["global_x"], hard_labels(data["global_y"])
    num_classes = int(max(int(y.max()) for y in [*ys, gy] if y.size)) + 1
    shape = (xs[0] if xs else gx).shape[1:]
    chosen = chosen_clients(clients, len(xs))
    panels = [{"client": k, **first_per_class(xs[k], ys[k], int(per_class))} for k in chosen]
    panels.append({"client": None, **first_per_class(gx, gy, int(per_class))})
    return {"num_classes": num_classes, "num_clients": len(xs), "channels": int(shape[0]),
            "height": int(shape[1]), "width": int(shape[2]), "per_class": int(per_class),
            "panels": panels}


# -- the command ------------------------------------------------------------------------------

KINDS: dict[str, tuple[Callable[..., dict[str, Any]], str]] = {
    # kind: (function, what it reads: "runs", "run" (the first), "artefact", "run or artefact")
    "membership": (membership, "runs"),
    "domain-tsne": (domain_tsne, "runs"),
    "distilled-tsne": (distilled_tsne, "artefact"),
    "pixel-hist": (pixel_hist, "run"),
    "virtual-images": (virtual_images, "run or artefact"),
}


def figure_source(kind: str, reads: str, runs: Sequence[Path] | None,
                  artefact: Path | None) -> Any:
    """What figure `kind` reads: its run directories, its one run, or the artefact."""
    if reads == "artefact" or (reads == "run or artefact" and artefact is not None):
        if artefact is None:
            raise ValueError(f"figure-data {kind} reads an artefact (--artefact)")
        return artefact
    if not runs:
        raise ValueError(f"figure-data {kind} reads run directories (--runs)")
    if reads == "runs":
        return list(runs)
    if len(runs) > 1:
        raise ValueError(f"figure-data {kind} reads one run, got {len(runs)}")
    return runs[0]


def figure_data(kind: str, runs: Sequence[Path] | None, artefact: Path | None,
                options: dict[str, Any], device: str = "auto") -> dict[str, Any]:
    """The data of figure `kind` from run directories or an artefact, `options` the keyword
    arguments of its function (unknown ones are an error; `device` goes to those that load a
    model)."""
    if kind not in KINDS:
        raise ValueError(f"unknown figure-data kind {kind!r} (one of {', '.join(KINDS)})")
    fn, reads = KINDS[kind]
    params = list(inspect.signature(fn).parameters)
    unknown = sorted((set(options) - set(params[1:])) | ({"device"} & set(options)))
    if unknown:
        raise ValueError(f"figure-data {kind}: unknown options {unknown}")
    extra = {"device": device} if "device" in params else {}
    return fn(figure_source(kind, reads, runs, artefact), **options, **extra)


def cmd_figure_data(args: argparse.Namespace) -> int:
    from fedhet.atomic import write_json

    runs = [Path(r) for r in args.runs] if args.runs else None
    artefact = Path(args.artefact) if args.artefact else None
    write_json(args.out, figure_data(args.kind, runs, artefact, args.options, args.device))
    print(f"figure-data {args.kind}: {args.out}")
    return 0
