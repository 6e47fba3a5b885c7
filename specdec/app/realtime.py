"""OpenAI's Realtime transcription on the server of /v1: a websocket at `/v1/realtime?intent=transcription`
(app.py hands its route to Gradio's FastAPI app beside /v1's).

A client streams `input_audio_buffer.append` events (base64 16-bit PCM at 24 kHz); turns end where server
VAD hears a pause (`app.realtime_turns`) or where the client commits. Each committed turn is decoded as /v1
decodes an upload of that turn as a 24 kHz WAV (`openai_schema.asked` and `submit`, the same pairs, checks
and options): the audio read and resampled to 16 kHz by the project's reader (soxr), the decoding joining
the pair's running batch through the one line for the models (`app.jobs`, `Jobs.batched`), so the text is
the target's own. Its text comes as `conversation.item.input_audio_transcription.delta` events as target
passes settle it (those /v1's `stream=true` sends) and then `.completed` with the whole turn; nothing is
said of a turn before it is committed. Settings come by either shape of update (`app.realtime_settings`);
a client that sends none gets the defaults. A client event at fault gets an `error` event and the session
goes on. Same key as /v1 (`Authorization: Bearer`, or the `openai-insecure-api-key.KEY` subprotocol
OpenAI's browser clients send). See docs/openai-api.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from fastapi import APIRouter, WebSocket
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.routing import BaseRoute
from starlette.websockets import WebSocketDisconnect

from specdec.app import openai_schema
from specdec.app.jobs import API, MODEL_THREAD, Caller, Jobs
from specdec.app.openai_schema import ApiError, Asked, model_ids
from specdec.app.realtime_events import audio_bytes, client_event, error_object, unknown_event, user_item
from specdec.app.realtime_settings import BETA, GA, INPUT_RATE, Settings, param, reported, updated
from specdec.app.realtime_turns import InputBuffer, SpeechStarted, Turn
from specdec.app.store import ModelStore

INTENT = "transcription"
KEY_PROTOCOL = "openai-insecure-api-key."  # a browser's key, as OpenAI's browser clients send it
BETA_PROTOCOL = "openai-beta.realtime-v1"  # a browser's OpenAI-Beta header
RETRY_AFTER_SECONDS = 10


def routes(store: ModelStore, jobs: Jobs, api_key: str | None = None) -> list[BaseRoute]:
    """The websocket route; at most `jobs.limit` sessions open at once; with an api_key, each must bear it."""
    router = APIRouter(prefix="/v1")
    sessions: set[Session] = set()

    @router.websocket("/realtime")
    async def realtime(websocket: WebSocket) -> None:
        refusal = _refusal(websocket, api_key, len(sessions), jobs.limit)
        if refusal is not None:
            await _deny(websocket, refusal)
            return
        offered = websocket.scope.get("subprotocols", [])
        await websocket.accept("realtime" if "realtime" in offered else None)
        beta = "realtime=v1" in websocket.headers.get("openai-beta", "") or BETA_PROTOCOL in offered
        session = Session(websocket, store, jobs, beta)
        sessions.add(session)
        try:
            await session.run()
        finally:
            sessions.discard(session)

    return router.routes


def _refusal(websocket: WebSocket, api_key: str | None, open_sessions: int, limit: int) -> ApiError | None:
    """Why the handshake is refused (the key first, as on /v1), or None."""
    if api_key is not None and not secrets.compare_digest((_key(websocket) or "").encode(), api_key.encode()):
        message = (
            "Incorrect or missing API key: send the header 'Authorization: Bearer <key>' (a browser: the "
            "subprotocol 'openai-insecure-api-key.<key>')."
        )
        return ApiError(401, message, None, "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
    if websocket.query_params.get("intent") != INTENT:
        message = "This endpoint transcribes only: connect to /v1/realtime?intent=transcription."
        return ApiError(400, message, "intent", "invalid_value")
    if open_sessions >= limit:
        message = f"{open_sessions} realtime sessions are open, the most this server takes; try again later."
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return ApiError(429, message, None, "session_limit", "rate_limit_error", headers)
    return None


def _key(websocket: WebSocket) -> str | None:
    scheme, _, given = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return given.strip()
    offered = websocket.scope.get("subprotocols", [])
    return next((p.removeprefix(KEY_PROTOCOL) for p in offered if p.startswith(KEY_PROTOCOL)), None)


async def _deny(websocket: WebSocket, error: ApiError) -> None:
    """Refuse the handshake with the HTTP answer /v1 would give (a server without the websocket denial
    extension closes the handshake instead: 403)."""
    try:
        await websocket.send_denial_response(error.response())
    except RuntimeError:
        await websocket.close(code=1008, reason=error.message[:120])


class Session:
    """One websocket's transcription session: its settings, its input buffer, its turns being decoded."""

    def __init__(self, websocket: WebSocket, store: ModelStore, jobs: Jobs, beta: bool) -> None:
        self.websocket, self.store, self.jobs, self.beta = websocket, store, jobs, beta
        self.id = "sess_" + secrets.token_hex(12)
        self.caller = Caller(API, websocket.client.host if websocket.client else None)  # turns by client
        default = next(model for model, label in model_ids(store).items() if label == store.default_pair)
        self.settings = Settings(model=default)
        self.asked = self._asked(self.settings, GA)
        self.buffer = InputBuffer(self.settings.turn_detection, store.max_seconds)
        self.items: list[str] = []  # the committed turns' item ids, in order
        self.open_item: str | None = None  # the turn server VAD has heard start
        self.decodings: set[asyncio.Task] = set()
        self.folder = tempfile.TemporaryDirectory(prefix="specdec-realtime-")
        self.closed = False
        self._sending = asyncio.Lock()

    async def run(self) -> None:
        """Say the session, then take the client's events one by one until it leaves."""
        kind = "transcription_session.created" if self.beta else "session.created"
        await self.send(kind, session=reported(self.settings, BETA if self.beta else GA, self.id))
        handlers = {
            GA: self.update,
            BETA: self.update,
            "input_audio_buffer.append": self.append,
            "input_audio_buffer.commit": self.commit,
            "input_audio_buffer.clear": self.clear,
        }
        try:
            while not self.closed:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                event_id = None
                try:
                    event = client_event(message)
                    event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
                    if event["type"] not in handlers:
                        raise unknown_event(event["type"], handlers)
                    await handlers[event["type"]](event)
                except Exception as error:
                    await self.send_error(error, event_id)
        except WebSocketDisconnect:
            pass
        finally:
            self.closed = True
            await self._stop_decodings()
            self.folder.cleanup()

    async def update(self, event: dict) -> None:
        kind = event["type"]
        settings = updated(self.settings, kind, event.get("session"))
        asked = self._asked(settings, kind)
        if settings.turn_detection != self.settings.turn_detection:
            self.buffer.detect(settings.turn_detection)
            self.open_item = None
        self.settings, self.asked = settings, asked
        answer = "session.updated" if kind == GA else "transcription_session.updated"
        await self.send(answer, session=reported(settings, kind, self.id))

    async def append(self, event: dict) -> None:
        pcm = audio_bytes(event.get("audio"))
        if self.buffer.listening:  # Silero runs where all torch work runs (see app.jobs)
            loop = asyncio.get_running_loop()
            heard = await loop.run_in_executor(MODEL_THREAD, self.buffer.append, pcm)
        else:
            heard = self.buffer.append(pcm)
        for change in heard:
            if isinstance(change, SpeechStarted):
                self.open_item = "item_" + secrets.token_hex(12)
                await self.send(
                    "input_audio_buffer.speech_started",
                    audio_start_ms=change.audio_start_ms,
                    item_id=self.open_item,
                )
            else:
                item_id, self.open_item = self.open_item, None
                await self.send(
                    "input_audio_buffer.speech_stopped", audio_end_ms=change.turn.end_ms, item_id=item_id
                )
                await self._committed(change.turn, item_id)

    async def commit(self, event: dict) -> None:
        turn = self.buffer.commit()
        item_id, self.open_item = self.open_item or "item_" + secrets.token_hex(12), None
        await self._committed(turn, item_id)

    async def clear(self, event: dict) -> None:
        self.buffer.clear()
        self.open_item = None
        await self.send("input_audio_buffer.cleared")

    async def _committed(self, turn: Turn, item_id: str) -> None:
        """Say the turn committed and start its decoding (turns decode side by side, each its own events)."""
        previous = self.items[-1] if self.items else None
        self.items.append(item_id)
        await self.send("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous)
        added = "conversation.item.created" if self.beta else "conversation.item.added"
        await self.send(added, previous_item_id=previous, item=user_item(item_id, None))
        decoding = asyncio.create_task(self._transcribe(turn, item_id, previous))
        self.decodings.add(decoding)
        decoding.add_done_callback(self.decodings.discard)

    async def _transcribe(self, turn: Turn, item_id: str, previous: str | None) -> None:
        """Decode a turn as /v1 decodes it, its settled text sent as it comes, then the whole turn."""
        path = Path(self.folder.name) / f"{item_id}.wav"
        await run_in_threadpool(_write_wav, path, turn)  # (a session that ends now: the folder goes with it)
        loop = asyncio.get_running_loop()
        deltas: asyncio.Queue[str] = asyncio.Queue()
        told = lambda text: loop.call_soon_threadsafe(deltas.put_nowait, text)  # noqa: E731 - models' thread
        request = dataclasses.replace(self.asked.request, audio=str(path))
        asked = dataclasses.replace(self.asked, request=request, on_text=told)
        work = asyncio.ensure_future(self.jobs.batched(self.caller, openai_schema.submit, self.store, asked))
        try:
            await self._relay(item_id, work, deltas)
            if work.exception() is not None:
                failed = "conversation.item.input_audio_transcription.failed"
                await self.send(
                    failed,
                    item_id=item_id,
                    content_index=0,
                    error=error_object(work.exception()),
                )
                return
            answer = work.result()
            text, usage = answer.speculative.text, {"type": "duration", "seconds": round(answer.seconds, 3)}
            completed = "conversation.item.input_audio_transcription.completed"
            await self.send(completed, item_id=item_id, content_index=0, transcript=text, usage=usage)
            if not self.beta:
                done = user_item(item_id, text)
                await self.send("conversation.item.done", previous_item_id=previous, item=done)
        finally:
            if not work.done():  # the session ended: its decoding leaves the batch at the next pass
                work.cancel()
                await asyncio.wait([work])
            path.unlink(missing_ok=True)

    async def _relay(self, item_id: str, work: asyncio.Future, deltas: asyncio.Queue) -> None:
        """Send each piece of text the decoding settles as a delta, until it is done."""
        while True:
            waiting = asyncio.ensure_future(deltas.get())
            try:
                await asyncio.wait([work, waiting], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()  # (a piece it had not taken yet stays in the queue)
            if waiting.done() and not waiting.cancelled():
                await self._delta(item_id, waiting.result())
                continue
            while not deltas.empty():  # what the decoding settled last is queued before its answer
                await self._delta(item_id, deltas.get_nowait())
            return

    async def _delta(self, item_id: str, text: str) -> None:
        await self.send(
            "conversation.item.input_audio_transcription.delta", item_id=item_id, content_index=0, delta=text
        )

    async def _stop_decodings(self) -> None:
        for decoding in list(self.decodings):
            decoding.cancel()
        if self.decodings:
            await asyncio.wait(list(self.decodings))

    def _asked(self, settings: Settings, kind: str) -> Asked:
        """/v1's request for the settings (an ApiError naming the setting at fault in `kind`'s shape); its
        audio is each turn's."""
        fields = {
            "model": settings.model,
            "language": settings.language or "",
            "prompt": settings.prompt,
            "fallback": "true" if settings.fallback else "false",
        }
        try:
            return openai_schema.asked(
                FormData(fields), self.store, "", default_model=openai_schema.DEFAULT_MODEL
            )
        except ApiError as error:
            where = param(kind, f"transcription.{error.param}") if error.param in fields else error.param
            raise dataclasses.replace(error, param=where) from None

    async def send(self, kind: str, **fields) -> None:
        """A server event, with its own event_id; nothing once the client has gone."""
        event = {"event_id": "event_" + secrets.token_hex(12), "type": kind, **fields}
        async with self._sending:
            if self.closed:
                return
            try:
                await self.websocket.send_text(json.dumps(event, ensure_ascii=False))
            except (WebSocketDisconnect, RuntimeError, OSError):
                self.closed = True

    async def send_error(self, error: BaseException, event_id: str | None) -> None:
        """OpenAI's error event: the type, code, message and param, and the client's event_id at fault."""
        await self.send("error", error={**error_object(error), "event_id": event_id})


def _write_wav(path: Path, turn: Turn) -> None:
    sf.write(str(path), np.frombuffer(turn.pcm, dtype="<i2"), INPUT_RATE, subtype="PCM_16")
