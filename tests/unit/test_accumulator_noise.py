"""A task stopped mid-batch closes its accumulator connection early: no traceback on stderr."""

from __future__ import annotations

import socket
import threading

import pyspark.accumulators as accumulators
import pytest

from oncestream.spark._session import _quiet_accumulator_server


class _Context:
    def __init__(self, server: object) -> None:
        self._accumulatorServer = server


def _closed_early(server: object, payload: bytes) -> None:
    """Authenticate (or not), then close: pyspark's handler raises on the next read."""
    handled = threading.Event()
    original = server.handle_error  # type: ignore[attr-defined]
    finish = server.finish_request  # type: ignore[attr-defined]

    def finish_request(*args: object) -> None:
        try:
            finish(*args)
        finally:
            handled.set()

    server.finish_request = finish_request  # type: ignore[attr-defined]
    host, port = server.server_address  # type: ignore[attr-defined]
    with socket.create_connection((host, port)) as conn:
        conn.sendall(payload)
    assert handled.wait(10)
    assert original is not None


@pytest.mark.parametrize(("payload", "noisy"), [(b"tok", False), (b"bad", True)])
def test_only_a_connection_closed_early_is_silenced(capsys, payload: bytes, noisy: bool) -> None:  # type: ignore[no-untyped-def]
    server = accumulators._start_update_server("tok", False, None)
    try:
        _quiet_accumulator_server(_Context(server))
        _closed_early(server, payload)
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert ("Traceback" in err) is noisy, err
