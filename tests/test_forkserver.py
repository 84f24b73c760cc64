"""The fork server: a command run through it behaves as in its own process (results, exit
status, output), a killed job's worker dies, stale or foreign servers are not used, and only its
own user reaches it (private socket, peer credentials, capped requests and jobs)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from fedhet.local import launcher, peercred, protocol, sockdir
from tiny_runs import tiny_run

ROOT = Path(__file__).resolve().parents[1]
# what a client says on stderr when it runs its command itself (fedhet.local.protocol)
OWN_PROCESS = "running this command in its own process"
# The server run with the kernel's answer about each connecting peer shifted to another uid
# (the CI user cannot switch users).
OTHER_UID_PEERS = ("import dataclasses, sys, fedhet.local.server as s; real = s.peer; "
                   "s.peer = lambda c: dataclasses.replace(real(c), uid=real(c).uid + 1); "
                   "sys.exit(s.main(sys.argv[1:]))")


def descendants(pid: int) -> list[int]:
    """`pid` and the processes below it (the server, its handlers and their workers)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat_line.rsplit(")", 1)[1].split()[1])
    found = [pid]
    for child in found:
        found += [p for p, parent in parents.items() if parent == child]
    return [p for p in found if p in parents]


def start(tmp_path: Path, max_jobs: int = 4, command: list[str] | None = None):
    log = tmp_path / "server.log"
    return launcher.start_server(log, max_jobs=max_jobs, command=command), log


def stop(server) -> None:
    path = protocol.parse_address(server.address)[1]
    launcher.stop_server(server.process)
    assert not os.path.exists(os.path.dirname(path)), "the server left its directory behind"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(address, log) of a running server, shared by the tests that leave it serving (a server
    starts in seconds: it imports what the jobs import)."""
    server, log = start(tmp_path_factory.mktemp("served"))
    yield server.address, log
    stop(server)


@pytest.fixture()
def server(served):
    return served[0]


def fedhet(args: list[str], address: str | None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(protocol.ENV, None)
    if address is not None:
        env[protocol.ENV] = address
    return subprocess.run([sys.executable, "-m", "fedhet.cli", *args], env=env,
                          capture_output=True, text=True, **kw)


def long_job(tmp_path: Path, address: str) -> subprocess.Popen:
    """A `fedhet train` through the server that runs until killed."""
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    run["training"]["rounds"] = 100000
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run))
    env = {**os.environ, protocol.ENV: address}
    return subprocess.Popen([sys.executable, "-m", "fedhet.cli", "train", "--config", str(config),
                             "--out", str(tmp_path / "out")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def wait_for(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_run_through_the_server_is_the_run_in_its_own_process(tmp_path, server):
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run))
    served = fedhet(["train", "--config", str(config), "--out", str(tmp_path / "a")], server)
    alone = fedhet(["train", "--config", str(config), "--out", str(tmp_path / "b")], None)
    assert served.returncode == alone.returncode == 0, served.stderr
    assert OWN_PROCESS not in served.stderr
    assert "round 2/2" in served.stderr  # the job's output reaches the job's stderr

    def results(d):
        final = json.loads((tmp_path / d / "final.json").read_text())
        final.pop("mean_step_seconds")
        rows = [json.loads(line) for line in (tmp_path / d / "metrics.jsonl").open()]
        return final, [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]

    assert results("a") == results("b")
    bad = fedhet(["train", "--config", str(tmp_path / "missing.yaml"), "--out", "x"], server)
    assert bad.returncode == 2 and "missing.yaml" in bad.stderr


# The server with its imports held back (a flag file: until it exists, they wait), as a slow
# machine's would be
SLOW_IMPORTS = """
import pathlib, sys, time
import fedhet.local.server as s

flag, real = pathlib.Path(sys.argv.pop(1)), s._preload


def held_back():
    while not flag.exists():
        time.sleep(0.05)
    real()


