"""The sink killed and restarted after the target's duplicate window expired.

See tests/spark/test_sink_kill.py for the kill points and the two session kinds; split
from it so that the suite's two workers share the kill tests.
"""

from __future__ import annotations

from pathlib import Path

from harness import make_streams, publish_orders
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.spark._sink_drivers import INGEST, Drivers
from tests.spark._sink_helpers import (
    await_window_passed,
    run_audit,
    stream_state,
)


@INGEST
def test_killed_outside_dedup_window(
    nats_server: NatsServer, tmp_path: Path, ingest: str, mode: str, drivers: Drivers
) -> None:
    """Position ids, a 1 s window and restarts after it expired: only the sink's records help."""
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(
            name="OUT",
            subjects=("out.>",),
            duplicate_window=1.0,
            allow_batched=ingest == "fast",
            allow_atomic=ingest == "atomic",
        ),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert drivers.run(url, checkpoint, "position", "before:1", ingest=ingest) == -9
    assert stream_state(url, "OUT")["messages"] == 1000
    await_window_passed(url, "OUT", "out.probe")  # the server can no longer help
    assert drivers.run(url, checkpoint, "position", "after:2", ingest=ingest) == -9
    assert stream_state(url, "OUT")["messages"] == 1500
    await_window_passed(url, "OUT", "out.probe")
    assert drivers.run(url, checkpoint, "position", "none", ingest=ingest) == 0
    report = run_audit(url, "IN", "stream:OUT", key="field:order_id")
    assert report.ok, report.to_dict()
    assert stream_state(url, "OUT")["messages"] == 2000
