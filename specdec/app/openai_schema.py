"""OpenAI's transcription request and answer in the page's terms: the form's fields checked into the
page's Transcribe request, the job that decodes it, and the answer in each response format
(`app.openai_api` serves them).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import FormData
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specdec import scheduler, subtitles
from specdec.api import SpeculativeWhisper, Transcription
from specdec.app import compare
from specdec.app.store import ModelStore, UnavailablePair, UserError, chosen_language
from specdec.audio import SAMPLE_RATE
from specdec.options import MIN_TEMPERATURE, TranscribeOptions, check_temperature
from specdec.request import PRESETS, command_line_fields, parse, switch
from specdec.trace import Window
from specdec.whisper.models import is_multilingual
from specdec.whisper.tokens import text_ids

RESPONSE_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
TIMED_FORMATS = ("verbose_json", "srt", "vtt")  # decoded with timestamps (the others as the page does)
DEFAULT_MODEL = "whisper-1"  # OpenAI's model name, taken as the server's default pair
MAX_PROMPT_TOKENS = 223  # Whisper's limit for the previous text (half its context, less one)
LOSSY_NOTE = (
    "acceptance_threshold was given: draft tokens the target would not have chosen were kept, so this is "
    "not the target's own output"
)
# OpenAI's own fields that are not options (and specdec's `compare`); a field named like none of these nor
# like an option is left alone (OpenAI adds fields), one named almost like an option is refused
OTHER_FIELDS = ("file", "model", "prompt", "response_format", "stream", "compare")
# the options that no form field gives by its own name: what sets each here
SET_HERE = {
    "task": "the route (/v1/audio/translations translates)",
    "timestamps": "response_format (verbose_json, srt and vtt are timed)",
    "word_timestamps": "timestamp_granularities[]=word",
    "prompt_ids": "prompt, as text",
    "batch_size": "the server (requests share its batch)",
    "speculative": "the server: /v1 decodes speculatively (compare=true decodes with the target alone too)",
}

logger = logging.getLogger("specdec.app")


@dataclass
class ApiError(Exception):
    """An answer other than a transcript: the HTTP status and OpenAI's error object."""

    status: int
    message: str
    param: str | None = None  # the form field at fault
    code: str | None = None
    kind: str = "invalid_request_error"  # the error object's `type`
    headers: dict[str, str] | None = None

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}
        return JSONResponse({"error": error}, self.status, self.headers)


@dataclass(frozen=True)
class Asked:
    """A transcription request's form fields, checked, as the page's Transcribe job takes them."""

    model: str  # as the client named it
    request: compare.CompareRequest  # the page's own request: the pair's label, the audio file, options
    response_format: str
    prompt: str  # previous text, conditioning every window (OpenAI's `prompt`)
    check: bool  # compare=true: also decode with the target alone and say whether the outputs are identical
    stream: bool = False  # stream=true: the text as server-sent events, as the target's passes settle it
    on_text: Callable[[str], None] | None = field(default=None, compare=False)  # given each piece of text
    # that a step settles (the streaming route's; called on the models' thread)


@dataclass(frozen=True)
class Answer:
    """The job's result: the speculative transcript, and the target alone's when asked to check."""

    speculative: Transcription
    seconds: float  # the clip's length
    baseline: Transcription | None = None  # the target alone on the same clip, when asked to check


def model_ids(store: ModelStore) -> dict[str, str]:
    """Each pair's public id -> its label in the store: "target+draft" ("base+tiny.en"), a local folder
    by its own name, so that no server path shows."""
    ids: dict[str, str] = {}
    for label, names in store.pairs.items():
        ids.setdefault("+".join(Path(name).name if Path(name).exists() else name for name in names), label)
    return ids


