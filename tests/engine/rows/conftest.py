"""The batched engine's tests run torch on one thread."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The VM's two cores are shared; two torch threads thrash on the tiny model's small
    ops (a tiny Mimi frame: ~20 ms on one thread, ~400 ms on two under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
