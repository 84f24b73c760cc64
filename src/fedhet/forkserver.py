"""A local fork server: `fedhet` commands of one Snakemake run start from a process that has
already imported torch, instead of importing it again (about 1.5 CPU-seconds per job, a fifth
of a demo training job).

The workflow starts `python -m fedhet.forkserver` when it runs jobs on this machine and sets
`FEDHET_FORKSERVER` to its socket for the jobs. A `fedhet` command that finds the variable
sends its arguments, working directory, environment and its stdout/stderr to the server and
waits; the server forks a worker that runs the command exactly as `fedhet.cli.main` would in a
fresh process (same code, same settings: the numbers do not change) with the job's
environment, thread count and output files, and returns its exit status. When the job is
killed, its worker is killed. The command runs in its own process instead when there is no
server, when the server runs another installation or Python, or when a source file of fedhet
changed after the server started (it would run stale code); it says so on stderr.

Protocol (one connection per command): the client sends a 4-byte big-endian length and a JSON
request {argv, cwd, env, python, package, fingerprint}, with its stdout and stderr attached
(SCM_RIGHTS); the server answers with a 4-byte big-endian signed exit status, or -1000 when it
declines the command.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback

from fedhet.atomic import pid_alive
from fedhet.forkclient import DECLINED, ENV, PACKAGE, fingerprint, recv_exactly

# ----------------------------------------------------------------------------- server


def _preload() -> None:
    """Import what a job imports: torch, the engine, every model and method."""
    import torch  # noqa: F401

    import fedhet.cli  # noqa: F401
    import fedhet.train  # noqa: F401
    from fedhet import catalog
    from fedhet.models import MODELS

    for name in MODELS.names():
        MODELS.get(name)
    for kind in ("algorithm", "plugin"):
        for name in catalog.names(kind):
            if catalog.method(name).implemented:
                catalog.implementation(name)


def _worker(request: dict, fds: list[int]) -> int:
    """In the forked worker: become the job's process and run its command."""
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ENV, None)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
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


def _cuda_started() -> bool:
    """Whether this process, or the server it was forked from, has initialised CUDA: a
    forked worker could not use it (its first CUDA call fails), so none is forked then."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    return cuda is not None and (cuda.is_initialized() or cuda._is_in_bad_fork())


def _decline_reason(request: dict, started: float, nfds: int) -> str | None:
    """Why the server must not run `request` (None when it can): another Python or another
    copy of fedhet would run other code, sources edited after the start stale code, and a
    worker forked after CUDA started could not use the GPU."""
    if _cuda_started():
        return "the server has initialised CUDA, which a forked worker cannot use"
    python = os.path.realpath(sys.executable)
    if request["python"] != python:
        return f"the job's Python is {request['python']}, the server's {python}"
    if request["package"] != str(PACKAGE):
        return f"the job imports fedhet from {request['package']}, the server from {PACKAGE}"
    if request["fingerprint"] > started:
        return "a fedhet source file changed after the server started"
    if nfds != 2:
        return f"the job sent {nfds} output files, not 2"
    return None


def _handle(conn: socket.socket, started: float) -> None:
    """In a handler process: check the request, fork its worker, wait for the worker or for
    the client to go away (then kill the worker), send the exit status."""
    head, fds, _, _ = socket.recv_fds(conn, 65536, 2)
    if len(head) < 4:  # the client went away before asking
        for fd in fds:
            os.close(fd)
        return
    (length,) = struct.unpack(">I", head[:4])
    body = head[4:]
    if len(body) < length:
        body += recv_exactly(conn, length - len(body))
    request = json.loads(body)
    why = _decline_reason(request, started, len(fds))
    if why:
        for fd in fds:
            os.close(fd)
        print(f"declined `fedhet {' '.join(request['argv'][:1])}` in {request['cwd']}: {why}; "
              "it runs in its own process (imports torch itself)", flush=True)
        conn.sendall(struct.pack(">i", DECLINED))
        return
    worker = os.fork()
    if worker == 0:
        conn.close()
        os._exit(_worker(request, fds))
    for fd in fds:
        os.close(fd)
    poller = select.poll()
    poller.register(conn, select.POLLIN | select.POLLHUP)
    while True:
        pid, status = os.waitpid(worker, os.WNOHANG)
        if pid:
            code = os.waitstatus_to_exitcode(status)
            conn.sendall(struct.pack(">i", code if code >= 0 else 128 - code))
            return
        if poller.poll(200) and not conn.recv(1):  # the job was killed
            os.kill(worker, signal.SIGTERM)
            if not _reaped_within(worker, seconds=5.0):
                os.kill(worker, signal.SIGKILL)
                os.waitpid(worker, 0)
            return


def _reaped_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return True
        time.sleep(0.05)
    return False


def serve(path: str, watch_pid: int | None = None) -> None:
    """Serve commands on the UNIX socket `path` until `watch_pid` (the Snakemake process)
    exits or the server is terminated."""
    _preload()
    started = fingerprint()
    partial = f"{path}.{os.getpid()}.tmp"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(partial)
    os.replace(partial, path)  # clients see the socket only once it accepts
    server.listen(64)
    server.settimeout(1.0)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    handlers: set[int] = set()
    try:
        while not stop:
            for pid in list(handlers):
                if os.waitpid(pid, os.WNOHANG)[0]:
                    handlers.discard(pid)
            if watch_pid is not None and not pid_alive(watch_pid):
                break
            try:
                conn, _ = server.accept()
            except (socket.timeout, InterruptedError):
                continue
            pid = os.fork()
            if pid == 0:
                server.close()
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                code = 0
                try:
                    _handle(conn, started)
                except BaseException:  # noqa: BLE001
                    traceback.print_exc()
                    code = 1
                os._exit(code)
            conn.close()
            handlers.add(pid)
    finally:
        server.close()
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedhet.forkserver", description=__doc__)
    parser.add_argument("--socket", required=True, help="UNIX socket path to serve on")
    parser.add_argument("--watch-pid", type=int, help="exit when this process has exited")
    args = parser.parse_args(argv)
    serve(args.socket, args.watch_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
