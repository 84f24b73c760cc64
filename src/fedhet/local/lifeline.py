"""How long a fork server's worker lives. A worker leads a process group of its own (what it
starts joins it) and dies with the handler that forked it: the handler's guard, a process in
that group that waits on a pipe only the handler holds open, kills the group when the handler
ends before the job (`guard`), and on Linux the kernel also kills the worker itself then
(PR_SET_PDEATHSIG, `die_with_parent`). A client whose server went away ends what is left of the
worker's group (`end_job`) before it runs the job itself, so that two copies of a job never
run at once.

A worker is named by its pid and start time (`Job`): a pid the kernel gave to a newer process
since is not the worker's."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fedhet.atomic import pid_alive

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
DONE = b"\x00"  # from a handler to its guard: the job is over, nothing to kill
PROC = Path("/proc")
_GONE = ("Z", "X")  # states of a process that has ended (a zombie runs nothing)


@dataclass(frozen=True)
class Job:
    """A worker: its pid (also its process group) and its start time in clock ticks after
    boot (0 where the system does not say)."""

    pid: int
    start: int


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first); None when no
    such process runs or the system has no /proc."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _has_proc() -> bool:
    return (PROC / "self" / "stat").exists()


def job_of(pid: int) -> Job:
    """`pid` with its start time (read by its parent, before reaping it: the pid is its own)."""
    fields = _stat(pid)
    return Job(pid, int(fields[19]) if fields else 0)


def die_with_parent() -> bool:
    """Have the kernel kill this process (SIGKILL) when its parent ends; whether it could
    (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
                          ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0
    except (OSError, AttributeError):
        return False


def guard(lifeline_fd: int, group: int) -> None:
    """In a guard process, a member of the worker's process `group`: wait until the handler
    closes its end of the pipe `lifeline_fd`, and kill the group (the worker, what it started,
    and the guard) unless the handler said first that the job is over (`DONE`). The group's id
    stays the worker's while the guard is in it, so the signal reaches no other process."""
    if os.read(lifeline_fd, 1) != DONE:
        os.killpg(group, signal.SIGKILL)


def _members(job: Job) -> list[int]:
    """The processes of `job` that still run: the worker itself when its pid is still its
    own, and the processes of its group (from /proc; where there is none, the worker's pid
    while it or its group lives)."""
    if not _has_proc():
        try:
            os.killpg(job.pid, 0)
        except ProcessLookupError:
            return [job.pid] if pid_alive(job.pid) else []
        except PermissionError:
            return []  # another user's group has the id: the worker's is gone
        return [job.pid]
    fields = _stat(job.pid)
    if fields is not None and int(fields[19]) != job.start:
        return []  # the pid is a newer process's: the worker and its whole group are gone
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] not in _GONE and int(stat[2]) == job.pid:
                found.append(int(entry.name))
    if fields is not None and fields[0] not in _GONE and job.pid not in found:
        found.append(job.pid)  # a worker killed before it could lead a group
    return found


def _kill(pid: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # gone meanwhile, or a pid that another user's process has taken since


def end_job(job: Job, poll: float = 0.05) -> None:
    """Kill what still runs of the worker `job` and return once none of it runs."""
    while True:
        members = _members(job)
        if not members:
            return
        for pid in members:
            _kill(pid)
        if not _has_proc():
            _kill(job.pid, group=True)
        time.sleep(poll)
