"""The Live view's microphone as the server should hear it: the raw signal, every chunk, in order.

Gradio's streaming microphone changes what reaches the handler in two ways, measured against the file
Chromium's fake microphone played (scripts/live_received.py, docs/app.md):
- it asks for `getUserMedia({audio: true})`, which browsers answer with echo cancellation, noise suppression
  and automatic gain control on (processing for calls, which reshapes the waveform Whisper hears);
- it sends a chunk every 0.1 s as two requests, an upload and a post to `/gradio_api/stream/{event}`, and
  the server keeps one slot per stream: a post that arrives before the handler took the chunk before it
  replaces that chunk, uploads that overtake each other swap chunks, and a close that comes before the last
  chunk was taken ends the stream without it.

`PAGE_JS` (run by a gr.HTML in the Live tab when it mounts) asks every microphone for the raw signal and
sends the microphone's requests one at a time, in the order they were made; `StreamInOrder` (ASGI
middleware) holds a stream post until the chunk before it has been taken, and answers a close only once
the stream has ended, so that the Stop handler, sent after it, runs after the last chunk's handler.
"""

from __future__ import annotations

import asyncio
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MICROPHONE_ELEMENT = "live-audio"  # the Live view's gr.Audio elem_id
RAW_SIGNAL_JS = """
const media = navigator.mediaDevices;
if (media && !media.specdecRaw) {
  const open = media.getUserMedia.bind(media);
  media.getUserMedia = (constraints) => {
    if (constraints && constraints.audio) {
      const asked = constraints.audio === true ? {} : constraints.audio;
      const raw = {echoCancellation: false, noiseSuppression: false, autoGainControl: false};
      constraints = {...constraints, audio: {...raw, ...asked}};
    }
    return open(constraints);
  };
  media.specdecRaw = true;
}
"""
IN_ORDER_JS = (
    """
if (!window.specdecMicrophoneLine) {
  const send = window.fetch.bind(window);
  let line = Promise.resolve();
  const microphone = () => ((window.gradio_config || {}).components || [])
    .find((component) => (component.props || {}).elem_id === "MICROPHONE_ELEMENT");
  const inLine = (url, init) => {
    if (!init || init.method !== "POST" || url instanceof Request) return false;
    const path = new URL(String(url), location.href).pathname;
    if (/\\/gradio_api\\/stream\\/[^/]+(\\/close)?$/.test(path)) return true;
    if (/\\/gradio_api\\/upload$/.test(path) && init.body instanceof FormData) {
      const files = init.body.getAll("files");
      return files.length > 0 && files.every((file) => file.name === "audio.wav");
    }
    if (/\\/gradio_api\\/queue\\/join$/.test(path) && typeof init.body === "string") {
      try {
        return JSON.parse(init.body).trigger_id === (microphone() || {}).id;
      } catch (error) {
        return false;
      }
    }
    return false;
  };
  window.fetch = (url, init) => {
    if (!inLine(url, init)) return send(url, init);
    const sent = line.then(() => send(url, init));
    line = sent.catch(() => {});
    return sent;
  };
  window.specdecMicrophoneLine = true;
}
"""
).replace("MICROPHONE_ELEMENT", MICROPHONE_ELEMENT)
PAGE_JS = RAW_SIGNAL_JS + IN_ORDER_JS

STREAM_PATH = re.compile(r"/gradio_api/stream/(?P<event>[^/]+)(?P<close>/close)?$")
WAIT_SECONDS = 30.0  # as long as Gradio waits for a stream's next chunk
POLL_SECONDS = 0.005
# Gradio's loop clears an event's signal, then reads its chunk two turns of the event loop later (one spare)
TURNS_TO_READ = 3


class StreamInOrder:
    """ASGI middleware for Gradio's `POST /gradio_api/stream/{event_id}[/close]`: each post waits (in the
    order the posts came) until the chunk before it has been taken by the stream's loop; a close is
    answered once the stream has ended. Everything else goes straight to Gradio."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.lines: dict[str, asyncio.Lock] = {}  # event id -> its posts, one at a time
        self.waiting: dict[str, int] = {}  # event id -> posts holding or waiting for its line

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = STREAM_PATH.search(scope.get("path", "")) if scope["type"] == "http" else None
        queue = _gradio_queue(scope) if match and scope["method"] == "POST" else None
        if queue is None:
            return await self.app(scope, receive, send)
        event_id, closing = match["event"], bool(match["close"])
        line = self.lines.setdefault(event_id, asyncio.Lock())
        self.waiting[event_id] = self.waiting.get(event_id, 0) + 1
        try:
            async with line:
                event = queue.event_ids_to_events.get(event_id)
                if event is not None:
                    await _taken(event)
                if closing and event is not None:
                    send = _after_ended(send, queue, event_id)
                await self.app(scope, receive, send)
        finally:
            self.waiting[event_id] -= 1
            if not self.waiting[event_id]:
                del self.waiting[event_id], self.lines[event_id]


def _gradio_queue(scope: Scope):
    """The Gradio queue of the app serving this request, or None where there is none."""
    try:
        return scope["app"].get_blocks()._queue
    except (KeyError, AttributeError):
        return None


async def _taken(event) -> None:
    """Until the stream's loop has taken the chunk last posted (or the stream closed, or WAIT_SECONDS)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_SECONDS
    while event.signal.is_set() and not event.closed and loop.time() < deadline:
        await asyncio.sleep(POLL_SECONDS)
    for _ in range(TURNS_TO_READ):
        await asyncio.sleep(0)


def _after_ended(send: Send, queue, event_id: str) -> Send:
    """`send`, holding the response until the stream's event has ended (its last handler call returned)."""

    async def sent(message: Message) -> None:
        if message["type"] == "http.response.start":
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_SECONDS
            while event_id in queue.event_ids_to_events and loop.time() < deadline:
                await asyncio.sleep(POLL_SECONDS)
        await send(message)

    return sent
