"""Spark reads with JWT creds and mutual TLS; no secret in the query plan."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trustme

from oncestream import connect
from oncestream._sync import run_sync
from oncestream.server import NatsServer, OperatorSetup
from oncestream.spark._options import connect_options as spark_connect_options
from oncestream.streams import StreamSpec, ensure_stream
from tests import server_configs
from tests._scenario import publish_ids


def test_spark_read_with_creds_and_client_certificate(  # type: ignore[no-untyped-def]
    spark, server_factory: Callable[..., NatsServer], tmp_path: Path
) -> None:
    ca = trustme.CA()
    server_cert, client_cert = ca.issue_cert("127.0.0.1"), ca.issue_cert("spark@oncestream.test")
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key", "ccert", "ckey")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    server_cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    server_cert.private_key_pem.write_to_path(str(files["key"]))
    client_cert.cert_chain_pems[0].write_to_path(str(files["ccert"]))
    client_cert.private_key_pem.write_to_path(str(files["ckey"]))
    setup = OperatorSetup.create(accounts=("APP",), jetstream=("APP",))
    server = server_factory(
        server_configs.operator_mode_mtls(
            tmp_path, setup, cert_file=files["cert"], key_file=files["key"], ca_file=files["ca"]
        )
    )
    creds = setup.write_creds(tmp_path / "app.creds", account="APP", user="spark")
    seed = creds.read_text().split("-----BEGIN USER NKEY SEED-----\n")[1].split("\n")[0]
    options = {
        "servers": server.url,
        "creds": str(creds),
        "tlsCaFile": str(files["ca"]),
        "tlsCertFile": str(files["ccert"]),
        "tlsKeyFile": str(files["ckey"]),
    }
    ids = [f"a-{i}" for i in range(200)]

    async def prepare() -> None:
        async with await connect(spark_connect_options(options)) as conn:
            await ensure_stream(conn, StreamSpec(name="AUTHED", subjects=("authed.>",)))
            await publish_ids(conn, "authed.x", ids, stream="AUTHED")

    run_sync(prepare())
    reader = spark.read.format("jetstream").options(**options).option("stream", "AUTHED")
    frame = reader.load()
    assert seed not in frame._jdf.queryExecution().toString()
    rows = frame.select("msg_id").collect()
    assert sorted(r.msg_id for r in rows) == sorted(ids)
