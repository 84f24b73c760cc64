"""Fixtures shared by the unit tests, and the guard of the `repo_state` marker
(tests/repo_state.py)."""

import shutil
import sys
import tempfile

import pytest
import torch

from repo_state import HELP, Guard

GUARD = Guard(tempfile.mkdtemp(prefix="fedhet-tests-"))
sys.addaudithook(GUARD.audit)


def pytest_unconfigure(config):
    shutil.rmtree(GUARD.workdir, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with GUARD.marked() if item.get_closest_marker("repo_state") else GUARD.unmarked():
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
