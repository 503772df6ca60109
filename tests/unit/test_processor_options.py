"""Pure-logic checks: options validation and ack-subject parsing."""

from __future__ import annotations

import pytest

from oncestream import ConfigError, JetStreamError, ProcessorOptions, PullOptions
from oncestream._message import parse_metadata as parse_ack_subject


def test_parse_v1_ack_subject() -> None:
    md = parse_ack_subject("$JS.ACK.ORDERS.billing.3.1042.77.1700000000000000000.12")
    assert (md.stream, md.consumer, md.num_delivered, md.stream_seq, md.consumer_seq) == (
        "ORDERS",
        "billing",
        3,
        1042,
        77,
    )
    assert md.timestamp_ns == 1700000000000000000 and md.num_pending == 12 and md.domain is None


def test_parse_v2_ack_subject_with_domain_and_token() -> None:
    md = parse_ack_subject("$JS.ACK.hub.ACCHASH.ORDERS.billing.1.5.6.1700000000000000000.0.rnd")
    assert (md.domain, md.stream, md.stream_seq, md.consumer_seq, md.num_pending) == (
        "hub",
        "ORDERS",
        5,
        6,
        0,
    )
    md = parse_ack_subject("$JS.ACK._.ACCHASH.ORDERS.billing.2.5.6.1700000000000000000.0")
    assert md.domain is None and md.num_delivered == 2


@pytest.mark.parametrize("bad", ["", "foo.bar", "$JS.ACK.a.b.c", "$JS.API.X.a.b.1.2.3.4.5"])
def test_parse_rejects_other_subjects(bad: str) -> None:
    with pytest.raises(JetStreamError):
        parse_ack_subject(bad)


def test_pull_options_defaults_and_errors() -> None:
    opts = PullOptions()
    assert opts.batch == 500 and opts.heartbeat == 15.0
    assert PullOptions(expires="10s").heartbeat == 5.0
    with pytest.raises(ConfigError, match="batch"):
        PullOptions(batch=0)
    with pytest.raises(ConfigError, match="threshold"):
        PullOptions(threshold=0)
    with pytest.raises(ConfigError, match="idle_heartbeat"):
        PullOptions(expires=4, idle_heartbeat=3)


def test_processor_options_validation() -> None:
    assert ProcessorOptions(backoff=("1s", "250ms")).backoff == (1.0, 0.25)
    with pytest.raises(ConfigError, match="max_deliver"):
        ProcessorOptions(max_deliver=0)
    with pytest.raises(ConfigError, match="max_ack_pending"):
        ProcessorOptions(batch=1000, max_ack_pending=10)
    with pytest.raises(ConfigError, match="dead_letter_subject needs"):
        ProcessorOptions(dead_letter_subject="x.y")
    with pytest.raises(ConfigError, match="backoff"):
        ProcessorOptions(backoff=())


def test_prunable_floor_is_one_seen_grace_seconds_ago() -> None:
    from oncestream.process._setup import FloorHistory

    floors = FloorHistory(grace=10)
    assert floors.prunable(100, now=0) == 0  # nothing old enough yet
    assert floors.prunable(200, now=5) == 0
    assert floors.prunable(300, now=10) == 100  # the floor seen at t=0
    assert floors.prunable(400, now=16) == 200  # seen at t=5; 300 (t=10) is too recent
    assert floors.prunable(400, now=17) == 200
    assert floors.prunable(500, now=40) == 400


def test_floors_seen_under_another_filter_are_not_pruned_to() -> None:
    from oncestream.process._setup import FloorHistory

    floors = FloorHistory(grace=10)
    assert floors.prunable(100, now=0, filters=("a.>",)) == 0
    assert floors.prunable(200, now=10, filters=("a.>",)) == 100
    # The filter changed: a floor of the old filter says nothing of the new one's messages.
    assert floors.prunable(250, now=11, filters=("a.>", "b.>")) == 0
    assert floors.prunable(300, now=21, filters=("a.>", "b.>")) == 250


def test_ack_policy_is_explicit_or_all() -> None:
    assert ProcessorOptions().ack_policy == "explicit" and not ProcessorOptions().ack_all
    assert ProcessorOptions(ack_policy="all").ack_all
    with pytest.raises(ConfigError, match="ack_policy must be 'explicit' or 'all', got 'none'"):
        ProcessorOptions(ack_policy="none")


def test_ack_policy_all_needs_the_consumer_api_and_one_instance() -> None:
    with pytest.raises(ConfigError, match="cannot be combined with bind=True"):
        ProcessorOptions(ack_policy="all", bind=True)
    with pytest.raises(ConfigError, match="policy 'overflow' delivers to several at once"):
        ProcessorOptions(ack_policy="all", priority_group="g", policy="overflow", min_pending=5)
    # The pinned one of a priority group applies alone (its takeover fences and resets).
    assert ProcessorOptions(ack_policy="all", priority_group="g").ack_all
