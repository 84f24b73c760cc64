"""A workflow run's time read back from Snakemake's log (`.snakemake/log/*.snakemake.log`):
each finished job's rule, first output and seconds, how busy the cores were, and, against the
log of the same DAG on another machine, each job's time there over its time here.

Made for measuring the demo's budget on a machine and for comparing machines job for job,
where one run may have been cut short: jobs are matched by their first output (their rule and
job id where they have none), so only the jobs both runs finished are compared. Snakemake stamps
a job's start and end to the second, so a job's seconds are whole and short jobs round.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?rule (\w+):$")
_OUTPUT = re.compile(r"^\s+output: ([^,\s]+)")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+)")
_CORES = re.compile(r"^Provided cores: (\d+)$")


class NotASnakemakeLog(ValueError):
    """The file holds no job of a Snakemake run."""


@dataclass(frozen=True)
class Job:
    rule: str
    key: str  # the job's first output, else "rule#jobid"
    seconds: float


@dataclass(frozen=True)
class RunLog:
    jobs: list[Job]  # the jobs that finished, in the order they finished
    wall: float  # seconds from the log's first time stamp to its last
    cores: int | None  # "Provided cores", if the log says
    unfinished: int  # jobs started and not finished (a cut run, a failed job)


def read_log(text: str) -> RunLog:
    """The finished jobs of one Snakemake run's log, its wall time and its cores."""
    stamp = first = None
    rule = output = None
    started: dict[str, tuple[str, str, datetime]] = {}
    jobs, cores = [], None
    for line in text.splitlines():
        if m := _STAMP.match(line):
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
            first = first or stamp
        elif m := _RULE.match(line):
            rule, output = m.group(1), None
        elif (m := _OUTPUT.match(line)) and rule:
            output = m.group(1)
        elif (m := _JOBID.match(line)) and rule and stamp:
            jobid = m.group(1)
            started[jobid] = (rule, output or f"{rule}#{jobid}", stamp)
            rule = None
        elif (m := _FINISHED.match(line)) and m.group(1) in started and stamp:
            name, key, began = started.pop(m.group(1))
            jobs.append(Job(name, key, (stamp - began).total_seconds()))
        elif m := _CORES.match(line):
            cores = int(m.group(1))
    if not jobs:
        raise NotASnakemakeLog("no finished job in it")
    return RunLog(jobs, (stamp - first).total_seconds(), cores, len(started))


def load(path: str | Path) -> RunLog:
    """`read_log` of a file, with the file named in the error."""
    try:
        return read_log(Path(path).read_text(encoding="utf-8", errors="replace"))
    except NotASnakemakeLog as err:
        raise NotASnakemakeLog(
            f"{path}: {err}; give the log of a Snakemake run that ran jobs "
            "(.snakemake/log/*.snakemake.log, or what `snakemake` printed)"
        ) from None


def _per_rule(rows: Iterable[tuple[str, tuple[float, ...]]]) -> dict[str, tuple]:
    """(rule, values) rows summed per rule: (rows, *sums), the largest first sum first."""
    sums: dict[str, list[float]] = {}
    for rule, values in rows:
        row = sums.setdefault(rule, [0] + [0.0] * len(values))
        row[0] += 1
        for i, v in enumerate(values, 1):
            row[i] += v
    return {r: (int(n), *rest) for r, (n, *rest) in sorted(sums.items(), key=lambda kv: -kv[1][1])}


def by_rule(jobs: list[Job]) -> dict[str, tuple[int, float]]:
    """Jobs and job-seconds per rule, the largest first."""
    return _per_rule((job.rule, (job.seconds,)) for job in jobs)


def summary(run: RunLog, cores: int | None = None) -> str:
    """Jobs, wall time, job-seconds per rule and how busy the cores were."""
    cores = cores or run.cores
    total = sum(j.seconds for j in run.jobs)
    busy = f", cores busy {100 * total / (cores * run.wall):.1f} % of {cores}" if (
        cores and run.wall) else ""
    lines = [f"{len(run.jobs)} jobs finished in {run.wall:,.0f} s ({run.wall / 60:.1f} min); "
             f"{total:,.0f} job-seconds{busy}"]
    if run.unfinished:
        lines.append(f"{run.unfinished} jobs started and did not finish")
    lines.append(f"  {'rule':<22}{'jobs':>6}{'job-s':>10}{'share':>9}")
    for rule, (n, secs) in by_rule(run.jobs).items():
        share = f"{100 * secs / total:>8.1f}%" if total else f"{'-':>9}"
        lines.append(f"  {rule:<22}{n:>6}{secs:>10,.0f}{share}")
    return "\n".join(lines)


def matched(here: RunLog, there: RunLog) -> list[tuple[Job, float]]:
    """The jobs of `here` that `there` finished too, each with its seconds there."""
    theirs = {j.key: j.seconds for j in there.jobs}
    return [(job, theirs[job.key]) for job in here.jobs if job.key in theirs]


def ratios(pairs: list[tuple[Job, float]]) -> dict[str, tuple[int, float, float]]:
    """Per rule, over `matched` jobs: jobs, job-seconds here, job-seconds there (the rule with
    the most job-seconds here first)."""
    return _per_rule((job.rule, (job.seconds, secs)) for job, secs in pairs)


def comparison(here: RunLog, there: RunLog, label: str) -> str:
    """Job for job, `there` against `here`: the ratio of their job-seconds per rule and in all,
    the median ratio of the jobs of 5 s or more here, and the wall time `here` would take if
    all its jobs went at that ratio."""
    pairs = matched(here, there)
    table = ratios(pairs)
    n, a, b = (sum(row[i] for row in table.values()) for i in range(3))
    if not a:
        return f"against {label}: no job of a second or more finished in both runs"
    long = [secs / job.seconds for job, secs in pairs if job.seconds >= 5]
    median = f"; median ratio of the {len(long)} jobs of 5 s or more: " \
             f"{statistics.median(long):.3f}" if long else ""
    lines = [f"against {label}: {n} jobs finished in both; their job-seconds {a:,.0f} here, "
             f"{b:,.0f} there (×{b / a:.3f}){median}",
             f"  this run at that ratio, if its other jobs scale alike: "
             f"{here.wall * b / a:,.0f} s ({here.wall * b / a / 60:.1f} min)",
             f"  {'rule':<22}{'jobs':>6}{'here':>10}{'there':>10}{'ratio':>8}"]
    for rule, (k, x, y) in table.items():
        ratio = f"{y / x:>8.2f}" if x else f"{'-':>8}"
        lines.append(f"  {rule:<22}{k:>6}{x:>10,.0f}{y:>10,.0f}{ratio}")
    return "\n".join(lines)
