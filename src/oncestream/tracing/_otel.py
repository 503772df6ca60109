"""The OpenTelemetry side of tracing: spans, header injection and extraction."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["OUTCOME", "Tracer", "configure_from_env", "tracer"]

#: The span attribute naming what the Processor's ledger decided for a message.
OUTCOME = "oncestream.outcome"
_SCOPE = "oncestream"
_EXPORTERS = ("otlp", "console", "none")


def _require() -> Any:
    try:
        from opentelemetry import trace
    except ImportError:  # pragma: no cover - exercised without the extra installed
        raise ConfigError("tracing needs OpenTelemetry: pip install 'oncestream[otel]'") from None
    return trace


def _propagate() -> Any:
    """OpenTelemetry's ``propagate`` module, which reads ``OTEL_PROPAGATORS`` when imported.

    Raises:
        ConfigError: ``OTEL_PROPAGATORS`` names a propagator that is not installed
            (OpenTelemetry raises a bare ValueError at import), naming the value and
            the propagators installed.
    """
    try:
        from opentelemetry import propagate
    except ValueError as exc:
        from importlib.metadata import entry_points

        names = sorted({e.name for e in entry_points(group="opentelemetry_propagator")})
        raise ConfigError(
            f"OTEL_PROPAGATORS={os.environ.get('OTEL_PROPAGATORS', '')!r}: {exc} "
            f"(installed: {', '.join(names) or 'none'}; or 'none')"
        ) from None
    return propagate


class Tracer:
    """oncestream's spans on the global tracer provider (create with :func:`tracer`)."""

    def __init__(self, component: str) -> None:
        trace = _require()
        propagate = _propagate()
        from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

        self.component = component
        self._tracer = trace.get_tracer(_SCOPE)
        self._propagate = propagate
        self._kind = SpanKind
        self._status = (Status, StatusCode)
        self._in_context = set_span_in_context

    # -- producers ------------------------------------------------------

    def start_publish(
        self, subject: str, msg_id: str | None, headers: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], Span]:
        """A PRODUCER span for one message; returns the headers carrying its context."""
        span = self._tracer.start_span(
            f"publish {subject}",
            kind=self._kind.PRODUCER,
            attributes={
                "messaging.system": "nats",
                "messaging.operation.type": "send",
                "messaging.destination.name": subject,
                "messaging.message.id": msg_id or "",
                "oncestream.component": self.component,
            },
        )
        carrier: dict[str, Any] = dict(headers or {})
        self._propagate.inject(carrier, context=self._in_context(span))
        return carrier, span

    def end_publish(self, span: Span, stream: str | None, seq: int | None, duplicate: bool) -> None:
        """End a producer span with what the PubAck said."""
        if stream is not None:
            span.set_attribute("messaging.nats.stream", stream)
        if seq:  # a fast-ingest batch's flow ack names no sequence (0): leave it out
            span.set_attribute("messaging.nats.sequence", seq)
        span.set_attribute("oncestream.duplicate", duplicate)
        span.end()

    def fail(self, span: Span, error: BaseException) -> None:
        """End a span as failed."""
        status, code = self._status
        span.record_exception(error)
        span.set_status(status(code.ERROR, f"{type(error).__name__}: {error}"))
        span.end()

    def ack_callback(self, span: Span) -> Any:
        """A done-callback for a PubAck future that ends ``span``."""

        def done(future: Any) -> None:
            if future.cancelled():
                self.fail(span, RuntimeError("cancelled"))
                return
            error = future.exception()
            if error is not None:
                self.fail(span, error)
                return
            ack = future.result()
            self.end_publish(span, ack.stream, ack.seq, ack.duplicate)

        return done

    # -- consumers ------------------------------------------------------

    def consumed(
        self,
        msgs: Sequence[Any],
        outcome: str,
        started_ns: int,
        *,
        stream: str,
        consumer: str,
    ) -> None:
        """One CONSUMER span per message, a child of its ``traceparent``, with ``outcome``."""
        end = time.time_ns()
        for msg in msgs:
            context = self._propagate.extract(_first_values(msg.headers))
            metadata = msg.metadata
            span = self._tracer.start_span(
                f"process {msg.subject}",
                context=context,
                kind=self._kind.CONSUMER,
                start_time=started_ns,
                attributes={
                    "messaging.system": "nats",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": msg.subject,
                    "messaging.consumer.group.name": consumer,
                    "messaging.nats.stream": stream,
                    "messaging.nats.sequence": metadata.stream_seq,
                    "messaging.nats.delivered": metadata.num_delivered,
                    "messaging.message.id": msg.msg_id or "",
                    OUTCOME: outcome,
                },
            )
            span.end(end_time=end)


def _first_values(headers: Mapping[str, Any] | None) -> dict[str, str]:
    if not headers:
        return {}
    out: dict[str, str] = {}
    for key, value in headers.items():
        if isinstance(value, list | tuple):
            if value:
                out[key] = str(value[0])
        else:
            out[key] = str(value)
    return out


def tracer(enabled: bool, component: str) -> Tracer | None:
    """A :class:`Tracer` when ``enabled``, else None (the hot paths test for None only).

    Raises:
        ConfigError: enabled without OpenTelemetry installed.
    """
    return Tracer(component) if enabled else None


def configure_from_env(service_name: str) -> None:
    """Set up a tracer provider from the standard ``OTEL_*`` variables (for the CLI).

    ``OTEL_TRACES_EXPORTER``: ``otlp`` (default; OTLP over HTTP to
    ``OTEL_EXPORTER_OTLP_ENDPOINT``, default http://localhost:4318), ``console``
    (JSON spans on stderr) or ``none``. ``OTEL_SERVICE_NAME`` and
    ``OTEL_RESOURCE_ATTRIBUTES`` name the service (default: ``service_name``).
    A provider the application already set is kept.

    Raises:
        ConfigError: OpenTelemetry is not installed, the exporter is unknown, or
            ``OTEL_PROPAGATORS`` names a propagator that is not installed.
    """
    trace = _require()
    _propagate()  # a bad OTEL_PROPAGATORS is named before anything starts
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind not in _EXPORTERS:
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER must be one of {', '.join(_EXPORTERS)}, got {kind!r}"
        )
    attrs = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(attrs))
    if kind == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http "
                "(pip install 'oncestream[otel]'), or set OTEL_TRACES_EXPORTER=console"
            ) from None
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif kind == "console":
        import sys

        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    trace.set_tracer_provider(provider)
