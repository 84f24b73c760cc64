"""Start and stop the fork server of a local workflow run (`fedhet.local.server`; what
`workflow/rules/execution.smk` uses), and tell whether it would serve the jobs' `fedhet` command."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass


class NotStarted(Exception):
    """The fork server did not start (the reason; the server's log says more)."""


@dataclass(frozen=True)
class Server:
    process: subprocess.Popen
    address: str  # $FEDHET_FORKSERVER for its clients: `<pid>:<socket path>`


def start_server(log: str | os.PathLike, max_jobs: int, watch_pid: int | None = None,
                 timeout: float = 120.0, command: list[str] | None = None) -> Server:
    """Start the fork server (`command`, by default `python -m fedhet.local.server`; its output
    appended to `log`) for at most `max_jobs` jobs at once, and wait until it writes where it
    listens into a pipe: the address comes from the server itself, never from a path that
    appears on disk. The server exits when `watch_pid` does."""
    read, write = os.pipe()
    args = [*(command or [sys.executable, "-m", "fedhet.local.server"]),
            "--ready-fd", str(write), "--max-jobs", str(max_jobs)]
    if watch_pid is not None:
        args += ["--watch-pid", str(watch_pid)]
    try:
        with open(log, "ab") as out:
            process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                       pass_fds=(write,), start_new_session=True)
    finally:
        os.close(write)
    with os.fdopen(read, "rb", buffering=0) as ready:
        told = _read_line(ready, timeout)
    if told is None:
        stop_server(process)
        raise NotStarted(f"it did not say where it listens within {timeout:.0f} s")
    if not told:
        raise NotStarted(f"it exited with status {process.wait()}")
    return Server(process, f"{process.pid}:{told}")


def _read_line(stream, timeout: float) -> str | None:
    """The first line written to `stream` before it closes ('' when closed before a whole
    line), or None when nothing whole came within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            return None
        chunk = stream.read(4096)
        if not chunk:
            return ""
        data += chunk
    return data.split(b"\n", 1)[0].decode()


def stop_server(process: subprocess.Popen) -> None:
    """Terminate the fork server `process` (it removes its socket and directory) and wait."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def command_mismatch(command: str = "fedhet") -> str | None:
    """Why a fork server started by this Python would decline the jobs' `command` (None when
    it would serve them): the command on PATH is a Python launcher for another interpreter
    (a venv beside a system install). Launchers it cannot read (shims, binaries) pass; another
    copy of fedhet under the same Python is found only by the server, per job."""
    path = shutil.which(command)
    if path is None:
        return f"`{command}` is not on PATH"
    try:
        with open(path, "rb") as script:
            first = script.readline().decode(errors="replace").strip()
    except OSError as err:
        return f"cannot read {path} ({err.strerror or err})"
    words = first[2:].split() if first.startswith("#!") else []
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
        words[:1] = [shutil.which(words[0]) or words[0]] if words else []
    if not words or not os.path.basename(words[0]).startswith("python"):
        return None  # not a Python launcher (a shim, a binary): nothing to compare
    ours = os.path.realpath(sys.executable)
    if os.path.realpath(words[0]) != ours:
        return f"{path} runs {words[0]}, this Snakemake {ours}"
    return None
