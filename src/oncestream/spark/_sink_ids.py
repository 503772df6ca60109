"""The ``jetstream`` sink's generated message ids as Arrow columns, and its fan-out check.

The ids are those of :func:`~oncestream.spark._sink_options.lineage_id` and
:func:`~oncestream.spark._sink_options.position_id` (prefixed with ``idPrefix``),
built by pyarrow a batch at a time rather than by a Python call per row, so a
task's rows reach :meth:`~oncestream.Publisher.publish_columns` as columns.

Lineage ids are only deterministic when each input row gives one output row:
:class:`FanOutCheck` refuses two output rows of a task with the same lineage id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FanOutCheck", "lineage_ids", "position_ids"]


def lineage_ids(streams: pa.Array, sequences: pa.Array, prefix: str = "") -> pa.Array:
    """``prefix + lineage_id(stream, sequence)`` of every row, as a string array (no nulls in)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if streams.type != pa.string():
        streams = streams.cast(pa.string())
    return pc.binary_join_element_wise(prefix, streams, ":", sequences.cast(pa.string()), "")


def position_ids(
    prefix: str, scope: str, batch_id: int, partition: int, first: int, count: int
) -> pa.Array:
    """``prefix + position_id(scope, batch_id, partition, row)`` of rows ``first`` on."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = pa.array(range(first, first + count), pa.int64()).cast(pa.string())
    return pc.binary_join_element_wise(f"{prefix}{scope}:{batch_id}:{partition}:", rows, "")


class FanOutCheck:
    """Refuses two output rows of one task that derive the same lineage id.

    A task's rows usually come straight from one source partition: one stream,
    sequences rising. Such a batch is checked in Arrow (its sequences strictly
    rise, and start above the highest one the task has seen of that stream). Any
    other batch (several streams, sequences out of order, say after a shuffle)
    moves the task to a set of every id it has seen, filled with the ids of the
    batches checked before.

    Example::

        check = FanOutCheck()
        check.check(batch["stream"], batch["sequence"], ids)  # raises ConfigError on a repeat
    """

    def __init__(self) -> None:
        self._high: dict[str, int] = {}
        self._earlier: list[pa.Array] = []  # ids of the batches checked in Arrow
        self._seen: set[str] | None = None

    def check(self, streams: pa.Array, sequences: pa.Array, ids: pa.Array) -> None:
        """Check one batch's rows (their ``stream`` and ``sequence`` and the ids built of them).

        Raises:
            ConfigError: two rows (in this batch, or this one and an earlier one)
                derive the same lineage id, naming it.
        """
        import pyarrow.compute as pc

        n = len(ids)
        if not n:
            return
        if self._seen is None:
            low, high = pc.min_max(streams).values()
            stream = low.as_py()
            first, last = sequences[0].as_py(), sequences[n - 1].as_py()
            if (
                low == high
                and first > self._high.get(stream, first - 1)
                and (
                    n == 1 or pc.all(pc.less(sequences.slice(0, n - 1), sequences.slice(1))).as_py()
                )
            ):
                self._high[stream] = last
                self._earlier.append(ids)
                return
            self._seen = set()
            for earlier in self._earlier:
                self._seen.update(earlier.to_pylist())
            self._earlier = []
        seen = self._seen
        for msg_id in ids.to_pylist():
            if msg_id in seen:
                raise ConfigError(
                    f"two output rows derive the lineage id {msg_id!r}: one input row fans "
                    "out to several outputs. Give the sink a 'msg_id' column that is unique "
                    "per output row"
                )
            seen.add(msg_id)
