"""The sink killed without option ``stream``, and a new query on a reused checkpoint path.

See tests/spark/test_sink_kill.py for the kill points and the two session kinds; split
from it so that the suite's two workers share the kill tests.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import make_streams, order_ids_on, publish_orders
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec
from tests.spark._sink_drivers import CLASSIC, Drivers
from tests.spark._sink_helpers import (
    await_window_passed,
    stream_state,
)


@CLASSIC
def test_without_the_stream_option_a_restart_after_the_window_adds_nothing(
    nats_server: NatsServer, tmp_path: Path, mode: str, drivers: Drivers
) -> None:
    """Issue 37: the protection beyond the window does not depend on option ``stream``.

    The sink is not told its target; it finds OUT, the one stream that captures
    ``out.orders``. Killed after writing batch 1 and restarted once OUT's 1 s
    window has dropped those ids, the restart sends none of them again: the task
    reads what the killed attempt stored. Before, without ``stream`` the window
    check and this read were off, and the restart stored batch 1 a second time.
    """
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=1.0),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert drivers.run(url, checkpoint, "position", "before:1", stream="-") == -9
    assert stream_state(url, "OUT")["messages"] == 1000
    await_window_passed(url, "OUT", "out.probe")
    assert drivers.run(url, checkpoint, "position", "none", stream="-") == 0
    counts = order_ids_on(url, "OUT", "out.orders")
    duplicated = sorted(k for k, n in counts.items() if n > 1)
    missing = sorted({f"o{i:06d}" for i in range(2000)} - set(counts))
    assert (len(duplicated), len(missing)) == (0, 0), (duplicated[:5], missing[:5])
    assert stream_state(url, "OUT")["messages"] == 2000


# Four driver runs (250 s of CI time): make soak. make test keeps its parts: a new query
# on a reused path (test_sink.py) and the kills between the commits (test_sink_kill*.py).
@pytest.mark.soak
@CLASSIC
def test_new_query_on_a_reused_path_killed_between_the_commits(
    nats_server: NatsServer, tmp_path: Path, mode: str, drivers: Drivers
) -> None:
    """Issue 19: a deleted checkpoint's path reused within the commit stream's window.

    Query A runs to the end; its checkpoint is deleted and query B starts on the same
    path (a new query id, batch ids from 0 again, A's commit records and markers still
    inside the records stream's duplicate window). B dies once before the sink's commit
    of batch 0 (no commit record of B exists yet) and once after the sink recorded batch
    1 but before Spark's commit; each restart comes after the target's 1 s window.
    Neither A's control records nor A's rows may swallow B's: 0 duplicated, 0 missing.
    """
    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",), duplicate_window=1.0),
    )
    publish_orders(url, "IN", "in.orders", 2000)
    checkpoint = tmp_path / "chk"
    assert drivers.run(url, checkpoint, "position", "none", "out.old") == 0
    shutil.rmtree(checkpoint)
    assert drivers.run(url, checkpoint, "position", "before:0", "out.new") == -9
    assert len(order_ids_on(url, "OUT", "out.new")) == 500
    await_window_passed(url, "OUT", "out.probe")  # only the sink's records can help
    assert drivers.run(url, checkpoint, "position", "after:1", "out.new") == -9
    assert len(order_ids_on(url, "OUT", "out.new")) == 1000
    await_window_passed(url, "OUT", "out.probe")
    assert drivers.run(url, checkpoint, "position", "none", "out.new") == 0
    for subject in ("out.old", "out.new"):
        counts = order_ids_on(url, "OUT", subject)
        duplicated = sorted(k for k, n in counts.items() if n > 1)
        missing = sorted({f"o{i:06d}" for i in range(2000)} - set(counts))
        assert (len(duplicated), len(missing)) == (0, 0), (subject, duplicated[:5], missing[:5])
