"""The GPU check's parts besides the paper round: each measures, appends its records to the
results file, and returns them. A failure inside a part is a record with ok false and the
error; the shell script adds the record of a part that did not finish (time limit, crash).

- `tests`: `pytest -m gpu` (the CUDA correctness tests; skipped without a GPU).
- `shared_runs`: the same paper-sized runs (ResNet-18, batch 64, CIFAR-shaped images) one after
  another, then all at once on the one device, as `runs_per_gpu` packs them: wall time and
  images/s of each group, each run's seconds per round.
- `real_run`: the resolved run of a Fashion-MNIST cell of VHL Table 2 at the small scale,
  through `fedhet train --set training.rounds=3`: its accuracy and seconds per round.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from fedhet.bench.gpucheck.records import append_record, device_name, make_record
from fedhet.engine.modes import Mode
from fedhet.saved import read_settings
from fedhet.settings import DEFAULTS

REPO = Path(__file__).resolve().parents[4]
TRAIN = [sys.executable, "-m", "fedhet.cli", "train"]
PYTEST_SUMMARY = re.compile(r"\d+ (passed|failed|skipped|deselected|errors?|xfailed|xpassed)")


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


@dataclass(frozen=True)
class Context:
    """Where the part runs and writes: the results file, the torch device, scratch space."""

    out: Path
    device: torch.device
    work: Path

    def make(self, what: str, mode: str = "-", **figures: Any) -> dict[str, Any]:
        """A record of this device (not yet in the results file)."""
        return make_record(what, mode, device_name(self.device), str(torch.__version__),
                           **figures)

    def record(self, what: str, mode: str = "-", **figures: Any) -> dict[str, Any]:
        """Make a record of this device and append it to the results file."""
        return self.add(self.make(what, mode, **figures))

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        append_record(self.out, record)
        return record


# -- 1. the CUDA tests ------------------------------------------------------------------------
def tests(ctx: Context, targets: Sequence[str]) -> dict[str, Any]:
    """`pytest -m gpu` on the test files `targets`: ok when it passes; the note is pytest's
    summary line and the failing tests."""
    # run in the scratch folder, outside the repository, as the suite runs its tests (pytest
    # finds the repository's configuration from the test files); addopts emptied: the
    # repository's own -q on top of this one would hide the summary line
    proc = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-o", "addopts=", "-q",
                           "-rfE", "-p", "no:cacheprovider", *targets],
                          cwd=ctx.work, capture_output=True, text=True, env=environment())
    lines = proc.stdout.strip().splitlines()
    summary = next((line.strip("= ") for line in reversed(lines) if PYTEST_SUMMARY.search(line)),
                   _tail(proc.stdout + proc.stderr))
    failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    note = summary if proc.returncode != 5 else f"no test is marked gpu ({summary})"
    return ctx.record("pytest -m gpu", ok=proc.returncode == 0,
                      note="; ".join([note, *failures]))


# `@pytest.mark.gpu`, `pytestmark = pytest.mark.gpu` or `pytest.mark.gpu,` in a pytestmark list
GPU_MARK = re.compile(r"^\s*(@|pytestmark\s*=\s*\[?\s*)?pytest\.mark\.gpu\b", re.MULTILINE)


def marked_test_files(tests_dir: Path = REPO / "tests") -> list[str]:
    """Test files that use the gpu marker (a `@pytest.mark.gpu` decorator or a module's
    `pytestmark`): what the check collects, rather than the whole suite."""
    return sorted(str(p) for p in tests_dir.glob("test_*.py")
                  if GPU_MARK.search(p.read_text(encoding="utf-8")))


# -- 3. runs sharing one device ---------------------------------------------------------------
@dataclass(frozen=True)
class SharedRuns:
    """The runs of `shared_runs`: `runs` seeds of one paper-sized run on CIFAR-shaped stand-in
    images (digits, 3×32×32), each client holding a whole number of batches, so every step
    trains `batch_size` images."""

    runs: int = 2
    rounds: int = 3
    clients: int = 5
    local_steps: int = 16
    batch_size: int = 64
    width: float = 1.0
    model: str = "resnet18"
    cuda_graphs: bool = True  # runtime.cuda_graphs: the runs' steps replayed, or eager
    every_round: bool = False  # evaluate and log each round (a timeline), not only the last

    def dataset(self) -> dict[str, Any]:
        per_client = 4 * self.batch_size
        return {"name": "digits10", "options": {
            "channels": 3, "size": 32, "train_per_class": self.clients * per_client // 10,
            "test_per_class": 10}}

    def run(self, device: torch.device, root: Path, seed: int) -> dict[str, Any]:
        return {
            "seed": seed, "dataset": {**self.dataset(), "root": str(root / "datasets")},
            "partition": {"scheme": "iid", "num_clients": self.clients,
                          "root": str(root / "partitions")},
            "model": {"name": self.model, "width": self.width},
            "training": {"rounds": self.rounds, "clients_per_round": self.clients,
                         "local_steps": self.local_steps, "batch_size": self.batch_size,
                         "lr": 0.01, "momentum": 0.9, "weight_decay": 1e-4},
            "eval": {"every": 1 if self.every_round else self.rounds},
            "runtime": {"device": str(device), "cuda_graphs": self.cuda_graphs, "log_every": 1},
        }

    @property
    def mode(self) -> str:
        """The runs' numeric mode: they set none, so the defaults'."""
        return Mode.of_runtime(DEFAULTS["runtime"]).name

    @property
    def images(self) -> int:
        """Training images of one run."""
        return self.rounds * self.clients * self.local_steps * self.batch_size


def _train_command(run: Mapping[str, Any], out: Path) -> list[str]:
    """`fedhet train` of `run` into `out` (made here), as the shared runs start it."""
    out.mkdir(parents=True, exist_ok=True)
    return [*TRAIN, "--config-json", json.dumps(run), "--out", str(out)]


def _launch(run: Mapping[str, Any], out: Path) -> subprocess.Popen:
    command = _train_command(run, out)
    with open(out / "train.log", "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment())


# a run's log line at the end of an evaluated round (fedhet.train)
ROUND_LINE = re.compile(r" round \d+/\d+ ")


class Timeline:
    """A run started in a process of its own whose log lines are read as they come: the
    moments (this machine's monotonic clock) its rounds ended, so that runs sharing a device
    are timed over the span when all of them trained."""

    def __init__(self, run: Mapping[str, Any], out: Path):
        self.round_ends: list[float] = []
        self.proc = subprocess.Popen(_train_command(run, out), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=environment())
        self._reader = threading.Thread(target=self._read, args=(out / "train.log",), daemon=True)
        self._reader.start()

    def _read(self, log: Path) -> None:
        assert self.proc.stdout is not None
        with log.open("wb") as kept:
            for line in self.proc.stdout:
                if ROUND_LINE.search(line.decode(errors="replace")):
                    self.round_ends.append(time.monotonic())
                kept.write(line)

    def wait(self) -> int:
        code = self.proc.wait()
        self._reader.join()
        return code


def overlap_rate(round_ends: Sequence[Sequence[float]], per_round: int
                 ) -> tuple[float, float, int] | None:
    """Images/s of runs together while every one of them trained: from when the last of them
    ended its first round (start-up and warm-up behind all) to when the first of them ended
    its last; with that span in seconds and the rounds counted in it. A run's rounds count
    where they end inside the span (±1 round a run at its two ends). None where the runs never
    trained at once."""
    if any(len(ends) < 2 for ends in round_ends):
        return None
    start, end = max(ends[0] for ends in round_ends), min(ends[-1] for ends in round_ends)
    if end <= start:
        return None
    rounds = sum(start < t <= end for ends in round_ends for t in ends)
    return rounds * per_round / (end - start), end - start, rounds


def _round_seconds(out: Path) -> list[float]:
    """A finished run's training seconds per round (`round_seconds` of its metrics)."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["round_seconds"] for row in rows]


def _failed_runs(outs: Sequence[Path], codes: Sequence[int]) -> str | None:
    """What a record says of runs (their output folders and exit codes) where one failed: how
    many, and the first one's exit code and last log lines; None when all ended 0."""
    failed = [(out, code) for out, code in zip(outs, codes) if code != 0]
    if not failed:
        return None
    out, code = failed[0]
    log = (out / "train.log").read_text(errors="replace")
    return f"{len(failed)} of {len(outs)} runs failed; {out.name} exit {code}: {_tail(log)}"


def _prepare(ctx: Context, spec: SharedRuns) -> float:
    """Build the runs' dataset once (not by every run); the model's FLOPs per image."""
    from fedhet.data import prepare_dataset
    from fedhet.models.flops import flops_per_image

    d = spec.dataset()
    prepare_dataset(d["name"], ctx.work / "datasets", d["options"])
    return flops_per_image(spec.model, 32, 10, 3, width=spec.width)


def _group(ctx: Context, spec: SharedRuns, what: str, together: bool,
           flops: float) -> tuple[dict[str, Any], float | None]:
    """Train the runs one after another or all at once: their record (images/s over the wall
    time of the group, s/round the runs' mean after their first round) and the wall seconds."""
    outs = [ctx.work / ("together" if together else "one-by-one") / f"run{seed}"
            for seed in range(spec.runs)]
    start = time.perf_counter()
    if together:
        procs = [_launch(spec.run(ctx.device, ctx.work, seed), out)
                 for seed, out in enumerate(outs)]
        codes = [p.wait() for p in procs]
    else:
        codes = [_launch(spec.run(ctx.device, ctx.work, seed), out).wait()
                 for seed, out in enumerate(outs)]
    wall = time.perf_counter() - start
    failed = _failed_runs(outs, codes)
    if failed:
        return ctx.make(what, spec.mode, model=spec.model, ok=False, note=failed), None
    # the first round of each run pays its warm-up; the others are its steady state
    steady = [statistics.median(s[1:] or s) for s in map(_round_seconds, outs)]
    per_round = spec.images // spec.rounds
    training_rate = (spec.runs if together else 1) * per_round / statistics.mean(steady)
    record = ctx.make(what, spec.mode, model=spec.model, seconds=statistics.mean(steady), note=(
        f"wall {wall:.1f} s from the first start to the last exit (start-up included); per run "
        f"{spec.rounds} rounds x {spec.clients} clients x {spec.local_steps} steps x batch "
        f"{spec.batch_size}; img/s is all runs' training images over the wall time, s/round "
        f"the runs' mean training seconds per round after their first: "
        f"{', '.join(f'{s:.2f}' for s in steady)}; while training, "
        f"{training_rate:,.0f} images/s ({'all runs at once' if together else 'one run'})"))
    rate = spec.runs * spec.images / wall
    record.update(img_per_s=rate, tflops=rate * flops / 1e12)
    return record, wall


def shared_runs(ctx: Context, spec: SharedRuns = SharedRuns()) -> list[dict[str, Any]]:
    """The runs one after another, then all at once on the one device (each group's record
    appended as soon as it is measured)."""
    flops = _prepare(ctx, spec)
    alone, alone_wall = _group(ctx, spec, f"{spec.runs} runs one after another", False, flops)
    ctx.add(alone)
    shared, shared_wall = _group(ctx, spec, f"{spec.runs} runs sharing the device", True, flops)
    if alone_wall and shared_wall:
        shared["note"] += f"; {alone_wall / shared_wall:.2f}x the images/s of one after another"
    return [alone, ctx.add(shared)]


def packing(ctx: Context, counts: Sequence[int], spec: SharedRuns,
            steps: Sequence[bool] = (True, False)) -> list[dict[str, Any]]:
    """Outside the four-minute check (`python -m fedhet.bench.gpucheck packing`): K runs
    started at once on the one device for each K of `counts`, their steps replayed as CUDA
    graphs and eager (`steps`: `runtime.cuda_graphs` of each group), so that `runs_per_gpu` is
    set from measurements. A record's img/s is the runs' steady state (`overlap_rate`: only the
    span when all K trained); its note adds the wall time, start-up included. Each record is
    appended as soon as it is measured."""
    flops = _prepare(ctx, spec)
    per_round = spec.images // spec.rounds
    out = []
    for graphs in steps:
        for k in counts:
            step = "graph-replayed" if graphs else "eager"
            what = f"{k} run(s) sharing the device, {step} steps"
            group = replace(spec, runs=k, cuda_graphs=graphs, every_round=True)
            outs = [ctx.work / f"packing-{step}-{k}" / f"run{seed}" for seed in range(k)]
            began = time.perf_counter()
            runs = [Timeline(group.run(ctx.device, ctx.work, seed), run_out)
                    for seed, run_out in enumerate(outs)]
            codes = [run.wait() for run in runs]
            wall = time.perf_counter() - began
            failed = _failed_runs(outs, codes)
            if failed:
                out.append(ctx.record(what, spec.mode, model=spec.model, ok=False, note=failed))
                continue
            overlap = overlap_rate([run.round_ends for run in runs], per_round)
            shape = (f"per run {spec.rounds} rounds x {spec.clients} clients x "
                     f"{spec.local_steps} steps x batch {spec.batch_size}")
            if overlap is None:
                out.append(ctx.record(what, spec.mode, model=spec.model, ok=False, note=(
                    f"the runs never trained all at once (wall {wall:.1f} s, {shape}): give "
                    "more --rounds")))
                continue
            rate, span, rounds = overlap
            record = ctx.make(what, spec.mode, model=spec.model, seconds=span * k / rounds,
                              note=(f"{shape}; img/s over the {span:.1f} s when all {k} trained "
                                    f"({rounds} rounds end in it), s/round one run's mean then; "
                                    f"wall {wall:.1f} s from the first start to the last exit, "
                                    "start-up included"))
            record.update(img_per_s=rate, tflops=rate * flops / 1e12)
            out.append(ctx.add(record))
    return out


# -- 4. one real-data run ---------------------------------------------------------------------
FMNIST_CELL = {"target": "vhl_t2", "scale": "small",
               "where": {"dataset": "fmnist", "algorithm": "fedavg", "method": "base",
                         "setting": "a01-e1-k10"}}


def cell_run(target: str, scale: str, where: Mapping[str, str],
             root: Path = REPO) -> tuple[str, dict[str, Any]]:
    """The run id and resolved run of the one cell of `target` at `scale` whose labels match
    `where` (as the workflow resolves it; ValueError when none or several match)."""
    from fedhet.experiments import load_experiment

    paper = target.split("_", 1)[0]
    exp = load_experiment({"scale": scale}, root, papers=[paper])
    if target not in exp.items:
        raise ValueError(f"unknown target '{target}'; valid: {', '.join(sorted(exp.items))}")
    ids = {rid for cell in exp.items[target].cells
           if all(cell.labels.get(k) == str(v) for k, v in where.items())
           for rid in cell.run_ids}
    if len(ids) != 1:
        raise ValueError(f"{target} at scale {scale}: {len(ids)} runs match {dict(where)}, "
                         "expected one")
    rid = ids.pop()
    return rid, exp.runs[rid]


def real_run(ctx: Context, fmnist_dir: Path, shrink: Sequence[str] = ()) -> dict[str, Any]:
    """Train the Fashion-MNIST cell's run for 3 rounds (`shrink`: further `--set` overrides,
    for a CPU) on the real data copied from `fmnist_dir`; its accuracy and seconds per round."""
    from fedhet.data import seed_fmnist_from

    cell = FMNIST_CELL
    labels = ", ".join(cell["where"].values())
    what = f"real data: {cell['target']} {cell['where']['dataset']} cell, 3 rounds"
    try:
        seed_fmnist_from(fmnist_dir, ctx.work / "datasets")
        rid, run = cell_run(cell["target"], cell["scale"], cell["where"])
    except Exception as err:
        return ctx.record(what, ok=False, note=f"{type(err).__name__}: {err}")
    out = ctx.work / "fmnist"
    sets = ["training.rounds=3", f"dataset.root={ctx.work / 'datasets'}",
            f"partition.root={ctx.work / 'partitions'}", f"runtime.device={ctx.device}", *shrink]
    cmd = [*TRAIN, "--config-json", json.dumps(run), "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=environment())
    (ctx.work / "fmnist.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return ctx.record(what, ok=False, note=f"fedhet train exit {proc.returncode}: "
                          f"{_tail(proc.stderr)}")
    final = json.loads((out / "final.json").read_text())
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    saved = read_settings(out)
    prov, resolved = saved.provenance, saved.recorded
    ends = [row["seconds"] for row in rows]
    per_round = [b - a for a, b in zip([0.0, *ends], ends)]
    real = prov["stands_in_for"] is None
    mode = Mode.of_runtime(resolved["runtime"]).name
    accuracy = ", ".join(f"{row['test_acc']:.4f}" for row in rows)
    seconds = ", ".join(f"{s:.2f}" for s in per_round)
    sets = " ".join(["training.rounds=3", *shrink])
    note = (f"{cell['scale']} scale, cell {labels}: run {rid} trained with {sets} as "
            f"{final['run_id']}; test accuracy per round "
            f"{accuracy} (best {final['best_acc']:.4f}); seconds per round (training and "
            f"evaluation) {seconds}, s/round is their median; execution "
            f"{json.dumps(prov['execution'], sort_keys=True)}")
    if not real:
        note = f"not the real data: a stand-in for {prov['stands_in_for']}; {note}"
    return ctx.record(what, mode, model=resolved["model"]["name"],
                      seconds=statistics.median(per_round),
                      ok=final["status"] == "completed" and final["rounds_trained"] == 3 and real,
                      note=note)


def environment() -> dict[str, str]:
    """The environment of the runs this module starts: this package first on the path."""
    src = str(REPO / "src")
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": src + (os.pathsep + path if path else "")}
