"""The checks of ``oncestream doctor``: pure functions of what the server reports.

Each takes the server's own answers (its version, a stream or consumer info)
and returns :class:`Finding` objects, each with the command that fixes it. The
rules are the ones oncestream enforces or relies on elsewhere: the Publisher's
window guard (:meth:`PublisherOptions.check_window_fits`), the ``jetstream``
sink's task-retry horizon, the Processor's consumer (explicit acks, unlimited
deliveries, in-progress acks), and the known-bug table of nats-server releases
(:data:`oncestream.streams._internal.SERVER_BUGS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .._errors import ConfigError
from ..process import ProcessorOptions
from ..process._internal import max_deliver_refusal
from ..publish._internal import FAST_INGEST_SINCE
from ..read._internal import RANGE_CONSUMER_PREFIX
from ..streams._internal import SERVER_BUGS, ServerBug, format_version, known_bugs
from ._findings import Finding, Severity
from ._monitor import ServerSync
from ._options import DoctorOptions

__all__ = [
    "MIN_SERVER",
    "check_consumer",
    "check_server",
    "check_stream",
    "check_sync_unknown",
    "duration",
    "stream_servers",
]

#: The oldest nats-server release oncestream is built and tested for.
MIN_SERVER = (2, 12)

_BUG_SEVERITY: dict[str, Severity] = {"breaks": "breaks", "weakens": "warning", "none": "note"}


def duration(seconds: float) -> str:
    """``120`` -> ``2m``, ``90`` -> ``90s``, ``0.25`` -> ``250ms``, ``7200`` -> ``2h``."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    for size, unit in ((3600, "h"), (60, "m")):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def check_server(
    version: tuple[int, int, int] | None,
    *,
    cluster: str | None,
    replicas: int | None = None,
    table: tuple[ServerBug, ...] = SERVER_BUGS,
) -> list[Finding]:
    """The release against oncestream's minimum and the known-bug table (by patch level).

    Args:
        version: the server's ``(major, minor, patch)``; None when it did not say.
        cluster: the name of its cluster, None outside one.
        replicas: the most replicas among the streams checked (None: none checked),
            for bugs of replicated streams only.
    """
    if version is None:
        return [
            Finding(
                severity="note",
                target="server",
                check="server-version",
                message="the server did not announce its version: the known-bug table was not "
                "checked",
            )
        ]
    shown = format_version(version)
    found: list[Finding] = []
    if version[:2] < MIN_SERVER:
        found.append(
            Finding(
                severity="warning",
                target="server",
                check="server-version",
                message=f"nats-server {shown} is older than {format_version(MIN_SERVER)}, the "
                "oldest release oncestream is built and tested for (atomic batches, message "
                "schedules and consumer resets need newer ones)",
                fix="upgrade nats-server to the newest release",
            )
        )
    certain = known_bugs(
        version, cluster=cluster is not None, replicas=replicas, assume=False, table=table
    )
    possible = known_bugs(version, cluster=cluster is not None, replicas=replicas, table=table)
    for bug in possible:
        severity = _BUG_SEVERITY[bug.severity]
        scope = ""
        if bug not in certain:  # in scope only if a stream has replicas > 1
            severity = "note" if severity == "note" else "warning"
            scope = " (applies to streams with replicas > 1; none of those checked has them)"
        found.append(
            Finding(
                severity=severity,
                target="server",
                check=f"known-bug:{bug.key}",
                message=f"nats-server {shown} has a known bug{scope}: {bug.breaks}. It "
                f"concerns {bug.touches}",
                fix=f"upgrade to {bug.fix}",
                reference=bug.reference,
            )
        )
    if not possible:
        where = f"cluster {cluster}" if cluster else "a single server"
        found.append(
            Finding(
                severity="ok",
                target="server",
                check="known-bugs",
                message=f"nats-server {shown} ({where}) has none of the {len(table)} known "
                "exactly-once bugs of the table",
            )
        )
    return found


def _window_fix(name: str, options: DoctorOptions) -> str:
    minutes = max(2, math.ceil(options.spark_horizon / 60))
    return f"oncestream stream edit {name} --dupe-window {minutes}m"


