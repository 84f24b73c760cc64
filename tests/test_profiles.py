"""Checks of the SLURM profiles in profiles/slurm and profiles/slurm-ci.

Fast: YAML parsing, option names against snakemake's own argument parser, and the sbatch
arguments the SLURM executor plugin builds from the profiles' resources. Two dry-runs of a toy
workflow (about 4 s each, marked `workflow`) check that snakemake accepts the profiles as a whole. None of this
needs a SLURM installation; the real cluster run is ci/slurm-smoke.sh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_workflow import copy_workflow, dry_run_in_a_copy

REPO = Path(__file__).resolve().parents[1]
PROFILES = REPO / "profiles"
SLURM = PROFILES / "slurm" / "config.yaml"
SLURM_CI = PROFILES / "slurm-ci" / "config.yaml"
PARTITIONS = PROFILES / "slurm" / "partitions.yaml"
TRAIN = "train"  # name of the training rule in the workflow
# what the workflow's GPU jobs declare at the demo scale (workflow/rules/execution.smk, train.smk)
GPU_JOB = {"gpu": 1, "mem_mb": 2000, "runtime": 6}


def load(path: Path) -> dict:
    with path.open() as fh:
        data = yaml.safe_load(fh)
    assert isinstance(data, dict), f"{path} is not a YAML mapping"
    return data


@pytest.fixture(scope="module")
def slurm() -> dict:
    return load(SLURM)


@pytest.fixture(scope="module")
def slurm_ci() -> dict:
    return load(SLURM_CI)


# --------------------------------------------------------------------------------------------
# structure
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [SLURM, SLURM_CI], ids=["slurm", "slurm-ci"])
def test_profile_common_keys(path):
    prof = load(path)
    assert prof["executor"] == "slurm"
    assert int(prof["jobs"]) >= 1
    for key in ("mem_mb", "runtime", "slurm_partition"):
        assert key in prof["default-resources"], key
    for key in ("retries", "latency-wait", "rerun-incomplete", "keep-going"):
        assert key in prof, key


@pytest.mark.parametrize("path", [SLURM, SLURM_CI], ids=["slurm", "slurm-ci"])
def test_profiles_name_no_rule(path):
    """Resources are declared with the rules; a profile routes by resource, so a rule added
    later needs no profile edit (the profiles name the training rule only to group its jobs)."""
    prof = load(path)
    assert "set-resources" not in prof and "set-threads" not in prof


def test_slurm_profile_routes_gpu_jobs_to_a_gpu_partition(slurm):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from snakemake_executor_plugin_slurm.partitions import (
        get_best_partition,
        read_partition_file,
    )

    assert slurm["slurm-partition-config"] == "profiles/slurm/partitions.yaml"
    partitions = read_partition_file(PARTITIONS)

    class Log:
        def info(self, *a):
            pass

        debug = warning = info

    assert get_best_partition(partitions, _Job({**GPU_JOB}), Log()) == "gpu"
    assert get_best_partition(partitions, _Job({"mem_mb": 2000, "runtime": 10}), Log()) == "cpu"
    assert get_best_partition(partitions, _Job({"gpu": 16}), Log()) is None  # fits nowhere
    assert "slurm_account" in slurm["default-resources"]
    assert int(slurm["retries"]) >= 1


def test_slurm_ci_profile_fits_the_test_cluster(slurm_ci):
    assert slurm_ci["slurm-status-command"] == "squeue"
    assert slurm_ci["slurm-no-account"] is True
    assert int(slurm_ci["slurm-init-seconds-before-status-checks"]) == 1
    assert slurm_ci["slurm-keep-successful-logs"] is True  # ci/slurm-smoke.sh reads the logs
    assert slurm_ci["default-resources"]["slurm_partition"] == "debug"
    # one node: 2 CPUs, ~24 GB
    assert int(slurm_ci["max-threads"]) <= 2
    assert int(slurm_ci["default-resources"]["mem_mb"]) <= 8000
    assert "slurm_account" not in slurm_ci["default-resources"]


# Snakemake builds its parser after finding its plugins, a scan of every folder on the import
# path, which holds the repository: it lists results/ and resources/ without reading them
@pytest.mark.repo_state
def test_profile_keys_are_snakemake_options():
    """Every key must be a `snakemake --KEY` option (including the SLURM plugin's)."""
    cli = pytest.importorskip("snakemake.cli")
    pytest.importorskip("snakemake_executor_plugin_slurm")
    options = {s for action in cli.get_argument_parser()._actions for s in action.option_strings}
    for path in (SLURM, SLURM_CI):
        unknown = [k for k in load(path) if f"--{k}" not in options]
        assert not unknown, f"{path}: unknown snakemake options {unknown}"


def test_every_profile_entry_is_commented():
    for path in (SLURM, SLURM_CI):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line and not line.startswith((" ", "#")):  # a top-level key
                assert i > 0 and lines[i - 1].startswith("#"), f"{path}:{i + 1} has no comment"


# --------------------------------------------------------------------------------------------
# what the SLURM plugin makes of the profiles' resources
# --------------------------------------------------------------------------------------------


class _Resources(dict):
    """dict with attribute access, like snakemake's job.resources."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


class _Job:
    """Just enough of a snakemake job for the plugin's submit-string helpers."""

    def __init__(self, resources: dict, threads: int = 1):
        self.resources = _Resources(resources)
        self.threads = threads
        self.name = TRAIN

    def is_group(self):
        return False


def evaluate(resources: dict, attempt: int = 1) -> dict:
    """Evaluate profile resource values the way snakemake does for --set-resources values."""
    from snakemake.resources import Resource

    out = {}
    for name, raw in resources.items():
        if isinstance(raw, str):
            value = Resource.cli_evaluator(
                name, raw, wildcards={}, input=[], attempt=attempt, async_run=None
            )
        else:
            value = raw
        if value is not None:  # snakemake drops resources that evaluate to None
            out[name] = value
    return out


def train_resources(profile: dict, attempt: int = 1, gpus: int = 1) -> dict:
    """A training job's resources: the profile's defaults under what the rule declares."""
    res = evaluate(dict(profile["default-resources"]), attempt)
    res.update({**GPU_JOB, "gpu": gpus})
    return res


def submit_command(job: _Job) -> str:
    plugin = pytest.importorskip("snakemake_executor_plugin_slurm")
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    params = {
        "run_uuid": "test-run",
        "slurm_logfile": "/tmp/slurm_logs/%j.log",
        "comment_str": f"rule_{TRAIN}",
        "account": "",
        "partition": f" -p {job.resources['slurm_partition']}"
        if "slurm_partition" in job.resources
        else "",
        "workdir": "/tmp",
    }
    assert plugin is not None
    # the plugin appends the GPU flags right after get_submit_command (Executor.run_job)
    return get_submit_command(job, params) + set_gres_string(job)


def test_gres_string_for_one_gpu():
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    assert set_gres_string(_Job({"gpu": 1})).split() == ["--gpus=1"]
    assert set_gres_string(_Job({"gpu": 1, "gpu_model": "a100"})).split() == ["--gpus=a100:1"]
    assert set_gres_string(_Job({"gpu": 0})) == ""


def test_slurm_profile_submits_training_with_one_gpu(slurm, monkeypatch):
    for var in ("FEDHET_SLURM_PARTITION", "FEDHET_SLURM_ACCOUNT"):
        monkeypatch.delenv(var, raising=False)
    res = train_resources(slurm)
    # unset environment variables leave the partition to the partition file, the account to
    # the plugin
    assert "slurm_partition" not in res and "slurm_account" not in res
    args = submit_command(_Job(res, threads=8)).split()
    assert "--gpus=1" in args
    assert args[args.index("--mem") + 1] == str(res["mem_mb"])
    assert args[args.index("-t") + 1] == str(res["runtime"])
    assert not any(a.startswith("--ntasks") for a in args)
    assert "-p" not in args


def test_slurm_profile_default_resources_grow_with_attempt(slurm):
    first = evaluate(slurm["default-resources"], 1)
    third = evaluate(slurm["default-resources"], 3)
    assert third["mem_mb"] == 3 * first["mem_mb"]
    assert third["runtime"] == 3 * first["runtime"]


def test_slurm_profile_partition_and_account_from_environment(slurm, monkeypatch):
    monkeypatch.setenv("FEDHET_SLURM_PARTITION", "short")
    monkeypatch.setenv("FEDHET_SLURM_ACCOUNT", "proj42")
    defaults = evaluate(slurm["default-resources"])
    assert defaults["slurm_partition"] == "short" and defaults["slurm_account"] == "proj42"
    args = submit_command(_Job(train_resources(slurm), threads=8)).split()
    assert args[args.index("-p") + 1] == "short"


def test_slurm_ci_profile_submits_training_without_gpu(slurm_ci):
    res = train_resources(slurm_ci, gpus=0)  # FEDHET_JOB_GPUS=0, as ci/slurm-smoke.sh sets
    args = submit_command(_Job(res, threads=1)).split()
    assert not any(a.startswith(("--gpus", "--gres", "--cpus-per-gpu")) for a in args)
    assert "--cpus-per-task=1" in args
    assert args[args.index("-p") + 1] == "debug"


# --------------------------------------------------------------------------------------------
# snakemake accepts the profiles (dry-run of a toy workflow; no SLURM needed)
# --------------------------------------------------------------------------------------------

TOY = """
localrules: all, summarize

rule all:
    input: "results/summary.txt"

rule train:
    output: "results/model_{seed}.txt"
    resources:
        gpu=int(__import__("os").environ.get("FEDHET_JOB_GPUS") or 1),
        mem_mb=lambda wc, attempt: 1000 * attempt,
        runtime=lambda wc, attempt: 10 * attempt,
    shell: "echo $SLURM_JOB_ID > {output}"

rule summarize:
    input: expand("results/model_{seed}.txt", seed=[0, 1])
    output: "results/summary.txt"
    shell: "cat {input} > {output}"
"""


def _train_resource_lines(out: str) -> list[str]:
    lines, in_train = [], False
    for line in out.splitlines():
        if line.strip().startswith(("rule ", "localrule ")):  # indented in a group job
            in_train = line.strip() == f"rule {TRAIN}:"
        elif in_train and line.strip().startswith("resources:"):
            lines.append(line)
            in_train = False
    return lines


@pytest.mark.workflow
@pytest.mark.parametrize(
    "profile, gpu", [("slurm", "gpu=1"), ("slurm-ci", "gpu=0")], ids=["slurm", "slurm-ci"]
)
def test_dry_run_with_profile(tmp_path, profile, gpu):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    (tmp_path / "Snakefile").write_text(TOY)
    # a workstation profile next to the Snakefile; --workflow-profile none keeps it out (without
    # it, its set-resources block would replace the SLURM profile's and train would get gpu=7)
    (tmp_path / "profiles" / "default").mkdir(parents=True)
    (tmp_path / "profiles" / "default" / "config.yaml").write_text(
        "set-resources:\n  train:\n    gpu: 7\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEDHET_SLURM_", "FEDHET_JOB"))}
    if profile == "slurm-ci":
        env["FEDHET_JOB_GPUS"] = "0"  # the test node has no GPU (ci/slurm-smoke.sh sets it)
    cmd = [sys.executable, "-m", "snakemake", "-n", "--profile", str(PROFILES / profile)]
    cmd += ["--workflow-profile", "none"]
    if profile == "slurm":  # its partition file is named relative to the repository root
        cmd += ["--slurm-partition-config", str(PARTITIONS)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    lines = _train_resource_lines(out)
    assert len(lines) == 2, out
    for line in lines:
        assert gpu in [t.strip() for t in line.split("resources:")[1].split(",")], line


@pytest.mark.parametrize("script", ["slurm-cluster.sh", "slurm-smoke.sh"])
def test_ci_scripts_parse(script):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    path = REPO / "ci" / script
    assert os.access(path, os.X_OK), f"{path} is not executable"
    subprocess.run([bash, "-n", str(path)], check=True)


@pytest.mark.workflow
@pytest.mark.parametrize("gpus, expected", [(None, "gpu=1"), ("0", "gpu=0")])
def test_the_workflows_gpu_jobs_ask_for_the_scales_gpus(gpus, expected, tmp_path):
    """Training and calibration ask for GPUs (the scale's, or $FEDHET_JOB_GPUS); the other
    cluster jobs (analysis figures) ask for none."""
    env = {k: v for k, v in os.environ.items() if k != "FEDHET_JOB_GPUS"}
    if gpus is not None:
        env["FEDHET_JOB_GPUS"] = gpus
    proc = dry_run_in_a_copy(tmp_path, "--forceall", "ccvr_fig6", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen: dict[str, set[str]] = {}
    rule = None
    for line in proc.stdout.splitlines():
        if line.startswith("rule "):
            rule = line[5:].rstrip(":")
        elif rule and line.strip().startswith("resources:"):
            items = [t.strip() for t in line.split("resources:")[1].split(",")]
            seen.setdefault(rule, set()).add(next((t for t in items if t.startswith("gpu=")), ""))
            rule = None
    assert seen["train"] == {expected} and seen["calibrate"] == {expected}
    assert seen["analysis_figure"] == {""}


# --------------------------------------------------------------------------------------------
# several runs in one SLURM job: Snakemake's job groups (profiles/README.md)
# --------------------------------------------------------------------------------------------

# `snakemake ARGS`, printing what each group job asks for, as Snakemake computes it for the
# submission (GroupJob.resources: summed over runs side by side, runtime over runs in series)
GROUP_RESOURCES = """
import json, sys
from snakemake import jobs
from snakemake.cli import main

logged = jobs.GroupJob.log_info

def log_info(self, *args, **kwargs):
    print("GROUP", json.dumps({"jobs": len(self.jobs), **dict(self.resources.items())},
                              default=str), flush=True)
    return logged(self, *args, **kwargs)

jobs.GroupJob.log_info = log_info
sys.exit(main(sys.argv[1:]))
"""


def group_jobs(tmp_path: Path, *args: str) -> list[dict]:
    (tmp_path / "Snakefile").write_text(TOY)
    (tmp_path / "groups.py").write_text(GROUP_RESOURCES)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEDHET_SLURM_", "FEDHET_JOB"))}
    cmd = [sys.executable, "groups.py", "-n", "--profile", str(PROFILES / "slurm"),
           "--workflow-profile", "none", "--slurm-partition-config", str(PARTITIONS),
           "--groups", "train=packed", "--group-components", "packed=2", *args]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line[6:]) for line in proc.stdout.splitlines() if line.startswith("GROUP ")]


