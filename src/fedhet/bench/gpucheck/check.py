"""`fedhet gpu-check`: a CUDA smoke test and benchmark for a machine with one GPU.

Offline, without Snakemake and without installing the package (`ci/gpu-check.sh` runs it from
src/ through PYTHONPATH), in at most four minutes: each part runs in a process of its own under
its own time limit (what an earlier part leaves unused goes to the later ones), and a part that
fails or runs out of time is recorded as failed while the next one starts.

Parts, in this order (a check cut short still reports the first ones):
  1. pytest -m gpu: the CUDA correctness tests (skipped without a GPU)
  2. the paper round (fedhet bench --round-time): ResNet-18, 5 clients x 5,000 random
     CIFAR-shaped images, batch 128, one FedAvg round in the fastest mode and in the default
     (what a run computes in unless its scale sets a mode; `fedhet bench --round-time` alone
     measures every mode): our engine with clients one at a time, stacked, and the reference
     loop (fedhet/bench/paper_round.py)
  3. two paper-sized runs (ResNet-18, batch 64) one after another, then sharing the GPU
  4. one real-data run: VHL Table 2's Fashion-MNIST cell (FedAvg, alpha 0.1, 1 epoch, 10
     clients) at the small scale, fedhet train --set training.rounds=3

Results: one JSON record per measurement in --out (default gpu-check.json), rewritten
atomically after each: {device, torch, mode, model, what, s_per_round, img_per_s, tflops,
peak_mem_gib, ok, note} (`model`: the model our engine trained, null for the tests and the
reference loop; `fedhet cost --throughput FILE` reads it); a summary table at the end. No
figure is checked against a target. The interpreter running the check runs its parts; it needs
torch, torchvision, numpy, PyYAML and pytest.

Exit status: 0 when every measurement is ok, 1 when one failed, 2 on bad usage or no GPU.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedhet.bench.gpucheck.records import print_summary

# the repository (its tests/ and config/; the parts run there) and the folder `fedhet` is
# imported from (on the parts' PYTHONPATH)
REPO = Path(__file__).resolve().parents[4]
PACKAGES = Path(__file__).resolve().parents[3]
# seconds kept for the summary after the last part, within the check's budget
SUMMARY_SECONDS = 5
# seconds a part has to exit after its time limit asked it to, before it is killed
KILL_AFTER = 10


@dataclass(frozen=True)
class Budget:
    """Seconds each part may take, in order, and the check's whole (0: no overall limit)."""

    parts: tuple[int, ...]
    total: int

    def limit(self, index: int, elapsed: float) -> int:
        """Part `index`'s time limit once the check has run `elapsed` seconds: its own seconds
        after the previous part's deadline (so time an earlier part left unused goes to this
        one), at most what is left of the whole less the summary's seconds; without a whole,
        its own seconds."""
        if self.total <= 0:
            return self.parts[index]
        used = int(elapsed)
        return min(sum(self.parts[: index + 1]) - used, self.total - used - SUMMARY_SECONDS)


# Seconds: CUDA tests, paper round, shared runs, real-data run (the check's own start-up, ~5 s,
# counts in the first). Measured on a fresh H200 (torch 2.11) with 90, 45, 72 and 30 s: the 20
# CUDA tests take 100 s inside pytest, ~105 s with its start-up (cut at 86 s); the paper round
# in two modes 32 s; four runs one after another 53 s (~13 s each, nearly all start-up), then
# all four at once were cut at the part's 80 s; the real-data run 19 s. Hence two shared runs
# (~26 s one after another, ~15 s at once; `packing` measures more) and these limits: ~205 s
# expected of the 235 before the summary.
GPU_BUDGET = Budget((118, 40, 52, 25), 240)
# generous: a busy CI machine must not fail the smoke run on time
CPU_BUDGET = Budget((300, 300, 300, 300), 0)
# the paper round: the fastest mode (fedhet.engine.modes.GPU_MODES[0]) and the default; on the
# CPU two modes of a tiny round
GPU_ROUND = ("--device", "cuda", "--modes", "bf16+channels_last+cudnn_benchmark,default")
CPU_ROUND = ("--device", "cpu", "--modes", "default,bf16+channels_last", "--round-clients", "2",
             "--round-samples", "8", "--round-batch", "4", "--round-width", "0.0625")


@dataclass(frozen=True)
class Part:
    """One part of the check: its name (in the results file) and its command."""

    name: str
    command: tuple[str, ...]


