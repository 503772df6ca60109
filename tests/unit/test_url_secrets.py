"""URLs split structurally; secrets redacted by rebuilding them, scrubbed elsewhere (issue 19)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream import ConfigError, ConnectOptions
from oncestream._dsn import parse_dsn, postgres_url
from oncestream._private import redact_url, scrub, split_url, url_secrets


@pytest.mark.parametrize(
    ("url", "user", "password", "host", "tail"),
    [
        ("nats://u:pa/ss@h:4222", "u", "pa/ss", "h:4222", ""),
        ("nats://u:p@ss#w?d@h:4222", "u", "p@ss#w?d", "h:4222", ""),
        ("nats://tok@h", "tok", None, "h", ""),
        ("nats://h:4222", None, None, "h:4222", ""),
        ("postgresql://app:s3/cr#t@db:5432/x?ssl=1", "app", "s3/cr#t", "db:5432", "/x?ssl=1"),
        ("postgresql://db/x?application_name=a@b", None, None, "db", "/x?application_name=a@b"),
        ("sqlite:////tmp/a@b.db", None, None, "", "//tmp/a@b.db"),
        ("sqlite:///x:y@z.db", None, None, "", "/x:y@z.db"),
        ("nats://u:p@[::1]:4222", "u", "p", "[::1]:4222", ""),
    ],
)  # fmt: skip
def test_split_url(url: str, user: str | None, password: str | None, host: str, tail: str) -> None:
    parts = split_url(url)
    assert parts is not None
    assert (parts.user, parts.password, parts.host, parts.tail) == (user, password, host, tail)


def test_split_url_needs_a_scheme() -> None:
    assert split_url("orders.db") is None
    assert split_url("host=db password=x") is None


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("nats://u:pa/ss@h:4222", "nats://u:***@h:4222"),
        ("tls://tok/en@h:4222", "tls://***@h:4222"),
        ("nats-leaf://u:p#w@h:7422", "nats-leaf://u:***@h:7422"),
        ("postgresql://db/x?user=a&password=p%26w&sslpassword=k", "postgresql://db/x?user=a&password=***&sslpassword=***"),
        ("postgresql:app:pw@h/db", "postgresql:app:***@h/db"),
        ("host=db password='a b\\' c' dbname=x", "host=db password=*** dbname=x"),
        ("host=db password='unterminated", "(not shown: it may hold a secret)"),
        ("mysql://x@y/z", "mysql://x@y/z"),
        ("sqlite:////tmp/a@b.db", "sqlite:////tmp/a@b.db"),
        ("/var/lib/x.db", "/var/lib/x.db"),
    ],
)  # fmt: skip
def test_redact_url(text: str, shown: str) -> None:
    assert redact_url(text) == shown


def test_url_secrets_are_given_as_written_and_decoded() -> None:
    assert url_secrets("nats://u:p%2Fw@h") == ("p%2Fw", "p/w")
    assert url_secrets("host=db password='a b'") == ("'a b'", "a b")


def test_scrub_removes_every_encoding_of_a_secret() -> None:
    secret = "pa/ss w#rd"
    text = (
        f"raw {secret} quoted {secret.replace('/', '%2F').replace(' ', '%20').replace('#', '%23')}"
        f" plus {secret.replace('/', '%2F').replace(' ', '+').replace('#', '%23')} upper PA/SS W#RD"
    )
    assert scrub(text, [secret]) == "raw *** quoted *** plus *** upper ***"
    assert scrub("ab and more", ["ab"]) == "ab and more"  # too short to be a secret


def test_postgres_url_encodes_the_password_once() -> None:
    assert postgres_url("postgres://app:pa/ss@db/x") == "postgresql://app:pa%2Fss@db/x"
    assert postgres_url("postgresql://app:pa%2Fss@db/x") == "postgresql://app:pa%2Fss@db/x"
    assert postgres_url("postgresql://a%40b:p@w@db:5432/x?sslmode=require") == (
        "postgresql://a%40b:p%40w@db:5432/x?sslmode=require"
    )


def test_libpq_key_value_strings_are_refused_without_being_shown() -> None:
    with pytest.raises(ConfigError, match="libpq key=value") as info:
        parse_dsn("host=db user=app password=s3cret-x dbname=orders", "--ledger")
    assert "s3cret-x" not in str(info.value)
    assert parse_dsn("orders=2024.db").path == "orders=2024.db"  # no libpq key: a file name


def test_url_credentials_go_to_nats_py_separately_and_decoded() -> None:
    options = ConnectOptions(servers=("nats://app:p%40ss%2Fw@h1:4222", "nats://app:p%40ss%2Fw@h2"))
    urls, credentials = options.client_settings()
    assert urls == ["nats://h1:4222", "nats://h2"]
    assert credentials == {"user": "app", "password": "p@ss/w", "token": None}
    _, token = ConnectOptions(servers=("tls://to%3Aken@h",)).client_settings()
    assert token["token"] == "to:ken"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"servers": ("nats://a:x@h1", "nats://b:y@h2")}, "different credentials"),
        ({"servers": ("nats://a:x@h1",), "user": "a", "password": "x"}, "one authentication"),
        ({"servers": "nats://a:x,y@h1,nats://a:x,y@h2"}, "#1 (not shown"),
        ({"servers": ("ws://h:80",), "tls_ca_file": "CA"}, "plain WebSocket"),
        ({"servers": ("ws://h:80", "wss://h:443")}, "plain WebSocket"),
    ],
)
def test_connect_option_errors(kwargs: dict[str, object], fragment: str, ca_file: str) -> None:
    if kwargs.get("tls_ca_file") == "CA":
        kwargs = {**kwargs, "tls_ca_file": ca_file}
    with pytest.raises(ConfigError) as info:
        ConnectOptions(**kwargs)  # type: ignore[arg-type]
    assert fragment in str(info.value)
    assert "x,y" not in str(info.value)


@pytest.mark.parametrize(
    ("servers", "ca", "required"),
    [
        (("nats://h",), False, False),
        (("tls://h",), False, True),
        (("wss://h",), False, True),
        (("nats://h", "tls://h2"), False, True),
        (("nats://h",), True, True),
    ],
)
def test_tls_required(servers: tuple[str, ...], ca: bool, required: bool, ca_file: str) -> None:
    options = ConnectOptions(servers=servers, tls_ca_file=ca_file if ca else None)
    assert options.tls_required is required


@pytest.fixture
def ca_file(tmp_path: Path) -> str:
    import trustme

    path = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return str(path)
