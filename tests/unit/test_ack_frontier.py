"""AckFrontier: what one ack may cover on a consumer with ack policy ``all`` (pure logic).

The server side it models (nats-server consumer.go): an ack of stream sequence N
acks every pending message up to N; an ack or a nak whose delivery sequence is at
or below the ack floor's is ignored. The integration tests run it against a server.
"""

from __future__ import annotations

from oncestream import Message
from oncestream.process._ackfrontier import AckFrontier


def delivery(seq: int, dseq: int, delivered: int = 1) -> Message:
    """A message as consumer C of stream S delivers it (stream seq, delivery seq)."""
    return Message("s.x", f"$JS.ACK.S.C.{delivered}.{seq}.{dseq}.1700000000000000000.0", b"", None)


def covered(reply: str | None) -> int | None:
    """The stream sequence an ack of ``reply`` covers up to."""
    return None if reply is None else int(reply.split(".")[5])


def test_a_batch_without_failures_is_one_ack_of_its_last_message() -> None:
    frontier = AckFrontier()
    batch = [delivery(s, s) for s in range(1, 101)]
    assert frontier.delivered(batch)
    assert covered(frontier.settle(batch, [])) == 100
    nxt = [delivery(s, s) for s in range(101, 151)]
    assert frontier.delivered(nxt)
    assert covered(frontier.settle(nxt, [])) == 150


def test_a_gap_in_the_delivery_sequence_is_reported() -> None:
    frontier = AckFrontier()
    assert frontier.delivered([delivery(1, 1), delivery(2, 2)])
    assert not frontier.delivered([delivery(5, 5), delivery(6, 6)])
    assert "deliveries 3..4 did not reach this Processor" in frontier.gap
    assert not frontier.delivered([delivery(7, 7)])  # stays broken until restarted
    frontier.restart()
    assert frontier.delivered([delivery(3, 1)])


def test_a_gap_inside_a_batch_is_found() -> None:
    frontier = AckFrontier()
    assert not frontier.delivered([delivery(1, 1), delivery(2, 2), delivery(4, 4)])
    assert "deliveries 3..3" in frontier.gap


def test_a_delivery_sequence_going_back_is_a_reset_by_someone_else() -> None:
    frontier = AckFrontier()
    assert frontier.delivered([delivery(s, s) for s in range(1, 11)])
    assert not frontier.delivered([delivery(4, 1)])
    assert "went back from 11 to 1" in frontier.gap


def test_a_failed_message_holds_the_ack_below_it_until_it_is_finished() -> None:
    frontier = AckFrontier()
    batch = [delivery(s, s) for s in range(1, 11)]
    failing = batch[4]  # seq 5
    assert frontier.delivered(batch)
    ok = [m for m in batch if m is not failing]
    assert covered(frontier.settle(ok, [failing])) == 4
    # The next batch: finished, but nothing may be acked past seq 5.
    more = [delivery(s, s) for s in range(11, 21)]
    assert frontier.delivered(more)
    assert frontier.settle(more, []) is None
    assert frontier.held_since > 0
    assert len(frontier.held_replies()) == 15
    # Seq 5 redelivered (delivery 21) and applied: everything up to 20 in one ack.
    again = delivery(5, 21, delivered=2)
    assert frontier.delivered([again])
    assert covered(frontier.settle([again], [])) == 20
    assert frontier.held == {} and frontier.open == {} and frontier.held_since == 0.0


def test_no_ack_whose_delivery_sequence_would_make_the_server_ignore_a_later_nak() -> None:
    # 5 and 6 fail; 5 comes back (delivery 11) and is applied while 6 still waits.
    # Acking 5 through delivery 11 would move the server's delivery floor to 11:
    # 6's next nak (delivery 6) and the ack of 7..10 (deliveries 7..10) would be ignored.
    frontier = AckFrontier()
    batch = [delivery(s, s) for s in range(1, 11)]
    assert frontier.delivered(batch)
    failed = [batch[4], batch[5]]
    assert covered(frontier.settle([m for m in batch if m not in failed], failed)) == 4
    five = delivery(5, 11, delivered=2)
    assert frontier.delivered([five])
    assert frontier.settle([five], []) is None
    six = delivery(6, 12, delivered=2)
    assert frontier.delivered([six])
    # Everything up to 10 is finished; 10's delivery (10) is below every tracked one above.
    assert covered(frontier.settle([six], [])) == 10


def test_a_failure_again_keeps_holding() -> None:
    frontier = AckFrontier()
    batch = [delivery(s, s) for s in range(1, 4)]
    assert frontier.delivered(batch)
    assert covered(frontier.settle([batch[0], batch[2]], [batch[1]])) == 1
    again = delivery(2, 4, delivered=2)
    assert frontier.delivered([again])
    assert frontier.settle([], [again]) is None
    third = delivery(2, 5, delivered=3)
    assert frontier.delivered([third])
    assert covered(frontier.settle([third], [])) == 3


def test_a_message_the_server_stopped_delivering_and_that_was_settled_frees_the_frontier() -> None:
    frontier = AckFrontier()
    batch = [delivery(s, s) for s in range(1, 6)]
    assert frontier.delivered(batch)
    assert covered(frontier.settle([batch[0], batch[1], batch[3], batch[4]], [batch[2]])) == 2
    assert frontier.dropped(99) is None  # not one it waits for
    assert covered(frontier.dropped(3)) == 5


def test_a_duplicate_delivery_in_the_held_set_keeps_its_latest_delivery() -> None:
    frontier = AckFrontier()
    batch = [delivery(s, s) for s in range(1, 4)]
    assert frontier.delivered(batch)
    assert covered(frontier.settle([batch[0], batch[2]], [batch[1]])) == 1
    # 3 delivered again (its ack wait ran out) before 2 came back: held with delivery 4.
    three = delivery(3, 4, delivered=2)
    assert frontier.delivered([three])
    assert frontier.settle([three], []) is None
    assert frontier.held[3][0] == 4
    two = delivery(2, 5, delivered=2)
    assert frontier.delivered([two])
    assert covered(frontier.settle([two], [])) == 3
