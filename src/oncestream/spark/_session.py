"""A local SparkSession set up the way oncestream's demo, tests and benchmarks need it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "LOG_ENV",
    "check_java",
    "local_session",
    "scratch_root",
    "spark_log_path",
    "sweep_scratch",
]

_JAVA_HINT = (
    "install Java 17 or newer (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) "
    "or point JAVA_HOME at one"
)


def check_java() -> str:
    """Return the ``java`` Spark will use, after checking it is Java 17 or newer.

    Raises:
        ConfigError: no java found, or an older one, with what to install.
    """
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        raise ConfigError(f"Spark needs Java 17+, but no java was found: {_JAVA_HINT}")
    probe = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', probe.stderr + probe.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):
        major = int(match.group(2))
    if major < 17:
        found = f"Java {major}" if match else "a java whose version is unknown"
        raise ConfigError(f"Spark needs Java 17+, found {found} at {java}: {_JAVA_HINT}")
    return java


#: Where Spark's own console output goes: a file path, or "console" to keep it there.
LOG_ENV = "ONCESTREAM_SPARK_LOG"


def spark_log_path() -> Path | None:
    """The file the JVM's console output goes to (None: the console), from ``ONCESTREAM_SPARK_LOG``.

    Default: ``oncestream-spark-<uid>.log`` in the temporary directory.
    """
    value = os.environ.get(LOG_ENV, "").strip()
    if value.lower() in ("console", "-"):
        return None
    if value:
        return Path(value).expanduser()
    return Path(tempfile.gettempdir()) / f"oncestream-spark-{os.getuid()}.log"


def scratch_root() -> Path:
    """Where :func:`local_session` JVMs keep their scratch files, one folder per process.

    ``oncestream-spark-<uid>.scratch/<pid>/`` in the temporary directory: Spark's
    ``spark-*`` and ``blockmgr-*`` folders (``spark.local.dir``) and the JVM's own
    temporary files (``java.io.tmpdir``: native libraries, ``artifacts-*``). A JVM
    that is killed cannot remove them; :func:`sweep_scratch` does, later.
    """
    return Path(tempfile.gettempdir()) / f"oncestream-spark-{os.getuid()}.scratch"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_scratch() -> list[Path]:
    """Remove the scratch folders of processes that are gone (killed drivers); return them.

    Only folders named by a PID under :func:`scratch_root` are touched: that
    folder holds nothing but what :func:`local_session` created.
    """
    removed = []
    root = scratch_root()
    for entry in root.iterdir() if root.is_dir() else ():
        if entry.name.isdigit() and not _alive(int(entry.name)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _scratch_settings(conf: dict[str, str]) -> dict[str, str]:
    if "spark.local.dir" in conf or os.environ.get("SPARK_LOCAL_DIRS"):
        return {}  # the caller chose where Spark's scratch goes
    sweep_scratch()
    mine = scratch_root() / str(os.getpid())
    (mine / "tmp").mkdir(parents=True, exist_ok=True)
    scratch_root().chmod(0o700)
    options = f"-Djava.io.tmpdir={mine / 'tmp'}"
    extra = conf.get("spark.driver.extraJavaOptions")
    return {
        "spark.local.dir": str(mine),
        "spark.driver.extraJavaOptions": f"{extra} {options}" if extra else options,
    }


def _classic_pyspark() -> tuple[Any, Any, Any]:
    """``SparkConf``, ``SparkContext`` and ``launch_gateway``: classic pyspark, with its JVM.

    Raises:
        ConfigError: this is pyspark-client, the Spark Connect client alone (no JVM).
    """
    try:
        from pyspark import SparkConf, SparkContext
        from pyspark.java_gateway import launch_gateway
    except ImportError as exc:  # pyspark-client ships neither (nor py4j)
        raise ConfigError(
            "local_session() starts a classic local Spark, which needs pyspark (with its "
            f"JVM), and this environment has the Spark Connect client alone, pyspark-client "
            f"({type(exc).__name__}: {exc}): connect to a Spark Connect server of the same "
            "release instead, spark = SparkSession.builder.remote('sc://HOST:15002')"
            ".getOrCreate(), then oncestream.spark.register(spark) (docs/deploy.md)"
        ) from exc
    return SparkConf, SparkContext, launch_gateway


def local_session(
    app_name: str = "oncestream",
    *,
    master: str = "local[2]",
    register: bool = True,
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """Create (or get) a SparkSession bound to 127.0.0.1 with the jetstream format registered.

    Sets ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` to this interpreter when they
    are unset, so Spark's Python workers import the same oncestream as the driver (a
    script run with a venv's python without activating the venv otherwise starts the
    workers with the system ``python3``); :func:`oncestream.spark.register` checks it.

    The JVM's start-up lines and Spark's own log (log4j warnings, per-batch
    notes) go to a log file instead of the console, so a script prints what it
    prints: :func:`spark_log_path` (``ONCESTREAM_SPARK_LOG=console`` keeps them
    on the console). Errors still reach Python as exceptions. Spark's scratch
    files go to a folder of this process under :func:`scratch_root` (unless
    ``spark.local.dir`` or ``SPARK_LOCAL_DIRS`` says otherwise); folders of
    processes that were killed are removed at the next start.

    Args:
        app_name: Spark application name.
        master: ``local[N]`` or a ``spark://127.0.0.1:PORT`` standalone master.
        register: register the ``jetstream`` data source on the session.
        conf: extra Spark config.

    Raises:
        ConfigError: Java 17+ is missing, the workers' python cannot import oncestream,
            this process holds a Spark Connect session (which a process cannot hold
            together with a classic one), or its pyspark is the Connect client alone
            (pyspark-client).

    Example::

        spark = local_session("demo")
        df = spark.read.format("jetstream").option("servers", url).option("stream", "ORDERS").load()
    """
    # First: pyspark-client's is_remote() is always true, and its message is the one to give.
    SparkConf, SparkContext, launch_gateway = _classic_pyspark()
    if "pyspark" in sys.modules:
        from pyspark.sql.utils import is_remote

        if is_remote():
            raise ConfigError(
                "local_session() starts a classic local Spark, but this process holds a Spark "
                "Connect session (pyspark allows one kind per process): use that session, "
                "SparkSession.builder.remote(url).getOrCreate(), with "
                "oncestream.spark.register(spark)"
            )
    check_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {
        "spark.app.name": app_name,
        "spark.master": master,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.sql.streaming.stopActiveRunOnRestart": "true",
        **(conf or {}),
    }
    if SparkContext._active_spark_context is None:
        settings.update(_scratch_settings(settings))
    spark_conf = SparkConf().setAll(list(settings.items()))
    log_path = spark_log_path()
    if log_path is not None and SparkContext._active_spark_context is None:
        # The JVM writes its start-up warnings and log4j's console appender to its own
        # stdout/stderr, inherited from this process: give it the log file instead.
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": log, "stderr": log})
        SparkContext(conf=spark_conf, gateway=gateway)
    spark = SparkSession.builder.config(conf=spark_conf).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _quiet_accumulator_server(spark.sparkContext)
    if register:
        from . import register as register_source

        register_source(spark)
    return spark


def _quiet_accumulator_server(context: Any) -> None:
    """Stop the driver's accumulator server printing a traceback for a closed connection.

    A task stopped mid-batch (a query stopped or killed) closes its accumulator
    update connection early; pyspark's socketserver then prints ``EOFError``
    with a traceback on stderr, which is noise, not an error of the job. Other
    errors are still reported as before. (pyspark private: ``_accumulatorServer``.)
    """
    server = getattr(context, "_accumulatorServer", None)
    if server is None or not hasattr(server, "handle_error"):
        return
    original = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], EOFError | ConnectionResetError | BrokenPipeError):
            return
        original(request, client_address)

    server.handle_error = handle_error


def supports_read_limits() -> bool:
    """Whether this PySpark lets the source honour ``maxMessagesPerTrigger`` and the like (4.2+)."""
    from ._compat import ADMISSION_CONTROL

    return ADMISSION_CONTROL
