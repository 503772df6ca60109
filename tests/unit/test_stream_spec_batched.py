"""StreamSpec's allow_batched default: fast-ingest batches where the server takes them (issue 40).

The release decides only ``allow_batched=None`` (the default); a mirror never gets it
(it takes no publishes); True and False are kept as given.
"""

from __future__ import annotations

import pytest

from oncestream.streams import StreamSource, StreamSpec
from oncestream.streams._internal import FAST_INGEST_SINCE


@pytest.mark.parametrize(
    ("server", "expected"),
    [((2, 14, 0), True), ((2, 15, 1), True), ((3, 0, 0), True), ((2, 13, 9), False), (None, False)],
)
def test_the_default_follows_the_server_release(
    server: tuple[int, ...] | None, expected: bool
) -> None:
    spec = StreamSpec(name="S", subjects=("s.>",))
    assert spec.allow_batched is None and spec.batched_on(server) is expected
    assert spec.to_api(server).get("allow_batched", False) is expected
    assert FAST_INGEST_SINCE == (2, 14)


def test_a_mirror_never_and_explicit_values_always() -> None:
    mirror = StreamSpec(name="M", mirror=StreamSource(name="S"))
    assert not mirror.batched_on((2, 15, 1)) and "allow_batched" not in mirror.to_api((2, 15, 1))
    off = StreamSpec(name="S", subjects=("s.>",), allow_batched=False)
    on = StreamSpec(name="S", subjects=("s.>",), allow_batched=True)
    assert "allow_batched" not in off.to_api((2, 15, 1))
    assert on.to_api((2, 12, 0))["allow_batched"] is True
