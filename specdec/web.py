"""The web app's model store and handlers: plain functions that app.py wires into Gradio.

The UI offers only the drafts in the store's allow-list; local folders come in only through the server's
own flags. Models load once and are reused; every newly loaded pair is warmed up before its first timing.
"""

from __future__ import annotations

import dataclasses
import html
import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import soundfile as sf
import torch
from transformers import GenerationConfig
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specdec import compare as comparing
from specdec import highlight, longform, plots, wer
from specdec.audio import SAMPLE_RATE, AudioError, load_audio
from specdec.decoding import language_token_id, timestamp_begin
from specdec.models import (
    LoadedModel,
    PairError,
    default_pair,
    load_model,
    make_pair,
    pick_device,
    unavailable,
)
from specdec.options import DecodeOptions
from specdec.trace import DecodeResult
from specdec.transcriber import SpeculativeWhisper

# the pairs the app offers (label -> (target, draft)); the first for the device is the default
DEFAULT_PAIRS = {
    "whisper-base ← whisper-tiny.en (74M ← 39M, bundled)": ("base", "tiny.en"),
    "whisper-large-v3 ← whisper-tiny (1550M ← 39M)": ("large-v3", "tiny"),
    "whisper-large-v3 ← distil-large-v3 (shares the encoder)": ("large-v3", "distil-large-v3"),
    "whisper-large-v3 ← whisper-large-v3-turbo (4 decoder layers)": ("large-v3", "large-v3-turbo"),
}
DEMO_PAIRS = {
    "demo target ← demo draft, separate encoder and vocabulary (like whisper-tiny)": "draft-separate",
    "demo target ← demo draft, shared encoder (like distil-large-v3)": "draft-shared",
}
DEMO_CACHE = Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec")) / "demo-models"
OFFLINE_HINT = (
    "Without network access, choose the bundled pair, whisper-base ← whisper-tiny.en "
    "(python app.py without --target and --draft offers it)."
)
MAX_APP_SECONDS = 600.0  # the longest clip the app decodes (app.py --max-seconds, SPECDEC_MAX_SECONDS)
DECODING, DRAWING = 0.2, 0.95  # where decoding starts and ends on the progress bar
Report = Callable[..., None]  # Gradio's progress bar, called as report(fraction, desc=message)


LANGUAGE_IDS = {f"<|{code}|>": index for index, code in enumerate(LANGUAGES)}  # for checking names only


class UserError(ValueError):
    """A problem the person using the app can fix (bad audio, bad options, models unavailable)."""


@dataclass
class ModelStore:
    """The allowed target/draft pairs, loaded on first use and kept; one lock for the model work.

    Models are shared between pairs (one whisper-large-v3 for all its drafts)."""

    pairs: dict[str, tuple[str, str]]  # label shown in the UI -> (target, draft): hub ids, names or folders
    device: str = "auto"
    warm_up: bool = True  # off on ZeroGPU, where no CUDA work may run outside a GPU task
    max_seconds: float = MAX_APP_SECONDS  # longer clips are refused before they are decoded
    _models: dict[str, LoadedModel] = field(default_factory=dict)
    _whispers: dict[str, SpeculativeWhisper] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _runs: itertools.count = field(default_factory=itertools.count)

    @property
    def default_pair(self) -> str:
        return next(iter(self.pairs))

    def whisper(self, label: str) -> SpeculativeWhisper:
        """The pair for one allowed label, loaded and warmed up on first use."""
        if label not in self.pairs:
            raise UserError(f"Unknown model pair {label!r}; choose one from the list.")
        with self._lock:
            if label not in self._whispers:
                self._whispers[label] = self._load(*self.pairs[label])
            return self._whispers[label]

    def loaded(self, label: str) -> SpeculativeWhisper | None:
        return self._whispers.get(label)

    def choices(self) -> list[tuple[str, str]]:
        """(shown, value) for a dropdown: a pair whose weights cannot be had here says so in its name."""
        shown = []
        for label, names in self.pairs.items():
            reasons = [reason for name in names if (reason := unavailable(name))]
            shown.append((f"{label} · unavailable: {reasons[0]}" if reasons else label, label))
        return shown

    def next_baseline_first(self) -> bool:
        """Alternate which run goes first, one comparison to the next."""
        return next(self._runs) % 2 == 0

    def _load(self, target_name: str, draft_name: str) -> SpeculativeWhisper:
        device = pick_device(self.device)
        dtype = torch.float16 if device.type == "cuda" else torch.float32
        try:
            models = [self._model(name, device, dtype) for name in (target_name, draft_name)]
            whisper = SpeculativeWhisper.from_pair(make_pair(*models))
        except PairError as error:
            message = f"Could not load the models {target_name} and {draft_name}. {OFFLINE_HINT}"
            raise UserError(f"{message} (Details: {error})") from error
        if self.warm_up:
            comparing.warm_up(whisper)
        return whisper

    def _model(self, name: str, device: torch.device, dtype: torch.dtype) -> LoadedModel:
        if name not in self._models:
            self._models[name] = load_model(name, device, dtype)
        return self._models[name]


