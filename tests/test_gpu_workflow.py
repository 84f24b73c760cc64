"""A workstation's GPUs shared out by the workflow: the 4 training and 8 calibration jobs of
CCVR Figure 6 run with the fake `fedhet` (tests/fake_fedhet.py) on two fake GPUs (a fake
`nvidia-smi`). The fake records the CUDA_VISIBLE_DEVICES each GPU job ran with, and when."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from test_workflow import ROOT, fake_workflow, snakemake  # noqa: E402

pytestmark = pytest.mark.workflow
TESTS = Path(__file__).resolve().parent
FIGURE = "ccvr_fig6"  # 4 training and 8 calibration jobs

# a fork server whose workers run the fake; it declines calibrations (they run in their own
# process), so one run has jobs of both kinds
SERVER = textwrap.dedent(f"""
    import sys
    sys.path.insert(0, {str(TESTS)!r})
    import fake_fedhet
    import fedhet.cli
    import fedhet.local.server as server

    fedhet.cli.main = fake_fedhet.main
    server._preload = lambda: None  # the fake needs no torch
    server._decline_reason = lambda request, started, nfds: (
        "calibrations run in their own process here" if request["argv"][0] == "calibrate"
        else None)
    sys.exit(server.main(sys.argv[1:]))
""")


def gpu_env(tmp: Path, gpus: int) -> dict[str, str]:
    """The fake workflow's environment on a machine that shows `gpus` fake GPUs."""
    env = fake_workflow(tmp)
    bindir = tmp / "gpubin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "".join(
        f"echo 'GPU {i}: Fake GPU (UUID: GPU-fake-{i})'\n" for i in range(gpus)))
    smi.chmod(0o755)
    (tmp / "runtime").mkdir(mode=0o700)
    env.update({
        "PATH": f"{bindir}{os.pathsep}{env['PATH']}",
        "XDG_RUNTIME_DIR": str(tmp / "runtime"),  # the slot files of this test only
        "FAKE_FEDHET_DEVICES": str(tmp / "devices.jsonl"),
        "FAKE_FEDHET_SECONDS": "1.5",
    })
    for name in ("CUDA_VISIBLE_DEVICES", "FEDHET_JOB_GPUS", "FEDHET_GPU_SHARES",
                 "FEDHET_GPU_SLOTS", "FEDHET_FORKSERVER"):
        env.pop(name, None)
    return env


def targets(calibrations: bool = True) -> list[str]:
    """The runs of CCVR Figure 6 (final.json), and their calibrations."""
    from fedhet.experiments import load_experiment

    exp = load_experiment(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), ROOT)
    item = exp.items[FIGURE]
    out = [f"results/demo/runs/{rid}/final.json" for rid in item.run_ids()]
    if calibrations:
        out += [f"results/demo/calibrations/{cid}/calibration.json"
                for cid in item.calibration_ids()]
    return out


def jobs(tmp: Path) -> list[dict]:
    path = tmp / "devices.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def most_at_once(records: list[dict]) -> tuple[dict[str, int], int]:
    """The most GPU jobs that ran at one time on each device, and in all."""
    events = sorted([(r["start"], 1, r["devices"]) for r in records]
                    + [(r["end"], -1, r["devices"]) for r in records])
    now: dict[str, int] = {}
    most: dict[str, int] = {}
    total = most_total = 0
    for _, step, devices in events:
        total += step
        most_total = max(most_total, total)
        for device in devices.split(","):
            now[device] = now.get(device, 0) + step
            most[device] = max(most.get(device, 0), now[device])
    return most, most_total


