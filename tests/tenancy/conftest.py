"""Fixtures of the job-service tests."""

from __future__ import annotations

import pytest

from tests.tenancy.test_job_service import Service, write_setup


@pytest.fixture
def service(tmp_path):
    """A running job service (its own process) over the set-up ``write_setup`` writes in ``tmp_path``."""
    write_setup(tmp_path)
    svc = Service(tmp_path)
    yield svc
    svc.stop()