def asked(
    form: FormData, store: ModelStore, audio: str, task: str = "transcribe", default_model: str | None = None
) -> Asked:
    """The form's fields, checked (ApiError), as the page's request for the uploaded file at `audio`;
    task: "transcribe" or "translate" (the route's); default_model: the model when none is named (None:
    one must be)."""
    model = _text(form, "model") or default_model
    if not model:
        raise ApiError(400, "Name a model: one of GET /v1/models.", "model")
    label = store.default_pair if model == DEFAULT_MODEL else model_ids(store).get(model)
    if label is None:
        known = ", ".join(model_ids(store))
        message = f"The model {model[:100]!r} does not exist here; choose one of: {known}."
        raise ApiError(404, message, "model", "model_not_found")
    response_format = _text(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        formats = ", ".join(RESPONSE_FORMATS)
        raise ApiError(400, f"response_format must be one of {formats}.", "response_format")
    granularities = set(form.getlist("timestamp_granularities[]"))
    if granularities - {"segment", "word"}:
        raise ApiError(400, "timestamp_granularities[] takes segment and word.", "timestamp_granularities[]")
    if "word" in granularities and response_format != "verbose_json":
        message = "Word timestamps come in verbose_json: set response_format=verbose_json."
        raise ApiError(400, message, "timestamp_granularities[]")
    stream, check = _flag(form, "stream"), _flag(form, "compare")
    if stream and check:
        message = "stream=true and compare=true do not go together: a check answers whole."
        raise ApiError(400, message, "stream")
    openai = {option: read(form) for option, read in OPENAI_FIELDS.values()}
    given_here = {"task": task, "timestamps": response_format in TIMED_FORMATS, **openai}
    more = _declared_options(form, given_here)
    request = compare.CompareRequest(
        audio=audio, pair=label, **given_here,
        detect_no_speech=more.pop("detect_no_speech", False),  # generate()'s default, as the Python API's
        # on, as OpenAI's model, unless streamed: a window the fallback may decode again settles no text
        # until it is judged, so a stream with it would say a clip up to 30 s in one piece at its end
        fallback=more.pop("fallback", not stream),
        more_options=more,
    )  # fmt: skip
    try:
        request.options()
    except UserError as error:  # a value out of bounds, or two that do not go together
        raise ApiError(
            400, _sentence(error), next((name for name in more if name in str(error)), None)
        ) from None
    return Asked(model, request, response_format, _text(form, "prompt"), check, stream)


def declared_fields() -> tuple[str, ...]:
    """The options /v1 takes by their own names (`specdec.request`'s declarations), and the presets."""
    set_otherwise = {option for option, _ in OPENAI_FIELDS.values()} | SET_HERE.keys()
    return (*(name for name in command_line_fields(TranscribeOptions) if name not in set_otherwise), *PRESETS)


def _declared_options(form: FormData, given_here: dict) -> dict:
    """The declared options the form gives by their own names, each read as its field's type. A field of
    an option set here otherwise (`SET_HERE`) is refused unless it says the same; one named almost as an
    option is refused with the option's name."""
    names = declared_fields()
    known = {*names, *SET_HERE, *OPENAI_FIELDS, *OTHER_FIELDS}
    for name in form:
        if name not in known and (close := difflib.get_close_matches(name, names, n=1, cutoff=0.85)):
            raise ApiError(400, f"Unknown field {name[:40]!r}; did you mean {close[0]!r}?", name)
    for name, setter in SET_HERE.items():
        if name in form and not (name in given_here and _same(name, _text(form, name), given_here[name])):
            raise ApiError(400, f"{name} is not a form field here: it is set by {setter}.", name)
    more = {}
    for name in names:
        if text := _text(form, name):
            try:
                more[name] = parse(name, text)
            except ValueError as error:
                raise ApiError(400, _sentence(error), name) from None
    return more


def _same(name: str, text: str, value: object) -> bool:
    """The form's text for an option says the value it has here anyway."""
    try:
        return parse(name, text) == value
    except ValueError:
        return False


def _sentence(error: Exception) -> str:
    return str(error).rstrip(".") + "."


def _language(form: FormData) -> str:
    language = _text(form, "language") or "auto"
    try:
        chosen_language(language)
    except ValueError as error:  # UserError too
        raise ApiError(400, str(error), "language") from None
    return language


def _word_timestamps(form: FormData) -> bool:
    return "word" in form.getlist("timestamp_granularities[]")  # (checked with the response format above)


def design_asked(form: FormData, store: ModelStore, audio: str, task: str = "transcribe") -> Asked:
    """The original design's `POST /transcribe`: its only field is the file; a `model` (default: the
    server's pair) and the other fields of /v1 are taken as there, but its answer is JSON of its own, so
    another response format or a stream is refused."""
    for name in ("response_format", "stream", "timestamp_granularities[]"):
        if name in form:
            message = f'/transcribe answers {{"text": [...], "duration": seconds}} only: use /v1 for {name}.'
            raise ApiError(400, message, name)
    return asked(form, store, audio, task, default_model=DEFAULT_MODEL)


def _text(form: FormData, field: str) -> str:
    value = form.get(field)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, f"{field} must be a text field, not a file.", field)
    return (value or "").strip()


