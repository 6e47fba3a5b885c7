"""The Compare view's work: the same clip decoded by the target alone and speculatively, one run after
the other, and its handlers (plain functions that app.py wires into Gradio).

No order bias: both paths are warmed up when the models load (`SpeculativeWhisper.warm_up`), so neither
run pays first-call costs, and callers alternate which run goes first from one comparison to the next
(`baseline_first`); the metrics say which one ran first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specdec import longform, scheduler
from specdec.api import SpeculativeWhisper, Transcription
from specdec.app import highlight, views, word_view
from specdec.app.store import ModelStore, RefusedAudio, UserError, chosen_language, draft_note
from specdec.app.views import Comparison
from specdec.audio import SAMPLE_RATE, AudioError, load_audio, recorded_seconds
from specdec.longform import Progress
from specdec.options import MAX_SEED, DecodeOptions, TranscribeOptions
from specdec.request import options_from_values
from specdec.vad import rms_dbfs

DECODING, DRAWING = 0.2, 0.95  # where decoding starts and ends on the progress bar
MAX_REFERENCE_CHARS = 20_000  # a reference text longer than this is refused (about 3,000 words)
MAX_REFERENCE_WORDS = 4_000  # more words than 10 minutes of speech hold
Report = Callable[..., None]  # Gradio's progress bar, called as report(fraction, desc=message)


def compare(
    whisper: SpeculativeWhisper,
    waveform: np.ndarray,
    options: DecodeOptions,
    baseline_first: bool = True,
    name: str = "audio",
) -> Comparison:
    """Decode a 16 kHz waveform both ways, one run after the other, in the order asked for.

    options: `TranscribeOptions` (its `speculative` is set for each run). Audio over 30 s is decoded
    long-form (`long_form`: "sequential" or "chunked"); its progress(fraction, message) then follows both
    runs, the first filling [0, 0.5] and the second [0.5, 1]. skip_silence: both runs decode only its speech
    (`longform.speech`), so they are compared on the same pieces.
    """
    options = TranscribeOptions.of(options)
    long = longform.is_long(waveform)
    runs = {}
    order = (False, True) if baseline_first else (True, False)
    for position, speculative in enumerate(order):
        run_name = "speculative" if speculative else "target alone"
        progress = _part_of(options.progress, position / 2, 1 / 2, run_name) if long else None
        run = TranscribeOptions.of(options, speculative=speculative, progress=progress)
        (runs[speculative],) = whisper.transcribe_waveforms([waveform], run, [name])
    shown = TranscribeOptions.of(options, progress=None)  # a view holds data only (ZeroGPU pickles it)
    return Comparison(runs[False], runs[True], shown, baseline_first, options.skip_silence and long)


def _part_of(progress: Progress | None, start: float, share: float, label: str) -> Progress | None:
    """A progress callback for one part of the work, reporting into its share of the whole."""
    if progress is None:
        return None
    return lambda fraction, message: progress(start + share * fraction, f"{label}: {message}")


SILENT_DBFS = -70.0  # a whole clip quieter than this holds no speech (with detect_no_speech)


@dataclass(frozen=True)
class CompareRequest:
    """What the Compare view asks for, as the UI's widgets give it."""

    audio: str | None
    pair: str  # a label of the store's pairs
    language: str = "auto"
    task: str = "transcribe"
    timestamps: bool = False
    draft_length: str = "adaptive"  # "adaptive" or "fixed"
    num_draft_tokens: int = DecodeOptions.num_draft_tokens
    temperature: float = 0.0
    seed: int | None = 0
    reference: str = ""
    baseline_first: bool | None = None  # None: alternate (ZeroGPU's worker cannot keep the count)
    long_form: str = "sequential"  # audio over 30 s: "sequential" (generate()'s own) or "chunked"
    skip_silence: bool = False  # audio over 30 s: decode only its speech (Silero VAD)
    detect_no_speech: bool = True  # Whisper's no-speech rule: a window judged silence is left empty
    fallback: bool = True  # Whisper's temperature fallback: a looping or unsure window decoded again hotter
    word_timestamps: bool = False  # time each word from the target's alignment heads
    # LOSSY, opt-in: keep draft tokens the target gives at least this share of its top probability (the
    # output is then not the target's); 0 or None: exact
    acceptance_threshold: float | None = None
    # any other declared option by its field name, over the values above (/v1's form fields beyond the
    # page's; `specdec.request`)
    more_options: Mapping[str, object] = field(default_factory=dict)

    def options(self) -> TranscribeOptions:
        """The decoding options: the page's values read as options (`specdec.request`'s, the
        presets Whisper's rules), `more_options` over them, every value checked (API clients can send
        anything)."""
        try:
            values = {
                "language": chosen_language(self.language),
                "task": self.task,
                "timestamps": self.timestamps,
                "seed": checked_seed(self.seed),
                "num_draft_tokens": _number("num_draft_tokens", self.num_draft_tokens, int),
                "adaptive": self.draft_length == "adaptive",
                "temperature": _number("temperature", self.temperature, float),
                "detect_no_speech": self.detect_no_speech,
                "fallback": self.fallback,
                "word_timestamps": self.word_timestamps,
                "acceptance_threshold": self.acceptance_threshold,
                "long_form": self.long_form,
                "skip_silence": self.skip_silence,
            } | dict(self.more_options)
            # chunks are decoded as a batch: k from its measured costs (a seed keeps sampling fixed)
            chunked_greedy = values["long_form"] == "chunked" and values["temperature"] == 0
            values.setdefault("cost_aware", values["adaptive"] is True and chunked_greedy)
            return options_from_values(values)
        except ValueError as error:
            raise UserError(str(error)) from error

    def check_reference(self) -> None:
        reference = self.reference or ""
        if not isinstance(reference, str):
            raise UserError("The reference text must be text.")
        num_words = len(reference.split())
        if len(reference) > MAX_REFERENCE_CHARS or num_words > MAX_REFERENCE_WORDS:
            raise UserError(
                f"The reference text is {len(reference):,} characters and {num_words:,} words; "
                f"the limit is {MAX_REFERENCE_CHARS:,} characters and {MAX_REFERENCE_WORDS:,} words."
            )

    @property
    def batchable(self) -> bool:
        """Its decoding may join the shared batch (`specdec.scheduler`): sequential long-form, all of the
        audio (chunked and speech-only decoding run as jobs of their own, as does a request whose options
        are refused: the job says why)."""
        try:
            options = self.options()
        except UserError:
            return False
        return options.long_form == "sequential" and not options.skip_silence


