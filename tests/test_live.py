"""The Live view's handlers without a browser: browser-rate chunks in, exact updates and HTML out."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soxr

from specdec.app import live, live_tab
from specdec.app import store as stores
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import TranscribeOptions
from specdec.streaming.session import StreamSession

ASSETS = Path(__file__).parent.parent / "assets"
BROWSER_RATE = 48_000
DRAFT = "separate"


@pytest.fixture(scope="module")
def store(demo_models) -> stores.ModelStore:
    """The demo pair; seats for the listeners these tests leave open (the limit has its own test)."""
    pairs = {DRAFT: (str(demo_models["target"]), str(demo_models["draft-separate"]))}
    return stores.ModelStore(pairs, "cpu", max_listeners=16)


def speech(name: str = "en-weather", seconds: float = 4.0) -> np.ndarray:
    return load_audio(ASSETS / f"{name}.wav")[: round(seconds * SAMPLE_RATE)]


def browser_chunks(waveform: np.ndarray, seconds: float = 0.1) -> list[tuple[int, np.ndarray]]:
    """What Gradio's streaming microphone hands over: (48000, int16 stereo) chunks of ~0.1 s."""
    at_48k = soxr.resample(waveform, SAMPLE_RATE, BROWSER_RATE)
    pcm = np.clip(at_48k * 32768, -32768, 32767).astype(np.int16)
    stereo = np.stack([pcm, pcm], axis=1)
    size = round(seconds * BROWSER_RATE)
    return [(BROWSER_RATE, stereo[start : start + size]) for start in range(0, len(stereo), size)]


def listen(store, waveform, language="en", **options) -> live.Listener:
    listener = live.open_listener(store, DRAFT, language, options.pop("chunk_seconds", 1.0), True)
    for chunk in browser_chunks(waveform):
        live.hear(listener, chunk)
    listener.stop()
    return listener


def fed_audio(session: StreamSession) -> float:
    return session.stream_seconds


def test_every_update_is_the_target_alone_and_no_audio_is_lost(store):
    waveform = speech(seconds=3.0)
    recorded: list[np.ndarray] = []
    listener = live.open_listener(store, DRAFT, "en", 1.0, True)
    feed = listener.session.feed
    listener.session.feed = lambda piece: (recorded.append(piece), feed(piece))[1]  # a spy, same feed
    for chunk in browser_chunks(waveform):
        live.hear(listener, chunk)
        # as a browser's chunks come, in time: each whole second heard is taken by the worker before the
        # next chunk (fed all at once, a late-starting worker on a loaded machine took the recording whole)
        deadline = time.monotonic() + 30
        while len(listener.pending) >= SAMPLE_RATE and time.monotonic() < deadline:
            time.sleep(0.01)
    listener.stop()
    stream = np.concatenate(recorded)
    assert abs(len(stream) - len(waveform)) <= 64  # the whole recording reached the session
    decoded = [update for update in listener.session.updates if update.decoded]
    assert len(decoded) >= 2
    whisper = listener.session.whisper
    for update in decoded:
        buffer = stream[
            round(update.buffer_start_seconds * SAMPLE_RATE) : round(update.buffer_end_seconds * SAMPLE_RATE)
        ]
        options = TranscribeOptions(
            language="en", timestamps=True, prompt_ids=update.prompt_ids, speculative=False
        )
        (alone,) = whisper.transcribe_waveforms([buffer], options)
        assert update.hypothesis == alone.token_ids


def test_resampling_has_no_seams_at_chunk_boundaries(store):
    """The streamed 16 kHz audio matches resampling the whole recording at once."""
    waveform = speech(seconds=2.0)
    listener = live.open_listener(store, DRAFT, "en", 5.0, True)
    pieces = [listener._resample(rate, samples) for rate, samples in browser_chunks(waveform)]
    pieces.append(listener.resampler.resample_chunk(np.zeros(0, np.float32), last=True))
    streamed = np.concatenate(pieces)
    whole = soxr.resample(
        browser_chunks(waveform, seconds=10)[0][1].mean(axis=1) / 32768, BROWSER_RATE, SAMPLE_RATE
    )
    assert len(streamed) == len(whole)
    assert np.max(np.abs(streamed - whole)) < 1e-3


def test_slow_decoding_merges_chunks_instead_of_falling_behind(store):
    """Live updates hold the store's lock like every model job (one policy: a Compare run's timings are
    its own); while a job holds it, 4 s of audio arrive and no update decodes."""
    listener = live.open_listener(store, DRAFT, "en", 0.5, True)
    chunks = browser_chunks(speech(seconds=4.0))
    with store.work_lock:
        for chunk in chunks:
            live.hear(listener, chunk)
        time.sleep(0.2)
        assert listener.session.updates == []
    listener.stop()
    updates = listener.session.updates
    assert listener.merged >= 4 and len(updates) < 8  # 8 half-second chunks, fewer updates
    assert abs(fed_audio(listener.session) - 4.0) < 0.01


def test_two_listeners_keep_their_own_audio_and_text(store):
    """Two pages recording at once (their chunks interleaved): each gets what it would get alone."""
    english, german = speech("en-weather", 2.0), speech("de-bahnhof", 2.0)
    alone = [
        listen(store, english, "en").session.committed_text,
        listen(store, german, "de").session.committed_text,
    ]
    first = live.open_listener(store, DRAFT, "en", 1.0, True)
    second = live.open_listener(store, DRAFT, "de", 1.0, True)
    for chunk_en, chunk_de in zip(browser_chunks(english), browser_chunks(german), strict=True):
        live.hear(first, chunk_en)
        live.hear(second, chunk_de)
    first.stop(), second.stop()
    assert [first.session.committed_text, second.session.committed_text] == alone
    assert alone[0] != alone[1]


