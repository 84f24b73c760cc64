"""`fedhet` command line: train, run-id, partition, evaluate, methods, cost, timing, and the
subcommands registered by `add_subcommands` of `fedhet.cli.data` (prepare-data, datasets,
seed-fmnist), `fedhet.bench.cli` (bench, gpu-check), `fedhet.analysis.cli`, ... `args`: the
argparse value types they share; `methods`: what `fedhet methods` prints. `run-script`, the fork
server's way of running a workflow script, works but is left out of `fedhet --help`.

Heavy imports (torch, torchvision) happen inside the commands, so `fedhet --help` and the
torch-free commands stay fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fedhet.cli.args import json_object
from fedhet.config import ConfigError, load_yaml
from fedhet.declare import KINDS
from fedhet.engine.modes import GPU_MODES, PRECISIONS


def _set_dotted(run: dict[str, Any], assignment: str) -> None:
    """Apply `a.b.c=value` (value parsed as YAML) to a nested dict; a numeric part indexes a
    list, e.g. `plugins.0.params.steps=10`."""
    import yaml

    if "=" not in assignment:
        raise ConfigError(f"--set expects KEY=VALUE, got '{assignment}'")
    key, raw = assignment.split("=", 1)
    *path, leaf = key.split(".")

    def slot(node: Any, part: str, depth: int) -> str | int:
        """`part` as a key of the mapping or an index of the list `node`."""
        where = ".".join(path[:depth])
        if isinstance(node, dict):
            return part
        if not isinstance(node, list):
            raise ConfigError(f"--set {key}: '{where}' is not a mapping or a list")
        if not part.isdigit() or int(part) >= len(node):
            raise ConfigError(f"--set {key}: '{part}' is not an index of the {len(node)}-item "
                              f"list at '{where}'")
        return int(part)

    node: Any = run
    for depth, part in enumerate(path):
        index = slot(node, part, depth)
        node = node.setdefault(index, {}) if isinstance(node, dict) else node[index]
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML "
                          f"({' '.join(str(err).split())})") from None
    node[slot(node, leaf, len(path))] = value


def _load_run(args: argparse.Namespace) -> dict[str, Any]:
    if args.config and args.config_json:
        raise ConfigError("give either --config or --config-json, not both")
    run = load_yaml(args.config) if args.config else dict(args.config_json or {})
    for assignment in args.set or []:
        _set_dotted(run, assignment)
    return run


# What `fedhet train` says when given no settings: the defaults alone are not a run worth
# training (they fill in what a run file leaves out), so it points to one that is.
NO_RUN_GIVEN = (
    "no run settings given: pass --config FILE or --config-json JSON (the defaults only fill in "
    "what they leave out). examples/run.yaml is a small run that works offline and learns in "
    "about a minute: fedhet train --config examples/run.yaml --out results/myrun"
)


def cmd_train(args: argparse.Namespace) -> int:
    if not (args.config or args.config_json):
        raise ConfigError(NO_RUN_GIVEN)
    from fedhet.train import train

    run = _load_run(args)
    if args.device:
        run.setdefault("runtime", {})["device"] = args.device
    final = train(run, args.out, args.ckpt_dir, keep_checkpoint=args.keep_checkpoint,
                  stop_after=args.stop_after)
    print(json.dumps(final, indent=2))
    return 0


def cmd_run_id(args: argparse.Namespace) -> int:
    from fedhet.config import resolve_run, run_id

    print(run_id(resolve_run(_load_run(args))))
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    import numpy as np

    from fedhet.data import load_dataset
    from fedhet.partition import count_matrix, load_or_make_partition

    data = load_dataset(args.dataset, args.root, args.options or {})
    settings = {
        "scheme": args.scheme, "num_clients": args.clients, "alpha": args.alpha,
        "classes_per_client": args.classes_per_client, "min_size": args.min_size,
        "cap": not args.no_cap, "root": args.partition_root, "file": None,
    }
    part = load_or_make_partition(data, settings, args.seed)
    if args.out:
        part.save(args.out)
    counts = count_matrix(np.asarray(data.y_train), part, data.num_classes)
    width = max(5, len(str(counts.max())) + 1)
    print("client " + "".join(f"{c:>{width}}" for c in range(data.num_classes)) + f"{'total':>8}")
    for k, row in enumerate(counts):
        print(f"{k:>6} " + "".join(f"{v:>{width}}" for v in row) + f"{row.sum():>8}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from fedhet.saved import evaluate_run

    print(json.dumps(evaluate_run(args.run, args.model, args.device), indent=2))
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    from fedhet.cli.methods import describe

    print(describe(args.kind))
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    """Print what a scale costs before it runs (fedhet.cost.estimate)."""
    from fedhet.cost.estimate import main as cost_main

    return cost_main(args)


def cmd_timing(args: argparse.Namespace) -> int:
    """Where a workflow run's time went, from Snakemake's log (fedhet.local.joblog)."""
    from fedhet.local import joblog

    here = joblog.load(args.log)
    print(joblog.summary(here, args.cores))
    if args.against:
        print(joblog.comparison(here, joblog.load(args.against), args.against))
    return 0


def cmd_run_script(args: argparse.Namespace) -> int:
    """Run a workflow script in this process, as `python SCRIPT` would (the fork server runs
    Snakemake's `script:` jobs so, with the plotting libraries already imported)."""
    import runpy

    sys.argv = [args.script]
    streams = sys.stdout, sys.stderr
    try:
        runpy.run_path(args.script, run_name="__main__")
    finally:  # a script may point them at a log file it has closed since
        sys.stdout, sys.stderr = streams
    return 0


# the command the fork server runs a workflow script with (`fedhet.local.protocol`)
HIDDEN_COMMAND = "run-script"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedhet", description="Federated learning under data heterogeneity, reproducibly."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def run_source(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="run settings as a YAML file")
        p.add_argument("--config-json", type=json_object, help="run settings as a JSON object")
        p.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override one setting, e.g. --set training.rounds=5 (repeatable)")

    p = sub.add_parser("train", help="train one federated run and write its results",
                       description="Train one run, given by --config or --config-json (e.g. "
                       "examples/run.yaml). Writes resolved.yaml, metrics.jsonl, final.json, "
                       "model.pt into --out. With --ckpt-dir, checkpoints there and resumes from it.")
    run_source(p)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--ckpt-dir", help="checkpoint directory (keep it outside declared outputs)")
    p.add_argument("--device", help="override runtime.device (cpu, cuda, cuda:1, auto)")
    p.add_argument("--keep-checkpoint", action="store_true", help="keep the checkpoint after success")
    p.add_argument("--stop-after", type=int, metavar="ROUND",
                   help="checkpoint and exit after this round, as if killed (resume by rerunning)")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("run-id", help="print the id of a run (prefix-hash-seed)")
    run_source(p)
    p.set_defaults(func=cmd_run_id)

    from fedhet.cli.data import add_subcommands as add_data_subcommands

    add_data_subcommands(sub)

    p = sub.add_parser("partition", help="build a partition and print its client × class counts")
    p.add_argument("--dataset", required=True)
    p.add_argument("--root", default="resources/datasets")
    p.add_argument("--options", type=json_object, help="dataset options as JSON")
    p.add_argument("--scheme", default="dirichlet")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--alpha", type=float, default=0.1)
    p.add_argument("--classes-per-client", type=int, default=2)
    p.add_argument("--min-size", type=int)
    p.add_argument("--no-cap", action="store_true", help="LDA without the official size cap")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--partition-root", default="resources/partitions")
    p.add_argument("--out", help="also save the partition to this .npz file")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("evaluate", help="evaluate a run's saved model on its test set")
    p.add_argument("--run", required=True, help="run directory (with resolved.yaml)")
    p.add_argument("--model", help="model file (default: RUN/model.pt)")
    p.add_argument("--device", default="auto")
    p.set_defaults(func=cmd_evaluate)

    from fedhet.bench.cli import add_subcommands as add_bench_subcommands

    add_bench_subcommands(sub)

    p = sub.add_parser("methods", help="list every installed method with its kind, package "
                       "and parameters",
                       description="List fedhet's methods and those other installed packages "
                       "declare (entry point group fedhet.methods), with kind, package and "
                       "parameters; external packages that were refused are listed with why.")
    p.add_argument("--kind", choices=KINDS, help="only methods of this kind")
    p.set_defaults(func=cmd_methods)

    p = sub.add_parser("cost", help="what a scale costs before it runs: runs, images, TFLOP and "
                       "GPU-hours per paper",
                       description="Per paper and in total: runs, training and evaluation images "
                       "and TFLOP, and GPU-hours at each model's throughput (measured, from "
                       "--throughput, else a stated default). Reads only the configs: no data "
                       "needs to be on disk.")
    p.add_argument("--scale", required=True, help="a scale of config/scales (demo, small, paper)")
    p.add_argument("--throughput", metavar="FILE",
                   help="measured throughput: JSON records {what, tflops, model?, mode?, ok?}, "
                   "e.g. the gpu-check.json of ci/gpu-check.sh")
    p.add_argument("--mode", help="use only the throughput records of this mode: a precision "
                   f"({', '.join(PRECISIONS)}) takes the fastest record in it whatever its "
                   f"speed flags; a whole mode ({GPU_MODES[0]}) only records in exactly that "
                   "mode")
    p.add_argument("--root", default=".", help="repository root (holds config/)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("timing", help="where a workflow run's time went, from Snakemake's log",
                       description="Jobs, wall time, job-seconds per rule and how busy the cores "
                       "were, read from a Snakemake log (.snakemake/log/*.snakemake.log); with "
                       "--against, the same DAG's log from another machine or version, job for "
                       "job (only the jobs both finished).")
    p.add_argument("log", help="a Snakemake run's log")
    p.add_argument("--against", metavar="LOG", help="another run's log of the same DAG")
    p.add_argument("--cores", type=int,
                   help="cores the run had (default: the log's 'Provided cores')")
    p.set_defaults(func=cmd_timing)

    # plumbing of the fork server (fedhet.local), not a user's command: left out of `fedhet
    # --help` (no `help=`: argparse.SUPPRESS there prints "==SUPPRESS==" on Python 3.10-3.11;
    # and not in the list of commands, below)
    p = sub.add_parser(HIDDEN_COMMAND, description="Run a workflow script (a Snakemake `script:` "
                       "job's file) in this process, as `python SCRIPT` would.")
    p.add_argument("script", help="the script file")
    p.set_defaults(func=cmd_run_script)

    from fedhet.posthoc.cli import add_subcommands as add_posthoc_subcommands

    add_posthoc_subcommands(sub)
    from fedhet.cli.artefacts import add_subcommands as add_artefact_subcommands

    add_artefact_subcommands(sub)
    from fedhet.virtual.cli import add_subcommands as add_virtual_subcommands

    add_virtual_subcommands(sub)
    from fedhet.analysis.cli import add_subcommands as add_analysis_subcommands

    add_analysis_subcommands(sub)
    sub.metavar = "{" + ",".join(name for name in sub.choices if name != HIDDEN_COMMAND) + "}"
    return parser


def main(argv: list[str] | None = None) -> int:
    from fedhet.local.gpushare import claim_for_command
    from fedhet.local.protocol import run_remote

    argv = sys.argv[1:] if argv is None else list(argv)
    claim_for_command(argv)  # a local workflow job's GPUs, wherever the command then runs
    served = run_remote(argv)  # a fork server of the running workflow, if there is one
    if served is not None:
        return served
    args = build_parser().parse_args(argv)
    from fedhet.engine.memory import keep_freed_memory

    keep_freed_memory()  # every command's tensors: reused pages, not fresh ones (same numbers)
    try:
        return args.func(args)
    except Exception as err:
        if not _is_user_error(err):
            raise
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"fedhet {args.command}: error: {message}", file=sys.stderr)
        return 2


def _is_user_error(err: Exception) -> bool:
    """Bad settings, names, files or missing data: reported in one line, no traceback."""
    if isinstance(err, (ConfigError, KeyError, ValueError, FileNotFoundError)):
        return True
    if isinstance(err, RuntimeError):
        from fedhet.data import CacheError, DatasetNotAvailable

        return isinstance(err, (CacheError, DatasetNotAvailable))
    return False

