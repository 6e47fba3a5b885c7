"""Gradio's cancel, for one job: ASGI middleware in front of `POST /gradio_api/cancel`.

Gradio cancels every running event of the session and endpoint named, and waits for them all; the app's
line (`app.jobs`) holds a client's queued jobs as running events, so one cancel stopped them all. This
middleware cancels only the event named.
"""

from __future__ import annotations

import asyncio
import json

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CANCEL_PATH = "/gradio_api/cancel"
MAX_CANCEL_BYTES = 4096
GRADIO_TASK_SEPARATOR = "<gradio-sep>"  # Gradio names an event's task "{session}_{fn}<gradio-sep>{event}"


class CancelOneEvent:
    """ASGI middleware for Gradio's `POST /gradio_api/cancel {session_hash, fn_index, event_id}`.

    Gradio cancels every running event of that session and endpoint (it finds them by task name,
    `{session_hash}_{fn_index}`) and waits for them all: a client that cancelled one of its queued jobs
    stopped its running one too, whose answer then never came, and waited for it to stop. Here only the
    event named is cancelled (it leaves the line at once if it waits in it); the request then goes on to
    Gradio with an endpoint that matches no task, and Gradio only tells the client that the event ended
    and drops it from its own queue."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].endswith(CANCEL_PATH):
            return await self.app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            body, more = body + message.get("body", b""), message.get("more_body", False)
            if len(body) > MAX_CANCEL_BYTES:
                return await PlainTextResponse("A cancel request is a few bytes of JSON.", 413)(
                    scope, receive, send
                )
        try:
            asked = json.loads(body)
            name = f"{asked['session_hash']}_{asked['fn_index']}{GRADIO_TASK_SEPARATOR}{asked['event_id']}"
            await _cancel_task(name)
            body = json.dumps({**asked, "fn_index": -1}).encode()  # no task of Gradio's is named with -1
        except (ValueError, KeyError, TypeError):
            pass  # not the body Gradio expects: Gradio answers it as it would
        headers = [(key, value) for key, value in scope["headers"] if key != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _cancel_task(name: str) -> None:
    """Cancel the task running one Gradio event, if any, and wait until it has ended (a job in the line
    leaves it at once; a decoding stops at its next target pass)."""
    tasks = [task for task in asyncio.all_tasks() if task.get_name() == name]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
