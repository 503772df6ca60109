"""The curated public API: everything in ``__all__`` exists, nothing private leaks."""

from __future__ import annotations

import importlib

import oncestream
from oncestream import _errors


def test_all_names_resolve_and_are_sorted() -> None:
    for name in oncestream.__all__:
        assert hasattr(oncestream, name), name
    assert list(oncestream.__all__) == sorted(oncestream.__all__)
    assert len(set(oncestream.__all__)) == len(oncestream.__all__)
    assert not [n for n in oncestream.__all__ if n.startswith("_") and n != "__version__"]


def test_every_error_is_exported_and_rooted() -> None:
    for name in _errors.__all__:
        obj = getattr(_errors, name)
        if isinstance(obj, type):
            assert issubclass(obj, oncestream.OncestreamError)
            assert name in oncestream.__all__


def test_py_typed_marker_ships() -> None:
    spec = importlib.util.find_spec("oncestream")
    assert spec is not None and spec.origin is not None
    from pathlib import Path

    assert (Path(spec.origin).parent / "py.typed").is_file()


def test_message_type_is_public() -> None:
    """Handlers and pulls hand out oncestream's own message type, not nats-py's ``Msg``."""
    import typing

    from oncestream.process._processor import Handler

    assert {"Message", "MessageMetadata"} <= set(oncestream.__all__)
    assert typing.get_args(Handler)[0][0] is oncestream.Message
    assert oncestream.MessageStream.next_batch.__annotations__["return"] == "list[Message]"
