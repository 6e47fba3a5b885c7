"""Voice activity (Silero VAD, `specdec.vad`): a live stream decodes only its speech, and a long file can
skip its long silences. The noise is planted here: seeded white and pink noise at -25 dBFS, far above the
-60 dBFS energy gate, so that only the VAD can tell it from speech."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from specdec import vad
from specdec.app import compare, live, plots, views
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.options import TranscribeOptions
from specdec.streaming.session import StreamOptions, StreamSession
from specdec.trace import DecodeResult
from specdec.whisper.tokens import TIMESTAMP_SECONDS, timestamp_begin

ASSETS = Path(__file__).parent.parent / "assets"
NOISE_DBFS = -25.0


def noise(seconds: float, colour: str, seed: int, dbfs: float = NOISE_DBFS) -> np.ndarray:
    """Seeded white noise, or pink (power falling as 1/f), at an RMS level of dbfs."""
    samples = np.random.default_rng(seed).standard_normal(round(seconds * SAMPLE_RATE))
    if colour == "pink":
        spectrum = np.fft.rfft(samples)
        spectrum[1:] /= np.sqrt(np.arange(1, len(spectrum)))
        samples = np.fft.irfft(spectrum, len(samples))
    return (samples / np.sqrt(np.mean(samples**2)) * 10 ** (dbfs / 20)).astype(np.float32)


def clip(name: str, seconds: float | None = None) -> np.ndarray:
    waveform = load_audio(next(path for path in ASSETS.glob(f"{name}.*") if path.suffix != ".txt"))
    return waveform if seconds is None else waveform[: round(seconds * SAMPLE_RATE)]


def chunks(waveform: np.ndarray) -> list[np.ndarray]:
    return [waveform[start : start + SAMPLE_RATE] for start in range(0, len(waveform), SAMPLE_RATE)]


@pytest.fixture(scope="module")
def gapped() -> np.ndarray:
    """A long file (31.3 s): 6.4 s of speech, 18 s of pink noise, 6.9 s of speech (from 24.4 s)."""
    return np.concatenate([clip("en-weather"), noise(18, "pink", 6), clip("en-fellow-americans")])


def test_the_speech_of_a_known_clip_is_found():
    """en-jfk's four phrases, after 2 s of silence and before 3 s of noise: found in the file, followed
    chunk by chunk in a stream, with Silero's own probabilities."""
    threads = torch.get_num_threads()
    waveform = np.concatenate([np.zeros(2 * SAMPLE_RATE, np.float32), clip("en-jfk"), noise(3, "pink", 0)])
    found = vad.speech_regions(waveform, min_silence_seconds=0.3, pad_seconds=0.0)
    regions = [(start / SAMPLE_RATE, stop / SAMPLE_RATE) for start, stop in found]
    assert torch.get_num_threads() == threads  # importing silero_vad set one thread: undone
    assert 3 <= len(regions) <= 5 and all(2.0 <= start < stop <= 13.5 for start, stop in regions)
    assert sum(stop - start for start, stop in regions) > 7.0  # the pauses between phrases left out

    detector = vad.SpeechDetector()
    heard = [detector.hear(chunk).speech for chunk in chunks(waveform)]
    assert not any(heard[:2]) and all(heard[2:13]) and not any(heard[14:])  # 13: where the noise sets in

    package, _ = vad.silero()
    with warnings.catch_warnings():  # its loader's deprecations
        warnings.simplefilter("ignore", DeprecationWarning)
        stateful = package.load_silero_vad()  # Silero's own wrapper, its state inside the model
    one_second = waveform[2 * SAMPLE_RATE : 3 * SAMPLE_RATE - 128]  # 31 whole windows
    theirs = [stateful(torch.from_numpy(window), SAMPLE_RATE).item() for window in chunks_of(one_second)]
    ours, _, _ = vad.window_probabilities(torch.from_numpy(one_second)[None], *vad.initial_state())
    assert ours[0].tolist() == pytest.approx(theirs, abs=1e-6)


def chunks_of(waveform: np.ndarray, size: int = vad.WINDOW_SAMPLES) -> list[np.ndarray]:
    return [waveform[start : start + size] for start in range(0, len(waveform) - size + 1, size)]


def test_noise_between_utterances_is_never_decoded(separate_pair):
    """Two short utterances (en-jfk's first words, then its second phrase's) with noise around them, in
    1 s chunks: only the speech chunks are decoded; each utterance is committed as the noise goes on,
    without decoding it, and the next is decoded from just before its speech, the first as its prompt."""
    jfk, pause = clip("en-jfk"), np.zeros(round(0.3 * SAMPLE_RATE), np.float32)
    stream = np.concatenate([
        noise(2, "white", 1), jfk[round(0.2 * SAMPLE_RATE) : round(0.9 * SAMPLE_RATE)], pause,
        noise(3, "pink", 2), jfk[round(3.2 * SAMPLE_RATE) : round(3.9 * SAMPLE_RATE)], pause,
        noise(2, "white", 3),
    ])  # fmt: skip
    options = StreamOptions(language="en", reuse_hypothesis=False, use_draft=False, max_load=None)
    session = StreamSession(separate_pair, options)  # the target alone, every speech chunk decoded
    updates, buffers = [], []
    for chunk in chunks(stream):
        updates.append(session.feed(chunk))
        buffers.append(session.buffer)
    spoken = [False, False, True, False, False, False, True, False, False]
    assert [update.speech for update in updates] == spoken
    assert [update.decoded for update in updates] == spoken
    assert [update.target_passes > 0 for update in updates] == spoken  # no pass in a noise chunk
    texts = [update.committed_text for update in updates]
    assert texts[2] == "" and updates[2].tentative_text  # two hypotheses have not agreed yet
    assert texts[3] == texts[4] == texts[5] == updates[2].tentative_text and not updates[3].tentative_text
    assert texts[7] == texts[8] and texts[7].startswith(texts[5]) and not updates[7].tentative_text

    second = updates[6]  # decoded from 0.5 s before its speech, the first utterance as its prompt
    assert second.buffer_start_seconds == pytest.approx(5.5) and second.prompt_ids
    assert np.array_equal(buffers[6], stream[round(5.5 * SAMPLE_RATE) : 7 * SAMPLE_RATE])
    assert not any(len(buffers[i]) for i in (0, 1, 3, 4, 5, 7, 8))  # nothing kept between utterances


