"""A local fork server: `fedhet` commands of one Snakemake run start from a process that has
already imported torch, instead of importing it again (about 1.5 CPU-seconds per job, a fifth
of a demo training job). The workflow's table and figure scripts hand themselves to it as
`fedhet run-script` (`fedhet.local.protocol.run_script_on_server`): pandas, matplotlib and
seaborn are imported there already (a demo figure job's 3.9 s become about 1.5 s).

The workflow starts `python -m fedhet.local.server` when it runs jobs on this machine
(`fedhet.local.launcher.start_server`) and sets `FEDHET_FORKSERVER` to `<server pid>:<socket>`
for the jobs. A `fedhet` command that finds the variable checks that the socket is served by that
pid as its own user, sends its arguments, working directory, environment and its stdout/stderr
to the server and waits; the server forks a worker that runs the command exactly as
`fedhet.cli.main` would in a fresh process (same code, same settings: the numbers do not
change) with the job's whole environment, thread count and output files, and what else its
process would have inherited (umask, resource limits, niceness, CPUs, blocked and ignored
signals: `fedhet.local.jobstate`), and returns its exit status.

A worker never outlives its job (`fedhet.local.forkjob`, `fedhet.local.lifeline`): it leads a
process group of its own, and when the job is killed (its client goes away) the handler ends
that group; when the handler itself ends, a guard process in the group kills it (and on Linux
the kernel kills the worker). A client whose server went away runs the command itself, but
only once it has ended what is left of the worker, which it knows from the server before the
job begins: two copies of one job never run at once.

The command runs in its own process instead, and says why on stderr, when there is no server,
when the socket is not the server's, when the server runs another installation or Python, when
a source file of fedhet or an external method package changed after the server started (it
would run stale code; for the packages, the server compares `fedhet.external.installed()` now
with its value at the start: one installed, removed, upgraded or edited), when the worker could
not take on the job's limits, priority or CPUs, or when as many jobs as Snakemake runs at once
already run on it.

Only its own user reaches it: the socket lives in a directory of mode 0700 with an
unpredictable name that the server creates (and removes when it stops, through descriptors:
only what it made, `fedhet.local.sockdir`), bound with umask 077, and the server drops any
connection whose peer (as the kernel says) runs as another uid. On a system where it cannot
ask the kernel who connects, it does not start.

Protocol (one connection per command): the client sends a 4-byte big-endian length (at most
`MAX_REQUEST`) and a JSON request {argv, cwd, env, python, package, fingerprint, state}, with
its stdout and stderr attached (SCM_RIGHTS), all within `REQUEST_SECONDS`; the server answers
with -1001 (`RUNNING`), the worker's pid (4 bytes) and start time (8 bytes) once it has forked
it, then with a 4-byte big-endian signed exit status; or with -1000 when it declines the
command, followed by a 4-byte length and the reason (UTF-8).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from types import ModuleType

from fedhet import external
from fedhet.atomic import pid_alive
from fedhet.local import forkjob, jobstate, sockdir
from fedhet.local.peercred import Peer, Unavailable, check_available, peer
from fedhet.local.protocol import DECLINED, MAX_REQUEST, PACKAGE, fingerprint

REQUEST_SECONDS = 60.0  # a client that has connected sends its whole request within this
FULL_WAIT_SECONDS = 2.0  # at the cap, how long a new job waits for a finished job's handler

# ----------------------------------------------------------------------------- server


def _preload() -> None:
    """Import what a job imports: torch, the engine, every model and fedhet's own methods (the
    code of a method of another package is imported by each job that uses it: a failing import
    must not stop the server). Also the modules torch imports on first use in the jobs that
    need them: `torch.use_deterministic_algorithms`, which a run in the deterministic mode
    calls (`modes.set_deterministic`), imports the compiler's config (with torch._dynamo, ~900
    modules, about 3 s of a job on a busy CPU core), and a run's first optimizer
    torch._dynamo; and scikit-learn's digits, which the digit stand-ins read. For the workflow's
    table and figure scripts (`fedhet run-script`): Snakemake's script module, which their
    preamble imports, pandas, matplotlib (Agg, as they set it) and seaborn, and fedhet's table
    and figure helpers. A module that cannot be imported is left to the jobs (`_import_ahead`)."""
    for name in ("torch", "torch._dynamo", "torch._inductor.config", "sklearn.datasets"):
        _import_ahead(name)
    matplotlib = _import_ahead("matplotlib")
    if matplotlib is not None:
        matplotlib.use("Agg")
    for name in ("matplotlib.pyplot", "pandas", "seaborn", "snakemake.script",
                 "fedhet.leaderboard.rows", "fedhet.leaderboard.ranking",
                 "fedhet.figures.commands", "fedhet.figures.footnote", "fedhet.figures.labels",
                 "fedhet.figures.legends", "fedhet.figures.titles", "fedhet.tables",
                 "fedhet.tables.scorecard"):
        _import_ahead(name)

    import fedhet.cli  # noqa: F401
    import fedhet.train  # noqa: F401
    from fedhet import catalog
    from fedhet.models import MODELS

    for name in MODELS.names():
        MODELS.get(name)
    for kind in ("algorithm", "plugin"):
        for name in catalog.names(kind):
            if catalog.method(name).implemented and catalog.package(name) is None:
                catalog.implementation(name)


def _import_ahead(name: str) -> ModuleType | None:
    """Import `name` for the jobs. Where it cannot be imported (Snakemake's script module on a
    machine without Snakemake, say), the log says so and the server serves all the same: a job
    that needs the module imports it itself, and fails as it would in its own process."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        print(f"not imported ahead: {name} ({type(err).__name__}: {err}); the jobs that need "
              "it import it themselves", flush=True)
        return None


