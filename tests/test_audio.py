"""Tests for specdec.audio: every input is generated in tmp_path with numpy + soundfile."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf

from specdec.audio import MAX_SECONDS, SAMPLE_RATE, AudioError, load_audio

ASSETS = Path(__file__).parent.parent / "assets"


def sine(freq: float, seconds: float, rate: int, amplitude: float = 0.5) -> np.ndarray:
    """A float32 sine wave, shape (samples,)."""
    t = np.arange(round(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_frequency(samples: np.ndarray, rate: int = SAMPLE_RATE) -> float:
    """Frequency (Hz) of the largest FFT bin."""
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def assert_whisper_input(audio: np.ndarray, expected_len: int) -> None:
    """16 kHz mono float32, contiguous, length within one sample."""
    assert audio.dtype == np.float32 and audio.ndim == 1 and audio.flags.c_contiguous
    assert abs(len(audio) - expected_len) <= 1


def write(path: Path, data: np.ndarray, rate: int, **kwargs: object) -> Path:
    sf.write(path, data, rate, **kwargs)
    return path


def test_stereo_flac_44k_becomes_mono_16k(tmp_path: Path) -> None:
    left = sine(440, 1.5, 44_100)
    path = write(tmp_path / "stereo.flac", np.stack([left, left], axis=1), 44_100)
    audio = load_audio(path)
    assert_whisper_input(audio, round(1.5 * SAMPLE_RATE))
    assert dominant_frequency(audio) == pytest.approx(440, abs=2)
    assert np.abs(audio).max() == pytest.approx(0.5, abs=0.02)


def test_stereo_downmix_averages_channels(tmp_path: Path) -> None:
    left, right = sine(440, 1.0, 16_000, 0.4), sine(1000, 1.0, 16_000, 0.2)
    path = write(tmp_path / "two.wav", np.stack([left, right], axis=1), 16_000, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(str(path)), (left + right) / 2, atol=1e-6)


@pytest.mark.parametrize("rate", [8_000, 48_000])
def test_wav_is_resampled(tmp_path: Path, rate: int) -> None:
    path = write(tmp_path / f"tone_{rate}.wav", sine(440, 2.0, rate), rate)
    audio = load_audio(path)
    assert_whisper_input(audio, 2 * SAMPLE_RATE)
    assert dominant_frequency(audio) == pytest.approx(440, abs=1)


def test_16k_wav_is_unchanged(tmp_path: Path) -> None:
    tone = sine(440, 1.0, SAMPLE_RATE)
    path = write(tmp_path / "tone.wav", tone, SAMPLE_RATE, subtype="FLOAT")
    np.testing.assert_array_equal(load_audio(path), tone)


@pytest.mark.skipif("VORBIS" not in sf.available_subtypes("OGG"), reason="no Vorbis in this libsndfile")
def test_ogg_vorbis(tmp_path: Path) -> None:
    path = write(tmp_path / "tone.ogg", sine(440, 1.0, 22_050), 22_050, format="OGG", subtype="VORBIS")
    audio = load_audio(path)
    assert_whisper_input(audio, SAMPLE_RATE)
    assert dominant_frequency(audio) == pytest.approx(440, abs=2)


@pytest.mark.skipif("MP3" not in sf.available_formats(), reason="no MP3 in this libsndfile")
def test_mp3(tmp_path: Path) -> None:
    path = write(tmp_path / "tone.mp3", sine(440, 1.0, 44_100), 44_100, format="MP3")
    audio = load_audio(path)
    assert audio.dtype == np.float32 and abs(len(audio) - SAMPLE_RATE) < SAMPLE_RATE // 20  # codec padding
    assert dominant_frequency(audio) == pytest.approx(440, abs=2)


def test_gradio_int16_tuple() -> None:
    pcm = (sine(440, 1.0, 48_000, amplitude=1.0) * 32767).astype(np.int16)
    audio = load_audio((48_000, pcm))
    assert_whisper_input(audio, SAMPLE_RATE)
    assert np.abs(audio).max() == pytest.approx(1.0, abs=0.02)
    assert dominant_frequency(audio) == pytest.approx(440, abs=1)


def test_gradio_int32_stereo_tuple_is_scaled() -> None:
    pcm = np.full((1600, 2), 2**30, dtype=np.int32)  # half of full scale
    np.testing.assert_allclose(load_audio((SAMPLE_RATE, pcm)), 0.5)


def test_channels_first_array() -> None:
    tone = sine(440, 1.0, 32_000)
    audio = load_audio(np.stack([tone, tone]), sample_rate=32_000)  # (channels, samples)
    assert_whisper_input(audio, SAMPLE_RATE)
    assert dominant_frequency(audio) == pytest.approx(440, abs=1)


def test_array_is_copied() -> None:
    tone = sine(440, 0.1, SAMPLE_RATE)
    audio = load_audio(tone, sample_rate=SAMPLE_RATE)
    audio[:] = 0
    assert np.abs(tone).max() > 0


def test_silence_returns_zeros(tmp_path: Path) -> None:
    path = write(tmp_path / "silence.wav", np.zeros(8_000, dtype=np.float32), 8_000)
    audio = load_audio(path)
    assert_whisper_input(audio, SAMPLE_RATE)
    assert not audio.any()


def test_max_seconds_none_disables_limit() -> None:
    audio = load_audio(np.zeros(31 * 1_000, dtype=np.float32), sample_rate=1_000, max_seconds=None)
    assert_whisper_input(audio, 31 * SAMPLE_RATE)


# --- errors: each message names the source and the problem ---


def error_message(*args: object, **kwargs: object) -> str:
    with pytest.raises(AudioError) as info:
        load_audio(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    message = error_message(tmp_path / "nope.wav")
    assert "nope.wav" in message and "no such file" in message


def test_zero_byte_file(tmp_path: Path) -> None:
    path = tmp_path / "zero.wav"
    path.touch()
    assert "zero.wav: file is empty (0 bytes)" in error_message(path)


def test_wav_with_no_samples(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.wav", np.zeros((0, 1), dtype=np.float32), 16_000)
    assert "empty.wav: contains no audio samples" in error_message(path)


def test_text_file_named_wav(tmp_path: Path) -> None:
    path = tmp_path / "notes.wav"
    path.write_text("this is not audio\n" * 20)
    message = error_message(path)
    assert "notes.wav: not an audio file soundfile can decode" in message


def test_directory(tmp_path: Path) -> None:
    assert "not a regular file" in error_message(tmp_path)


def test_truncated_flac_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "cut.flac", sine(440, 2.0, 44_100), 44_100)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    message = error_message(path)
    assert "cut.flac: could not decode audio; truncated or corrupt?" in message


def test_a_cut_off_wav_is_refused_saying_how_much_is_missing(tmp_path: Path) -> None:
    """libsndfile reads the samples present without a word: a half-copied file would be transcribed as if
    it were whole. Its header promises 2 s (and a 5-hour one 5 h); the message says what is there."""
    path = write(tmp_path / "cut.wav", sine(440, 2.0, SAMPLE_RATE), SAMPLE_RATE)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert error_message(path) == (
        f"{path}: the file is cut short: its header promises 2.00 s of audio but it holds 1.00 s"
    )
    header = bytearray(data[:44])  # 5 hours promised, 100 bytes there
    header[40:44] = (5 * 3600 * SAMPLE_RATE * 2).to_bytes(4, "little")
    path.write_bytes(bytes(header) + data[44:144])
    assert "promises 18000.00 s of audio but it holds 0.00 s" in error_message(path, max_seconds=None)


def mp3(path: Path, samples: np.ndarray, rate: int, writer: str) -> Path:
    """An MP3 with the stream's frame count in its first frame: libsndfile writes a Xing tag, ffmpeg
    (PyAV's libmp3lame) an ID3v2 tag and then an Info tag."""
    if writer == "soundfile":
        return write(path, samples, rate, format="MP3")
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libmp3lame", rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="flt", layout="mono")
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return path


@pytest.mark.parametrize("writer", ["soundfile", "pyav"])
def test_a_cut_off_mp3_is_refused_saying_how_much_is_missing(tmp_path: Path, writer: str) -> None:
    """libsndfile reads the frames present without a word, as with WAV; the tag's frame count says what
    the whole file held."""
    path = mp3(tmp_path / "cut.mp3", sine(440, 3.0, SAMPLE_RATE), SAMPLE_RATE, writer)
    assert abs(len(load_audio(path)) - 3 * SAMPLE_RATE) < 1152  # whole: read as it is
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    assert error_message(path).startswith(
        f"{path}: the file is cut short: its header promises 3.00 s of audio but it holds 0."
    )


def test_a_third_of_a_speech_mp3_is_refused(tmp_path: Path) -> None:
    samples, rate = sf.read(ASSETS / "en-jfk.flac", dtype="float32")
    path = write(tmp_path / "jfk.mp3", samples, rate, format="MP3")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    assert "the file is cut short: its header promises 11.00 s of audio but it holds 3." in error_message(
        path
    )


def test_a_wav_of_unknown_length_is_read_whole(tmp_path: Path) -> None:
    """A recorder that never went back to write the sizes leaves 0xFFFFFFFF: not a cut-off file."""
    path = write(tmp_path / "streamed.wav", sine(440, 1.0, SAMPLE_RATE), SAMPLE_RATE)
    data = bytearray(path.read_bytes())
    data[40:44] = (0xFFFFFFFF).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert len(load_audio(path)) == SAMPLE_RATE


def test_too_long_file_is_rejected_before_decoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "long.wav", np.zeros(31 * 8_000, dtype=np.int16), 8_000)
    monkeypatch.setattr(sf, "read", lambda *a, **k: pytest.fail("decoded a file that is too long"))
    message = error_message(path)
    assert message == (
        f"{path} is 31.0 s long; this takes one {MAX_SECONDS:g} s window at most "
        "(SpeculativeWhisper.transcribe decodes longer audio long-form)"
    )


