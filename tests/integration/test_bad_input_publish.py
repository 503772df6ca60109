"""Bad input for `oncestream publish`: one row per case (issue 10), run by tests/_cli_cases.py.

Each row gives the arguments, the input file, the exit code (0 ok, 1 the work
failed, 2 bad usage or configuration), a fragment of the message, and what
must hold for the streams afterwards (nothing stored, or each record once).
One nats-server serves every row; each row uses its own streams.
"""

from __future__ import annotations

import gzip
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from oncestream.server import NatsServer
from oncestream.streams import add_stream
from tests._cli_cases import Case, CliEnv, Outcome, Running, run_case

OK, FAILED, CONFIG = 0, 1, 2


@pytest.fixture
def cli_env(module_nats_server: NatsServer, tmp_path: Path) -> CliEnv:
    return CliEnv(url=module_nats_server.url, tmp=tmp_path / "case")


def publish(stream: str, subject: str, *extra: str, file: str = "{tmp}/in.jsonl") -> list[str]:
    """The row's args; ``subject`` is literal (its braces are escaped for the row runner)."""
    subject = subject.replace("{", "{{").replace("}", "}}")
    return [
        "publish",
        file,
        "--stream",
        stream,
        "--subject",
        subject,
        "-s",
        "{url}",
        "--no-progress",
        *extra,
    ]


def lines(*records: object) -> str:
    return "".join((r if isinstance(r, str) else orjson.dumps(r).decode()) + "\n" for r in records)


def given(
    stream: str, content: str | bytes, name: str = "in.jsonl", **streams: str
) -> Callable[[CliEnv], None]:
    """Setup: stream ``stream`` (subjects ``<stream lower>.>``), extra streams, the input file."""

    def setup(env: CliEnv) -> None:
        env.stream(stream)
        for other, subject in streams.items():
            env.stream(other, subject)
        env.file(name, content)

    return setup


def stored(stream: str, count: int, *also_empty: str) -> Callable[[CliEnv, Outcome], None]:
    """Check: ``stream`` holds exactly ``count`` messages and ``also_empty`` none."""

    def check(env: CliEnv, _: Outcome) -> None:
        assert env.messages(stream) == count, f"{stream} should hold {count} messages"
        for other in also_empty:
            assert env.messages(other) == 0, f"nothing may be stored in {other}"

    return check


def stored_ids(stream: str, *ids: str) -> Callable[[CliEnv, Outcome], None]:
    """Check: ``stream`` holds exactly these msg ids, in this order."""

    def check(env: CliEnv, _: Outcome) -> None:
        assert env.msg_ids(stream) == list(ids)

    return check


def _fifo(path: Path, content: str) -> None:
    """A named pipe that a thread fills once the command opens it."""
    os.mkfifo(path)

    def feed() -> None:
        with path.open("w") as pipe:
            pipe.write(content)

    threading.Thread(target=feed, daemon=True).start()


def _growing(stream: str, start: int) -> Callable[[CliEnv], None]:
    """Setup: a file of ``start`` records that a thread keeps appending to until the check."""

    def setup(env: CliEnv) -> None:
        env.stream(stream)
        path = env.file("in.jsonl", lines(*({"id": n} for n in range(start))))
        stop = threading.Event()

        def append() -> None:
            with path.open("a") as out:
                for n in range(start, start + 200_000):  # bounded: ~10 s at most
                    if stop.is_set():
                        return
                    out.write(f'{{"id": {n}}}\n')
                    if n % 20 == 0:
                        out.flush()
                        time.sleep(0.001)

        appender = threading.Thread(target=append, daemon=True)
        appender.start()
        env.values["appender"] = (stop, appender)
        env.defer(stop.set)

    return setup


def _snapshot_published(stream: str) -> Callable[[CliEnv, Outcome], None]:
    """Check: the run stored exactly the lines it counted at start; a re-run stores the rest."""

    def check(env: CliEnv, outcome: Outcome) -> None:
        stop, appender = env.values["appender"]
        stop.set()
        appender.join(timeout=30)
        flat = " ".join(outcome.output.split())
        found = re.search(r"lines 1\.\.([\d,]+) of ([\d,]+) confirmed", flat)
        assert found, flat
        confirmed, counted = (int(g.replace(",", "")) for g in found.groups())
        assert confirmed == counted, "the summary contradicts itself"
        assert env.messages(stream) == counted, "stored a different number than it reports"
        total = len((env.tmp / "in.jsonl").read_bytes().splitlines())
        assert total > counted, "the file did not grow during the run"
        args = publish(stream, f"{stream.lower()}.x", *ID)
        rerun = run_case(
            Case(
                f"{stream}-rerun", args, OK, f"resuming '{env.tmp}/in.jsonl' after line {counted:,}"
            ),
            env,
        )
        assert "grew" not in rerun.output
        assert env.messages(stream) == total, "the re-run did not store each line once"

    return check


