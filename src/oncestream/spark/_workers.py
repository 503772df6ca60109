"""Check, before any task, that Spark's Python workers can import this oncestream.

Spark starts its Python workers (which plan and run the ``jetstream`` source
and sink) with ``spark.pyspark.python`` / ``PYSPARK_PYTHON``, ``python3`` when
neither is set. A venv's python that was run without activating the venv
leaves that at the system ``python3``, and the first ``load()`` then fails
deep inside Spark with ``ModuleNotFoundError``. :func:`check_workers` asks the
workers' python up front:

- local master (``local[N]``, also ``remote("local[N]")``): run that python with
  ``-c "import oncestream; print(oncestream.__version__)"`` (about 0.2 s);
- a cluster master: that same local run first (Spark plans Python data
  sources in Python workers on the driver, started with the same python),
  then, like for a Spark Connect server elsewhere, one one-row,
  one-partition task that reports the version it imported (0.2 s on a warm
  session; the first job of a fresh one pays Spark's start-up, a few seconds).

The answer is cached on the session object.
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["check_workers", "worker_python"]

_CHECKED_ATTR = "_oncestream_workers_checked"
_IMPORT_PROBE = "import oncestream, sys; print(oncestream.__version__); print(sys.executable)"

# Defined from source in a namespace that is not an importable module, so cloudpickle
# ships the function by value: the workers need no oncestream to unpickle it.
_TASK_PROBE = """
def probe(_):
    import sys
    try:
        import oncestream
        found = str(oncestream.__version__)
    except Exception as exc:
        found = "!" + type(exc).__name__ + ": " + str(exc)
    return found + "\\n" + sys.executable
"""


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _is_local_connect(spark: Any) -> bool:
    """``remote("local[N]")``: the Connect server runs in this process, its workers here."""
    return _is_connect(spark) and "SPARK_LOCAL_REMOTE" in os.environ


def worker_python(spark: SparkSession) -> str:
    """The python Spark starts its workers with, as the driver sees it."""
    if not _is_connect(spark):
        exec_ = getattr(spark.sparkContext, "pythonExec", None)
        if exec_:
            return str(exec_)
    if _is_local_connect(spark):  # the in-process SparkContext read the environment
        return os.environ.get("PYSPARK_PYTHON") or "python3"
    conf = spark.conf.get("spark.pyspark.python", None)
    return conf or os.environ.get("PYSPARK_PYTHON") or "python3"


def _driver_version() -> str:
    from .. import __version__

    return __version__


def _fix(version: str) -> str:
    return (
        f"set PYSPARK_PYTHON (or the Spark conf spark.pyspark.python) to a python that has "
        f"oncestream {version} installed, e.g. `export PYSPARK_PYTHON=$VIRTUAL_ENV/bin/python` "
        f"or activate the venv before starting the script; "
        f"oncestream.spark.local_session() sets it to the driver's own interpreter; "
        f"on a cluster ship the environment to the executors (docs/deploy.md)"
    )


def _probe_local(python: str, timeout: float) -> tuple[str, str]:
    try:
        proc = subprocess.run(
            [python, "-c", _IMPORT_PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    except OSError as exc:
        return f"!cannot run it: {exc.strerror or exc}", python
    except subprocess.TimeoutExpired:
        return f"!it did not answer within {timeout:g} s", python
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["exit status " + str(proc.returncode)])[-1]
        return "!" + last, python
    lines = proc.stdout.strip().splitlines()
    return (lines[0] if lines else "!no version printed"), (lines[1] if len(lines) > 1 else python)


def _probe_task(spark: SparkSession) -> tuple[str, str]:
    namespace: dict[str, Any] = {"__name__": "oncestream_worker_probe"}
    exec(_TASK_PROBE, namespace)
    from pyspark.sql.functions import col, udf

    probe = udf(namespace["probe"], "string", useArrow=False)  # no pyarrow needed on workers
    try:
        rows = spark.range(1, numPartitions=1).select(probe(col("id")).alias("v")).collect()
    except Exception as exc:  # Spark wraps worker failures in many classes
        text = str(exc).strip().splitlines()
        detail = next((line for line in text if "Error" in line), text[0] if text else "")
        return f"!the probe task failed: {detail[:300]}", ""
    found, _, python = str(rows[0]["v"]).partition("\n")
    return found, python


def check_workers(spark: SparkSession, *, timeout: float = 60.0) -> str:
    """Check that Spark's Python workers import the driver's oncestream version.

    Returns the worker's version. Cached per session: later calls cost nothing.

    Raises:
        ConfigError: the workers' python lacks oncestream, cannot run, or has another
            version; the message names ``PYSPARK_PYTHON`` / ``spark.pyspark.python``
            and the fix.
    """
    cached = getattr(spark, _CHECKED_ATTR, None)
    if isinstance(cached, str):
        return cached
    python = worker_python(spark)
    if _is_local_connect(spark):
        master = "local"
    else:
        master = "" if _is_connect(spark) else str(spark.sparkContext.master)
    expected = _driver_version()
    if master.startswith("local"):
        found, where = _probe_local(python, timeout)
    else:
        if master:  # classic, cluster: Python data sources plan in workers on the driver too
            found, where = _probe_local(python, timeout)
            if found.startswith("!") or found != expected:
                raise ConfigError(
                    f"Spark plans Python data sources in Python workers on the driver, started "
                    f"with the same spark.pyspark.python / PYSPARK_PYTHON ({python!r}), and "
                    f"that python cannot import oncestream {expected} here "
                    f"({found.lstrip('!')}). With --archives env.tar.gz#environment and "
                    f"spark.pyspark.python=./environment/bin/python, unpack the same "
                    f"environment as ./environment in the directory you submit from "
                    f"(docs/deploy.md)"
                )
        found, where = _probe_task(spark)
    shown = where if where and where != python else python
    if found.startswith("!"):
        raise ConfigError(
            f"Spark's Python workers cannot import oncestream: they run {shown!r} "
            f"(from spark.pyspark.python / PYSPARK_PYTHON; python3 when neither is set), "
            f"which failed with: {found[1:]}. Fix: {_fix(expected)}"
        )
    if found != expected:
        raise ConfigError(
            f"Spark's Python workers import oncestream {found} but the driver runs "
            f"{expected}: the workers' python is {shown!r} (from spark.pyspark.python / "
            f"PYSPARK_PYTHON). Fix: {_fix(expected)}"
        )
    try:
        setattr(spark, _CHECKED_ATTR, found)
    except AttributeError:
        pass
    return found
