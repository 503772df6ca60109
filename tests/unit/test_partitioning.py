"""Partitioned streams: the transform rendered, parsed back, and the mapping mirrored in Python.

The mapping itself is checked against a real server in
tests/integration/test_partitioned_stream.py; here the pure parts.
"""

from __future__ import annotations

import re

import pytest

from oncestream import ConfigError
from oncestream.streams import Partitioning, StreamSpec
from oncestream.streams._internal import fnv1a32


def test_fnv1a32_matches_the_reference_vectors() -> None:
    # Go's hash/fnv New32a: "" -> offset basis, "a" -> 0xe40c292c, "foobar" -> 0xbf9cf968.
    assert fnv1a32(b"") == 0x811C9DC5
    assert fnv1a32(b"a") == 0xE40C292C
    assert fnv1a32(b"foobar") == 0xBF9CF968


def test_transform_renders_and_parses_back() -> None:
    p = Partitioning(subjects="orders.*.*", partitions=8, key=(2,))
    t = p.transform()
    assert t == {
        "src": "orders.*.*",
        "dest": "{{partition(8,2)}}.orders.{{wildcard(1)}}.{{wildcard(2)}}",
    }
    assert Partitioning.from_config({"subject_transform": t}) == p
    whole = Partitioning(subjects="q.>", partitions=4)
    assert whole.transform()["dest"] == "{{partition(4)}}.q.>"
    assert Partitioning.from_config({"subject_transform": whole.transform()}) == whole


def test_orbit_static_layout_and_foreign_transforms() -> None:
    # orbit.go pcgroups' static setup script: the same layout, recognised.
    orbit = {"src": "foo.*", "dest": "{{partition(10,1)}}.foo.{{wildcard(1)}}"}
    assert Partitioning.from_config({"subject_transform": orbit}) == Partitioning(
        subjects="foo.*", partitions=10, key=(1,)
    )
    legacy = {"src": "foo.*", "dest": "{{ Partition(3, 1) }}.foo.$1"}
    assert Partitioning.from_config({"subject_transform": legacy}) is not None
    for foreign in (
        {"src": "foo.*", "dest": "bar.{{wildcard(1)}}"},  # no partition
        {"src": "foo.*", "dest": "{{partition(3,1)}}.other.{{wildcard(1)}}"},  # renamed
        {"src": "foo.*.*", "dest": "{{partition(3,1)}}.foo.{{wildcard(2)}}.{{wildcard(1)}}"},
    ):
        assert Partitioning.from_config({"subject_transform": foreign}) is None
    assert Partitioning.from_config({}) is None


def test_subjects_map_and_come_back() -> None:
    p = Partitioning(subjects="orders.*.*", partitions=8, key=(2,))
    part = fnv1a32(b"k17") % 8
    assert p.partition_of("orders.eu.k17") == part
    assert p.partition_of("orders.us.k17") == part  # the key is the third token only
    assert p.stored_subject("orders.eu.k17") == f"{part}.orders.eu.k17"
    assert p.stored_subject("elsewhere.x") == "elsewhere.x"  # outside: stored as published
    assert p.published_subject(f"{part}.orders.eu.k17") == "orders.eu.k17"
    assert p.partition_of_stored(f"{part}.orders.eu.k17") == part
    assert p.partition_of_stored("orders.eu.k17") is None  # stored before partitioning
    assert p.filter_for(3) == "3.orders.*.*"
    assert p.stored_filter("orders.eu.>") == "*.orders.eu.>"
    assert p.stored_filter("3.orders.*.*") == "3.orders.*.*"
    two = Partitioning(subjects="a.*.*", partitions=5, key=(1, 2))
    assert two.partition_of("a.x.y") == fnv1a32(b"xy") % 5  # concatenated, no separator
    whole = Partitioning(subjects="q.>", partitions=4)
    assert whole.partition_of("q.a.b") == fnv1a32(b"q.a.b") % 4


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"subjects": "orders.x", "partitions": 4}, "no wildcard"),
        ({"subjects": "orders.*", "partitions": 0}, "from 1 to 1024"),
        ({"subjects": "orders.*", "partitions": 2000}, "from 1 to 1024"),
        ({"subjects": "orders.*", "partitions": True}, "from 1 to 1024"),
        ({"subjects": "orders.*", "partitions": 4, "key": (2,)}, "allowed: 1..1"),
        ({"subjects": "orders.>", "partitions": 4, "key": (1,)}, "'>' cannot be a key"),
        ({"subjects": "orders.*.*", "partitions": 4, "key": (1, 1)}, "once"),
        ({"subjects": "orders..x", "partitions": 4}, "subject"),
    ],
)
def test_bad_partitioning_is_refused_naming_the_value(kwargs: dict, needle: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=needle):
        Partitioning(**kwargs)
    with pytest.raises(ConfigError):
        Partitioning(subjects="o.*", partitions=4).filter_for(4)


def test_stream_spec_partitions() -> None:
    spec = StreamSpec(name="ORDERS", subjects=("orders.*",), partitions=8, partition_key=(1,))
    assert spec.to_api()["subject_transform"]["dest"] == "{{partition(8,1)}}.orders.{{wildcard(1)}}"
    assert "subject_transform" not in StreamSpec(name="O", subjects=("o.*",)).to_api()
    with pytest.raises(ConfigError, match="exactly one subject pattern"):
        StreamSpec(name="O", subjects=("a.*", "b.*"), partitions=2)
    with pytest.raises(ConfigError, match="partition_key needs partitions"):
        StreamSpec(name="O", subjects=("a.*",), partition_key=(1,))
    with pytest.raises(ConfigError, match="do not also give one in extra"):
        StreamSpec(name="O", subjects=("a.*",), partitions=2, extra={"subject_transform": {}})


@pytest.mark.parametrize("partitions", [False, 0.0, None, 4.0, "4", -1, 1025])
def test_stream_spec_partitions_must_be_a_whole_number(partitions: object) -> None:
    """False, 0.0 and None were taken as "not partitioned" (None blamed partition_key)."""
    with pytest.raises(ConfigError, match=rf"from 1 to 1024.*got {re.escape(repr(partitions))}"):
        StreamSpec(name="O", subjects=("a.*",), partitions=partitions)  # type: ignore[arg-type]
