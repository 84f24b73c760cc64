"""The fork server: a command run through it behaves as in its own process (results, exit
status, output), a killed job's worker dies, and stale or foreign servers are not used."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import fedhet.forkclient as forkclient
from tiny_runs import tiny_run


def server_processes(path: Path) -> list[int]:
    """Pids of the server, its handlers and workers (forks share the server's command line)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "fedhet.forkserver" in cmdline and str(path) in cmdline:
                pids.append(int(entry.name))
    return pids


@pytest.fixture()
def server(tmp_path):
    path = tmp_path / "fs.sock"
    proc = subprocess.Popen([sys.executable, "-m", "fedhet.forkserver", "--socket", str(path)])
    deadline = time.monotonic() + 60
    while not path.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.1)
    yield path
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert not path.exists()


def fedhet(args: list[str], socket: Path | None, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop(forkclient.ENV, None)
    if socket is not None:
        env[forkclient.ENV] = str(socket)
    return subprocess.run([sys.executable, "-m", "fedhet.cli", *args], env=env,
                          capture_output=True, text=True, **kw)


def test_a_run_through_the_server_is_the_run_in_its_own_process(tmp_path, server):
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run))
    served = fedhet(["train", "--config", str(config), "--out", str(tmp_path / "a")], server)
    alone = fedhet(["train", "--config", str(config), "--out", str(tmp_path / "b")], None)
    assert served.returncode == alone.returncode == 0, served.stderr
    assert "running in this process" not in served.stderr
    assert "round 2/2" in served.stderr  # the job's output reaches the job's stderr

    def results(d):
        final = json.loads((tmp_path / d / "final.json").read_text())
        final.pop("mean_step_seconds")
        rows = [json.loads(line) for line in (tmp_path / d / "metrics.jsonl").open()]
        return final, [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]

    assert results("a") == results("b")
    bad = fedhet(["train", "--config", str(tmp_path / "missing.yaml"), "--out", "x"], server)
    assert bad.returncode == 2 and "missing.yaml" in bad.stderr


def test_a_killed_job_takes_its_worker_with_it(tmp_path, server):
    run = tiny_run(tmp_path / "data", tmp_path / "parts")
    run["training"]["rounds"] = 100000
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run))
    env = {**os.environ, forkclient.ENV: str(server)}
    job = subprocess.Popen([sys.executable, "-m", "fedhet.cli", "train", "--config", str(config),
                            "--out", str(tmp_path / "out")], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(server_processes(server)) < 3:  # server, handler, worker
        assert time.monotonic() < deadline, "the job never started on the server"
        time.sleep(0.1)
    job.kill()
    job.wait()
    deadline = time.monotonic() + 20
    while len(server_processes(server)) > 1:
        assert time.monotonic() < deadline, "the worker outlived its job"
        time.sleep(0.1)


def test_no_server_or_a_stale_one_runs_the_command_here(tmp_path, server, monkeypatch, capfd):
    monkeypatch.setenv(forkclient.ENV, str(tmp_path / "none.sock"))
    assert forkclient.run_remote(["run-id"]) is None
    assert "not reachable" in capfd.readouterr().err
    monkeypatch.setenv(forkclient.ENV, str(server))
    monkeypatch.setattr(forkclient, "fingerprint", lambda: time.time() + 3600)  # edited since
    assert forkclient.run_remote(["run-id"]) is None
    assert "older sources" in capfd.readouterr().err


def test_the_server_names_why_it_declines():
    from fedhet.forkserver import _decline_reason

    ours = {"python": os.path.realpath(sys.executable), "package": str(forkclient.PACKAGE),
            "fingerprint": 1.0}
    assert _decline_reason(ours, started=2.0, nfds=2) is None
    assert "the job's Python is /opt/py" in _decline_reason({**ours, "python": "/opt/py"}, 2.0, 2)
    assert "imports fedhet from /elsewhere" in _decline_reason({**ours, "package": "/elsewhere"},
                                                                 2.0, 2)
    assert "changed after the server started" in _decline_reason(ours, started=0.5, nfds=2)


def test_a_fedhet_command_of_another_python_is_found_before_any_job(tmp_path, monkeypatch):
    def command(first_line: str) -> None:
        script = tmp_path / "fedhet"
        script.write_text(f"{first_line}\nimport sys\n")
        script.chmod(0o755)

    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    command(f"#!{sys.executable}")
    assert forkclient.command_mismatch() is None
    command("#!/opt/other-venv/bin/python")
    assert "runs /opt/other-venv/bin/python" in forkclient.command_mismatch()
    command("#!/usr/bin/env bash")  # a shim: nothing to compare
    assert forkclient.command_mismatch() is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert "not on PATH" in forkclient.command_mismatch()
