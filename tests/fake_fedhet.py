"""A stand-in for the `fedhet` command in workflow tests: same arguments and output files,
no torch, milliseconds per call. Accuracies are a deterministic function of the run settings.
Every call is appended to $FAKE_FEDHET_LOG (one line: command and run id or dataset).

Like `fedhet.cli.main`, a GPU command first claims its share of the GPUs (fedhet.local.gpushare).
Where set: $FAKE_FEDHET_DEVICES gets one JSON line per GPU command (the CUDA_VISIBLE_DEVICES
it ran with, whether a fork server ran it, when it ran), $FAKE_FEDHET_SECONDS makes it last
that long, and $FAKE_FEDHET_FORKSERVER names a fork server whose workers run this fake."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

# numpy (imported with the run settings' registries) starts a BLAS thread per core, which this
# process never uses: one saves a third of its CPU time, hundreds of times per workflow test
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def log(line: str) -> None:
    path = os.environ.get("FAKE_FEDHET_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def main(argv: list[str]) -> int:
    from fedhet.local.gpushare import GPU_COMMANDS, claim_for_command

    claim_for_command(argv)
    code = served(argv)
    if code is not None:
        return code
    start = time.time()
    code = run(argv)
    if argv and argv[0] in GPU_COMMANDS and os.environ.get("FAKE_FEDHET_DEVICES"):
        record = {"command": argv[0], "pid": os.getpid(), "start": start, "end": time.time(),
                  "devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                  "served": "fedhet.local.server" in sys.modules}
        with open(os.environ["FAKE_FEDHET_DEVICES"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    return code


def served(argv: list[str]) -> int | None:
    """The exit status of `argv` run by the fork server at $FAKE_FEDHET_FORKSERVER (whose
    workers run this fake), as `fedhet.cli.main` asks $FEDHET_FORKSERVER's; None without."""
    path = os.environ.pop("FAKE_FEDHET_FORKSERVER", None)  # the worker runs it here
    if not path:
        return None
    from fedhet.local.protocol import ENV, run_remote

    os.environ[ENV] = path
    try:
        return run_remote(argv)
    finally:
        del os.environ[ENV]