def _rewrite_in_place_mid_run(stream: str) -> Callable[[CliEnv, Running], None]:
    """During: once the run stored 1,000 records, rewrite in.jsonl in place (truncate and
    write a shorter version, as `generate > in.jsonl` does while it runs): the reader's
    next read lands past the new end, mid-line or on a line's end."""

    def during(env: CliEnv, running: Running) -> None:
        deadline = time.monotonic() + 30
        while env.messages(stream) < 1_000:  # a stream's count: no event to await
            assert running.proc.poll() is None, running.output()
            assert time.monotonic() < deadline, "the run did not store 1,000 records in 30s"
            time.sleep(0.02)
        with (env.tmp / "in.jsonl").open("r+") as out:
            out.truncate(0)
            out.write(lines(*({"id": n, "v": 2} for n in range(100))))

    return during


def _torn_not_duplicated(stream: str) -> Callable[[CliEnv, Outcome], None]:
    """Check: each stored record once, the count the summary confirms; the re-run refused."""

    def check(env: CliEnv, outcome: Outcome) -> None:
        flat = " ".join(outcome.output.split())
        found = re.search(r"lines 1\.\.([\d,]+) of 20,000 confirmed", flat)
        assert found, flat
        confirmed = int(found.group(1).replace(",", ""))
        ids = env.msg_ids(stream)
        assert len(ids) == len(set(ids)) == confirmed, (len(ids), confirmed)
        assert "fix line" not in flat, flat
        args = publish(stream, f"{stream.lower()}.x", *ID)
        again = run_case(Case(f"{stream}-rerun", args, CONFIG, "changed since an earlier"), env)
        assert env.messages(stream) == confirmed, again.output

    return check


def _write_fifo_once_waiting(env: CliEnv, running: Running) -> None:
    running.wait_for(f"waiting for a writer on FIFO '{env.tmp}/pipe'", timeout=15)
    with (env.tmp / "pipe").open("w") as pipe:
        pipe.write(GOOD)


GOOD = lines({"id": "a", "r": "eu"}, {"id": "b", "r": "us"})
BAD_SECOND = lines({"id": "a"}, "{bad", {"id": "c"})
ID = ("--id-field", "id")
ROOT = os.geteuid() == 0
NO_DAC_OVERRIDE = (
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
)

