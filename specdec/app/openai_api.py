"""An OpenAI-compatible transcription endpoint beside the page: `POST /v1/audio/transcriptions` and
`GET /v1/models`, served by the page's own server (app.py hands these routes to Gradio's FastAPI app);
`app.openai_schema` reads the form and writes the answer.

A request is the page's Transcribe job: the same pairs, the same upload and duration limits, and the one
line for the models (`app.jobs`), where it waits behind the page's jobs; a full line answers 429 with
Retry-After, and a client that disconnects has its decoding stopped at the next target pass. Every error
is OpenAI's error object, without a traceback or a server path. See docs/openai-api.md.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.routing import BaseRoute
from starlette.types import Message

from specdec.app import openai_schema
from specdec.app.jobs import Jobs, QueueFull
from specdec.app.openai_schema import Answer, ApiError, Asked, model_ids
from specdec.app.store import ModelStore, RefusedAudio, UserError

MAX_FIELD_BYTES = 64 * 1024  # each form field beside the file
FORM_ROOM = 256 * 1024  # request bytes allowed beyond the file: the other fields and the multipart framing
RETRY_AFTER_SECONDS = 10
DISCONNECT_POLL_SECONDS = 0.25
API_SESSION = "openai-api"  # the jobs' session name: no page's unload stops these jobs
logger = logging.getLogger("specdec.app")


def routes(
    store: ModelStore, jobs: Jobs, max_file_size: int, max_waiting: int, api_key: str | None = None
) -> list[BaseRoute]:
    """The /v1 routes for a FastAPI app: transcriptions through `jobs` (refused once `max_waiting` jobs
    are in), uploads up to `max_file_size` bytes; with an api_key, every request must bear it."""
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
        with tempfile.TemporaryDirectory(prefix="specdec-api-") as folder:
            try:
                _check_key(request, api_key)
                asked = await _read_form(request, store, max_file_size, Path(folder))
                work = jobs.run(API_SESSION, openai_schema.transcribe, store, asked, limit=max_waiting)
                answer = await _while_connected(request, work)
                if answer is None:
                    logger.info("an API client disconnected: its transcription was stopped")
                    return Response(status_code=499)  # nobody reads it
                return openai_schema.response(asked, answer)
            except Exception as error:
                return _api_error(error, store, folder).response()

    return router.routes


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


async def _read_form(request: Request, store: ModelStore, max_file_size: int, folder: Path) -> Asked:
    """The form's fields, checked, and its file saved in `folder` under the client's file name."""
    limit = f"The file is over the limit of {max_file_size / 2**20:g} MB."
    too_large = ApiError(413, limit, "file", "file_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_file_size + FORM_ROOM:
        raise too_large  # before a byte of it is read
    try:
        capped = _capped(request, max_file_size + FORM_ROOM, too_large)
        form = await capped.form(max_files=1, max_fields=32, max_part_size=MAX_FIELD_BYTES)
    except ApiError:
        raise
    except Exception:  # Starlette's MultiPartException, or the HTTPException it becomes
        raise ApiError(400, "The body is not a valid multipart form.") from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ApiError(400, "Send the audio as the multipart file field 'file'.", "file")
        name = re.sub(r"[^\w.\- ]", "_", Path(upload.filename or "").name).strip(" .")[:100] or "audio"
        asked = openai_schema.asked(form, store, str(folder / name))  # error messages name the file
        await run_in_threadpool(_save, upload, asked.request.audio)
        return asked
    finally:
        await form.close()


def _capped(request: Request, limit: int, too_large: ApiError) -> Request:
    """The request, its body cut off past `limit` bytes whatever its headers say (a chunked upload)."""
    received = 0

    async def receive() -> Message:
        nonlocal received
        message = await request.receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise too_large
        return message

    return Request(request.scope, receive)


def _save(upload: UploadFile, path: str) -> None:
    upload.file.seek(0)
    with open(path, "wb") as out:
        shutil.copyfileobj(upload.file, out)


async def _while_connected(request: Request, work: Awaitable[Answer]) -> Answer | None:
    """The work's answer; None if the client disconnects first: the work is then cancelled, and
    `Jobs.run` stops its decoding and waits until it has."""
    task = asyncio.ensure_future(work)
    while not (await asyncio.wait([task], timeout=DISCONNECT_POLL_SECONDS))[0]:
        if await request.is_disconnected():
            task.cancel()
            await asyncio.wait([task])
            return None
    return task.result()
