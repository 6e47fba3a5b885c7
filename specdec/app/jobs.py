"""How the app runs model work: one piece at a time on the models, and nothing left running when nobody
waits for it.

- All model work (a Compare or Transcribe job, a Live update) holds the store's `work_lock`, so a
  Compare run's timings are never shared with other decoding.
- Jobs take the models in order of arrival, waiting on the event loop (not in a thread), so a job
  cancelled while it waits leaves the line at once. The page's jobs arrive through Gradio's queue; the
  OpenAI-compatible endpoint's (`app.openai_api`) arrive directly and pass a `limit`: a line already that
  long refuses them (`QueueFull`).
- A job runs in a worker thread inside a cancellation scope (`specdec.engine.cancel`). When Gradio
  cancels the job (the client's cancel), or an API client disconnects, the decoding is told to stop and
  the handler waits until it has (one target pass at most) before it lets go, so the models are never
  handed to the next job while they are still busy. A page that goes away (Gradio's unload) stops its
  session's jobs the same way.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import TypeVar

from specdec.app.store import ModelStore, UserError
from specdec.engine.cancel import Cancelled, cancellable

Result = TypeVar("Result")


class QueueFull(UserError):
    """Too many jobs already wait for the models (or use them); the caller may try again later."""


class Jobs:
    """The jobs by browser session (waiting for the models or using them), each with the event that
    stops it."""

    def __init__(self, store: ModelStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._stops: dict[str | None, set[threading.Event]] = defaultdict(set)
        self._turn = asyncio.Lock()  # FIFO: the jobs' order of arrival (bound to the server's event loop)

    async def run(
        self, session: str | None, work: Callable[..., Result], *args, limit: int | None = None
    ) -> Result:
        """work(*args) in a worker thread under the models' lock, after the jobs that came before it;
        stopped if this handler is cancelled. With a limit, QueueFull if that many jobs are already in."""
        stop = threading.Event()
        with self._lock:
            if limit is not None and self._count() >= limit:
                raise QueueFull(f"The queue is full ({limit} jobs waiting or running); try again later.")
            self._stops[session].add(stop)
        try:
            async with self._turn:
                return await self._in_thread(stop, work, *args)
        except Cancelled:
            raise UserError("Stopped: the page that asked for this left.") from None
        finally:
            with self._lock:
                self._stops[session].discard(stop)
                if not self._stops[session]:
                    del self._stops[session]  # (running() counts until here: the thread has ended)

    def stop_session(self, session: str | None) -> int:
        """Stop every job of a browser session (its page was closed); returns how many were running."""
        with self._lock:
            stops = set(self._stops.get(session, ()))  # each leaves the table when its job has ended
        for stop in stops:
            stop.set()
        return len(stops)

    def running(self) -> int:
        """Jobs waiting for the models or using them."""
        with self._lock:
            return self._count()

    def _count(self) -> int:
        return sum(len(stops) for stops in self._stops.values())

    async def _in_thread(self, stop: threading.Event, work: Callable[..., Result], *args) -> Result:
        task = asyncio.ensure_future(asyncio.to_thread(self._locked, stop, work, *args))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.wait([task])  # hold the models until the decoding has stopped
            if not task.cancelled():
                task.exception()  # retrieved (Cancelled, as asked), so asyncio does not log it
            raise

    def _locked(self, stop: threading.Event, work: Callable[..., Result], *args) -> Result:
        with cancellable(stop), self.store.work_lock:
            if stop.is_set():  # stopped while it waited for its turn or the lock
                raise Cancelled("the job was stopped before it started")
            return work(*args)
