"""How the app runs model work: one piece at a time on the models, in fair turns, from one bounded line,
and nothing left running when nobody waits for it.

- All model work (a Compare or Transcribe job, an API request, a Live update) holds the store's
  `work_lock`, so a Compare run's timings are never shared with other decoding.
- Jobs come in by two doors, the page (its Gradio API, which the browser and `gradio_client` both use)
  and the OpenAI-compatible API (`app.openai_api`), and wait in one line. When the models come free the
  turn goes to the door served longest ago, within it to the caller (a browser session, an API client)
  served longest ago, and within a caller to its oldest job. A pile of jobs from one caller or one door
  therefore costs the others one turn each, never a place behind the whole pile.
- The line is bounded: with `limit` jobs waiting or running, the next one is refused (`QueueFull`, the
  same message at both doors), and one door fills at most three quarters of it, so the other always
  finds room.
- Jobs wait on the event loop (not in a thread), so a job cancelled while it waits leaves the line at
  once. A job runs in a worker thread inside a cancellation scope (`specdec.engine.cancel`): when it is
  cancelled (the client's cancel, narrowed to its one job by `app.cancel_one`; an API client that
  disconnects) the decoding is told to stop and the handler waits until it has (one target pass at
  most) before the models go to the next job. A page that goes away (Gradio's unload) stops its
  session's jobs the same way.
- Every job runs on one thread, `MODEL_THREAD` (the server loads its models there too): torch's OpenMP
  keeps a pool of helper threads per calling thread, and once a process holds more of them than it has
  cores, GNU OpenMP stops letting them spin between operators, as passive waiting does (docs/app.md
  has what that costs). Live updates run here too (`app.live.Listener`).
- After each job the memory its decoding freed goes back to the system (`release_freed_memory`).
- Transcriptions share the models' passes (`batched`): such a job counts in the line (QueueFull alike)
  but takes no turn; once its pair is loaded and its audio read (a short task on `MODEL_THREAD`), its
  decoding joins the pair's running batch (`specdec.scheduler`, whose steps run on `MODEL_THREAD` one
  at a time, so a Compare run or a Live update runs between two steps, its timings its own). A
  cancelled job leaves the batch at its next step.
"""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

from specdec.app.store import ModelStore, UserError
from specdec.engine.cancel import Cancelled, cancellable
from specdec.scheduler import Scheduler

Result = TypeVar("Result")
PAGE, API = "page", "api"  # the doors
MODEL_THREAD = ThreadPoolExecutor(1, thread_name_prefix="specdec-models")  # all model work, in turn
DOOR_NAMES = {PAGE: "the page", API: "the API"}


class QueueFull(UserError):
    """Too many jobs already wait for the models (or use them); the caller may try again later."""


@dataclass(frozen=True)
class Caller:
    """Who asked: the door and, behind it, the browser session or API client taking turns."""

    door: str  # PAGE or API
    name: str | None  # the page's session hash, or the API client's address


@dataclass(eq=False)
class _Ticket:
    """One job's place in the line."""

    caller: Caller
    batched: bool = False  # shares the batch: never takes a turn (`Jobs.batched`)
    stop: threading.Event = field(default_factory=threading.Event)
    ahead: int = 0  # jobs that will use the models before this one, if no other arrives
    news: asyncio.Future | None = None  # resolved when the line moves (the turn, the position, a stop)


