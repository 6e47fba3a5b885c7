"""The realtime session's wire format (`app.realtime`): a client's messages read and checked, and the
pieces of the server's events (error objects, the user items that turns are), in OpenAI's shapes.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging

from specdec.app.jobs import QueueFull
from specdec.app.openai_schema import ApiError
from specdec.app.store import UserError, without_paths

logger = logging.getLogger("specdec.app")


def client_event(message: dict) -> dict:
    """A client's message as its event: a JSON object with a string `type`."""
    if message.get("text") is None:
        raise ApiError(
            400, "Send each event as a JSON text message, not a binary one.", None, "invalid_value"
        )
    try:
        event = json.loads(message["text"])
    except json.JSONDecodeError as error:
        raise ApiError(400, f"The message is not valid JSON ({error.msg}).", None, "invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ApiError(400, "An event is a JSON object with a string 'type'.", "type", "invalid_value")
    return event


def unknown_event(kind: str, handlers: dict) -> ApiError:
    """The error for an event type a transcription session does not take."""
    known = ", ".join(f"'{name}'" for name in handlers)
    message = f"Invalid value: '{kind[:100]}'. A transcription session takes: {known}."
    return ApiError(400, message, "type", "invalid_value")


def audio_bytes(audio: object) -> bytes:
    """The appended audio's bytes: base64 of 16-bit samples (an ApiError naming `audio` otherwise)."""
    if not isinstance(audio, str):
        raise ApiError(
            400, "audio must be a base64 string of 16-bit PCM at 24 kHz.", "audio", "invalid_value"
        )
    try:
        pcm = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        message = "audio is not valid base64: send 16-bit PCM at 24 kHz, base64-encoded."
        raise ApiError(400, message, "audio", "invalid_value") from None
    if len(pcm) % 2:
        message = f"audio holds {len(pcm)} bytes: 16-bit samples come in whole pairs of bytes."
        raise ApiError(400, message, "audio", "invalid_value")
    return pcm


def user_item(item_id: str, transcript: str | None) -> dict:
    """The user message item a committed turn is (its audio is not repeated)."""
    content = [{"type": "input_audio", "transcript": transcript}]
    status = "completed" if transcript is not None else "in_progress"
    return {"id": item_id, "object": "realtime.item", "type": "message", "status": status, "role": "user",
            "content": content}  # fmt: skip


def error_object(error: BaseException) -> dict:
    """OpenAI's error object (`type`, `code`, `message`, `param`) for an exception."""
    error = api_error(error)
    return {"type": error.kind, "code": error.code, "message": error.message, "param": error.param}


def api_error(error: BaseException) -> ApiError:
    """The error object for a client event or a turn that failed: a user's mistake as /v1 says it, a bug
    logged with its traceback."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, QueueFull):
        return ApiError(429, str(error), None, "queue_full", "rate_limit_error")
    if isinstance(error, UserError):
        return ApiError(400, without_paths(str(error)))
    logger.error("a realtime transcription session failed", exc_info=error)
    return ApiError(500, "The server had an error while processing the event.", kind="server_error")