def run(argv: list[str]) -> int:
    if argv and argv[0] in ("train", "calibrate"):
        time.sleep(float(os.environ.get("FAKE_FEDHET_SECONDS") or 0))
    parser = argparse.ArgumentParser(prog="fedhet")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare-data")
    p.add_argument("--dataset", required=True)
    p.add_argument("--root", default="resources/datasets")
    p.add_argument("--options", default="{}")
    p.add_argument("--download", action="store_true")
    p = sub.add_parser("partition")
    for flag in (
        "--dataset",
        "--root",
        "--options",
        "--scheme",
        "--clients",
        "--alpha",
        "--classes-per-client",
        "--min-size",
        "--seed",
        "--partition-root",
        "--out",
    ):
        p.add_argument(flag)
    p.add_argument("--no-cap", action="store_true")
    p = sub.add_parser("train")
    p.add_argument("--config-json", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ckpt-dir")
    p = sub.add_parser("calibrate")
    p.add_argument("--run", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--method")
    p.add_argument("--settings", default="{}")
    p.add_argument("--device")
    p = sub.add_parser("virtual-data")
    p.add_argument("--settings", required=True)
    p.add_argument("--root", default="resources/datasets")
    p = sub.add_parser("distill")
    p.add_argument("--settings", required=True)
    p.add_argument("--root", default="resources/datasets")
    p.add_argument("--partitions", default="resources/partitions")
    p = sub.add_parser("virtual-grid")
    for flag in ("--data", "--out", "--per-class", "--title"):
        p.add_argument(flag)
    p.add_argument("--note", action="append")  # a paragraph of the footnote each
    p = sub.add_parser("client-tsne")
    p.add_argument("--runs", nargs="+")
    p.add_argument("--labels", nargs="+")
    for flag in ("--clients", "--per-client", "--out", "--title"):
        p.add_argument(flag)
    p.add_argument("--note", action="append")
    p = sub.add_parser("invert")
    for flag in ("--run", "--statistics", "--out", "--steps", "--tv", "--device", "--title"):
        p.add_argument(flag)
    p.add_argument("--note", action="append")
    p = sub.add_parser("bias")
    for flag in ("--run", "--out", "--local-steps", "--samples", "--seed", "--threads",
                 "--device", "--title"):
        p.add_argument(flag)
    p.add_argument("--note", action="append")
    p = sub.add_parser("figure-data")
    p.add_argument("kind")
    p.add_argument("--runs", nargs="+")
    for flag in ("--artefact", "--options", "--out", "--device"):
        p.add_argument(flag)
    args = parser.parse_args(argv)
    if args.command == "figure-data":
        return figure_data(args)
    if args.command == "bias":
        return bias(args)
    if args.command in ("virtual-data", "virtual-grid", "client-tsne", "invert"):
        return vhl_command(args)
    if args.command == "distill":
        from fedhet.distill.spec import distilled_path

        path = distilled_path(json.loads(args.settings), args.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args.settings)
        Path(f"{path}.sha256").write_text("fake\n")
        log(f"distill {path.name}")
        return 0

    if args.command == "prepare-data":
        path = Path(args.root) / f"{args.dataset}-fake.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args.options)
        log(f"prepare-data {args.dataset}")
        print(path)
        return 0
    if args.command == "partition":
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(" ".join(argv))
        log(f"partition {args.out}")
        return 0

    if args.command == "calibrate":
        return calibrate(args)

    from fedhet.config import run_id

    # the workflow hands each job its run resolved and validated (workflow/rules/train.smk);
    # resolving it again would import every dataset module, 40 % of this call's time
    run = json.loads(args.config_json)
    if run["partition"]["file"] and not Path(run["partition"]["file"]).exists():
        print(f"missing partition file {run['partition']['file']}", file=sys.stderr)
        return 1
    rid = run_id(run)
    digest = int(hashlib.sha256(rid.encode()).hexdigest()[:8], 16)
    top = 0.3 + 0.6 * (digest % 1000) / 1000
    rounds = run["training"]["rounds"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    accs = [top * min(1.0, (r + 1) / (0.6 * rounds)) for r in range(rounds)]
    domains = domain_names(run)
    history = []
    with open(out / "metrics.jsonl", "w", encoding="utf-8") as fh:
        for r, acc in enumerate(accs, start=1):
            rec = {
                "round": r,
                "test_acc": acc,
                "test_loss": 1 - acc,
                "train_loss": 1 - acc,
                "lr": run["training"]["lr"],
                "seconds": 0.01 * r,
                "train_seconds": 0.005 * r,
                "client_drift": 1.0 / r,
                "weight_divergence_total": 1.0 / r,
                "weight_divergence": {"head": 0.1 / r},
                "stage_divergence": {"block1": 0.2 / r, "head": 0.1 / r},
                "layer_divergence": {"blocks.0.0": 0.2 / r, "head": 0.1 / r},
            }
            if run["eval"]["client_models"]:
                rec["local_test_acc"] = acc / 2
            if domains:  # the test domains' accuracies spread around the overall one
                rec["domain_acc"] = {d: acc * (0.8 + 0.1 * (i % 5)) for i, d in enumerate(domains)}
                rec["domain_loss"] = {d: 1 - a for d, a in rec["domain_acc"].items()}
                rec["mean_domain_acc"] = sum(rec["domain_acc"].values()) / len(domains)
                rec["mean_domain_loss"] = 1 - rec["mean_domain_acc"]
            fh.write(json.dumps(rec) + "\n")
            history.append(rec)
    best = max(accs)
    final = {
        "status": "completed",
        "best_acc": best,
        "best_round": accs.index(best) + 1,
        "last_acc": accs[-1],
        "top5_mean_acc": best,
        "rounds_trained": rounds,
        "diverged_round": None,
        "run_id": rid,
        "mean_step_seconds": 0.001,
        "communicated_params": 1000,
    }
    if run["eval"]["client_models"]:
        final["local_top5_mean_acc"] = best / 2
    if domains:
        final["last_domain_acc"] = history[-1]["domain_acc"]
        final["last_domain_loss"] = history[-1]["domain_loss"]
        final["mean_domain_acc_last"] = history[-1]["mean_domain_acc"]
        final["mean_domain_acc_best"] = max(h["mean_domain_acc"] for h in history)
    if any(p["name"] == "fedlgd" for p in run.get("plugins") or []):  # its final virtual data
        virtual = out / "plugins" / "fedlgd" / "fedlgd_virtual.pt"
        virtual.parent.mkdir(parents=True, exist_ok=True)
        virtual.write_bytes(b"fake")
    if any(p["name"] == "fedimpro" for p in run.get("plugins") or []):  # its saved statistics
        stats = out / "plugins" / "fedimpro" / "shared_statistics.pt"
        stats.parent.mkdir(parents=True, exist_ok=True)
        stats.write_bytes(b"fake")
        final["files"] = [stats.relative_to(out).as_posix()]
    (out / "final.json").write_text(json.dumps(final, indent=2))
    (out / "resolved.yaml").write_text(json.dumps(run, indent=2))
    (out / "model.pt").write_bytes(b"fake")
    log(f"train {rid}")
    return 0


def calibrate(args: argparse.Namespace) -> int:
    """calibration.json as `fedhet calibrate` writes it: accuracy before = the run's last
    accuracy, after = a deterministic function of the run and the settings."""
    settings = json.loads(args.settings)
    if args.method:
        settings["method"] = args.method
    run_dir, out = Path(args.run), Path(args.out)
    final = json.loads((run_dir / "final.json").read_text())
    if not (run_dir / "model.pt").exists():
        print(f"missing {run_dir / 'model.pt'}", file=sys.stderr)
        return 1
    key = json.dumps(settings, sort_keys=True) + final["run_id"]
    digest = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
    before = final["last_acc"]
    after = min(1.0, before + 0.1 * (digest % 1000) / 1000)
    method = settings.get("method", "ccvr")
    result = {
        "method": method,
        "run_id": final["run_id"],
        "acc_before": before,
        "acc_after": after,
        "gain": after - before,
        "mean_sliced_wasserstein": (digest % 97) / 97 if method == "ccvr" else None,
        "settings": {"fraction": 1.0, "samples_per_class": 100, **settings},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps(result, indent=2))
    (out / "model.pt").write_bytes(b"fake")
    log(f"calibrate {final['run_id']} {method}")
    return 0


def bias(args: argparse.Namespace) -> int:
    """OUT/bias.json and OUT/bias.png as `fedhet bias` writes them (numbers made up)."""
    for name in ("model.pt", "resolved.yaml"):
        if not (Path(args.run) / name).exists():
            print(f"missing {Path(args.run) / name}", file=sys.stderr)
            return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"run": args.run, "local_steps": int(args.local_steps),
              "x2_argmax_histogram": {"F_1": [1, 1, 0, 0], "F_g": [0, 1, 0, 1]}, "tsne": {}}
    (out / "bias.json").write_text(json.dumps(result))
    (out / "bias.png").write_bytes(b"\x89PNG fake")
    log(f"bias {args.run}")
    return 0


FIGURE_DATA_NEEDS = {  # files of each run a kind reads
    "membership": ("final.json", "model.pt"),
    "domain-tsne": ("final.json", "model.pt"),
    "pixel-hist": ("resolved.yaml",),
    "virtual-images": ("plugins/fedlgd/fedlgd_virtual.pt",),
}


def figure_data(args: argparse.Namespace) -> int:
    """OUT as `fedhet figure-data KIND` writes it: the kind's structure, made-up numbers."""
    needed = ([Path(args.artefact)] if args.artefact else
              [Path(r) / name for r in args.runs for name in FIGURE_DATA_NEEDS.get(args.kind, ())])
    for path in needed:
        if not path.exists():
            print(f"missing {path}", file=sys.stderr)
            return 1
    options = json.loads(args.options or "{}")
    runs = [Path(r).name for r in args.runs or []]
    wanted = options.get("clients")
    clients = (list(wanted) if isinstance(wanted, list) else list(range(int(wanted or 2))))
    if args.kind == "membership":
        result = {"runs": [{"run": r, "auc": 0.5, "tpr_at_1pct_fpr": 0.01, "members": 100,
                            "nonmembers": 100, "fpr": [0.0, 0.01, 0.1, 1.0],
                            "tpr": [0.0, 0.01, 0.1, 1.0]} for r in runs]}
    elif args.kind == "domain-tsne":
        domains = [str(d) for d in options.get("domains") or ("domain 0", "domain 1")]
        result = {"runs": [{"run": r, "domains": domains, "num_classes": 2, "points": [
            {"x": float(i), "y": float(-i), "class": i % 2, "domain": d}
            for i, d in enumerate(domains * 2)]} for r in runs]}
    elif args.kind == "distilled-tsne":
        result = {"artefact": Path(args.artefact).stem, "num_classes": 2,
                  "clients": [{"client": k, "domain": None} for k in clients],
                  "points": [{"x": float(i), "y": float(k), "class": i % 2, "client": k,
                              "kind": "distilled" if i == 2 else "original"}
                             for k in clients for i in range(3)]}
    elif args.kind == "pixel-hist":
        bins = int(options.get("bins", 64))
        result = {"run": runs[0], "num_clients": len(clients), "channels": 3,
                  "edges": [b * 256 / bins for b in range(bins + 1)],
                  "clients": [{"client": k, "domain": None, "images": 10,
                               "shares": [[1 / bins] * bins] * 3} for k in clients]}
    else:  # virtual-images: 2×2 RGB images, classes 0 and 1
        image = [[[0, 128, 255], [255, 128, 0]], [[0, 0, 0], [255, 255, 255]]]
        panels = [{"client": k, "count": 2, "labels": [0, 1], "images": [image, image]}
                  for k in [*clients, None]]
        result = {"num_classes": 2, "num_clients": len(clients), "height": 2, "width": 2,
                  "channels": 3, "per_class": int(options.get("per_class", 4)),
                  "panels": panels}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result))
    log(f"figure-data {args.kind} {' '.join(runs) or Path(args.artefact).name}")
    return 0


