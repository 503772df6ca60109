"""W3C trace context through the pipeline (optional extra ``oncestream[otel]``).

Off by default and free when off: nothing here is imported by the hot paths
unless a component was created with ``tracing=True``. When on, the
:class:`~oncestream.Publisher`, :class:`~oncestream.ProducerSession` and
``oncestream publish --trace`` start a PRODUCER span per message and carry its
``traceparent`` in the message headers; the Spark source shows it in the
``headers`` column and the ``jetstream`` sink writes it back unchanged; the
:class:`~oncestream.Processor` starts a CONSUMER span per message, a child of
that context, with the ledger's outcome on it (``oncestream.outcome``:
``applied``, ``duplicate_suppressed``, ``retried``, ``dead_lettered``).

Spans go to the global OpenTelemetry tracer provider the application set up;
the CLI sets one up from the standard ``OTEL_*`` variables
(``oncestream.tracing._internal.configure_from_env``). Propagation uses the global propagator (W3C
trace context unless ``OTEL_PROPAGATORS`` says otherwise).

Example::

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())

    async with Publisher(conn, PublisherOptions(stream="ORDERS", tracing=True)) as pub:
        await pub.publish("orders.eu", b"...", msg_id="o-1")
"""

__all__: list[str] = []
