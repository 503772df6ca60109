"""Start-time checks and log rate limiting of the Processor (issue 10)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from oncestream import ConfigError
from oncestream._logthrottle import LogThrottle
from oncestream.process._setup import check_handler, subject_matches, subjects_overlap


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("WORK.>", "WORK.ORDERS", True),
        ("WORK.*", "WORK.ORDERS", True),
        ("WORK.*", "WORK.ORDERS.x", False),
        ("work.>", "WORK.ORDERS", False),
        ("WORK.ORDERS", "WORK.ORDERS", True),
        ("WORK", "WORK.ORDERS", False),
        ("WORK.>", "WORK", False),
        (">", "a.b", True),
    ],
)
def test_subject_matches(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


def _two(msg: Any, tx: Any) -> None: ...
def _defaults(msg: Any, tx: Any = None, extra: int = 0) -> None: ...
def _varargs(*args: Any) -> None: ...
def _one(msg: Any) -> None: ...
def _three(msg: Any, tx: Any, more: Any) -> None: ...


class _Callable:
    def __call__(self, msg: Any, tx: Any) -> None: ...


@pytest.mark.parametrize("handler", [_two, _defaults, _varargs, _Callable(), print])
def test_handlers_taking_msg_and_tx_pass(handler: Any) -> None:
    check_handler(handler, "handler")


@pytest.mark.parametrize("handler", [_one, _three, lambda: None, 42])
def test_other_handlers_are_refused(handler: Any) -> None:
    with pytest.raises(ConfigError, match=r"handler must"):
        check_handler(handler, "handler")


def test_identical_failures_are_summarised(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    throttle = LogThrottle(logging.getLogger("t"), burst=3, interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="t"):
        written = [throttle.log(logging.INFO, "E: x", "seq %d: E: x", i) for i in range(1000)]
        assert sum(written) == 3 and len(caplog.records) == 3
        now[0] = 11.0
        assert throttle.log(logging.INFO, "E: x", "seq %d: E: x", 1000)
        assert "998 more identical failures" in caplog.records[-1].getMessage()
        # A different failure is logged at once.
        assert throttle.log(logging.INFO, "E: y", "seq %d: E: y", 1)
    assert len(caplog.records) == 5


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("s.>", "s.x", True),
        ("s.>", "other.>", False),
        ("s.*", "s.x.y", False),
        ("s.*.y", "s.x.*", True),
        (">", "a", True),
        ("a.>", "a", False),
        ("a.b", "a.b", True),
    ],
)
def test_subjects_overlap(a: str, b: str, expected: bool) -> None:
    assert subjects_overlap(a, b) is expected
    assert subjects_overlap(b, a) is expected