def _number(name: str, value: object, kind: type) -> float | int:
    """A number from the page or an API client, as `kind` (ValueError naming the field otherwise)."""
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, not {str(value)[:20]!r}") from None


def checked_seed(seed: object) -> int | None:
    """A seed from the page or an API client: None, or a whole number from 0 to MAX_SEED."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, float)) or seed != seed:  # NaN
        raise UserError(f"The seed must be a whole number from 0 to {MAX_SEED}.")
    if not (0 <= seed <= MAX_SEED and float(seed).is_integer()):
        raise UserError(f"The seed must be a whole number from 0 to {MAX_SEED}, not {seed:.6g}.")
    return int(seed)


def gpu_seconds(request: CompareRequest, progress: object = None) -> int:
    """ZeroGPU's time limit for one request (`spaces.GPU(duration=...)` calls this with the task's
    arguments): a minute, plus 20 s per minute of audio for the two decodes, at most 5 minutes."""
    seconds = recorded_seconds(request.audio) if request.audio else None
    if seconds is None:
        seconds = 30.0  # unreadable (the task itself says why) or no recorded length
    return int(min(60 + seconds / 3, 300))


def compare_clip(
    store: ModelStore, request: CompareRequest, progress: Report | None = None
) -> views.CompareView:
    """Load the clip, decode it both ways, and build every output of the Compare view.

    progress (a gr.Progress) follows a long clip window by window or chunk by chunk, both runs."""
    report = _no_report if progress is None else progress  # not `or`: an idle gr.Progress is falsy
    whisper, options, waveform = prepare(store, request, report)
    report(DECODING, desc=f"Decoding {_audio_text(waveform, options)}: target alone and speculative")
    options = TranscribeOptions.of(options, progress=_engine_progress(report))
    comparison = compare(
        whisper, waveform, options, _baseline_first(store, request), Path(request.audio).name
    )
    report(DRAWING, desc="Drawing")
    return views.build_view(whisper, comparison, request.reference, len(waveform) / SAMPLE_RATE)


def _no_report(*args, **kwargs) -> None:
    pass


def _engine_progress(report: Report, prefix: str = "") -> longform.Progress:
    """The engine's progress(fraction, message) shown on Gradio's bar between decoding and drawing."""
    return lambda fraction, message: report(
        DECODING + (DRAWING - DECODING) * fraction, desc=f"{prefix}{message}"
    )


def _audio_text(waveform: np.ndarray, options: TranscribeOptions) -> str:
    """The clip's length for the progress bar, and its long-form mode when it has one."""
    seconds = len(waveform) / SAMPLE_RATE
    if longform.is_long(waveform):
        skipping = ", long silences skipped" if options.skip_silence else ""
        return f"{seconds:.0f} s, long-form {options.long_form}{skipping}"
    return f"{seconds:.1f} s"