class Jobs:
    """The line for the models: jobs waiting or running, each with the event that stops it."""

    def __init__(self, store: ModelStore, limit: int) -> None:
        self.store = store
        self.limit = limit
        self._lock = threading.Lock()  # the tickets are read from other threads (unload, monitoring)
        self._tickets: list[_Ticket] = []  # in order of arrival
        self._running: _Ticket | None = None  # holds the models
        self._clock = 0  # counts arrivals and turns: the stamps below are readings of it
        self._door_served: dict[str, int] = {}  # each door's last turn
        self._caller_since: dict[Caller, int] = {}  # each present caller's last turn, or its arrival
        self._loop: asyncio.AbstractEventLoop | None = None
        self._schedulers: dict[int, Scheduler] = {}  # per loaded pair (id of its SpeculativeWhisper)

    async def run(
        self, caller: Caller, work: Callable[..., Result], *args, waiting: Callable[[int], None] | None = None
    ) -> Result:
        """work(*args) in a worker thread under the models' lock, when its turn comes; stopped if this
        handler is cancelled. QueueFull if the line (or the caller's door's share of it) is full;
        `waiting(ahead)` is told how many jobs will go first, whenever that changes."""
        self._loop = asyncio.get_running_loop()
        ticket = _Ticket(caller)
        self._admit(ticket)
        try:
            self._hand_on()
            await self._turn(ticket, waiting)
            return await self._in_thread(ticket.stop, work, *args)
        except Cancelled:
            raise UserError("Stopped: the page that asked for this left.") from None
        finally:
            with self._lock:
                self._tickets.remove(ticket)
                if self._running is ticket:  # (running() counts until here: the thread has ended)
                    self._running = None
                if not any(other.caller == caller for other in self._tickets):
                    del self._caller_since[caller]
            self._hand_on()

    async def batched(self, caller: Caller, submit: Callable[..., Future], *args) -> Result:
        """A decoding that joins the running batch: submit(self.scheduler, stop, *args), called on the
        models' thread under their lock, loads and reads what it needs, hands its decoding to a scheduler
        and returns the future of its result, awaited here. QueueFull if the line is full; stopped (at
        the batch's next step) if this handler is cancelled."""
        self._loop = asyncio.get_running_loop()
        ticket = _Ticket(caller, batched=True)
        self._admit(ticket)
        try:
            self._hand_on()  # tells the waiting their place (this one takes none)
            submitted = await self._in_thread(ticket.stop, submit, self.scheduler, ticket.stop, *args)
            result = asyncio.wrap_future(submitted)
            try:
                return await asyncio.shield(result)
            except asyncio.CancelledError:
                ticket.stop.set()
                await asyncio.wait([result])  # it has left the batch
                raise
        except Cancelled:
            raise UserError("Stopped: the page that asked for this left.") from None
        finally:
            with self._lock:
                self._tickets.remove(ticket)
                if not any(other.caller == caller for other in self._tickets):
                    self._caller_since.pop(caller, None)
            self._hand_on()

    def scheduler(self, whisper) -> Scheduler:
        """The batch of a loaded pair (`specdec.scheduler`), run on MODEL_THREAD under the models' lock."""
        if id(whisper) not in self._schedulers:
            self._schedulers[id(whisper)] = Scheduler(
                whisper, MODEL_THREAD, self.store.work_lock, on_idle=release_freed_memory
            )
        return self._schedulers[id(whisper)]

    def stop_session(self, session: str | None) -> int:
        """Stop every job of a browser session (its page was closed); returns how many there were."""
        with self._lock:
            stopped = [ticket for ticket in self._tickets if ticket.caller == Caller(PAGE, session)]
        for ticket in stopped:
            ticket.stop.set()
        if stopped and self._loop is not None:
            self._loop.call_soon_threadsafe(self._hand_on)  # a waiting one leaves the line at once
        return len(stopped)

    def running(self) -> int:
        """Jobs waiting for the models or using them."""
        with self._lock:
            return len(self._tickets)

    def _admit(self, ticket: _Ticket) -> None:
        door = ticket.caller.door
        with self._lock:
            at_door = sum(other.caller.door == door for other in self._tickets)
            if len(self._tickets) >= self.limit or at_door >= self.limit - self.limit // 4:
                raise QueueFull(
                    f"The queue is full ({len(self._tickets)} jobs waiting or running, {at_door} of them "
                    f"from {DOOR_NAMES.get(door, door)}); try again later."
                )
            self._tickets.append(ticket)
            self._clock += 1
            self._caller_since.setdefault(ticket.caller, self._clock)

    def _hand_on(self) -> None:
        """(On the event loop.) Give free models to the next job in turn, tell every waiting job its
        place, and wake them."""
        with self._lock:
            waiting = [t for t in self._tickets if t is not self._running and not t.batched]
            waiting_on = [ticket for ticket in waiting if not ticket.stop.is_set()]  # the stopped leave
            order = serving_order(waiting_on, self._door_served, self._caller_since)
            if self._running is None and order:
                self._running = order.pop(0)
                self._clock += 1
                self._door_served[self._running.caller.door] = self._clock
                self._caller_since[self._running.caller] = self._clock
                waiting.remove(self._running)
            busy = self._running is not None
            for place, ticket in enumerate(order):
                ticket.ahead = place + busy
        for ticket in [*waiting, self._running]:
            if ticket is not None and ticket.news is not None and not ticket.news.done():
                ticket.news.set_result(None)

    async def _turn(self, ticket: _Ticket, waiting: Callable[[int], None] | None) -> None:
        """Wait (on the event loop) until the models are this job's; Cancelled if it is stopped first."""
        while self._running is not ticket:
            if ticket.stop.is_set():
                raise Cancelled("the job was stopped while it waited")
            if waiting is not None:
                waiting(ticket.ahead)
            ticket.news = asyncio.get_running_loop().create_future()
            await ticket.news

    async def _in_thread(self, stop: threading.Event, work: Callable[..., Result], *args) -> Result:
        call = functools.partial(contextvars.copy_context().run, self._locked, stop, work, *args)
        task = asyncio.ensure_future(asyncio.get_running_loop().run_in_executor(MODEL_THREAD, call))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.wait([task])  # hold the models until the decoding has stopped
            if not task.cancelled():
                task.exception()  # retrieved (Cancelled, as asked), so asyncio does not log it
            raise

    def _locked(self, stop: threading.Event, work: Callable[..., Result], *args) -> Result:
        try:
            with cancellable(stop), self.store.work_lock:
                if stop.is_set():  # stopped while it waited for the lock (a Live update held it)
                    raise Cancelled("the job was stopped before it started")
                return work(*args)
        finally:
            release_freed_memory()


def serving_order(
    waiting: list[_Ticket], door_served: dict[str, int], caller_since: dict[Caller, int]
) -> list[_Ticket]:
    """The waiting jobs in the order they would get the models if no other came: each turn to the door
    served longest ago (one never served first), within it to the caller served (or, if new, arrived)
    longest ago, and to that caller's oldest job."""
    doors, callers, left, order = dict(door_served), dict(caller_since), list(waiting), []
    clock = max([*doors.values(), *callers.values()], default=0)
    while left:
        door = min({ticket.caller.door for ticket in left}, key=lambda name: (doors.get(name, -1), name))
        caller = min({t.caller for t in left if t.caller.door == door}, key=callers.__getitem__)
        ticket = next(ticket for ticket in left if ticket.caller == caller)
        left.remove(ticket)
        order.append(ticket)
        clock += 1
        doors[door] = callers[caller] = clock
    return order


def release_freed_memory() -> None:
    """Give the memory that decoding freed back to the system. glibc keeps what a thread frees in that
    thread's arena for reuse, mostly in pieces it does not return by itself, so every worker thread
    that once decoded kept its peak: the server's RSS grew by hundreds of MB under concurrent requests
    and stayed there (docs/app.md). A no-op where the C library has no `malloc_trim`."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