def check_stream(
    info: Mapping[str, Any],
    *,
    options: DoctorOptions,
    version: tuple[int, int, int] | None,
    cluster: str | None,
    sync: Mapping[str, ServerSync] | None,
) -> list[Finding]:
    """One stream: its duplicate window, durability and fast-ingest setting.

    Args:
        info: the stream's info (``STREAM.INFO``; its ``cluster`` names the servers
            holding it).
        sync: the fsync policy of each server read (``--monitor``), by server name;
            None when none was read (see :func:`check_sync_unknown`).
    """
    config = info.get("config") or {}
    name = str(config.get("name"))
    target = f"stream {name}"
    found: list[Finding] = []
    mirror = bool(config.get("mirror"))
    if not mirror:  # a mirror takes no publishes: no window, no batches
        found.append(_window(name, target, config, options))
    found.extend(_durability(name, target, info, cluster, sync))
    if not mirror and version is not None and version[:2] >= FAST_INGEST_SINCE:
        if config.get("allow_batched"):
            found.append(
                Finding(
                    severity="ok",
                    target=target,
                    check="fast-ingest",
                    message="fast-ingest batches allowed (allow_batched): Publishers send "
                    "them by default",
                )
            )
        else:
            found.append(
                Finding(
                    severity="note",
                    target=target,
                    check="fast-ingest",
                    message=f"fast-ingest batches are not allowed (allow_batched off) although "
                    f"nats-server {format_version(version)} supports them: Publishers then wait "
                    "for a PubAck per message instead of one flow ack per window (the same "
                    "de-duplication either way)",
                    fix=f"oncestream stream edit {name} --allow-batched",
                )
            )
    return found


def _window(name: str, target: str, config: Mapping[str, Any], options: DoctorOptions) -> Finding:
    window = int(config.get("duplicate_window") or 0) / 1e9
    pub = options.publisher
    horizon, spark = pub.retry_horizon, options.spark_horizon
    delays = [f"{pub.backoff(a):g}" for a in range(2, pub.max_attempts + 1)]
    parts = f"max_attempts={pub.max_attempts} x ack_timeout={pub.ack_timeout:g}s" + (
        f" + backoff {'+'.join(delays)}s" if delays else ""
    )
    try:
        pub.check_window_fits(name, window)  # the Publisher's own window guard
    except ConfigError:
        return Finding(
            severity="breaks",
            target=target,
            check="duplicate-window",
            message=f"duplicate window {duration(window)} is shorter than the Publisher's retry "
            f"horizon {horizon:g}s ({parts}): a Publisher with this stream refuses to start, "
            "and one with check_window off may store a late retry twice (a Spark task's "
            f"retries need {spark:g}s: {options.task_max_failures} attempts)",
            fix=_window_fix(name, options),
        )
    if window < spark:
        return Finding(
            severity="warning",
            target=target,
            check="duplicate-window",
            message=f"duplicate window {duration(window)} covers the Publisher's retry horizon "
            f"{horizon:g}s but not a Spark task's retries ({options.task_max_failures} attempts "
            f"x {horizon:g}s = {spark:g}s): the jetstream sink then relies on its check of "
            "the rows a failed attempt stored, not on the window",
            fix=_window_fix(name, options),
        )
    return Finding(
        severity="ok",
        target=target,
        check="duplicate-window",
        message=f"duplicate window {duration(window)} covers the Publisher's retry horizon "
        f"{horizon:g}s and a Spark task's retries ({spark:g}s)",
    )


