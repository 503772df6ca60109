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
