"""The client side of `fedhet.forkserver`: send a `fedhet` command to the fork server named
by $FEDHET_FORKSERVER and wait for its exit status (the protocol is described there). Kept
apart from the server, which runs `fedhet.cli` itself."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import sys
from pathlib import Path

ENV = "FEDHET_FORKSERVER"
DECLINED = -1000
PACKAGE = Path(__file__).resolve().parent


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


def run_remote(argv: list[str]) -> int | None:
    """Run the command `argv` on the fork server named by $FEDHET_FORKSERVER and return its
    exit status; None when it should run in this process (no server, or it declined)."""
    path = os.environ.get(ENV)
    if not path:
        return None
    try:
        fds = [sys.stdout.fileno(), sys.stderr.fileno()]
    except (AttributeError, ValueError, OSError):  # no real output files (an embedding caller)
        return None
    request = json.dumps({
        "argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
        "python": os.path.realpath(sys.executable), "package": str(PACKAGE),
        "fingerprint": fingerprint(),
    }).encode()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        socket.send_fds(conn, [struct.pack(">I", len(request)) + request],
                        fds)
        (code,) = struct.unpack(">i", recv_exactly(conn, 4))
    except OSError as err:
        print(f"fedhet: fork server {path} not reachable ({err.strerror or err}); running in "
              "this process", file=sys.stderr)
        return None
    finally:
        conn.close()
    if code == DECLINED:
        print(f"fedhet: fork server {path} runs another installation or older sources; "
              "running in this process", file=sys.stderr)
        return None
    return code


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