s._preload = held_back
sys.exit(s.main(sys.argv[1:]))
"""


def test_the_address_comes_before_the_imports_and_a_job_waits_for_them(tmp_path, monkeypatch):
    """The server tells where it listens before it imports what the jobs import (Snakemake goes
    on meanwhile); a job that connects sooner waits for them, then runs on the server."""
    flag = tmp_path / "imports-may-start"
    server, log = start(tmp_path, command=[sys.executable, "-c", SLOW_IMPORTS, str(flag)])
    try:
        assert server.process.poll() is None
        job = subprocess.Popen([sys.executable, "-m", "fedhet.cli", "run-id", "--help"],
                               env={**os.environ, protocol.ENV: server.address},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1)
        assert job.poll() is None, "the job did not wait for the server's imports"
        flag.touch()
        out, err = job.communicate(timeout=120)
        assert job.returncode == 0, err
        assert OWN_PROCESS not in err
        assert "ran `fedhet run-id`" in log.read_text()
    finally:
        stop(server)


def test_a_module_the_server_cannot_import_is_left_to_the_jobs(tmp_path, monkeypatch):
    """On a machine without one of the modules the server imports ahead (Snakemake's, on a GPU
    node that runs `fedhet` alone), the log says so and the server serves the jobs all the
    same: the server does not die after telling its address."""
    blocker = tmp_path / "no-snakemake" / "snakemake"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("no Snakemake here")\n')
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(blocker.parent), os.environ.get("PYTHONPATH")])))
    server, log = start(tmp_path)
    try:
        job = fedhet(["run-id", "--help"], server.address, timeout=300)
        assert job.returncode == 0, job.stderr
        assert OWN_PROCESS not in job.stderr
        said = log.read_text()
        assert "not imported ahead: snakemake.script (ImportError: no Snakemake here)" in said
        assert "ran `fedhet run-id`" in said
    finally:
        stop(server)


def test_a_server_stopped_while_it_imports_ends_at_once_and_leaves_nothing(tmp_path):
    """A run that ends before the server's imports do (its jobs never asked for it) does not
    wait for them: SIGTERM ends the server then, and its directory goes with it."""
    never = tmp_path / "never"
    server, log = start(tmp_path, command=[sys.executable, "-c", SLOW_IMPORTS, str(never)])
    stop(server)  # with the imports held back for good, only SIGTERM can end it
    assert server.process.returncode == 0
    assert "stopped while importing" in log.read_text()


# A workflow script as the workflow's are written: handed to the server first, its stderr then
# pointed at a log file that it closes before it ends.
SCRIPT = """
import os
import sys
from pathlib import Path

from fedhet.local.protocol import run_script_on_server

run_script_on_server(sys.argv[0])
preloaded = "seaborn" in sys.modules  # only the server has imported it before the script
print("to stdout")
print("to stderr", file=sys.stderr)
with open(Path(__file__).with_suffix(".log"), "w") as log:
    sys.stderr = log
    print(f"preloaded {preloaded}, run as {__name__}", file=sys.stderr)