def _durability(
    name: str,
    target: str,
    info: Mapping[str, Any],
    cluster: str | None,
    sync: Mapping[str, ServerSync] | None,
) -> list[Finding]:
    config = info.get("config") or {}
    storage = str(config.get("storage") or "file")
    replicas = int(config.get("num_replicas") or 1)
    if storage == "memory":
        lost = (
            "a restart of its server loses every message, acknowledged ones included"
            if replicas == 1
            else "a restart of all its servers at once (a power cut) loses every message"
        )
        return [
            Finding(
                severity="breaks" if replicas == 1 else "warning",
                target=target,
                check="storage",
                message=f"memory storage with {replicas} replica{'s' if replicas > 1 else ''}: "
                f"{lost}",
                fix="storage is fixed when a stream is created: create a stream with "
                f"--storage file (oncestream stream add NAME --storage file ...) and move "
                f"{name}'s subjects and consumers to it",
            )
        ]
    found: list[Finding] = []
    if replicas > 1:
        found.append(
            Finding(
                severity="ok",
                target=target,
                check="storage",
                message=f"file storage, {replicas} replicas: a message is acknowledged once a "
                "majority of them stored it",
            )
        )
    elif cluster:
        found.append(
            Finding(
                severity="warning",
                target=target,
                check="replicas",
                message=f"1 replica in cluster {cluster}: losing the server that holds it loses "
                "the stream's messages, and the stream is unavailable while it is down",
                fix=f"oncestream stream edit {name} --replicas 3",
            )
        )
    if sync is not None:  # unknown: one note for the server (check_sync_unknown), not per stream
        found.append(_sync(target, replicas, stream_servers(info), sync))
    return found


#: Where docs/guarantees.md states what the fault campaign measured per sync setting.
MEASURED = "docs/guarantees.md#durability-per-setting"


def stream_servers(info: Mapping[str, Any]) -> list[str]:
    """The servers holding a stream as its info names them: its leader, then its replicas
    (fewer than ``num_replicas`` while the stream has no leader or a peer is unknown)."""
    cluster = info.get("cluster") or {}
    names = [cluster.get("leader")] + [r.get("name") for r in cluster.get("replicas") or []]
    return list(dict.fromkeys(str(n) for n in names if n))


def _sync(
    target: str, replicas: int, servers: list[str], sync: Mapping[str, ServerSync]
) -> Finding:
    """A file stream's fsync policy, judged on the servers that hold it, each by its own
    ``/varz``: replicas hold a write in memory, not on disk, until the next sync, so
    machines that go down together lose it (the campaign's power-loss and os-crash faults
    measure it); one server's policy never speaks for another's."""
    read = [sync[server] for server in servers if server in sync]
    unknown = [repr(server) for server in servers if server not in sync]
    if len(servers) < replicas:
        missing = replicas - len(servers)
        unknown.append(f"{missing} replica{'s' if missing > 1 else ''} its info does not name")
    lazy = [policy for policy in read if not policy.sync_always]
    if lazy:
        interval = duration(max(policy.sync_interval for policy in lazy))
        where = f"sync_interval {interval} on {_read_from(lazy)}"
        if replicas == 1:
            why = (
                f"1 replica and {where}: a machine crash (power cut, kernel panic) can lose up "
                f"to the last {interval} of acknowledged messages; a process crash loses "
                "nothing (the written pages are the kernel's)"
            )
        else:
            why = (
                f"{replicas} replicas and {where}: a replica acknowledges what it has not "
                "fsynced, so a power loss of the nodes together (or one node's OS crash while "
                "another is paused or cut off) can lose acknowledged messages: the fault "
                "campaign measured such losses with this setting and none with sync_interval: "
                f"always ({MEASURED}); a process crash loses nothing"
            )
        return Finding(
            severity="warning",
            target=target,
            check="sync-interval",
            message=why,
            fix="set `sync_interval: always` in the jetstream block of "
            + ("the server" if replicas == 1 else "every server")
            + f" holding it ({', '.join(servers)}): an fsync before each acknowledgement "
            "(more replicas do not replace it: each replica needs it)",
        )
    if not unknown:
        each = "fsynced" if replicas == 1 else f"{replicas} replicas, each fsyncing"
        return Finding(
            severity="ok",
            target=target,
            check="sync-interval",
            message=f"file storage, {each} before each acknowledgement: sync_interval: always "
            f"on {_read_from(read)}",
        )
    if replicas == 1:
        message = (
            f"1 replica, on {unknown[0] if servers else 'a server its info does not name'}, "
            "whose fsync policy is unknown (no --monitor read it): "
            "with nats-server's default (sync_interval 2m) a machine crash (power cut, kernel "
            "panic) can lose up to the last 2 minutes of acknowledged messages"
        )
    else:
        known = f"sync_interval: always on {_read_from(read)}, but " if read else ""
        message = (
            f"{replicas} replicas: {known}the fsync policy of {', '.join(unknown)} is unknown "
            "(no --monitor read it), so it is not known that every server holding it fsyncs "
            "before it acknowledges; with nats-server's default (sync_interval 2m) a power "
            f"loss of the nodes together can lose acknowledged messages ({MEASURED})"
        )
    return Finding(
        severity="note",
        target=target,
        check="sync-interval",
        message=message,
        fix=f"add --monitor with the monitoring URL of {', '.join(unknown)} (repeat the "
        "option, once per server: a server's /varz tells its own policy only)",
    )


