"""The fork server's protocol (`fedhet.local.server`) and its client side: send a `fedhet`
command to the server named by $FEDHET_FORKSERVER and wait for its exit status (`run_remote`;
the protocol is described in the server). Kept apart from the server, which imports torch and
runs `fedhet.cli` itself, and light to import: the workflow's scripts hand themselves to the
server from here before their own imports.

$FEDHET_FORKSERVER is `<pid>:<socket path>`, both told by the server itself when it listens.
A client talks only to that pid, running as its own user (the kernel says who is on the other
end of the socket before anything is sent), so a socket someone else put in its way is never
used. The request carries what the command's process inherited besides its environment
(`fedhet.local.jobstate`); the server tells which worker runs the command before it starts,
and a client whose server goes away ends that worker's process group
(`fedhet.local.lifeline.end_job`) before it runs the command itself."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from pathlib import Path

from fedhet.local import jobstate
from fedhet.local.lifeline import Job, end_job
from fedhet.local.peercred import Peer, peer

ENV = "FEDHET_FORKSERVER"
DECLINED = -1000
RUNNING = -1001  # followed by the worker's pid and start time, then by its exit status
GO = b"\x01"  # from the handler to its worker once the client knows the worker
PACKAGE = Path(__file__).resolve().parents[1]  # fedhet's own directory
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


def job_request(argv: list[str]) -> dict:
    """The request this process sends the server to run the command `argv` (the protocol's
    JSON object): the command, where and how it would run here, and what code it would run."""
    return {
        "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
        "python": os.path.realpath(sys.executable), "package": str(PACKAGE),
        "fingerprint": fingerprint(), "state": jobstate.capture(),
    }


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
    request = json.dumps(job_request(argv)).encode()
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