CASES = [
    # -- wrong stream (issue 10 item 1) ----------------------------------------------------
    Case(
        "subject-of-another-stream",
        publish("WSB", "wsa.x", *ID),
        CONFIG,
        "captured by stream 'WSA', not by --stream 'WSB' (which captures 'wsb.>')",
        setup=given("WSB", GOOD, WSA="wsa.>"),
        check=stored("WSB", 0, "WSA"),
    ),
    Case(
        "record-subject-of-another-stream",
        publish("WRB", "wrb.{r}", *ID, "--on-error", "skip"),
        CONFIG,
        "StreamMismatch",
        setup=lambda env: (
            env.stream("WRB", "wrb.eu"),
            env.stream("WRC", "wrb.us"),
            env.file("in.jsonl", GOOD),
        ),
        check=stored("WRB", 1, "WRC"),
    ),
    Case(
        # The server answers "no responders" as it does for a stream without a leader; it
        # lists no stream for the subject, so this is still bad usage, not an outage.
        "record-subject-no-stream-captures",
        publish("NRB", "nrb.{r}", *ID),
        CONFIG,
        "subject 'nrb.us' of a record is captured by no stream, not by --stream 'NRB'",
        setup=lambda env: (env.stream("NRB", "nrb.eu"), env.file("in.jsonl", GOOD)),
        check=stored("NRB", 1),
    ),
    Case(
        "subject-no-stream-captures",
        publish("NSC", "nowhere.x", *ID),
        CONFIG,
        "no stream captures --subject 'nowhere.x'; --stream 'NSC' captures 'nsc.>'",
        setup=given("NSC", GOOD),
        check=stored("NSC", 0),
    ),
    Case(
        "stream-missing",
        publish("NOPE", "nope.x", *ID),
        CONFIG,
        "'NOPE' (--stream) not found",
        setup=lambda env: env.file("in.jsonl", GOOD),
    ),
    Case(
        "stream-is-a-mirror",
        publish("MIR", "mirsrc.x", *ID),
        CONFIG,
        "stream 'MIR' (--stream) is a mirror of 'MIRSRC'",
        setup=lambda env: (
            env.stream("MIRSRC"),
            env.run(lambda conn: add_stream(conn, {"name": "MIR", "mirror": {"name": "MIRSRC"}})),
            env.file("in.jsonl", GOOD),
        ),
        check=stored("MIRSRC", 0),
    ),
    Case(
        "stream-name-invalid",
        publish("a.b", "ab.x", *ID),
        CONFIG,
        "--stream",
        setup=lambda env: env.file("in.jsonl", GOOD),
    ),
    Case(
        "progress-stream-name-invalid",
        publish("PSN", "psn.x", *ID, "--progress-stream", "a b"),
        CONFIG,
        "--progress-stream",
        setup=given("PSN", GOOD),
        check=stored("PSN", 0),
    ),
    # -- --subject templates ----------------------------------------------------------------
    *(
        Case(
            f"subject-{name}",
            publish("SUBJ", subject, *ID),
            CONFIG,
            fragment.replace("{", "{{").replace("}", "}}"),  # the runner formats messages
            setup=given("SUBJ", GOOD),
            check=stored("SUBJ", 0),
        )
        for name, subject, fragment in (
            ("unclosed-brace", "subj.{r", "--subject 'subj.{r': unbalanced braces"),
            ("stray-close-brace", "subj.}", "--subject 'subj.}': unbalanced braces"),
            ("empty", "", "is not a valid subject to publish to"),
            ("empty-token", "subj..x", "is not a valid subject to publish to"),
            ("trailing-dot", "subj.", "is not a valid subject to publish to"),
            ("wildcard", "subj.*", "not a valid subject to publish to"),
            ("dotted-placeholder", "subj.{a.b}", "placeholders are plain field names"),
            ("empty-placeholder", "subj.{}", "placeholders are plain field names"),
        )
    ),
    # -- the input file ---------------------------------------------------------------------
    Case("file-missing", publish("FM", "fm.x", *ID), CONFIG, "not found"),
    Case(
        "file-is-directory",
        publish("FD", "fd.x", *ID, file="{tmp}/dir"),
        CONFIG,
        "is a directory",
        setup=lambda env: (env.tmp / "dir").mkdir(parents=True),
    ),
    Case(
        "file-unreadable",
        publish("FU", "fu.x", *ID),
        CONFIG,
        "not readable",
        setup=lambda env: env.file("in.jsonl", GOOD, mode=0),
        # root reads any file: drop the capabilities that let it, so the row runs in CI too
        subprocess=ROOT,
        prefix=NO_DAC_OVERRIDE if ROOT else (),
    ),
    Case(
        "file-empty",
        publish("FE", "fe.x", *ID),
        OK,
        "holds no records",
        setup=given("FE", ""),
        check=stored("FE", 0),
    ),
    Case(
        "file-blank-lines",
        publish("FB", "fb.x", *ID),
        OK,
        "holds no records",
        setup=given("FB", "\n \n\n"),
        check=stored("FB", 0),
    ),
    Case(
        "file-binary",
        publish("FBIN", "fbin.x", *ID),
        CONFIG,
        "binary file",
        setup=given("FBIN", b"\x00\x01\x02 not text"),
        check=stored("FBIN", 0),
    ),
    Case(
        "file-gzip",
        publish("FGZ", "fgz.x", *ID, file="{tmp}/in.jsonl.gz"),
        CONFIG,
        "gzip-compressed",
        setup=given("FGZ", gzip.compress(GOOD.encode()), name="in.jsonl.gz"),
        check=stored("FGZ", 0),
    ),
    Case(
        "stdin-binary",
        publish("SB", "sb.x", *ID, file="-"),
        CONFIG,
        "binary file",
        setup=given("SB", ""),
        stdin="\x00\x00",
        check=stored("SB", 0),
    ),
    Case(
        "file-is-a-pipe",
        publish("FP", "fp.x", *ID, file="{tmp}/pipe"),
        OK,
        "is not a regular file: no progress is recorded",
        setup=lambda env: (env.stream("FP"), _fifo(env.tmp / "pipe", GOOD)),
        check=stored("FP", 2),
    ),
    # -- issue 38: streamed input honours --on-error as a regular file does ----------------
    Case(
        "stdin-malformed-line-skipped",
        publish("SMK", "smk.x", *ID, "--on-error", "skip", file="-"),
        OK,
        "line 2: invalid JSON",
        setup=given("SMK", ""),
        stdin=BAD_SECOND,
        check=stored_ids("SMK", "a", "c"),
        subprocess=True,
    ),
    Case(
        "stdin-malformed-line-stops",
        publish("SMS", "sms.x", *ID, file="-"),
        FAILED,
        "line 2: invalid JSON",
        setup=given("SMS", ""),
        stdin=BAD_SECOND,
        check=stored_ids("SMS", "a"),
        subprocess=True,
    ),
    Case(
        # /dev/stdin of a process fed by a pipe: a FILE that is a pipe, like <(zcat f.gz)
        "pipe-malformed-line-skipped",
        publish("PMK", "pmk.x", *ID, "--on-error", "skip", file="/dev/stdin"),
        OK,
        "line 2: invalid JSON",
        setup=given("PMK", ""),
        stdin=BAD_SECOND,
        check=stored_ids("PMK", "a", "c"),
        subprocess=True,
    ),
    Case(
        "fifo-malformed-line-skipped",
        publish("FMK", "fmk.x", *ID, "--on-error", "skip", file="{tmp}/pipe"),
        OK,
        "line 2: invalid JSON",
        setup=lambda env: (env.stream("FMK"), _fifo(env.tmp / "pipe", BAD_SECOND)),
        check=stored_ids("FMK", "a", "c"),
    ),
    # -- issue 19: input that changes or has no identity ---------------------------------
    Case(
        "file-grows-while-publishing",
        publish("GROW", "grow.x", *ID),
        OK,
        "while it was published; this run read only the",
        setup=_growing("GROW", 20_000),
        check=_snapshot_published("GROW"),
    ),
    Case(
        # Issue 48: it said "fix line 19,995"; the line was torn by the rewrite.
        "file-rewritten-in-place-while-publishing",
        publish("REWR", "rewr.x", *ID, "--rate", "4000"),
        FAILED,
        "was rewritten while it was published (",
        setup=given("REWR", lines(*({"id": n, "v": 1} for n in range(20_000)))),
        during=_rewrite_in_place_mid_run("REWR"),
        check=_torn_not_duplicated("REWR"),
        subprocess=True,
        timeout=60,
    ),
    Case(
        "fifo-without-a-writer-yet",
        publish("FW", "fw.x", *ID, file="{tmp}/pipe"),
        OK,
        "stored 2",
        setup=lambda env: (env.stream("FW"), os.mkfifo(env.tmp / "pipe")),
        during=_write_fifo_once_waiting,
        check=stored("FW", 2),
        subprocess=True,
        timeout=30,
    ),
    Case(
        "resume-on-stdin",
        publish("RSI", "rsi.x", *ID, "--resume", file="-"),
        CONFIG,
        "--resume needs a regular FILE: stdin ('-') has no stable identity",
        setup=given("RSI", ""),
        stdin=GOOD,
        check=stored("RSI", 0),
    ),
    Case(
        "fresh-on-a-pipe",
        publish("FRP", "frp.x", *ID, "--fresh", file="{tmp}/pipe"),
        CONFIG,
        "--fresh needs a regular FILE: '{tmp}/pipe', which is not a regular file, has no stable",
        setup=lambda env: (env.stream("FRP"), os.mkfifo(env.tmp / "pipe")),
        check=stored("FRP", 0),
    ),
    # -- CSV ----------------------------------------------------------------------------
    Case(
        "csv-utf8-bom",
        publish("CBOM", "cbom.{region}", *ID, file="{tmp}/in.csv"),
        OK,
        "stored 2",
        setup=given("CBOM", b"\xef\xbb\xbfid,region\n1,eu\n2,us\n", name="in.csv"),
        check=stored("CBOM", 2),
    ),
    Case(
        "csv-without-id-column",
        publish("CNOID", "cnoid.x", *ID, "--on-error", "skip", file="{tmp}/in.csv"),
        CONFIG,
        "the CSV header has no column 'id' (--id-field); it has: region, amount",
        setup=given("CNOID", "region,amount\neu,1\n", name="in.csv"),
        check=stored("CNOID", 0),
    ),
    Case(
        "csv-without-subject-column",
        publish("CNOS", "cnos.{region}", *ID, file="{tmp}/in.csv"),
        CONFIG,
        "no column 'region' (--subject)",
        setup=given("CNOS", "id,amount\n1,1\n", name="in.csv"),
        check=stored("CNOS", 0),
    ),
    Case(
        "csv-format-forced-on-jsonl",
        publish("CFJ", "cfj.x", *ID, "--format", "csv"),
        CONFIG,
        "no column 'id'",
        setup=given("CFJ", GOOD),
        check=stored("CFJ", 0),
    ),
    Case(
        "csv-duplicate-header",
        publish("CDH", "cdh.x", *ID, file="{tmp}/in.csv"),
        CONFIG,
        "unique, non-empty column names",
        setup=given("CDH", "id,id\n1,2\n", name="in.csv"),
        check=stored("CDH", 0),
    ),
    # -- records ------------------------------------------------------------------------
    Case(
        "skip-stored-nothing",
        publish("SKN", "skn.x", *ID, "--on-error", "skip"),
        FAILED,
        "every record was malformed",
        setup=given("SKN", lines("{bad", "[1]", {"no": "id"})),
        check=stored("SKN", 0),
    ),
    Case(
        "jsonl-not-utf8",
        publish("NU", "nu.x", *ID),
        FAILED,
        "line 1: not UTF-8",
        setup=given("NU", b'{"id": "\xff\xfe"}\n'),
        check=stored("NU", 0),
    ),
    Case(
        "jsonl-not-object",
        publish("NO", "no.x", *ID),
        FAILED,
        "expected a JSON object",
        setup=given("NO", lines("[1, 2]")),
        check=stored("NO", 0),
    ),
    *(
        Case(
            f"id-{name}",
            publish("IDS", "ids.x", *ID),
            FAILED,
            fragment,
            setup=given("IDS", lines(record)),
            check=stored("IDS", 0),
        )
        for name, record, fragment in (
            ("null", {"id": None}, "id field 'id' is missing or null"),
            ("absent", {"x": 1}, "id field 'id' is missing or null"),
            ("object", {"id": {"a": 1}}, "must be a string or an integer, got dict"),
            ("bool", {"id": True}, "must be a string or an integer, got bool"),
            ("float", {"id": 1.5}, "must be a string or an integer, got float 1.5"),
        )
    ),
    # Ids the server (or a client library reading them) would read as another id:
    # refused with exit 2, never stored, never merged with another record's id.
    *(
        Case(
            f"id-refused-{name}",
            publish(f"IDR{i}", f"idr{i}.x", *ID),
            CONFIG,
            fragment,
            setup=given(f"IDR{i}", lines(record)),
            check=stored(f"IDR{i}", 0),
        )
        for i, (name, record, fragment) in enumerate(
            (
                ("empty", {"id": ""}, "is empty or only whitespace"),
                ("blank", {"id": " "}, "is empty or only whitespace"),
                ("line-break", {"id": "a\nb"}, "contains the control character '\\n'"),
                ("carriage-return", {"id": "a\rb"}, "contains the control character '\\r'"),
                ("nul", {"id": "a\u0000b"}, "contains the control character '\\x00'"),
                ("tab-inside", {"id": "a\tb"}, "contains the control character '\\t'"),
                ("leading-space", {"id": " a"}, "starts with whitespace"),
                ("trailing-space", {"id": "a "}, "ends with whitespace"),
                ("leading-nbsp", {"id": "\u00a0a"}, "starts with whitespace"),
                ("trailing-ideographic-space", {"id": "a\u3000"}, "ends with whitespace"),
            )
        )
    ),
    Case(
        # " a" would be stored by the server as "a": a duplicate of line 1, i.e. lost.
        "id-refused-would-merge",
        publish("IDM", "idm.x", *ID),
        CONFIG,
        "line 2: id field 'id': ' a' starts with whitespace",
        setup=given("IDM", lines({"id": "a", "n": 1}, {"id": " a", "n": 2})),
        check=stored("IDM", 1),
    ),
    Case(
        "id-refused-skipped-on-request",
        publish("IDK", "idk.x", *ID, "--on-error", "skip"),
        OK,
        "line 2: id field 'id': 'b ' ends with whitespace",
        setup=given("IDK", lines({"id": "a"}, {"id": "b "}, {"id": "c"})),
        check=stored("IDK", 2),
    ),
    Case(
        # orjson reads integers beyond 64 bits as floats: two ids would round alike.
        "id-integers-beyond-64-bits",
        publish("IDB", "idb.x", *ID),
        OK,
        "",
        setup=given(
            "IDB",
            '{"id": 123456789012345678901234567890}\n{"id": 123456789012345678901234567891}\n',
        ),
        check=stored_ids("IDB", "123456789012345678901234567890", "123456789012345678901234567891"),
    ),
    Case(
        "content-id-integers-beyond-64-bits",
        publish("IDH", "idh.x", "--id-from-content"),
        OK,
        "",
        setup=given(
            "IDH", '{"n": 123456789012345678901234567890}\n{"n": 123456789012345678901234567891}\n'
        ),
        check=stored("IDH", 2),
    ),
    Case(
        "template-field-missing",
        publish("TFM", "tfm.{region}", *ID),
        FAILED,
        "line 2: field 'region' (used by --subject) is missing",
        setup=given("TFM", lines({"id": "a", "region": "eu"}, {"id": "b"})),
        check=stored("TFM", 1),
    ),
    Case(
        "template-field-object",
        publish("TFO", "tfo.{region}", *ID),
        FAILED,
        "is a dict, not a string or number",
        setup=given("TFO", lines({"id": "a", "region": {"x": 1}})),
        check=stored("TFO", 0),
    ),
    Case(
        "line-over-max-payload",
        publish("BIG", "big.x", *ID, "--on-error", "skip"),
        OK,
        "above the server's max_payload",
        setup=given("BIG", lines({"id": "huge", "pad": "x" * 1_100_000}, {"id": "small"})),
        check=stored("BIG", 1),
    ),
    # -- flags --------------------------------------------------------------------------
    Case(
        "id-field-and-content",
        publish("IFC", "ifc.x", *ID, "--id-from-content"),
        CONFIG,
        "not both",
        setup=given("IFC", GOOD),
        check=stored("IFC", 0),
    ),
    Case(
        "no-id-option",
        publish("NID", "nid.x"),
        CONFIG,
        "exactly one of --id-field",
        setup=given("NID", GOOD),
    ),
    Case(
        "id-field-empty",
        publish("IFE", "ife.x", "--id-field", ""),
        CONFIG,
        "--id-field must name a record field",
        setup=given("IFE", GOOD),
    ),
    Case(
        "fresh-and-no-resume",
        publish("FNR", "fnr.x", *ID, "--fresh", "--no-resume"),
        CONFIG,
        "contradict",
        setup=given("FNR", GOOD),
    ),
    Case(
        "max-inflight-zero",
        publish("MIZ", "miz.x", *ID, "--max-inflight", "0"),
        CONFIG,
        "max_inflight",
        setup=given("MIZ", GOOD),
    ),
    Case(
        "ack-timeout-bad",
        publish("ATB", "atb.x", *ID, "--ack-timeout", "soon"),
        CONFIG,
        "--ack-timeout must be a duration",
        setup=given("ATB", GOOD),
    ),
    Case(
        "nkey-seed-missing-file",
        [*publish("NKS", "nks.x", *ID), "--nkey-seed", "/missing"],
        CONFIG,
        "--nkey-seed '/missing' is neither",
        setup=given("NKS", GOOD),
    ),
    Case(
        "nkey-seed-garbage-not-echoed",
        [*publish("NKG", "nkg.x", *ID), "--nkey-seed", "SUnotaseed"],
        CONFIG,
        "--nkey-seed is neither",
        absent=("SUnotaseed",),
        setup=given("NKG", GOOD),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: getattr(c, "id", None))
def test_bad_publish_input(case: Case, cli_env: CliEnv) -> None:
    run_case(case, cli_env)


def test_rows_have_unique_ids() -> None:
    ids = [c.values[0].id if hasattr(c, "values") else c.id for c in CASES]
    assert len(ids) == len(set(ids))
