"""An OpenAI-compatible transcription endpoint beside the page: `POST /v1/audio/transcriptions`,
`POST /v1/audio/translations` (Whisper's translate task, into English) and `GET /v1/models`, served by the
page's own server (app.py hands these routes to Gradio's FastAPI app); `app.openai_schema` reads the form
and writes the answer. Beside them, the original design's `POST /transcribe`: a multipart `file` in,
`{"text": [its transcript], "duration": the seconds the server took}` out, the same request otherwise.

A request is the page's Transcribe job: the same pairs, the same upload and duration limits, and the one
line for the models (`app.jobs`), where it takes turns with the page's jobs; a full line answers 429 with
Retry-After, and a client that disconnects has its decoding stopped at the next target pass. Every error
is OpenAI's error object, naming the field at fault, without a traceback or a server path. See
docs/openai-api.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser, parse_options_header
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute
from starlette.types import Message

from specdec.app import openai_schema
from specdec.app.jobs import API, Caller, Jobs, QueueFull
from specdec.app.openai_schema import ApiError, Asked, model_ids
from specdec.app.store import ModelStore, RefusedAudio, UserError

MAX_FIELD_BYTES = 64 * 1024  # each form field beside the file (a prompt's last 223 tokens need far less)
FORM_ROOM = 256 * 1024  # request bytes allowed beyond the file: the other fields and the multipart framing
MAX_NAME_BYTES = 200  # an upload's file name on disk, as Gradio cuts the page's (file systems take 255)
MAX_EXTENSION_BYTES = 16
RETRY_AFTER_SECONDS = 10
DISCONNECT_POLL_SECONDS = 0.25
UPLOAD_IDLE_SECONDS = 20.0  # longest pause in an upload's body before it is refused (408)
UPLOAD_SECONDS = 300.0  # longest an upload's whole body may take: 25 MB at about 0.7 Mbit/s
ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
logger = logging.getLogger("specdec.app")
T = TypeVar("T")


def routes(store: ModelStore, jobs: Jobs, max_file_size: int, api_key: str | None = None) -> list[BaseRoute]:
    """The /v1 routes for a FastAPI app: transcriptions through `jobs` (429 when its line is full), uploads
    up to `max_file_size` bytes; with an api_key, every request must bear it."""
    router = APIRouter(prefix="/v1")
    created = int(time.time())

    @router.get("/models")
    async def list_models(request: Request) -> Response:
        try:
            _check_key(request, api_key)
        except ApiError as error:
            return error.response()
        data = [
            {"id": model, "object": "model", "created": created, "owned_by": "specdec", "label": label,
             "default": label == store.default_pair}
            for model, label in model_ids(store).items()
        ]  # fmt: skip
        return JSONResponse({"object": "list", "data": data})

    @router.post("/audio/transcriptions")
    async def transcriptions(request: Request) -> Response:
        return await _answer(request, "transcribe")

    @router.post("/audio/translations")
    async def translations(request: Request) -> Response:
        """Whisper's translate task: the speech in English, the same fields, formats, limits and errors."""
        return await _answer(request, "translate")

    known = list(router.routes)

    @router.api_route("/{path:path}", methods=ALL_METHODS, include_in_schema=False)
    async def elsewhere(request: Request, path: str) -> Response:
        """Any other path or method under /v1: OpenAI's error object (the key checked first), not FastAPI's
        `{"detail": ...}`."""
        try:
            _check_key(request, api_key)
        except ApiError as error:
            return error.response()
        asked = f"{request.method} {request.url.path[:100]}"
        match = request.scope["path"]
        allowed = sorted({m for route in known if route.path_regex.match(match) for m in route.methods})
        if allowed:
            message = f"Invalid method ({asked}); this path takes {', '.join(allowed)}."
            return ApiError(
                405, message, code="method_not_allowed", headers={"Allow": ", ".join(allowed)}
            ).response()
        return ApiError(404, f"Invalid URL ({asked}).", code="unknown_url").response()

    design = APIRouter()

    @design.post("/transcribe")
    async def design_transcribe(request: Request) -> Response:
        """The original design's endpoint: the default pair unless a `model` is named, the other /v1 fields
        optional as there; `{"text": [...], "duration": seconds}`."""
        return await _answer(request, "transcribe", design=True)

    async def _answer(request: Request, task: str, design: bool = False) -> Response:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="specdec-api-") as folder:
            try:
                _check_key(request, api_key)
                asked = await _read_form(request, store, max_file_size, Path(folder), task, design)
                caller = Caller(API, request.client.host if request.client else None)  # turns by client
                if asked.stream:  # joins the running batch too, and says its text as it settles
                    error_of = lambda error: _api_error(error, store, folder)  # noqa: E731
                    return await _streamed(request, jobs, caller, store, asked, error_of)
                if openai_schema.batchable(asked):  # joins the running batch
                    work = jobs.batched(caller, openai_schema.submit, store, asked)
                else:
                    work = jobs.run(caller, openai_schema.transcribe, store, asked)
                answer = await _while_connected(request, work)
                if answer is None:
                    logger.info("an API client disconnected: its transcription was stopped")
                    return Response(status_code=499)  # nobody reads it
                if design:
                    took = round(time.perf_counter() - start, 3)
                    said, headers = openai_schema.lossy_marks(asked)
                    body = {"text": [answer.speculative.text], "duration": took, **said}
                    return JSONResponse(body, headers=headers)
                return openai_schema.response(asked, answer)
            except Exception as error:
                return _api_error(error, store, folder).response()

    return router.routes + design.routes