def _cuda_started() -> bool:
    """Whether this process, or the server it was forked from, has initialised CUDA: a
    forked worker could not use it (its first CUDA call fails), so none is forked then."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    return cuda is not None and (cuda.is_initialized() or cuda._is_in_bad_fork())


def _decline_reason(request: dict, started: float, nfds: int) -> str | None:
    """Why the server must not run `request` (None when it can): another Python or another
    copy of fedhet would run other code, sources edited after the start stale code, a worker
    forked after CUDA started could not use the GPU, and one that cannot take on the job's
    limits, priority or CPUs would not run it as its own process would."""
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
    return jobstate.unmet(request["state"])


def _methods_changed(methods: str) -> str | None:
    """Why the server must not run a job when the external method packages on disk
    (`fedhet.external.installed()`, read now) are not those it started with (`methods`): the
    declarations it imported then would be stale; None when they are the same. Read here, in
    the job's handler, rather than by the job's client: the server has importlib.metadata
    loaded already, so each job pays only for the scan."""
    if external.installed() == methods:
        return None
    return ("an external method package changed after the server started (one was installed, "
            "removed, upgraded or edited)")


def _decline(conn: socket.socket, job: str, why: str) -> None:
    """Log why `job` is not run here and tell its client."""
    print(f"declined {job}: {why}; it runs in its own process (makes its own imports)",
          flush=True)
    reason = why.encode()
    try:
        conn.sendall(struct.pack(">iI", DECLINED, len(reason)) + reason)
    except OSError:
        pass  # the client went away


def _recv_by(conn: socket.socket, n: int, deadline: float) -> bytes:
    """Exactly `n` bytes from `conn`, all of them before `deadline` (TimeoutError otherwise;
    ConnectionError when the client closes first)."""
    data = bytearray()
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        conn.settimeout(left)
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError
        data += chunk
    return bytes(data)


# the fields of a request and their types
_FIELDS = {"argv": list, "cwd": str, "env": dict, "python": str, "package": str,
           "fingerprint": (int, float), "state": dict}


def _malformed(request: object) -> str | None:
    """What is wrong with a decoded request (None when it has the fields a client sends)."""
    if not isinstance(request, dict):
        return "it is not a JSON object"
    for name, kind in _FIELDS.items():
        if not isinstance(request.get(name), kind):
            return f"its {name!r} is missing or of the wrong type"
    if not all(isinstance(a, str) for a in request["argv"]):
        return "its 'argv' holds more than strings"
    if not all(isinstance(v, str) for v in request["env"].values()):
        return "its 'env' holds more than strings"
    return jobstate.malformed(request["state"])


def _read_request(conn: socket.socket, job: str) -> tuple[dict | None, list[int]]:
    """The request on `conn` and the files sent with it, the whole of it within
    `REQUEST_SECONDS`; (None, []) when the client went away, was too slow or sent something
    else than a request (said in the log; a request over the size cap is declined)."""
    deadline = time.monotonic() + REQUEST_SECONDS
    fds: list[int] = []
    try:
        conn.settimeout(REQUEST_SECONDS)
        head, fds, _, _ = socket.recv_fds(conn, 65536, 2)
        if not head:
            raise ConnectionError
        if len(head) < 4:
            head += _recv_by(conn, 4 - len(head), deadline)
        (length,) = struct.unpack(">I", head[:4])
        if length > MAX_REQUEST:
            _decline(conn, job, f"its request is {length} bytes, over the cap of {MAX_REQUEST}")
            raise ConnectionAbortedError
        body = head[4:]
        if len(body) < length:
            body += _recv_by(conn, length - len(body), deadline)
        request = json.loads(body)
        why = _malformed(request)
        if why:
            _decline(conn, job, f"its request is not one of fedhet's: {why}")
            raise ConnectionAbortedError
    except (OSError, ValueError, RecursionError) as err:
        for fd in fds:
            os.close(fd)
        if isinstance(err, TimeoutError):
            print(f"dropped {job}: the whole request did not arrive within "
                  f"{REQUEST_SECONDS:.0f} s", flush=True)
        elif not isinstance(err, OSError):
            _decline(conn, job, f"its request is not JSON ({type(err).__name__}: {err})")
        return None, []
    conn.settimeout(None)
    return request, fds


def _handle(conn: socket.socket, started: float, methods: str, client: Peer) -> None:
    """In a handler process: check the request, fork its worker, wait for the worker or for
    the client to go away (then end the worker's process group), send the exit status."""
    request, fds = _read_request(conn, f"a request of pid {client.pid}")
    if request is None:
        return
    job = f"`fedhet {' '.join(request['argv'][:1])}` (pid {client.pid}) in {request['cwd']}"
    why = _decline_reason(request, started, len(fds)) or _methods_changed(methods)
    if why:
        for fd in fds:
            os.close(fd)
        _decline(conn, job, why)
        return
    began = time.monotonic()
    running = forkjob.start(conn, request, fds)
    if running is None:
        print(f"stopped {job} before it began: its client went away", flush=True)
        return
    poller = select.poll()
    poller.register(conn, select.POLLIN | select.POLLHUP)
    while True:
        pid, status = os.waitpid(running.worker, os.WNOHANG)
        if pid:
            running.finish()
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else 128 - code
            print(f"ran {job}: exit {code} after {time.monotonic() - began:.1f} s", flush=True)
            try:
                conn.sendall(struct.pack(">i", code))
            except OSError:
                print(f"could not tell the client of {job} its exit status: it went away",
                      flush=True)
            return
        if poller.poll(200) and not conn.recv(1):  # the job was killed
            running.stop()
            print(f"stopped {job}: its client went away", flush=True)
            return


def _reap(handlers: set[int]) -> None:
    for pid in list(handlers):
        if os.waitpid(pid, os.WNOHANG)[0]:
            handlers.discard(pid)


def _room(handlers: set[int], max_jobs: int) -> bool:
    """Whether another handler may start: fewer than `max_jobs` run, once those that answered
    their job have had `FULL_WAIT_SECONDS` to exit (Snakemake may start the next job first)."""
    deadline = time.monotonic() + FULL_WAIT_SECONDS
    _reap(handlers)
    while len(handlers) >= max_jobs and time.monotonic() < deadline:
        time.sleep(0.02)
        _reap(handlers)
    return len(handlers) < max_jobs


def _admit(conn: socket.socket, handlers: set[int], max_jobs: int) -> Peer | None:
    """The client on `conn` when the server takes its job; None when the connection is dropped
    (another user, or no way to tell who it is) or the job declined (the server is full)."""
    try:
        client = peer(conn)
    except OSError as err:
        print(f"dropped a connection: cannot tell who made it ({err.strerror or err})",
              flush=True)
        return None
    if client.uid != os.getuid():
        print(f"refused a connection from uid {client.uid} (pid {client.pid}): only uid "
              f"{os.getuid()} may use this server", flush=True)
        return None
    if not _room(handlers, max_jobs):
        _decline(conn, f"the job of pid {client.pid}",
                 f"the fork server already runs {len(handlers)} job(s), as many as Snakemake "
                 "runs at once")
        return None
    return client


def _serve_on(server: socket.socket, directory: sockdir.PrivateDir, started: float,
              methods: str, max_jobs: int, watch_pid: int | None, stop: list) -> None:
    """Accept jobs on the listening `server` (in `directory`) until `watch_pid` exits or
    `stop` fills."""
    server.settimeout(1.0)
    handlers: set[int] = set()
    while not stop:
        _reap(handlers)
        if watch_pid is not None and not pid_alive(watch_pid):
            break
        try:
            conn, _ = server.accept()
        except (socket.timeout, InterruptedError):
            continue
        client = _admit(conn, handlers, max_jobs)
        if client is None:
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            server.close()
            directory.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            code = 0
            try:
                _handle(conn, started, methods, client)
            except BaseException:  # noqa: BLE001
                traceback.print_exc()
                code = 1
            os._exit(code)
        conn.close()
        handlers.add(pid)


class _Stopped(Exception):
    """SIGTERM arrived while the server imported what its jobs import."""


def _preload_unless_stopped(stop: list) -> None:
    """`_preload`, cut short by SIGTERM (`_Stopped`): a run that ends before the imports do
    (its jobs never asked the server) does not wait for them."""
    if stop:
        raise _Stopped

    def stop_at_once(*_) -> None:
        stop.append(True)
        raise _Stopped

    signal.signal(signal.SIGTERM, stop_at_once)
    try:
        _preload()
    finally:
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    if stop:
        raise _Stopped


def serve(max_jobs: int, ready_fd: int | None = None, watch_pid: int | None = None) -> int:
    """Serve at most `max_jobs` commands at once on a socket in a new private directory,
    written with a newline to the file descriptor `ready_fd` once it accepts, until
    `watch_pid` (the Snakemake process) exits or the server is terminated. Exit status 1
    (and why, on stdout) where the kernel cannot say who connects."""
    try:
        check_available()
    except Unavailable as err:
        print(f"fork server not started: it could not check who connects ({err}); every "
              "job imports torch itself", flush=True)
        return 1
    # read before the imports: a source edited while they run is then newer than the start
    started, methods = fingerprint(), external.installed()
    stop = []  # from here on SIGTERM stops the loop, which removes the socket and directory
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    try:
        directory = sockdir.make(tempfile.gettempdir(), "fedhet-forkserver-")
    except OSError as err:
        print(f"fork server not started: cannot make its directory in {tempfile.gettempdir()} "
              f"({err.strerror or err}); set TMPDIR to a directory of yours", flush=True)
        return 1
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sockdir.bind(server, directory)
        server.listen(64)
        path = directory.socket_path
        print(f"serving on {path} (pid {os.getpid()}, uid {os.getuid()}, at most {max_jobs} "
              "jobs at once)", flush=True)
        if ready_fd is not None:
            os.write(ready_fd, f"{path}\n".encode())
            os.close(ready_fd)
        # the imports come after the address is told, so that Snakemake goes on building its
        # DAG meanwhile, and a short run whose jobs never ask the server ends it before they
        # are done; a job that connects sooner waits in the listen queue
        _preload_unless_stopped(stop)
        _serve_on(server, directory, started, methods, max_jobs, watch_pid, stop)
    except _Stopped:
        print("stopped while importing", flush=True)
    finally:
        server.close()
        for left in sockdir.remove(directory):
            print(left, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedhet.local.server", description=__doc__)
    parser.add_argument("--max-jobs", type=int, required=True,
                        help="jobs served at once (no fewer than Snakemake runs at once)")
    parser.add_argument("--ready-fd", type=int,
                        help="file descriptor to write the socket's path to once it accepts")
    parser.add_argument("--watch-pid", type=int, help="exit when this process has exited")
    args = parser.parse_args(argv)
    if args.max_jobs < 1:
        parser.error(f"--max-jobs is {args.max_jobs}; give 1 or more")
    return serve(args.max_jobs, args.ready_fd, args.watch_pid)


if __name__ == "__main__":
    sys.exit(main())
