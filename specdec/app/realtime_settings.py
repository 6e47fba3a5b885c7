"""A realtime transcription session's settings (`app.realtime`), as OpenAI's two shapes of session update
give them and as its session events report them back.

- The current one, `session.update`: `{"type": "transcription", "audio": {"input": {"format",
  "transcription", "turn_detection", "noise_reduction"}}, "include"}`.
- The beta one, `transcription_session.update`: `{"input_audio_format", "input_audio_transcription",
  "turn_detection", "input_audio_noise_reduction", "include"}`.

Only the fields an update holds change; `turn_detection: null` turns server VAD off (the client commits).
The input is 16-bit PCM at 24 kHz only (OpenAI's `audio/pcm`, `pcm16`); G.711 is refused. Noise reduction
and log-probabilities are not offered: they are taken and reported as off (`null`). Which model, language
and prompt are checked as /v1 checks them (`openai_schema.asked`), by the session.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from specdec.app.openai_api import MAX_FIELD_BYTES
from specdec.app.openai_schema import ApiError

GA, BETA = "session.update", "transcription_session.update"  # the two update events, each its shape
INPUT_RATE = 24_000  # OpenAI's: the only rate its PCM input takes
# where each setting sits in each shape: (the object holding it, its key there), the object as a path
PLACES = {
    GA: {"format": "format", "transcription": "transcription", "turn_detection": "turn_detection"},
    BETA: {
        "format": "input_audio_format",
        "transcription": "input_audio_transcription",
        "turn_detection": "turn_detection",
    },
}
HOLDERS = {GA: "session.audio.input", BETA: "session"}
MAX_PAUSE_MS = 10_000  # the longest silence_duration_ms and prefix_padding_ms taken


@dataclass(frozen=True)
class TurnDetection:
    """Server VAD, OpenAI's fields and defaults, heard by Silero VAD (`specdec.vad.SpeechDetector`)."""

    threshold: float = 0.5  # a 32 ms window is speech from this probability on (it ends below it - 0.15)
    prefix_padding_ms: int = 300  # audio kept before the speech started, at the turn's head
    silence_duration_ms: int = 500  # a pause this long ends the turn (and stays at its tail)


@dataclass(frozen=True)
class Settings:
    """What a session decodes with: /v1's fields for each committed turn, and how turns are found."""

    model: str  # a pair's id (GET /v1/models), or whisper-1 (the server's default pair)
    language: str | None = None  # None: detected in each turn
    prompt: str = ""  # previous text conditioning each turn, as /v1's prompt
    fallback: bool = True  # specdec's own: Whisper's temperature fallback, as /v1's default
    turn_detection: TurnDetection | None = TurnDetection()  # None: the client commits each turn


def updated(settings: Settings, kind: str, session: object) -> Settings:
    """The settings with what an update of `kind` (GA or BETA) changes; an ApiError naming the field at
    fault (its path in the update: `session.audio.input.turn_detection.threshold`) leaves them as they
    were."""
    if not isinstance(session, dict):
        raise ApiError(400, "session must be an object.", "session")
    holder = session
    if kind == GA:
        if session.get("type", "transcription") != "transcription":
            message = "This server's realtime sessions transcribe only: send session.type 'transcription'."
            raise ApiError(400, message, "session.type", "invalid_value")
        audio = _object(session.get("audio"), "session.audio")
        holder = _object(audio.get("input"), "session.audio.input")
    given = {name: holder[key] for name, key in PLACES[kind].items() if key in holder}
    if "format" in given:
        _check_format(kind, given["format"])
    if "transcription" in given:
        settings = _transcription(settings, given["transcription"], param(kind, "transcription"))
    if "turn_detection" in given:
        detection = given["turn_detection"]
        turns = None if detection is None else _turn_detection(detection, param(kind, "turn_detection"))
        settings = dataclasses.replace(settings, turn_detection=turns)
    return settings


def param(kind: str, name: str) -> str:
    """A setting's path in an update of `kind` (name: "format", "transcription", "turn_detection", or a
    field of the transcription: "transcription.language")."""
    setting, _, field = name.partition(".")
    path = f"{HOLDERS[kind]}.{PLACES[kind][setting]}"
    return f"{path}.{field}" if field else path


