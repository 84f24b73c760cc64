# How the jobs run: the GPUs each job asks for, the GPUs of this machine shared out among its
# jobs (fedhet.local.gpushare), training jobs packed K to a cluster job, the memory and time a job
# asks for, the fork server's lifecycle (fedhet.local.launcher; started and stopped by the
# Snakefile's onstart / onsuccess / onerror) and the exit hook on Snakemake's own threads.
import functools
import math
import os
import threading

from snakemake.exceptions import WorkflowError
from snakemake.logging import logger

from fedhet import experiments as X
from fedhet.local import gpushare
from fedhet.local.launcher import NotStarted as ForkServerNotStarted
from fedhet.local.launcher import command_mismatch, start_server, stop_server
from fedhet.local.protocol import ENV as FORKSERVER_ENV

# $FEDHET_JOB_GPUS: GPUs each GPU job asks for, whatever the scale says or this machine shows
GPUS_GIVEN = os.environ.get("FEDHET_JOB_GPUS", "").strip()


def gpus_per_job():
    """GPUs each GPU job (training, calibration) asks for: the scale's `resources.gpu`, or
    $FEDHET_JOB_GPUS where set (0 on a cluster or machine without GPUs: the code then runs on
    the CPU). Profiles route jobs by this request, never by rule name."""
    if not GPUS_GIVEN:
        return int(RES["gpu"])
    if not GPUS_GIVEN.isdigit():
        raise WorkflowError(
            f"FEDHET_JOB_GPUS must be a whole number of GPUs, got {GPUS_GIVEN!r}"
        )
    return int(GPUS_GIVEN)


JOB_GPUS = gpus_per_job()


@functools.cache
def visible_gpu_ids():
    """GPUs this machine shows its jobs (CUDA_VISIBLE_DEVICES entries), found without
    importing torch: none where $CUDA_VISIBLE_DEVICES hides them or `nvidia-smi` is missing
    or lists none."""
    return gpushare.visible_devices()


def visible_gpus():
    return len(visible_gpu_ids())


def job_gpus(wildcards):
    """Resource `gpu` of a GPU job: JOB_GPUS, but none without $FEDHET_JOB_GPUS when the job
    runs on this machine and this machine shows no GPU (the job then runs on the CPU). A
    cluster run, and a dry run, show what a cluster job asks for."""
    local = workflow.local_exec and not workflow.dryrun
    if local and not GPUS_GIVEN and not visible_gpus():
        return 0
    return JOB_GPUS


# On a cluster, the SLURM profile can pack K training jobs into one cluster job on one GPU:
# `groups: train=gpu_runs` and `group-components: gpu_runs=K` (Snakemake's job groups). The SLURM
# executor plugin runs a group's jobs one after another (`--jobs 1` in the group job), so K runs
# take turns on the GPU. Locally groups have no effect.


def packed_runs():
    """Training jobs one cluster job holds: the `--group-components` size of the group that
    `--groups` puts `train` in, 1 when ungrouped. Snakemake hands group settings to the workflow
    after parsing, so this is for resource functions, not for parse-time code."""
    settings = workflow.group_settings
    group = settings.overwrite_groups.get("train") if settings else None
    runs = settings.group_components.get(group, 1) if group else 1
    if int(runs) < 1:
        raise WorkflowError(
            f"--group-components {group}={runs}: runs per cluster job must be at least 1"
        )
    return int(runs)


def packed_submission():
    """True where training jobs go to a cluster K to a GPU (or a dry run shows them): each asks
    for no `gpu` of its own but for `gres` gpu:N, which their group asks for once (Snakemake
    sums numbers over a group, which would ask for K GPUs, and takes a string once)."""
    return packed_runs() > 1 and bool(JOB_GPUS) and workflow.non_local_exec_or_dryrun


def job_gpu_resource(wildcards):
    """Resource `gpu` of a training job (job_gpus), none when packed for a cluster."""
    return 0 if packed_submission() else job_gpus(wildcards)


def job_gres(wildcards):
    """Resource `gres` of a training job: gpu:N when packed for a cluster, else unset."""
    return f"gpu:{JOB_GPUS}" if packed_submission() else None


# GPU jobs that may share one GPU of this machine: the config's, else the scale's (default 1)
RUNS_PER_GPU = int(config.get("runs_per_gpu") or RES.get("runs_per_gpu", 1))


