"""FedLGD's CIFAR-10-C protocol on real Fashion-MNIST (offline): FedAvg and VHL on the local
virtual data vs FedLGD.

`fmnist_corrupted`: Fashion-MNIST's test images under our own corruptions (`--corruptions`, at
every severity), each corruption split into 3 Dirichlet(α = 2) clients as CIFAR-10-C's 57
clients are, one domain per client, 90/10 train/test. Every client distils IPC 10 virtual images
per class once (per-class statistics, then distribution matching with Siamese augmentation
against fresh random ConvNets): the `distilled` artefact, shared by the three methods. FedAvg
and VHL train on it; FedLGD refines it with the global model at the rounds of τ and adds the
server's gradient-matched global virtual data and the SupCon regulariser (λ = 1, the paper's
CIFAR10C value). Plain SGD at lr 0.01, batch 32, one local epoch, every client every round.
Accuracy: the global model on each client's own test set, the unweighted mean over clients
(the paper's "average"), at the last round.

Reductions for two CPU cores (the same for every method; printed with the results):
`--rounds` (paper 100), `--warmup` DM iterations (paper 10,000) with `--real-batch` real images
per class (paper 256) against a random ConvNet of `--embed-width` (paper 1 = 128 channels), the
trained ConvNet at `--width` (paper 1), `--local-steps` / `--server-steps` distillation steps
(paper 100 / 500), `--base-per-class` Fashion-MNIST test images per class (all 1,000 = paper
size), `--eval-every` rounds between evaluations. Needs Fashion-MNIST seeded
(`fedhet seed-fmnist`).

    python benchmarks/fedlgd_corrupted_fmnist.py --out results/evidence/fedlgd_fmnist
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from fedhet.train import train

METHODS: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "FedAvg": ("fedavg", [{"name": "distilled"}]),
    # accuracy on the natural classes, as in config/papers/fedlgd.yaml
    "VHL": ("fedavg", [{"name": "distilled"}, {"name": "vhl",
                                                "params": {"eval_protocol": "natural"}}]),
    "FedLGD": ("fedavg", [{"name": "fedlgd", "params": {"lambda": 1.0}}]),
}


def distillation(args: argparse.Namespace) -> dict[str, Any]:
    """The distillation settings every method shares (so the artefact is built once)."""
    return {"ipc": args.ipc, "warmup_steps": args.warmup, "real_batch": args.real_batch,
            "embed_width": args.embed_width}


def run_settings(method: str, args: argparse.Namespace) -> dict[str, Any]:
    algorithm, plugins = METHODS[method]
    shared = distillation(args)
    extra = {"fedlgd": {"local_steps": args.local_steps, "server_steps": args.server_steps}}
    plugins = [{"name": p["name"],
                "params": {**p.get("params", {}),
                           **(shared if p["name"] in ("distilled", "fedlgd") else {}),
                           **extra.get(p["name"], {})}}
               for p in plugins]
    clients = 3 * len(args.corruptions)
    return {
        "seed": args.seed,
        "dataset": {"name": "fmnist_corrupted",
                    "options": {"corruptions": args.corruptions,
                                "base_per_class": args.base_per_class}},
        "model": {"name": "convnet", "width": args.width},
        "partition": {"scheme": "domain", "num_clients": clients},
        "algorithm": {"name": algorithm},
        "training": {"rounds": args.rounds, "local_epochs": 1, "batch_size": 32,
                     "lr": 0.01, "momentum": 0.0, "weight_decay": 0.0, "augment": "none",
                     "client_fraction": 1.0},
        "eval": {"every": args.eval_every},
        "plugins": plugins,
        "runtime": {"device": "auto", "threads": args.threads, "checkpoint_every": 10},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/evidence/fedlgd_fmnist")
    parser.add_argument("--corruptions", nargs="+",
                        default=["gaussian_noise", "defocus_blur", "contrast", "pixelate"])
    parser.add_argument("--base-per-class", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--ipc", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--real-batch", type=int, default=64)
    parser.add_argument("--embed-width", type=float, default=0.25)
    parser.add_argument("--width", type=float, default=0.25)
    parser.add_argument("--local-steps", type=int, default=20)
    parser.add_argument("--server-steps", type=int, default=100)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args()
    out = Path(args.out)
    for name in args.methods:
        start = time.perf_counter()
        final = train(run_settings(name, args), out / name, ckpt_dir=out / "ckpt" / name)
        final["wall_seconds"] = time.perf_counter() - start
        (out / f"{name}.json").write_text(json.dumps(final, indent=1))
    print("Reductions (every method): " + ", ".join(
        f"{k}={v}" for k, v in vars(args).items() if k not in ("out", "methods", "threads")))
    print("| method | average acc, last round (%) | best average (%) | per-client (last) | "
          "wall s |\n|---|---|---|---|---|")
    for name in args.methods:
        final = json.loads((out / f"{name}.json").read_text())
        per_client = " ".join(f"{100 * a:.0f}" for a in final["last_domain_acc"].values())
        print(f"| {name} | {100 * final['mean_domain_acc_last']:.2f} "
              f"| {100 * final['mean_domain_acc_best']:.2f} | {per_client} "
              f"| {final['wall_seconds']:.0f} |")


if __name__ == "__main__":
    main()
