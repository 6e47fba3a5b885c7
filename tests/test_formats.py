"""Audio and video containers that soundfile cannot read, decoded through PyAV (specdec.media).

Every file is encoded here with PyAV from a 2 s piece of a real speech clip or from tones, once per module.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import soundfile as sf
import soxr

from specdec import media
from specdec.audio import SAMPLE_RATE, AudioError, load_audio, recorded_seconds

SPEECH = Path(__file__).parent.parent / "assets" / "en-jfk.flac"
SECONDS = 2.0


def tone(freq: float, rate: int, seconds: float = SECONDS) -> np.ndarray:
    """A float32 sine, shape (samples,)."""
    return (0.4 * np.sin(2 * np.pi * freq * np.arange(round(seconds * rate)) / rate)).astype(np.float32)


def encode(
    path: Path,
    audio: list[tuple[str, int, np.ndarray]],
    video: bool = False,
    options: dict[str, str] | None = None,
) -> Path:
    """Write a container (its format from the suffix) with a tiny video stream if asked, then one stream per
    (codec, rate, samples (frames, channels) float32) in `audio`, in that order."""
    muxer = {".m4a": "ipod", ".webm": "webm", ".mkv": "matroska", ".mp4": "mp4"}[path.suffix]
    with av.open(str(path), "w", format=muxer, options=options or {}) as out:
        picture = out.add_stream("vp8" if muxer == "webm" else "mpeg4", rate=10) if video else None
        sounds = []  # every stream is added before the first packet is written
        for codec, rate, samples in audio:
            layout = "mono" if samples.shape[1] == 1 else "stereo"
            sounds.append((out.add_stream(codec, rate=rate, layout=layout), layout, rate, samples))
        if picture is not None:
            picture.width, picture.height, picture.pix_fmt = 32, 32, "yuv420p"
            for shade in range(round(SECONDS * 10)):
                pixels = np.full((32, 32, 3), shade * 12 % 256, np.uint8)
                out.mux(picture.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
            out.mux(picture.encode())
        for stream, layout, rate, samples in sounds:
            step = stream.codec_context.frame_size or 1024
            for start in range(0, len(samples), step):
                frame = av.AudioFrame.from_ndarray(
                    np.ascontiguousarray(samples[start : start + step].T), format="fltp", layout=layout
                )
                frame.sample_rate, frame.pts = rate, start
                out.mux(stream.encode(frame))
            out.mux(stream.encode())
    return path


@pytest.fixture(scope="module")
def speech() -> tuple[np.ndarray, int]:
    """2 s of John F. Kennedy, mono float32 at 44.1 kHz, shape (frames, 1)."""
    samples, rate = sf.read(SPEECH, dtype="float32", frames=round(SECONDS * 44_100), always_2d=True)
    return samples.mean(axis=1, keepdims=True), rate


@pytest.fixture(scope="module")
def clips(tmp_path_factory, speech) -> dict[str, Path]:
    """Every container of this module, encoded once."""
    folder = tmp_path_factory.mktemp("formats")
    samples, rate = speech
    at_48k = soxr.resample(samples, rate, 48_000).astype(np.float32)
    aac, opus = ("aac", rate, samples), ("libopus", 48_000, at_48k)
    low, high = tone(440, 44_100)[:, None], tone(1000, 44_100)[:, None]
    stereo = (np.stack([tone(440, 44_100), tone(1000, 44_100)], axis=1) * 32767).round() / 32768
    sf.write(folder / "stereo.wav", stereo, 44_100, subtype="PCM_16")
    return {
        "m4a": encode(folder / "voice.m4a", [aac]),
        "m4a-faststart": encode(folder / "faststart.m4a", [aac], options={"movflags": "+faststart"}),
        "webm": encode(folder / "recording.webm", [opus]),
        "mp4": encode(folder / "video.mp4", [aac], video=True),
        "two-streams": encode(folder / "two.mkv", [("aac", 44_100, low), ("aac", 44_100, high)], video=True),
        "no-audio": encode(folder / "silent-film.mp4", [], video=True),
        # a live stream's muxing, as a browser's MediaRecorder writes: no length recorded anywhere
        "live-webm": encode(folder / "live.webm", [opus], options={"live": "1"}),
        "stereo.wav": folder / "stereo.wav",
        "stereo-flac.mkv": encode(folder / "stereo-flac.mkv", [("flac", 44_100, stereo.astype(np.float32))]),
    }


def reference(speech: tuple[np.ndarray, int]) -> np.ndarray:
    samples, rate = speech
    return soxr.resample(samples[:, 0], rate, SAMPLE_RATE)


def dominant_frequency(samples: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / SAMPLE_RATE)[np.argmax(spectrum)])


def error_message(path: Path, **kwargs: object) -> str:
    with pytest.raises(AudioError) as info:
        load_audio(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def copy_with(path: Path, folder: Path, name: str, change) -> Path:
    """A copy of a file whose bytes went through change(bytes) -> bytes."""
    copy = folder / name
    copy.write_bytes(change(path.read_bytes()))
    return copy


@pytest.mark.parametrize("kind", ["m4a", "webm", "mp4"])
def test_voice_memo_browser_recording_and_video_decode_to_the_speech(clips, speech, kind):
    """AAC in m4a, Opus in webm, AAC beside a video stream in mp4: 16 kHz mono float32, the speech itself
    (lossy, so by correlation), aligned (the codecs' priming samples dropped) and as long as it, to 25 ms."""
    audio = load_audio(clips[kind])
    expected = reference(speech)
    assert audio.dtype == np.float32 and audio.ndim == 1 and audio.flags.c_contiguous
    assert abs(len(audio) - len(expected)) <= 0.025 * SAMPLE_RATE
    common = min(len(audio), len(expected))
    assert np.corrcoef(audio[:common], expected[:common])[0, 1] > 0.99


def test_a_video_with_two_audio_streams_gives_the_first(clips):
    audio = load_audio(clips["two-streams"])
    assert dominant_frequency(audio) == pytest.approx(440, abs=2)  # the second stream is at 1000 Hz


def test_a_video_without_audio_is_refused(clips):
    path = clips["no-audio"]
    assert error_message(path) == f"{path}: no audio stream (the file holds video only)"


def test_the_same_pcm_in_wav_and_in_a_lossless_container_decodes_to_the_same_samples(clips):
    """Stereo 16-bit PCM at 44.1 kHz: WAV through soundfile, FLAC in Matroska through PyAV; the same
    downmix and resampler after either decoder."""
    through_soundfile = load_audio(clips["stereo.wav"])
    through_pyav = load_audio(clips["stereo-flac.mkv"])
    assert len(through_soundfile) == round(SECONDS * SAMPLE_RATE)
    np.testing.assert_allclose(through_pyav, through_soundfile, atol=1e-6)


def test_length_limit_is_checked_from_the_container_before_decoding(clips, monkeypatch):
    path = clips["m4a"]
    monkeypatch.setattr(
        media.AudioStream, "blocks", lambda *a: pytest.fail("decoded a file that is too long")
    )
    assert error_message(path, max_seconds=1.5) == f"{path} is 2.0 s long; the limit is 1.5 s"


def test_length_limit_holds_while_decoding_a_recording_of_unrecorded_length(clips):
    """No container length to check first: decoding stops at the first block past the limit."""
    path = clips["live-webm"]
    with av.open(str(path)) as container:
        assert container.duration is None and container.streams.audio[0].duration is None
    assert " is over " in error_message(path, max_seconds=1.0)
    assert len(load_audio(path)) == round(SECONDS * SAMPLE_RATE)


def test_truncated_m4a_is_refused(clips, tmp_path):
    """The index ("moov") at the end is lost; written first, it points past the end of the file."""
    half = lambda data: data[: len(data) // 2]  # noqa: E731
    cut = copy_with(clips["m4a"], tmp_path, "cut.m4a", half)
    assert f"{cut}: could not open this MP4/M4A/MOV file; truncated or corrupt?" in error_message(cut)
    cut = copy_with(clips["m4a-faststart"], tmp_path, "cut-faststart.m4a", half)
    assert f"{cut}: could not decode audio; truncated or corrupt?" in error_message(cut)


def test_truncated_webm_gives_its_readable_prefix(clips, tmp_path):
    whole = load_audio(clips["webm"])
    cut = load_audio(copy_with(clips["webm"], tmp_path, "cut.webm", lambda data: data[: len(data) // 2]))
    assert 0.3 * len(whole) < len(cut) < 0.7 * len(whole)
    np.testing.assert_allclose(cut[:-200], whole[: len(cut) - 200], atol=1e-6)  # all but the resampler's tail


def test_corrupt_files_are_refused_with_one_line(clips, tmp_path):
    noise = np.random.default_rng(0).bytes(5_000)
    path = copy_with(clips["m4a"], tmp_path, "noise.m4a", lambda data: noise)
    assert error_message(path) == (
        f"{path}: not an audio file soundfile can decode (Format not recognised) "
        "nor ffmpeg (Invalid data found when processing input)"
    )
    path = copy_with(clips["m4a"], tmp_path, "noise.mp3", lambda data: noise)  # libsndfile's MPEG reader
    assert error_message(path) == (
        f"{path}: not an audio file soundfile can decode (Format not recognised) "
        "nor ffmpeg (Invalid data found when processing input)"
    )

    def damage_audio(data: bytes) -> bytes:
        start = data.index(b"mdat") + 2_000
        return data[:start] + noise[:3_000] + data[start + 3_000 :]

    path = copy_with(clips["m4a-faststart"], tmp_path, "damaged.m4a", damage_audio)
    assert f"{path}: could not decode audio; truncated or corrupt?" in error_message(path)


def test_a_playlist_is_not_followed(clips, tmp_path):
    """An uploaded HLS playlist naming a file on the server (or a URL) is refused, not opened."""
    playlist = tmp_path / "list.m3u8"
    playlist.write_text(f"#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:2,\n{clips['mp4']}\n#EXT-X-ENDLIST\n")
    assert "nor ffmpeg (a format not read here, such as a playlist or an image)" in error_message(playlist)


def test_the_api_transcribes_an_m4a(separate_pair, clips):
    (transcription,) = separate_pair.transcribe(str(clips["m4a"]), max_new_tokens=4, return_stats=True)
    assert transcription.audio == str(clips["m4a"]) and transcription.result.token_ids


def test_the_recorded_length_is_read_without_decoding(clips, monkeypatch):
    monkeypatch.setattr(media.AudioStream, "blocks", None)  # decoding would fail
    assert recorded_seconds(clips["m4a"]) == pytest.approx(SECONDS, abs=0.05)
    assert recorded_seconds(clips["stereo.wav"]) == pytest.approx(SECONDS, abs=0.05)
    assert recorded_seconds(clips["live-webm"]) is None and recorded_seconds(clips["no-audio"]) is None
