"""nats-server releases with known bugs that touch exactly-once: the one table.

Each row was read in nats-server's source and history: the pull request that
fixes it, the code before and after, and the release tags that carry the fix
(``git tag --contains``). The start-up checks
(:func:`~oncestream.streams._internal.check_server_bugs`: the Publisher, atomic batches,
every stream create) and ``oncestream doctor`` both read this table; a row is
added here and nowhere else.

Example::

    from oncestream.streams._internal import known_bugs

    [bug.key for bug in known_bugs((2, 14, 0), cluster=True, replicas=3)]
    # ['dedupe-leader-change', 'atomic-eob-max-size']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._headers import BATCH_COMMIT, MSG_ID

__all__ = ["SERVER_BUGS", "ServerBug", "Version", "format_version", "known_bugs"]

#: ``(major, minor, patch)`` of a nats-server release.
Version = tuple[int, int, int]


def format_version(version: tuple[int, ...]) -> str:
    """``(2, 14, 0)`` -> ``"2.14.0"``."""
    return ".".join(str(part) for part in version)


@dataclass(frozen=True, kw_only=True)
class ServerBug:
    """One known bug of nats-server releases, and what it means for oncestream.

    Args:
        key: a short, stable name (``--json`` output, logs, tests).
        affected: inclusive ``(first, last)`` release ranges that have the bug.
        fixed: the first release of each line that has the fix.
        breaks: what goes wrong, in a user's terms.
        touches: which oncestream features it concerns ("nothing" when none of
            oncestream's writers can trigger it).
        scope: where it happens: ``"any"`` server, only a server in a
            ``"cluster"``, or only ``"replicated"`` streams (replicas > 1).
        severity: for oncestream's guarantees: ``"breaks"`` (messages lost or stored
            twice), ``"weakens"`` (a publish fails, or needs retries, that should
            not), ``"none"`` (nothing oncestream does is affected).
        uses: the start-up checks that report it: ``"publish"`` (a Publisher or
            atomic batches start), ``"create"`` (a stream is created).
        at_start: what those checks do: ``"warn"`` (one log line per process) or
            ``"refuse"`` (:class:`~oncestream.ConfigError`).
        reference: the upstream pull request with the fix.
    """

    key: str
    affected: tuple[tuple[Version, Version], ...]
    fixed: tuple[Version, ...]
    breaks: str
    touches: str
    scope: Literal["any", "cluster", "replicated"]
    severity: Literal["breaks", "weakens", "none"]
    uses: tuple[str, ...]
    at_start: Literal["warn", "refuse"] = "warn"
    reference: str

    def affects(self, version: tuple[int, ...]) -> bool:
        """Whether release ``version`` (major, minor, patch) has the bug."""
        found = tuple(version[:3])
        return any(first <= found <= last for first, last in self.affected)

    @property
    def fix(self) -> str:
        """What to upgrade to: ``nats-server 2.14.5 or newer (2.12.15 on 2.12)``."""
        newest, *older = sorted(self.fixed, reverse=True)
        lines = ", ".join(f"{format_version(v)} on {v[0]}.{v[1]}" for v in older)
        return f"nats-server {format_version(newest)} or newer" + (f" ({lines})" if lines else "")

    def applies(self, *, cluster: bool | None, replicas: int | None, assume: bool) -> bool:
        """Whether the deployment is in this bug's scope (``assume`` when it is not known)."""
        if replicas is not None and replicas > 1:
            cluster = True  # only a cluster holds replicas
        if self.scope == "replicated":
            return assume if replicas is None else replicas > 1
        if self.scope == "cluster":
            return assume if cluster is None else cluster
        return True


