"""register() checks that Spark's Python workers import this oncestream (issue 12)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import oncestream
from oncestream._connection import Connection
from oncestream.server import NatsServer
from tests.spark._helpers import publish

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]


def _fake_python(tmp: Path) -> Path:
    """A python whose ``import oncestream`` finds version 0.0.0-other."""
    pkg = tmp / "fake" / "oncestream"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "0.0.0-other"\n')
    script = tmp / "other-python"
    script.write_text(f'#!/bin/sh\nPYTHONPATH={pkg.parent} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return script


async def test_register_refuses_workers_without_oncestream(
    nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await make_stream("WCHK", ("wchk.>",))
    await publish(conn, "wchk.a", 7)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH")}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYTHONWARNINGS"] = "always::FutureWarning"  # shown, so the pandas check below sees it
    proc = subprocess.run(  # noqa: ASYNC221 - the test has nothing else to do meanwhile
        [
            sys.executable,
            str(ROOT / "tests" / "spark" / "_worker_check_job.py"),
            nats_server.url,
            "WCHK",
            str(_fake_python(tmp_path)),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    print(lines["MISSING"])
    assert "cannot import oncestream" in lines["MISSING"]
    assert "PYSPARK_PYTHON" in lines["MISSING"] and "spark.pyspark.python" in lines["MISSING"]
    assert "'python3'" in lines["MISSING"] and "local_session()" in lines["MISSING"]
    assert lines["JOBS"] == "0"  # refused before any job ran
    assert (
        f"oncestream 0.0.0-other but the driver runs {oncestream.__version__}" in lines["MISMATCH"]
    )
    assert "PYSPARK_PYTHON" in lines["MISMATCH"]
    assert lines["ROWS"] == "7"
    # pandas is capped below 3 in the spark extra: no PySpark warning at session start.
    assert "fully support pandas" not in proc.stderr


def test_pandas_below_3_and_no_pyspark_warning() -> None:
    import warnings
    from importlib.metadata import version

    from pyspark.sql.pandas.utils import require_minimum_pandas_version

    assert int(version("pandas").split(".")[0]) < 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        require_minimum_pandas_version()
    assert not [w for w in caught if issubclass(w.category, FutureWarning)]
