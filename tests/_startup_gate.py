"""A handler module that holds ``oncestream process`` inside its start-up while it is imported.

Importing it writes ``gate: importing the handler`` on stderr, then waits until the
test opens the FIFO named by ``ONCESTREAM_TEST_GATE`` for writing and closes it: the
test signals the process at that moment (before it has connected), then lets it go on.
"""

from __future__ import annotations

import os
import sys

from tests.handlers import record

#: What the module writes on stderr when it starts waiting.
READY = "gate: importing the handler"

sys.stderr.write(READY + "\n")
sys.stderr.flush()
with open(os.environ["ONCESTREAM_TEST_GATE"], "rb") as _gate:
    _gate.read()

handle = record
