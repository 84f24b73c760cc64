"""The `repo_state` marker's guard (tests/repo_state.py): a test without the marker cannot
reach the repository's state through relative paths, and fails when it touches it otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repo_state import ROOT, Guard, Turns

WATCHING: list[Guard] = []  # the guard under test, besides the session's own
sys.addaudithook(lambda event, args: WATCHING and WATCHING[0].audit(event, args))


@pytest.fixture
def repo(tmp_path):
    """A repository with sources and state, and a guard watching it."""
    root = tmp_path / "repo"
    for path in ("config/config.yaml", "workflow/report/report.css", "reports/demo/report.html",
                 "results/demo/scorecard.csv", "resources/datasets/digits10.pt",
                 ".snakemake/log/old.log"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")
    (tmp_path / "work").mkdir()
    guard = Guard(tmp_path / "work", root)
    WATCHING.append(guard)
    yield root, guard
    WATCHING.clear()


def test_an_unmarked_test_runs_outside_the_repository():
    assert not Path.cwd().resolve().is_relative_to(ROOT)
    assert not Path("resources/datasets").resolve().is_relative_to(ROOT)


def test_what_reads_or_writes_the_state_is_named_and_the_sources_are_not(repo, tmp_path):
    root, guard = repo
    with guard.unmarked():
        assert Path.cwd() == tmp_path / "work"
        (root / "config" / "config.yaml").read_text()
        (root / "workflow" / "report" / "report.css").read_text()
        subprocess.run(["true"], cwd=tmp_path, check=True)
        subprocess.run(["true"], cwd=root / "config", check=True)  # as git in src/fedhet
        assert guard.problems(listing=True) == []
        (root / "reports" / "demo" / "report.html").read_text()
        os.listdir(root / "resources")
        assert (root / "results" / "demo").is_dir()
        subprocess.run(["true"], cwd=root, check=True)
        subprocess.run(["ls", str(root / "results")], cwd=tmp_path, capture_output=True)
        problems = guard.problems(listing=True)
    assert problems == [
        f"open {root}/reports/demo/report.html",
        f"os.listdir {root}/resources",
        f"os.stat {root}/results/demo",
        f"started `true` in {root}, where relative paths reach the repository's state",
        f"started `ls {root}/results` on a path of the repository's state",
    ]


def test_a_write_by_any_process_changes_the_listing(repo, tmp_path):
    """A process that finds its path in a file (not in its arguments) is caught by the
    listing; under .snakemake/ only the folders count."""
    root, guard = repo
    where = tmp_path / "where.txt"
    where.write_text(str(root / "results" / "demo" / "new.csv"))
    with guard.unmarked():
        subprocess.run([sys.executable, "-c", "import sys; p = open(sys.argv[1]).read(); "
                        "open(p, 'w').write('x')", str(where)], check=True)
        assert guard.problems(listing=True) == [
            "the state changed while it ran: results/demo"]
        shutil.rmtree(root / ".snakemake" / "log")
        assert "the state changed while it ran: .snakemake, .snakemake/log" in guard.problems(listing=True)


def test_the_session_fails_an_unmarked_test_that_touches_the_state(tmp_path):
    """The guard of tests/conftest.py in a pytest run of its own: an unmarked test that reads
    results/ fails, naming the path and the marker; a marked one passes, in the repository."""
    tests = tmp_path / "tests"
    tests.mkdir()
    for name in ("conftest.py", "repo_state.py"):
        shutil.copy(ROOT / "tests" / name, tests / name)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "done.txt").write_text("x")
    (tests / "test_inner.py").write_text(
        "import os, pytest\n"
        "from repo_state import ROOT\n"
        "def test_unmarked():\n"
        "    (ROOT / 'results' / 'done.txt').read_text()\n"
        "@pytest.mark.repo_state\n"
        "def test_marked():\n"
        "    assert os.getcwd() == str(ROOT)\n"
        "    (ROOT / 'results' / 'done.txt').read_text()\n"
        "def test_plain():\n"
        "    pass\n"
    )
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests"], cwd=tmp_path, capture_output=True, text=True)
    assert "1 failed, 2 passed" in done.stdout, done.stdout + done.stderr
    assert "test_inner.py::test_unmarked is not marked repo_state" in done.stdout
    assert f"open {tmp_path}/results/done.txt" in done.stdout


TURN = """
import os, sys, time
sys.path.insert(0, {tests!r})
from repo_state import Guard, Turns
role, folder, log, release = sys.argv[1:5]
turns, guard = Turns(folder), Guard(folder, folder)
guard.before = {{"a listing": 0}}
with turns.writing() if role == "writer" else turns.reading(guard):
    with open(log, "a") as f:
        f.write(role + " in\\n")
    if release != "-":
        if os.fork() == 0:  # a child the test forked, living on after it
            os.close(1)
            end = time.monotonic() + 60
            while "late reader out" not in open(log).read() and time.monotonic() < end:
                time.sleep(0.05)
            os._exit(0)
        while not os.path.exists(release):
            time.sleep(0.01)
    with open(log, "a") as f:
        f.write(role + " out\\n")
print(turns.seen, guard.before is None)
"""


def test_xdist_workers_take_turns_and_a_waiting_marked_test_goes_first(tmp_path):
    """Three workers: a marked test (writer) waits for the unmarked test running on another,
    no unmarked test starts while it waits, a child the unmarked test forked keeps no turn,
    and the next unmarked test lists the state afresh."""
    log, release = tmp_path / "log", tmp_path / "release"
    script = TURN.format(tests=str(Path(__file__).parent))

    def start(role: str, hold: bool = False) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", script, role, str(tmp_path), str(log),
                                 str(release) if hold else "-"], stdout=subprocess.PIPE,
                                text=True)

    def lines() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    first = start("reader", hold=True)
    deadline = time.monotonic() + 60
    while lines() != ["reader in"]:
        assert time.monotonic() < deadline, "the first reader never got its turn"
        time.sleep(0.05)
    writer = start("writer")
    time.sleep(1)  # the writer now waits for the room, holding the gate
    late = start("late reader")
    time.sleep(1)
    assert lines() == ["reader in"]  # neither the writer nor a new reader got in
    release.touch()
    outs = [p.communicate(timeout=30)[0].split() for p in (first, writer, late)]
    assert lines() == ["reader in", "reader out", "writer in", "writer out", "late reader in",
                       "late reader out"]
    assert outs[2] == ["1", "True"]  # one writer ran since: the listing is forgotten
