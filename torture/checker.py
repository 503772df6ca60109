"""Classify one trial from its history and final state.

What every producer had to publish is known up front (``state["inputs"]``:
positions ``0..n-1``, or the lines of the CLI's input file), so the checks are
about the input, not only about what a history line says was acknowledged:

* ``lost``: keys with an ``ack`` in the history that are not in the producers' stream.
* ``unstored``: input records not in the producers' stream after the drain, acked
  or not (a resume that skipped a position, a Publisher that gave up, a kill
  between the PubAck and its history line that was then never re-sent...).
* ``missing_at_hub``: (leaf trials) stored at the leaf, not in the hub's source
  stream after the drain.
* ``duplicated``: keys stored more than once in any of those streams.
* ``applied_twice``: keys with more than one effect row in a database.
* ``missing_effects``: input records without an effect row in a database.
* ``unexpected``: effect rows or stored records whose key is no input record.
* ``spark_missing`` / ``spark_duplicated``: (Spark trials) per Spark output (the
  ``jetstream`` output stream, the ``foreachBatch`` table), input records absent
  after the drain (``+key``: a key no input has) / present more than once.
* ``worker_failures``: a worker that exited with an error (any code but 0, or
  0 for a processor nobody asked to stop; a SIGKILL by the nemesis is expected),
  a process that ignored SIGTERM, or a producer that never finished its input,
  each with the tail of its log.
* ``reader_mismatch``: per stream, keys the project's reader and the independent
  reader (:mod:`torture.rawread`) disagree on, plus the difference between what
  the independent reader read and the server's own ``state.messages``.
* ``unreadable``: streams no server answered a complete read of within the
  independent reader's wait (:data:`torture.rawread.READ_WAIT`) after the drain,
  with what that reader, the product's reader and each server's ``/jsz`` said. The
  checks that need such a stream's content are not made for it (a note says so); the
  others (effects against the input, worker failures) are.
* ``dead_letters``: (trials whose handlers fail for a share of the keys) a failing key
  stored but not in the dead-letter stream, there more than once (one dead letter per
  message, whichever consumer gave up first), a key there that does not fail, or a
  failing key applied although it was not replayed.
* ``replays``: (``dead_letters=replay``) a failing key whose dead letter was not
  replayed exactly once, or a replayed copy of a key that does not fail. (The replayed
  copy is stored next to the original: it is not counted as ``duplicated``, and its
  effect is the key's one effect in each database.)
* ``harness_failures``: the harness itself failed in the trial (its traceback and
  the tail of every log are in the report): the trial's verdict is unknown.
* ``recovery``: per fault, seconds from its heal to the next ack and the next
  applied effect.

A trial whose settings allow acknowledged writes to be lost (nats-server's default
``sync_interval`` and a fault that drops what was not fsynced: ``os-crash``,
``power-loss``) and that did lose some (or a whole stream, or a stream went back:
:func:`rewound`) has ``limit`` set: what it measured is reported per setting as the
server's measured limit, every kind of it, not counted as oncestream's violation
(:func:`allowed_loss`). Every kind, because a store that lost acknowledged writes
misleads what runs on it: a resumed ``ProducerSession`` stores its records again under
new sequences (``duplicated``, ``applied_twice``), a consumer finds its stream or its
position gone (``worker_failures``). Such a trial's counts are listed per kind in the
summary's ``measured_limits``. A crash that lost nothing leaves every violation counted.

Every stream count the checks use is the independent reader's.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

PRODUCED, SOURCED = "T", "TH"  # the producers' stream; the hub's source of it (leaf trials)
#: Faults that drop what a node had not fsynced (torture/storefaults.py).
LOST_PAGE_CACHE = ("os-crash", "power-loss")


def load_history(path: Path) -> list[dict[str, Any]]:
    lines = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            try:
                lines.append(json.loads(raw))
            except ValueError:
                continue
    return sorted(lines, key=lambda line: line["mono"])


def expected_keys(inputs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Every record key of the producers' inputs (key -> producer).

    ``{"positions": n}``: keys ``<producer>-0 .. <producer>-(n-1)``; ``{"file": path,
    "id_field": f}``: the ``f`` field of each JSON line of the file (the CLI's input).
    """
    keys: dict[str, str] = {}
    for producer, spec in inputs.items():
        if "positions" in spec:
            keys |= {f"{producer}-{i}": producer for i in range(int(spec["positions"]))}
        else:
            with open(spec["file"], encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        keys[str(json.loads(line)[spec["id_field"]])] = producer
    return keys


def allowed_loss(state: dict[str, Any]) -> str | None:
    """Why this trial's settings allow acknowledged writes to be lost (None: they do not).

    nats-server acknowledges a write before it is fsynced unless ``sync_interval:
    always``: a machine crash (here: the page-cache file system dropping what was not
    synced) may lose it.
    """
    if state.get("sync", "always") == "always":
        return None
    crashes = sorted(
        {f["kind"] for f in state.get("faults", ()) if not f.get("skipped")} & set(LOST_PAGE_CACHE)
    )
    if not crashes:
        return None
    return f"sync_interval default (2 min) and {', '.join(crashes)}"


#: A server's answer while its JetStream is not available yet (10008).
_RECOVERING = "'err_code': 10008"


def _not_found(read: dict[str, Any]) -> bool:
    """Whether every server that answered for an unreadable stream said "stream not
    found" (10059), the others refusing the connection (a node not running, such as a
    membership change's spare) or saying that their JetStream is not available yet
    (10008: a node still recovering, which tells nothing about the stream): the stream
    itself is gone, as an OS crash can take one whose creation was never fsynced.
    Seen at 379b920 (seed 53, trial 1): after a default-sync power loss two servers
    said 10059 and the third, killed by a bit flip during the drain, 10008."""
    errors = [str(e) for e in (read.get("unreadable") or {}).get("errors") or []]
    found = [e for e in errors if "ConnectionRefusedError" not in e and _RECOVERING not in e]
    return bool(found) and all("10059" in e for e in found)


def rewound(history: list[dict[str, Any]], home: dict[str, str]) -> dict[str, list[int]]:
    """Per stream, the sequences the server acknowledged for two different records.

    A stream that hands out a sequence a second time went back: the writes it had
    acknowledged at those sequences are gone from it, although their records may have
    been stored again (a resumed ``ProducerSession`` re-sends from what the stream
    holds). Seen after an OS crash with the default sync: a replica whose unsynced raft
    log was dropped voted for a leader that lacked the last ~2,200 acknowledged writes
    (seed 62, trial 4, at 9484596), and the stream was then unreadable, so ``lost``
    could not show it. A duplicate's ack repeats its own record's sequence: not counted.
    """
    keys: dict[str, dict[int, set[str]]] = {}
    for h in history:
        stream = home.get(h["process"])
        seq = h.get("seq")
        # 0: a fast-ingest batch answers once per flow window, not per message.
        if h["op"] != "ack" or stream is None or not isinstance(seq, int) or seq <= 0:
            continue
        keys.setdefault(stream, {}).setdefault(seq, set()).add(h["key"])
    found = {s: sorted(q for q, k in seqs.items() if len(k) > 1) for s, seqs in keys.items()}
    return {s: seqs for s, seqs in sorted(found.items()) if seqs}


def _apart(copies: list[list[Any]]) -> str:
    """Seconds between a key's first and last copy by the server's times (a re-send the
    leader got more than the stream's duplicate window after the first copy is stored
    again: seed 52, trial 15 at 89c1ba0, 4.86 s apart with a 4 s window)."""
    try:
        times = [datetime.fromisoformat(str(t)).timestamp() for _, t in copies]
    except ValueError:
        return "? s"
    return f"{max(times) - min(times):.3f} s"


#: ``oncestream publish``'s retry horizon in short-window trials (``--ack-timeout 1s
#: --max-attempts 3``, trial.py), and the window of the stream it writes then.
CLI_HORIZON, CLI_WINDOW = 3.3, 4.0  # options.SHORT_WINDOW (a test holds them equal)
#: Faults that hold a message on its way to the stream's leader: a paused server keeps
#: what its clients sent in its socket buffers, a cut or slowed link in TCP's queues.
HOLDING = ("server-pause", "partition", "degrade", "partition-pair", "degrade-pair")


def held_resends(
    state: dict[str, Any], reads: dict[str, dict[str, Any]], expected: dict[str, str]
) -> dict[str, dict[str, str]]:
    """The CLI's records stored twice by a re-send that a fault held on its way until the
    stream's short window had passed: stream -> key -> why.

    nats-server ages a msg id from the first copy's arrival at the leader; the Publisher's
    window guard bounds when a re-send is sent, not when it arrives (docs/publishing.md,
    "Window guard"; docs/guarantees.md finding 25). The 4 s window the harness draws is
    shorter than the horizon plus the longest hold, which the docs say to avoid: such a
    copy is the window setting's measured limit, not counted as ``duplicated`` or
    ``applied_twice``. Only on this evidence: the key is the CLI's, stored exactly
    twice; its copies reached the leader more than the window and no more than the
    horizon plus a holding fault's length (and 1 s) apart; that fault began less than
    the horizon after the first copy, and the second came within 2 s of its heal (what
    a paused server or a cut link held is delivered then; 0.5 s before it: the heal is
    stamped once it is confirmed); and no run of the CLI
    started between the copies (a re-run's re-send would not be a held one).
    """
    if (state.get("options") or {}).get("window") != "short":
        return {}
    holding = [
        f
        for f in state.get("faults") or ()
        if f.get("kind") in HOLDING and not f.get("skipped") and "wall_end" in f
    ]
    starts = [float(t) for t in (state.get("starts") or {}).get("cli") or ()]
    out: dict[str, dict[str, str]] = {}
    for stream, read in reads.items():
        for key, copies in (read.get("copies") or {}).items():
            if expected.get(key) != "cli" or len(copies) != 2:
                continue
            try:
                first, second = sorted(
                    datetime.fromisoformat(str(t)).timestamp() for _, t in copies
                )
            except ValueError:
                continue
            gap = second - first
            if gap <= CLI_WINDOW or any(first < t < second for t in starts):
                continue
            for f in holding:
                length = f["wall_end"] - f["wall_start"]
                if (
                    first - length <= f["wall_start"] <= first + CLI_HORIZON
                    and -0.5 <= second - f["wall_end"] <= 2.0
                    and gap <= CLI_HORIZON + length + 1.0
                ):
                    out.setdefault(stream, {})[key] = (
                        f"copies {gap:.2f} s apart at the leader against a {CLI_WINDOW:g} s "
                        f"window and a {CLI_HORIZON:g} s horizon: held by {f['kind']} of "
                        f"{f.get('resolved')} ({length:.1f} s, the second copy "
                        f"{second - f['wall_end']:.2f} s after its heal)"
                    )
                    break
    return out


def check(history: list[dict[str, Any]], state: dict[str, Any]) -> dict[str, Any]:
    inputs: dict[str, dict[str, Any]] = state["inputs"]
    expected = expected_keys(inputs)
    processed_by = {p for p, spec in inputs.items() if spec.get("processed", True)}
    processed = {k for k, p in expected.items() if p in processed_by}
    home = {p: spec.get("stream", PRODUCED) for p, spec in inputs.items()}
    acked = {h["key"] for h in history if h["op"] == "ack"}
    streams: dict[str, dict[str, int]] = state["streams"]
    reads: dict[str, dict[str, Any]] = state.get("reads") or {}
    unreadable = {s: r["unreadable"] for s, r in reads.items() if "unreadable" in r}
    # A producer's stream unreadable: nothing can be said about what it stores.
    readable = {p for p in inputs if home[p] in streams}
    stored_by = {p: streams[home[p]] for p in readable}
    stored = streams.get(PRODUCED)
    duplicated: set[str] = set()
    held_by_stream = held_resends(state, reads, expected)
    for stream, counts in streams.items():
        excused = held_by_stream.get(stream, {})
        duplicated |= {k for k, n in counts.items() if n > 1 and not (n == 2 and k in excused)}
    held = {k: why for found in held_by_stream.values() for k, why in found.items()}
    # Leaf trials: stored at the leaf but not at the hub after the drain.
    at_hub = streams.get(SOURCED)
    missing_at_hub = set() if at_hub is None or stored is None else stored.keys() - at_hub.keys()
    options = state.get("options") or {}
    mode = options.get("dead_letters", "none")
    failing = set(state.get("failing") or ())
    applied_twice: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    # keep: a failing key is dead-lettered and never applied; replay: its replayed copy is
    # applied, once, like any other key.
    owed = processed - failing if mode == "keep" else processed
    for db, effects in state["effects"].items():
        applied_twice[db] = sorted(
            k for k, n in effects.items() if n > 1 and not (n == 2 and k in held)
        )
        missing[db] = sorted(owed - effects.keys())
    dead, replays = dead_letter_check(state, failing, mode)
    stored_keys = {k for c in streams.values() for k in c}
    unexpected = sorted(stored_keys - expected.keys())
    unexpected += sorted({k for e in state["effects"].values() for k in e} - expected.keys())
    spark_missing, spark_duplicated = spark_check(
        state.get("spark"), processed, state.get("replays") or {}
    )
    failures = [*state.get("worker_failures", ())]
    failures += [
        {"worker": u["worker"], "code": None, "why": "never finished its input", **u}
        for u in state.get("unfinished", ())
    ]
    notes = [
        f"stream {s} unreadable for {u['waited_s']} s after the drain "
        f"(meta leader per node {u['meta_leader']}; the product's reader: "
        f"{u['project_reader']}): its content is not checked"
        for s, u in sorted(unreadable.items())
    ]
    notes += [
        f"stream {s}: the independent reader waited {r['waited_s']} s "
        f"({r['failed_reads']} failed reads, the last: {r['last_error']})"
        for s, r in sorted(reads.items())
        if r.get("waited_s")
    ]
    notes += [
        f"stream {s}: gone after an OS crash (every server answered 'stream not found' "
        f"for {r['waited_s']} s): every record of it is counted as lost"
        for s, r in sorted(reads.items())
        if r.get("gone")
    ]
    notes += [
        f"stream {s}: the product's reader failed where the independent one read it: "
        f"{r['project_error']}"
        for s, r in sorted(reads.items())
        if r.get("project_error")
    ]
    notes += [
        f"stream {s}: {k} stored {len(c)} times, at "
        + ", ".join(f"seq {q} ({t})" for q, t in c)
        + f": {_apart(c)} apart"
        for s, r in sorted(reads.items())
        for k, c in sorted((r.get("copies") or {}).items())[:10]
    ]
    if state["kind"] == "leaf" and state.get("sourced_after_s") is None:
        notes.append("the hub's source never caught up with the leaf's stream")
    for name, n in sorted((state.get("startup_retries") or {}).items()):
        notes.append(f"{name}: {n} start-up retries (servers unreachable at start)")
    faults = state["faults"]
    lost = sorted(
        k for k in acked if expected.get(k) in readable and k not in stored_by[expected[k]]
    )
    # Only a trial that did lose acknowledged writes (or a whole stream) is the setting's
    # measured limit: a crash the default sync allows, landed without loss, leaves every
    # violation counted.
    gone = any(r.get("gone") or _not_found(r) for r in reads.values())
    went_back = rewound(history, home)
    notes += [
        f"stream {s}: {len(q)} sequences acknowledged for two different records "
        f"({q[0]}..{q[-1]}): it went back, losing the writes it had acknowledged there"
        for s, q in went_back.items()
    ]
    limit = allowed_loss(state) if lost or gone or went_back else None
    return {
        "index": state["index"],
        "kind": state["kind"],
        "seed": state["seed"],
        "records": len(expected),
        "acked": len(acked),
        "stored": {s: len(c) for s, c in streams.items()},
        "lost": lost,
        "unstored": sorted(
            k for k, p in expected.items() if p in readable and k not in stored_by[p]
        ),
        "missing_at_hub": sorted(missing_at_hub),
        "duplicated": sorted(duplicated),
        # Streams every server called "not found" at the final read (a lost page cache
        # took them): what a fault that needs the stream could not act on.
        "gone_streams": sorted(s for s, r in reads.items() if r.get("gone") or _not_found(r)),
        "held_resends": held,
        "applied_twice": applied_twice,
        "missing_effects": missing,
        "unexpected": unexpected,
        "worker_failures": failures,
        "reader_mismatch": reader_mismatch(reads),
        "unreadable": unreadable,
        "spark": state.get("spark") is not None,
        "spark_ready_after_s": (state.get("spark") or {}).get("ready_after_s"),
        "spark_query_restarts": (state.get("spark") or {}).get("query_restarts"),
        "spark_mode": (state.get("spark") or {}).get("mode"),
        "pg_active": state.get("pg_active"),
        "spark_missing": spark_missing,
        "spark_duplicated": spark_duplicated,
        "cli_resumes": state.get("cli_resumes", 0),
        "startup_retries": state.get("startup_retries") or {},
        "dead_letters": dead,
        "replays": replays,
        "options": options,
        "sync": state.get("sync"),
        "rewound": went_back,
        "limit": limit,
        "reruns": state.get("reruns") or {},
        "harness_failures": state.get("harness_failures") or [],
        "sabotage": state.get("sabotage"),
        "sabotaged": state.get("sabotaged") or [],
        "notes": notes,
        "faults": [f for f in faults if not f.get("skipped")],
        "skipped": [
            {"kind": f["kind"], "target": f.get("resolved") or f["target"], "why": f["why"]}
            for f in faults
            if f.get("skipped")
        ],
        "recovery": recovery(history, faults),
        "timing": state.get("timing", {}),
        "load": load(history),
    }


def dead_letter_check(
    state: dict[str, Any], failing: set[str], mode: str
) -> tuple[dict[str, list[str]], list[str]]:
    """The dead-letter stream and the replays against the failing keys.

    Every processor's handler fails the same keys, and each consumer that gives up on a
    message writes its own dead letter (msg id ``dlq:<stream>:<consumer>:<seq>:<life>``):
    so per database (``lite``: SQLite; ``pg``, or its partitions' ``pg-p<N>``:
    PostgreSQL) the stream holds exactly one dead letter per failing key that arrived.
    With ``replay`` every dead letter was replayed: none is left, and each failing key
    has one replayed copy per database in the processed stream, which only the named
    consumer applies. Returns ``({"dlq": [problem...]}, [replay problem...])``, each
    problem ``"<what>:<key>"`` (``@<database>`` where one is meant).
    """
    if mode == "none":
        return {}, []
    processed_stream = state.get("processed_stream", PRODUCED)
    arrived = failing & set((state["streams"].get(processed_stream) or {}).keys())
    letters: dict[str, dict[str, int]] | None = state.get("dead_letters")
    problems: dict[str, list[str]] = {}
    if letters is None:
        if state.get("dlq_unreadable") or arrived:
            problems["dlq"] = [f"unreadable:{len(arrived)} failing keys unchecked"]
        return problems, []
    databases = sorted(state["effects"])
    # A consumer reset back past dead-lettered messages delivers them again: they fail
    # again and get a second letter past the dead-letter stream's duplicate window
    # (docs/processing.md, "A dead-lettered message delivered again"). Extra letters are
    # then not counted; extra copies are: replay finds the first copy and adds none.
    reset = any(f.get("kind") == "consumer-reset" for f in state.get("faults") or ())
    held: dict[str, Counter[str]] = {db: Counter() for db in databases}
    found: list[str] = []
    for consumer, counts in letters.items():
        db = database_of(consumer)
        if db not in held:
            found += [f"unexpected-consumer:{k}@{consumer}" for k in sorted(counts)]
            continue
        held[db].update(counts)
    owed = set() if mode == "replay" else arrived
    for db in databases:
        found += [f"missing:{k}@{db}" for k in sorted(owed - held[db].keys())]
        if not reset:
            found += [f"twice:{k}@{db}" for k, n in sorted(held[db].items()) if n > 1 and k in owed]
        found += [f"not-replayed:{k}@{db}" for k in sorted(held[db].keys() - owed) if k in failing]
        found += [f"unexpected:{k}@{db}" for k in sorted(held[db].keys() - failing)]
    if mode == "keep":
        for db, effects in sorted(state["effects"].items()):
            found += [f"applied:{k}@{db}" for k in sorted(arrived & effects.keys())]
    if found:
        problems["dlq"] = found
    replay_problems: list[str] = []
    if mode == "replay":
        copies: dict[str, int] = state.get("replays") or {}
        want = len(databases)  # one copy per consumer's letter
        replay_problems += [f"missing:{k}" for k in sorted(arrived) if copies.get(k, 0) < want]
        replay_problems += [f"twice:{k}" for k, n in sorted(copies.items()) if n > want]
        replay_problems += [f"unexpected:{k}" for k in sorted(copies.keys() - failing)]
    return problems, replay_problems


def database_of(consumer: str) -> str:
    """The database whose effects a consumer's processor writes: ``lite`` SQLite, the
    PostgreSQL pair's ``pg`` and the group's ``pg-p<N>`` PostgreSQL."""
    if consumer == "lite":
        return "sqlite"
    if consumer == "pg" or consumer.startswith("pg-p"):
        return "postgres"
    return consumer


def reader_mismatch(reads: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Per stream read twice: keys (and replayed copies) counted differently by the two
    readers, plus how far the independent reader's total is from the server's
    ``state.messages``. (The dead-letter stream is read by the independent reader only.)"""
    out = {}
    for stream, read in reads.items():
        if "unreadable" in read or read.get("independent_only"):
            continue  # reported as unreadable / not read twice
        raw, project = Counter(read["raw"]), Counter(read["project"])
        differ = sum(abs(raw[k] - project[k]) for k in raw.keys() | project.keys())
        raw_r = Counter(read.get("raw_replays") or {})
        project_r = Counter(read.get("project_replays") or {})
        differ += sum(abs(raw_r[k] - project_r[k]) for k in raw_r.keys() | project_r.keys())
        total = sum(raw.values()) + sum(raw_r.values())
        out[stream] = differ + abs(total - int(read["messages"]))
    return out


def load(history: list[dict[str, Any]]) -> dict[str, float | None]:
    """Acked publishes per second (first to last ack) and publish latency percentiles."""
    acks = [h for h in history if h["op"] == "ack" and "latency" in h]
    if len(acks) < 2:
        return {"acks_per_s": None, "latency_p50_ms": None, "latency_p99_ms": None}
    span = acks[-1]["mono"] - acks[0]["mono"]
    lat = sorted(h["latency"] for h in acks)
    return {
        "acks_per_s": round(len(acks) / span, 1) if span > 0 else None,
        "latency_p50_ms": round(lat[len(lat) // 2] * 1000, 2),
        "latency_p99_ms": round(lat[min(len(lat) - 1, len(lat) * 99 // 100)] * 1000, 2),
    }


def spark_check(
    spark: dict[str, Any] | None, expected: Any, copies: dict[str, int] | None = None
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per Spark output: input keys it lacks, keys it holds more than once.

    ``expected``: the keys of the stream the job reads; ``copies``: replayed dead
    letters stored there next to their original (the job reads each as a record of its
    own: a key with one copy belongs in each output twice). A key in an output that no
    input has counts as missing too (listed as ``+key``): the Spark job cannot have read it.
    """
    copies = copies or {}
    missing: dict[str, list[str]] = {}
    duplicated: dict[str, list[str]] = {}
    for output in ("stream", "db"):
        if spark is None or (output in spark and spark[output] is None):
            continue  # no Spark job, or an output stream reported as unreadable
        counts: dict[str, int] = spark.get(output) or {}
        missing[output] = sorted(set(expected) - counts.keys())
        missing[output] += sorted(f"+{k}" for k in counts.keys() - set(expected))
        duplicated[output] = sorted(k for k, n in counts.items() if n > 1 + copies.get(k, 0))
        missing[output] += sorted(k for k, n in counts.items() if n < 1 + copies.get(k, 0) and
                                  k in copies)  # fmt: skip
    return missing, duplicated


def recovery(history: list[dict[str, Any]], faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seconds from each heal to the next ack and the next applied effect; for a fault
    on one producer or processor, that process's own next ack / effect."""
    acks: dict[str, list[float]] = {"*": []}
    applies: dict[str, list[float]] = {"*": []}
    for h in history:
        if h["op"] in ("ack", "apply"):
            series = acks if h["op"] == "ack" else applies
            series["*"].append(h["mono"])
            series.setdefault(h["process"], []).append(h["mono"])
    for series in (acks, applies):
        for times in series.values():
            times.sort()
    out = []
    for fault in faults:
        if fault.get("skipped") or "mono_end" not in fault:
            continue
        end, target = fault["mono_end"], fault["resolved"]
        row = {"kind": fault["kind"], "target": target}
        for name, series in (("ack_after_s", acks), ("apply_after_s", applies)):
            times = (
                series.get(target, series["*"])
                if fault["kind"] in ("kill", "pause")
                else series["*"]
            )
            i = bisect.bisect_left(times, end)
            row[name] = round(times[i] - end, 3) if i < len(times) else None
        out.append(row)
    return out


def violations(result: dict[str, Any]) -> dict[str, int]:
    return {
        "lost": len(result["lost"]),
        "unstored": len(result.get("unstored", ())),
        "missing_at_hub": len(result.get("missing_at_hub", ())),
        "duplicated": len(result["duplicated"]),
        "applied_twice": sum(len(v) for v in result["applied_twice"].values()),
        "missing_effects": sum(len(v) for v in result["missing_effects"].values()),
        "unexpected": len(result["unexpected"]),
        "worker_failures": len(result.get("worker_failures", ())),
        "reader_mismatch": sum((result.get("reader_mismatch") or {}).values()),
        "spark_missing": sum(len(v) for v in (result.get("spark_missing") or {}).values()),
        "spark_duplicated": sum(len(v) for v in (result.get("spark_duplicated") or {}).values()),
        "unreadable": len(result.get("unreadable") or {}),
        "dead_letters": sum(len(v) for v in (result.get("dead_letters") or {}).values()),
        "replays": len(result.get("replays") or ()),
        "harness_failures": len(result.get("harness_failures") or ()),
    }
