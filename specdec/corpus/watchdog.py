"""Ray's processes end with the run that started them, however the run ends.

`ray.init()` without an address starts a local Ray (its GCS, raylet, agents, workers) as the driver's
descendants. A driver that exits stops them (`ray.shutdown`), and on Linux the ones it started itself die
with it, but a driver killed outright (`kill -9`, the out-of-memory killer) leaves the raylet's own
children (its dashboard and runtime-env agents, idle workers) running with no one to stop them. So a
driver that starts Ray starts this watchdog first: a separate, stdlib-only process (run as a script, in a
session of its own so that a Ctrl-C of the run does not end it first) that notes every process descending
from the driver while the driver lives, and kills those still running once it is gone. A process is known
by its id and start time, so an id reused after it exited is never killed.

Linux only (it reads /proc); elsewhere it does nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

POLL_SECONDS = 0.5  # how often the driver's descendants are noted (a worker started between two looks
# and missed is the raylet's child, and exits when it finds the raylet gone)
PROC = Path("/proc")


def start(driver: int | None = None) -> subprocess.Popen | None:
    """The watchdog of `driver` (default: this process), running; None where there is no /proc."""
    if not PROC.is_dir():
        return None
    return subprocess.Popen(
        [sys.executable, __file__, str(driver or os.getpid())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def watch(driver: int, poll_seconds: float = POLL_SECONDS) -> list[int]:
    """Note the driver's descendants until it is gone, then kill the ones still running; their ids."""
    seen: dict[int, int] = {}
    driver_start = start_time(driver)
    while driver_start is not None and start_time(driver) == driver_start:
        seen.update(descendants(driver))
        time.sleep(poll_seconds)
    killed = []
    for pid, started in seen.items():
        if pid != os.getpid() and start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def descendants(root: int) -> dict[int, int]:
    """Every process descending from root (not root itself): id -> start time."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parent, started = stat
            children.setdefault(parent, []).append(int(entry.name))
            starts[int(entry.name)] = started
    found: dict[int, int] = {}
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        if pid not in found and pid in starts:
            found[pid] = starts[pid]
            stack += children.get(pid, [])
    return found


def start_time(pid: int) -> int | None:
    """A process's start time (clock ticks after boot), None once it is gone (a zombie counts as gone)."""
    stat = _stat(pid)
    return None if stat is None else stat[1]


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent id, start time) from /proc/<pid>/stat; None for a process gone or a zombie."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (name) ": the name may hold spaces
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[19])


if __name__ == "__main__":
    watch(int(sys.argv[1]))
