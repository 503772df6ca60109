"""The bookkeeping behind `oncestream publish` re-runs: confirmed lines and scan floors."""

from __future__ import annotations

import asyncio

import pytest

from oncestream import ConfigError
from oncestream.load._input import Record, RecordError, SubjectTemplate, record_id
from oncestream.load._progress import PublishProgress, progress_key
from oncestream.load._run import Confirmed
from oncestream.publish import PubAck


def _done(loop: asyncio.AbstractEventLoop, seq: int | None) -> asyncio.Future[PubAck]:
    future: asyncio.Future[PubAck] = loop.create_future()
    if seq is not None:
        future.set_result(PubAck("T", seq))
    return future


async def test_confirmed_advances_only_over_contiguous_acks() -> None:
    loop = asyncio.get_running_loop()
    confirmed = Confirmed(0, 100, 0, 0)
    first, second, third = _done(loop, 101), _done(loop, None), _done(loop, 103)
    confirmed.add(1, first, 100)
    confirmed.add(2, second, 100)
    confirmed.skip(3)  # a malformed line, skipped
    confirmed.add(4, third, 101)
    confirmed.advance(103)
    assert confirmed.line == 1 and confirmed.first_unconfirmed == 2
    assert confirmed.scan_from == 100  # line 2 was sent when 100 was the highest ack
    second.set_exception(RuntimeError("no ack"))
    confirmed.advance(103)
    assert confirmed.line == 1, "a failed line stays unconfirmed"


async def test_lines_an_earlier_run_may_have_sent_keep_its_floor() -> None:
    loop = asyncio.get_running_loop()
    # Resumed after line 10; the earlier run reserved up to line 50 with floor 40.
    confirmed = Confirmed(10, 500, 50, 40)
    assert confirmed.scan_from == 40
    confirmed.add(11, _done(loop, 501), 500)
    confirmed.advance(501)
    assert confirmed.line == 11 and confirmed.scan_from == 40
    confirmed.add(12, _done(loop, None), 501)
    assert confirmed.scan_from == 40
    beyond = Confirmed(60, 500, 50, 40)
    assert beyond.scan_from == 500


def test_subject_template_filter_and_errors() -> None:
    assert SubjectTemplate("orders.{region}").filter == "orders.*"
    assert SubjectTemplate("o.eu{n}.x").filter == "o.*.x"
    assert SubjectTemplate("plain.x").filter == "plain.x"
    for bad in ("t2.{region", "t2.}", "", "t2..x", "t2.", "t2.{a.b}", "t2.{}", "t2.{a!r}"):
        with pytest.raises(ConfigError, match="--subject"):
            SubjectTemplate(bad, "--subject")
        with pytest.raises(ConfigError, match=r"LoadOptions\.subject"):
            SubjectTemplate(bad)


def test_record_ids() -> None:
    assert record_id(Record(1, {"id": 17}, b""), "id") == "17"
    assert record_id(Record(1, {"id": "a"}, b""), "id") == "a"
    for value in (None, "", " ", True, 1.5, {"a": 1}, [1], "a\nb"):
        with pytest.raises(RecordError):
            record_id(Record(3, {"id": value}, b""), "id")
    assert len(record_id(Record(1, {"x": 1}, b""), None)) == 64


def test_progress_record_round_trip_and_key() -> None:
    record = PublishProgress(
        stream="T", stream_created="c", file="/f", sha256="h", size=1, subject="t.x",
        ids="content", line=3, scan_from=9, reserved=20, done=False, run="r",
    )  # fmt: skip
    assert PublishProgress.from_json(record.to_json()) == record
    assert progress_key("T", "/f") != progress_key("T", "/g") != progress_key("U", "/f")
    assert len(progress_key("T", "/f")) == 32
