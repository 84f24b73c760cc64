"""Fixtures shared by the unit tests, and the guard of the `repo_state` marker
(tests/repo_state.py)."""

import os
import shutil
import sys
import tempfile
from contextlib import nullcontext

import pytest
import torch

from repo_state import HELP, Guard, Turns

GUARD = Guard(tempfile.mkdtemp(prefix="fedhet-tests-"))
sys.addaudithook(GUARD.audit)
TURNS_FOLDER = "FEDHET_TEST_TURNS"  # the xdist workers' shared folder (`Turns`)
TURNS: list[Turns] = []  # in an xdist worker of this session: its turns

# The test files that take longest (seconds on 2 Zen 4 cores, 2026-12-05: 267, 107, 78, 64, 49,
# 37, 36, 22), collected first: under `-n 2` each file goes whole to one worker, in collection
# order (`--dist loadfile --no-loadscope-reorder`), so the longest start first and the shorter
# ones fill in around them, and the two workers end together. Run last, the longest file ran
# alone for minutes while the other worker had nothing left.
LONGEST_FIRST = ("test_workflow.py", "test_leaderboard_workflow.py", "test_forkserver.py",
                 "test_gpucheck.py", "test_forkserver_jobs.py", "test_gpu_workflow.py",
                 "test_leaderboard_entries.py", "test_vectorised_clients.py")


def cores_per_worker(workers: int) -> int:
    """This machine's cores (those this process may run on, where the OS says) shared out
    among `workers`."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    return max(1, cores // workers)


def pytest_configure(config):
    """Under pytest-xdist, the controller makes the folder its workers take turns in, and each
    worker takes them (a pytest a test starts inherits the folder's name, and takes none).

    Each worker computes on its share of the cores: by default torch takes them all in every
    worker, and two workers' threads on two cores wait on each other, spinning; tests that took
    1 to 3 s then took 6 to 33, varying from run to run."""
    if hasattr(config, "workerinput"):
        torch.set_num_threads(cores_per_worker(int(config.workerinput["workercount"])))
        TURNS.append(Turns(os.environ[TURNS_FOLDER]))
    elif getattr(config.option, "numprocesses", None):
        os.environ[TURNS_FOLDER] = tempfile.mkdtemp(prefix="fedhet-test-turns-")
    else:
        os.environ.pop(TURNS_FOLDER, None)


def pytest_unconfigure(config):
    shutil.rmtree(GUARD.workdir, ignore_errors=True)
    if not hasattr(config, "workerinput") and TURNS_FOLDER in os.environ:
        shutil.rmtree(os.environ.pop(TURNS_FOLDER), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    """`LONGEST_FIRST`'s files first; the others, and each file's tests, as collected."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    marked = item.get_closest_marker("repo_state")
    turn = (nullcontext() if not TURNS else TURNS[0].writing() if marked
            else TURNS[0].reading(GUARD))
    with turn, GUARD.marked() if marked else GUARD.unmarked():
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """An unmarked test that touched the repository's state fails, saying what it touched."""
    report = (yield).get_result()
    if item.get_closest_marker("repo_state") or (call.when == "setup" and report.passed):
        return
    problems = GUARD.problems(listing=call.when == "teardown")
    if problems:
        report.outcome = "failed"
        report.longrepr = "\n".join([f"{item.nodeid} is not marked repo_state, yet it touched "
                                     "the repository's state:", *problems, HELP,
                                     str(report.longrepr or "")])


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors and models: one thread is fastest and immune to a busy machine.

    Module-scoped so that module-scoped fixtures (trained models) also build on one thread.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
