"""Prometheus metrics of a :class:`~oncestream.GroupMember`: its partitions and rebalances.

Each partition's Processor is instrumented as a Processor is (its counters, latency
histograms and its consumer's pending counts, labelled with the partition's consumer,
``<group>-p<i>``) for as long as this member runs it; the member adds gauges of what
it runs and counters of how often that changed. Every metric is listed in
docs/metrics.md.

Example::

    metrics = instrument_group(member)
    server = serve_metrics(9464)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..process import GroupMember, Processor
from ._exporter import Instrumentation, instrument

__all__ = ["GroupInstrumentation", "instrument_group"]


class GroupInstrumentation:
    """A member's metrics in a registry; :meth:`close` removes them and its partitions'."""

    def __init__(self, member: GroupMember, registry: CollectorRegistry) -> None:
        self.member = member
        self._registry = registry
        self._partitions: dict[int, Instrumentation] = {}
        self._lock = threading.Lock()
        for partition in member.partitions:
            processor = member.processor(partition)
            if processor is not None:
                self._follow(processor, True)
        member.processor_listeners.append(self._follow)
        registry.register(self)

    def _follow(self, processor: Processor, started: bool) -> None:
        with self._lock:
            key = id(processor)
            if started and key not in self._partitions:
                self._partitions[key] = instrument(processor, self._registry)
            elif not started and key in self._partitions:
                self._partitions.pop(key).close()

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        member = self.member
        labels = ["stream", "group", "member"]
        key = [member.stream, member.group, member.member]
        running = GaugeMetricFamily(
            "oncestream_group_partitions",
            "Partitions this member runs (a Processor each, applying or waiting for the pin).",
            labels=labels,
        )
        running.add_metric(key, float(len(member.partitions)))
        yield running
        active = GaugeMetricFamily(
            "oncestream_group_active_partitions",
            "Partitions this member applies now (it holds their pin and fence).",
            labels=labels,
        )
        active.add_metric(key, float(len(member.active)))
        yield active
        owned = GaugeMetricFamily(
            "oncestream_group_partition_active",
            "1 for each partition this member applies now, 0 for one it waits on.",
            labels=[*labels, "partition"],
        )
        applying = set(member.active)
        for partition in member.partitions:
            owned.add_metric([*key, str(partition)], 1.0 if partition in applying else 0.0)
        yield owned
        stats = member.stats
        for name, value, doc in (
            ("rebalances", stats.rebalances, "Times this member's assignment changed."),
            ("partitions_started", stats.moved_in, "Partitions this member started running."),
            ("partitions_released", stats.moved_out, "Partitions this member stopped running."),
            (
                "partition_restarts",
                stats.restarts,
                "Partition Processors restarted after an error.",
            ),
        ):
            counter = CounterMetricFamily(f"oncestream_group_{name}", doc, labels=labels)
            counter.add_metric(key, float(value))
            yield counter

    def close(self) -> None:
        """Stop reporting the member and its partitions."""
        if self._follow in self.member.processor_listeners:
            self.member.processor_listeners.remove(self._follow)
        with self._lock:
            for item in self._partitions.values():
                item.close()
            self._partitions.clear()
        self._registry.unregister(self)


def instrument_group(
    member: GroupMember, registry: CollectorRegistry = REGISTRY
) -> GroupInstrumentation:
    """Export ``member``'s metrics, and its partitions' Processors', through ``registry``.

    Call it from the event loop that runs the member (its partitions' pending counts are
    asked for at scrape time), before or after ``run()``.
    """
    return GroupInstrumentation(member, registry)
