"""The client side of `fedhet.forkserver`: start the server for a workflow (`start_server`),
and send a `fedhet` command to the server named by $FEDHET_FORKSERVER and wait for its exit
status (`run_remote`; the protocol is described in the server). Kept apart from the server,
which imports torch and runs `fedhet.cli` itself.

$FEDHET_FORKSERVER is `<pid>:<socket path>`, both told by the server itself when it listens.
A client talks only to that pid, running as its own user (the kernel says who is on the other
end of the socket before anything is sent), so a socket someone else put in its way is never
used. The request carries what the command's process inherited besides its environment
(`fedhet.jobstate`); the server tells which worker runs the command before it starts, and a
client whose server goes away ends that worker's process group (`fedhet.lifeline.end_job`)
before it runs the command itself."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fedhet import jobstate
from fedhet.lifeline import Job, end_job
from fedhet.peercred import Peer, peer

ENV = "FEDHET_FORKSERVER"
DECLINED = -1000
RUNNING = -1001  # followed by the worker's pid and start time, then by its exit status
GO = b"\x01"  # from the handler to its worker once the client knows the worker
PACKAGE = Path(__file__).resolve().parent
# A request is a command's argv and environment (bounded by the system's ARG_MAX, 2 MiB on
# Linux) as JSON: 16 MiB leaves room for escaping and stops a length prefix of 4 GiB.
MAX_REQUEST = 16 << 20


def fingerprint() -> float:
    """The newest modification time of the package's Python files."""
    newest = 0.0
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                newest = max(newest, os.stat(os.path.join(root, name)).st_mtime)
    return newest


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the fork server closed the connection")
        data += chunk
    return data


def parse_address(value: str) -> tuple[int, str]:
    """(server pid, socket path) of a $FEDHET_FORKSERVER value `<pid>:<path>`."""
    pid, _, path = value.partition(":")
    if not pid.isdigit() or not path:
        raise ValueError(f"${ENV} is {value!r}, not <server pid>:<socket path>")
    return int(pid), path


def _own_process(why: str) -> None:
    print(f"fedhet: {why}; running this command in its own process (it makes its own imports)",
          file=sys.stderr)


def _send_request(conn: socket.socket, request: bytes, fds: list[int]) -> None:
    """Send the length-prefixed `request` with the files `fds`, all of it."""
    data = struct.pack(">I", len(request)) + request
    sent = socket.send_fds(conn, [data], fds)
    conn.sendall(data[sent:])


def _await_status(conn: socket.socket, path: str) -> int | None:
    """The exit status the server sends on `conn` for a request sent on it; None when it
    declined (why goes to stderr). Where the connection fails once the worker has started, the
    worker's group is ended before this returns None: the command may then run here."""
    worker = None
    try:
        (code,) = struct.unpack(">i", recv_exactly(conn, 4))
        if code == RUNNING:
            worker = Job(*struct.unpack(">iQ", recv_exactly(conn, 12)))
            (code,) = struct.unpack(">i", recv_exactly(conn, 4))
        if code == DECLINED:
            (length,) = struct.unpack(">I", recv_exactly(conn, 4))
            reason = recv_exactly(conn, min(length, 4096)).decode(errors="replace")
            return _own_process(f"the fork server declined it: {reason}")
    except OSError as err:
        if worker is not None:
            end_job(worker)
            return _own_process(f"fork server {path} failed ({err.strerror or err}) while its "
                                f"worker (pid {worker.pid}) ran this command, which has ended")
        return _own_process(f"fork server {path} failed ({err.strerror or err})")
    return code


def run_remote(argv: list[str]) -> int | None:
    """Run the command `argv` on the fork server named by $FEDHET_FORKSERVER and return its
    exit status; None when it should run in this process (no server, a socket not served by
    that server as this user, the server declined or went away; the reason goes to stderr)."""
    value = os.environ.get(ENV)
    if not value:
        return None
    try:
        fds = [sys.stdout.fileno(), sys.stderr.fileno()]
    except (AttributeError, ValueError, OSError):  # no real output files (an embedding caller)
        return None
    try:
        pid, path = parse_address(value)
    except ValueError as err:
        return _own_process(str(err))
    request = json.dumps({
        "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
        "python": os.path.realpath(sys.executable), "package": str(PACKAGE),
        "fingerprint": fingerprint(), "state": jobstate.capture(),
    }).encode()
    if len(request) > MAX_REQUEST:
        return _own_process(f"its request to the fork server would be {len(request)} bytes, "
                            f"over the cap of {MAX_REQUEST}")
    server = Peer(pid, os.getuid())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(path)
        except OSError as err:
            return _own_process(f"fork server {path} not reachable ({err.strerror or err})")
        try:
            found = peer(conn)
        except OSError as err:
            return _own_process(f"cannot tell who serves {path} ({err.strerror or err})")
        if found != server:
            return _own_process(f"{path} is served by pid {found.pid} of uid {found.uid}, not by "
                                f"the fork server of this workflow (pid {pid}, uid {server.uid}); "
                                "nothing was sent to it")
        try:
            _send_request(conn, request, fds)
        except (BrokenPipeError, ConnectionResetError):
            pass  # a server that declines without reading the request still says why
        except OSError as err:
            return _own_process(f"fork server {path} failed ({err.strerror or err})")
        return _await_status(conn, path)


def run_script_on_server(script: str) -> None:
    """Hand a workflow script (`script`: the file a Snakemake `script:` job started Python on)
    to the fork server of the running workflow, and exit with its status: pandas, matplotlib
    and seaborn are imported there already (about 3 of a figure job's 4 s). Returns, to run
    the script here, where no server runs it (why goes to stderr, as for any command)."""
    code = run_remote(["run-script", os.path.abspath(script)])
    if code is not None:
        sys.exit(code)


class NotStarted(Exception):
    """The fork server did not start (the reason; the server's log says more)."""


@dataclass(frozen=True)
class Server:
    process: subprocess.Popen
    address: str  # $FEDHET_FORKSERVER for its clients: `<pid>:<socket path>`


def start_server(log: str | os.PathLike, max_jobs: int, watch_pid: int | None = None,
                 timeout: float = 120.0, command: list[str] | None = None) -> Server:
    """Start the fork server (`command`, by default `python -m fedhet.forkserver`; its output
    appended to `log`) for at most `max_jobs` jobs at once, and wait until it writes where it
    listens into a pipe: the address comes from the server itself, never from a path that
    appears on disk. The server exits when `watch_pid` does."""
    read, write = os.pipe()
    args = [*(command or [sys.executable, "-m", "fedhet.forkserver"]),
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