def _object(value: object, path: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(400, f"{path} must be an object.", path)
    return value


def _check_format(kind: str, value: object) -> None:
    if kind == GA:
        given = _object(value, param(kind, "format"))
        if given.get("type", "audio/pcm") == "audio/pcm" and given.get("rate", INPUT_RATE) == INPUT_RATE:
            return
    elif value == "pcm16":
        return
    message = (
        "Only 16-bit little-endian mono PCM at 24 kHz is taken here "
        "({'type': 'audio/pcm', 'rate': 24000}; beta: 'pcm16')."
    )
    raise ApiError(400, message, param(kind, "format"), "invalid_value")


def _transcription(settings: Settings, value: object, path: str) -> Settings:
    if value is None:
        message = "A session here always transcribes: give its transcription settings, not null."
        raise ApiError(400, message, path, "invalid_value")
    given = _object(value, path)
    changes: dict[str, object] = {}
    for field in ("model", "prompt"):
        if field in given:
            changes[field] = _text(given[field], f"{path}.{field}")
    if len(str(changes.get("prompt", "")).encode()) > MAX_FIELD_BYTES:  # /v1's bound on a form field
        message = f"{path}.prompt is over the limit of {MAX_FIELD_BYTES // 1024} KB."
        raise ApiError(400, message, f"{path}.prompt")
    if "language" in given:
        changes["language"] = _text(given["language"], f"{path}.language") or None
    if "fallback" in given:
        if not isinstance(given["fallback"], bool):
            raise ApiError(400, f"{path}.fallback must be true or false.", f"{path}.fallback")
        changes["fallback"] = given["fallback"]
    return dataclasses.replace(settings, **changes)


def _text(value: object, path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ApiError(400, f"{path} must be a string.", path)
    return value.strip()


def _turn_detection(value: object, path: str) -> TurnDetection:
    """OpenAI's server_vad object (a field left out takes its default); semantic_vad is not offered."""
    given = _object(value, path)
    if given.get("type", "server_vad") != "server_vad":
        message = (
            "turn_detection takes {'type': 'server_vad', ...} or null (semantic_vad is not offered here)."
        )
        raise ApiError(400, message, f"{path}.type", "invalid_value")
    defaults = TurnDetection()
    threshold = given.get("threshold", defaults.threshold)
    if not _number(threshold) or not 0 <= threshold <= 1:
        raise ApiError(400, f"{path}.threshold must be a number from 0 to 1.", f"{path}.threshold")
    lengths = {}
    for field in ("prefix_padding_ms", "silence_duration_ms"):
        length = given.get(field, getattr(defaults, field))
        smallest = 0 if field == "prefix_padding_ms" else 1
        if not _number(length) or not float(length).is_integer() or not smallest <= length <= MAX_PAUSE_MS:
            message = (
                f"{path}.{field} must be a whole number of milliseconds from {smallest} to {MAX_PAUSE_MS}."
            )
            raise ApiError(400, message, f"{path}.{field}")
        lengths[field] = int(length)
    return TurnDetection(float(threshold), **lengths)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def reported(settings: Settings, kind: str, session_id: str) -> dict:
    """The session as OpenAI's session events of `kind` report it (`session.created`/`.updated` for GA,
    `transcription_session.created`/`.updated` for BETA): every setting in force."""
    transcription = {
        "model": settings.model,
        "language": settings.language,
        "prompt": settings.prompt,
        "fallback": settings.fallback,  # specdec's own
    }
    turns = None
    if settings.turn_detection is not None:
        turns = {"type": "server_vad", **dataclasses.asdict(settings.turn_detection)}
    common = {"id": session_id, "object": "realtime.transcription_session", "include": None}
    if kind == BETA:
        return {
            **common,
            "input_audio_format": "pcm16",
            "input_audio_transcription": transcription,
            "turn_detection": turns,
            "input_audio_noise_reduction": None,
        }
    audio_input = {
        "format": {"type": "audio/pcm", "rate": INPUT_RATE},
        "transcription": transcription,
        "turn_detection": turns,
        "noise_reduction": None,
    }
    return {**common, "type": "transcription", "audio": {"input": audio_input}}
