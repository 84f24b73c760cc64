"""Train one federated run from its settings and write its results.

Outputs in `out/`: resolved.yaml, metrics.jsonl, final.json, model.pt, classifier_norms.jsonl
and the optional snapshots. A checkpoint in `ckpt_dir` (outside the outputs a workflow
declares, so a failed job's cleanup does not delete it) lets the same command resume.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedhet
from fedhet import atomic, catalog
from fedhet.config import ConfigError, resolve_run, run_hash, run_id
from fedhet.data import load_dataset
from fedhet.engine.device import pick_device
from fedhet.engine.federation import Federation, RoundResult
from fedhet.engine.modes import default_modes, prepare_environment
from fedhet.partition import client_partition

CHECKPOINT = "checkpoint.pt"
# see Federation.evaluate
DETAIL_KEYS = ("domain_acc", "domain_loss", "rotation_acc", "test_sets", "client_acc")


def git_commit() -> str | None:
    """The commit of the source tree the package runs from, if it is a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(fedhet.__file__).parent,
            capture_output=True, text=True, timeout=5, check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def provenance(run: dict[str, Any], device: torch.device, data: Any,
               execution: dict[str, Any]) -> dict[str, Any]:
    """What ran where: recorded next to the results, not part of the run's identity.
    `execution`: how the clients and their local steps ran (eager or as CUDA graphs) and the
    numeric modes in effect on the device."""
    return {
        "run_id": run_id(run),
        "run_hash": run_hash(run),
        "fedhet_version": fedhet.__version__,
        "git_commit": git_commit(),
        # each method's package and version; for a method of another package, its code's hash
        "methods": catalog.run_methods(run),
        "torch_version": str(torch.__version__),
        "python_version": platform.python_version(),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "execution": execution,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "hostname": platform.node(),
        "dataset_checksum": data.checksum,
        "stands_in_for": data.stands_in_for,
    }


def summarize(history: list[dict[str, Any]], status: str, rounds_trained: int,
              diverged_round: int | None) -> dict[str, Any]:
    """final.json: best (VHL, FedImpro), last (CCVR) and mean-of-5-best (FedBR) accuracy;
    with `eval.client_models`, the mean of the 5 best mean client-model accuracies."""
    accs = [row["test_acc"] for row in history]
    local = [row["local_test_acc"] for row in history if "local_test_acc" in row]
    best = int(np.argmax(accs)) if accs else None
    # per-domain, extra-test-set and client-model accuracies of the last evaluated round
    last = {f"last_{key}": history[-1][key] for key in DETAIL_KEYS if history and key in history[-1]}
    # the unweighted mean over test domains (FedLGD's "Average"), last and best round
    domain_means = [row["mean_domain_acc"] for row in history if "mean_domain_acc" in row]
    if domain_means:
        last["mean_domain_acc_last"] = domain_means[-1]
        last["mean_domain_acc_best"] = max(domain_means)
    return {
        **last,
        "status": status,
        "rounds_trained": rounds_trained,
        "diverged_round": diverged_round,
        "best_acc": accs[best] if accs else None,
        "best_round": history[best]["round"] if accs else None,
        "last_acc": accs[-1] if accs else None,
        "last_round": history[-1]["round"] if accs else None,
        "top5_mean_acc": float(np.mean(sorted(accs)[-5:])) if accs else None,
        **({"local_top5_mean_acc": float(np.mean(sorted(local)[-5:]))} if local else {}),
    }


def _metrics_row(result: RoundResult, acc: float, loss: float, seconds: float) -> dict[str, Any]:
    return {
        "round": result.round,
        "test_acc": acc,
        "test_loss": loss,
        "train_loss": result.train_loss.item(),
        "lr": result.lr,
        "seconds": round(seconds, 3),
        "round_seconds": round(result.seconds, 3),  # local training and aggregation
        "bytes_down": result.bytes_down,  # server → the round's clients
        "bytes_up": result.bytes_up,  # the round's clients → server
        "client_drift": result.client_drift.item(),
        "weight_divergence_total": result.weight_divergence_total.item(),
        "weight_divergence": {k: v.item() for k, v in result.weight_divergence.items()},
        "stage_divergence": {k: v.item() for k, v in result.stage_divergence.items()},
        "layer_divergence": {k: v.item() for k, v in result.layer_divergence.items()},
    }


def write_plugin_files(plugins: list[Any], out: Path) -> list[str]:
    """Write what each plug-in's `files()` returns under `out/plugins/<name>/`; the paths,
    relative to `out`, in plug-in order."""
    written = []
    for plugin in plugins:
        for name, content in plugin.files().items():
            path = out / "plugins" / plugin.name / name
            if path.suffix == ".json":
                atomic.write_json(path, content)
            elif path.suffix == ".pt":
                atomic.torch_save(path, content)
            else:
                raise ValueError(f"plug-in {plugin.name}: file '{name}' must end in .json or .pt")
            written.append(path.relative_to(out).as_posix())
    return written


def load_checkpoint(path: Path, device: torch.device) -> dict[str, Any]:
    """A resume checkpoint, read as tensors and plain containers only (never code)."""
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # a damaged or tampered file: name it and say what to do
        raise ConfigError(
            f"{path} cannot be read as a checkpoint ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:200]}); delete it to train from the start"
        ) from None


