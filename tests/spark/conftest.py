"""Fixtures of the Spark tests that several files share."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark._sink_drivers import Drivers


@pytest.fixture
def drivers(request: pytest.FixtureRequest, tmp_path: Path) -> Drivers:
    """The sink's driver job, on the session kind the test's ``mode`` names."""
    return Drivers(request.node.callspec.params["mode"], request, tmp_path)