def domain_names(run: dict) -> list[str] | None:
    """The test domains of a multi-domain stand-in, named as its builder names them."""
    name = run["dataset"]["name"]
    if name not in ("digits_domains", "digits_corrupted"):
        return None  # without importing the dataset modules (as resolving the run would)
    from fedhet.data import describe

    options = describe(name, run["dataset"].get("options"))["options"]
    if name == "digits_domains":
        from fedhet.data.standins import DOMAIN_NAMES

        kept = options["domains"] or DOMAIN_NAMES
        return [d if isinstance(d, str) else DOMAIN_NAMES[d] for d in kept]
    return [f"{c}-{k}" for c in options["corruptions"]  # digits_corrupted
            for k in range(options["clients_per_corruption"])]


def vhl_command(args: argparse.Namespace) -> int:
    """The cached virtual dataset (at the path the real command uses) or a figure file."""
    if args.command == "virtual-data":
        from fedhet.virtual.spec import virtual_path

        path = virtual_path(json.loads(args.settings), args.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(args.settings)
        Path(f"{path}.sha256").write_text("fake\n")
        log(f"virtual-data {path.name}")
        print(path)
        return 0
    if args.command == "client-tsne":
        for run in args.runs:
            if not (Path(run) / "final.json").exists():
                print(f"missing run {run}", file=sys.stderr)
                return 1
    elif args.command == "invert":
        for path in (Path(args.run) / "model.pt", Path(args.statistics)):
            if not path.exists():
                print(f"missing {path}", file=sys.stderr)
                return 1
    elif not Path(args.data).exists():
        print(f"missing {args.data}", file=sys.stderr)
        return 1
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_bytes(b"\x89PNG fake")
    log(f"{args.command} {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
