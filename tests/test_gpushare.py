"""fedhet.local.gpushare: the shares of a workstation's GPUs that local GPU jobs claim. Real
processes claim, hold and get killed; the devices are a fake list (no GPU needed)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from fedhet.local import gpushare
from fedhet.local.gpushare import Plan

SRC = str(Path(__file__).resolve().parents[1] / "src")

# a process that claims its share as a GPU job's `fedhet` command does, writes what it got to
# RECORD (one JSON line when it has it, one when it lets go) and keeps it HOLD seconds
HOLDER = textwrap.dedent("""
    import json, os, sys, time
    from fedhet.local.gpushare import claim_for_command
    claim_for_command(["train"])
    def record(event):
        with open(sys.argv[1], "a") as fh:
            fh.write(json.dumps({"pid": os.getpid(), "event": event, "time": time.time(),
                                 "devices": os.environ["CUDA_VISIBLE_DEVICES"]}) + "\\n")
    record("start")
    time.sleep(float(sys.argv[2]))
    record("end")
""")


def release() -> None:
    """Let go of the shares this test process claimed."""
    while gpushare._HELD:
        os.close(gpushare._HELD.pop())


def plan(tmp_path: Path, devices=("0", "1"), per_device=1, gpus=1) -> Plan:
    return Plan(list(devices), per_device, gpus, str(tmp_path / "shares"))


def holder(tmp_path: Path, p: Plan, hold: float, record: Path | None = None,
           **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC, gpushare.PLAN_ENV: p.to_env()}
    env.pop(gpushare.SLOTS_ENV, None)
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(record or tmp_path / "record.jsonl"), str(hold)],
        env=env, **popen,
    )


def wait_for(predicate, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def started(path: Path) -> list[dict]:
    return [r for r in records(path) if r["event"] == "start"]


def most_at_once(path: Path) -> dict[str, int]:
    """The largest number of holders any device had at one time."""
    events = sorted(records(path), key=lambda r: (r["time"], r["event"] == "start"))
    now: dict[str, int] = {}
    most: dict[str, int] = {}
    for r in events:
        for device in r["devices"].split(","):
            now[device] = now.get(device, 0) + (1 if r["event"] == "start" else -1)
            most[device] = max(most.get(device, 0), now[device])
    return most


# ----------------------------------------------------------------------------- devices


def fake_smi(bindir: Path, gpus: int) -> None:
    bindir.mkdir(exist_ok=True)
    smi = bindir / "nvidia-smi"
    lines = "".join(f"echo 'GPU {i}: Fake GPU (UUID: GPU-fake-{i})'\n" for i in range(gpus))
    smi.write_text(f"#!/bin/sh\n{lines}")
    smi.chmod(0o755)


def test_visible_devices_from_nvidia_smi_and_cuda_visible_devices(tmp_path):
    fake_smi(tmp_path / "bin", 2)
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    assert gpushare.visible_devices(env) == ["0", "1"]
    assert gpushare.visible_devices({**env, "CUDA_VISIBLE_DEVICES": "1,0"}) == ["1", "0"]
    # more entries than GPUs: CUDA stops at the GPUs there are
    assert gpushare.visible_devices({**env, "CUDA_VISIBLE_DEVICES": "0,1,2"}) == ["0", "1"]
    assert gpushare.visible_devices({**env, "CUDA_VISIBLE_DEVICES": ""}) == []
    assert gpushare.visible_devices({**env, "CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert gpushare.visible_devices({"PATH": str(tmp_path / "empty")}) == []  # no nvidia-smi


# ----------------------------------------------------------------------------- claims


def test_claims_spread_over_the_least_busy_devices(tmp_path):
    p = plan(tmp_path, devices=("0", "1"), per_device=2)
    first = holder(tmp_path, p, 30)
    wait_for(lambda: len(started(tmp_path / "record.jsonl")) == 1)
    second = holder(tmp_path, p, 30)
    wait_for(lambda: len(started(tmp_path / "record.jsonl")) == 2)
    try:
        assert sorted(r["devices"] for r in started(tmp_path / "record.jsonl")) == ["0", "1"]
        devices, _ = gpushare.try_claim(p)  # this process: device 0 (both hold one, 0 first)
        assert devices == ["0"]
        assert gpushare.try_claim(p)[0] == ["1"]
        assert gpushare.try_claim(p) is None  # 2 × 2 shares taken
    finally:
        for proc in (first, second):
            proc.kill()
            proc.wait()
        release()


def test_concurrent_jobs_never_exceed_a_devices_share(tmp_path):
    """Seven jobs at once on 2 GPUs × 2 shares: at most two on a GPU at any time, four at
    once in all, the other three wait and run when a share frees."""
    p = plan(tmp_path, devices=("0", "1"), per_device=2)
    record = tmp_path / "record.jsonl"
    procs = [holder(tmp_path, p, 3.0, record) for _ in range(7)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    assert len(started(record)) == 7
    assert most_at_once(record) == {"0": 2, "1": 2}


def test_a_job_asking_for_two_gpus_takes_two_devices(tmp_path):
    p = plan(tmp_path, devices=("0", "1", "2"), per_device=1, gpus=2)
    record = tmp_path / "record.jsonl"
    procs = [holder(tmp_path, p, 0.5, record) for _ in range(3)]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    got = [r["devices"].split(",") for r in started(record)]
    assert all(len(set(devices)) == 2 for devices in got)
    assert max(most_at_once(record).values()) == 1


def test_a_killed_jobs_share_is_claimed_again(tmp_path):
    p = plan(tmp_path, devices=("0",), per_device=1)
    record = tmp_path / "record.jsonl"
    first = holder(tmp_path, p, 600, record)
    wait_for(lambda: len(started(record)) == 1)
    second = holder(tmp_path, p, 0, record, stderr=subprocess.PIPE, text=True)
    assert second.stderr.readline().startswith("fedhet: waiting for a free share")
    assert len(started(record)) == 1
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert second.wait(timeout=30) == 0
    assert second.stderr.readline() == "fedhet: CUDA_VISIBLE_DEVICES=0 (a share of 1 per GPU)\n"
    assert [r["devices"] for r in started(record)] == ["0", "0"]


def test_a_share_stays_busy_while_a_process_given_it_lives(tmp_path):
    """A fork server's worker holds the slots of the command that waits for it: killing that
    command frees the share only once the worker has gone too."""
    p = plan(tmp_path, devices=("0",), per_device=1)
    first = holder(tmp_path, p, 600)
    wait_for(lambda: len(started(tmp_path / "record.jsonl")) == 1)
    slots = str(gpushare.slot_path(Path(p.directory), "0", 0))
    worker = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from fedhet.local.gpushare import claim_for_command\n"
         "claim_for_command(['train'])\nprint('held', flush=True)\ntime.sleep(600)"],
        env={**os.environ, "PYTHONPATH": SRC, gpushare.SLOTS_ENV: slots,
             gpushare.PLAN_ENV: p.to_env()},
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert worker.stdout.readline() == "held\n"
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert gpushare.try_claim(p) is None
        worker.kill()
        worker.wait()
        assert gpushare.try_claim(p)[0] == ["0"]
    finally:
        for proc in (first, worker):
            proc.kill()
            proc.wait()
        release()


# ----------------------------------------------------------------------------- the command


def test_only_gpu_commands_of_a_planned_run_claim(tmp_path):
    p = plan(tmp_path)
    env = {gpushare.PLAN_ENV: p.to_env(), "CUDA_VISIBLE_DEVICES": "0,1"}
    gpushare.claim_for_command(["prepare-data", "--dataset", "x"], env)
    assert env == {gpushare.PLAN_ENV: p.to_env(), "CUDA_VISIBLE_DEVICES": "0,1"}
    gpushare.claim_for_command(["train"], {"CUDA_VISIBLE_DEVICES": "0,1"})  # no plan: nothing
    try:
        gpushare.claim_for_command(["calibrate"], env)
        assert env["CUDA_VISIBLE_DEVICES"] == "0"
        assert env[gpushare.SLOTS_ENV] == str(gpushare.slot_path(Path(p.directory), "0", 0))
        assert gpushare.PLAN_ENV not in env  # nothing this command starts claims again
    finally:
        release()


def test_a_bad_plan_is_named(tmp_path):
    with pytest.raises(SystemExit, match="asks for 2 GPUs but this machine shows 1"):
        gpushare.claim_for_command(["train"], {gpushare.PLAN_ENV: plan(tmp_path, ("0",),
                                                                        gpus=2).to_env()})
    with pytest.raises(SystemExit, match="not a GPU share plan"):
        gpushare.claim_for_command(["train"], {gpushare.PLAN_ENV: "{"})


def test_the_share_directory_must_be_this_users(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    p = Plan(["0"], 1, 1, str(tmp_path / "link"))
    with pytest.raises(PermissionError, match="not a directory of this user"):
        gpushare.try_claim(p)
    assert gpushare.default_directory({"XDG_RUNTIME_DIR": str(tmp_path)}) == (
        tmp_path / "fedhet-gpu-shares"
    )


def test_a_name_taken_in_the_shared_temporary_directory_stops_no_gpu_job(tmp_path, monkeypatch):
    """Without $XDG_RUNTIME_DIR the shares live in the user's cache directory: another user
    who takes a name in /tmp first (here: the name the shares once had) stops nothing."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    (shared / f"fedhet-gpu-shares-{os.getuid()}").write_text("another user's")
    home = tmp_path / "home"
    directory = gpushare.default_directory({"HOME": str(home)})
    assert directory.is_relative_to(home / ".cache")
    assert gpushare.default_directory({"HOME": str(home), "XDG_CACHE_HOME": str(tmp_path / "c")}
                                      ).is_relative_to(tmp_path / "c")
    try:
        assert gpushare.try_claim(Plan(["0"], 1, 1, str(directory)))[0] == ["0"]
    finally:
        release()
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
