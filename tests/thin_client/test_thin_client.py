"""The thin Spark Connect client: pyspark-client, no JVM, against a server of its release.

Run by ``make test-client`` in .venv-connect-client<release> (pyspark-client and
oncestream[spark-client], no pyspark), together with the Connect tests of
tests/spark/test_connect.py (the ``jetstream`` source and sink, registered from this
client) and tests/spark/test_foreach_batch.py (``transactional``), against the
``connect_server`` fixture's server, started from the same release's full pyspark
(``ONCESTREAM_CONNECT_SERVER_PYTHON``). Not collected by the other runs (``norecursedirs``):
each test here is about this environment.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys

import pyspark
import pytest

from oncestream import ConfigError
from tests.spark._connect_server import ROOT, ConnectServer, job_env

pytestmark = pytest.mark.timeout(300)


def test_this_is_the_connect_client_alone() -> None:
    """What the run claims: pyspark-client, neither pyspark nor its JVM half."""
    from pyspark.util import is_remote_only

    assert importlib.metadata.version("pyspark-client") == pyspark.__version__
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("pyspark")
    assert is_remote_only()
    assert importlib.util.find_spec("py4j") is None
    assert importlib.util.find_spec("pyspark.jars") is None  # no Spark to run locally


def test_the_server_runs_the_clients_release(connect_server: ConnectServer) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.thin_client._versions", connect_server.url],
        cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert json.loads(lines[-1][len("RESULT ") :]) == {
        "client": pyspark.__version__,
        "server": pyspark.__version__,
    }


def test_local_session_names_the_connect_client_and_the_fix() -> None:
    """``local_session()`` needs classic pyspark: on the thin client it says what to do."""
    from oncestream.spark import local_session

    with pytest.raises(ConfigError, match=r"pyspark-client.*remote\('sc://") as caught:
        local_session()
    assert "register(spark)" in str(caught.value)
