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

import base64
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import RawClient

#: err_code of "no message found": a deleted sequence inside the range.
NO_MESSAGE = 10037


@dataclass(frozen=True)
class RawRead:
    keys: Counter[str]
    #: the server's own count (``STREAM.INFO`` ``state.messages``)
    messages: int
    first_seq: int
    last_seq: int


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
    servers: list[str], stream: str, *, domain: str | None = None, attempts: int = 5
) -> RawRead:
    """Every key of ``stream``, with the server's own message count.

    Tries each server in turn (a cluster answers through any node); a sequence
    whose get is not answered (a leader election) is asked again, ``attempts``
    rounds in all.

    Raises:
        RuntimeError: the stream could not be read completely.
    """
    errors: list[str] = []
    for _ in range(attempts):
        for url in servers:
            try:
                return await _read(url, stream, domain)
            except (OSError, TimeoutError, RuntimeError, ValueError) as exc:
                errors.append(f"{url}: {type(exc).__name__}: {exc}")
                # In the harness's output: a retried read is rare and worth seeing.
                print(f"rawread: {stream!r} read again after {errors[-1]}", file=sys.stderr)
    raise RuntimeError(f"independent read of {stream!r} failed: {errors[-3:]}")


async def _read(url: str, stream: str, domain: str | None) -> RawRead:
    keys: Counter[str] = Counter()
    state = await _walk(url, stream, domain, lambda _seq, key: keys.update((key,)))
    return RawRead(keys, int(state["messages"]), int(state["first_seq"]), int(state["last_seq"]))


async def _walk(
    url: str, stream: str, domain: str | None, visit: Callable[[int, str], object]
) -> dict[str, Any]:
    """``visit(seq, key)`` for every stored message of ``stream``; its ``STREAM.INFO`` state."""
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
            visit(seq, record_key(base64.b64decode(message.get("data") or "")))
    return state


def _not_an_answer(seq: int, payload: bytes) -> RuntimeError:
    # Neither a message nor an error: not the server's answer to this get (the CI run
    # of 2d9a601 crashed on one with KeyError). Re-read rather than guess; read_raw
    # gives up after its rounds, naming the answer.
    return RuntimeError(f"seq {seq}: not a STREAM.MSG.GET answer: {payload[:200]!r}")


async def seq_of(servers: list[str], stream: str, key: str, *, domain: str | None) -> int | None:
    """The stream sequence holding record ``key`` (None: not stored, or no server answered).

    The ``drop-acked`` sabotage needs it for records confirmed by a fast-ingest
    flow ack, which confirms a range and names no sequence per message.
    """
    found: list[int] = []
    for url in servers:
        try:
            await _walk(url, stream, domain, lambda seq, k: found.append(seq) if k == key else None)
        except (OSError, TimeoutError, RuntimeError, ValueError):
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
        except (OSError, TimeoutError, RuntimeError, ValueError):
            continue
        if answer.get("success"):
            return True
    return False
