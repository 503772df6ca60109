"""The process-level claims that make two writers of one query into one target fail."""

from __future__ import annotations

from oncestream.spark._batch_claims import claim_batch, claimed_by_another, config_token


def test_a_writer_configured_otherwise_meets_the_claim_of_its_run() -> None:
    ins, upd = config_token("events", "append"), config_token("events", "upsert", ("id",))
    target = ("test", "events", "query-1")
    assert not claimed_by_another(target, 0, upd, "run-1")  # nothing written yet
    claim_batch(target, 0, ins, "run-1")
    assert claimed_by_another(target, 0, upd, "run-1")
    assert not claimed_by_another(target, 0, ins, "run-1")  # the same configuration: a replay
    assert not claimed_by_another(target, 1, upd, "run-1")  # another batch
    assert not claimed_by_another(("test", "events", "query-2"), 0, upd, "run-1")
    # A restart (another run) may come with a writer configured otherwise (renamed).
    assert not claimed_by_another(target, 0, upd, "run-2")
    claim_batch(target, 0, upd, "run-2")
    assert claimed_by_another(target, 0, ins, "run-2")


def test_claims_are_bounded_per_target() -> None:
    target, first, second = ("test", "bounded"), config_token(1), config_token(2)
    for batch_id in range(100):
        claim_batch(target, batch_id, first, None)
    assert not claimed_by_another(target, 0, second, None)  # long forgotten
    assert claimed_by_another(target, 99, second, None)


def test_a_second_write_of_one_batch_in_one_query_run_is_refused_too() -> None:
    """Inside a streaming query the same writer called twice for a batch (two DataFrames
    into one table) is refused; outside one (a direct call) it is a replay, skipped."""
    target, token = ("test", "twice", "query-1"), config_token("ins")
    claim_batch(target, 0, token, "run-1")
    assert claimed_by_another(target, 0, token, "run-1", in_query=True)
    assert not claimed_by_another(target, 0, token, "run-1")  # a direct call's re-run
    assert not claimed_by_another(target, 0, token, "run-2", in_query=True)  # a restart


def test_take_checks_and_claims_in_one_step_and_a_failed_write_gives_it_back() -> None:
    from oncestream.spark._batch_claims import release_batch, take_batch

    target = ("t", "take-release")
    assert take_batch(target, 0, "a", "run")
    assert not take_batch(target, 0, "b", "run")  # the claim was taken when checked
    assert not take_batch(target, 0, "a", "run", in_query=True)  # one writer, twice
    release_batch(target, 0, "b", "run")  # not b's: kept
    assert not take_batch(target, 0, "b", "run")
    release_batch(target, 0, "a", "run")  # a's write failed: the batch is free again
    assert take_batch(target, 0, "b", "run")


def test_of_writers_racing_for_one_batch_exactly_one_takes_it() -> None:
    import threading

    from oncestream.spark._batch_claims import take_batch

    start, won = threading.Barrier(8), []

    def race(token: str) -> None:
        start.wait()
        if take_batch(("t", "race"), 0, token, "run"):
            won.append(token)

    threads = [threading.Thread(target=race, args=(f"w{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(won) == 1, won