@pytest.mark.workflow
@pytest.mark.parametrize(
    "args, expected, flags",
    [
        # in series on one GPU: --cores caps a group job at one run's threads
        (["--cores", "1"], {"gpu": 1, "_cores": 1, "mem_mb": 1000, "runtime": 20}, ["--gpus=1"]),
        # side by side, a GPU each (a real run leaves --cores unset: no cap)
        (["--cores", "1000"], {"gpu": 2, "_cores": 2, "mem_mb": 2000, "runtime": 10},
         ["--gpus=2"]),
        # side by side on one GPU
        (["--cores", "1000", "--set-resources", "train:gpu=0", "train:gres=gpu:1",
          "train:slurm_partition=gpu"],
         {"gpu": 0, "gres": "gpu:1", "slurm_partition": "gpu", "_cores": 2, "mem_mb": 2000,
          "runtime": 10}, ["--gres=gpu:1"]),
    ],
    ids=["series", "a-gpu-each", "one-gpu-shared"],
)
def test_job_groups_pack_runs_into_one_slurm_job(tmp_path, args, expected, flags):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    groups = group_jobs(tmp_path, *args)
    assert len(groups) == 1 and groups[0]["jobs"] == 2
    assert {k: groups[0].get(k) for k in expected} == expected
    assert set_gres_string(_Job(groups[0])).split() == flags


