"""docs/spark-source.md, "A query that refuses to start after a kill in its first batch",
on a classic session and through Spark Connect (the job: tests/spark/_leftover_job.py).

PySpark 4.1+ refuse a restart over Spark's own first-batch leftover (the campaign of
2026-11-30, trial 77: docs/guarantees.md, finding 34); the function the document gives
removes it, and the query then reads every message once. 4.0 has no such check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from oncestream.server import NatsServer
from oncestream.spark._compat import SPARK_VERSION
from oncestream.streams import StreamSpec
from tests.spark._jobs import publish_messages

pytestmark = pytest.mark.timeout(300)


def test_a_first_batch_leftover_is_refused_then_cleared(
    spark_job: Any, nats_server: NatsServer, tmp_path: Path
) -> None:
    from harness import make_streams

    stream = f"LEFT_{spark_job.mode.upper()}"
    make_streams(nats_server.url, StreamSpec(name=stream, subjects=(f"{stream.lower()}.>",)))
    publish_messages(nats_server.url, f"{stream.lower()}.a", 20)
    got = spark_job("checkpoint_leftover", url=nats_server.url, stream=stream, work=str(tmp_path))
    if SPARK_VERSION >= (4, 1):
        assert got["refused"] is not None, got
        assert "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY" in got["refused"], got["refused"]
        assert got["removed"] == got["leftovers"]
        assert got["again"] is None, got["again"]
    else:
        assert got["refused"] is None, got["refused"]  # 4.0: the leftover is ignored
    assert got["rows"] == list(range(1, 21))
    assert got["later"] == []  # a planned batch now: the function leaves the checkpoint alone
