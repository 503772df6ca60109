"""What :func:`~oncestream.load.load` loads where, and how its messages name the options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from .._errors import ConfigError
from .._names import check_stream_name
from .._options import parse_rate
from ..publish import PublisherOptions
from ._input import InputFormat, SubjectTemplate
from ._labels import LABELS
from ._progress import PROGRESS_STREAM

__all__ = ["LoadOptions"]


@dataclass(frozen=True, kw_only=True)
class LoadOptions:
    """Where :func:`~oncestream.load.load` stores records, and how it names and resumes them.

    Args:
        stream: the target stream; it must exist and capture ``subject``.
        subject: the subject of each record; ``{field}`` placeholders are filled
            from the record's fields (``"orders.{region}"``).
        id_field: the record field (a string or an integer) that is its msg id.
        id_from_content: the msg id is the sha256 of the record's canonical JSON
            (sorted keys). Give exactly one of ``id_field`` and ``id_from_content``.
        format: ``"jsonl"``, ``"csv"`` or ``"auto"`` (by the file's extension,
            else by its first line); a file's only.
        on_error: at a malformed record, ``"stop"`` the load (it raises
            :class:`~oncestream.load.LoadIncomplete`) or ``"skip"`` it (counted).
        resume: keep progress records for a regular file, so that a re-run adds
            nothing, however late, and resumes after what an earlier run confirmed.
            A stream or an iterable of records has no identity to record progress
            for: its re-runs are de-duplicated by msg id inside the stream's
            duplicate window only.
        fresh: ignore a file's recorded progress and load it from line 1
            (records stored before, outside the duplicate window, are stored again).
        progress_stream: the stream of progress records (created when missing).
        rate: at most this many records per second, 0.001 to 1e9 (None: as fast as PubAcks
            come back).
        publisher: how records are published (in-flight limit, ack timeout,
            attempts, tracing); its ``stream`` is ``stream`` and its acks are
            per message (``ingest="acks"``), since progress records keep the
            stream sequence of each record.
        labels: how messages name the options, by option (keys ``stream``,
            ``subject``, ``id_field``, ``progress_stream``, ``fresh``,
            ``no_resume``, ``patience``); the default is their Python spelling, ``oncestream
            publish`` passes its flags.

    Raises:
        ConfigError: naming the bad value and what is allowed.

    Example::

        LoadOptions(stream="ORDERS", subject="orders.{region}", id_field="id")
    """

    stream: str
    subject: str
    id_field: str | None = None
    id_from_content: bool = False
    format: Literal["auto", "jsonl", "csv"] = "auto"
    on_error: Literal["stop", "skip"] = "stop"
    resume: bool = True
    fresh: bool = False
    progress_stream: str = PROGRESS_STREAM
    rate: float | None = None
    publisher: PublisherOptions = field(default_factory=PublisherOptions)
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: ``subject``, parsed.
    template: SubjectTemplate = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.labels, Mapping) or not all(
            isinstance(v, str) and v for v in self.labels.values()
        ):
            raise ConfigError(f"labels must map option names to labels, got {self.labels!r}")
        unknown = sorted(set(self.labels) - set(LABELS))
        if unknown:
            raise ConfigError(f"labels: unknown keys {unknown}; known: {sorted(LABELS)}")
        check_stream_name(self.stream, "stream")
        check_stream_name(self.progress_stream, "progress_stream")
        if not isinstance(self.subject, str):
            raise ConfigError(
                f"subject must be a subject or a template like 'orders.{{region}}', "
                f"got {self.subject!r}"
            )
        if self.id_field is not None and self.id_from_content:
            raise ConfigError("give one of id_field or id_from_content=True, not both")
        if self.id_field is None and self.id_from_content is not True:
            raise ConfigError("give exactly one of id_field='FIELD' or id_from_content=True")
        if self.id_field is not None and (
            not isinstance(self.id_field, str) or not self.id_field.strip()
        ):
            raise ConfigError(f"id_field must name a record field, got {self.id_field!r}")
        if self.format not in tuple(InputFormat):
            raise ConfigError(f"format must be 'auto', 'jsonl' or 'csv', got {self.format!r}")
        if self.on_error not in ("stop", "skip"):
            raise ConfigError(f"on_error must be 'stop' or 'skip', got {self.on_error!r}")
        for name in ("resume", "fresh", "id_from_content"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.fresh and not self.resume:
            raise ConfigError("fresh=True and resume=False contradict each other; give one")
        if self.rate is not None:
            if isinstance(self.rate, bool) or not isinstance(self.rate, int | float):
                raise ConfigError(f"rate must be a number per second, got {self.rate!r}")
            parse_rate("rate", self.rate)
        if not isinstance(self.publisher, PublisherOptions):
            raise ConfigError(
                f"publisher must be a PublisherOptions, got {type(self.publisher).__name__}"
            )
        if self.publisher.stream not in (None, self.stream):
            raise ConfigError(
                f"publisher.stream {self.publisher.stream!r} is not stream {self.stream!r}; "
                "leave it unset"
            )
        if self.publisher.ingest == "fast":
            raise ConfigError(
                "publisher.ingest='fast' cannot load: progress records keep the stream "
                "sequence of each record, which fast-ingest batches do not report"
            )
        object.__setattr__(self, "template", SubjectTemplate(self.subject, self.label("subject")))

    def label(self, option: str) -> str:
        """How messages name ``option`` (see ``labels``)."""
        return self.labels.get(option, LABELS[option])

    def publisher_options(self) -> PublisherOptions:
        """The options the records are published with: ``publisher`` on ``stream``, acks."""
        return replace(self.publisher, stream=self.stream, ingest="acks")

    @property
    def ids(self) -> str:
        """The id mode as progress records keep it: ``field:<name>`` or ``content``."""
        return f"field:{self.id_field}" if self.id_field is not None else "content"

    @property
    def needed_columns(self) -> dict[str, str]:
        """CSV columns every row needs, each with the option that needs it."""
        needed = dict.fromkeys(self.template.fields, self.label("subject"))
        if self.id_field is not None:
            needed[self.id_field] = self.label("id_field")
        return needed
