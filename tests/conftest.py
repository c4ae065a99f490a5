"""Shared fixtures."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_history(tmp_path_factory, monkeypatch):
    """Every test gets its own empty performance history: no test reads or writes the user's."""
    monkeypatch.setenv("STREAMMAP_HISTORY", str(tmp_path_factory.mktemp("history")))
