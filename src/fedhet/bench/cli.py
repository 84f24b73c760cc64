"""`fedhet bench` and `fedhet gpu-check`: their arguments, without importing torch until one
runs (the other commands start faster)."""

from __future__ import annotations

import argparse
from typing import Any

from fedhet.cli.args import json_object
from fedhet.engine.modes import CPU_MODES, FLAGS, GPU_MODES, PRECISIONS


def cmd_bench(args: argparse.Namespace) -> int:
    """The throughput comparison, then with `--round-time` the paper round in each precision
    mode (`fedhet.bench.paper_round`); `--round-only` skips the comparison; `--models` times
    a round of every model shape of `--scales` instead (`fedhet.bench.models`)."""
    from fedhet.bench import paper_round, throughput
    from fedhet.engine.device import pick_device

    device = pick_device(args.device)
    if args.models:
        from fedhet.bench import models

        return models.main(args, device)
    if not args.round_only:
        throughput.throughput(args, device)
    if args.round_time or args.round_only:
        return paper_round.main(args, device)
    return 0


def cmd_gpu_check(args: argparse.Namespace) -> int:
    """The GPU check (`fedhet.bench.gpucheck.check`)."""
    from fedhet.bench.gpucheck.check import main

    return main(args)


def add_subcommands(sub: Any) -> None:
    """Add `bench` and `gpu-check` to the `fedhet` command's subparsers."""
    p = sub.add_parser("bench", help="local-training throughput: our engine vs a DataLoader baseline")
    p.add_argument("--model", default="simplecnn")
    p.add_argument("--width", type=float, default=1.0)
    p.add_argument("--dataset", default="digits10")
    p.add_argument("--options", type=json_object, default={"channels": 3, "size": 32},
                   help="dataset options as JSON")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--samples", type=int, default=2048, help="samples per client")
    p.add_argument("--device", default="auto")
    p.add_argument("--client-workers", type=int, default=1,
                   help="clients our engine trains at once (runtime.client_workers)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per timed window")
    p.add_argument("--repeats", type=int, default=3, help="timed windows; medians are printed")
    p.add_argument("--round-time", action="store_true",
                   help="also time one FedAvg round of the paper setting (ResNet-18, 5 clients "
                   "× 5000 random CIFAR-shaped images, batch 128) in each of --modes: our engine "
                   "with clients one at a time (--client-workers at once), stacked "
                   "(training.vectorise_clients), and the reference loop "
                   "(fedhet.bench.paper_round)")
    p.add_argument("--round-only", action="store_true",
                   help="only the paper round of --round-time, not the throughput comparison")
    p.add_argument("--modes", help=f"comma-separated modes of --round-time: "
                   f"{', '.join(PRECISIONS)}, each optionally with "
                   f"{' and '.join('+' + flag for flag in FLAGS)} (default on a GPU: "
                   f"{','.join(GPU_MODES)}; on a CPU: {','.join(CPU_MODES)})")
    p.add_argument("--profile", metavar="DIR",
                   help="after timing each --round-time variant, profile one more round "
                   "(torch.profiler) and write its busiest operators to "
                   "DIR/<variant>-<mode>.txt ('+' in the mode written '_')")
    p.add_argument("--variants", default="engine,stacked,reference",
                   help="what --round-time times, comma-separated: engine, eager (the engine "
                   "without CUDA graphs), stacked, reference (default: %(default)s)")
    p.add_argument("--timed-rounds", type=int, default=1,
                   help="rounds of --round-time timed after its warm-up; the median is reported")
    p.add_argument("--round-samples", type=int, default=5000,
                   help="images per client of --round-time (fewer: a quick look on a CPU)")
    p.add_argument("--round-clients", type=int, default=5, help="clients of --round-time")
    p.add_argument("--round-batch", type=int, default=128, help="batch size of --round-time")
    p.add_argument("--round-model", default="resnet18", help="model of --round-time")
    p.add_argument("--round-width", type=float, default=1.0, help="model width of --round-time")
    p.add_argument("--models", action="store_true",
                   help="instead: time one FedAvg round of our engine for every model shape "
                   "(model, width, options, image shape, classes, batch size) the --scales "
                   "train, in --modes (default: the device's fastest), and append a record per "
                   "shape to --records for `fedhet cost --throughput` (fedhet.bench.models)")
    p.add_argument("--scales", default="small,paper",
                   help="scales whose model shapes --models times (default: %(default)s)")
    p.add_argument("--only", metavar="MODELS",
                   help="--models: only the shapes of these models, comma-separated")
    p.add_argument("--model-batches", type=int, default=20,
                   help="--models: full batches per client in a timed round "
                   "(default: %(default)s; --round-clients clients)")
    p.add_argument("--root", default=".", help="--models: the repository (its config/)")
    p.add_argument("--records", metavar="FILE",
                   help="append each --round-time measurement to this JSON results file "
                   "(ci/gpu-check.sh's gpu-check.json); the exit status is then 0 once every "
                   "measurement is recorded, failed ones included")
    p.set_defaults(func=cmd_bench)

    from fedhet.bench.gpucheck import check

    p = sub.add_parser("gpu-check", help="CUDA tests and benchmarks of this machine's GPU in at "
                       "most four minutes, offline (ci/gpu-check.sh runs it from src/)",
                       description=check.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu", action="store_true",
                   help="every part shrunk to seconds, on the CPU (CI runs this so the check "
                   "never rots)")
    p.add_argument("--out", default="gpu-check.json", metavar="FILE",
                   help="the results file (default: %(default)s)")
    p.add_argument("--fmnist", metavar="DIR",
                   help="Fashion-MNIST's four IDX files, .gz or not (default $FEDHET_FMNIST_DIR, "
                   "else /usr/share/datasets/fashion-mnist, Debian's dataset-fashion-mnist)")
    p.add_argument("--work", metavar="DIR",
                   help="scratch space for datasets, runs and logs (default: a temporary "
                   "directory, deleted afterwards unless a part failed)")
    p.set_defaults(func=cmd_gpu_check)