def _read_from(policies: list[ServerSync]) -> str:
    """``server 'n1' (http://h:8222/varz)``: which servers' policy was read, and where."""
    shown = ", ".join(f"{p.server!r} ({p.url}/varz)" for p in policies)
    return f"server{'s' if len(policies) > 1 else ''} {shown}"


def check_sync_unknown(streams: list[str], replicated: list[str] | None = None) -> list[Finding]:
    """One note when the fsync policy is unknown and file streams depend on it: ``streams``
    with 1 replica, ``replicated`` with more."""
    replicated = replicated or []
    if not streams and not replicated:
        return []
    parts = []
    if streams:
        parts.append(
            f"{', '.join(streams)} {'has' if len(streams) == 1 else 'have'} 1 replica: with "
            "nats-server's default (sync_interval 2m) a machine crash (power cut, kernel "
            "panic) can lose up to the last 2 minutes of acknowledged messages there"
        )
    if replicated:
        parts.append(
            f"{', '.join(replicated)} {'is' if len(replicated) == 1 else 'are'} replicated: "
            "with the default a power loss of the nodes together can lose acknowledged "
            f"messages ({MEASURED})"
        )
    return [
        Finding(
            severity="note",
            target="server",
            check="sync-interval",
            message="the server's fsync policy is unknown, and "
            + "; ".join(parts)
            + "; a process crash loses nothing",
            fix="give --monitor http://HOST:PORT (the server's http_port) to check it",
        )
    ]


def check_consumer(
    stream: str, info: Mapping[str, Any], *, options: DoctorOptions
) -> list[Finding]:
    """One consumer against what the Processor needs: explicit acks, no delivery limit,
    an ack wait that a slow ledger transaction does not outlast."""
    config = info.get("config") or {}
    name = str(info.get("name") or config.get("durable_name") or config.get("name"))
    target = f"consumer {stream}/{name}"
    if name.startswith(RANGE_CONSUMER_PREFIX) and not config.get("durable_name"):
        # A Spark read or `oncestream read` in progress: ack policy none is its design
        # (it reads a fixed range and tracks positions itself), not a Processor's consumer.
        return [
            Finding(
                severity="ok",
                target=target,
                check="consumer",
                message="a short-lived range reader (a Spark read or oncestream read in "
                "progress): no acks by design, deleted when the read ends",
            )
        ]
    found: list[Finding] = []
    if config.get("deliver_subject"):
        found.append(
            Finding(
                severity="warning",
                target=target,
                check="pull",
                message="a push consumer: `oncestream process` needs a pull consumer and "
                "refuses this one",
                fix=f"oncestream consumer add {stream} NEW_NAME, then process with --consumer "
                "NEW_NAME",
            )
        )
    policy = str(config.get("ack_policy") or "explicit")
    if policy == "all":
        found.append(
            Finding(
                severity="note",
                target=target,
                check="ack-policy",
                message="ack policy 'all': an ack covers every earlier message too, so one "
                "Processor at a time may process it (one ack per batch); a Processor without "
                "--ack-policy all refuses it",
                fix=f"oncestream process --stream {stream} --consumer {name} --ack-policy all ...",
            )
        )
    elif policy != "explicit":
        why = (
            "every message counts as acknowledged once delivered: a worker that stops before "
            "applying it never gets it again"
        )
        found.append(
            Finding(
                severity="breaks",
                target=target,
                check="ack-policy",
                message=f"ack policy {policy!r}: {why}",
                fix=f"the ack policy is fixed at creation: `oncestream consumer rm {stream} "
                f"{name} --force`, then `oncestream consumer add {stream} {name}` (explicit); "
                "a Processor's ledger keeps messages it applied from being applied again",
            )
        )
    limit = _max_deliver(stream, name, config, options)
    if limit is not None:
        found.append(limit)
    ack_wait = int(config.get("ack_wait") or 30e9) / 1e9
    if ack_wait < options.min_ack_wait:
        backoff = " --backoff none" if config.get("backoff") else ""
        found.append(
            Finding(
                severity="warning",
                target=target,
                check="ack-wait",
                message=f"ack wait {duration(ack_wait)}: the Processor renews a batch it is "
                "still applying with in-progress acks every half ack wait, so a stall of "
                f"{duration(ack_wait / 2)} (a commit waiting on a locked database, a GC or swap "
                "pause, a CPU-starved host) redelivers it. The ledger keeps the redelivery from "
                "being applied again, but each one is work, counts as a delivery and shows as "
                "a late ack",
                fix=f"oncestream consumer edit {stream} {name}{backoff} --ack-wait 30s",
            )
        )
    if not found:
        found.append(
            Finding(
                severity="ok",
                target=target,
                check="consumer",
                message=f"explicit acks, no delivery limit (the Processor dead-letters), ack "
                f"wait {duration(ack_wait)}",
            )
        )
    return found


