"""The processes of one job on the fork server (`fedhet.local.server`), started by the job's
handler: the worker, which becomes the job's process and runs its command, and the worker's
guard (`fedhet.local.lifeline.guard`). The worker leads a process group of its own, which what it
starts and the guard join; it starts the command only once its client knows its pid, and ends
with its handler: the guard kills the group when the handler ends before the job, and on Linux
the kernel kills the worker then too. A handler whose client went away ends the group."""

from __future__ import annotations

import os
import signal
import socket
import struct
import sys
import time
import traceback
from dataclasses import dataclass

from fedhet.local import jobstate, lifeline
from fedhet.local.protocol import ENV, GO, RUNNING

STOP_SECONDS = 5.0  # how long a stopped job's processes have to exit on SIGTERM


def _await_go(go_fd: int, handler: int) -> bool:
    """In the worker, first: lead a process group of its own, have the kernel kill it with
    the handler where it can, and wait until the handler has told the client the worker's pid
    (False when the handler ended first: the job must not start)."""
    os.setpgid(0, 0)
    lifeline.die_with_parent()
    go = os.getppid() == handler and os.read(go_fd, 1) == GO
    os.close(go_fd)
    return go


def _worker(request: dict, fds: list[int]) -> int:
    """In the forked worker: become the job's process and run its command; its exit status."""
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ENV, None)
    jobstate.adopt(request["state"])
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))
    sys.argv = ["fedhet", *request["argv"]]
    from fedhet.cli import main

    try:
        code = main(request["argv"])
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001  reported like an uncaught exception would be
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return int(code or 0)


@dataclass
class Running:
    """A started job: its worker's pid (also its group's id), its guard's pid, and this
    handler's end of the guard's pipe."""

    worker: int
    guard: int
    guard_fd: int

    def finish(self) -> None:
        """After the worker has been reaped: let the guard go without killing anything (what
        the job left running keeps running, as after a job in its own process)."""
        try:
            os.write(self.guard_fd, lifeline.DONE)
        except BrokenPipeError:
            pass  # the guard has ended: the job signalled its own process group
        os.close(self.guard_fd)
        os.waitpid(self.guard, 0)

    def stop(self) -> None:
        """End the job's process group (the worker, what it started, the guard): SIGTERM, then
        SIGKILL to what is left once the worker has exited or after `STOP_SECONDS`; then reap.
        The unreaped worker keeps the group's id its own, so no other process gets the
        signals."""
        _signal_group(self.worker, signal.SIGTERM)
        _exited_within(self.worker, STOP_SECONDS)
        _signal_group(self.worker, signal.SIGKILL)
        os.waitpid(self.worker, 0)
        os.close(self.guard_fd)
        os.waitpid(self.guard, 0)


def start(conn: socket.socket, request: dict, fds: list[int]) -> Running | None:
    """Fork the worker of `request` (given the job's output files `fds`) and its guard, and
    tell the client on `conn` the worker's pid and start time before the command begins; None
    when the client went away first (then nothing has started)."""
    handler = os.getpid()
    go_read, go_write = os.pipe()
    worker = os.fork()
    if worker == 0:
        conn.close()
        os.close(go_write)
        os._exit(_worker(request, fds) if _await_go(go_read, handler) else 1)
    os.close(go_read)
    for fd in fds:
        os.close(fd)
    try:
        os.setpgid(worker, worker)  # also done by the worker: whichever comes first
    except OSError:
        pass  # the worker has done it already
    running = _start_guard(conn, worker, go_write)
    job = lifeline.job_of(worker)
    try:
        conn.sendall(struct.pack(">iiQ", RUNNING, job.pid, job.start))
    except OSError:
        os.close(go_write)
        running.stop()
        return None
    os.write(go_write, GO)
    os.close(go_write)
    return running


def _start_guard(conn: socket.socket, worker: int, go_write: int) -> Running:
    """Fork the guard of `worker`'s group, holding only the read end of its pipe."""
    read, write = os.pipe()
    guard = os.fork()
    if guard == 0:
        for fd in (conn.fileno(), go_write, write):
            os.close(fd)
        try:
            os.setpgid(0, worker)
        except OSError:
            os._exit(1)  # the worker's group has ended already
        lifeline.guard(read, worker)
        os._exit(0)
    os.close(read)
    try:
        os.setpgid(guard, worker)
    except OSError:
        pass  # done by the guard already, or the group has ended
    return Running(worker, guard, write)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the group has ended


def _exited_within(pid: int, seconds: float) -> bool:
    """Whether the child `pid` exits within `seconds` (left unreaped)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        time.sleep(0.05)
    return False
