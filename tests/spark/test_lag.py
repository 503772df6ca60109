"""oncestream.spark.lag: messages behind per stream from a query's progress (issue 12)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from oncestream.spark import lag

pytestmark = pytest.mark.timeout(240)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_lag.py"


def test_lag_from_progress_dict() -> None:
    progress = {
        "sources": [
            {
                "endOffset": '{"ORDERS": 40, "RETURNS": 7, "stream.created": {"ORDERS": "t"}}',
                "latestOffset": '{"ORDERS": 100, "RETURNS": 7}',
            },
            {"endOffset": {"topic": {"0": 5}}, "latestOffset": {"topic": {"0": 9}}},  # not ours
            {"endOffset": None, "latestOffset": None},
        ]
    }
    assert lag(progress) == {"ORDERS": 60, "RETURNS": 0}
    assert lag(None) == {}
    assert lag({"sources": []}) == {}


def test_example_prints_lag_until_caught_up(spark, capsys) -> None:  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("spark_lag_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    readings = example.run(messages=6000, per_batch=1000)  # local_session(): the shared session
    out = capsys.readouterr().out
    print(out)
    assert readings[-1] == {"ORDERS": 0}
    assert any(r["ORDERS"] > 0 for r in readings), readings  # it was behind while running
    assert "behind {'ORDERS':" in out


def test_lag_and_query_metrics_on_classic_and_connect(spark_job, nats_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``lag`` and ``instrument_query`` read a query's progress, which Connect also gives.

    Nothing of theirs reads JVM state; the sink's counters come from its commit
    records, which carry the query id the tasks see under Connect too.
    """
    from harness import make_streams, publish_orders
    from oncestream.streams import StreamSpec

    url = nats_server.url
    make_streams(
        url,
        StreamSpec(name="IN", subjects=("in.>",)),
        StreamSpec(name="OUT", subjects=("out.>",)),
    )
    publish_orders(url, "IN", "in.orders", 2500)
    result = spark_job("query_metrics", url=url, checkpoint=str(tmp_path / "chk"))
    assert result["lag"] == {"IN": 0}
    assert result["lag_messages"] == {"IN": 0.0}
    assert result["source_rows"] == {"IN": 2500}
    assert result["sink_rows"] == {"OUT": 2500}
