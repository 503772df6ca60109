"""The demo's summary counts every publish, the Publisher's own re-sends included (issue 22)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from oncestream.audit import AuditReport, OutputReport
from oncestream.demo._producer import ProducerReport
from oncestream.demo._runner import DemoConfig, DemoResult
from oncestream.demo._summary import print_summary, summary_dict


def _result() -> DemoResult:
    # 200,000 orders, every 50th sent twice, 2,000 re-published after the producer's
    # restart, 1,020 re-sent by the Publisher after the server came back.
    producer = ProducerReport(
        orders=200_000,
        sent=200_000 + 4_000 + 2_000,
        duplicates_dropped=7_020,
        resent_on_purpose=4_000,
        replayed_after_restart=2_000,
        retried_by_publisher=1_020,
        restarts=1,
        seconds=40.0,
    )
    output = OutputReport(
        output="stream:ORDERS_ENRICHED", rows=200_000, found=200_000, missing=0,
        duplicated=0, duplicate_rows=0, unexpected=0,
    )  # fmt: skip
    audit = AuditReport(
        input="ORDERS", key="field:order_id", input_rows=200_000, expected=200_000,
        input_duplicated=0, outputs=[output],
    )  # fmt: skip
    return DemoResult(
        config=DemoConfig(),
        data_dir=Path("/nonexistent"),
        producer=producer,
        audit=audit,
        stored_orders=200_000,
        revenue=[{"region": "eu", "orders": 1, "revenue": "1.00", "ok": True}],
        faults=[
            "killed streaming query 'enriched' in the middle of a micro-batch",
            "SIGKILLed the nats-server",
        ],
    )


def test_publishes_sent_include_the_publishers_resends() -> None:
    result = _result()
    data = summary_dict(result)
    assert data["publishes_sent"] == 207_020
    assert data["resent_by_publisher"] == 1_020
    out = io.StringIO()  # not a terminal, 80 columns: a CI log
    print_summary(result, Console(file=out, width=80, force_terminal=False))
    text = out.getvalue()
    cells = [[c.strip() for c in line.split("│")] for line in text.splitlines()]
    lines = {row[2]: row[3] for row in cells if len(row) == 6}  # panel │ label │ value │ panel
    assert lines["publishes sent (with re-sends)"] == "207,020"
    assert lines["re-sent by the Publisher (ack timeouts, reconnects)"] == "1,020"
    assert lines["deliberate duplicate re-sends"] == "4,000"
    assert lines["faults injected"] == "; ".join(result.faults)  # not split over lines