def pairs_by_device(device: str = "auto") -> dict[str, tuple[str, str]]:
    """DEFAULT_PAIRS with the device's default first: the bundled real pair on a CPU, large-v3's on a GPU."""
    default = default_pair(device)
    first = [label for label, pair in DEFAULT_PAIRS.items() if pair == default]
    return {label: DEFAULT_PAIRS[label] for label in first + [p for p in DEFAULT_PAIRS if p not in first]}


def pairs_for(target: str, drafts: list[str]) -> dict[str, tuple[str, str]]:
    """One pair per draft for the same target, labelled by name."""
    return {f"{target} ← {draft}": (target, draft) for draft in drafts}


def demo_store(device: str = "auto") -> ModelStore:
    """The random-weight demo target and drafts, built into the cache folder on first use."""
    if not (DEMO_CACHE / "draft-shared" / "config.json").exists():
        from specdec.demo_models import build_demo_models

        build_demo_models(DEMO_CACHE)
    return ModelStore(demo_pairs(DEMO_CACHE), device)


def demo_pairs(folder: Path) -> dict[str, tuple[str, str]]:
    """The demo pairs of demo checkpoints written under `folder` (`demo_models.build_demo_models`)."""
    return {label: (str(folder / "target"), str(folder / draft)) for label, draft in DEMO_PAIRS.items()}


@dataclass(frozen=True)
class CompareRequest:
    """What the Compare view asks for, as the UI's widgets give it."""

    audio: str | None
    pair: str  # a label of the store's pairs
    language: str = "auto"
    task: str = "transcribe"
    timestamps: bool = False
    draft_length: str = "adaptive"  # "adaptive" or "fixed"
    num_draft_tokens: int = 5
    temperature: float = 0.0
    seed: int | None = 0
    reference: str = ""
    baseline_first: bool | None = None  # None: alternate (ZeroGPU's worker cannot keep the count)
    long_form: str = "sequential"  # audio over 30 s: "sequential" (generate()'s own) or "chunked"

    def options(self) -> DecodeOptions:
        try:
            return DecodeOptions(
                language=chosen_language(self.language),
                task=self.task,
                timestamps=bool(self.timestamps),
                temperature=float(self.temperature),
                seed=None if self.seed is None else int(self.seed),
                num_draft_tokens=int(self.num_draft_tokens),
                adaptive=self.draft_length == "adaptive",
                # chunks are decoded as a batch: k from its measured costs (a seed keeps sampling fixed)
                cost_aware=self.draft_length == "adaptive"
                and self.long_form == "chunked"
                and float(self.temperature) == 0,
            )
        except ValueError as error:
            raise UserError(str(error)) from error

    def check_long_form(self) -> None:
        if self.long_form not in longform.LONG_FORM_MODES:
            modes = " or ".join(longform.LONG_FORM_MODES)
            raise UserError(f"Unknown long-audio mode {self.long_form!r}; choose {modes}.")


def gpu_seconds(request: CompareRequest, progress: object = None) -> int:
    """ZeroGPU's time limit for one request (`spaces.GPU(duration=...)` calls this with the task's
    arguments): a minute, plus 20 s per minute of audio for the two decodes, at most 5 minutes."""
    try:
        seconds = sf.info(request.audio).duration
    except (TypeError, sf.SoundFileError, RuntimeError, OSError):
        seconds = 30.0  # the task itself reports the unreadable file
    return int(min(60 + seconds / 3, 300))


def chosen_language(language: str | None) -> str | None:
    """The UI's language choice: None for auto-detection, else a checked Whisper language code or name."""
    if language in ("auto", "", None):
        return None
    language_token_id(GenerationConfig(lang_to_id=LANGUAGE_IDS), language)  # ValueError if unknown
    return language


@dataclass(frozen=True)
class CompareView:
    """Everything the Compare view shows for one clip."""

    baseline_text: str
    speculative_text: str
    verdict_html: str
    tokens_html: str
    metrics: list[list[str]]
    timeline: go.Figure
    steps: go.Figure
    breakdown: go.Figure
    windows: go.Figure  # the file's timeline: one bar per decoded window (or chunk)
    wer_html: str
    comparison: comparing.Comparison
    spans: list[highlight.TokenSpan]
    note: str = ""  # about the draft, e.g. an English-only draft on other speech


