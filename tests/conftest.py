"""Fixtures shared by the unit tests."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors and models: one thread is fastest and immune to a busy machine.

    Module-scoped so that module-scoped fixtures (trained models) also build on one thread.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