def workflow_groups(tmp_path: Path, *args: str) -> list[dict]:
    """The group jobs a dry run of the real workflow with the SLURM profile would submit (in a
    copy of the workflow, with the profile's partition file where it names it)."""
    if not (tmp_path / "Snakefile").exists():
        copy_workflow(tmp_path)
        shutil.copytree(PROFILES / "slurm", tmp_path / "profiles" / "slurm")
    (tmp_path / "groups.py").write_text(GROUP_RESOURCES)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FEDHET_SLURM_", "FEDHET_JOB"))}
    cmd = [sys.executable, str(tmp_path / "groups.py"), "-n", "--forceall", "ccvr_t1",
           "--cores", "1000", "--profile", str(PROFILES / "slurm"), "--workflow-profile", "none",
           *args]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [json.loads(line[6:]) for line in proc.stdout.splitlines() if line.startswith("GROUP ")]


@pytest.mark.workflow
def test_packed_training_runs_share_one_gpu_of_one_slurm_job(tmp_path, slurm):
    """`--groups train=gpu_runs --group-components gpu_runs=K` puts K training runs in one SLURM
    job that asks for one GPU (--gres=gpu:1, routed to the GPU partition) and K runs' time, as
    the executor plugin runs them one after another; K=1 gives each run a job and a GPU of its
    own, as without groups (test_the_workflows_gpu_jobs_ask_for_the_scales_gpus)."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    assert "groups" not in slurm  # a grouped job cannot be an array job
    partitions = read_partition_file(PARTITIONS)

    class Log:
        def info(self, *a):
            pass

        debug = warning = info

    alone = workflow_groups(tmp_path, "--groups", "train=gpu_runs", "--group-components",
                            "gpu_runs=1")
    for group in alone:
        assert group["jobs"] == 1 and group["gpu"] == 1 and not group.get("gres"), group
        assert set_gres_string(_Job(group)).split() == ["--gpus=1"]
    runtime = {group["runtime"] for group in alone}

    threads = load(REPO / "config" / "scales" / "demo.yaml")["resources"]["threads"]
    packed = workflow_groups(tmp_path, "--group-components", "gpu_runs=4", "--groups",
                             "train=gpu_runs")
    assert sum(g["jobs"] for g in packed) == len(alone)
    assert max(g["jobs"] for g in packed) == 4
    for group in packed:
        assert (group["gpu"], group["gres"]) == (0, "gpu:1"), group
        # K runs' minutes, rounded up once (a run's own request is rounded up on its own)
        assert any(4 * (minutes - 1) < group["runtime"] <= 4 * minutes for minutes in runtime)
        assert group["mem_mb"] == group["jobs"] * GPU_JOB["mem_mb"]
        assert group["_cores"] == group["jobs"] * threads
        assert set_gres_string(_Job(group)).split() == ["--gres=gpu:1"]
        assert get_best_partition(partitions, _Job(group), Log()) == "gpu"