def train(given: dict[str, Any], out: str | os.PathLike, ckpt_dir: str | os.PathLike | None = None,
          log: Callable[[str], None] = lambda msg: print(msg, file=sys.stderr, flush=True),
          keep_checkpoint: bool = False, stop_after: int | None = None) -> dict[str, Any]:
    """Train (or resume) the run `given` and write its outputs into `out`.

    `stop_after` ends the process's work after that round as if it were killed there
    (a checkpoint is written); used to test and demonstrate resuming.
    """
    run = resolve_run(given)
    rt = run["runtime"]
    if rt["threads"]:
        torch.set_num_threads(int(rt["threads"]))
    prepare_environment(run)  # before anything starts CUDA
    device = pick_device(rt["device"])
    out = Path(out)
    ckpt_path = Path(ckpt_dir) / CHECKPOINT if ckpt_dir else None

    d = run["dataset"]
    data = load_dataset(d["name"], d["root"], d["options"])
    indices, angles = client_partition(run, data)
    fed = Federation(run, data, indices, device, angles)
    if rt["client_workers"] > 1 or run["training"]["vectorise_clients"]:
        log(f"{run_id(run)}: {fed.execution}")
    if fed.graphs.cuda:  # captured, or why not
        log(f"{run_id(run)}: {fed.graphs.note}")
    if not default_modes(run):
        log(f"{run_id(run)}: {fed.modes.summary()}")
    rid, rhash = run_id(run), run_hash(run)

    start_round, history, norms, seconds = 1, [], [], 0.0
    cost = {"train_seconds": 0.0, "client_steps": 0}  # for the time of one local step
    if ckpt_path and ckpt_path.exists():
        ckpt = load_checkpoint(ckpt_path, device)
        if ckpt["run_hash"] != rhash:
            raise ConfigError(
                f"{ckpt_path} holds a checkpoint of run {ckpt['run_id']}, not {rid}; "
                "delete it or pass another --ckpt-dir"
            )
        fed.load_state_dict(ckpt["federation"])
        start_round, history, norms, seconds = (
            ckpt["round"] + 1, ckpt["history"], ckpt["norms"], ckpt["seconds"]
        )
        cost = ckpt.get("cost", cost)
        log(f"resuming {rid} from round {ckpt['round']} ({ckpt_path})")

    execution = {"clients": fed.execution, "steps": fed.graphs.note, **fed.modes.effective}
    atomic.write_yaml(out / "resolved.yaml",
                      {**run, "provenance": provenance(run, device, data, execution)})
    t = run["training"]
    rounds = t["rounds"]
    status, diverged_round, last_round = "completed", None, start_round - 1
    began = time.perf_counter() - seconds

    def checkpoint(r: int) -> None:
        if ckpt_path is None:
            return
        atomic.torch_save(ckpt_path, {
            "run_id": rid, "run_hash": rhash, "round": r, "federation": fed.state_dict(),
            "history": history, "norms": norms, "seconds": time.perf_counter() - began,
            "cost": cost,
        })
        atomic.write_jsonl(out / "metrics.jsonl", history)

    for r in range(start_round, rounds + 1):
        result = fed.run_round(r)
        last_round = r
        cost["train_seconds"] += result.seconds
        cost["client_steps"] += max(u.steps for u in result.updates)
        if not result.finite:
            status, diverged_round = "diverged", r
            log(f"round {r}: loss or weights are not finite; run ends as diverged")
            break
        if r % run["eval"]["every"] == 0 or r == rounds:
            acc, loss, more = fed.evaluate(run["eval"]["batch_size"], result.updates)
            row = {**_metrics_row(result, acc, loss, time.perf_counter() - began), **more}
            row["train_seconds"] = round(cost["train_seconds"], 3)  # local training so far
            history.append(row)
            norms.append({
                "round": r,
                "global": fed.global_head_norms().tolist(),
                "clients": {str(k): v.tolist() for k, v in result.client_head_norms.items()},
            })
            if r % rt["log_every"] == 0 or r == rounds:
                log(f"{rid} round {r}/{rounds} acc {acc:.4f} test_loss {loss:.4f} "
                    f"train_loss {row['train_loss']:.4f} drift {row['client_drift']:.4g} "
                    f"{row['seconds']:.1f}s")
        if r in rt["snapshot_rounds"]:
            atomic.torch_save(out / "snapshots" / f"round_{r}.pt", fed.global_state_dict())
        if r in rt["save_client_models"]:
            for u in result.updates:
                atomic.torch_save(out / "clients" / f"round_{r}" / f"client_{u.client}.pt",
                                  fed.state_dict_of(u))
        if r % rt["checkpoint_every"] == 0 and r < rounds:
            checkpoint(r)
        if stop_after is not None and r >= stop_after and r < rounds:
            checkpoint(r)
            log(f"stopped after round {r} as asked; rerun to resume")
            return {"status": "stopped", "rounds_trained": r}

    final = summarize(history, status, last_round, diverged_round)
    final["run_id"] = rid
    # cost (FedBR Table 7): the seconds of one local step of all the round's clients
    # (training and aggregation time ÷ the steps a client took), parameters sent per client
    final["mean_step_seconds"] = cost["train_seconds"] / max(cost["client_steps"], 1)
    final["communicated_params"] = fed.communicated_params()
    files = write_plugin_files(fed.plugins, out)
    if files:
        final["files"] = files
    atomic.write_jsonl(out / "metrics.jsonl", history)
    atomic.write_jsonl(out / "classifier_norms.jsonl", norms)
    atomic.torch_save(out / "model.pt", fed.global_state_dict())
    atomic.write_json(out / "final.json", final)
    if ckpt_path and ckpt_path.exists() and not keep_checkpoint:
        ckpt_path.unlink()
    return final