def _flag(form: FormData, field: str) -> bool:
    """A switch of the form (not given: false), read as an option's (`request.switch`)."""
    try:
        return switch(field, _text(form, field) or "false")
    except ValueError as error:
        raise ApiError(400, _sentence(error), field) from None


def _temperature(form: FormData) -> float:
    """OpenAI's temperature: one number from 0 to 1 (0: greedy), at least MIN_TEMPERATURE when not 0."""
    try:
        temperature = float(_text(form, "temperature") or 0)
    except ValueError:
        temperature = math.nan
    try:
        check_temperature(temperature)  # the options' own rule: 0, or at least MIN_TEMPERATURE
    except ValueError:
        temperature = math.nan
    if not 0 <= temperature <= 1:  # NaN too
        message = f"temperature must be 0 (greedy) or a number from {MIN_TEMPERATURE} to 1."
        raise ApiError(400, message, "temperature")
    return temperature


# OpenAI's form fields that set options: field -> (the option, how it is read from the form); every other
# option is a form field of its own name (`declared_fields`), and `prompt` becomes the target's ids of it
# once the pair is loaded (`_prompt_ids`)
OPENAI_FIELDS = {
    "language": ("language", _language),
    "temperature": ("temperature", _temperature),
    "timestamp_granularities[]": ("word_timestamps", _word_timestamps),
}


def transcribe(store: ModelStore, asked: Asked) -> Answer:
    """The job (in the jobs' worker thread, holding the models) for a request that does not join the batch
    (`batchable`): the page's Transcribe decoding, and with `check` its Compare decoding (both runs, in
    alternating order, timed apart from any other request)."""
    whisper, options, waveform = _prepared(store, asked)
    request, seconds = asked.request, len(waveform) / SAMPLE_RATE
    if not asked.check:
        return Answer(compare.transcribe_speculative(whisper, waveform, options, request), seconds)
    name, first = Path(request.audio).name, store.next_baseline_first()
    both = compare.compare(whisper, waveform, options, first, name)
    return Answer(both.speculative, seconds, both.baseline)


def batchable(asked: Asked) -> bool:
    """Decoded in the shared batch (`Jobs.batched`): a plain transcription, not a check (whose two runs
    are timed apart) nor long-form decoding other than sequential (chunked, speech only)."""
    return not asked.check and asked.request.batchable


def submit(schedule, stop, store: ModelStore, asked: Asked) -> Future:
    """`Jobs.batched`'s submit: the pair loaded and the audio read (on the models' thread), the decoding
    handed to the pair's batch; the future of its Answer."""
    whisper, options, waveform = _prepared(store, asked)
    name, seconds = Path(asked.request.audio).name, len(waveform) / SAMPLE_RATE
    tokenizer = whisper.pair.target.processor.tokenizer
    on_tokens = None if asked.on_text is None else TextDeltas(tokenizer, asked.on_text)
    decoding = schedule(whisper).submit(waveform, options, name, stop, on_tokens)
    return scheduler.chained(decoding, lambda transcription: Answer(transcription, seconds))


