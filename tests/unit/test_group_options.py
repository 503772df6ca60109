"""GroupOptions and the partition consumers' discovery: validation and naming (pure)."""

from __future__ import annotations

import pytest

from oncestream import ConfigError, GroupOptions, ProcessorOptions
from oncestream.process import partition_consumer, partition_ledgers
from oncestream.process._group_options import check_partition_options
from oncestream.process._internal import find_groups
from oncestream.streams import Partitioning


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"member": "a.b"}, "member"),
        ({"member_ttl": 0.5}, "whole seconds"),
        ({"member_ttl": 2.5}, "whole seconds"),
        ({"heartbeat": 2, "member_ttl": 3}, "twice the heartbeat"),
        ({"heartbeat": 0.01}, "at least 0.1s"),
        ({"static": (4, 4)}, "0 <= index < count"),
        ({"static": (0,)}, r"\(index, count\)"),
        ({"static": (True, 2)}, "two whole numbers"),
        ({"bucket": "a.b"}, "bucket must be"),
        ({"after": "x y"}, "after"),
    ],
)
def test_bad_group_options_are_refused_naming_the_value(kwargs: dict, needle: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=needle):
        GroupOptions(**kwargs)


def test_defaults_and_names() -> None:
    options = GroupOptions(member="host-a", member_ttl="3s")
    assert options.member_ttl == 3.0 and options.name == "host-a"
    assert GroupOptions().name  # <host>-<pid>
    assert partition_consumer("billing", 3) == "billing-p3"
    ledgers = partition_ledgers("sqlite:///billing-{partition}.db")
    assert ledgers(3).path == "billing-3.db"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError):
        partition_ledgers("mysql://nope/{partition}")


@pytest.mark.parametrize(
    "options",
    [
        ProcessorOptions(filter_subject="a.b"),
        ProcessorOptions(priority_group="g"),
        ProcessorOptions(bind=True),
    ],
)
def test_a_member_sets_the_partition_options_itself(options: ProcessorOptions) -> None:
    with pytest.raises(ConfigError, match="must leave"):
        check_partition_options(options)


def test_a_member_may_ack_each_batch_once() -> None:
    check_partition_options(ProcessorOptions(ack_policy="all"))  # one pinned member a partition


def test_groups_are_found_by_name_and_filter() -> None:
    layout = Partitioning(subjects="o.*", partitions=2, key=(1,))

    def info(name: str, filter_subject: str) -> dict:  # type: ignore[type-arg]
        return {"name": name, "config": {"durable_name": name, "filter_subject": filter_subject}}

    consumers = [
        info("billing-p0", "0.o.*"),
        info("billing-p1", "1.o.*"),
        info("other-p1", "0.o.*"),  # named for partition 1, filtering partition 0: not one
        info("billing-p7", "7.o.*"),  # no partition 7
        info("plain", "o.*"),
    ]
    groups = find_groups(layout, consumers)
    assert {g: sorted(p) for g, p in groups.items()} == {"billing": [0, 1]}


def test_a_group_name_too_long_for_its_partition_consumers_says_so() -> None:
    """The message named '<group>-p1023' as the bad consumer name, not the group's limit."""
    from oncestream import ConnectOptions, GroupMember

    with pytest.raises(ConfigError, match=r"group: 'x{250}' is too long.*at most 249 bytes"):
        GroupMember(
            ConnectOptions(servers=("nats://127.0.0.1:1",)), "S", "x" * 250,
            lambda msg, tx: None, ledger="sqlite:///a.db",
        )  # fmt: skip
    GroupMember(
        ConnectOptions(servers=("nats://127.0.0.1:1",)), "S", "x" * 249,
        lambda msg, tx: None, ledger="sqlite:///a.db",
    )  # fmt: skip