def test_a_stream_of_noise_commits_nothing_and_runs_no_pass(separate_pair, monkeypatch):
    """White and pink noise through the Live view's listener: nothing decoded, and the page says the noise
    is ignored. Quieter than the energy gate, the VAD's network does not even run."""
    loud = np.concatenate([noise(2, "white", 4), noise(2, "pink", 5)])
    listener = live.Listener(StreamSession(separate_pair, StreamOptions(language="en")))
    for chunk in chunks(loud):
        live.hear(listener, (SAMPLE_RATE, chunk))
    listener.close()  # every whole chunk fed
    updates = listener.session.updates
    assert sum(update.chunk_seconds for update in updates) == 4.0  # chunks heard at once are fed together
    assert not any(update.speech or update.decoded for update in updates)
    assert sum(update.target_passes for update in updates) == 0
    assert "Noise without speech" in live.stats_html(listener)
    assert {shape.name for shape in live.latency_figure(listener).layout.shapes if shape.name} == {
        plots.NOISE
    }

    session = listener.session
    monkeypatch.setattr(session.detector, "hear", lambda chunk: pytest.fail("ran the VAD on a quiet chunk"))
    assert not session.feed(noise(1, "white", 7, dbfs=-70.0)).speech
    stopped = session.finish()
    assert stopped.committed_text == "" and len(session.buffer) == 0


def test_long_silences_are_skipped_and_times_stay_the_files(separate_pair, gapped):
    """Two speech pieces, the noise between skipped (chunked mode: a chunk per piece, decoded as a batch);
    both runs on the same pieces, so the badge still checks identity; the windows where the pieces lie."""
    # random weights: any text will do
    options = TranscribeOptions(language="en", max_new_tokens=8, long_form="chunked", skip_silence=True)
    comparison = compare.compare(separate_pair, gapped, options)
    assert comparison.identical and comparison.speech_only and "same speech" in views.verdict(comparison)[0]
    windows = comparison.speculative.result.windows
    (start, stop), (second_start, second_stop) = [
        (w.start_seconds, w.start_seconds + w.seconds) for w in windows
    ]
    assert start == 0.0 and 6.4 < stop < 7.0  # the first utterance, and 0.4 s of what follows
    assert 23.5 < second_start < 24.4 and second_stop == pytest.approx(len(gapped) / SAMPLE_RATE, abs=0.01)


def test_off_by_default_the_whole_file_is_decoded_without_the_vad(separate_pair, gapped, monkeypatch):
    """The default long-form path, as before (its output is generate()'s: tests/test_longform.py)."""
    monkeypatch.setattr(vad, "speech_regions", lambda *args, **kwargs: pytest.fail("the VAD ran"))
    options = {"speculative": False, "language": "en", "max_new_tokens": 8}
    whole = separate_pair.transcribe(gapped, sample_rate=SAMPLE_RATE, return_stats=True, **options)
    windows = whole[0].result.windows
    assert windows[0].start_seconds == 0.0 and sum(window.seconds for window in windows) > 30.0


def timestamps(result: DecodeResult, begin: int) -> list[float]:
    """Every kept timestamp token's time in the file: its window's start plus its offset."""
    starts = {window.index: window.start_seconds for window in result.windows}
    return [
        starts[record.window] + (record.token_id - begin) * TIMESTAMP_SECONDS
        for record in result.tokens
        if record.kept and record.token_id >= begin
    ]


def test_real_speech_around_a_skipped_gap_keeps_its_words_and_times(real_pair, gapped):
    """whisper-base <- tiny.en, sequential: both utterances transcribed, their timestamps in the file's
    seconds (each piece's windows where the piece lies), none in the skipped noise."""
    (transcription,) = real_pair.transcribe(
        gapped, sample_rate=SAMPLE_RATE, language="en", skip_silence=True, return_stats=True
    )
    text = transcription.text.lower()
    assert "weather" in text and "fellow americans" in text
    begin = timestamp_begin(real_pair.pair.target.model.generation_config)
    times = timestamps(transcription.result, begin)
    assert times[0] < 1.0 and any(23.5 < seconds < 24.5 for seconds in times) and times[-1] > 30.0
    assert not any(7.0 < seconds < 23.5 for seconds in times)  # the noise from 6.4 s to 24.4 s
