"""A permission the server refuses is named at once, never a timeout or 28 s of retries (issue 19).

The server reports a refused publish or subscription asynchronously (``-ERR
'Permissions Violation for Publish to "x"'``) and sends no reply; the
Publisher and the JetStream API calls fail with PermissionDenied carrying the
server's text as soon as it arrives, and publishes that were allowed are
stored exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from oncestream import ConnectOptions, PermissionDenied, Publisher, PublisherOptions, connect
from oncestream.server import NatsServer, User
from oncestream.streams import StreamSpec, ensure_stream
from tests import server_configs

FAST = 10.0  # seconds: well below the 28 s retry horizon, with room for a loaded CI machine


@pytest.fixture
def server(server_factory: Callable[..., NatsServer], tmp_path: Path) -> NatsServer:
    users = (
        User(user="app", password="app-pw"),
        User(user="nopub", password="nopub-pw", permissions={"publish": {"deny": ["perm.no.>"]}}),
        User(user="nosub", password="nosub-pw", permissions={"subscribe": {"deny": ["_INBOX.>"]}}),
    )
    return server_factory(server_configs.permissions(tmp_path / "perm", users=users))


def _as(server: NatsServer, user: str) -> ConnectOptions:
    return ConnectOptions(servers=(server.url,), user=user, password=f"{user}-pw")


async def test_a_denied_publish_fails_fast_and_allowed_ones_are_stored_once(
    server: NatsServer,
) -> None:
    async with await connect(_as(server, "app")) as admin:
        await ensure_stream(admin, StreamSpec(name="PERM", subjects=("perm.>",)))
    async with await connect(_as(server, "nopub")) as conn:
        start = time.monotonic()
        async with Publisher(conn, PublisherOptions(stream="PERM")) as pub:
            denied = [await pub.publish("perm.no.x", b"x", msg_id=f"n{i}") for i in range(10)]
            allowed = [await pub.publish("perm.ok.x", b"x", msg_id=f"o{i}") for i in range(10)]
            outcomes = await asyncio.gather(*denied, *allowed, return_exceptions=True)
        assert time.monotonic() - start < FAST
        for outcome in outcomes[:10]:
            assert isinstance(outcome, PermissionDenied), outcome
            assert 'permissions violation for publish to "perm.no.x"' in str(outcome)
        assert all(not isinstance(o, BaseException) for o in outcomes[10:]), outcomes[10:]
        assert pub.stats.failed == 10 and pub.stats.acked == 10
    async with await connect(_as(server, "app")) as admin:
        state = (await admin.stream_info("PERM"))["state"]
        assert (state["messages"], state["num_subjects"]) == (10, 1)


async def test_a_denied_reply_inbox_is_named_not_a_timeout(server: NatsServer) -> None:
    async with await connect(_as(server, "nosub")) as conn:
        start = time.monotonic()
        with pytest.raises(PermissionDenied, match="reply inbox") as info:
            await Publisher(conn, PublisherOptions()).start()
        assert 'permissions violation for subscription to "_inbox.' in str(info.value)
        with pytest.raises(PermissionDenied, match=r"subscribe to _INBOX\.>"):
            await conn.stream_info("PERM")
        with pytest.raises(PermissionDenied, match="reply inbox"):
            await conn.request("perm.ok.x", b"")
        assert time.monotonic() - start < FAST


@pytest.mark.parametrize("fast", ["1", "0"], ids=["fast-path", "public-api"])
async def test_flush_returns_after_every_command_written_before(
    server: NatsServer, fast: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nats-py writes its PING ahead of queued commands; our flush must not (3 in 200 lost)."""
    monkeypatch.setenv("ONCESTREAM_NATS_FASTPATH", fast)
    async with await connect(_as(server, "nosub")) as conn:
        assert conn.fast_path[0] is (fast == "1")
        for i in range(60):
            subject = f"_INBOX.flush{i}.*"
            await conn.subscribe_frames(subject, lambda *frame: None)
            await conn.flush()
            assert conn.subscription_denial(subject) is not None, f"round {i}"
