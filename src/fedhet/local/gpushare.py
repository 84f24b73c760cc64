"""Shares of this machine's GPUs for the GPU jobs of a local workflow run.

A Snakemake run on a workstation starts up to visible GPUs × `runs_per_gpu` GPU jobs at once
(workflow/rules/execution.smk) and publishes its plan in $FEDHET_GPU_SHARES (JSON: the devices,
the shares of each, the GPUs a job takes and the slot directory). Every GPU command of such a
job (`GPU_COMMANDS`) claims its GPUs before it does anything else, whether the fork server
then runs it or it runs in its own process: the least busy devices that have a free share, and
CUDA_VISIBLE_DEVICES naming only those. Without the plan (a cluster job, SLURM having picked
the GPUs; a command typed by hand; a machine without GPUs) nothing changes.

A share is a lock file, <dir>/<device>.<k>.lock (k < shares per device), held with flock(2)
by the job's processes: the kernel releases it when the last of them ends, so a killed job
frees its share and none goes stale. Holders take shared locks; a claim tests slots with an
exclusive non-blocking lock, under <dir>/claim.lock so that two claims never take the same free
slot. A command the fork server runs holds its slots twice: in the `fedhet` process that waits
for it, and in the forked worker, which finds them in $FEDHET_GPU_SLOTS; the share is free
once both are gone. When every share is busy (more jobs than shares, as `--resources gpu=N`
can ask for), a claim waits for one.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PLAN_ENV = "FEDHET_GPU_SHARES"
SLOTS_ENV = "FEDHET_GPU_SLOTS"
# the commands of the workflow's GPU jobs (the rules that ask for the `gpu` resource)
GPU_COMMANDS = ("train", "calibrate")
# lock files this process holds (kept open for its lifetime)
_HELD: list[int] = []


@dataclass(frozen=True)
class Plan:
    """How a run's GPU jobs share the machine's GPUs."""

    devices: list[str]  # CUDA_VISIBLE_DEVICES entries, one per GPU
    per_device: int  # jobs that may share one GPU (runs_per_gpu)
    gpus: int  # GPUs each job takes
    directory: str  # where the slot files live

    def to_env(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, text: str) -> Plan:
        try:
            plan = cls(**json.loads(text))
        except (ValueError, TypeError) as err:
            raise ValueError(f"${PLAN_ENV} is not a GPU share plan ({err}): {text!r}") from None
        if not plan.devices or plan.per_device < 1 or plan.gpus < 1:
            raise ValueError(f"${PLAN_ENV} names no share to claim: {text!r}")
        if plan.gpus > len(plan.devices):
            raise ValueError(
                f"a job asks for {plan.gpus} GPUs but this machine shows {len(plan.devices)} "
                f"({','.join(plan.devices)}); set FEDHET_JOB_GPUS or the scale's resources.gpu "
                f"to at most {len(plan.devices)}"
            )
        return plan


def visible_devices(env: dict[str, str] | None = None) -> list[str]:
    """The GPUs this machine shows its jobs, as CUDA_VISIBLE_DEVICES entries, found without
    importing torch: `nvidia-smi -L` counts them, $CUDA_VISIBLE_DEVICES (when set) names them;
    none where it hides them or `nvidia-smi` is missing or lists none."""
    env = os.environ if env is None else env
    given = env.get("CUDA_VISIBLE_DEVICES")
    if given is not None and given.strip() in ("", "-1"):
        return []
    try:
        listing = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True,
            env=dict(env),
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = sum(line.startswith("GPU ") for line in listing.splitlines())
    if given is None:
        return [str(i) for i in range(found)]
    return [d.strip() for d in given.split(",")][:found]


def default_directory(env: dict[str, str] | None = None) -> Path:
    """Where the slot files live: per user and machine, so that runs started one after the
    other (a killed run's jobs still dying) count the same shares; under $XDG_RUNTIME_DIR
    where set, else in the user's cache directory ($XDG_CACHE_HOME, else ~/.cache): never at
    a name in a shared directory, which another user could take first and so stop the GPU
    jobs."""
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "fedhet-gpu-shares"
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or Path.home(), ".cache")
    return Path(cache) / "fedhet" / f"gpu-shares-{socket.gethostname()}"


def _private_directory(path: Path) -> Path:
    """`path`, created for this user only; an error when it is someone else's or a link."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    info = path.lstat()
    if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid():
        raise PermissionError(
            f"GPU share directory {path} is not a directory of this user; remove it or set "
            "XDG_RUNTIME_DIR (or XDG_CACHE_HOME) to a private directory"
        )
    return path


def slot_path(directory: Path, device: str, k: int) -> Path:
    return directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', device)}.{k}.lock"


def _try_lock(path: Path, how: int) -> int | None:
    """An open descriptor of `path` locked with `how` (non-blocking), or None when busy."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def try_claim(plan: Plan) -> tuple[list[str], list[Path]] | None:
    """Take one free share on each of `plan.gpus` devices, least busy first (then in the
    plan's order); their devices and slot files, or None when too few devices have one free.
    The slots stay locked by this process (and by what it forks) until it ends."""
    directory = _private_directory(Path(plan.directory))
    mutex = os.open(directory / "claim.lock", os.O_RDWR | os.O_CREAT, 0o600)
    free: dict[int, list[tuple[Path, int]]] = {}
    try:
        fcntl.flock(mutex, fcntl.LOCK_EX)
        busy = [0] * len(plan.devices)
        for i, device in enumerate(plan.devices):
            for k in range(plan.per_device):
                path = slot_path(directory, device, k)
                fd = _try_lock(path, fcntl.LOCK_EX)
                if fd is None:
                    busy[i] += 1
                else:
                    free.setdefault(i, []).append((path, fd))
        chosen = sorted(free, key=lambda i: (busy[i], i))[: plan.gpus]
        if len(chosen) < plan.gpus:
            return None
        taken = []
        for i in sorted(chosen):
            path, fd = free[i].pop(0)
            fcntl.flock(fd, fcntl.LOCK_SH)  # a holder's lock (safe: no other claim runs)
            _HELD.append(fd)
            taken.append((plan.devices[i], path))
        return [d for d, _ in taken], [p for _, p in taken]
    finally:
        for slots in free.values():
            for _, fd in slots:
                os.close(fd)
        os.close(mutex)


def claim(plan: Plan, poll: float = 0.5) -> tuple[list[str], list[Path]]:
    """`try_claim`, waiting until shares are free (said once on stderr)."""
    said = False
    while True:
        got = try_claim(plan)
        if got is not None:
            return got
        if not said:
            print(
                f"fedhet: waiting for a free share of {plan.gpus} GPU(s) "
                f"({plan.per_device} per GPU on {','.join(plan.devices)})",
                file=sys.stderr, flush=True,
            )
            said = True
        time.sleep(poll)


def hold(paths: list[str]) -> None:
    """Lock the slots this process was given (a fork server's worker), shared with the
    process that claimed them, so that they stay busy while this one runs."""
    for path in paths:
        fd = os.open(path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_SH)
        _HELD.append(fd)


def claim_for_command(argv: list[str], env: dict[str, str] | None = None) -> None:
    """At the start of a `fedhet` command: a GPU command of a local workflow job claims its
    share of the GPUs (sets CUDA_VISIBLE_DEVICES and $FEDHET_GPU_SLOTS, drops the plan so
    that nothing it starts claims again); a process given slots holds them."""
    env = os.environ if env is None else env
    if env.get(SLOTS_ENV):
        hold(env[SLOTS_ENV].split(os.pathsep))
        return
    text = env.get(PLAN_ENV)
    if not text or not argv or argv[0] not in GPU_COMMANDS:
        return
    try:
        plan = Plan.from_env(text)
        devices, paths = claim(plan)
    except (ValueError, OSError) as err:
        raise SystemExit(f"fedhet {argv[0]}: error: no GPU share: {err}") from None
    env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    env[SLOTS_ENV] = os.pathsep.join(str(p) for p in paths)
    del env[PLAN_ENV]
    print(f"fedhet: CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} "
          f"(a share of {plan.per_device} per GPU)", file=sys.stderr, flush=True)