sys.exit(int(os.environ["SCRIPT_EXIT"]))
"""


def test_a_workflow_script_runs_on_the_server_as_it_would_alone(tmp_path, server):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)

    def run(address: str | None, code: int) -> subprocess.CompletedProcess:
        env = {**os.environ, "SCRIPT_EXIT": str(code)}
        env.pop(protocol.ENV, None)
        if address is not None:
            env[protocol.ENV] = address
        return subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True)

    for address, preloaded in ((server, True), (None, False)):
        done = run(address, 0)
        assert done.returncode == 0, done.stderr
        assert (done.stdout, done.stderr) == ("to stdout\n", "to stderr\n")
        log = script.with_suffix(".log").read_text()
        assert log == f"preloaded {preloaded}, run as __main__\n"
        assert run(address, 3).returncode == 3


def test_a_killed_job_takes_its_worker_with_it(tmp_path, server):
    pid = protocol.parse_address(server)[0]
    job = long_job(tmp_path, server)
    wait_for(lambda: len(descendants(pid)) >= 3, "the job never started on the server")
    job.kill()
    job.wait()
    wait_for(lambda: len(descendants(pid)) == 1, "the worker outlived its job", seconds=20)


def test_no_server_or_a_stale_one_runs_the_command_here(tmp_path, server, monkeypatch, capfd):
    monkeypatch.setenv(protocol.ENV, f"{os.getpid()}:{tmp_path / 'none.sock'}")
    assert protocol.run_remote(["run-id"]) is None
    assert "not reachable" in capfd.readouterr().err
    monkeypatch.setenv(protocol.ENV, str(tmp_path / "none.sock"))  # no pid
    assert protocol.run_remote(["run-id"]) is None
    assert "not <server pid>:<socket path>" in capfd.readouterr().err
    monkeypatch.setenv(protocol.ENV, server)
    monkeypatch.setattr(protocol, "fingerprint", lambda: time.time() + 3600)  # edited since
    assert protocol.run_remote(["run-id"]) is None
    err = capfd.readouterr().err
    assert "declined it: a fedhet source file changed after the server started" in err
    assert "another installation" not in err


def test_the_server_names_why_it_declines(monkeypatch):
    from fedhet import external
    from fedhet.local.server import _decline_reason, _methods_changed

    ours = {**protocol.job_request(["run-id"]), "fingerprint": 1.0}  # what a client sends
    assert _decline_reason(ours, started=2.0, nfds=2) is None
    # CUDA started in the server (tests/test_gpu.py starts it for real)
    import torch

    with monkeypatch.context() as m:
        m.setattr(torch.cuda, "is_initialized", lambda: True)
        assert "the server has initialised CUDA" in _decline_reason(ours, 2.0, 2)
    nicer = {**ours["state"], "nice": ours["state"]["nice"] - 1}  # it takes privileges
    assert "the job's niceness is" in _decline_reason({**ours, "state": nicer}, 2.0, 2)
    limits = {**ours["state"]["limits"], "RLIMIT_NOFILE": [1 << 40, 1 << 40]}
    assert "the job's hard RLIMIT_NOFILE is" in _decline_reason(
        {**ours, "state": {**ours["state"], "limits": limits}}, 2.0, 2)
    assert "the job's Python is /opt/py" in _decline_reason({**ours, "python": "/opt/py"}, 2.0, 2)
    assert "imports fedhet from /elsewhere" in _decline_reason({**ours, "package": "/elsewhere"},
                                                                 2.0, 2)
    assert "changed after the server started" in _decline_reason(ours, started=0.5, nfds=2)
    monkeypatch.setattr(external, "installed", lambda: "abc")  # the packages on disk now
    assert _methods_changed("abc") is None
    assert "an external method package changed after the server started" in \
        _methods_changed("abd")


def test_a_fedhet_command_of_another_python_is_found_before_any_job(tmp_path, monkeypatch):
    def command(first_line: str) -> None:
        script = tmp_path / "fedhet"
        script.write_text(f"{first_line}\nimport sys\n")
        script.chmod(0o755)

    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    command(f"#!{sys.executable}")
    assert launcher.command_mismatch() is None
    command("#!/opt/other-venv/bin/python")
    assert "runs /opt/other-venv/bin/python" in launcher.command_mismatch()
    command("#!/usr/bin/env bash")  # a shim: nothing to compare
    assert launcher.command_mismatch() is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "not on PATH" in launcher.command_mismatch()


# ----------------------------------------------------------------------------- who reaches it


def test_the_socket_is_private_whatever_the_umask(tmp_path):
    old = os.umask(0)  # a shared-group cluster's umask: what the server creates must not follow
    try:
        server, _ = start(tmp_path)
    finally:
        os.umask(old)
    try:
        pid, path = protocol.parse_address(server.address)
        assert pid == server.process.pid
        directory = os.lstat(os.path.dirname(path))
        assert stat.S_ISDIR(directory.st_mode) and directory.st_uid == os.getuid()
        assert stat.S_IMODE(directory.st_mode) == 0o700
        assert stat.S_IMODE(os.lstat(path).st_mode) & 0o077 == 0
        assert not os.path.basename(os.path.dirname(path)).endswith(str(os.getpid()))
    finally:
        stop(server)


def test_binding_refuses_an_existing_path(tmp_path):
    directory = sockdir.make(str(tmp_path), "server-")
    planted = Path(directory.socket_path)
    planted.write_text("someone else's")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, pytest.raises(OSError):
        sockdir.bind(sock, directory)
    assert planted.read_text() == "someone else's"
    assert sockdir.remove(directory) == [f"could not remove {directory.path} (Directory not "
                                         "empty)"]
    assert planted.read_text() == "someone else's"


def test_the_kernel_names_the_peer():
    peercred.check_available()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        assert peercred.peer(ours) == peercred.Peer(os.getpid(), os.getuid())


def test_without_a_peer_check_the_server_does_not_start_and_says_why(tmp_path):
    no_check = ("import sys, fedhet.local.server as s, fedhet.local.peercred as p\n"
                "def unavailable(): raise p.Unavailable('this system has none')\n"
                "s.check_available = unavailable\nsys.exit(s.main(sys.argv[1:]))")
    with pytest.raises(launcher.NotStarted, match="exited with status 1"):
        start(tmp_path, command=[sys.executable, "-c", no_check])
    assert "could not check who connects (this system has none)" in (
        tmp_path / "server.log").read_text()


def test_a_socket_served_by_another_process_gets_nothing(tmp_path, server, monkeypatch, capfd):
    """A listener at the address is used only when it is the server's pid: a squatter, even
    of the same user, receives no byte of the request (its environment)."""
    planted = tmp_path / "planted.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as squatter:
        squatter.bind(str(planted))
        squatter.listen(1)
        monkeypatch.setenv(protocol.ENV, f"{protocol.parse_address(server)[0]}:{planted}")
        assert protocol.run_remote(["run-id"]) is None
        conn, _ = squatter.accept()
        conn.settimeout(5)
        with conn:
            assert conn.recv(1024) == b""
    err = capfd.readouterr().err
    assert f"served by pid {os.getpid()} of uid {os.getuid()}, not by the fork server" in err
    assert "nothing was sent to it" in err


def test_a_server_running_as_another_uid_is_not_used(served, monkeypatch, capfd):
    address, log = served
    logged_before = len(log.read_text())
    real = protocol.peer
    monkeypatch.setattr(protocol, "peer", lambda c: peercred.Peer(real(c).pid, real(c).uid + 1))
    monkeypatch.setenv(protocol.ENV, address)
    assert protocol.run_remote(["run-id"]) is None
    assert f"of uid {os.getuid() + 1}, not by the fork server" in capfd.readouterr().err
    logged = log.read_text()[logged_before:]  # what the server logged of this request
    assert "ran `fedhet" not in logged and "declined" not in logged


def test_the_server_drops_a_peer_of_another_uid(tmp_path, monkeypatch, capfd):
    server, log = start(tmp_path, command=[sys.executable, "-c", OTHER_UID_PEERS])
    try:
        monkeypatch.setenv(protocol.ENV, server.address)
        assert protocol.run_remote(["run-id"]) is None
        assert "socket failed (" in capfd.readouterr().err  # dropped unread: a reset
        assert f"refused a connection from uid {os.getuid() + 1}" in log.read_text()
        assert "ran `fedhet" not in log.read_text()
    finally:
        stop(server)


def test_an_oversized_request_is_refused(served, monkeypatch, capfd):
    address, log = served
    path = protocol.parse_address(address)[1]
    size = protocol.MAX_REQUEST + 1
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)  # a server that waits for the announced bytes fails here
        conn.connect(path)
        socket.send_fds(conn, [struct.pack(">I", size)], [1, 2])
        code, length = struct.unpack(">iI", protocol.recv_exactly(conn, 8))
        reason = protocol.recv_exactly(conn, length).decode()
    assert code == protocol.DECLINED
    assert f"its request is {size} bytes, over the cap of {protocol.MAX_REQUEST}" in reason
    assert reason in log.read_text()
    monkeypatch.setattr(protocol, "MAX_REQUEST", 100)  # the client does not send one either
    monkeypatch.setenv(protocol.ENV, address)
    assert protocol.run_remote(["run-id"]) is None
    assert "over the cap of 100" in capfd.readouterr().err


def test_a_job_over_the_cap_runs_in_its_own_process_and_the_log_says_so(tmp_path, monkeypatch,
                                                                         capfd):
    server, log = start(tmp_path, max_jobs=1)
    job = long_job(tmp_path, server.address)
    try:
        wait_for(lambda: len(descendants(server.process.pid)) >= 3, "the job never started")
        monkeypatch.setenv(protocol.ENV, server.address)
        assert protocol.run_remote(["run-id"]) is None
        assert "the fork server already runs 1 job(s), as many as Snakemake runs at once" in (
            capfd.readouterr().err)
        assert (f"declined the job of pid {os.getpid()}: the fork server already runs 1 job(s)"
                in log.read_text())
    finally:
        job.kill()
        job.wait()
        stop(server)


# ----------------------------------------------------------------------------- in the workflow

PLANT = """
import os, socket, sys, tempfile, time
# what the workflow's fork server socket path was: /tmp/fedhet-<uid>-<snakemake pid>.sock
path = os.path.join(tempfile.gettempdir(), f"fedhet-{os.getuid()}-{os.getpid()}.sock")
kind, record = sys.argv[1], sys.argv[2]
if kind == "listener":
    squat = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    squat.bind(path)
    squat.listen(16)
    snakemake = os.getpid()
    if os.fork() == 0:  # records what reaches it until Snakemake (this pid, exec'd) exits
        squat.settimeout(0.5)
        with open(record, "ab", buffering=0) as out:
            while os.getppid() == snakemake:
                try:
                    conn, _ = squat.accept()
                except TimeoutError:
                    continue
                out.write(b"connection: " + conn.recv(200) + b"\\n")
                conn.close()
        os._exit(0)
    squat.close()
