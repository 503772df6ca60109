"""A Connect client in ``awaitTermination()`` when its server dies: how long it waits.

pyspark retries an unavailable server with its ``DefaultPolicy``: 15 retries,
backing off from 50 ms by x4 up to 60 s, about 10 minutes in all, and
``awaitTermination(timeout)`` does not shorten that (the timeout is the server's).
docs/deploy.md, "When the Connect server dies", shows how to bound it; this test
runs that snippet in a client, SIGKILLs the server and checks the call gives up
within the bound it promises, with pyspark's error naming the unavailable server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark._connect_server import ROOT, ConnectServer, job_env

pytestmark = pytest.mark.timeout(400)

#: docs/deploy.md: ``DefaultPolicy(max_retries=5)`` gives up after 50 ms + 200 ms +
#: 800 ms + 3.2 s + 12.8 s (+ up to 0.5 s jitter on each of the last two): about 18 s.
PROMISED = 18.1
#: What a loaded 2-core machine adds (each retry's connection attempt, the GIL).
SLACK = 12.0


def test_a_bounded_retry_policy_bounds_await_termination(tmp_path: Path) -> None:
    server = ConnectServer(tmp_path / "server").start()
    ready = tmp_path / "ready"
    client = subprocess.Popen(
        [sys.executable, "-m", "tests.spark._connect_death_job", server.url, "5", str(ready)],
        cwd=ROOT, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        while not ready.exists():  # another process's file: polled, bounded
            assert client.poll() is None, client.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the client's query did not start in 240 s"
            time.sleep(0.1)
        server.kill()
        out, err = client.communicate(timeout=PROMISED + SLACK + 120)
    finally:
        server.kill()
        if client.poll() is None:
            client.kill()
            client.wait(timeout=30)
    results = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert results, err[-3000:]
    result = json.loads(results[-1][len("RESULT ") :])
    assert "UNAVAILABLE" in result["error"], result
    assert result["seconds"] <= PROMISED + SLACK, result