def parts(out: Path, work: Path, fmnist: Path, cpu: bool) -> list[Part]:
    """The check's parts in order, each a command of this interpreter."""
    flag = ("--cpu",) if cpu else ()
    common = ("--out", str(out), "--work", str(work), *flag)
    gpucheck = (sys.executable, "-m", "fedhet.bench.gpucheck")
    return [
        Part("pytest -m gpu", (*gpucheck, "tests", *common)),
        Part("paper round", (sys.executable, "-m", "fedhet.cli", "bench", "--round-only",
                             "--records", str(out), *(CPU_ROUND if cpu else GPU_ROUND))),
        Part("runs sharing the device", (*gpucheck, "shared-runs", *common)),
        Part("real-data run", (*gpucheck, "real-run", "--fmnist", str(fmnist), *common)),
    ]


def environment(cpu: bool) -> dict[str, str]:
    """The parts' environment: this package first on PYTHONPATH, no display, output unbuffered
    (it is shown as it comes); on the CPU one thread per process unless set, so that the smoke
    run is not slowed by threads fighting for cores."""
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": str(PACKAGES) + (os.pathsep + path if path else ""),
           "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    if cpu:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_part(command: Sequence[str], limit: int, log: Path, env: dict[str, str],
             cwd: Path = REPO) -> int:
    """Run `command` in `cwd` (the parts: in the repository), its output shown and kept in
    `log`, for at most `limit` seconds: then its process group is asked to stop, and killed
    `KILL_AFTER` seconds later. Its exit status, 124 when the time limit stopped it (as
    timeout(1) says)."""
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    stopped = threading.Event()

    def stop(sig: int) -> None:
        stopped.set()
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    timers = [threading.Timer(limit, stop, (signal.SIGTERM,)),
              threading.Timer(limit + KILL_AFTER, stop, (signal.SIGKILL,))]
    for timer in timers:
        timer.daemon = True
        timer.start()
    assert proc.stdout is not None
    with log.open("wb") as kept:
        while chunk := proc.stdout.read1(65536):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            kept.write(chunk)
    rc = proc.wait()
    for timer in timers:
        timer.cancel()
    return 124 if stopped.is_set() else rc


def say(text: str) -> None:
    print(text, flush=True)


def why_failed(rc: int, limit: int, log: Path) -> str:
    """The note of a part that did not exit 0."""
    if rc == 124:
        return f"time limit {limit} s reached; the records before this one are what it measured"
    tail = log.read_text(errors="replace").splitlines()[-3:]
    return f"exit {rc}: {' '.join(tail)}"


def can_run(cpu: bool) -> str | None:
    """Why the check cannot run here (None when it can): a missing library, or no GPU."""
    try:
        import torch

        for module in ("fedhet.bench.gpucheck.parts", "fedhet.bench.paper_round"):
            importlib.import_module(module)
    except ImportError as err:
        return (f"gpu-check: {err}; the check needs torch, torchvision, numpy, PyYAML and "
                "pytest, and runs the package from src/")
    if not cpu and not torch.cuda.is_available():
        return "gpu-check: no CUDA device is visible to torch; use --cpu for the CPU smoke run"
    return None


def main(args: argparse.Namespace) -> int:
    """Run the check's parts in order under the budget, record the ones that did not finish,
    print the summary; the scratch directory goes unless it was given or a part failed."""
    started = time.monotonic()
    problem = can_run(args.cpu)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    from fedhet.data.fmnist import DEBIAN_FMNIST_DIR

    out = Path(args.out).absolute()
    fmnist = Path(args.fmnist or os.environ.get("FEDHET_FMNIST_DIR") or DEBIAN_FMNIST_DIR)
    keep_work = args.work is not None
    work = (Path(args.work).absolute() if keep_work
            else Path(tempfile.mkdtemp(prefix="fedhet-gpu-check.")))
    work.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    budget = CPU_BUDGET if args.cpu else GPU_BUDGET
    env = environment(args.cpu)
    any_failed = False
    for index, part in enumerate(parts(out, work, fmnist.absolute(), args.cpu)):
        limit = budget.limit(index, time.monotonic() - started)
        log = work / f"{part.name.replace(' ', '-')}.log"
        t0 = time.monotonic()
        say(f"::: {part.name} (time limit {limit} s)")
        if limit < SUMMARY_SECONDS:
            rc, why = 124, f"not started: the check's {budget.total} s were used up"
        else:
            rc = run_part(part.command, limit, log, env)
            why = why_failed(rc, limit, log) if rc else ""
        say(f"::: {part.name}: exit {rc} after {int(time.monotonic() - t0)} s")
        if rc:
            any_failed = True
            subprocess.run([sys.executable, "-m", "fedhet.bench.gpucheck", "failed", "--out",
                            str(out), "--what", part.name, "--note", why,
                            *(["--cpu"] if args.cpu else [])], cwd=REPO, env=env)
    say(f"\n::: GPU check finished in {int(time.monotonic() - started)} s; results in {out}")
    status = print_summary(out)
    if not keep_work:
        if status == 0 and not any_failed:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"logs and runs kept in {work}")
    return status
