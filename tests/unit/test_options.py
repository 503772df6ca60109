"""ConnectOptions and option parsers validate up front with messages naming the bad value."""

from __future__ import annotations

import pytest

from oncestream import ConfigError, ConnectOptions
from oncestream._options import parse_bool, parse_duration, parse_positive_int
from oncestream.spark._options import connect_options


def test_defaults_and_prefixes() -> None:
    assert ConnectOptions().js_prefix == "$JS.API"
    assert ConnectOptions(domain="hub").js_prefix == "$JS.hub.API"
    assert ConnectOptions(api_prefix="JS.acc@hub.API").js_prefix == "JS.acc@hub.API"


def test_bare_host_port_and_comma_list_are_normalised() -> None:
    opts = ConnectOptions(servers="127.0.0.1:4222, nats://127.0.0.1:4223")  # type: ignore[arg-type]
    assert opts.servers == ("nats://127.0.0.1:4222", "nats://127.0.0.1:4223")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"servers": ()}, "at least one"),
        ({"servers": ("http://x:1",)}, "not a NATS URL"),
        ({"servers": ("nats://h:99999",)}, "invalid port"),
        ({"user": "u"}, "together"),
        ({"user": "u", "password": "p", "token": "t"}, "one authentication method"),
        ({"domain": "a", "api_prefix": "B.API"}, "mutually exclusive"),
        ({"domain": "bad domain"}, "letters, digits"),
        ({"api_prefix": "ends.with."}, "api_prefix"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"creds": "/nonexistent/x.creds"}, "creds"),
        ({"tls_cert_file": "/x"}, "together"),
        ({"max_reconnect_attempts": -5}, "max_reconnect_attempts"),
    ],
)
def test_invalid_combinations(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ConnectOptions(**kwargs)  # type: ignore[arg-type]


def test_secrets_stay_out_of_repr_and_errors() -> None:
    opts = ConnectOptions(user="alice", password="s3cret-pw")
    assert "s3cret-pw" not in repr(opts)
    assert "s3cret-tok" not in repr(ConnectOptions(token="s3cret-tok"))
    with pytest.raises(ConfigError) as info:
        ConnectOptions(servers=("http://bob:hunter2@host:1",))
    assert "hunter2" not in str(info.value)


def test_spark_connect_options_are_case_insensitive_and_requires_servers() -> None:
    opts = connect_options(
        {"servers": "nats://127.0.0.1:1", "apiPrefix": "JS.x.API", "requestTimeout": "250ms"}
    )
    assert opts.js_prefix == "JS.x.API"
    assert opts.request_timeout == 0.25
    with pytest.raises(ConfigError, match="'servers' is required"):
        connect_options({"stream": "X"})


def test_parsers() -> None:
    assert parse_duration("d", "1.5m") == 90.0
    assert parse_duration("d", "250ms") == 0.25
    assert parse_duration("d", 3) == 3.0
    with pytest.raises(ConfigError, match="d must be a duration"):
        parse_duration("d", "soon")
    assert parse_positive_int("n", "12") == 12
    with pytest.raises(ConfigError, match="n must be an integer > 0, got '-1'"):
        parse_positive_int("n", "-1")
    assert parse_positive_int("n", "0", allow_zero=True) == 0
    assert parse_bool("b", "TRUE") is True
    with pytest.raises(ConfigError, match="'true' or 'false'"):
        parse_bool("b", "maybe")
