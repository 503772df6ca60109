"""The options a user may pick, drawn per trial: every worker otherwise runs the defaults.

The workers start from the library's defaults (``ProcessorOptions()``,
``PublisherOptions()``, the ``jetstream`` sink's and ``oncestream publish``'s own,
streams with the duplicate window :class:`~oncestream.streams.StreamSpec` gives).
What a user may choose instead is drawn per trial (:func:`draw`), from the campaign
seed and the trial's number alone (a trial reruns with ``--first``), each option a
seeded cycle over its values like the fault kinds (:func:`torture.nemesis.cycle_kind`),
so N trials hold every value about N / len(values) times:

* ``ack_policy``: the SQLite ``Processor``'s and the group members' ``ack_policy``
  (``explicit``, ``all``); the PostgreSQL pair is a pinned priority group of one
  consumer, which needs ``explicit``.
* ``handler``: ``message`` (``handler(msg, tx)``) or ``batch`` (``batch_handler``:
  ``executemany`` on SQLite, one ``COPY`` per transaction on PostgreSQL).
* ``prune``: ``default`` (``prune_interval`` 30 s, ``prune_grace`` 120 s: nothing is old
  enough within a trial) or ``on`` (every second, 1 s grace: rows pruned under the faults,
  and a consumer reset below the prune horizon refused or clamped as the product does).
* ``dead_letters``: ``none``; ``keep`` (a share of the keys fails in every processor's
  handler: dead-lettered to stream ``DLQ`` after ``max_deliver`` attempts, where the checker
  finds each exactly once per consumer); ``replay`` (the same, and ``oncestream dlq replay``
  republishes the SQLite consumer's dead letters mid-run and in the drain: a replayed copy
  is applied once by every processor). The failing share is drawn in ``fail_share``.
* ``window``: ``default`` (2 min) or ``short``: the producers' stream keeps 4 s, shorter
  than most faults, so the ``ProducerSession``'s resume by subject sequence and
  ``oncestream publish``'s progress records work beyond the window (the CLI with the retry
  horizon a user must pick to fit it: ``--ack-timeout 1s --max-attempts 3``); the
  ``Publisher``, which relies on the window by design, writes its own stream ``TP`` with the
  default window then; in Spark trials the sink's output stream keeps 30 s (its retry
  horizon fits; a driver restart outlasts it).
* Spark trials: ``sink_stream`` (the sink given option ``stream`` or not), ``spark_out``
  (the second query: ``transactional`` on SQLite or on PostgreSQL, or ``delta``),
  ``pyspark`` (``newest``: the worktree's; ``oldest``: ``make setup-oldest``'s venv).
* ``members``: who applies on the trial's PostgreSQL (the SQLite ``Processor`` runs in
  every trial). ``pinned-pair``: two Processors ``pg1``, ``pg2``, active/standby on one
  consumer ``pg`` of the unpartitioned stream ``T`` (``t.>``). ``partitioned``: ``T`` is
  created with :data:`PARTITIONS` partitions of ``t.*`` keyed by its one ``*`` token
  (``StreamSpec(partitions=4, partition_key=(1,))``), and ``pg1``, ``pg2`` are two
  members of one :class:`~oncestream.GroupMember` group ``pg`` (elastic membership, the
  library's timings) sharing the PostgreSQL ledger, as members on two hosts would: a
  consumer ``pg-p<N>`` per partition. The producers write three subjects, so three
  keys: ``t.pub`` (partition 0), ``t.sess`` (3) and ``t.cli`` (1); partition 2 gets
  nothing. Rendezvous assignment gives ``pg1`` partitions 2, 3 and ``pg2`` 0, 1 while
  both live, so each member applies a share in every trial (``window=short``: ``t.sess``
  and ``t.cli``); a kill or pause of one that outlasts its membership key (4 s) moves its
  partitions to the other, and back once it returns. A leaf trial's processors read the
  hub's stream, which sources the leaf's and so cannot be partitioned (a partitioned
  stream has no sources): ``partitioned`` becomes ``pinned-pair`` there; so does
  ``dead_letters=replay`` become ``keep`` in partitioned trials (``oncestream dlq
  replay`` republishes to the dead letter's stored subject ``<p>.t.<producer>``, which
  the partitioned stream does not capture: refused).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict, dataclass
from typing import Any

from .nemesis import cycle_kind

#: Every option and its values, in the order the report lists them.
VALUES: dict[str, tuple[str, ...]] = {
    "ack_policy": ("explicit", "all"),
    "handler": ("message", "batch"),
    "prune": ("default", "on"),
    "dead_letters": ("none", "keep", "replay"),
    "window": ("default", "short"),
    "members": ("pinned-pair", "partitioned"),
}
#: Drawn in Spark trials only (cycled over the Spark trials' ordinals).
SPARK_VALUES: dict[str, tuple[str, ...]] = {
    "sink_stream": ("with", "without"),
    "spark_out": ("sqlite", "postgres", "delta"),
    "pyspark": ("newest", "oldest"),
}
#: The partitions of the processed stream in ``members=partitioned`` trials (of ``t.*``,
#: keyed by token 1: the producer's name).
PARTITIONS = 4
#: Share of the input keys whose handler fails, when dead letters are drawn.
FAIL_SHARE = (0.002, 0.01)
#: The short duplicate windows (s): the producers' stream, the Spark sink's output stream.
SHORT_WINDOW, SHORT_SINK_WINDOW = 4.0, 30.0


@dataclass(frozen=True)
class TrialOptions:
    """What a trial runs beyond the defaults (see the module docstring)."""

    ack_policy: str = "explicit"
    handler: str = "message"
    prune: str = "default"
    dead_letters: str = "none"
    fail_share: float = 0.0
    window: str = "default"
    members: str = "pinned-pair"
    sink_stream: str | None = None
    spark_out: str | None = None
    pyspark: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @property
    def failing(self) -> bool:
        return self.dead_letters != "none"

    def words(self) -> list[str]:
        """``option=value`` for every drawn option (the report's per-option counts)."""
        return [f"{k}={v}" for k, v in self.as_dict().items() if k != "fail_share"]


def draw(campaign_seed: int, index: int, spark_ordinal: int | None) -> TrialOptions:
    """Trial ``index``'s options; ``spark_ordinal``: its rank among the Spark trials (None:
    no Spark). Each option cycles over its values through seeded shuffles, so consecutive
    trials cover them all."""
    picked: dict[str, Any] = {
        name: cycle_kind(campaign_seed, f"option:{name}", list(values), index)
        for name, values in VALUES.items()
    }
    if picked["dead_letters"] != "none":
        rng = random.Random(f"{campaign_seed}:fail:{index}")
        picked["fail_share"] = round(rng.uniform(*FAIL_SHARE), 4)
    if spark_ordinal is not None:
        for name, values in SPARK_VALUES.items():
            picked[name] = cycle_kind(campaign_seed, f"option:{name}", list(values), spark_ordinal)
    return TrialOptions(**picked)


def failing_key(key: str, share: float) -> bool:
    """Whether ``key``'s handler fails in a trial with ``share`` (a hash, not a draw: the
    workers, the checker and every restart agree without telling each other)."""
    if share <= 0:
        return False
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share
