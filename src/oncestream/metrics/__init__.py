"""Prometheus metrics for a Processor, a Publisher and streams (the optional ``metrics`` extra).

Every metric is listed in docs/metrics.md; a Spark query's are exported by
``oncestream.spark.instrument_query``.

Example::

    from oncestream.metrics import instrument, serve_metrics

    metrics = instrument(processor)
    server = serve_metrics(9464)  # http://127.0.0.1:9464/metrics
"""

from ._exporter import Instrumentation, MetricsServer, instrument, serve_metrics
from ._group import GroupInstrumentation, instrument_group
from ._streams import StreamsInstrumentation, instrument_streams

__all__ = [
    "GroupInstrumentation",
    "Instrumentation",
    "MetricsServer",
    "StreamsInstrumentation",
    "instrument",
    "instrument_group",
    "instrument_streams",
    "serve_metrics",
]
