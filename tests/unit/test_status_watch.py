"""`oncestream status --watch`: lag and the time to catch up from per-second rates."""

from __future__ import annotations

import math

from oncestream.cli._watch import add_eta, add_rates, eta_text


def _consumer(ack_floor: int, pending: int, ack_pending: int = 0) -> dict[str, object]:
    return {
        "consumer": "c",
        "num_pending": pending,
        "ack_pending": ack_pending,
        "ack_floor": ack_floor,
        "delivered": ack_floor + ack_pending,
    }


def test_eta_is_lag_over_the_acked_rate() -> None:
    before = {"c": _consumer(ack_floor=100, pending=1000)}
    rows = add_rates(
        [_consumer(ack_floor=300, pending=780, ack_pending=20)], before, 2.0, "consumer"
    )
    (row,) = add_eta(rows)
    assert row["acked/s"] == 100.0
    assert row["lag"] == 800
    assert row["eta_seconds"] == 8.0
    assert eta_text(row["eta_seconds"]) == "8s"


def test_caught_up_stalled_and_unmeasured() -> None:
    (done,) = add_eta([{**_consumer(50, 0), "acked/s": 0.0}])
    assert done["lag"] == 0 and done["eta_seconds"] == 0.0
    assert eta_text(done["eta_seconds"]) == "caught up"
    (stalled,) = add_eta([{**_consumer(50, 10), "acked/s": 0.0}])
    assert stalled["eta_seconds"] is None and eta_text(None) == "stalled"
    (first,) = add_eta([{**_consumer(50, 10), "acked/s": 5.0}], measured=False)
    assert first["eta_seconds"] is None and eta_text(None, measured=False) == "-"


def test_eta_text_units() -> None:
    assert eta_text(0.2) == "1s"
    assert eta_text(59.0) == "59s"
    assert eta_text(185.0) == "3m05s"
    assert eta_text(7800.0) == "2h10m"
    assert eta_text(math.nan) == "stalled"
