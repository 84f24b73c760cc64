"""Seconds per FedAvg round: fedhet's engine against Flower's simulation and a plain PyTorch loop.

The job is the same on every side: the real Fashion-MNIST (60,000 / 10,000 images), split by
fedhet's LDA partitioner (Dirichlet α = 0.5) over 10 clients, 5 clients a round chosen by
`fedhet.engine.federation.sample_clients` (the same clients in the same rounds everywhere),
MOON's simple CNN (75,046 parameters) from one set of initial weights, 1 local epoch of SGD
(batch 64, lr 0.01, momentum 0.9 started afresh each round, no weight decay), no augmentation,
the same normalisation (fedhet's own `Augmenter`), sample-weighted FedAvg, and the global model
evaluated on the whole test set (batches of 512) after every round. Every child process checks
that it holds the same partition and initial weights; the table shows the accuracy each side
reached, so a side that skipped work would show it.

Configurations, all on the CPU, each run (and repeated) in a fresh process:

- fedhet, clients one after another on all cores (`runtime.threads`);
- fedhet, two clients at once on one core each (`runtime.client_workers`; skipped when the
  installed fedhet does not know the setting);
- Flower's simulation (`flwr.simulation.start_simulation`, Ray actors): the usual
  num_cpus = 2 per actor with two torch threads (on two cores: one actor with all threads),
  one actor per core with one torch thread each, and, on more than two cores, one actor with
  all of them; the server evaluates on all cores while the actors wait;
- the tutorial loop: per client a deep copy of the global model, a DataLoader (no workers) over
  a TensorDataset, torch.optim.SGD, and an average of the state dicts.

The timed window runs from the start of round 1's training to the end of the last round's
evaluation; process start, imports, data loading and Ray's start-up (reported on its own:
`ray.init`, the actor pool, and each actor importing torch and loading its data) lie outside it.
The peers get their client data and test set as normalised float tensors made before the
window, while fedhet converts its uint8 batches inside it. The compute floor is one model's
forward, backward and SGD step on pre-made batches, timed in a tight loop, times the mean number
of local steps of a round, plus one pass over the test set: what a round costs with no framework
at all.

    python benchmarks/flower_vs_fedhet.py                  # needs Flower: pip install -e .[flower]
    python benchmarks/flower_vs_fedhet.py --skip-flower    # fedhet and the tutorial loop only

Needs Fashion-MNIST seeded (`fedhet seed-fmnist`). Child processes import this
file as the module `flower_vs_fedhet` rather than as `__main__`, so that Ray's workers find its
functions by reference.
"""

from __future__ import annotations

import argparse
import copy
import functools
import hashlib
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedhet import atomic
from fedhet.config import ConfigError, resolve_run
from fedhet.data import load_dataset
from fedhet.engine.augment import Augmenter
from fedhet.engine.federation import Federation, sample_clients
from fedhet.engine.seeding import derive_seed
from fedhet.models import build_model
from fedhet.partition import make_partition

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
CPU = torch.device("cpu")
CORES = os.cpu_count() or 1
SEED = 0
EVAL_BATCH = 512
FLOWER_EXTRA = "pip install -e .[flower]"


@dataclass(frozen=True)
class Config:
    """One way of running the job: `kind` is fedhet, flower or tutorial."""

    name: str
    kind: str
    threads: int  # torch threads of each client being trained
    workers: int = 1  # clients trained at once (fedhet's client_workers, Flower's actors)
    note: str = ""


