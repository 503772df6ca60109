"""No secret in repr/str/error messages of any public option or config object (issue 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream import ConfigError, ConnectOptions, PostgresLedger, SQLiteLedger
from oncestream._private import redact_url
from oncestream.audit import OutputSpec
from oncestream.ledger import ledger_from_url
from oncestream.server import (
    Authorization,
    ClusterConfig,
    LeafRemote,
    OperatorSetup,
    User,
    hub_leaf_accounts,
)

PW = "s3cretPW"  # every secret below contains this
SEED = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY"


def _objects(tmp_path: Path) -> list[object]:
    seed_file = tmp_path / "seed.nk"
    seed_file.write_text("SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY")
    url = f"nats://user:{PW}@127.0.0.1:4222"
    pg = f"postgresql://app:{PW}@db.example:5432/orders"
    objects: list[object] = [
        ConnectOptions(servers=(url,)),
        ConnectOptions(servers=(f"nats://{PW}@127.0.0.1:4222",)),  # token in the URL
        ConnectOptions(servers=("nats://127.0.0.1:4222",), user="u", password=PW),
        ConnectOptions(token=PW),
        ConnectOptions(nkey_seed=SEED),
        ConnectOptions(servers=(url,)).replace(domain="hub"),
        OutputSpec.parse(f"sql:{pg}#orders"),
        PostgresLedger(pg),
        PostgresLedger(f"host=db user=app password={PW}"),
        SQLiteLedger(str(tmp_path / "l.db")),
        ledger_from_url(pg),
        User(user="u", password=PW),
        Authorization(token=PW),
        Authorization(user="u", password=PW),
        LeafRemote(url="nats-leaf://127.0.0.1:7422", account="A", user="u", password=PW),
        LeafRemote(url=f"nats-leaf://u:{PW}@127.0.0.1:7422", account="A"),
        ClusterConfig(name="c", port=6222, routes=(f"nats-route://r:{PW}@127.0.0.1:6223",)),
        hub_leaf_accounts(passwords={"acc": PW, "admin": PW, "import_client": PW}),
    ]
    try:
        from oncestream.spark import transactional
        from oncestream.spark._sink_options import SinkOptions
        from oncestream.spark._source_options import SourceOptions
    except ImportError:  # pragma: no cover - spark extra not installed
        return objects
    spark_opts = {"servers": url, "password": PW, "user": "u"}
    objects += [
        SourceOptions.from_spark_options(
            {**spark_opts, "servers": "nats://127.0.0.1:4222", "stream": "S"}
        ),
        SinkOptions.from_spark_options({"servers": url, "stream": "S", "subject": "s"}),
        transactional(pg, table="t"),
    ]
    return objects


def test_no_secret_in_repr_or_str(tmp_path: Path) -> None:
    objects = _objects(tmp_path)
    for obj in objects:
        for text in (repr(obj), str(obj)):
            assert PW not in text, f"{type(obj).__name__} shows a secret: {text}"
            assert SEED not in text, f"{type(obj).__name__} shows a seed: {text}"
    setup = OperatorSetup.create()
    assert setup.operator.seed not in repr(setup) + repr(setup.config())


@pytest.mark.parametrize(
    "build",
    [
        lambda: ConnectOptions(servers=(f"http://u:{PW}@h:1",)),
        lambda: ConnectOptions(servers=(f"nats://u:{PW}@h:99999",)),
        lambda: ledger_from_url(f"mysql://u:{PW}@h/db"),
        lambda: OutputSpec.parse(f"sql:postgresql://u:{PW}@h/db"),
        lambda: OutputSpec.parse(f"bogus:postgresql://u:{PW}@h/db"),
        lambda: OutputSpec.parse(f"sql:host=db password={PW} dbname=x#orders"),
        lambda: ConnectOptions(nkey_seed=f"SU{PW}"),
    ],
)
def test_no_secret_in_error_messages(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        build()
    assert PW not in str(info.value)


def test_redact_keeps_what_is_not_secret() -> None:
    assert redact_url("mysql://x@y/z") == "mysql://x@y/z"
    assert redact_url("nats://tok@h:4222") == "nats://***@h:4222"
    assert redact_url("postgresql://app:pw@db:5432/x") == "postgresql://app:***@db:5432/x"
    assert redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
    assert redact_url("sqlite:///tmp/l.db") == "sqlite:///tmp/l.db"
    assert redact_url("host=db password='a b' dbname=x") == "host=db password=*** dbname=x"
