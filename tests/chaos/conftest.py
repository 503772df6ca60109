"""Fixtures of the chaos tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.test_standby_takeover import Worker


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """The standby tests' worker processes: each one started is stopped at the end."""
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()
