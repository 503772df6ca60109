"""Spark: a permission denial in the server's own domain fails at once (issue 10: was 37 s)."""

from __future__ import annotations

import time

import pytest

from oncestream.server import HubLeaf


def test_batch_read_denied_in_own_domain_fails_fast(topo: HubLeaf, spark) -> None:  # type: ignore[no-untyped-def]
    user, password = topo.credentials("IMPORT_CLIENT")
    start = time.monotonic()
    with pytest.raises(Exception, match=r"PermissionDenied|not permitted") as info:
        (
            spark.read.format("jetstream")
            .option("servers", topo.url("leaf"))
            .option("user", user)
            .option("password", password)
            .option("domain", "leaf")
            .option("stream", "test")
            .load()
            .count()
        )
    assert time.monotonic() - start < 15, "the denial must not wait for request timeouts"
    assert password not in str(info.value)
