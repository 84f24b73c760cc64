"""`fedhet timing`: a Snakemake log read back into jobs, their seconds and how busy the cores
were, and two runs of the same DAG compared job for job."""

from __future__ import annotations

import pytest

from fedhet.local import joblog
from fedhet.cli import main


def job(stamp: str, rule: str, jobid: int, output: str | None) -> str:
    out = f"    output: {output}, {output}.more\n" if output else ""
    return (f"[Fri Nov 27 10:{stamp} 2026]\nlocalrule {rule}:\n    input: a\n{out}"
            f"    log: x.log\n    jobid: {jobid}\n    reason: Missing output files\n")


def done(stamp: str, jobid: int, rule: str) -> str:
    return f"[Fri Nov 27 10:{stamp} 2026]\nFinished jobid: {jobid} (Rule: {rule})\n"


def log(train_s: int, table_s: int) -> str:
    """Two cores; a 'train' job, a 'table' job beside it, a job without output, one left
    running."""
    return ("Provided cores: 2\nSelect jobs to execute...\n"
            + job("00:00", "train", 7, "results/runs/a/final.json")
            + job("00:00", "table", 3, "results/tables/t1.csv")
            + done(f"00:{table_s:02d}", 3, "table")
            + done(f"{train_s // 60:02d}:{train_s % 60:02d}", 7, "train")
            + job(f"{train_s // 60:02d}:{train_s % 60:02d}", "all", 1, None)
            + done(f"{train_s // 60:02d}:{train_s % 60:02d}", 1, "all")
            + job(f"{train_s // 60:02d}:{train_s % 60:02d}", "figure", 9, "results/f.png")
            + f"[Fri Nov 27 10:{(train_s + 20) // 60:02d}:{(train_s + 20) % 60:02d} 2026]\n")


def test_a_log_reads_back_into_its_finished_jobs():
    run = joblog.read_log(log(train_s=90, table_s=30))
    assert [(j.rule, j.key, j.seconds) for j in run.jobs] == [
        ("table", "results/tables/t1.csv", 30.0),
        ("train", "results/runs/a/final.json", 90.0),
        ("all", "all#1", 0.0),
    ]
    assert (run.wall, run.cores, run.unfinished) == (110.0, 2, 1)
    assert joblog.by_rule(run.jobs) == {"train": (1, 90.0), "table": (1, 30.0), "all": (1, 0.0)}
    text = joblog.summary(run)
    assert "3 jobs finished in 110 s" in text and "1 jobs started and did not finish" in text
    assert f"cores busy {100 * 120 / 220:.1f} % of 2" in text

    quick = joblog.read_log(log(train_s=0, table_s=0))  # stamped to the second: 0 s jobs
    assert sum(j.seconds for j in quick.jobs) == 0
    assert "0 job-seconds" in joblog.summary(quick)


def test_two_runs_compare_job_for_job_over_the_jobs_both_finished():
    here, there = joblog.read_log(log(90, 30)), joblog.read_log(log(45, 30))
    table = joblog.ratios(joblog.matched(here, there))
    assert table == {"train": (1, 90.0, 45.0), "table": (1, 30.0, 30.0), "all": (1, 0.0, 0.0)}
    text = joblog.comparison(here, there, "fast.log")
    assert f"(×{75 / 120:.3f})" in text
    assert f"{110 * 75 / 120:,.0f} s" in text  # this run's wall time at that ratio
    assert "median ratio of the 2 jobs of 5 s or more: 0.750" in text  # (0.5 + 1.0) / 2

    cut = joblog.read_log(log(45, 30).replace("Finished jobid: 7", "Finished jobid: 99"))
    assert "train" not in joblog.ratios(joblog.matched(here, cut))  # the cut run's train job is left out
    assert "against cut.log: 2 jobs finished in both" in joblog.comparison(here, cut, "cut.log")


def test_the_command_prints_the_summary_and_refuses_what_is_not_a_log(tmp_path, capsys):
    good, other = tmp_path / "a.snakemake.log", tmp_path / "notes.txt"
    good.write_text(log(90, 30))
    other.write_text("Building DAG of jobs...\nNothing to be done.\n")
    assert main(["timing", str(good), "--against", str(good)]) == 0
    out = capsys.readouterr().out
    assert "3 jobs finished in 110 s" in out and "(×1.000)" in out
    assert main(["timing", str(other)]) == 2
    err = capsys.readouterr().err
    assert "notes.txt: no finished job in it" in err and ".snakemake/log" in err
    with pytest.raises(joblog.NotASnakemakeLog):
        joblog.read_log("")
