"""The Live view's handlers: the browser's microphone chunks -> one listener's StreamSession -> HTML and plot.

Plain functions (app.py wires them): each browser session keeps its own `Listener` in a gr.State, so two
people never see each other's audio or text. Chunks arrive at the browser's rate, often 44.1 or 48 kHz;
a streaming soxr resampler carries its filter state from chunk to chunk, so that the 16 kHz stream has
no seams at chunk boundaries (resampling each chunk alone would click at every boundary).
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go
import soxr

from specdec.app import plots
from specdec.app.highlight import token_texts
from specdec.app.jobs import MODEL_THREAD, release_freed_memory
from specdec.app.store import ModelStore, UserError, chosen_language, draft_note
from specdec.audio import SAMPLE_RATE, AudioError, to_mono
from specdec.engine.cancel import Cancelled, cancellable
from specdec.streaming.session import TARGET_SOURCE, StreamOptions, StreamSession, Update
from specdec.trace import DRAFT_MODEL, HYPOTHESIS
from specdec.whisper.tokens import timestamp_begin

SOURCE_COLOURS = {HYPOTHESIS: "#d8c8ff", DRAFT_MODEL: "#b7ebc0", TARGET_SOURCE: "#e4e4e7"}
SOURCE_DESCRIPTIONS = {
    HYPOTHESIS: "proposed by the previous hypothesis (free) and accepted",
    DRAFT_MODEL: "proposed by the draft model and accepted",
    TARGET_SOURCE: "the target's own token (a correction, a bonus token, or no proposal)",
}
STYLE = """<style>
.specdec-live { line-height: 2.0; white-space: pre-wrap; font-size: 1.1rem; min-height: 4em; }
.specdec-live .tok { border-radius: 4px; padding: 1px 0; color: #111; }
.specdec-live .tentative { color: #6b7280; font-style: italic; opacity: 0.8; }
.specdec-live .earlier { color: #111; }
.specdec-live-legend span { display: inline-block; margin-right: 0.9em; font-size: 0.9rem; }
.specdec-live-legend i { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 3px;
  margin-right: 0.3em; vertical-align: -0.1em; border: 1px solid #999; }
</style>"""
WAITING = '<div class="specdec-live"><span class="tentative">Press Record and speak.</span></div>'


IDLE_SECONDS = 20.0  # a worker with no audio for this long ends, and its listener gives up its seat


class Listener:
    """One browser session's live state: its StreamSession, fed by a worker thread.

    The stream handler only hands chunks over and returns: the page's next chunk waits until the handler
    has taken this one (`app.microphone`), so a handler that decoded inline would hold the stream back. The
    worker feeds every whole `chunk_seconds` that has arrived in one update, so when decoding is slower
    than real time the updates cover more audio each instead of falling further behind. The decoding
    itself runs on `MODEL_THREAD`, as every job does (see `app.jobs`: a second thread running torch
    would make OpenMP stop spinning between operators).
    """

    def __init__(self, session: StreamSession, work_lock: threading.Lock | None = None) -> None:
        self.session = session
        self.work_lock = work_lock or threading.Lock()  # the store's: one piece of model work at a time
        self.last_heard = time.monotonic()
        self.pending = np.zeros(0, dtype=np.float32)  # 16 kHz audio heard but not fed yet
        self.heard_seconds = 0.0
        self.input_rate: int | None = None
        self.resampler: soxr.ResampleStream | None = None
        self.last_decoded: Update | None = None
        self.lag_seconds: dict[int, float] = {}  # update index -> seconds of heard audio not in its text
        self.merged = 0  # chunks decoded together with the next one because decoding was behind
        self.stopped = False  # the recording ended; the next one starts a new listener
        self.error: Exception | None = None
        self.shown: int | None = None  # index of the update the page shows
        self._closing = False
        self._stopping = False  # Stop: the worker takes no more audio (stop() decodes what is left)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._cancel = threading.Event()  # Stop: the worker's update ends at its next target pass
        self._worker: threading.Thread | None = None

    @property
    def options(self) -> StreamOptions:
        return self.session.options

    def recording(self, now: float) -> bool:
        """Holding a seat: not stopped or closed, and heard from within IDLE_SECONDS."""
        return not (self.stopped or self._closing) and now - self.last_heard < IDLE_SECONDS

    def hear(self, rate: int, samples: np.ndarray) -> None:
        """Queue one browser chunk (any rate, mono or stereo, int or float) for the worker."""
        audio = self._resample(rate, samples)
        self.last_heard = time.monotonic()
        with self._lock:
            self.pending = np.concatenate([self.pending, audio])
            self.heard_seconds += len(audio) / SAMPLE_RATE
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="specdec-listener", daemon=True)
            self._worker.start()
        self._wake.set()

    def stop(self) -> Update:
        """End of the recording: the update the worker is decoding is cancelled (its audio goes back to
        the audio left), all the audio left is decoded in one more update, then the last hypothesis is
        committed."""
        self._stopping = True
        self._cancel.set()
        self.close()
        tail = self._take(everything=True)
        if self.resampler is not None:
            tail = np.concatenate([tail, self.resampler.resample_chunk(np.zeros(0, np.float32), last=True)])
        if len(tail) >= SAMPLE_RATE // 10:
            self._run(self.session.feed, tail)
        self.stopped = True
        return self._run(self.session.finish)

    def close(self, wait: bool = True) -> None:
        """Let the worker decode the whole chunks already heard and end (wait: until it has)."""
        self._closing = True
        self._wake.set()
        if wait and self._worker is not None:
            self._worker.join()

    @property
    def undecoded_seconds(self) -> float:
        """Audio heard that no finished update has decoded yet: not fed, or held back for the pace."""
        updates = self.session.updates
        fed = updates[-1].stream_seconds if updates else 0.0
        return max(self.heard_seconds - fed, 0.0) + self.session.held_back_seconds

    def commit_lags(self) -> list[float]:
        """Per committed word: seconds from its end in the audio heard to its text being shown (its
        update's own lag plus the audio heard while the update waited and ran)."""
        return [
            max(update.stream_seconds - word.end, 0.0) + self.lag_seconds.get(update.index, 0.0)
            for update in self.session.updates
            for word in update.committed_words
        ]

    def _work(self) -> None:
        while True:
            piece = self._take() if not self._stopping else np.zeros(0, dtype=np.float32)
            if len(piece):
                try:
                    self._run(self.session.feed, piece, cancel=self._cancel)
                except Cancelled:  # Stop came: its audio is decoded with the rest by stop()
                    with self._lock:
                        self.pending = np.concatenate([piece, self.pending])
                    return
                except Exception as error:  # shown to the user by the next handler call
                    self.error = error
                    return
                continue
            if self._closing or not self._wake.wait(IDLE_SECONDS):
                MODEL_THREAD.submit(release_freed_memory)  # what its updates freed, back to the system
                return
            self._wake.clear()

    def _take(self, everything: bool = False) -> np.ndarray:
        """Every whole chunk heard so far (or all of it), removed from `pending`."""
        chunk = round(self.options.chunk_seconds * SAMPLE_RATE)
        with self._lock:
            end = len(self.pending) if everything else len(self.pending) // chunk * chunk
            piece, self.pending = self.pending[:end], self.pending[end:]
        self.merged += max(len(piece) // chunk - 1, 0)
        return piece

    def _run(self, work: Callable[..., Update], *args, cancel: threading.Event | None = None) -> Update:
        """One session call on the model thread, holding the models (cancel: it raises `Cancelled` once
        set, the session as it was); a decoded update's delay noted."""
        update = MODEL_THREAD.submit(self._locked, cancel or threading.Event(), work, *args).result()
        if update.decoded:  # its delay first: the page reads the updates from another thread
            self.lag_seconds[update.index] = max(self.heard_seconds - update.stream_seconds, 0.0)
            self.last_decoded = update
        return update

    def _locked(self, cancel: threading.Event, work: Callable[..., Update], *args) -> Update:
        # the lock taken on the model thread, as jobs take it, so neither waits on the other
        with cancellable(cancel), self.work_lock:
            return work(*args)

    def _resample(self, rate: int, samples: np.ndarray) -> np.ndarray:
        mono = to_mono("microphone chunk", samples)
        if rate == SAMPLE_RATE:
            return mono
        if rate != self.input_rate:
            self.input_rate, self.resampler = rate, soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32")
        return self.resampler.resample_chunk(mono)


def open_listener(store: ModelStore, pair: str, language: str, chunk_seconds: float, reuse: bool) -> Listener:
    """A new listener for one recording with the UI's settings ("auto": language detected once)."""
    if not 0.2 <= float(chunk_seconds) <= 5:
        raise UserError("Chunk length must be between 0.2 and 5 seconds.")
    try:
        language = chosen_language(language)
    except ValueError as error:
        raise UserError(str(error)) from error
    options = StreamOptions(
        chunk_seconds=float(chunk_seconds), language=language, reuse_hypothesis=bool(reuse)
    )
    whisper = store.whisper(pair)
    with store.listeners_lock:
        now = time.monotonic()
        store.listeners[:] = [seat for seat in store.listeners if seat.recording(now)]
        if len(store.listeners) >= store.max_listeners:
            raise UserError(
                f"The Live view is busy: {len(store.listeners)} recordings are being transcribed on this "
                f"server (at most {store.max_listeners}). Try again when one stops; an idle one frees its "
                f"place after {IDLE_SECONDS:.0f} s."
            )
        listener = Listener(StreamSession(whisper, options), store.work_lock)
        store.listeners.append(listener)
    return listener


def hear(listener: Listener, audio) -> bool:
    """Hand Gradio's streamed (rate, samples) chunk over; True when there is a newer update to show."""
    if listener.error is not None:
        raise UserError(f"Live decoding failed: {listener.error}")
    if audio is not None:
        if not isinstance(audio, tuple) or len(audio) != 2:
            raise UserError("Microphone stream: expected a (sample_rate, samples) chunk.")
        rate, samples = audio
        if not isinstance(rate, (int, np.integer)) or rate <= 0:
            raise UserError(f"Microphone stream: bad sample rate {rate!r}.")
        try:
            listener.hear(int(rate), np.asarray(samples))
        except AudioError as error:
            raise UserError(str(error)) from error
    updates = listener.session.updates
    newest = updates[-1].index if updates else None  # a chunk without speech is news too: the status
    shown, listener.shown = listener.shown, newest
    return newest != shown


def transcript_html(listener: Listener | None, finished: bool = False) -> str:
    """Committed text plain, tentative text grey; this buffer's tokens coloured by where they came from."""
    if listener is None or listener.last_decoded is None:
        return f"{STYLE}{legend_html()}{WAITING}"
    update = listener.last_decoded
    whisper = listener.session.whisper
    tokenizer = whisper.pair.target.processor.tokenizer
    first_timestamp = timestamp_begin(whisper.pair.target.model.generation_config)
    texts = token_texts(list(update.hypothesis), tokenizer, first_timestamp)
    latest = listener.session.updates[-1]  # after the utterance ended, nothing of it is tentative
    ended = latest.index > update.index and not latest.tentative_text
    committed = len(update.hypothesis) if finished or ended else update.committed_tokens
    parts = (
        [f'<span class="earlier">{html.escape(update.earlier_text)} </span>'] if update.earlier_text else []
    )
    for index, (text, token, source) in enumerate(
        zip(texts, update.hypothesis, update.token_sources, strict=True)
    ):
        if token >= first_timestamp or not text:
            continue
        state = "committed" if index < committed else "tentative"
        style = f"background:{SOURCE_COLOURS[source]}"
        title = f"{state}; {SOURCE_DESCRIPTIONS[source]}"
        parts.append(f'<span class="tok {state}" style="{style}" title="{title}">{html.escape(text)}</span>')
    return f'{STYLE}{legend_html()}<div class="specdec-live" id="live-transcript">{"".join(parts)}</div>'


def legend_html() -> str:
    items = [
        f'<span title="{SOURCE_DESCRIPTIONS[source]}"><i style="background:{colour}"></i>{source}</span>'
        for source, colour in SOURCE_COLOURS.items()
    ]
    items.append(
        '<span><span class="tentative" style="color:#6b7280;font-style:italic">grey italic</span>'
        " = tentative (may still change)</span>"
    )
    return f'<div class="specdec-live-legend">{"".join(items)}</div>'


def stats_html(listener: Listener | None) -> str:
    """What the latest chunk held (when not speech), the latest update's figures and the running medians."""
    if listener is None:
        return ""
    heard = activity_html(listener)
    if listener.last_decoded is None:
        return heard
    decoded = [update for update in listener.session.updates if update.index in listener.lag_seconds]
    last = decoded[-1]
    latencies = [update.latency_seconds for update in decoded]
    lags = list(listener.lag_seconds.values())
    passes = [update.target_passes for update in decoded]
    sources = ", ".join(
        f"{source} {counts['accepted']}/{counts['drafted']}" for source, counts in last.proposals.items()
    )
    rests = [u for u in listener.session.updates if u.chunk_seconds and not (u.decoded or u.speech)]
    held_back = sum(update.held_back for update in listener.session.updates)
    noise = sum(plots.activity(update, listener.options.silence_dbfs) == plots.NOISE for update in rests)
    commit_lags = listener.commit_lags()
    committed = (
        f"committed words {float(np.median(commit_lags)):.1f} s behind the speaker, " if commit_lags else ""
    )
    return heard + (
        f"<p><b>Update {len(decoded)}</b> at {last.stream_seconds:.1f} s of audio: decoded in "
        f"{1000 * last.latency_seconds:.0f} ms with {last.target_passes} target passes; accepted/drafted "
        f"tokens by source: {sources or 'none'}; "
        f"text {listener.lag_seconds[last.index]:.1f} s behind live.<br>"
        f"<b>So far:</b> median decode {1000 * float(np.median(latencies)):.0f} ms per update, "
        f"median {float(np.median(lags)):.1f} s behind live, {committed}"
        f"{np.mean(passes):.1f} target passes per update; "
        f"chunks without speech not decoded: {len(rests) - noise} silent, {noise} of noise; "
        f"{listener.merged} chunks merged into the next update to keep up, {held_back} held back for the "
        f"pace ({listener.options.pace}).</p>{_draft_note(listener)}"
    )


def stopping_html(listener: Listener) -> str:
    """The status after Stop, while the audio not yet decoded is decoded and the text committed: how much
    audio is left (a loaded machine may be seconds behind)."""
    left = listener.undecoded_seconds
    doing = f"decoding the last {left:.1f} s of audio" if left >= 0.05 else "decoding the last update"
    return (
        f'<p class="specdec-activity">⏹️ Stopped after {listener.heard_seconds:.1f} s of audio: {doing}, then '
        "committing the text…</p>"
    )


def activity_html(listener: Listener) -> str:
    """While recording, a line when the latest chunk held no speech: noise ignored, or silence."""
    updates = listener.session.updates
    if listener.stopped or not updates or updates[-1].speech:
        return ""
    latest = updates[-1]
    if plots.activity(latest, listener.options.silence_dbfs) == plots.NOISE:
        return (
            f'<p class="specdec-activity">🔇 Noise without speech ({latest.level_dbfs:.0f} dBFS): ignored, '
            "nothing decoded.</p>"
        )
    return '<p class="specdec-activity">Silence: nothing to decode.</p>'


def _draft_note(listener: Listener) -> str:
    """The page's note when the draft hears a language it cannot propose in, else ''."""
    note = draft_note(listener.session.whisper, listener.session.language, "transcribe")
    return f'<p class="specdec-note"><small>ℹ️ {html.escape(note)}</small></p>' if note else ""


def latency_figure(listener: Listener | None) -> go.Figure:
    """Latency and target passes per update over the stream, shaded by what each chunk held."""
    if listener is None:
        return plots.live_figure([], {}, None, 0.0)
    options = listener.options
    return plots.live_figure(
        listener.session.updates, listener.lag_seconds, options.chunk_seconds, options.silence_dbfs
    )
