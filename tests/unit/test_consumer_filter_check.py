"""`consumer add|edit --filter` on a partitioned stream takes its stored subjects (pure)."""

from __future__ import annotations

import pytest

from oncestream import ConfigError, StreamSpec
from oncestream.cli._consumer import check_filter

SPEC = StreamSpec(name="ORDERS", subjects=("orders.*",), partitions=4, partition_key=(1,))
INFO = {"config": SPEC.to_api((2, 14, 0))}


@pytest.mark.parametrize("wanted", ["3.orders.*", "*.orders.k7", "0.orders.k1", "orders.*"])
def test_partition_and_pre_partitioning_filters_are_taken(wanted: str) -> None:
    check_filter(INFO, "ORDERS", wanted)  # orders.*: what the stream stored before


@pytest.mark.parametrize("wanted", ["other.*", "3.other.*", "3.orders.a.b"])
def test_filters_outside_are_refused(wanted: str) -> None:
    with pytest.raises(ConfigError, match=f"--filter '{wanted}' matches nothing"):
        check_filter(INFO, "ORDERS", wanted)