def compare_clip(store: ModelStore, request: CompareRequest, progress: Report | None = None) -> CompareView:
    """Load the clip, decode it both ways, and build every output of the Compare view.

    progress (a gr.Progress) follows a long clip window by window or chunk by chunk, both runs."""
    report = _no_report if progress is None else progress  # not `or`: an idle gr.Progress is falsy
    whisper, options, waveform = _prepare(store, request, report)
    report(DECODING, desc=f"Decoding {_audio_text(waveform, request)}: target alone and speculative")
    comparison = comparing.compare(
        whisper, waveform, options, _baseline_first(store, request), Path(request.audio).name,
        request.long_form, _engine_progress(report),
    )  # fmt: skip
    report(DRAWING, desc="Drawing")
    return build_view(whisper, comparison, request.reference, len(waveform) / SAMPLE_RATE)


def _no_report(*args, **kwargs) -> None:
    pass


def _engine_progress(report: Report, prefix: str = "") -> longform.Progress:
    """The engine's progress(fraction, message) shown on Gradio's bar between decoding and drawing."""
    return lambda fraction, message: report(
        DECODING + (DRAWING - DECODING) * fraction, desc=f"{prefix}{message}"
    )


def _audio_text(waveform: np.ndarray, request: CompareRequest) -> str:
    """The clip's length for the progress bar, and its long-form mode when it has one."""
    seconds = len(waveform) / SAMPLE_RATE
    if longform.is_long(waveform):
        return f"{seconds:.0f} s, long-form {request.long_form}"
    return f"{seconds:.1f} s"


def _prepare(
    store: ModelStore, request: CompareRequest, report: Report
) -> tuple[SpeculativeWhisper, DecodeOptions, np.ndarray]:
    """Check the request, then the draft's pair (loaded on first use) and the clip at 16 kHz."""
    if not request.audio:
        raise UserError("Record or upload a clip first (or click one of the examples).")
    options = request.options()
    request.check_long_form()
    report(0.05, desc="Loading models")
    whisper = store.whisper(request.pair)
    report(0.15, desc="Reading audio")
    return whisper, options, _read_audio(request.audio, store.max_seconds)


def _token_spans(whisper: SpeculativeWhisper, result) -> list[highlight.TokenSpan]:
    target = whisper.pair.target
    begin = timestamp_begin(target.model.generation_config)
    return highlight.token_spans(result, target.processor.tokenizer, begin)


def _baseline_first(store: ModelStore, request: CompareRequest) -> bool:
    return store.next_baseline_first() if request.baseline_first is None else request.baseline_first


def build_view(
    whisper: SpeculativeWhisper,
    comparison: comparing.Comparison,
    reference: str,
    audio_seconds: float | None = None,
) -> CompareView:
    """The Compare view's outputs from a finished comparison (of audio_seconds of audio)."""
    spans = _token_spans(whisper, comparison.speculative.result)
    baseline, speculative = comparison.baseline.result, comparison.speculative.result
    note = draft_note(whisper, speculative.language, comparison.options.task)
    return CompareView(
        baseline_text=comparison.baseline.text,
        speculative_text=comparison.speculative.text,
        verdict_html=verdict_html(comparison, note),
        tokens_html=highlight.spans_html(spans),
        metrics=comparing.metrics_rows(comparison),
        timeline=plots.timeline_figure(baseline, speculative),
        steps=plots.steps_figure(speculative),
        breakdown=plots.breakdown_figure(baseline, speculative),
        windows=plots.windows_figure(speculative, audio_seconds),
        wer_html=wer_html(reference, comparison),
        comparison=comparison,
        spans=spans,
        note=note,
    )


def verdict_html(comparison: comparing.Comparison, note: str = "") -> str:
    """A green badge for identical outputs (or expected sampling differences), a loud red one otherwise;
    note: a line about the draft (e.g. an English-only draft on other speech)."""
    message, good = comparing.verdict(comparison)
    icon, colour, border = ("✅", "#166534", "#22c55e") if good else ("🚨", "#991b1b", "#ef4444")
    if good and not comparison.identical:
        icon, colour, border = ("🎲", "#854d0e", "#eab308")
    speed = f"decode {comparison.decode_speedup:.2f}x · acceptance " + (
        "–"
        if comparison.speculative.result.acceptance_rate is None
        else f"{comparison.speculative.result.acceptance_rate:.0%}"
    )
    note = f'<br><small class="specdec-note">ℹ️ {html.escape(note)}</small>' if note else ""
    return (
        f'<div class="specdec-verdict" style="border:2px solid {border};color:{colour};border-radius:8px;'
        f'padding:8px 12px;font-weight:600">{icon} {message}<br><small>{speed}</small>{note}</div>'
    )