class TextDeltas:
    """A request's settled target ids, as the scheduler tells them, -> the text each telling adds, handed to
    `send` (OpenAI's transcript.text.delta). Each telling decodes only the tokens after those already sent
    (Whisper's byte-level tokenizer spells a sequence as its parts spelled one after another), so a long
    stream costs no more per step; a character whose bytes span tokens waits for its last one."""

    def __init__(self, tokenizer, send: Callable[[str], None]) -> None:
        self.tokenizer = tokenizer
        self.send = send
        self.told = 0  # tokens whose text was handed on
        self.started = False  # some text was handed on (the text's leading space is dropped, as its own)

    def __call__(self, token_ids: Sequence[int]) -> None:
        piece = self.tokenizer.decode(list(token_ids[self.told :]), skip_special_tokens=True)
        if piece.endswith("\ufffd"):
            return  # half a character: a later telling completes it
        piece = piece if self.started else piece.lstrip()
        self.told = len(token_ids)
        if piece:
            self.started = True
            self.send(piece)


def _prepared(store: ModelStore, asked: Asked):
    """(whisper, options, waveform) for the request: its pair loaded, its prompt in the options."""
    request = asked.request
    try:
        whisper, options, waveform = compare.prepare(store, request)
    except UnavailablePair as error:
        raise _unavailable_model(store, asked.model, request.pair, error) from error
    if request.task == "translate" and not is_multilingual(whisper.pair.target):
        message = (
            f"The model {asked.model} is English-only: it cannot translate (it would only transcribe); "
            "choose one whose target is multilingual (GET /v1/models)."
        )
        raise ApiError(400, message, "model")
    if asked.prompt:
        options = dataclasses.replace(options, prompt_ids=_prompt_ids(whisper, asked.prompt))
    return whisper, options, waveform


def _unavailable_model(store: ModelStore, model: str, label: str, error: UnavailablePair) -> ApiError:
    """The answer for a pair whose models cannot be loaded: why, where the store knows, and the models the
    client can use instead, by their ids (the page's message speaks to the server's operator)."""
    logger.warning("API: the model %s cannot be loaded: %s", model, str(error)[:300])
    reason = store.unavailable(label) or ""
    for name in {name for names in store.pairs.values() for name in names if _is_path(name)}:
        reason = reason.replace(name, Path(name).name)  # no server path: a local folder by its own name
    ids = model_ids(store)
    usable = [
        other
        for other, other_label in ids.items()
        if other_label != label and not store.unavailable(other_label)
    ]
    because = f" ({reason})" if reason else ""
    choose = f"choose one of: {', '.join(usable)}" if usable else "no other model can be loaded here either"
    message = f"The model {model} cannot be loaded on this server{because}; {choose}."
    return ApiError(400, message, "model", "model_not_available")


def _is_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or Path(name).exists()


def _prompt_ids(whisper: SpeculativeWhisper, prompt: str) -> tuple[int, ...]:
    """The previous text as target ids (its last MAX_PROMPT_TOKENS), as Whisper's prompt takes it."""
    tokenizer = whisper.pair.target.processor.tokenizer
    return tuple(text_ids(tokenizer, " " + prompt)[-MAX_PROMPT_TOKENS:])  # control tokens' spellings as text


def response(asked: Asked, answer: Answer) -> Response:
    """The answer in the response format asked for (srt and vtt from `Transcription`'s own writers)."""
    transcription = answer.speculative
    said, headers = lossy_marks(asked)
    headers = headers or None
    if asked.response_format == "json":
        return JSONResponse({"text": transcription.text, **said}, headers=headers)
    if asked.response_format == "text":  # OpenAI's: json's text whole, not a .txt file's one segment a line
        return PlainTextResponse(subtitles.plain_text(transcription.text, None), headers=headers)
    if asked.response_format == "srt":
        return PlainTextResponse(transcription.to_srt(), headers=headers)
    if asked.response_format == "vtt":
        return PlainTextResponse(transcription.to_vtt(), media_type="text/vtt", headers=headers)
    return JSONResponse(_verbose(asked, answer) | said, headers=headers)


