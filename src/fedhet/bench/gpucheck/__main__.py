"""`python -m fedhet.bench.gpucheck`: one part of the GPU check, or a part's failure.

`fedhet gpu-check` (`fedhet.bench.gpucheck.check`) runs each part so, in a process of its own,
and records a part that did not finish.

python -m fedhet.bench.gpucheck tests|shared-runs|real-run --out FILE --work DIR [--cpu]
    [--fmnist DIR]
python -m fedhet.bench.gpucheck packing --out FILE --work DIR [--cpu] [--counts 1,2,4]
    [--rounds N] [--steps graph,eager] [--model NAME] [--batch-size B]: outside the check,
    K runs sharing the device for each K, graph-replayed and eager, timed while all K train
    (what `runs_per_gpu` is set from)
python -m fedhet.bench.gpucheck failed --out FILE --what PART --note WHY [--cpu]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

# What --cpu shrinks the parts to: seconds on a CPU, the same code paths.
CPU_SHARED = {"runs": 2, "rounds": 2, "clients": 2, "local_steps": 1, "width": 0.0625}
CPU_REAL_RUN = ("training.local_steps=2", "training.clients_per_round=2", "model.width=0.0625")


def _context(args: argparse.Namespace):
    import torch

    from fedhet.bench.gpucheck.parts import Context

    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("fedhet.bench.gpucheck: no CUDA device is visible; pass --cpu for the "
                         "CPU smoke run")
    args.work.mkdir(parents=True, exist_ok=True)
    return Context(args.out, torch.device("cpu" if args.cpu else "cuda"), args.work)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedhet.bench.gpucheck",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("tests", "shared-runs", "real-run", "packing", "failed"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, required=True, help="the results file")
        p.add_argument("--work", type=Path, default=Path("gpu-check-work"),
                       help="scratch directory (datasets, runs, logs)")
        p.add_argument("--cpu", action="store_true", help="shrunk to seconds, on the CPU")
        if name == "real-run":
            p.add_argument("--fmnist", type=Path, required=True,
                           help="directory with Fashion-MNIST's four IDX files (.gz or not)")
        if name == "packing":
            p.add_argument("--counts", default="1,2,4",
                           help="how many runs share the device, comma-separated")
            p.add_argument("--rounds", type=int, default=20,
                           help="rounds per run: enough that the runs train at once for a "
                           "while after the slowest start-up")
            p.add_argument("--steps", default="graph,eager",
                           help="graph (runtime.cuda_graphs true), eager, or both")
            p.add_argument("--model", default=None,
                           help="the runs' model (default the shared runs' resnet18)")
            p.add_argument("--batch-size", type=int, default=None,
                           help="the runs' batch size (default the shared runs' 64)")
        if name == "failed":
            p.add_argument("--what", required=True, help="the part that did not finish")
            p.add_argument("--note", required=True, help="why")
    args = parser.parse_args(argv)

    if args.command == "failed":
        return _failed(args)

    from fedhet.bench.gpucheck import parts

    ctx = _context(args)
    if args.command == "tests":
        # only the files with the marker: collecting the whole suite would import what other
        # tests need (Snakemake, its plug-ins), which a bare GPU machine may not have
        marked = parts.marked_test_files()
        if marked:
            parts.tests(ctx, marked)
        else:
            ctx.record("pytest -m gpu", ok=False, note="no test file uses the gpu marker")
    elif args.command in ("packing", "shared-runs"):
        spec = parts.SharedRuns(**CPU_SHARED) if args.cpu else parts.SharedRuns()
        if args.command == "shared-runs":
            parts.shared_runs(ctx, spec)
        else:
            counts = [int(k) for k in args.counts.split(",")]
            steps = [{"graph": True, "eager": False}[s.strip()] for s in args.steps.split(",")]
            shape = {"rounds": args.rounds, "model": args.model, "batch_size": args.batch_size}
            spec = dataclasses.replace(spec, **{k: v for k, v in shape.items() if v is not None})
            parts.packing(ctx, counts, spec, steps)
    else:
        parts.real_run(ctx, args.fmnist, CPU_REAL_RUN if args.cpu else ())
    return 0


def _failed(args: argparse.Namespace) -> int:
    """Record a part that did not finish; the device's name if torch can still give it."""
    import torch

    from fedhet.bench.gpucheck.records import append_record, device_name, make_record

    try:
        where = device_name("cpu" if args.cpu else "cuda")
    except Exception as err:  # the failure being recorded may be the device's own
        where = f"cuda (unavailable: {type(err).__name__}: {err})"
    append_record(args.out, make_record(args.what, "-", where, str(torch.__version__),
                                        ok=False, note=args.note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
