"""`oncestream stream get STREAM SEQ | --last-for SUBJECT` against a real nats-server."""

from __future__ import annotations

import base64

from tests.integration._cli import cli, cli_json, publish


def test_stream_get(nats_server) -> None:  # type: ignore[no-untyped-def]
    url = nats_server.url
    cli_json(url, "stream", "add", "G", "--subjects", "g.>")
    publish(url, "g.a", [b"first", b"second"], Trace="t1")
    publish(url, "g.b", [b"\x00\xffbin"])

    one = cli_json(url, "stream", "get", "G", "1")
    assert (one["subject"], one["seq"], one["data"]) == ("g.a", 1, "first")
    assert one["headers"] == {"Trace": ["t1"]} and one["time"].endswith("Z")
    last = cli_json(url, "stream", "get", "G", "--last-for", "g.a")
    assert (last["seq"], last["data"]) == (2, "second")
    binary = cli_json(url, "stream", "get", "G", "--last-for", "g.>")
    assert binary["seq"] == 3 and "data" not in binary
    assert base64.b64decode(binary["data_base64"]) == b"\x00\xffbin"

    text = cli(url, "stream", "get", "G", "2")
    assert text.exit_code == 0, text.stderr
    for part in ("stream G #2", "g.a", "second", "  Trace: t1"):
        assert part in text.stdout, (part, text.stdout)
    assert "<binary, 5 bytes: 00 ff" in cli(url, "stream", "get", "G", "3").stdout

    absent = cli(url, "stream", "get", "G", "9")
    assert absent.exit_code == 1 and "no message 9 in stream 'G'" in absent.stderr
    none_on = cli(url, "stream", "get", "G", "--last-for", "g.zzz")
    assert none_on.exit_code == 1 and "no message on 'g.zzz' in stream 'G'" in none_on.stderr
    missing = cli(url, "stream", "get", "NOPE", "1")
    assert missing.exit_code == 2 and "stream 'NOPE' not found" in missing.stderr
    for args in (["G"], ["G", "1", "--last-for", "g.a"], ["G", "0"], ["G", "x"],
                 ["G", "--last-for", "g..a"]):  # fmt: skip
        assert cli(url, "stream", "get", *args).exit_code == 2, args
