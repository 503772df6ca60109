"""A one-node Kafka broker (KRaft) from Kafka's own jars, and Spark's Kafka connector jars.

Both are installed on first use into ``.peers/`` (ignored by git) with Maven's
``dependency:copy-dependencies`` (Debian's ``maven`` package) from Maven Central:

- ``org.apache.kafka:kafka_2.13`` and ``kafka-tools`` (:data:`KAFKA_VERSION`) and
  their runtime dependencies: the broker (``kafka.Kafka``), the storage formatter
  (``kafka.tools.StorageTool``) and the perf tools (``ProducerPerformance``,
  ``ConsumerPerformance``);
- ``org.apache.spark:spark-sql-kafka-0-10_2.13`` for our PySpark version, or the newest
  published one before it (:func:`spark_kafka_jars` says which), minus the jars PySpark
  ships itself, for ``spark.jars``.

:class:`KafkaBroker` runs one broker+controller node on 127.0.0.1, two free ports,
its log dir in a temp dir, and is started, killed and stopped by PID like
:class:`oncestream.server.NatsServer`.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
PEERS = Path(os.environ.get("ONCESTREAM_PEERS", ROOT / ".peers"))
KAFKA_VERSION = "4.1.1"
#: Spark's Kafka connector, newest first: our PySpark's own version is tried first.
SPARK_KAFKA_FALLBACKS = ("4.2.0",)
JAVA = shutil.which("java") or "java"

__all__ = [
    "KAFKA_VERSION",
    "PEERS",
    "KafkaBroker",
    "free_port",
    "install_kafka",
    "kafka_classpath",
    "run_kafka_tool",
    "spark_kafka_jars",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pom(artifacts: list[tuple[str, str, str]]) -> str:
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in artifacts
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.oncestream</groupId><artifactId>peers</artifactId><version>1</version>"
        f"<dependencies>{deps}</dependencies></project>"
    )


def _mvn_copy(artifacts: list[tuple[str, str, str]], dest: Path) -> None:
    """Resolve ``artifacts`` and their runtime dependencies into ``dest`` (atomic)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit(
            "Maven is needed once to fetch Kafka's jars: apt-get install maven "
            "(or sudo apt-get install maven)"
        )
    work = Path(tempfile.mkdtemp(prefix="mvn-", dir=PEERS))
    try:
        (work / "pom.xml").write_text(_pom(artifacts))
        cmd = [
            mvn,
            "-q",
            "-B",
            f"-Dmaven.repo.local={PEERS / 'm2'}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={work / 'libs'}",
            "-DincludeScope=runtime",
        ]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"mvn failed for {artifacts}: {(proc.stdout + proc.stderr)[-2000:]}")
        if dest.exists():
            shutil.rmtree(dest)
        (work / "libs").rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def install_kafka() -> Path:
    """The directory of Kafka's jars (downloaded once)."""
    libs = PEERS / f"kafka-{KAFKA_VERSION}"
    if not (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        PEERS.mkdir(parents=True, exist_ok=True)
        _mvn_copy(
            [
                ("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
                ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
            ],
            libs,
        )
    return libs


def kafka_classpath() -> str:
    return str(install_kafka() / "*")


def spark_kafka_jars() -> tuple[str, list[Path]]:
    """(connector version, jars for ``spark.jars``), downloaded once.

    The connector of our PySpark's version when Maven Central has it, else the newest
    of :data:`SPARK_KAFKA_FALLBACKS` (PySpark 4.3.0 had no ``spark-sql-kafka-0-10``
    4.3.0 on Maven Central when this was written; 4.2.0 runs on it). Jars PySpark
    ships (Hadoop, Scala, lz4, snappy, slf4j) are left out so the JVM has one copy.
    """
    import pyspark

    for version in (pyspark.__version__, *SPARK_KAFKA_FALLBACKS):
        libs = PEERS / f"spark-sql-kafka-{version}"
        if (libs / ".complete").exists():
            return version, sorted(libs.glob("*.jar"))
        if (PEERS / f"spark-sql-kafka-{version}.missing").exists():
            continue
        PEERS.mkdir(parents=True, exist_ok=True)
        try:
            _mvn_copy(
                [("org.apache.spark", "spark-sql-kafka-0-10_2.13", version)],
                libs,
            )
        except RuntimeError:
            (PEERS / f"spark-sql-kafka-{version}.missing").write_text("not on Maven Central\n")
            continue
        shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*")}
        for jar in libs.glob("*.jar"):
            if _artifact(jar.name) in shipped:
                jar.unlink()
        (libs / ".complete").write_text(version + "\n")
        return version, sorted(libs.glob("*.jar"))
    raise RuntimeError("no spark-sql-kafka-0-10 connector could be resolved")


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    parts = jar.removesuffix(".jar").split("-")
    while parts and parts[-1][:1].isdigit():
        parts.pop()
    return "-".join(parts)


def run_kafka_tool(
    main: str, *args: str, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools (a main class) on Kafka's classpath."""
    return subprocess.run(
        [JAVA, "-Xmx512m", "-cp", kafka_classpath(), main, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class KafkaBroker:
    """One KRaft node (broker and controller) on 127.0.0.1, log dir in a temp dir.

    ``start()`` formats the storage once and runs ``kafka.Kafka``; ``kill()`` SIGKILLs
    it; ``restart()`` starts it again on the same ports and log dir; ``close()`` stops
    it (SIGTERM, then SIGKILL) and removes the temp dir.
    """

    def __init__(self, *, heap: str = "1g", partitions: int = 1) -> None:
        self.heap = heap
        self.partitions = partitions
        self.port = free_port()
        self.controller_port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="kafka-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _properties(self) -> Path:
        props = self.dir / "server.properties"
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.dir / "logs"),
            "num.partitions": str(self.partitions),
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        props.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
        return props

    def start(self, timeout: float = 60.0) -> KafkaBroker:
        cp = kafka_classpath()
        props = self.dir / "server.properties"
        if not props.exists():
            props = self._properties()
            fmt = subprocess.run(
                [
                    JAVA,
                    "-cp",
                    cp,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="),
                    "-c",
                    str(props),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if fmt.returncode != 0:
                raise RuntimeError(f"kafka storage format failed: {fmt.stdout}{fmt.stderr}")
        cmd = [
            JAVA,
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            "-cp",
            cp,
            "kafka.Kafka",
            str(props),
        ]
        with open(self.dir / "broker.log", "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited {self.proc.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.2)
        self.close()
        raise RuntimeError(f"kafka did not listen within {timeout:.0f}s: {self.log_tail()}")

    def log_tail(self) -> str:
        path = self.dir / "broker.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL the broker (its log dir stays for :meth:`restart`)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)

    def restart(self) -> KafkaBroker:
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