def lossy_marks(asked: Asked) -> tuple[dict, dict]:
    """How a lossy request's answer says so in every format, streamed or not: (a field for its JSON, a
    header); both empty for an exact one."""
    if asked.request.options().lossless:
        return {}, {}
    return {"lossy": LOSSY_NOTE}, {"X-Specdec-Lossy": LOSSY_NOTE}


def _word(word) -> dict:
    return {"word": word.text.strip(), "start": word.start, "end": word.end}


def _window_of(windows: Sequence[Window], cue: subtitles.Cue) -> Window | None:
    """The window a segment was decoded in: the last one starting at or before the segment."""
    found = None
    for window in windows:
        if window.start_seconds <= cue.start_seconds + 1e-6 and not window.fell_back:  # the kept decoding
            found = window
    return found


def compression_ratio(text: str) -> float | None:
    """OpenAI Whisper's compression ratio of a window's text: its UTF-8 bytes over their zlib-compressed
    bytes (high for repetitive text, a sign of a decoding loop)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else None


def _segments(asked: Asked, transcription: Transcription) -> list[dict]:
    """OpenAI's segments, each with its window's numbers as OpenAI Whisper reports them: the window's seek
    (in 10 ms frames), the target's average log-probability of the window's tokens and its no-speech
    probability (generate()'s measures), and the compression ratio of the window's text."""
    cues = transcription.segments or ()
    windows = [_window_of(transcription.result.windows, cue) for cue in cues]
    texts: dict[int, str] = {}
    for cue, window in zip(cues, windows, strict=True):
        if window is not None:
            texts[window.index] = texts.get(window.index, "") + cue.text
    ratios = {index: compression_ratio(text) for index, text in texts.items()}  # once a window
    return [
        {"id": index, "seek": round(window.start_seconds * 100) if window else None,
         "start": cue.start_seconds, "end": cue.end_seconds, "text": cue.text, "tokens": list(cue.token_ids),
         "temperature": window.temperature if window else asked.request.temperature,
         "avg_logprob": window.avg_logprob if window else None,
         "compression_ratio": ratios[window.index] if window else None,
         "no_speech_prob": window.no_speech_prob if window else None}
        for index, (cue, window) in enumerate(zip(cues, windows, strict=True))
    ]  # fmt: skip


def _verbose(asked: Asked, answer: Answer) -> dict:
    """OpenAI's verbose_json, and the speculative decoding's statistics beside it."""
    transcription, result, baseline = answer.speculative, answer.speculative.result, answer.baseline
    language = transcription.language
    segments = _segments(asked, transcription)
    # unchecked, the target alone's passes are one per token, as its own decoding makes them
    baseline_passes = baseline.result.num_target_passes if baseline else result.num_generated
    speculative = {
        "model": asked.model,
        "acceptance_rate": result.acceptance_rate,
        "tokens_per_target_pass": result.tokens_per_pass,
        "target_passes": result.num_target_passes,
        "target_passes_saved": baseline_passes - result.num_target_passes,
        "draft_tokens": result.num_drafted,
        "batch_rows": result.mean_batch_rows,  # rows of the passes it shared with other requests, on average
        "decode_seconds": result.decode_seconds,
        "identical_to_target": baseline.token_ids == transcription.token_ids if baseline else None,
    }
    words = {}
    if transcription.words is not None:  # OpenAI's: the word without its space, its start and end
        words = {"words": [_word(word) for word in transcription.words]}
    return {
        "task": asked.request.task,
        # OpenAI's: a translation's language is the output's, always english
        "language": "english" if asked.request.task == "translate" else LANGUAGES.get(language, language),
        "duration": round(answer.seconds, 3),
        "text": transcription.text,
        "segments": segments,
        **words,
        "speculative": speculative,
    }