def configurations() -> list[Config]:
    """The configurations to time; Flower's one actor with all threads only where it differs
    from the usual num_cpus = 2 (on more than two cores)."""
    usual = min(2, CORES)
    configs = [
        Config("fedhet sequential", "fedhet", CORES),
        Config("fedhet concurrent", "fedhet", max(1, CORES // 2), workers=2),
        Config(f"flower num_cpus={usual}", "flower", usual, workers=CORES // usual,
               note="usual setup" + (", = 1 actor with all threads" if usual == CORES else "")),
        Config("flower num_cpus=1", "flower", 1, workers=CORES, note="one actor per core"),
    ]
    if usual != CORES:
        configs.append(Config(f"flower num_cpus={CORES}", "flower", CORES,
                              note="1 actor with all threads"))
    configs.append(Config("tutorial loop", "tutorial", CORES))
    return configs


# -- the job -------------------------------------------------------------------------------
def job_settings(config: Config) -> dict[str, Any]:
    """The fedhet run of the job; peers take their hyperparameters from its resolved form."""
    runtime: dict[str, Any] = {"device": "cpu", "threads": config.threads}
    if config.workers > 1 and config.kind == "fedhet":
        runtime["client_workers"] = config.workers
    return {
        "seed": SEED,
        "dataset": {"name": "fmnist", "root": str(REPO / "resources" / "datasets")},
        "model": {"name": "simplecnn", "width": 1.0},
        "partition": {"scheme": "dirichlet", "num_clients": 10, "alpha": 0.5},
        "training": {"clients_per_round": 5, "local_epochs": 1, "batch_size": 64, "lr": 0.01,
                     "momentum": 0.9, "weight_decay": 0.0, "augment": "none"},
        "eval": {"every": 1, "batch_size": EVAL_BATCH},
        "runtime": runtime,
    }


@dataclass
class Job:
    """The resolved run, the data and each client's training indices."""

    run: dict[str, Any]
    data: Any
    indices: list[np.ndarray]

    @property
    def per_round(self) -> int:
        return self.run["training"]["clients_per_round"]

    def clients(self, round: int) -> list[int]:
        return sample_clients(self.run["seed"], round, len(self.indices), self.per_round)

    def new_model(self) -> nn.Module:
        m, x = self.run["model"], self.data.x_train
        return build_model(m["name"], self.data.num_classes, int(x.shape[1]), int(x.shape[-1]),
                           m["width"])

    def fingerprint(self) -> str:
        """Digest of the partition (to check that every process splits the data alike)."""
        h = hashlib.sha256()
        for ix in self.indices:
            h.update(np.ascontiguousarray(ix, dtype=np.int64).tobytes())
        return h.hexdigest()[:16]


def load_job(config: Config) -> Job:
    run = resolve_run(job_settings(config))
    d, p = run["dataset"], run["partition"]
    data = load_dataset(d["name"], d["root"], d["options"])
    part = make_partition(data.y_train, p["scheme"], p["num_clients"], run["seed"],
                          num_classes=data.num_classes, alpha=p["alpha"], cap=p["cap"])
    return Job(run, data, part.client_indices)


def initial_state(job: Job) -> dict[str, torch.Tensor]:
    """The initial global weights: those of fedhet's Federation for the run's seed."""
    fed = Federation(job.run, job.data, job.indices, CPU)
    return {k: v.detach().clone() for k, v in fed.global_.module.state_dict().items()}


def state_digest(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for k, v in state.items():
        h.update(k.encode())
        h.update(v.detach().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class Tensors:
    """The peers' data: each client's images normalised as fedhet does, and the test set."""

    shards: list[tuple[torch.Tensor, torch.Tensor]]
    x_test: torch.Tensor
    y_test: torch.Tensor


def peer_tensors(job: Job) -> Tensors:
    d = job.data
    norm = Augmenter("none", d.mean, d.std, int(d.x_train.shape[-1]), CPU)
    shards = [(norm.test(d.x_train[ix]), d.y_train[ix].clone())
              for ix in map(torch.as_tensor, job.indices)]
    return Tensors(shards, norm.test(d.x_test), d.y_test.clone())


# -- what the peers run: local training, averaging, evaluation ----------------------------
def train_local(model: nn.Module, x: torch.Tensor, y: torch.Tensor, t: dict[str, Any],
                round: int, client: int) -> None:
    """One client's local epochs, the usual way: DataLoader, torch.optim.SGD (fresh state)."""
    gen = torch.Generator().manual_seed(derive_seed(SEED, "batches", round, client))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=t["batch_size"], shuffle=True,
                                         num_workers=0, generator=gen)
    opt = torch.optim.SGD(model.parameters(), lr=t["lr"], momentum=t["momentum"],
                          weight_decay=t["weight_decay"])
    model.train()
    for _ in range(t["local_epochs"]):
        for xb, yb in loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()


def weighted_average(states: list[dict[str, torch.Tensor]],
                     weights: list[int]) -> dict[str, torch.Tensor]:
    total = sum(weights)
    return {k: sum(s[k] * (w / total) for s, w in zip(states, weights)) for k in states[0]}


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Test accuracy and mean loss, as fedhet's evaluation computes them."""
    model.eval()
    correct, loss = 0, 0.0
    for start in range(0, len(y), EVAL_BATCH):
        logits = model(x[start:start + EVAL_BATCH])
        yb = y[start:start + EVAL_BATCH]
        loss += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += int((logits.argmax(1) == yb).sum())
    return correct / len(y), loss / len(y)


# -- one timed run per configuration ------------------------------------------------------
@dataclass
class Timing:
    """What one run of a configuration measured."""

    seconds: float  # the timed window
    accuracies: list[float]
    startup: float | None = None  # Ray's start-up, for Flower
    execution: str = ""
    checks: dict[str, str] = field(default_factory=dict)


def time_fedhet(job: Job, rounds: int) -> Timing:
    fed = Federation(job.run, job.data, job.indices, CPU)
    checks = {"init": state_digest(fed.global_.module.state_dict())}
    accs = []
    start = time.perf_counter()
    for r in range(1, rounds + 1):
        fed.run_round(r)
        accs.append(fed.evaluate(EVAL_BATCH)[0])
    seconds = time.perf_counter() - start
    return Timing(seconds, accs, execution=getattr(fed, "execution", ""), checks=checks)


def time_tutorial(job: Job, rounds: int) -> Timing:
    global_model = job.new_model()
    global_model.load_state_dict(initial_state(job))
    checks = {"init": state_digest(global_model.state_dict())}
    data = peer_tensors(job)
    t = job.run["training"]
    accs = []
    start = time.perf_counter()
    for r in range(1, rounds + 1):
        states, sizes = [], []
        for k in job.clients(r):
            model = copy.deepcopy(global_model)
            x, y = data.shards[k]
            train_local(model, x, y, t, r, k)
            states.append(model.state_dict())
            sizes.append(len(y))
        global_model.load_state_dict(weighted_average(states, sizes))
        accs.append(evaluate(global_model, data.x_test, data.y_test)[0])
    seconds = time.perf_counter() - start
    return Timing(seconds, accs, execution="clients one after another", checks=checks)


# -- Flower -----------------------------------------------------------------------------------
@functools.cache
def actor_data(threads: int) -> tuple[Job, Tensors]:
    """A Flower actor's job and data, loaded once per actor process."""
    job = load_job(Config("flower", "flower", threads))
    return job, peer_tensors(job)


def warm_actor(threads: int) -> None:
    """Runs when an actor starts: torch threads, imports and data, outside the timed window."""
    torch.set_num_threads(threads)
    actor_data(threads)


def client_fn(context: Any) -> Any:
    """Flower's client for this node: its partition is our client `partition-id`."""
    return flower_client_class()(int(context.node_config["partition-id"])).to_client()


@functools.cache
def flower_client_class() -> type:
    from flwr.client import NumPyClient

    class FlowerClient(NumPyClient):
        """Trains a fresh model from the received weights on its partition."""

        def __init__(self, client: int) -> None:
            self.client = client

        def fit(self, parameters: list[np.ndarray],
                config: dict[str, Any]) -> tuple[list[np.ndarray], int, dict]:
            threads = int(config["threads"])
            torch.set_num_threads(threads)
            job, data = actor_data(threads)
            model = job.new_model()
            set_weights(model, parameters)
            x, y = data.shards[self.client]
            train_local(model, x, y, job.run["training"], int(config["round"]), self.client)
            return get_weights(model), len(y), {}

    return FlowerClient


def get_weights(model: nn.Module) -> list[np.ndarray]:
    return [v.detach().cpu().numpy().copy() for v in model.state_dict().values()]


def set_weights(model: nn.Module, weights: list[np.ndarray]) -> None:
    keys = model.state_dict().keys()
    model.load_state_dict({k: torch.from_numpy(np.asarray(w)) for k, w in zip(keys, weights)})


def scheduled_fedavg(job: Job, rounds: int, threads: int, evaluate_fn: Any,
                     initial: list[np.ndarray]) -> Any:
    """Flower's FedAvg (weighted by num_examples) fitting exactly `job.clients(round)`, with
    the start of the timed window marked when round 1 is configured."""
    from flwr.common import FitIns, ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    class ScheduledFedAvg(FedAvg):
        started: float | None = None

        def configure_fit(self, server_round: int, parameters: Any,
                          client_manager: Any) -> list[tuple[Any, Any]]:
            client_manager.wait_for(len(job.indices))
            proxies = {int(p.partition_id): p for p in client_manager.all().values()}
            if server_round == 1:
                wait_for_actors(next(iter(proxies.values())).actor_pool)
                self.started = time.perf_counter()
            ins = FitIns(parameters, {"round": server_round, "threads": threads})
            return [(proxies[k], ins) for k in job.clients(server_round)]

    return ScheduledFedAvg(fraction_evaluate=0.0, min_available_clients=len(job.indices),
                           evaluate_fn=evaluate_fn,
                           initial_parameters=ndarrays_to_parameters(initial))


def wait_for_actors(pool: Any) -> None:
    """Block until every actor of the pool has started (run `warm_actor`)."""
    import ray

    actors = []
    while pool.has_free():
        actors.append(pool.pop_idle())
    ray.get([a.__ray_ready__.remote() for a in actors])
    for a in actors:
        pool.push(a)


def time_flower(job: Job, rounds: int, config: Config) -> Timing:
    from flwr.server import ServerConfig
    from flwr.simulation import start_simulation

    torch.set_num_threads(CORES)  # the server's evaluation, while the actors wait
    model = job.new_model()
    model.load_state_dict(initial_state(job))
    checks = {"init": state_digest(model.state_dict())}
    data = peer_tensors(job)
    accs: list[float] = []
    ended: list[float] = []

    def evaluate_fn(server_round: int, weights: list[np.ndarray],
                    _: dict) -> tuple[float, dict] | None:
        if server_round == 0:  # the initial weights: not part of the job
            return None
        set_weights(model, weights)
        acc, loss = evaluate(model, data.x_test, data.y_test)
        accs.append(acc)
        ended.append(time.perf_counter())
        return loss, {"accuracy": acc}

    strategy = scheduled_fedavg(job, rounds, config.threads, evaluate_fn, get_weights(model))
    called = time.perf_counter()
    start_simulation(
        client_fn=client_fn, num_clients=len(job.indices), strategy=strategy,
        client_resources={"num_cpus": CORES // config.workers, "num_gpus": 0.0},
        config=ServerConfig(num_rounds=rounds),
        ray_init_args={"num_cpus": CORES, "include_dashboard": False,
                       "ignore_reinit_error": True, "log_to_driver": False},
        actor_kwargs={"on_actor_init_fn": functools.partial(warm_actor, config.threads)},
    )
    if strategy.started is None or len(accs) != rounds:
        raise RuntimeError(f"Flower's simulation ended after {len(accs)} of {rounds} rounds")
    return Timing(ended[-1] - strategy.started, accs, startup=strategy.started - called,
                  execution=f"{config.workers} actor(s) × {config.threads} torch thread(s)",
                  checks=checks)


# -- the compute floor ----------------------------------------------------------------------
def compute_floor(rounds: int) -> dict[str, Any]:
    """Seconds per round of bare compute at all cores' threads and at one thread."""
    job = load_job(configurations()[0])
    t = job.run["training"]
    steps = statistics.mean(sum(math.ceil(len(job.indices[k]) / t["batch_size"])
                                for k in job.clients(r)) for r in range(1, rounds + 1))
    data = peer_tensors(job)
    x, y = (torch.cat(parts) for parts in zip(*data.shards))
    batches = [(x[i:i + t["batch_size"]], y[i:i + t["batch_size"]])
               for i in range(0, 32 * t["batch_size"], t["batch_size"])]
    out: dict[str, Any] = {"steps_per_round": steps}
    for threads in sorted({CORES, 1}, reverse=True):
        torch.set_num_threads(threads)
        step = _seconds_per_step(job.new_model(), batches, t)
        model = job.new_model()
        evaluate(model, data.x_test, data.y_test)
        evals = []
        for _ in range(3):
            began = time.perf_counter()
            evaluate(model, data.x_test, data.y_test)
            evals.append(time.perf_counter() - began)
        out[str(threads)] = {"step": step, "train": step * steps, "eval": min(evals)}
    return out


def _seconds_per_step(model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]],
                      t: dict[str, Any], repeats: int = 5) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=t["lr"], momentum=t["momentum"],
                          weight_decay=t["weight_decay"])
    model.train()

    def steps() -> float:
        began = time.perf_counter()
        for xb, yb in batches:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        return (time.perf_counter() - began) / len(batches)

    steps()
    return min(steps() for _ in range(repeats))


# -- processes ----------------------------------------------------------------------------
def child(argv: list[str]) -> int:
    """Entry point of a child process: one configuration (or the floor), result as JSON."""
    name, rounds, out = argv[0], int(argv[1]), argv[2]
    if name == "floor":
        atomic.write_json(out, compute_floor(rounds))
        return 0
    config = next(c for c in configurations() if c.name == name)
    torch.set_num_threads(config.threads)
    job = load_job(config)
    timing = {"fedhet": time_fedhet, "tutorial": time_tutorial}.get(config.kind)
    result = (timing(job, rounds) if timing else time_flower(job, rounds, config))
    result.checks["partition"] = job.fingerprint()
    atomic.write_json(out, result.__dict__)
    return 0


def run_child(name: str, rounds: int, workdir: Path) -> dict[str, Any]:
    out = workdir / f"{name.replace(' ', '_')}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "FLWR_TELEMETRY_ENABLED": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    code = "import sys, flower_vs_fedhet as b; sys.exit(b.child(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, name, str(rounds), str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{tail}")
    result = json.loads(out.read_text())
    out.unlink()
    return result


def supported(config: Config) -> str | None:
    """None if the installed fedhet accepts the configuration, else why not."""
    try:
        resolve_run(job_settings(config))
    except ConfigError as err:
        return str(err)
    return None


# -- the report -----------------------------------------------------------------------------
def summarise(runs: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    per_round = [r["seconds"] / rounds for r in runs]
    startups = [r["startup"] for r in runs if r["startup"] is not None]
    return {
        "seconds_per_round": per_round,
        "median": statistics.median(per_round),
        "best_accuracy": max(max(r["accuracies"]) for r in runs),
        "final_accuracy": [r["accuracies"][-1] for r in runs],
        "startup_seconds": startups,
        "execution": runs[0]["execution"],
    }


def report(configs: list[Config], summary: dict[str, dict[str, Any]],
           floor: dict[str, Any]) -> list[str]:
    lines = [f"{'configuration':<22} {'s/round':>8} {'min-max':>15} {'best acc':>9} "
             f"{'start-up':>9}  how"]
    for c in configs:
        s = summary[c.name]
        lo, hi = min(s["seconds_per_round"]), max(s["seconds_per_round"])
        startup = f"{statistics.median(s['startup_seconds']):.1f} s" if s["startup_seconds"] else ""
        how = ", ".join(filter(None, [s["execution"], c.note]))
        lines.append(f"{c.name:<22} {s['median']:8.3f} {f'{lo:.3f}-{hi:.3f}':>15} "
                     f"{100 * s['best_accuracy']:8.2f}% {startup:>9}  {how}")
    lines.append(f"compute floor ({floor['steps_per_round']:.1f} steps of batch 64 a round, "
                 "then one pass over the 10k test images):")
    for threads in sorted((k for k in floor if k.isdigit()), key=int, reverse=True):
        f = floor[threads]
        lines.append(f"  {threads} thread(s): {f['train'] + f['eval']:.3f} s/round "
                     f"(train {f['train']:.3f} s at {1e3 * f['step']:.2f} ms/step, "
                     f"eval {f['eval']:.3f} s)")
    one = floor.get("1")
    if one and CORES > 1:
        lines.append(f"  {CORES} one-thread clients at once on {CORES} cores, evaluation at "
                     f"{CORES} threads: {one['train'] / CORES + floor[str(CORES)]['eval']:.3f} "
                     "s/round")
    return lines


def speedup(summary: dict[str, dict[str, Any]], configs: list[Config], kind: str) -> float:
    ours = min(summary[c.name]["median"] for c in configs if c.kind == "fedhet")
    theirs = min(summary[c.name]["median"] for c in configs if c.kind == kind)
    return theirs / ours


def check_same_job(results: dict[str, list[dict[str, Any]]]) -> None:
    """Every run must have split the data and initialised the model alike."""
    seen = {json.dumps(r["checks"], sort_keys=True) for runs in results.values() for r in runs}
    if len(seen) != 1:
        raise SystemExit(f"the runs did not share one partition and initial weights: {seen}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-flower", action="store_true",
                        help="time fedhet and the tutorial loop only")
    parser.add_argument("--out", help="also write the results to this JSON file")
    args = parser.parse_args()
    flower_version = None
    if not args.skip_flower:
        if importlib.util.find_spec("flwr") is None or importlib.util.find_spec("ray") is None:
            raise SystemExit("Flower's simulation is not installed: install the extra with "
                             f"`{FLOWER_EXTRA}`, or pass --skip-flower")
        from flwr import __version__ as flower_version

    configs = []
    for c in configurations():
        if c.kind == "flower" and args.skip_flower:
            continue
        why = supported(c) if c.kind == "fedhet" else None
        if why:
            print(f"{c.name}: skipped, this fedhet refuses it ({why})")
            continue
        configs.append(c)
    print(f"{CORES} cores, torch {torch.__version__}, Flower {flower_version or '-'}; "
          f"{args.rounds} rounds × {args.repeats} repeats, each run in a fresh process")

    results: dict[str, list[dict[str, Any]]] = {c.name: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):  # repeats interleaved, so drifts in load hit all alike
            for c in configs:
                results[c.name].append(run_child(c.name, args.rounds, Path(tmp)))
        floor = run_child("floor", args.rounds, Path(tmp))
    check_same_job(results)
    summary = {name: summarise(runs, args.rounds) for name, runs in results.items()}
    lines = report(configs, summary, floor)
    lines.append(f"speed-up vs tutorial loop: {speedup(summary, configs, 'tutorial'):.2f}x")
    if not args.skip_flower:
        lines.append(f"speed-up vs flower: {speedup(summary, configs, 'flower'):.2f}x")
    print("\n".join(lines))
    if args.out:
        atomic.write_json(args.out, {
            "job": job_settings(configurations()[0]), "rounds": args.rounds,
            "repeats": args.repeats, "cores": CORES, "torch": str(torch.__version__),
            "flower": flower_version, "configurations": summary, "runs": results,
            "compute_floor": floor,
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
