"""Spark's TLS options require TLS (issue 19): a plaintext server never receives the password.

A relay in front of a real nats-server without TLS (tests/_wiretap.py)
records what the driver and the executors send; the read and the write fail
naming the server that does not offer TLS, and the password is not on the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from oncestream.server import NatsServer
from tests import server_configs
from tests._wiretap import WireTap

PASSWORD = "spark-wire-Secret-4419"


def test_read_and_write_refuse_a_plaintext_server(  # type: ignore[no-untyped-def]
    spark, server_factory: Callable[..., NatsServer], tmp_path: Path, tls_files: dict[str, Path]
) -> None:
    plain = server_factory(server_configs.user_password(tmp_path, user="app", password=PASSWORD))
    with WireTap(plain.port) as tap:
        options = {
            "servers": tap.url("tls"),
            "user": "app",
            "password": PASSWORD,
            "tlsCaFile": str(tls_files["ca"]),
            "connectTimeout": "2s",
        }
        with pytest.raises(Exception, match="does not offer TLS") as read:
            spark.read.format("jetstream").options(**options).option("stream", "S").load().count()
        frame = spark.createDataFrame([("s.x", b"1")], "subject string, data binary")
        with pytest.raises(Exception, match="does not offer TLS") as write:
            writer = frame.write.format("jetstream").mode("append").options(**options)
            writer.option("stream", "S").save()
        assert tap.accepted >= 2, "the client never reached the server"
        assert PASSWORD.encode() not in tap.sent
        assert b"CONNECT" not in tap.sent
        for info in (read, write):
            assert PASSWORD not in str(info.value)
