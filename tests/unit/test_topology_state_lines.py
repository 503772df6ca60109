"""`oncestream topology up` / `status` print each server's line as docs/topologies.md shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream.cli import _app, _topology


def test_a_domain_is_printed_as_a_word_not_as_markup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _app.Console(record=True, width=200, soft_wrap=True)
    monkeypatch.setattr(_topology, "console", recorder)
    state = {
        "kind": "cluster3",
        "servers": {
            "hub": {"url": "nats://127.0.0.1:1", "domain": "hub", "monitor": "http://m", "pid": 7}
        },
    }
    _topology._print_state(state, tmp_path)
    text = recorder.export_text()
    assert "[bold]" not in text
    assert "nats://127.0.0.1:1  domain hub  monitor http://m  pid 7" in text


def _walkthrough_block() -> list[str]:
    """docs/topologies.md's output of ``topology up hub-leaf --dir /tmp/topo``."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "topologies.md").read_text()
    block = page.split("$ oncestream topology up hub-leaf --dir /tmp/topo\n", 1)[1]
    return block.split("\n```", 1)[0].splitlines()


def test_the_walkthrough_shows_what_up_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's sample, line for line, from the state it shows (ports, pids, users)."""
    recorder = _app.Console(record=True, width=400, soft_wrap=True)
    monkeypatch.setattr(_topology, "console", recorder)
    local = "http://127.0.0.1:"
    hub = {"url": "nats://127.0.0.1:41873", "domain": "hub", "monitor": local + "38121"}
    leaf = {"url": "nats://127.0.0.1:35517", "domain": "leaf", "monitor": local + "44003"}
    state = {
        "kind": "hub-leaf",
        "servers": {"hub": hub | {"pid": 4242}, "leaf": leaf | {"pid": 4245}},
        "users": {
            "SYS": {"user": "admin", "password": "x"},
            "ACC": {"user": "acc", "password": "x"},
            "IMPORT_CLIENT": {"user": "import_client", "password": "x"},
        },
    }
    _topology._print_state(state, Path("/tmp/topo"))
    assert recorder.export_text().splitlines() == _walkthrough_block()
