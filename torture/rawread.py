"""The checker's independent reader: a stream's keys through plain ``STREAM.MSG.GET``.

The trial reads every stream it checks twice: with the project's range reader
(``oncestream.reader.read_stream``, batched direct gets, shared with the audit
and the Spark source) and with this one, which shares no code with oncestream or
nats-py. It speaks the NATS protocol by hand (``harness/_rawnats.py``), asks
``STREAM.INFO`` for the stream's own count (``state.messages``) and its sequence
range, then gets every sequence of that range with a plain ``STREAM.MSG.GET``
(answered by the stream leader, not a replica), pipelined. The checker counts
any difference between the two readers, or between what this one read and the
server's count, as a violation (``reader_mismatch``): a bug in the project's
reader cannot hide a loss.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import RawClient

#: err_code of "no message found": a deleted sequence inside the range.
NO_MESSAGE = 10037
#: err_code of "stream not found".
STREAM_NOT_FOUND = 10059
#: What a read of a server under a fault may raise: no answer, a closed connection
#: (EOFError: a server killed mid-read), an error answer, a malformed one.
_TRANSIENT = (OSError, TimeoutError, RuntimeError, ValueError, EOFError)
#: Headers oncestream's dead letters and their replays carry (``oncestream dlq``).
REPLAY_OF, DEAD_LETTER_BY, REPLAY_MARKER, REPLAY_FOR = (
    "Oncestream-Replay-Of",
    "Oncestream-Consumer",
    "Oncestream-Replay-Marker",
    "Oncestream-Replay-For",
)


#: How long :func:`read_raw` keeps asking a cluster that does not answer. Around a
#: partition's heal a cluster can be without a metadata leader or a stream leader for
#: seconds: its raft has no pre-vote, so a node cut off from a leader campaigns at ever
#: higher terms, and that term makes the leader step down (nats-server raft.go:
#: processVoteRequest, processAppendEntryResponse "Detected another leader with higher
#: term"), also once the cut heals; an election round takes 4-9 s (minElectionTimeout,
#: maxElectionTimeout). Meanwhile every server answers ``STREAM.MSG.GET`` with 10008 at
#: once (jetstream_api.go jsMsgGetRequest: isLeaderless, isGroupLeaderless), so reads fail
#: fast: the five quick rounds over three servers this wait replaced gave up before an
#: election could end (seed 41, trial 19: a harness crash, verdict unknown). In
#: ``python -m torture.repro_meta_leader`` reads answered 10008 for 8.35 s after a heal.
READ_WAIT = 60.0
#: Pause between two rounds over the servers.
ROUND_PAUSE = 0.5


def parse_headers(block: bytes) -> dict[str, str]:
    """A ``NATS/1.0`` header block's first value per name (by hand: no oncestream code)."""
    out: dict[str, str] = {}
    for line in block.decode(errors="replace").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip() and name.strip() not in out:
            out[name.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class RawRead:
    #: records by key; a replayed dead letter (``Oncestream-Replay-Of``) counts in
    #: ``replays`` instead, a dead letter in ``letters`` (by the consumer that gave up)
    keys: Counter[str]
    #: the server's own count (``STREAM.INFO`` ``state.messages``)
    messages: int
    first_seq: int
    last_seq: int
    #: seconds from the first attempt to the start of the one that read the stream
    waited_s: float = 0.0
    #: the failed attempts before it, ``"<url>: <error>"``
    errors: tuple[str, ...] = ()
    replays: Counter[str] = field(default_factory=Counter)
    #: dead letters: consumer -> key -> how many
    letters: dict[str, Counter[str]] = field(default_factory=dict)
    #: replayed copies by the consumer whose letter was replayed (``Oncestream-Replay-For``)
    replays_for: Counter[str] = field(default_factory=Counter)
    #: every server answered "stream not found" for ``gone_after`` s (see read_raw)
    gone: bool = False
    #: a key stored more than once: each copy's sequence and the time the server gave it
    #: (RFC 3339; a clustered stream's leader stamps a message as it proposes it)
    copies: dict[str, tuple[tuple[int, str], ...]] = field(default_factory=dict)


class Unreadable(RuntimeError):
    """No server answered a complete read of the stream within the wait."""

    def __init__(self, stream: str, waited_s: float, errors: list[str]) -> None:
        self.stream, self.waited_s, self.errors = stream, waited_s, tuple(errors)
        super().__init__(
            f"independent read of {stream!r} failed for {waited_s:.1f} s "
            f"({len(errors)} attempts): {errors[-3:]}"
        )


def record_key(data: bytes) -> str:
    """The record key: the payload, or the ``id`` field of a JSON record (CLI, Spark output)."""
    text = data.decode(errors="replace")
    if text.startswith("{"):
        try:
            return str(json.loads(text)["id"])
        except (ValueError, KeyError, TypeError):
            return text
    return text


def api(domain: str | None) -> str:
    return f"$JS.{domain}.API" if domain else "$JS.API"


async def _request(raw: RawClient, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    [(header, payload)] = await raw.request_many([(subject, json.dumps(body).encode())])
    if not payload:
        raise RuntimeError(f"{subject}: no JSON answer ({header[:60]!r})")
    return dict(json.loads(payload))


async def read_raw(
    servers: list[str],
    stream: str,
    *,
    domain: str | None = None,
    wait: float = READ_WAIT,
    gone_after: float | None = None,
) -> RawRead:
    """Every key of ``stream``, with the server's own message count.

    Tries each server in turn (a cluster answers through any node), round after
    round with a short pause, until one reads the whole stream or ``wait`` seconds
    have passed (at least one round is made). The wait and the failed attempts are
    in the result (``waited_s``, ``errors``).

    ``gone_after``: when every server has answered "stream not found" (10059) for this
    long, the stream is taken for gone (an OS crash took it: the trial knows when that
    can be) and an empty read with ``gone`` set is returned; None never does.

    Raises:
        Unreadable: no complete read within ``wait`` seconds.
    """
    errors: list[str] = []
    started = time.monotonic()
    not_found_since: float | None = None
    while True:
        round_errors = len(errors)
        for url in servers:
            began = time.monotonic()
            try:
                read = await _read(url, stream, domain)
            except _TRANSIENT as exc:
                errors.append(f"{url}: {type(exc).__name__}: {exc}")
                if url == servers[0]:  # once a round: a retried read is rare, worth seeing
                    print(f"rawread: {stream!r} read again after {errors[-1]}", file=sys.stderr)
                continue
            return replace(read, waited_s=round(began - started, 3), errors=tuple(errors))
        waited = time.monotonic() - started
        missing = all(f"'err_code': {STREAM_NOT_FOUND}" in e for e in errors[round_errors:])
        if not missing:
            not_found_since = None
        elif not_found_since is None:
            not_found_since = time.monotonic()
        gone = not_found_since is not None and time.monotonic() - not_found_since
        if gone_after is not None and gone is not False and gone >= gone_after:
            return RawRead(Counter(), 0, 0, 0, waited_s=round(waited, 3),
                           errors=tuple(errors), gone=True)  # fmt: skip
        if waited >= wait:
            raise Unreadable(stream, round(waited, 3), errors)
        await asyncio.sleep(ROUND_PAUSE)


async def read_once(
    servers: list[str], stream: str, *, domain: str | None = None
) -> RawRead | None:
    """One try per server (a small stream polled while the trial runs); None: no answer."""
    for url in servers:
        try:
            return await _read(url, stream, domain)
        except _TRANSIENT:
            continue
    return None


async def _read(url: str, stream: str, domain: str | None) -> RawRead:
    keys: Counter[str] = Counter()
    replays: Counter[str] = Counter()
    letters: dict[str, Counter[str]] = {}
    replays_for: Counter[str] = Counter()
    times: dict[int, str] = {}
    seqs: dict[str, list[int]] = {}

    def visit(seq: int, key: str, headers: dict[str, str]) -> None:
        if REPLAY_MARKER in headers:
            return  # the replay's own bookkeeping in the dead-letter stream
        if DEAD_LETTER_BY in headers:
            letters.setdefault(headers[DEAD_LETTER_BY], Counter())[key] += 1
        elif REPLAY_OF in headers:
            replays[key] += 1
            replays_for[headers.get(REPLAY_FOR, "")] += 1
        else:
            keys[key] += 1
            seqs.setdefault(key, []).append(seq)

    state = await _walk(url, stream, domain, visit, times)
    first, last = int(state["first_seq"]), int(state["last_seq"])
    copies = {
        k: tuple((q, times.get(q, "")) for q in found)
        for k, found in seqs.items()
        if len(found) > 1
    }
    return RawRead(
        keys,
        int(state["messages"]),
        first,
        last,
        replays=replays,
        letters=letters,
        replays_for=replays_for,
        copies=copies,
    )


async def _walk(
    url: str,
    stream: str,
    domain: str | None,
    visit: Callable[[int, str, dict[str, str]], object],
    times: dict[int, str] | None = None,
) -> dict[str, Any]:
    """``visit(seq, key, headers)`` for every stored message of ``stream``; its
    ``STREAM.INFO`` state. ``times``, when given, gets each message's server time by
    sequence."""
    prefix = api(domain)
    async with RawClient(url, timeout=10.0) as raw:
        info = await _request(raw, f"{prefix}.STREAM.INFO.{stream}", {})
        if "error" in info:
            raise RuntimeError(f"STREAM.INFO {stream}: {info['error']}")
        state: dict[str, Any] = info["state"]
        first, last = int(state["first_seq"]), int(state["last_seq"])
        subject = f"{prefix}.STREAM.MSG.GET.{stream}"
        seqs = list(range(first, last + 1)) if int(state["messages"]) else []
        answers = await raw.request_many(
            [(subject, json.dumps({"seq": s}).encode()) for s in seqs], window=512
        )
        for seq, (header, payload) in zip(seqs, answers, strict=True):
            if not payload:
                raise RuntimeError(f"seq {seq}: no answer ({header[:60]!r})")
            answer = json.loads(payload)
            if not isinstance(answer, dict):
                raise _not_an_answer(seq, payload)
            error = answer.get("error")
            if error is not None:
                if isinstance(error, dict) and error.get("err_code") == NO_MESSAGE:
                    continue  # deleted
                raise RuntimeError(f"seq {seq}: {error}")
            message = answer.get("message")
            if not isinstance(message, dict) or "seq" not in message:
                raise _not_an_answer(seq, payload)
            if int(message["seq"]) != seq:
                raise RuntimeError(f"asked for seq {seq}, got {message['seq']}")
            hdrs = base64.b64decode(message.get("hdrs") or "")
            headers = parse_headers(hdrs) if hdrs else {}
            if times is not None:
                times[seq] = str(message.get("time", ""))
            visit(seq, record_key(base64.b64decode(message.get("data") or "")), headers)
    return state


def _not_an_answer(seq: int, payload: bytes) -> RuntimeError:
    # Neither a message nor an error: not the server's answer to this get (the CI run
    # of 2d9a601 crashed on one with KeyError). Re-read rather than guess; read_raw
    # gives up after its wait, naming the answer.
    return RuntimeError(f"seq {seq}: not a STREAM.MSG.GET answer: {payload[:200]!r}")


async def walk_any(
    servers: list[str],
    stream: str,
    domain: str | None,
    visit: Callable[[int, str, dict[str, str]], object],
) -> bool:
    """``visit`` every message of ``stream`` through the first server that answers."""
    for url in servers:
        try:
            await _walk(url, stream, domain, visit)
        except _TRANSIENT:
            continue
        return True
    return False


async def seq_of(servers: list[str], stream: str, key: str, *, domain: str | None) -> int | None:
    """The stream sequence holding record ``key`` (None: not stored, or no server answered).

    The ``drop-acked`` sabotage needs it for records confirmed by a fast-ingest
    flow ack, which confirms a range and names no sequence per message.
    """
    found: list[int] = []
    for url in servers:
        try:
            await _walk(
                url, stream, domain, lambda seq, k, _h: found.append(seq) if k == key else None
            )
        except _TRANSIENT:
            continue
        return found[0] if found else None
    return None


async def delete_msg(servers: list[str], stream: str, seq: int, *, domain: str | None) -> bool:
    """``STREAM.MSG.DELETE`` of ``seq`` (the ``drop-acked`` sabotage); whether it succeeded."""
    subject = f"{api(domain)}.STREAM.MSG.DELETE.{stream}"
    for url in servers:
        try:
            async with RawClient(url) as raw:
                answer = await _request(raw, subject, {"seq": seq})
        except _TRANSIENT:
            continue
        if answer.get("success"):
            return True
    return False