def wer_html(reference: str, comparison: comparing.Comparison) -> str:
    """WER of both transcripts against the reference, with each word alignment; empty without a reference."""
    if not reference or not reference.strip():
        return "<i>Give a reference text to see the word error rate of both transcripts.</i>"
    translated = comparison.options.task == "translate"
    language = "en" if translated else comparison.speculative.result.language
    rows = []
    for name, transcription in (
        ("target alone", comparison.baseline),
        ("speculative", comparison.speculative),
    ):
        try:
            errors = wer.word_errors(reference, transcription.text, language)
        except ValueError as error:
            return f"<i>{error}</i>"
        counts = f"{errors.substitutions} sub · {errors.deletions} del · {errors.insertions} ins"
        rows.append(
            f"<p><b>{name}</b>: WER {errors.wer:.1%} ({counts}, {errors.num_reference_words} reference words)"
            f'<br><span class="specdec-alignment">{wer.alignment_html(errors)}</span></p>'
        )
    return "".join(rows)


def _read_audio(path: str, max_seconds: float) -> np.ndarray:
    """The clip at 16 kHz, or a UserError naming the file (not the server's temporary path).

    A clip over max_seconds is refused from its header, before it is decoded."""
    try:
        return load_audio(path, max_seconds=max_seconds)
    except AudioError as error:
        raise UserError(str(error).replace(str(path), Path(path).name)) from error


def transcribe_clip(
    store: ModelStore, request: CompareRequest, progress: Report | None = None
) -> tuple[str, str, dict]:
    """Speculative decoding only: the transcript, its highlighted tokens and its statistics.

    Audio over 30 s is decoded long-form (request.long_form), progress following it."""
    report = _no_report if progress is None else progress  # not `or`: an idle gr.Progress is falsy
    whisper, options, waveform = _prepare(store, request, report)
    report(DECODING, desc=f"Decoding {_audio_text(waveform, request)}")
    name = Path(request.audio).name
    if longform.is_long(waveform):
        report_engine = _engine_progress(report, "speculative: ")
        transcription = whisper.transcribe_long(
            waveform, options, True, name, request.long_form, progress=report_engine
        )
    else:
        transcription = whisper.transcribe_waveform(waveform, options, name=name)
    spans = _token_spans(whisper, transcription.result)
    stats = {
        "language": transcription.language,
        "note": draft_note(whisper, transcription.language, options.task),
        "speculative": transcription.result.stats(),
        "windows": _windows(transcription.result),
    }
    return transcription.text, highlight.spans_html(spans), stats


def _windows(result: DecodeResult) -> list[dict]:
    """The seek table for API clients: each window's start in the file, length and chunk."""
    return [dataclasses.asdict(window) for window in result.windows]


def details(view: CompareView) -> dict:
    """Both runs' statistics and the labelled tokens, for the JSON panel and API clients."""
    comparison = view.comparison
    return {
        "identical": comparison.identical,
        "language": comparison.speculative.result.language,
        "note": view.note,
        "baseline_first": comparison.baseline_first,
        "decode_speedup": comparison.decode_speedup,
        "baseline": comparison.baseline.result.stats(),
        "speculative": comparison.speculative.result.stats(),
        "windows": _windows(comparison.speculative.result),
        "tokens": highlight.highlighted_pairs(view.spans),
    }


def store_summary(store: ModelStore) -> str:
    """The default pair's models: names, sizes, where the weights came from, device and precision."""
    whisper = store.loaded(store.default_pair)
    if whisper is None:
        return f"Models: {store.default_pair} (not loaded yet)"
    target, draft = whisper.pair.target, whisper.pair.draft
    parameter = next(target.model.parameters())
    return (
        f"Target {model_summary(target)} ← draft {model_summary(draft)}; on {parameter.device}, "
        f"{str(parameter.dtype).removeprefix('torch.')}."
    )


def model_summary(model: LoadedModel) -> str:
    """'openai/whisper-base (73M parameters, bundled in ...)'."""
    return f"{model.name} ({model.num_parameters / 1e6:.0f}M parameters, {model.source or 'loaded'})"


def draft_note(whisper: SpeculativeWhisper, language: str | None, task: str) -> str:
    """A line for the page when an English-only draft meets another language or a translation, else ''."""
    if whisper.pair.draft_fits(language, task):
        return ""
    what = "translating" if task == "translate" else f"on {language or 'non-English'} audio"
    return (
        f"{whisper.pair.draft.name} drafts English only: {what} its drafts are mostly rejected, and adaptive "
        "drafting pauses it. The output is still the target's own."
    )
