"""A Publisher whose window guard cannot run says so (issue 37, item 3: safe or loud).

The guard checks the retry horizon against the target stream's duplicate
window in ``start()``; without ``PublisherOptions.stream`` there is no
stream to check, and nothing used to say that a late retry could then be
stored twice.
"""

from __future__ import annotations

import logging

import pytest

from oncestream import Connection, Publisher, PublisherOptions


async def test_a_publisher_without_stream_warns_that_the_window_is_unchecked(
    conn: Connection, make_stream: object, caplog: pytest.LogCaptureFixture
) -> None:
    await make_stream("ORDERS", ("orders.>",))  # type: ignore[operator]
    caplog.set_level(logging.WARNING, logger="oncestream.publish")
    # A horizon of its own: the warning is logged once per process and horizon.
    unchecked = PublisherOptions(ack_timeout=0.41, max_attempts=2)
    for options in (
        PublisherOptions(stream="ORDERS", ack_timeout=0.41, max_attempts=2),
        PublisherOptions(ack_timeout=0.41, max_attempts=2, check_window=False),
    ):
        async with Publisher(conn, options):
            pass
    assert "duplicate_window" not in caplog.text
    async with Publisher(conn, unchecked) as pub:
        await (await pub.publish("orders.eu", b"x", msg_id="o-1"))
    warnings = [r for r in caplog.records if "without options.stream" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    message = warnings[0].getMessage()
    assert f"retry horizon ({unchecked.retry_horizon:g}s)" in message
    assert "PublisherOptions(stream=...)" in message and "check_window=False" in message
