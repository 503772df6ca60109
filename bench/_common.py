"""Shared helpers for benchmark scripts (see bench/run.py for the output contract)."""

from __future__ import annotations

import json
import os

from oncestream.server import NatsServer

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

PAYLOAD_128 = b"x" * 128


def report(
    group: str,
    case: str,
    value: float,
    unit: str = "msg/s",
    *,
    baseline: bool = False,
    **extra: object,
) -> None:
    """Print one RESULT line for bench/run.py."""
    record = {"group": group, "case": case, "value": value, "unit": unit, "baseline": baseline}
    record.update(extra)
    print("RESULT " + json.dumps(record), flush=True)


def fresh_server() -> NatsServer:
    """A fresh file-storage JetStream server in a temp dir; ``close()`` removes it."""
    return NatsServer().start()
