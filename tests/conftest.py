"""Fixtures shared by every test: real nats-servers on loopback, connections, streams."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from oncestream import Connection, ConnectOptions, connect
from oncestream.server import HubLeaf, NatsServer, ServerConfig
from oncestream.streams import StreamSpec, ensure_stream

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from tests import server_configs
from tests._backstop import (  # noqa: F401 - hooks: a test hung past its timeout ends its worker
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    pytest_unconfigure,
)

if importlib.util.find_spec("pyspark") is not None:
    from tests._spark_start import install as _install_start_retry

    _install_start_retry()


@contextmanager
def jetstream_server(work: Path) -> Iterator[NatsServer]:
    """A JetStream nats-server on 127.0.0.1 and a free port, its store in ``work``."""
    server = NatsServer(server_configs.jetstream(work), work_dir=work)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh JetStream nats-server on 127.0.0.1, a free port and a temp store."""
    with jetstream_server(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def topo(tmp_path: Path) -> Iterator[HubLeaf]:
    """The hub and leaf topology of :class:`oncestream.server.HubLeaf` (domains hub, leaf)."""
    topology = HubLeaf(tmp_path / "hub-leaf")
    topology.up()
    try:
        yield topology
    finally:
        topology.down()


@pytest.fixture(scope="module")
def module_nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One JetStream nats-server for every test of a module (each uses its own streams)."""
    with jetstream_server(tmp_path_factory.mktemp("module-nats")) as server:
        yield server


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[Callable[..., NatsServer]]:
    """Start extra servers from :mod:`tests.server_configs`; all are stopped at teardown."""
    started: list[NatsServer] = []

    def start(config: ServerConfig, name: str | None = None) -> NatsServer:
        work = tmp_path / (name or f"nats-{len(started)}")
        server = NatsServer(config, work_dir=work)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.close()


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate.

    Keys: ``ca``, ``cert``/``key`` (server), ``client_cert``/``client_key``, ``other_ca``.
    """
    import trustme

    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    client_cert = ca.issue_cert("client@oncestream.test")
    files = {
        "ca": tmp_path / "ca.pem",
        "cert": tmp_path / "server.pem",
        "key": tmp_path / "server.key",
        "client_cert": tmp_path / "client.pem",
        "client_key": tmp_path / "client.key",
        "other_ca": tmp_path / "other-ca.pem",
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server_cert.private_key_pem.write_to_path(str(files["key"]))
    client_cert.cert_chain_pems[0].write_to_path(str(files["client_cert"]))
    client_cert.private_key_pem.write_to_path(str(files["client_key"]))
    trustme.CA().cert_pem.write_to_path(str(files["other_ca"]))
    return files


@pytest.fixture
def options(nats_server: NatsServer) -> ConnectOptions:
    """Connect options for :func:`nats_server`, failing fast on an unreachable server."""
    return ConnectOptions(servers=(nats_server.url,), reconnect_wait=0.1)


@pytest.fixture
async def conn(options: ConnectOptions) -> AsyncIterator[Connection]:
    """A connection to :func:`nats_server`."""
    connection = await connect(options)
    try:
        yield connection
    finally:
        await connection.close()


@pytest.fixture
def make_stream(conn: Connection) -> Callable[..., object]:
    """Create a stream: ``await make_stream("ORDERS", ("orders.>",), duplicate_window=1)``."""

    async def create(name: str, subjects: tuple[str, ...] = (), **kwargs: object) -> dict:
        spec = StreamSpec(name=name, subjects=subjects or (f"{name.lower()}.>",), **kwargs)
        return await ensure_stream(conn, spec)

    return create


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """The one SparkSession of the test session (local[2], 127.0.0.1, jetstream registered)."""
    from oncestream.spark import local_session

    session = local_session("oncestream-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One Spark Connect server for the test session (per xdist worker that asks for it).

    Started as docs/deploy.md starts one (tests/spark/_connect_server.py); its
    Python workers run this checkout.
    """
    from tests.spark._connect_server import ConnectServer

    server = ConnectServer(tmp_path_factory.mktemp("connect-server")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["classic", "connect"])
def spark_job(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """Run a job of tests/spark/_jobs.py on a classic session or through Spark Connect.

    ``spark_job("name", **kwargs)`` returns the job's result (through JSON either
    way); ``spark_job.mode`` is ``"classic"`` or ``"connect"``. Classic: in this
    process, on the shared session. Connect: in a subprocess holding a Connect
    session to the shared Connect server.
    """
    from tests.spark._connect_server import SparkJobs

    if request.param == "classic":
        return SparkJobs("classic", session=request.getfixturevalue("spark"))
    return SparkJobs("connect", remote=request.getfixturevalue("connect_server").url)


@pytest.fixture(scope="session")
def postgres_server():  # type: ignore[no-untyped-def]
    """One throw-away PostgreSQL server for the test session (see harness/_postgres.py)."""
    from harness import PostgresServer

    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server, request) -> str:  # type: ignore[no-untyped-def]
    """A fresh, empty database on the session's PostgreSQL server; returns its DSN."""
    import re
    import uuid

    import psycopg

    name = "t_" + re.sub(r"\W", "_", request.node.name.lower())[:40] + "_" + uuid.uuid4().hex[:6]
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return postgres_server.url.rsplit("/", 1)[0] + "/" + name