SERVER_BUGS: tuple[ServerBug, ...] = (
    ServerBug(
        key="dedupe-leader-change",
        # The cleanup of in-flight msg ids on a leader change came with 2.11.0 (#6486)
        # without holding clMu; 2.12.9 and 2.14.1 take it first (server/jetstream_cluster.go,
        # processStreamLeaderChange).
        affected=(((2, 11, 0), (2, 12, 8)), ((2, 14, 0), (2, 14, 0))),
        fixed=((2, 12, 9), (2, 14, 1)),
        breaks=(
            "a publish in flight while a replicated stream changes leader can leave its "
            f"{MSG_ID} marked 'in process' on the new leader for the whole duplicate window: "
            "every retry of it is refused (10158), so the Publisher gives up (PublishFailed) "
            "although nothing was stored"
        ),
        touches=(
            "Publisher retries (publish, producer sessions, atomic batches, the Spark "
            "jetstream sink) into streams with replicas > 1"
        ),
        scope="replicated",
        severity="weakens",
        uses=("publish",),
        reference="https://github.com/nats-io/nats-server/pull/8106",
    ),
    ServerBug(
        key="atomic-eob-max-size",
        # Committing with an end-of-batch marker came with 2.14.0; the size check counted
        # the marker (server/stream.go, processJetStreamAtomicBatchMsg) until 2.14.3.
        affected=(((2, 14, 0), (2, 14, 2)),),
        fixed=((2, 14, 3),),
        breaks=(
            "an atomic batch of exactly the largest size (max_batch_size, 1000 by default) "
            f"committed with an end-of-batch marker ({BATCH_COMMIT}: eob) is refused as too "
            "large (10199) and nothing of it is stored"
        ),
        touches=(
            "nothing: oncestream's atomic batches commit on their last message "
            f"({BATCH_COMMIT}: 1), which these releases accept at 1000 messages"
        ),
        scope="any",
        severity="none",
        uses=(),
        reference="https://github.com/nats-io/nats-server/pull/8305",
    ),
    ServerBug(
        key="idempotent-create-created",
        # 2.12.14 / 2.14.4 detect a re-created stream by its creation time after a meta
        # snapshot (#8413), while an idempotent create still proposed a new one
        # (server/jetstream_cluster.go, jsClusteredStreamRequest) until 2.12.15 / 2.14.5.
        affected=(((2, 12, 14), (2, 12, 14)), ((2, 14, 4), (2, 14, 4))),
        fixed=((2, 12, 15), (2, 14, 5)),
        breaks=(
            "in a cluster, creating a stream that exists with the same config (an idempotent "
            "create: `nats stream add`, a client's create-on-start, two writers creating it at "
            "once) rewrites its creation time; a server hosting the stream that was down "
            "meanwhile and catches up from a meta snapshot takes it for a new stream and "
            "deletes its copy: an R1 stream hosted there loses every message"
        ),
        touches=(
            "every stream in a cluster (the log oncestream reads, replays and de-duplicates "
            "against); oncestream's own creates check first, so only two of them creating one "
            "stream at once send an idempotent create"
        ),
        scope="cluster",
        severity="breaks",
        uses=("publish", "create"),
        reference="https://github.com/nats-io/nats-server/pull/8449",
    ),
    ServerBug(
        key="sync-blocks-pending-writes",
        # Replicated streams flush asynchronously since 2.12.0 (server/stream.go: AsyncFlush
        # when not SyncAlways and Replicas > 1); syncBlocks flushed a block's pending writes
        # only when it needed a sync, and closed an idle block's file with writes pending
        # (server/filestore.go) until 2.12.3 / 2.14.0 (2.11 streams never flush async).
        affected=(((2, 12, 0), (2, 12, 2)),),
        fixed=((2, 12, 3), (2, 14, 0)),
        breaks=(
            "on a replicated stream without sync_interval: always, a replica paused long "
            "enough for the periodic sync to run can drop acknowledged writes it had not "
            "written out yet: that replica's copy misses them, and if it becomes the leader "
            "the stream does"
        ),
        touches=(
            "every write into streams with replicas > 1 and the default sync_interval "
            "(publish, producer sessions, atomic batches, the Spark jetstream sink)"
        ),
        scope="replicated",
        severity="breaks",
        uses=("publish", "create"),
        reference="https://github.com/nats-io/nats-server/pull/7594",
    ),
    ServerBug(
        key="rejected-consumer-create-deletes-state",
        # addConsumerWithAssignmentAndMode (server/consumer.go) ran its name-exists check
        # after ConsumerStore() had opened the existing durable's folder, and the rejected
        # create's teardown (deleteWithoutAdvisory) removed it: v2.10.0 ... v2.12.15 and
        # v2.14.0 ... v2.14.5 (the newest tags read); fixed on main for 2.15.0 (1787eee,
        # #8491). Every API create names the consumer in its config (jsConsumerCreateRequest
        # sets Config.Name; processClusterCreateConsumer passes the assignment's config), so
        # the early exists-check, under the same stream lock, answers a second create
        # first: the fix's own test calls the function with a name apart from the config.
        affected=(((2, 10, 0), (2, 12, 15)), ((2, 14, 0), (2, 14, 5))),
        fixed=((2, 15, 0),),
        breaks=(
            "a consumer create that is rejected because a durable of that name exists can "
            "delete the existing consumer's state on disk when it reaches the server's late "
            "name check: after the next restart that consumer is gone or starts again from "
            "its first message"
        ),
        touches=(
            "nothing: every create through the JetStream API (oncestream's, the CLI's) names "
            "the consumer in its config, so the server's early check, under the same lock, "
            "refuses or returns the existing consumer before the deleting path"
        ),
        scope="any",
        severity="none",
        uses=(),
        reference="https://github.com/nats-io/nats-server/pull/8491",
    ),
)


def known_bugs(
    version: tuple[int, ...],
    *,
    cluster: bool | None = None,
    replicas: int | None = None,
    assume: bool = True,
    table: tuple[ServerBug, ...] = SERVER_BUGS,
) -> list[ServerBug]:
    """The rows of ``table`` that release ``version`` has, for this deployment.

    Args:
        version: ``(major, minor, patch)``.
        cluster: whether the server is in a cluster (None: unknown).
        replicas: the stream's replicas (None: unknown or no stream).
        assume: whether a row applies when its condition is unknown (``doctor``
            reports what may apply; start-up checks only what does).
    """
    return [
        bug
        for bug in table
        if bug.affects(version) and bug.applies(cluster=cluster, replicas=replicas, assume=assume)
    ]