def _max_deliver(
    stream: str, name: str, config: Mapping[str, Any], options: DoctorOptions
) -> Finding | None:
    """A consumer's ``max_deliver`` by the Processor's own rule (``refusal`` in
    process/_maxdeliver.py): refused with a dead-letter stream too, accepted only with
    one, or accepted as the Processor runs (``--dead-letter-stream`` given)."""
    limit = int(config.get("max_deliver") or -1)
    if limit <= 0:
        return None
    target = f"consumer {stream}/{name}"
    # With a dead-letter stream (the one given, or any: the rule only asks whether there is one).
    with_dlq = ProcessorOptions(
        max_deliver=options.max_deliver, dead_letter_stream=options.dead_letter_stream or "DLQ"
    )
    if max_deliver_refusal(dict(config), stream, name, with_dlq) is not None:
        return Finding(
            severity="breaks",
            target=target,
            check="max-deliver",
            message=f"max_deliver {limit}: after {limit} deliveries the server stops delivering "
            "a message and moves the ack floor past it (only an advisory says so), so one "
            "whose handler keeps failing, or that a slow ledger let time out "
            f"{limit} times, is never applied and never dead-lettered. The Processor refuses "
            "it, with a dead-letter stream too: it must be -1 or above the Processor's "
            f"--max-deliver ({options.max_deliver}), so that it dead-letters before the "
            "server's last delivery",
            fix=f"oncestream consumer edit {stream} {name} --max-deliver -1",
        )
    attempts = min(options.max_deliver, limit - 1)
    accepted = (
        f"max_deliver {limit}: a Processor with a dead-letter stream dead-letters a message "
        f"that keeps failing after {attempts} attempts, before the server's last delivery "
        f"(after {limit} deliveries the server stops delivering a message and moves the ack "
        "floor past it)"
    )
    if options.dead_letter_stream:
        return Finding(
            severity="note",
            target=target,
            check="max-deliver",
            message=f"{accepted}; with --dead-letter-stream {options.dead_letter_stream} "
            "the Processor accepts it",
        )
    return Finding(
        severity="warning",
        target=target,
        check="max-deliver",
        message=f"{accepted}; without a dead-letter stream the Processor refuses to start on "
        f"it, and any other client of it loses a message that fails {limit} times. Give "
        "doctor the Processor's --dead-letter-stream (and --max-deliver) to check it as it runs",
        fix=f"oncestream consumer edit {stream} {name} --max-deliver -1",
    )