def prepare(
    store: ModelStore, request: CompareRequest, report: Report = _no_report
) -> tuple[SpeculativeWhisper, DecodeOptions, np.ndarray]:
    """Check the request, then the draft's pair (loaded on first use) and the clip at 16 kHz."""
    if not request.audio:
        raise UserError("Record or upload a clip first (or click one of the examples).")
    options = request.options()
    request.check_reference()
    report(0.05, desc="Loading models")
    whisper = store.whisper(request.pair)
    report(0.15, desc="Reading audio")
    waveform = _read_audio(request.audio, store.max_seconds)
    if options.no_speech_threshold is not None and rms_dbfs(waveform) < SILENT_DBFS:
        # Whisper's no-speech rule does not catch digital silence: whisper-base says " you" there, sure of it
        raise UserError(f"No speech detected: the recording is silent (below {SILENT_DBFS:.0f} dBFS).")
    return whisper, options, waveform


def _baseline_first(store: ModelStore, request: CompareRequest) -> bool:
    return store.next_baseline_first() if request.baseline_first is None else request.baseline_first


def _read_audio(path: str, max_seconds: float) -> np.ndarray:
    """The clip at 16 kHz, or a UserError naming the file (not the server's temporary path).

    A clip over max_seconds is refused from its header, before it is decoded."""
    try:
        return load_audio(path, max_seconds=max_seconds)
    except AudioError as error:
        raise RefusedAudio(str(error).replace(str(path), Path(path).name)) from error


def transcribe_clip(
    store: ModelStore, request: CompareRequest, progress: Report | None = None
) -> tuple[str, str, dict]:
    """Speculative decoding only: the transcript, its highlighted tokens and its statistics.

    Audio over 30 s is decoded long-form (request.long_form), progress following it."""
    report = _no_report if progress is None else progress  # not `or`: an idle gr.Progress is falsy
    whisper, options, waveform = prepare(store, request, report)
    transcription = transcribe_speculative(whisper, waveform, options, request, report)
    return transcript_view(whisper, options, transcription)


def submit_clip(
    schedule, stop, store: ModelStore, request: CompareRequest, progress: Report | None = None
) -> Future:
    """`Jobs.batched`'s submit for the Transcribe button (a `request.batchable` one): the clip prepared on
    the models' thread and its decoding handed to the pair's batch; the future of `transcribe_clip`'s
    answer."""
    report = _no_report if progress is None else progress
    whisper, options, waveform = prepare(store, request, report)
    report(DECODING, desc=f"Decoding {_audio_text(waveform, options)}")
    engine_progress = _engine_progress(report, "speculative: ") if longform.is_long(waveform) else None
    options = TranscribeOptions.of(options, progress=engine_progress)
    decoding = schedule(whisper).submit(waveform, options, Path(request.audio).name, stop)
    return scheduler.chained(decoding, lambda transcription: transcript_view(whisper, options, transcription))


def transcript_view(
    whisper: SpeculativeWhisper, options: DecodeOptions, transcription
) -> tuple[str, str, dict]:
    """The Transcribe view of a transcription: its text, its highlighted tokens and its statistics."""
    spans = views.token_spans(whisper, transcription.result)
    stats = {
        "language": transcription.language,
        "note": draft_note(whisper, transcription.language, options.task),
        "speculative": transcription.result.stats(),
        "windows": views.windows(transcription.result),
        "no_speech": transcription.result.no_speech,
        "words": word_view.word_dicts(transcription.words),  # with word timestamps: start, end, text
    }
    tokens = highlight.spans_html(spans)
    if not transcription.result.lossless:
        tokens = views.lossy_notice(transcription.result) + tokens
    return views.shown_text(transcription), tokens, stats


def transcribe_speculative(
    whisper: SpeculativeWhisper,
    waveform: np.ndarray,
    options: DecodeOptions,
    request: CompareRequest,
    report: Report = _no_report,
) -> Transcription:
    """The Transcribe button's decoding of a prepared clip: speculative only, long-form over 30 s."""
    report(DECODING, desc=f"Decoding {_audio_text(waveform, options)}")
    progress = _engine_progress(report, "speculative: ") if longform.is_long(waveform) else None
    options = TranscribeOptions.of(options, speculative=True, progress=progress)
    (transcription,) = whisper.transcribe_waveforms([waveform], options, [Path(request.audio).name])
    return transcription
