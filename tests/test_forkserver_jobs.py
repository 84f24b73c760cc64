"""The fork server runs a job as its own process would: its worker and what that starts end
with the job's handler or client (killed, Ctrl-C), a client whose server went away runs the
job itself only once the worker is gone (never two copies at once), the job keeps its
client's umask, limits, niceness and signals, and the server's requests and cleanup stand up
to clients that misbehave and a directory swapped for a link. Real servers, CPU only."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fedhet.local import launcher, protocol
from test_forkserver import start, stop, wait_for

# A workflow script handed to the server: it holds a lock while it runs (a second copy at the
# same time records "overlap" and fails), starts a child process, writes out.txt line by line.
JOB = textwrap.dedent("""
    import fcntl, os, subprocess, sys, time
    from pathlib import Path
    from fedhet.local.protocol import run_script_on_server

    run_script_on_server(sys.argv[0])
    here = Path(__file__).parent
    def mark(*what):
        with open(here / "markers", "a") as fh:
            fh.write(" ".join(map(str, (*what, os.getpid()))) + "\\n")
    lock = open(here / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        mark("overlap")
        sys.exit(9)
    mark("start")
    child = subprocess.Popen(["sleep", "600"])
    mark("child", child.pid)
    with open(here / "out.txt", "w") as out:
        for i in range(int(os.environ["STEPS"])):
            out.write(f"line {i}\\n")
            out.flush()
            time.sleep(0.1)
    child.kill()
    child.wait()
    mark("end")
    print("a whole run in", os.getpid(), flush=True)
""")

# A script that reports what its process inherited, and whether the server ran it.
STATE = textwrap.dedent("""
    import json, os, resource, signal, sys
    from pathlib import Path
    from fedhet.atomic import write_text
    from fedhet.local.protocol import run_script_on_server

    run_script_on_server(sys.argv[0])
    here = Path(__file__).parent
    open(here / "plain.txt", "w").close()
    write_text(here / "atomic.txt", "x")
    print(json.dumps({
        "served": "seaborn" in sys.modules,
        "modes": [oct(os.stat(here / n).st_mode & 0o777) for n in ("plain.txt", "atomic.txt")],
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "hup_ignored": signal.getsignal(signal.SIGHUP) == signal.SIG_IGN,
        "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    }))
""")


@pytest.fixture()
def served(tmp_path):
    """(address, log) of a running server."""
    server, log = start(tmp_path)
    yield server.address, log
    stop(server)


def script(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job" / "script.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def run_job(tmp_path: Path, address: str | None, steps: int, **popen) -> subprocess.Popen:
    """The JOB script through the server at `address`, its output in job/job.log."""
    env = {**os.environ, "STEPS": str(steps)}
    env.pop(protocol.ENV, None)
    if address is not None:
        env[protocol.ENV] = address
    path = script(tmp_path, JOB)
    with open(path.parent / "job.log", "w") as log:
        return subprocess.Popen([sys.executable, str(path)], env=env, stdout=log,
                                stderr=subprocess.STDOUT, **popen)


def as_from_a_terminal() -> None:
    """A child's SIGINT handled by default, as a job started from a terminal has it: a test run
    started in the background of a script inherits it ignored, where Ctrl-C would mean nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def markers(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "job" / "markers"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def served_copy(tmp_path: Path, client: int) -> tuple[int, int]:
    """(worker, its child) once the job has started its child on the server."""
    def started() -> list[list[str]]:
        return [m for m in markers(tmp_path) if m[0] == "child" and int(m[2]) != client]

    wait_for(started, "the job never started on the server")
    _, child, worker = started()[0]
    return int(worker), int(child)


def stat_fields(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def whole_output(steps: int) -> str:
    return "".join(f"line {i}\n" for i in range(steps))


# ----------------------------------------------------------------------------- one copy


def test_a_killed_handler_never_leaves_two_copies_running(tmp_path, served):
    """kill -9 of a job's handler mid-job: its worker and the worker's child end, and the
    client runs the job itself only then; the outputs are one whole run's."""
    address, _ = served
    client = run_job(tmp_path, address, steps=30)
    try:
        worker, child = served_copy(tmp_path, client.pid)
        os.kill(int(stat_fields(worker)[1]), signal.SIGKILL)  # the handler: the worker's parent
        assert client.wait(timeout=120) == 0, (tmp_path / "job" / "job.log").read_text()
    finally:
        client.kill()
    assert [m[0] for m in markers(tmp_path)] == ["start", "child", "start", "child", "end"]
    assert {m[-1] for m in markers(tmp_path)[2:]} == {str(client.pid)}
    assert not running(worker) and not running(child)
    assert (tmp_path / "job" / "out.txt").read_text() == whole_output(30)
    log = (tmp_path / "job" / "job.log").read_text()
    assert f"while its worker (pid {worker}) ran this command, which has ended" in log
    assert log.endswith(f"a whole run in {client.pid}\n")


def test_a_worker_dies_with_its_handler_while_its_client_cannot_act(tmp_path, served):
    """The handler killed while its client is stopped: the worker's group (the worker and its
    child) ends without the client's help."""
    address, _ = served
    client = run_job(tmp_path, address, steps=10000)
    try:
        worker, child = served_copy(tmp_path, client.pid)
        os.kill(client.pid, signal.SIGSTOP)
        os.kill(int(stat_fields(worker)[1]), signal.SIGKILL)
        wait_for(lambda: not running(worker) and not running(child),
                 "the worker or its child outlived the handler", seconds=10)
    finally:
        client.kill()
        client.wait()


def test_ctrl_c_ends_a_served_job_and_what_it_started(tmp_path, served):
    """SIGINT to the process group of a client (Ctrl-C in its terminal): nothing of the job
    runs on a few seconds later, as with the job in its own process."""
    address, log = served
    client = run_job(tmp_path, address, steps=10000, start_new_session=True,
                     preexec_fn=as_from_a_terminal)
    try:
        worker, child = served_copy(tmp_path, client.pid)
        os.killpg(client.pid, signal.SIGINT)
        client.wait(timeout=30)
        wait_for(lambda: not running(worker) and not running(child),
                 "the worker or its child outlived the interrupted job", seconds=10)
        wait_for(lambda: "its client went away" in log.read_text(), "the server did not say so")
    finally:
        client.kill()
        client.wait()


# ----------------------------------------------------------------------------- what it inherits


def test_a_served_job_keeps_its_umask_limits_niceness_and_signals(tmp_path):
    """A server started under umask 022 runs a client's job with the client's umask 077 (its
    files 0600), resource limits, niceness, ignored SIGHUP and blocked SIGUSR1, as the job has
    in its own process."""
    old = os.umask(0o022)
    try:
        server, _ = start(tmp_path)
    finally:
        os.umask(old)

    def client_state() -> None:
        os.umask(0o077)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))
        os.nice(1)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])

    path = script(tmp_path, STATE)

    def run(address: str | None) -> dict:
        env = {k: v for k, v in os.environ.items() if k != protocol.ENV}
        if address is not None:
            env[protocol.ENV] = address
        for name in ("plain.txt", "atomic.txt"):
            (path.parent / name).unlink(missing_ok=True)
        done = subprocess.run([sys.executable, str(path)], env=env, capture_output=True,
                              text=True, preexec_fn=client_state, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    try:
        served, alone = run(server.address), run(None)
    finally:
        stop(server)
    assert served.pop("served") and not alone.pop("served")
    assert served["modes"] == ["0o600", "0o600"]
    assert served == alone


# ----------------------------------------------------------------------------- the server


def test_a_directory_swapped_for_a_link_is_not_followed_at_cleanup(tmp_path, monkeypatch):
    """Another user renames the server's directory in a shared, non-sticky TMPDIR and puts a
    link to the victim's directory in its place: the server removes nothing there, says what
    it left, and logs no traceback."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    monkeypatch.setenv("TMPDIR", str(shared))
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "socket").write_text("the victim's")
    server, log = start(tmp_path)
    directory = Path(protocol.parse_address(server.address)[1]).parent
    moved = directory.with_name(directory.name + "-moved")
    directory.rename(moved)
    directory.symlink_to(victim)
    launcher.stop_server(server.process)
    assert (victim / "socket").read_text() == "the victim's"
    assert not (moved / "socket").exists()  # its own socket, found through its descriptor
    text = log.read_text()
    assert f"left {directory} in place: it is not what the server made there" in text
    assert "Traceback" not in text


def test_clients_that_send_nothing_trickle_or_garble_leave_no_traceback(tmp_path):
    """The whole request must arrive within the deadline (2 s here): a silent client and one
    that sends its request a byte at a time, each byte well within the deadline, are dropped by
    then; garbage is declined; no traceback."""
    quick = ("import sys, fedhet.local.server as s; s.REQUEST_SECONDS = 2.0; "
             "sys.exit(s.main(sys.argv[1:]))")
    server, log = start(tmp_path, command=[sys.executable, "-c", quick])
    path = protocol.parse_address(server.address)[1]
    try:
        with socket.socket(socket.AF_UNIX) as silent, socket.socket(socket.AF_UNIX) as trickle:
            silent.connect(path)
            trickle.connect(path)
            trickle.sendall(struct.pack(">I", 1000))  # then a byte of the 1000 each 0.25 s
            trickle.settimeout(0.25)
            dropped = False
            for _ in range(40):  # 10 s
                try:
                    trickle.send(b" ")
                    dropped = trickle.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    dropped = True
                if dropped:
                    break
            assert dropped, "a trickling client kept its connection past the deadline"
            silent.settimeout(10)
            assert silent.recv(1) == b""
        with socket.socket(socket.AF_UNIX) as garbled:
            garbled.connect(path)
            socket.send_fds(garbled, [b"\0\0\0\x05{\"a\":"], [1, 2])
            garbled.settimeout(10)
            code = int.from_bytes(protocol.recv_exactly(garbled, 4), "big", signed=True)
            assert code == protocol.DECLINED
    finally:
        stop(server)
    text = log.read_text()
    assert text.count("the whole request did not arrive within 2 s") == 2
    assert "its request is not JSON" in text
    assert "Traceback" not in text


# ----------------------------------------------------------------------------- a workflow run


def processes_in(folder: Path) -> list[int]:
    """Processes working in `folder` (a workflow run's Snakemake, its fork server, handlers,
    workers and their children all do), this one left out."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cwd = Path(os.readlink(entry / "cwd"))
            except OSError:
                continue
            if cwd == folder or folder in cwd.parents:
                found.append(int(entry.name))
    return found


@pytest.mark.workflow
def test_ctrl_c_on_a_workflow_run_leaves_nothing_of_it_running(tmp_path):
    """Ctrl-C on Snakemake (SIGINT to its terminal's process group) while a training job runs
    on the workflow's fork server: within seconds no process of the run is left, no worker
    training on, as when every job has a process of its own."""
    from fedhet.experiments import load_experiment

    from test_workflow import copy_workflow

    copy_workflow(tmp_path)
    exp = load_experiment({"scale": "demo"}, tmp_path)
    run = max(exp.runs, key=lambda rid: exp.runs[rid]["training"]["rounds"])  # the longest
    log = tmp_path / "results" / "demo" / "logs" / "train" / f"{run}.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop(protocol.ENV, None)
    snakemake = subprocess.Popen([sys.executable, "-m", "snakemake", "--cores", "2",
                                  f"results/demo/runs/{run}/final.json"], cwd=tmp_path, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True, preexec_fn=as_from_a_terminal)
    try:
        wait_for(lambda: log.exists() and " round 1/" in log.read_text(),
                 "the training job never trained a round", seconds=900)
        os.killpg(snakemake.pid, signal.SIGINT)
        output = snakemake.communicate(timeout=120)[0]
        assert snakemake.returncode != 0, output
        served = (tmp_path / ".snakemake" / "log" / "fedhet-forkserver.log").read_text()
        assert "stopped `fedhet train" in served, served  # it ran on the server
        wait_for(lambda: not processes_in(tmp_path), "processes of the interrupted run are left: "
                 "a worker outlived its job", seconds=15)
        assert not (tmp_path / "results" / "demo" / "runs" / run / "final.json").exists()
    finally:
        for pid in processes_in(tmp_path):
            os.kill(pid, signal.SIGKILL)
        snakemake.wait()
