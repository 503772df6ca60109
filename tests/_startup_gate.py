"""A handler module that holds ``oncestream process`` inside its start-up while it is imported.

Importing it connects to the test's socket on 127.0.0.1 (port ``ONCESTREAM_TEST_GATE``),
writes ``gate: importing the handler`` on stderr and waits until the test closes its end:
the test signals the process at that moment (before it has connected to NATS), then lets
it go on. A socket, not a FIFO: a read interrupted by the signal is resumed (PEP 475) and
still sees the close, whenever it came.
"""

from __future__ import annotations

import os
import socket
import sys

from tests.handlers import record

with socket.create_connection(("127.0.0.1", int(os.environ["ONCESTREAM_TEST_GATE"]))) as _gate:
    sys.stderr.write("gate: importing the handler\n")
    sys.stderr.flush()
    _gate.recv(1)

handle = record
