"""Every nats-server configuration the tests use, in one place.

Tests pick a config from here instead of writing config text inline.
"""

from __future__ import annotations

from pathlib import Path

from oncestream.server import JetStreamConfig, ServerConfig


def jetstream(
    work_dir: Path, *, domain: str | None = None, max_payload: int | None = None
) -> ServerConfig:
    """A single JetStream server with file storage in ``work_dir/jetstream``."""
    return ServerConfig(
        server_name="js",
        max_payload=max_payload,
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream", domain=domain),
    )
