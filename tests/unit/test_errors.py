"""JetStream API errors become typed exceptions that keep the server's codes."""

from __future__ import annotations

import pytest

from oncestream import JetStreamError, StreamNotFound, WrongLastSequence
from oncestream._errors import jetstream_error


@pytest.mark.parametrize(
    ("err_code", "cls"),
    [
        (10071, WrongLastSequence),
        # "wrong last sequence" as a clustered stream answers it (seen by torture/)
        (10164, WrongLastSequence),
        (10059, StreamNotFound),
        (99999, JetStreamError),
    ],
)
def test_mapping_by_err_code(err_code: int, cls: type[JetStreamError]) -> None:
    exc = jetstream_error({"code": 400, "err_code": err_code, "description": "boom"})
    assert type(exc) is cls
    assert (exc.code, exc.err_code, exc.description) == (400, err_code, "boom")
    assert str(err_code) in str(exc)
