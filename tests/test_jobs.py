"""The line for the models (`app.jobs`) without a server: turns by door and by caller, one bound for both
doors, cancelled and stopped jobs that leave at once, and the memory a job freed given back.

Jobs here are plain functions that wait on events, so the order is read from what ran, never from time.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from specdec.app.jobs import API, MODEL_THREAD, PAGE, Caller, Jobs, serving_order
from specdec.app.store import UserError

ANONYMOUS, OTHER, KEYED = Caller(PAGE, "anonymous"), Caller(PAGE, "other page"), Caller(API, "127.0.0.1")


def line(limit: int = 32) -> Jobs:
    return Jobs(SimpleNamespace(work_lock=threading.Lock()), limit)


async def until(condition, rounds: int = 2_000) -> None:
    """Let the event loop run until condition() (a bounded number of short sleeps)."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the line never got there")


def test_turns_go_to_the_door_and_the_caller_served_longest_ago():
    async def scenario() -> list[str]:
        jobs, ran, gate = line(), [], threading.Event()

        def work(name: str) -> None:
            if name == "anonymous 1":
                gate.wait(10)  # holds the models while the others line up
            ran.append(name)

        tasks = [asyncio.ensure_future(jobs.run(ANONYMOUS, work, "anonymous 1"))]
        await until(lambda: jobs.running() == 1 and jobs._running is not None)
        for index in range(2, 7):  # a pile from one anonymous page
            tasks.append(asyncio.ensure_future(jobs.run(ANONYMOUS, work, f"anonymous {index}")))
        tasks.append(asyncio.ensure_future(jobs.run(OTHER, work, "other page")))
        tasks.append(asyncio.ensure_future(jobs.run(KEYED, work, "keyed")))
        await until(lambda: jobs.running() == 8)
        gate.set()
        await asyncio.gather(*tasks)
        return ran

    ran = asyncio.run(scenario())
    # the keyed API caller next (its door was never served); the other page, which came after the pile's
    # owner was last served, after one more of the pile, and before the rest of it
    assert ran == [
        "anonymous 1",
        "keyed",
        "anonymous 2",
        "other page",
        *(f"anonymous {i}" for i in range(3, 7)),
    ]


def test_every_job_runs_on_the_one_model_thread():
    """Jobs from both doors and several callers run on MODEL_THREAD, where the server loads its models:
    one OpenMP pool for all torch work (a second one throttles both: see app.jobs)."""

    async def scenario() -> set[str]:
        jobs = line()
        callers = [ANONYMOUS, OTHER, KEYED, ANONYMOUS]
        names = await asyncio.gather(*(jobs.run(c, lambda: threading.current_thread().name) for c in callers))
        loaded = MODEL_THREAD.submit(lambda: threading.current_thread().name).result()
        return {*names, loaded}

    names = asyncio.run(scenario())
    assert len(names) == 1 and next(iter(names)).startswith("specdec-models")


def test_serving_order_alternates_doors_and_callers():
    tickets = [SimpleNamespace(caller=caller) for caller in [ANONYMOUS] * 3 + [OTHER] + [KEYED] * 2]
    since = {ANONYMOUS: 1, OTHER: 5, KEYED: 6}  # arrivals: the anonymous page first
    order = serving_order(tickets, {PAGE: 2}, since)
    assert [ticket.caller for ticket in order] == [KEYED, ANONYMOUS, KEYED, OTHER, ANONYMOUS, ANONYMOUS]


def test_the_line_is_bounded_and_each_door_leaves_the_other_room():
    async def scenario() -> tuple[list[str], int]:
        jobs, gate, tasks = line(limit=8), threading.Event(), []
        for caller in [ANONYMOUS] * 7 + [KEYED] * 3:
            tasks.append(asyncio.ensure_future(jobs.run(caller, gate.wait, 10)))
            await asyncio.sleep(0)  # admitted or refused, in order of arrival
        await until(lambda: jobs.running() == 8)
        refused = [str(task.exception()) for task in tasks if task.done() and task.exception()]
        waiting = jobs.running()
        gate.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        return refused, waiting

    refused, waiting = asyncio.run(scenario())
    assert waiting == 8 and len(refused) == 2  # a door holds 6 of 8 at most; the API still found 2 places
    assert all(message.startswith("The queue is full") for message in refused)
    assert "6 of them from the page" in refused[0] and "2 of them from the API" in refused[1]


def test_a_job_cancelled_while_it_waits_leaves_the_line_at_once_and_never_runs():
    async def scenario() -> tuple[int, int, list[str]]:
        jobs, gate, ran = line(), threading.Event(), []
        first = asyncio.ensure_future(jobs.run(ANONYMOUS, lambda: gate.wait(10) and ran.append("first")))
        queued = [asyncio.ensure_future(jobs.run(ANONYMOUS, ran.append, f"queued {i}")) for i in range(5)]
        await until(lambda: jobs.running() == 6)
        queued[-1].cancel()
        await asyncio.gather(queued[-1], return_exceptions=True)
        after_cancel = jobs.running()  # while the first one still holds the models
        still_running = not first.done()
        gate.set()
        await asyncio.gather(first, *queued[:-1])
        return after_cancel, still_running, ran

    after_cancel, still_running, ran = asyncio.run(scenario())
    assert after_cancel == 5 and still_running
    assert ran == ["first", "queued 0", "queued 1", "queued 2", "queued 3"]


def test_a_closed_page_takes_its_waiting_jobs_out_of_the_line():
    async def scenario() -> tuple[list, int]:
        jobs, gate = line(), threading.Event()
        first = asyncio.ensure_future(jobs.run(KEYED, gate.wait, 10))
        mine = [asyncio.ensure_future(jobs.run(Caller(PAGE, "closed"), print, "never")) for _ in range(3)]
        await until(lambda: jobs.running() == 4)
        assert await asyncio.to_thread(jobs.stop_session, "closed") == 3  # unload runs in a thread
        results = await asyncio.gather(*mine, return_exceptions=True)
        left = jobs.running()
        gate.set()
        await first
        return results, left

    results, left = asyncio.run(scenario())
    assert left == 1 and all(isinstance(result, UserError) and "Stopped" in str(result) for result in results)


def rss_mb() -> float:
    for row in Path("/proc/self/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's arenas; /proc")
def test_the_memory_a_job_freed_goes_back_to_the_system():
    """A job that allocates 200 MB in 64 KB pieces and keeps every 20th: glibc cannot give the holes
    back by itself, so without a trim the thread's arena keeps ~190 MB after the job."""

    def fragmenting_job() -> list[np.ndarray]:
        pieces = [np.ones(8192) for _ in range(3200)]  # 64 KB each, under glibc's mmap threshold
        return pieces[::20]

    async def run_twice() -> list[float]:
        jobs, grown = line(), []
        for _ in range(2):  # the second time in a warm thread pool, as a server's
            before = rss_mb()
            kept = await jobs.run(KEYED, fragmenting_job)
            grown.append(rss_mb() - before)
            del kept
        return grown

    grown = asyncio.run(run_twice())
    print(f"RSS after each job: {', '.join(f'+{mb:.0f} MB' for mb in grown)} (10 MB kept by the result)")
    assert max(grown) < 80
