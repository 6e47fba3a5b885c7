"""The driver's stderr during a corpus run, less one line of Ray's that tells a corpus user nothing.

Ray Data passes object refs of its own to the constructor of every actor in a pool, and Ray's core
worker (C++) then logs at error level, once per process, that an actor with restarts has constructor
arguments in the object store, which a restart could miss if they were lost. Ray Data holds those refs
for the whole run, so a restarted actor starts (the corpus tests kill one), and nothing in the command
could change it. Ray has no setting for this line alone: its C++ log level (RAY_BACKEND_LOG_LEVEL)
would silence every error it logs. So the line is dropped from file descriptor 2 while the pipeline
runs, every other byte goes through, and Ray's driver log file in its session folder still has it.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

RAY_DATA_ACTOR_NOTICE = b"has constructor arguments in the object store and max_restarts > 0"
QUIET_SECONDS = 0.1  # a partial line waits this long for the rest of it before it goes out as it is


@contextlib.contextmanager
def stderr_without(*notices: bytes) -> Iterator[TextIO]:
    """For the block, file descriptor 2 (where C and C++ code write too) goes through a pipe: a line that
    holds one of notices is dropped, everything else is forwarded as it comes. Yields a text stream on
    the real stderr, for output that asks whether it is a terminal (a progress bar)."""
    sys.stderr.flush()
    try:
        real = os.dup(2)
    except OSError:  # no stderr at all: nothing to filter
        yield sys.stderr
        return
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)
    stop = threading.Event()
    forwarder = threading.Thread(target=_forward, args=(read_end, real, notices, stop), daemon=True)
    forwarder.start()
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    terminal = open(os.dup(real), "w", buffering=1, encoding=encoding, errors="backslashreplace")  # noqa: SIM115
    try:
        yield terminal
    finally:
        terminal.close()
        sys.stderr.flush()
        os.dup2(real, 2)  # the pipe's last writer closes: the forwarder drains what is left and stops
        stop.set()
        forwarder.join()
        os.close(read_end)
        os.close(real)


def _forward(read_end: int, real: int, notices: tuple[bytes, ...], stop: threading.Event) -> None:
    """Copy the pipe to the real stderr line by line, without the lines that hold a notice; stop at the
    end of the pipe, or once stopped with nothing left to read (a child process may hold the pipe)."""
    pending = b""
    while True:
        ready = select.select([read_end], [], [], QUIET_SECONDS)[0]
        chunk = os.read(read_end, 1 << 16) if ready else b""
        pending += chunk
        # whole lines now; a partial line only once the pipe has been quiet for a moment, or at the end
        end = pending.rfind(b"\n") + 1 if chunk else len(pending)
        lines = pending[:end].splitlines(keepends=True)
        _write_all(real, b"".join(line for line in lines if not any(notice in line for notice in notices)))
        pending = pending[end:]
        if (ready and not chunk) or (stop.is_set() and not ready):
            return


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # a closed stderr: the bytes go nowhere, as they would have
        while data:
            data = data[os.write(fd, data) :]