else:  # a file in the server's place that it cannot replace (as another user's in /tmp)
    os.mkdir(path)
    open(os.path.join(path, "planted"), "w").close()
os.execv(sys.executable, [sys.executable, "-m", "snakemake", *sys.argv[3:]])
"""


@pytest.mark.workflow
@pytest.mark.parametrize("planted", ["listener", "file"])
def test_what_is_planted_at_the_old_path_is_never_used(tmp_path, planted):
    """A listener, or a file, at the socket path the workflow used to derive from Snakemake's
    pid: the run succeeds and its jobs (real `fedhet` commands) run on the real server."""
    from fedhet.experiments import load_experiment

    from test_workflow import copy_workflow

    copy_workflow(tmp_path)
    exp = load_experiment(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), ROOT)
    target = f"resources/partitions/{sorted(exp.partitions)[0]}.npz"  # prepare-data, partition
    record = tmp_path / "squatter.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop(protocol.ENV, None)
    proc = subprocess.Popen([sys.executable, "-c", PLANT, planted, str(record), "--cores", "2",
                             target], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    old_path = Path(tempfile.gettempdir()) / f"fedhet-{os.getuid()}-{proc.pid}.sock"
    try:
        output = proc.communicate(timeout=1800)[0]
        assert proc.returncode == 0, output
        assert not record.exists() or record.read_text() == ""
        if planted == "file":
            assert (old_path / "planted").is_file()
        logs = "".join(p.read_text() for p in (tmp_path / "resources" / "logs").rglob("*.log"))
        assert "fork server" not in logs, logs  # no job fell back to a process of its own
        served = (tmp_path / ".snakemake" / "log" / "fedhet-forkserver.log").read_text()
        assert "ran `fedhet prepare-data`" in served and "ran `fedhet partition`" in served
    finally:
        proc.kill()
        if old_path.is_dir():
            shutil.rmtree(old_path)
        elif old_path.exists():
            old_path.unlink()
