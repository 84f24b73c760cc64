"""`fedhet bench --models`: one round of every model shape a scale trains, timed, so that `fedhet
cost` rests on measurements for every model and not on an assumed throughput.

A shape (`fedhet.cost.estimate.ModelShape`) is what a run's speed depends on: the model,
its width and options, the image shape, the classifier's outputs and the local batch size. For
each shape the scales train (the runs of their tables and figures), largest share of the
training work first, it times our engine's FedAvg round (`fedhet.bench.paper_round`: random
images of that shape, `--round-clients` clients × `--model-batches` batches each, crop and flip)
in each of `--modes` (default: the fastest mode of the device), and appends a record naming the
model and the shape to `--records`, which `fedhet cost --throughput` reads.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from fedhet import experiments as X
from fedhet.cost.estimate import ModelShape, first_uses, run_cost, run_shape
from fedhet.cost.throughput import DEFAULT_THROUGHPUT
from fedhet.bench import paper_round
from fedhet.data import split_sizes
from fedhet.engine.modes import CPU_MODES, GPU_MODES, Mode


def scale_shapes(root: str | Path, scales: Iterable[str]) -> dict[ModelShape, float]:
    """Every model shape the scales' tables and figures train, with the training TFLOP of
    those runs (each run once), largest first."""
    work: dict[ModelShape, float] = {}
    for scale in scales:
        exp = X.load_experiment({"scale": scale}, root)
        for _, rid in first_uses(exp):
            run = exp.runs[rid]
            sizes = split_sizes(run["dataset"]["name"], run["dataset"]["options"])
            shape = run_shape(run)
            work[shape] = work.get(shape, 0.0) + run_cost(run, sizes,
                                                         DEFAULT_THROUGHPUT).train_tflop
    return dict(sorted(work.items(), key=lambda kv: (-kv[1], kv[0])))


def round_size(shape: ModelShape, clients: int, batches: int) -> paper_round.RoundSize:
    """The timed round of a shape: `clients` clients of `batches` full batches each."""
    return replace(paper_round.RoundSize(), clients=clients, images=batches * shape.batch_size,
                   batch_size=shape.batch_size, model=shape.model, width=shape.width,
                   image_size=shape.image_size, num_classes=shape.num_classes,
                   channels=shape.channels, options=shape.options)


def bench_shapes(shapes: Sequence[ModelShape], modes: Sequence[Mode], device: torch.device,
                 clients: int, batches: int, timed_rounds: int,
                 records: str | None) -> list[dict]:
    """Time our engine's round of each shape in each mode; the records, appended to `records`
    as each is measured."""
    out = []
    for shape in shapes:
        out += paper_round.bench_modes(round_size(shape, clients, batches), modes, ["engine"],
                                       device, timed_rounds, records=records,
                                       label="model round", shape=shape.key)
    return out


def main(args: argparse.Namespace, device: torch.device) -> int:
    """`fedhet bench --models`: exit status 1 when a measurement failed, unless `--records`
    holds the failures (0 once all are recorded)."""
    scales = [s.strip() for s in args.scales.split(",") if s.strip()]
    for scale in scales:
        X.load_scale(Path(args.root), scale, where="fedhet bench --scales")  # names valid ones
    shapes = scale_shapes(args.root, scales)
    if args.only:
        wanted = {m.strip() for m in args.only.split(",")}
        unknown = wanted - {s.model for s in shapes}
        if unknown:
            raise ValueError(f"--only {', '.join(sorted(unknown))}: no run of scale(s) "
                             f"{', '.join(scales)} trains it; models trained: "
                             f"{', '.join(sorted({s.model for s in shapes}))}")
        shapes = {s: w for s, w in shapes.items() if s.model in wanted}
    total = sum(shapes.values()) or 1.0
    print(f"{len(shapes)} model shapes of scale(s) {', '.join(scales)}, by share of their "
          "training work:")
    for shape, tflop in shapes.items():
        print(f"  {100 * tflop / total:5.1f} %  {shape.key}")
    given = args.modes or (GPU_MODES[0] if device.type == "cuda" else CPU_MODES[0])
    modes = [Mode.parse(m) for m in given.split(",")]
    records = bench_shapes(list(shapes), modes, device, args.round_clients, args.model_batches,
                           args.timed_rounds, args.records)
    return 0 if args.records or all(r["ok"] for r in records) else 1
