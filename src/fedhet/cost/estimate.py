"""What a scale costs before it runs (`fedhet cost --scale S`): per paper and in total, the runs,
the images their local training and their evaluations put through the model, those images'
TFLOP, and GPU-hours at a per-model throughput.

Counted per run (each run once, under the first paper whose tables or figures use it):
- training: `fedhet.experiments.training_images` (rounds × sampled clients × local epochs or
  steps × the methods' declared factors) × the FLOPs of one training image
  (`fedhet.models.flops.flops_per_image`: forward, loss and backward to the weights);
- evaluation: at every round r with r % eval.every == 0 and at the last round, the test set
  (× the angles of eval.rotations) through the global model, and through each sampled client's
  model where eval.client_models is set or the algorithm scores its clients' models (Local-only),
  × the forward FLOPs of one image.

Dataset sizes come from the dataset specs (`fedhet.data.split_sizes`), so nothing needs to be on
disk. GPU-hours = (training + evaluation FLOPs) / the model's sustained TFLOP/s: measured ones
from a throughput file (`load_throughput`, e.g. the `gpu-check.json` of `ci/gpu-check.sh`), else
`DEFAULT_THROUGHPUT`, an assumption the output states. `not_counted` says what is left out.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fedhet import catalog
from fedhet import experiments as X
from fedhet.cost.throughput import DEFAULT_THROUGHPUT, Throughput, load_throughput
from fedhet.data import describe, split_sizes


def not_counted() -> list[str]:
    """What the cost leaves out, or counts only roughly (printed with it)."""
    families = ", ".join(sorted(catalog.artefact_families()))
    posthoc = ", ".join(catalog.names("posthoc"))
    return [
        "data preparation (downloads, dataset caches, partitions)",
        f"cached artefacts built before training ({families})",
        "server-side work inside a run (distillation, matching, shared statistics) and per-step "
        "work a method does beyond its declared cost factor (extra forward passes of other models)",
        "plug-ins' extra test sets",
        f"post-hoc steps ({posthoc}) and analyses (t-SNE, inversion, similarity)",
        "tables, figures and the report",
        "FLOPs of normalisation, activations, pooling, augmentation and the optimiser update "
        "(the FLOP counter's convention)",
        "counted roughly: a plug-in that trains clients on its own data in place of their "
        "partition (distilled virtual data) is counted as training on the partition: an upper "
        "bound",
    ]


@dataclass
class Cost:
    """The cost of a set of runs; `add` sums another into it."""

    runs: int = 0
    train_images: float = 0.0
    eval_images: float = 0.0
    train_tflop: float = 0.0
    eval_tflop: float = 0.0
    gpu_hours: float = 0.0

    def add(self, other: Cost) -> None:
        for name, value in asdict(other).items():
            setattr(self, name, getattr(self, name) + value)


@dataclass
class ScaleCost:
    """Per paper and in total, with the throughput of every model it used and the declared
    (train, test) sizes of every dataset."""

    scale: str
    papers: dict[str, Cost] = field(default_factory=dict)
    total: Cost = field(default_factory=Cost)
    throughput: dict[str, Throughput] = field(default_factory=dict)
    datasets: dict[str, tuple[int, int]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: everything, with the list of what is not counted."""
        return {
            "scale": self.scale,
            "papers": {p: asdict(c) for p, c in self.papers.items()},
            "total": asdict(self.total),
            "throughput": {m: asdict(t) for m, t in self.throughput.items()},
            "datasets": {k: {"train": tr, "test": te} for k, (tr, te) in self.datasets.items()},
            "not_counted": not_counted(),
        }


def evaluations(run: Mapping[str, Any]) -> int:
    """Rounds at which the run evaluates: every eval.every-th round, and the last."""
    rounds, every = run["training"]["rounds"], run["eval"]["every"]
    return rounds // every + (1 if rounds % every else 0)


def evaluation_images(run: Mapping[str, Any], test_size: int, scores_clients: bool) -> float:
    """Test images the run's evaluations put through a model: per evaluation the test set,
    once per angle of eval.rotations, for the global model and, with eval.client_models or an
    algorithm that scores its clients' models (`scores_clients`), each sampled client's."""
    t, e = run["training"], run["eval"]
    clients = 1 if t["centralized"] else t["clients_per_round"]
    models = 1 + (clients if e["client_models"] or scores_clients else 0)
    return float(evaluations(run) * models * max(1, len(e["rotations"])) * test_size)


def _scores_clients(algorithm: str) -> bool:
    return bool(getattr(catalog.implementation(algorithm), "scores_client_models", False))


@dataclass(frozen=True, order=True)
class ModelShape:
    """A model as a run trains it: what its speed depends on (`fedhet bench --models` times each
    shape a scale trains; `fedhet cost` matches runs to those records by `key`)."""

    model: str
    width: float
    options: str  # the model's options, JSON with sorted keys
    channels: int
    image_size: int
    num_classes: int
    batch_size: int

    @property
    def key(self) -> str:
        """`resnet18 width=0.5 3x32x32 classes=10 batch=128`, with ` options=...` if any."""
        options = "" if self.options == "{}" else f" options={self.options}"
        return (f"{self.model} width={self.width:g} {self.channels}x{self.image_size}x"
                f"{self.image_size} classes={self.num_classes} batch={self.batch_size}{options}")


