"""The Ray folder's fixture: a fake CuPy with two GPUs for the device actors that run in-process."""

import pytest

from streammap.runtime.context import current_device, set_current_device


@pytest.fixture
def cp(fake_cupy):
    """A fake CuPy with 2 GPUs, installed as ``cupy``; the process's current device is restored after."""
    fake = fake_cupy(2)
    before = current_device()
    yield fake
    set_current_device(before)           # a DeviceActor made in this process sets it
