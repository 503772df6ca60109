"""A writer's query scope, pickled: what a copy must read again in the process it runs in."""

from __future__ import annotations

import pickle

from oncestream.spark._query_scope import QueryScope


def test_the_id_read_from_the_checkpoint_is_not_pickled() -> None:
    scope = QueryScope(owner="t", checkpoint_location="/chk/a")
    scope._checkpoint_id = "an id read by a direct call on the client"
    copy = pickle.loads(pickle.dumps(scope))
    assert copy._checkpoint_id is None and copy.checkpoint_location == "/chk/a"
