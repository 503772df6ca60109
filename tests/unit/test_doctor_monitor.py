"""`doctor --monitor`: reading a server's fsync policy from its /varz, and every other answer.

A /varz of an unexpected shape, or an HTTP server that is not nats-server's monitoring
endpoint, is bad usage (ConfigError, exit 2) naming the URL and what was expected; an
endpoint that does not answer is a failure (OncestreamError, exit 1). The answers are
served by a local HTTP server; a real nats-server's client port and monitoring port are
in tests/integration (test_bad_input.py, test_cli_doctor.py).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import orjson
import pytest

from oncestream import ConfigError, OncestreamError
from oncestream.doctor._monitor import ServerSync, read_sync_policy

VARZ = {
    "server_id": "NABC",
    "server_name": "east-1",
    "cluster": {"name": "east"},
    "jetstream": {"config": {"sync_interval": 60 * 10**9, "store_dir": "/data"}},
}


class _Endpoint(http.server.BaseHTTPRequestHandler):
    status = 200
    body = b""

    def do_GET(self) -> None:
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def _served() -> Iterator[tuple[str, type[_Endpoint]]]:
    handler = type("Handler", (_Endpoint,), {})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def endpoint(_served: tuple[str, type[_Endpoint]]) -> tuple[str, type[_Endpoint]]:
    """One endpoint for the module (a shutdown waits out serve_forever's poll), reset per test."""
    _served[1].status, _served[1].body = 200, b""
    return _served


def test_a_varz_tells_whose_policy_it_is(endpoint: tuple[str, type[_Endpoint]]) -> None:
    url, handler = endpoint
    handler.body = orjson.dumps(VARZ)
    assert read_sync_policy(url) == ServerSync(
        url=url, server="east-1", cluster="east", sync_always=False, sync_interval=60.0
    )
    alone = {**VARZ, "cluster": {}, "jetstream": {"config": {"sync_always": True}}}
    handler.body = orjson.dumps(alone)
    found = read_sync_policy(url)
    assert (found.cluster, found.sync_always, found.sync_interval) == (None, True, 120.0)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"[1, 2]", "answered a JSON list, not an object"),
        (b'"str"', "answered a JSON string, not an object"),
        (b"<html>it works</html>", "answered something that is not JSON"),
        (b'{"jetstream": {}}', "answered a JSON object without a server_name (None)"),
        (
            orjson.dumps({**VARZ, "jetstream": []}),
            "answered a jetstream that is not an object with a config: []",
        ),
        (
            orjson.dumps({**VARZ, "jetstream": {"config": {"sync_interval": "x"}}}),
            "answered jetstream.config.sync_interval 'x', expected nanoseconds (an integer >= 0)",
        ),
        (
            orjson.dumps({**VARZ, "jetstream": {"config": {"sync_interval": -5}}}),
            "answered jetstream.config.sync_interval -5, expected nanoseconds",
        ),
        (
            orjson.dumps({**VARZ, "jetstream": {"config": {"sync_always": "yes"}}}),
            "answered jetstream.config.sync_always 'yes', expected true or false",
        ),
        (
            orjson.dumps({**VARZ, "cluster": "east"}),
            "answered a cluster that is not an object with a name: 'east'",
        ),
        (
            orjson.dumps({**VARZ, "jetstream": {"config": []}}),
            "answered a jetstream that is not an object with a config",
        ),
    ],
)
def test_an_unexpected_answer_is_bad_usage_naming_the_url_and_what_was_expected(
    endpoint: tuple[str, type[_Endpoint]], body: bytes, fragment: str
) -> None:
    url, handler = endpoint
    handler.body = body
    with pytest.raises(ConfigError) as caught:
        read_sync_policy(url)
    message = str(caught.value)
    assert message.startswith(f"--monitor {url} is not a NATS monitoring endpoint: GET {url}/varz")
    assert fragment in message
    assert "expected nats-server's monitoring endpoint (its http_port" in message


def test_a_server_without_jetstream_holds_no_stream(endpoint: tuple[str, type[_Endpoint]]) -> None:
    url, handler = endpoint
    handler.body = orjson.dumps({**VARZ, "jetstream": {}})
    with pytest.raises(ConfigError, match=f"--monitor {url}: server 'east-1' runs without JetS"):
        read_sync_policy(url)


def test_http_errors(endpoint: tuple[str, type[_Endpoint]]) -> None:
    """4xx: not a monitoring endpoint (bad usage); 5xx: it did not answer (the run failed)."""
    url, handler = endpoint
    handler.status = 404
    with pytest.raises(ConfigError, match="answered HTTP 404 Not Found; expected nats-server"):
        read_sync_policy(url)
    handler.status = 503
    with pytest.raises(OncestreamError, match=f"cannot read {url}/varz: it answered HTTP 503") as e:
        read_sync_policy(url)
    assert not isinstance(e.value, ConfigError)


def test_an_oversized_answer_is_not_read_to_its_end(
    endpoint: tuple[str, type[_Endpoint]],
) -> None:
    url, handler = endpoint
    handler.body = b" " * (2 << 20)
    with pytest.raises(ConfigError, match="answered more than 1048576 bytes"):
        read_sync_policy(url)
