"""`oncestream stream add|ls|info|edit|get|rm|purge`: stream administration (like ``nats``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import typer

from .._connection import connect
from .._errors import ConfigError, ErrCode, JetStreamError, MessageNotFound, StreamNotFound
from .._options import INT64_MAX, ConnectOptions, parse_duration, parse_int, rfc3339, seconds_to_ns
from ..streams import (
    Partitioning,
    StoredMessage,
    StreamSpec,
    add_stream,
    delete_stream,
    get_message,
    list_streams,
    stream_info,
    update_stream,
)
from ..streams._internal import MAX_PARTITIONS, check_partitioning_change, server_version
from ._app import WaitTimeout, app, cli_errors, console, poll_until, run_async
from ._connect_flags import with_connect_options
from ._help import new_typer
from ._name_args import stream_name, subject_filter
from ._output import confirm, kv_table, print_json, print_output, print_table, rows_table
from ._rows import BOOKKEEPING_PREFIX, config_differences, hidden_note, stream_row
from ._tail import message_json, preview

stream_app = new_typer(
    name="stream",
    help="Create, list, inspect, edit, purge and remove streams.",
)
app.add_typer(stream_app)

#: The largest max_msg_size nats-server takes (an int32 in its stream config).
INT32_MAX = 2**31 - 1

T = TypeVar("T")

Name = Annotated[str, typer.Argument(help="Stream name.", callback=stream_name)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
Force = Annotated[bool, typer.Option("--force", "-f", help="Do not ask for confirmation.")]
Subjects = Annotated[
    list[str] | None,
    typer.Option("--subjects", help="Subjects captured; repeat or comma-separate."),
]
Storage = Annotated[str | None, typer.Option("--storage", metavar="file|memory", help="Storage.")]
Replicas = Annotated[int | None, typer.Option("--replicas", help="Replicas (1..5).")]
DupeWindow = Annotated[
    str | None,
    typer.Option("--dupe-window", metavar="DURATION", help="Msg-id de-duplication window (2m)."),
]
Retention = Annotated[
    str | None,
    typer.Option("--retention", metavar="limits|interest|workqueue", help="Retention policy."),
]
Discard = Annotated[
    str | None, typer.Option("--discard", metavar="old|new", help="What goes when full.")
]
MaxAge = Annotated[
    str | None,
    typer.Option("--max-age", metavar="DURATION", help="Keep messages this long (0=ever)."),
]
MaxMsgs = Annotated[int | None, typer.Option("--max-msgs", help="Message limit (-1 = none).")]
MaxBytes = Annotated[int | None, typer.Option("--max-bytes", help="Byte limit (-1 = none).")]
MaxPerSubject = Annotated[
    int | None, typer.Option("--max-msgs-per-subject", help="Per-subject limit (-1 = none).")
]
MaxMsgSize = Annotated[
    int | None, typer.Option("--max-msg-size", help="Largest message in bytes (-1 = none).")
]
AllowDirect = Annotated[
    bool | None,
    typer.Option("--allow-direct/--no-allow-direct", help="Direct get (fast reads)."),
]
AllowBatched = Annotated[
    bool | None,
    typer.Option(
        "--allow-batched/--no-allow-batched",
        help="Fast-ingest batches (nats-server 2.14+): Publishers then send them by default. "
        "stream add: on by default where the server takes them.",
    ),
]
AllowAtomic = Annotated[
    bool | None,
    typer.Option(
        "--allow-atomic/--no-allow-atomic",
        help="Atomic batches, stored all-or-nothing (nats-server 2.12+): what the Spark "
        "sink's ingest=atomic and batched producer sessions need.",
    ),
]

Partitions = Annotated[
    int | None,
    typer.Option(
        "--partitions",
        help="Spread the messages over N partitions by key: the server stores each under "
        "<partition>.<subject> (a subject transform) for a group of `oncestream process "
        "--member` instances. The stream captures one subject pattern. stream edit "
        "--partitions 0 removes the partitioning of a stream that holds no messages.",
    ),
]
PartitionKey = Annotated[
    str | None,
    typer.Option(
        "--partition-key",
        metavar="I[,J...]",
        help="With --partitions: the '*' tokens of the subject that form the key, counted "
        "from 1 (orders.*.* --partition-key 2: the third token); default: the whole subject.",
    ),
]


def _key(value: str | None) -> tuple[int, ...]:
    if not value:
        return ()
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise ConfigError(
            f"--partition-key must be '*' token indexes like 1 or 1,2, got {value!r}"
        ) from None


AllowSchedules = Annotated[
    bool,
    typer.Option(
        "--allow-msg-schedules",
        help="Allow message schedules (nats-server 2.12+; cannot be turned off again): "
        "what `dlq replay --at/--in` needs.",
    ),
]

_CHOICES = {
    "storage": ("file", "memory"),
    "retention": ("limits", "interest", "workqueue"),
    "discard": ("old", "new"),
}


def _choice(flag: str, value: str | None) -> str | None:
    if value is not None and value not in _CHOICES[flag]:
        allowed = ", ".join(_CHOICES[flag])
        raise ConfigError(f"--{flag} must be one of {allowed}, got {value!r}")
    return value


def _split(values: list[str] | None) -> tuple[str, ...]:
    return tuple(p.strip() for v in values or [] for p in v.split(",") if p.strip())


def _seconds(ns: Any) -> str:
    seconds = int(ns or 0) / 1e9
    return "forever" if seconds == 0 else f"{seconds:g}s"


def stream_details(info: dict[str, Any]) -> dict[str, Any]:
    """The ``stream info`` key/value view."""
    config, state = info.get("config", {}), info.get("state", {})
    return {
        "name": config.get("name"),
        "subjects": config.get("subjects") or [],
        "storage": config.get("storage"),
        "replicas": config.get("num_replicas", 1),
        "retention": config.get("retention"),
        "discard": config.get("discard"),
        "duplicate window": _seconds(config.get("duplicate_window")),
        "max age": _seconds(config.get("max_age")),
        "max msgs": config.get("max_msgs", -1),
        "max bytes": config.get("max_bytes", -1),
        "max msgs per subject": config.get("max_msgs_per_subject", -1),
        "max msg size": config.get("max_msg_size", -1),
        "allow direct": bool(config.get("allow_direct", False)),
        "allow batched": bool(config.get("allow_batched", False)),
        "allow atomic": bool(config.get("allow_atomic", False)),
        "allow msg schedules": bool(config.get("allow_msg_schedules", False)),
        "partitions": _partitions(config),
        "messages": state.get("messages", 0),
        "bytes": state.get("bytes", 0),
        "first seq": state.get("first_seq", 0),
        "last seq": state.get("last_seq", 0),
        "deleted": state.get("num_deleted", 0),
        "subjects stored": state.get("num_subjects", 0),
        "consumers": state.get("consumer_count", 0),
        "created": info.get("created"),
    }


def _partitions(config: dict[str, Any]) -> str:
    partitioning = Partitioning.from_config(config)
    if partitioning is not None:
        return partitioning.describe()
    transform = config.get("subject_transform")
    return (
        f"none (subject transform {transform['src']} -> {transform['dest']})"
        if transform
        else "none"
    )


def _show(info: dict[str, Any], as_json: bool) -> None:
    title = f"stream {info.get('config', {}).get('name')}"
    print_output(info, as_json, kv_table(title, stream_details(info)))


def _changes(args: Mapping[str, Any]) -> dict[str, Any]:
    """The raw config keys of the setting flags in ``args`` (validated; unset ones left out)."""
    storage, replicas = args["storage"], args["replicas"]
    dupe_window, max_age = args["dupe_window"], args["max_age"]
    changes: dict[str, Any] = {
        "storage": _choice("storage", storage),
        "num_replicas": replicas,
        "retention": _choice("retention", args["retention"]),
        "discard": _choice("discard", args["discard"]),
        "max_msgs": args["max_msgs"],
        "max_bytes": args["max_bytes"],
        "max_msgs_per_subject": args["max_msgs_per_subject"],
        "max_msg_size": args["max_msg_size"],
        "allow_direct": args["allow_direct"],
        "allow_batched": args["allow_batched"],
        "allow_atomic": args["allow_atomic"],
        "allow_msg_schedules": True if args["allow_msg_schedules"] else None,
    }
    if dupe_window is not None:
        changes["duplicate_window"] = seconds_to_ns(parse_duration("--dupe-window", dupe_window))
    if max_age is not None:
        changes["max_age"] = seconds_to_ns(parse_duration("--max-age", max_age))
    if replicas is not None and replicas not in (1, 2, 3, 4, 5):
        raise ConfigError(f"--replicas must be 1..5, got {replicas}")
    for flag in ("max_msgs", "max_bytes", "max_msgs_per_subject", "max_msg_size"):
        if args[flag] is not None:
            # nats-server keeps max_msg_size in an int32, the other limits in an int64.
            top = INT32_MAX if flag == "max_msg_size" else INT64_MAX
            parse_int(f"--{flag.replace('_', '-')}", args[flag], minimum=-1, maximum=top)
    return {k: v for k, v in changes.items() if v is not None}


#: The setting flags ``stream add`` and ``stream edit`` share, named once.
_SETTINGS: dict[str, Any] = {
    "storage": Storage,
    "replicas": Replicas,
    "dupe_window": DupeWindow,
    "retention": Retention,
    "discard": Discard,
    "max_age": MaxAge,
    "max_msgs": MaxMsgs,
    "max_bytes": MaxBytes,
    "max_msgs_per_subject": MaxPerSubject,
    "max_msg_size": MaxMsgSize,
    "allow_direct": AllowDirect,
    "allow_batched": AllowBatched,
    "allow_atomic": AllowAtomic,
    "allow_msg_schedules": AllowSchedules,
}


def with_stream_settings(func: Callable[..., T]) -> Callable[..., T]:
    """Give a command every setting flag (before its ``--json``); it receives
    ``changes``: the raw config keys of the flags given, validated (:func:`_changes`).

    As :func:`~oncestream.cli._connect_flags.with_connect_options`: Typer reads the
    rewritten signature, so ``--help`` and docs/cli.md's table list the flags in place.
    """
    signature = inspect.signature(func, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "changes"]
    at = next((i for i, p in enumerate(own) if p.name == "as_json"), len(own))
    flags = [
        inspect.Parameter(
            name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=False if name == "allow_msg_schedules" else None,
            annotation=kind,
        )
        for name, kind in _SETTINGS.items()
    ]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        values = {name: kwargs.pop(name, None) for name in _SETTINGS}
        return func(*args, changes=_changes(values), **kwargs)

    parameters = [*own[:at], *flags, *own[at:]]
    wrapper.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in parameters},
        "return": signature.return_annotation,
    }
    del wrapper.__wrapped__
    return wrapper


@stream_app.command("add")
@cli_errors
@with_connect_options
@with_stream_settings
def add_command(
    name: Name,
    subjects: Subjects = None,
    partitions: Partitions = None,
    partition_key: PartitionKey = None,
    as_json: Json = False,
    *,
    changes: dict[str, Any],
    options: ConnectOptions,
) -> None:
    """Create stream NAME (by default: file, 1 replica, 2m window, fast ingest on 2.14+)."""
    subject_list = _split(subjects)
    if not subject_list:
        raise ConfigError(f"stream add {name}: give the subjects it captures with --subjects")
    if partition_key is not None and partitions is None:
        raise ConfigError("--partition-key applies only with --partitions; add --partitions N")
    if partitions == 0:
        # StreamSpec's 0 means "not partitioned": the flag would be dropped silently.
        raise ConfigError(
            f"--partitions must be a whole number from 1 to {MAX_PARTITIONS}, got 0; "
            "leave --partitions out for a stream without partitions"
        )
    spec = StreamSpec(
        name=name,
        subjects=subject_list,
        partitions=partitions or 0,
        partition_key=_key(partition_key),
    )

    async def main() -> tuple[bool, dict[str, Any]]:
        async with await connect(options) as conn:
            # Fast-ingest batches where the server takes them, unless a flag says otherwise.
            config = {**spec.to_api(server_version(conn)), **changes}
            try:
                existing = await stream_info(conn, name)
            except StreamNotFound:
                try:
                    return True, await add_stream(conn, config)
                except JetStreamError as exc:
                    if exc.err_code != ErrCode.STREAM_NAME_EXIST:
                        raise
                    existing = await stream_info(conn, name)  # created meanwhile
            if "allow_batched" not in changes:  # the default is no difference from an existing one
                config.pop("allow_batched", None)
            differing = config_differences(existing.get("config") or {}, config)
            if differing:
                raise ConfigError(
                    f"stream {name} already exists with another configuration "
                    f"({'; '.join(differing)}); change it with `oncestream stream edit {name} "
                    "...`, or remove it first with `oncestream stream rm`"
                )
            return False, existing

    created, info = run_async(main())
    if not as_json:
        what = "created stream" if created else "stream already exists with this configuration:"
        console.print(f"{what} {name}", highlight=False, markup=False)
    _show(info, as_json)


@stream_app.command("edit")
@cli_errors
@with_connect_options
@with_stream_settings
def edit_command(
    name: Name,
    subjects: Subjects = None,
    partitions: Partitions = None,
    partition_key: PartitionKey = None,
    as_json: Json = False,
    *,
    changes: dict[str, Any],
    options: ConnectOptions,
) -> None:
    """Change the given settings of stream NAME; the others stay as they are.

    --partitions N partitions a stream in place: the messages stored from then on are
    mapped; the ones stored before keep their subjects (see docs/production.md,
    "Scaling out").
    """
    if subjects:
        changes["subjects"] = list(_split(subjects))
    if partition_key is not None and partitions is None:
        raise ConfigError("--partition-key applies only with --partitions; add --partitions N")
    if not changes and partitions is None:
        raise ConfigError(f"stream edit {name}: nothing to change; give at least one setting")
    held = 0

    async def main() -> dict[str, Any]:
        nonlocal held
        async with await connect(options) as conn:
            info = await stream_info(conn, name)
            config = dict(info.get("config", {}))
            config.update(changes)
            if partitions is not None:
                held = _repartition(info, config, partitions, _key(partition_key))
            return await update_stream(conn, config)

    info = run_async(main())
    if not as_json:
        changed = sorted(changes) + (["partitions"] if partitions is not None else [])
        console.print(f"updated stream {name}: {', '.join(changed)}", highlight=False, markup=False)
        if held:
            console.print(
                f"note: the {held} messages stored before keep their subjects (not in any "
                f"partition); let the consumer that processed them finish them, and start the "
                f"group's members with --after <that consumer>",
                highlight=False,
                markup=False,
            )
    _show(info, as_json)


def _repartition(
    info: dict[str, Any], config: dict[str, Any], partitions: int, key: tuple[int, ...]
) -> int:
    """Set or drop ``config``'s partitioning; return how many messages it leaves unmapped.

    Raises:
        ConfigError: the stream does not capture exactly one subject, or a stream that
            holds messages would move keys between partitions or lose its partitioning.
    """
    name = config.get("name")
    wanted: Partitioning | None = None
    if partitions:
        subjects = config.get("subjects") or []
        if len(subjects) != 1:
            raise ConfigError(
                f"stream edit {name} --partitions: a partitioned stream captures exactly one "
                f"subject pattern, this one captures {subjects}; give it one with --subjects"
            )
        wanted = Partitioning(subjects=subjects[0], partitions=partitions, key=key)
        config["subject_transform"] = wanted.transform()
    else:
        config.pop("subject_transform", None)
    current = Partitioning.from_config(info.get("config") or {})
    if current is not None or wanted is None:
        check_partitioning_change(info, wanted)
        return 0
    return int((info.get("state") or {}).get("messages", 0))


@stream_app.command("ls")
@cli_errors
@with_connect_options
def ls_command(
    as_json: Json = False,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all", "-a", help="Also list oncestream's bookkeeping streams (ONCESTREAM_*)."
        ),
    ] = False,
    *,
    options: ConnectOptions,
) -> None:
    """List every stream with its subjects, messages, bytes and consumers."""

    async def main() -> list[dict[str, Any]]:
        async with await connect(options) as conn:
            return [stream_row(i) for i in await list_streams(conn)]

    rows = run_async(main())
    shown = [r for r in rows if show_all or not str(r["stream"]).startswith(BOOKKEEPING_PREFIX)]
    print_output(shown, as_json, rows_table("streams", shown, empty="none defined"))
    note = hidden_note(len(rows) - len(shown))
    if note and not as_json:
        console.print(note, highlight=False, markup=False)


@stream_app.command("wait")
@cli_errors
@with_connect_options
def wait_command(
    name: Name,
    messages: Annotated[
        int, typer.Option("--messages", help="Wait until the stream holds at least N messages.")
    ],
    timeout: WaitTimeout = "60s",
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """Wait until stream NAME holds at least --messages messages (a mirror or source caught up).

    Exits 1 when --timeout passes first.
    """
    if messages < 0:
        raise ConfigError(f"--messages must be >= 0, got {messages}")
    limit = parse_duration("--timeout", timeout)

    def held(info: dict[str, Any]) -> int:
        return int(info.get("state", {}).get("messages", 0))

    async def main() -> dict[str, Any]:
        async with await connect(options) as conn:
            return await poll_until(
                lambda: stream_info(conn, name),
                lambda info: held(info) >= messages,
                timeout=limit,
                failure=lambda info: (
                    f"stream {name} holds {held(info)} messages after {timeout}, not {messages}"
                ),
            )

    info = run_async(main())
    if as_json:
        print_json(info)
        return
    console.print(f"stream {name} holds {held(info)} messages", highlight=False, markup=False)


@stream_app.command("info")
@cli_errors
@with_connect_options
def info_command(name: Name, as_json: Json = False, *, options: ConnectOptions) -> None:
    """Configuration and state of stream NAME."""

    async def main() -> dict[str, Any]:
        async with await connect(options) as conn:
            return await stream_info(conn, name)

    _show(run_async(main()), as_json)


@stream_app.command("get")
@cli_errors
@with_connect_options
def get_command(
    name: Name,
    seq: Annotated[int | None, typer.Argument(help="Stream sequence of the message.")] = None,
    last_for: Annotated[
        str | None,
        typer.Option(
            "--last-for",
            metavar="SUBJECT",
            help="The last message stored on SUBJECT (wildcards ok) instead of SEQ.",
            callback=subject_filter,
        ),
    ] = None,
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """One stored message of stream NAME (by SEQ or --last-for SUBJECT), with its metadata.

    Prints its subject, sequence, time, headers and data.

    --json prints ``data`` when the payload is UTF-8 text, else ``data_base64``.
    Exits 1 when there is no such message.
    """
    if (seq is None) == (last_for is None):
        raise ConfigError("stream get: give a sequence SEQ or --last-for SUBJECT (one of them)")
    if seq is not None and seq < 1:
        raise ConfigError(f"stream get: SEQ must be a stream sequence >= 1, got {seq}")

    async def main() -> StoredMessage:
        async with await connect(options) as conn:
            await stream_info(conn, name)
            try:
                return await get_message(conn, name, seq=seq, last_by_subject=last_for)
            except MessageNotFound as exc:
                what = f"message {seq}" if seq is not None else f"message on {last_for!r}"
                raise MessageNotFound(
                    f"no {what} in stream {name!r}", code=exc.code, err_code=exc.err_code
                ) from None

    msg = run_async(main())
    if as_json:
        print_json(message_json(msg))
        return
    details = {
        "subject": msg.subject,
        "seq": msg.seq,
        "time": rfc3339(msg.time),
        "size": len(msg.data),
        "data": preview(msg.data, 4000),
    }
    print_table(kv_table(f"stream {name} #{msg.seq}", details))
    for header, values in msg.headers.items():
        for value in values:
            console.print(f"  {header}: {value}", markup=False, highlight=False)


@stream_app.command("rm")
@cli_errors
@with_connect_options
def rm_command(
    name: Name, force: Force = False, as_json: Json = False, *, options: ConnectOptions
) -> None:
    """Delete stream NAME with all its messages and consumers."""

    async def check() -> int:
        async with await connect(options) as conn:
            return int((await stream_info(conn, name)).get("state", {}).get("messages", 0))

    messages = run_async(check())
    confirm(
        f"Delete stream {name} and its {messages:,} messages?", force=force, what=f"delete {name}"
    )

    async def main() -> None:
        async with await connect(options) as conn:
            await delete_stream(conn, name)

    run_async(main())
    print_output({"deleted": name, "messages": messages}, as_json, f"deleted stream {name}")


@stream_app.command("purge")
@cli_errors
@with_connect_options
def purge_command(
    name: Name,
    subject: Annotated[
        str | None,
        typer.Option(
            "--subject", help="Only purge this subject (wildcards ok).", callback=subject_filter
        ),
    ] = None,
    keep: Annotated[int | None, typer.Option("--keep", help="Keep the newest N.")] = None,
    seq: Annotated[
        int | None, typer.Option("--seq", help="Purge up to, not including, this sequence.")
    ] = None,
    force: Force = False,
    as_json: Json = False,
    *,
    options: ConnectOptions,
) -> None:
    """Remove messages from stream NAME (all, or by --subject / --keep / --seq)."""
    if keep is not None and seq is not None:
        raise ConfigError("stream purge: give --keep or --seq, not both")
    if keep is not None and keep < 0:
        raise ConfigError(f"--keep must be >= 0, got {keep}")
    if seq is not None and seq < 1:
        raise ConfigError(f"--seq must be >= 1, got {seq}")
    body: dict[str, Any] = {}
    if subject:
        body["filter"] = subject
    if keep is not None:
        body["keep"] = keep
    if seq is not None:
        body["seq"] = seq

    async def check() -> None:
        async with await connect(options) as conn:
            await stream_info(conn, name)

    run_async(check())
    scope = f" on {subject}" if subject else ""
    confirm(f"Purge messages of stream {name}{scope}?", force=force, what=f"purge {name}")

    async def main() -> dict[str, Any]:
        async with await connect(options) as conn:
            return await conn.api(f"STREAM.PURGE.{name}", body or None)

    result = run_async(main())
    if as_json:
        print_json(result)
    else:
        console.print(f"purged {int(result.get('purged', 0)):,} messages from {name}", markup=False)