def test_views_show_committed_tentative_and_sources(store):
    listener = live.open_listener(store, DRAFT, "en", 1.0, True)
    for chunk in browser_chunks(speech(seconds=3.0)):
        live.hear(listener, chunk)
    listener.close()  # the whole chunks are decoded; the recording goes on
    # random weights commit text only now and then (test_streaming covers when); show half as committed
    update = listener.last_decoded
    listener.last_decoded = dataclasses.replace(update, committed_tokens=len(update.hypothesis) // 2)
    page = live.transcript_html(listener)
    assert 'class="tok committed"' in page and 'class="tok tentative"' in page
    assert "background:" + live.SOURCE_COLOURS["draft"] in page
    listener.stop()
    assert 'class="tok tentative"' not in live.transcript_html(listener, finished=True)
    stats = live.stats_html(listener)
    assert "target passes" in stats and "behind live" in stats
    figure = live.latency_figure(listener)
    assert len(figure.data[0].x) == len([u for u in listener.session.updates if u.decoded])


def test_bad_settings_and_chunks_are_user_errors(store):
    with pytest.raises(stores.UserError, match="Chunk length"):
        live.open_listener(store, DRAFT, "en", 30.0, True)
    with pytest.raises(stores.UserError):
        live.open_listener(store, DRAFT, "klingon", 1.0, True)
    listener = live.open_listener(store, DRAFT, "en", 1.0, True)
    with pytest.raises(stores.UserError, match="sample rate"):
        live.hear(listener, (0, np.zeros(100, np.int16)))
    with pytest.raises(stores.UserError, match="NaN"):
        live.hear(listener, (16_000, np.full(100, np.nan, np.float32)))
    assert live.hear(listener, None) is False
    assert "Press Record" in live.transcript_html(None)


def test_the_live_view_seats_a_bounded_number_of_recordings(store, monkeypatch):
    """The next page past the limit is told the view is busy; a stopped or idle recording frees its seat."""
    recording = [listener for listener in store.listeners if listener.recording(time.monotonic())]
    monkeypatch.setattr(store, "max_listeners", len(recording) + 1)
    first = live.open_listener(store, DRAFT, "en", 1.0, True)
    with pytest.raises(stores.UserError, match=r"The Live view is busy: .* Try again when one stops"):
        live.open_listener(store, DRAFT, "en", 1.0, True)
    first.stop()
    second = live.open_listener(store, DRAFT, "en", 1.0, True)
    second.last_heard -= live.IDLE_SECONDS  # nothing heard for that long: the page went away
    live.open_listener(store, DRAFT, "en", 1.0, True).stop()


def test_an_idle_listener_ends_its_worker(store, monkeypatch):
    monkeypatch.setattr(live, "IDLE_SECONDS", 0.3)
    before = threading.active_count()
    listener = live.open_listener(store, DRAFT, "en", 1.0, True)
    for chunk in browser_chunks(speech(seconds=1.0)):
        live.hear(listener, chunk)
    listener._worker.join(timeout=30)  # decodes the second heard, then waits 0.3 s for more and ends
    assert not listener._worker.is_alive() and threading.active_count() <= before


def test_stop_says_so_at_once_and_shows_the_committed_text_once_decoded(store):
    """The Stop handler's first answer comes while the models are busy (another job holds them here), so
    the page never says "processing" about a recording that has stopped, and says how much audio is still
    to decode; then the committed text."""

    listener = live.open_listener(store, DRAFT, "en", 1.0, True)
    for chunk in browser_chunks(speech(seconds=2.5)):
        live.hear(listener, chunk)
    answers = live_tab.stop_listening(listener)
    with store.work_lock, concurrent.futures.ThreadPoolExecutor(1) as pool:
        _, transcript, status, figure = pool.submit(next, answers).result(timeout=60)
    assert "Stopped after 2.5 s of audio: decoding the last" in status and not listener.stopped
    _, transcript, status, figure = list(answers)[-1]  # the rest decoded, the text committed
    assert listener.stopped and "target passes" in status and 'class="tok tentative"' not in transcript


def test_stop_cancels_the_update_running_and_decodes_all_that_is_left_in_one(store, monkeypatch):
    """Stop while the worker is behind (4.2 s of speech arrive during a slow update, the last 0.2 s short
    of a chunk): the update running is cancelled at its next target pass (its audio back with the rest),
    then all the audio left is decoded once, together, and committed: one decoding after Stop whatever the
    backlog, and every second heard is in the final text's audio."""
    listener = live.open_listener(store, DRAFT, "en", 0.5, True)
    session, decoded = listener.session, []
    decode = session._decode

    def slow(waveform=None):  # a spy: the first decoding goes on only once Stop has been pressed
        decoded.append(time.monotonic())
        if len(decoded) == 1:
            listener._cancel.wait(30)
        return decode(waveform)

    monkeypatch.setattr(session, "_decode", slow)
    chunks, deadline = iter(browser_chunks(speech(seconds=4.2))), time.monotonic() + 30
    while not decoded and time.monotonic() < deadline:  # until the worker starts decoding the speech
        live.hear(listener, next(chunks))
        time.sleep(0.02)
    for chunk in chunks:
        live.hear(listener, chunk)
    stopped = time.monotonic()
    listener.stop()
    updates = [update for update in session.updates if update.decoded]
    assert len(decoded) == 2 and decoded[1] >= stopped  # the one running, cancelled; then one more
    assert len(updates) == 1 and updates[0].buffer_start_seconds == 0.0  # it heard the cancelled audio too
    assert abs(fed_audio(session) - 4.2) < 0.01 and listener.stopped
    assert session.committed_text and not session.tentative_text