def _api_error(error: Exception, store: ModelStore, folder: str) -> ApiError:
    """The error object for a failed request: a user's mistake in one log line, a bug with its traceback."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, QueueFull):
        headers = {"Retry-After": str(RETRY_AFTER_SECONDS)}
        return ApiError(429, str(error), None, "queue_full", "rate_limit_error", headers)
    if isinstance(error, UserError):
        logger.warning("API user error: %s", str(error)[:300])
        message = str(error).replace(folder + "/", "")  # no server path: the upload by its name,
        for name in {name for names in store.pairs.values() for name in names if Path(name).exists()}:
            message = message.replace(name, Path(name).name)  # a local model folder by its own
        if isinstance(error, RefusedAudio):
            return ApiError(400, message, "file", "invalid_file")
        return ApiError(400, message)
    logger.error("the transcription endpoint failed", exc_info=error)
    return ApiError(500, "The server had an error while processing the request.", kind="server_error")


def _check_key(request: Request, api_key: str | None) -> None:
    if api_key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), api_key.encode()):
        message = "Incorrect or missing API key: send the header 'Authorization: Bearer <key>'."
        raise ApiError(401, message, None, "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


async def _read_form(
    request: Request, store: ModelStore, max_file_size: int, folder: Path, task: str, design: bool = False
) -> Asked:
    """The form's fields, checked, and its file saved in `folder` under the client's file name (design:
    the original design's `/transcribe`, `openai_schema.design_asked`)."""
    limit = f"The file is over the limit of {max_file_size / 2**20:g} MB."
    too_large = ApiError(413, limit, "file", "file_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_file_size + FORM_ROOM:
        raise too_large  # before a byte of it is read
    form = await _parsed(_capped(request, max_file_size + FORM_ROOM, too_large))
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ApiError(400, "Send the audio as the multipart file field 'file'.", "file")
        if upload.size is not None and upload.size > max_file_size:
            raise too_large  # within the room left for the other fields, but over the file's own limit
        audio = str(folder / upload_name(upload.filename))  # error messages name the file by it
        asked = (openai_schema.design_asked if design else openai_schema.asked)(form, store, audio, task)
        await run_in_threadpool(_save, upload, asked.request.audio)
        return asked
    finally:
        await form.close()


def upload_name(filename: str | None) -> str:
    """The client's file name as the upload's name on disk (and in error messages): letters, digits and
    `.-_ ` kept, at most MAX_NAME_BYTES in UTF-8 (a file system takes 255 bytes, not characters), cut
    between characters, its extension kept."""
    name = re.sub(r"[^\w.\- ]", "_", Path(filename or "").name).strip(" .")
    stem, extension = os.path.splitext(name)
    if len(extension.encode()) > MAX_EXTENSION_BYTES:
        stem, extension = name, ""
    room = MAX_NAME_BYTES - len(extension.encode())
    stem = stem.encode()[:room].decode(errors="ignore").rstrip(" .")
    return stem + extension if stem else "audio" + extension


async def _parsed(request: Request) -> FormData:
    """The multipart form, at most one file and 32 fields, each field beside the file up to
    MAX_FIELD_BYTES (an ApiError naming a field over it)."""
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise ApiError(
            400, "Send a multipart/form-data body, with the audio as its file field 'file'.", "file"
        )
    parser = _FormParser(
        request.headers, request.stream(), max_files=1, max_fields=32, max_part_size=MAX_FIELD_BYTES
    )
    try:
        return await parser.parse()
    except MultiPartException as error:
        field = parser._current_part.field_name  # the part being read (Starlette's message does not say)
        if "exceeded maximum size" in error.message and field:
            message = f"The field '{field[:40]}' is over the limit of {MAX_FIELD_BYTES // 1024} KB."
            raise ApiError(400, message, field[:40]) from None
        raise ApiError(400, f"The body is not a valid multipart form ({error.message})") from None
    except ClientDisconnect:
        raise ApiError(400, "The body ended before the form did.") from None


class _FormParser(MultiPartParser):
    """Starlette's parser, which also takes a part named only through `filename*=UTF-8''...` (RFC 5987:
    RFC 7578 tells senders not to use it, some do) as the file it is, not as a text field."""

    def on_headers_finished(self) -> None:
        part = self._current_part
        name = _extended_filename(part.content_disposition)
        if name is not None and b"filename" not in parse_options_header(part.content_disposition)[1]:
            plain = re.sub(r'["\\\r\n]', "_", name)  # the name as a plain parameter, which is read next
            part.content_disposition += b'; filename="' + plain.encode() + b'"'
        super().on_headers_finished()


def _extended_filename(disposition: bytes | None) -> str | None:
    """The file name of a `filename*=charset'language'percent-encoded` parameter, None without one."""
    found = re.search(rb"(?:^|;)\s*filename\*\s*=\s*([^;]*)", disposition or b"", re.IGNORECASE)
    if found is None:
        return None
    charset, _, rest = found.group(1).strip().strip(b'"').decode("latin-1").partition("'")
    encoded = rest.partition("'")[2]
    try:
        return urllib.parse.unquote(encoded, encoding=charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return urllib.parse.unquote(encoded, errors="replace")


def _capped(request: Request, limit: int, too_large: ApiError) -> Request:
    """The request, its body cut off past `limit` bytes whatever its headers say (a chunked upload), and
    refused (408) when no byte comes for UPLOAD_IDLE_SECONDS or the whole body takes UPLOAD_SECONDS (a
    stalled client would hold its connection, and what it sent, for as long as it liked)."""
    received = 0
    deadline = time.monotonic() + UPLOAD_SECONDS

    async def receive() -> Message:
        nonlocal received
        wait = min(UPLOAD_IDLE_SECONDS, deadline - time.monotonic())
        try:
            message = await asyncio.wait_for(request.receive(), max(wait, 0))
        except TimeoutError:
            raise _stalled() from None
        received += len(message.get("body", b""))
        if received > limit:
            raise too_large
        return message

    return Request(request.scope, receive)


def _stalled() -> ApiError:
    message = (
        f"The upload stalled: the body must keep coming (a pause of at most {UPLOAD_IDLE_SECONDS:g} s) "
        f"and end within {UPLOAD_SECONDS:g} s."
    )
    return ApiError(408, message, "file", "request_timeout", headers={"Connection": "close"})


def _save(upload: UploadFile, path: str) -> None:
    upload.file.seek(0)
    with open(path, "wb") as out:
        shutil.copyfileobj(upload.file, out)


async def _streamed(
    request: Request,
    jobs: Jobs,
    caller: Caller,
    store: ModelStore,
    asked: Asked,
    error_of: Callable[[Exception], ApiError],
) -> Response:
    """stream=true: OpenAI's server-sent events, a `transcript.text.delta` for each target pass that settled
    text (all the tokens it accepted), then `transcript.text.done` with the whole text. A request that fails
    before its first text gets the error answer as without streaming; one that fails later, an error event.
    A client that leaves, before its first text or after, stops its decoding at the next pass."""
    said, marked = openai_schema.lossy_marks(asked)  # a lossy answer says so: its done event, a header
    loop = asyncio.get_running_loop()
    deltas: asyncio.Queue[str] = asyncio.Queue()
    told = lambda text: loop.call_soon_threadsafe(deltas.put_nowait, text)  # noqa: E731 - from the models' thread
    asked = dataclasses.replace(asked, on_text=told)
    work = asyncio.ensure_future(jobs.batched(caller, openai_schema.submit, store, asked))
    first = asyncio.ensure_future(deltas.get())
    try:  # until its first text, the client is watched as a plain request's is
        first_or_end = asyncio.wait([work, first], return_when=asyncio.FIRST_COMPLETED)
        if await _while_connected(request, first_or_end) is None:
            logger.info("a streaming API client left before its first text: its transcription was stopped")
            first.cancel()
            await _stopped(work)
            return Response(status_code=499)  # nobody reads it
    except asyncio.CancelledError:
        first.cancel()
        await _stopped(work)
        raise
    if work.done() and work.exception() is not None:
        first.cancel()
        raise work.exception()

    async def events() -> AsyncIterator[str]:
        waiting = first
        try:
            while True:
                await asyncio.wait([work, waiting], return_when=asyncio.FIRST_COMPLETED)
                if waiting.done():
                    yield _event({"type": "transcript.text.delta", "delta": waiting.result()})
                    waiting = asyncio.ensure_future(deltas.get())
                    continue
                waiting.cancel()  # the work is done; what it settled last is queued before its answer
                while not deltas.empty():
                    yield _event({"type": "transcript.text.delta", "delta": deltas.get_nowait()})
                if work.exception() is not None:
                    error = error_of(work.exception())
                    kind = {"message": error.message, "type": error.kind, "param": error.param}
                    yield _event({"type": "error", "error": {**kind, "code": error.code}})
                    return
                done = {"type": "transcript.text.done", "text": work.result().speculative.text}
                yield _event(done | said)
                return
        finally:
            waiting.cancel()
            if not work.done():  # the client left: its decoding stops at the next pass
                logger.info("a streaming API client disconnected: its transcription was stopped")
                await _stopped(work)

    headers = {"Cache-Control": "no-cache", **marked}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


async def _stopped(work: asyncio.Future) -> None:
    """Cancel a batched decoding (`Jobs.batched` stops it at the next pass) and wait until it has left."""
    work.cancel()
    await asyncio.wait([work])


def _event(data: dict) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _while_connected(request: Request, work: Awaitable[T]) -> T | None:
    """The work's result; None if the client disconnects first: the work is then cancelled (`Jobs.run`
    stops its decoding and waits until it has)."""
    task = asyncio.ensure_future(work)
    while not (await asyncio.wait([task], timeout=DISCONNECT_POLL_SECONDS))[0]:
        if await request.is_disconnected():
            task.cancel()
            await asyncio.wait([task])
            return None
    return task.result()
