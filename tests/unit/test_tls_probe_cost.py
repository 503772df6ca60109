"""The TLS guard's probe is paid by every process that connects (each Spark Python
worker and streaming runner): it must not load the system's CA certificates."""

from __future__ import annotations

import ssl

import pytest

from oncestream._nats import _tls


async def test_the_probe_loads_no_ca_certificates(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded: list[str] = []
    real = ssl.SSLContext.load_default_certs

    def counting(self: ssl.SSLContext, *args: object) -> None:
        loaded.append("load_default_certs")
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", counting)
    assert await _tls._probe() == (True, "handshake probed")
    assert loaded == []