def run_shape(run: Mapping[str, Any]) -> ModelShape:
    """The shape of a resolved run's model: the dataset's image shape, the classifier's outputs
    (the dataset's classes and what plug-ins add), the local batch size."""
    info = describe(run["dataset"]["name"], run["dataset"]["options"])
    channels, size, _ = info["shape"]
    model = run["model"]
    return ModelShape(model["name"], float(model["width"]),
                      json.dumps(model["options"] or {}, sort_keys=True), channels, size,
                      catalog.model_classes(run, info["num_classes"]),
                      int(run["training"]["batch_size"]))


def image_flops(run: Mapping[str, Any], backward: bool) -> int:
    """FLOPs of one image through the run's model: a training step's (forward, loss and
    backward to the weights) or an evaluation's (forward)."""
    from fedhet.models.flops import flops_per_image

    shape = run_shape(run)
    return flops_per_image(shape.model, shape.image_size, shape.num_classes, shape.channels,
                           backward=backward, width=shape.width,
                           options=run["model"]["options"])


def run_cost(run: Mapping[str, Any], sizes: tuple[int, int], throughput: Throughput) -> Cost:
    """Training and evaluation cost of one resolved run on a dataset of `sizes` (train, test)."""
    train_flops = image_flops(run, backward=True)
    eval_flops = image_flops(run, backward=False)
    train = X.training_images(run, sizes[0])
    evaluated = evaluation_images(run, sizes[1], _scores_clients(run["algorithm"]["name"]))
    train_tflop, eval_tflop = train * train_flops / 1e12, evaluated * eval_flops / 1e12
    return Cost(runs=1, train_images=train, eval_images=evaluated, train_tflop=train_tflop,
                eval_tflop=eval_tflop,
                gpu_hours=(train_tflop + eval_tflop) / throughput.tflops / 3600)


def first_uses(exp: X.Experiment) -> Iterator[tuple[str, str]]:
    """(paper, run id) of every run the experiment's tables and figures use, each run once,
    under the first paper that uses it."""
    seen: set[str] = set()
    for item in exp.items.values():
        for rid in item.run_ids():
            if rid not in seen:
                seen.add(rid)
                yield item.paper, rid


def scale_cost(exp: X.Experiment, measured: Mapping[str, Throughput] | None = None) -> ScaleCost:
    """The cost of every run of an expanded experiment, per paper and in total; each run at the
    `measured` throughput of its model's shape (`ModelShape.key`), else of its model, else at
    `DEFAULT_THROUGHPUT`."""
    measured = measured or {}
    out = ScaleCost(scale=exp.scale)
    for paper, rid in first_uses(exp):
        run = exp.runs[rid]
        name, shape = run["model"]["name"], run_shape(run).key
        key = shape if shape in measured else name
        rate = out.throughput.setdefault(key, measured.get(key, DEFAULT_THROUGHPUT))
        data = exp.run_dataset[rid]
        if data not in out.datasets:
            out.datasets[data] = split_sizes(run["dataset"]["name"], run["dataset"]["options"])
        cost = run_cost(run, out.datasets[data], rate)
        out.papers.setdefault(paper, Cost()).add(cost)
        out.total.add(cost)
    return out


# -- output -------------------------------------------------------------------------------------


def _row(name: str, c: Cost) -> str:
    return (f"{name:<10}{c.runs:>7,}{c.train_images / 1e9:>14,.2f}{c.train_tflop:>17,.0f}"
            f"{c.eval_images / 1e9:>13,.2f}{c.eval_tflop:>14,.0f}{c.gpu_hours:>12,.1f}")


def _throughput_lines(throughput: Mapping[str, Throughput]) -> list[str]:
    """One line per throughput: its TFLOP/s, the models at it, and its source."""
    models: dict[Throughput, list[str]] = {}
    for model, rate in sorted(throughput.items()):
        models.setdefault(rate, []).append(model)
    return [f"  {rate.tflops:.1f} TFLOP/s: {', '.join(names)}\n    ({rate.source})"
            for rate, names in models.items()]


def format_cost(cost: ScaleCost) -> str:
    """The table `fedhet cost` prints, with the throughputs, dataset sizes and what is left out."""
    lines = [
        f"Cost of scale '{cost.scale}' before it runs (each run counted once, under the first "
        "paper that uses it)",
        "",
        f"{'paper':<10}{'runs':>7}{'train Gimg':>14}{'train TFLOP':>17}{'eval Gimg':>13}"
        f"{'eval TFLOP':>14}{'GPU-hours':>12}",
        *(_row(paper, c) for paper, c in cost.papers.items()),
        _row("total", cost.total),
        "",
        "GPU-hours = (train + eval FLOPs) / the model's sustained throughput:",
        *_throughput_lines(cost.throughput),
        "",
        "Dataset sizes (train / test images, declared with the dataset specs):",
        *(f"  {key:<26}{tr:>10,} / {te:,}" for key, (tr, te) in sorted(cost.datasets.items())),
        "",
        "Not counted:",
        *(f"  - {what}" for what in not_counted()),
    ]
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """`fedhet cost`: print the cost of `args.scale` (as JSON with `args.json`)."""
    if args.mode and not args.throughput:
        raise ValueError("--mode picks records of a throughput file: give --throughput FILE too")
    X.load_scale(Path(args.root), args.scale, where="fedhet cost --scale")  # names valid scales
    measured = load_throughput(args.throughput, args.mode) if args.throughput else None
    exp = X.load_experiment({"scale": args.scale}, args.root)
    cost = scale_cost(exp, measured)
    print(json.dumps(cost.as_dict(), indent=2) if args.json else format_cost(cost))
    return 0