def test_too_long_array() -> None:
    assert "is 45.2 s long" in error_message(np.zeros(452, dtype=np.float32), sample_rate=10)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_array(bad: float) -> None:
    samples = np.zeros(2_000, dtype=np.float32)
    samples[500] = bad
    assert "NaN or infinite" in error_message(samples, sample_rate=SAMPLE_RATE)


def test_array_without_sample_rate() -> None:
    assert "sample_rate is required" in error_message(np.zeros(100, dtype=np.float32))


def test_audio_too_short_to_hold_a_word_is_refused(tmp_path: Path) -> None:
    """A 1-sample WAV decoded to " you"; under 0.1 s nothing is decoded, from a file or an array."""
    path = write(tmp_path / "one.wav", np.full(1, 0.1, dtype=np.float32), SAMPLE_RATE)
    assert error_message(path) == f"{path} is 0 ms long: too short to hold a word (at least 0.1 s)"
    assert "is 50 ms long: too short" in error_message(np.zeros(800, np.float32), sample_rate=SAMPLE_RATE)
    assert len(load_audio(np.zeros(1600, np.float32), sample_rate=SAMPLE_RATE)) == 1600


def test_empty_array() -> None:
    assert "contains no audio samples" in error_message(np.zeros(0, dtype=np.float32), sample_rate=16_000)


@pytest.mark.parametrize("rate", [0, -16_000])
def test_non_positive_sample_rate(rate: int) -> None:
    assert "sample rate must be positive" in error_message((rate, np.zeros(100, dtype=np.int16)))


def test_sample_rate_with_a_path_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "tone.wav", sine(440, 0.1, 8_000), 8_000)
    assert "sample_rate is only for numpy arrays" in error_message(path, sample_rate=16_000)


def test_array_with_too_many_channels() -> None:
    assert "more than 8 channels" in error_message(np.zeros((20, 20)), sample_rate=16_000)