def share_gpus():
    """A run on this machine with GPUs: at most visible GPUs × runs_per_gpu GPU jobs at once
    (unless `--resources gpu=N` says otherwise), each with a share of its own; the jobs'
    `fedhet` commands claim it from the plan in $FEDHET_GPU_SHARES (fedhet.local.gpushare),
    whether the fork server runs them or not. A cluster gives each job its GPUs; a cluster
    job running a group of jobs shares out the GPUs it was given the same way."""
    if workflow.subprocess_exec:
        return  # a job of a run on this machine: that run's plan holds
    for name in (gpushare.PLAN_ENV, gpushare.SLOTS_ENV):
        os.environ.pop(name, None)  # never a plan of another run
    local = workflow.local_exec and not workflow.dryrun
    devices = visible_gpu_ids() if local else []
    if not devices or not JOB_GPUS:
        return
    if JOB_GPUS > len(devices):
        raise WorkflowError(
            f"GPU jobs ask for {JOB_GPUS} GPUs each but this machine shows {len(devices)}; "
            f"set FEDHET_JOB_GPUS (or the scale's resources.gpu) to at most {len(devices)}"
        )
    if "gpu" not in workflow.global_resources:
        workflow.register_resource("gpu", len(devices) * RUNS_PER_GPU)
    directory = gpushare.default_directory()
    if not workflow.is_main_process:  # a cluster job: the GPUs of its allocation only
        directory = directory.with_name(f"{directory.name}-job{os.getpid()}")
    plan = gpushare.Plan(devices, RUNS_PER_GPU, JOB_GPUS, str(directory))
    os.environ[gpushare.PLAN_ENV] = plan.to_env()


share_gpus()


FORKSERVER = {}  # the running fork server's process, under "process"
FORKSERVER_LOG = ".snakemake/log/fedhet-forkserver.log"


def start_forkserver():
    """Start `python -m fedhet.local.server` for the jobs of this run on this machine, as many
    at once as Snakemake runs, and point them at it ($FEDHET_FORKSERVER, told by the server); it
    exits with this Snakemake process. Not for jobs sent to a cluster, nor with
    `forkserver: false`."""
    if not workflow.local_exec or not config["forkserver"]:
        return
    os.makedirs(os.path.dirname(FORKSERVER_LOG), exist_ok=True)
    jobs = workflow.resource_settings.cores or os.cpu_count() or 1
    try:
        server = start_server(FORKSERVER_LOG, max_jobs=jobs, watch_pid=os.getpid())
    except ForkServerNotStarted as err:
        logger.warning(
            f"fedhet fork server did not start: {err} ({FORKSERVER_LOG}); "
            "every job imports torch itself"
        )
        return
    FORKSERVER["process"] = server.process
    os.environ[FORKSERVER_ENV] = server.address
    mismatch = command_mismatch()
    if mismatch:
        logger.warning(
            f"fedhet fork server: the jobs' fedhet is another installation ({mismatch}); "
            "the server will decline every job and each imports torch itself (slower). "
            "Run snakemake from the environment fedhet is installed in."
        )


def stop_forkserver():
    server = FORKSERVER.pop("process", None)
    if server is not None:
        stop_server(server)


def cancel_reselection_timers():
    """Cancel Snakemake's pending re-selections: after each job selection it starts a
    threading.Timer that selects again once the job-rate window (profiles/default: a minute)
    has passed. At the workflow's end none has anything left to select, but Python waits for
    each before the process exits."""
    for thread in threading.enumerate():
        if type(thread) is threading.Timer:
            thread.cancel()


# At the process's exit, however the workflow ended (done, failed, or interrupted: Ctrl-C runs
# neither onsuccess nor onerror): Python calls these before it waits for the threads still
# running (threading._register_atexit, the hook concurrent.futures uses for the same reason).
threading._register_atexit(cancel_reselection_timers)


def train_mem_mb(wildcards, attempt):
    return int(RES["mem_mb"] * attempt)


def train_runtime(wildcards, attempt):
    """Minutes: base + per-epoch × passes over the training set, × attempt on retries; × K
    when packed K to a cluster job, whose runs take turns (a group asks for its longest job's
    time)."""
    run = EXP.runs[wildcards.run_id]
    minutes = RES["runtime_base"] + RES["runtime_per_epoch"] * X.dataset_epochs(run)
    turns = packed_runs() if packed_submission() else 1
    return int(math.ceil(minutes * attempt * turns))
