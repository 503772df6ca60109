"""The ledger registry's rules (pure logic; tests/integration/test_ledger_registry.py runs them)."""

from __future__ import annotations

import pytest

from oncestream import ConfigError
from oncestream.ledger import Registration
from oncestream.process._registry import check_registry

T1, T2 = "2026-01-01T00:00:00.1Z", "2026-02-01T00:00:00.2Z"


def _reg(consumer: str, *filters: str, created: str = T1) -> Registration:
    return Registration("PR", consumer, filters, created, 0)


@pytest.mark.parametrize(
    ("mine", "other"),
    [(("pr.eu",), ("pr.us",)), (("pr.eu.*",), ("pr.us.>",)), (("pr.a", "pr.b"), ("pr.c",))],
)
def test_disjoint_filters_share_a_ledger(mine: tuple[str, ...], other: tuple[str, ...]) -> None:
    check_registry(_reg("a", *mine), [_reg("b", *other)])


@pytest.mark.parametrize(
    ("mine", "other"),
    [((), ()), ((), ("pr.us",)), (("pr.>",), ("pr.eu",)), (("pr.*.x",), ("pr.eu.*",))],
)
def test_overlapping_filters_are_refused(mine: tuple[str, ...], other: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="one ledger per consumer of a stream"):
        check_registry(_reg("a", *mine), [_reg("b", *other)])


def test_the_same_consumer_again_is_no_neighbour() -> None:
    check_registry(_reg("a"), [_reg("a", "pr.x")])


def test_another_life_of_the_stream_is_refused_also_for_the_same_consumer() -> None:
    with pytest.raises(ConfigError, match=f"created at {T2}.*created at {T1}"):
        check_registry(_reg("a", created=T2), [_reg("a", created=T1)])
