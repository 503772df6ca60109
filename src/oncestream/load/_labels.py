"""How the loader's messages name its options: the Python spelling, or the CLI's flags."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["LABELS", "Label", "default_label"]

#: Option -> how a message names it, for a Python caller. ``oncestream publish``
#: passes its flags instead (``--subject``, ``--fresh``, ...).
LABELS = {
    "stream": "LoadOptions.stream",
    "subject": "LoadOptions.subject",
    "id_field": "LoadOptions.id_field",
    "progress_stream": "LoadOptions.progress_stream",
    "fresh": "fresh=True",
    "no_resume": "resume=False",
    "patience": "LoadOptions.publisher's ack_timeout x max_attempts",
}

#: Gives the name of an option (a key of :data:`LABELS`) for a message.
Label = Callable[[str], str]


def default_label(option: str) -> str:
    """How a message names ``option`` for a Python caller."""
    return LABELS[option]
