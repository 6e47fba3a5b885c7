"""Stopping a decoding from outside: a cancelled decoding ends at its next target pass or window.

A caller that may abandon work (the web app, when a job is cancelled or its page goes away) runs the
decoding inside `cancellable(event)`; the loop calls `check()` before every target pass and every
window, and raises `Cancelled` once the event is set. The scope is a context variable, so it follows
the decoding into the thread it runs in (`asyncio.to_thread` copies the context) without a parameter
through every layer. Outside a scope `check()` only counts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_EVENT: ContextVar[threading.Event | None] = ContextVar("specdec_cancel_event", default=None)
_checks = 0  # every check, in every thread: a decode-step counter for monitoring
_checks_lock = threading.Lock()


class Cancelled(Exception):
    """The decoding was cancelled before it finished; it returns nothing."""


@contextmanager
def cancellable(event: threading.Event) -> Iterator[threading.Event]:
    """Decodings started inside this block stop (raising `Cancelled`) once `event` is set."""
    token = _EVENT.set(event)
    try:
        yield event
    finally:
        _EVENT.reset(token)


def check() -> None:
    """Raise `Cancelled` if the current scope's event is set (called between passes and windows)."""
    global _checks
    with _checks_lock:
        _checks += 1
    event = _EVENT.get()
    if event is not None and event.is_set():
        raise Cancelled("the decoding was cancelled")


def checks() -> int:
    """How many times any decoding has reached a pass or window boundary in this process."""
    return _checks
