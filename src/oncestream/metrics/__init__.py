"""Prometheus metrics for a Processor or a Publisher (the optional ``metrics`` extra).

Example::

    from oncestream.metrics import instrument, serve_metrics

    metrics = instrument(processor)
    server = serve_metrics(9464)  # http://127.0.0.1:9464/metrics
"""

from ._exporter import (
    LATENCY_BUCKETS,
    Instrumentation,
    MetricsServer,
    instrument,
    serve_metrics,
)

__all__ = ["LATENCY_BUCKETS", "Instrumentation", "MetricsServer", "instrument", "serve_metrics"]