def gpu_limit(tmp: Path) -> str | None:
    """The gpu limit the latest Snakemake run of `tmp` says it kept to (its log file)."""
    log = max((tmp / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_mtime)
    found = re.search(r"^Provided resources:.*\bgpu=\D*(\d+)", log.read_text(), re.MULTILINE)
    return found and found.group(1)


def waited(tmp: Path) -> list[Path]:
    """Job logs that say the job waited for a share."""
    return [p for p in (tmp / "results" / "demo" / "logs").rglob("*.log")
            if "waiting for a free share" in p.read_text()]


def test_served_and_declined_jobs_each_get_a_share_of_their_own(tmp_path):
    """runs_per_gpu=2 on 2 GPUs: Snakemake starts at most 4 GPU jobs (no --resources given),
    each on one GPU, never more than 2 on one; jobs the fork server runs (training) and jobs
    it declines (calibration) alike."""
    from fedhet.local.launcher import start_server, stop_server

    env = gpu_env(tmp_path, gpus=2)
    (tmp_path / "server.py").write_text(SERVER)
    server = start_server(tmp_path / "server.log", max_jobs=16,
                          command=[sys.executable, str(tmp_path / "server.py")])
    try:
        snakemake(tmp_path, *targets(), "--cores", "8",
                  "--config", "runs_per_gpu=2", "forkserver=False",
                  env={**env, "FAKE_FEDHET_FORKSERVER": server.address})
    finally:
        stop_server(server.process)
    assert gpu_limit(tmp_path) == "4"
    records = jobs(tmp_path)
    assert sorted(r["command"] for r in records) == ["calibrate"] * 8 + ["train"] * 4
    assert all(r["served"] == (r["command"] == "train") for r in records)
    assert {r["devices"] for r in records} == {"0", "1"}
    per_device, _ = most_at_once(records)
    assert max(per_device.values()) <= 2
    assert waited(tmp_path) == []  # Snakemake kept to the shares there are


def test_more_jobs_than_shares_wait_for_one(tmp_path):
    """`--resources gpu=8` on 2 GPUs with runs_per_gpu 1 (the default) and no fork server:
    Snakemake starts the 4 training jobs at once; two wait for a free share."""
    env = gpu_env(tmp_path, gpus=2)
    snakemake(tmp_path, *targets(calibrations=False), "--cores", "8", "--resources", "gpu=8",
              "--config", "forkserver=False", env=env)
    assert gpu_limit(tmp_path) == "8"
    records = jobs(tmp_path)
    assert len(records) == 4 and not any(r["served"] for r in records)
    per_device, total = most_at_once(records)
    assert per_device == {"0": 1, "1": 1} and total == 2
    assert waited(tmp_path)


def test_a_machine_without_gpus_runs_as_before(tmp_path):
    """No GPU shown (CUDA_VISIBLE_DEVICES hides them): no gpu limit, no share, the jobs keep
    the environment they were given."""
    env = gpu_env(tmp_path, gpus=2)
    env["CUDA_VISIBLE_DEVICES"] = ""
    snakemake(tmp_path, *targets(calibrations=False)[:1], "--cores", "2",
              env={**env, "FAKE_FEDHET_SECONDS": "0"})
    assert gpu_limit(tmp_path) is None
    records = jobs(tmp_path)
    assert len(records) == 1 and records[0]["devices"] == ""


def test_a_cluster_job_shares_out_the_gpus_it_was_given(tmp_path):
    """A group job on a cluster node (Snakemake in remote mode running several jobs) given
    GPUs 0 and 1: one run on each, counted apart from any other job on the node."""
    env = gpu_env(tmp_path, gpus=2)
    env["CUDA_VISIBLE_DEVICES"] = "0,1"  # what SLURM sets for the job's two GPUs
    snakemake(tmp_path, *targets(calibrations=False), "--cores", "8", "--mode", "remote",
              "--config", "forkserver=False", env=env)
    records = jobs(tmp_path)
    per_device, total = most_at_once(records)
    assert len(records) == 4 and per_device == {"0": 1, "1": 1} and total == 2
    shares = [p.name for p in (tmp_path / "runtime").iterdir()]
    assert len(shares) == 1 and re.fullmatch(r"fedhet-gpu-shares-job\d+", shares[0])
