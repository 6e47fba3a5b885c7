"""Files whose header does not know their length (written to a pipe): read whole, the limit applied to
what is decoded, block by block. Every input is generated in tmp_path."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specdec import audio
from specdec.audio import SAMPLE_RATE, AudioError, load_audio, recorded_seconds

RATE = 44_100
SECONDS = 11.0


def tone(seconds: float = SECONDS, rate: int = RATE) -> np.ndarray:
    """A 440 Hz int16 tone, shape (samples,)."""
    t = np.arange(round(seconds * rate)) / rate
    return (0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def flac_of_unknown_length(path: Path, samples: np.ndarray) -> Path:
    """A FLAC whose STREAMINFO total-samples field (36 bits) is 0, as `flac -` writes from stdin."""
    sf.write(path, samples, RATE)
    data = bytearray(path.read_bytes())
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO first, its 34 bytes from offset 8
    data[8 + 13] &= 0xF0
    data[8 + 14 : 8 + 18] = bytes(4)
    path.write_bytes(bytes(data))
    return path


def wav_with_data_size(path: Path, samples: np.ndarray, size: int) -> Path:
    """A 16-bit WAV whose RIFF and data sizes say `size`, as streaming writers leave them."""
    sf.write(path, samples, RATE, subtype="PCM_16")
    data = bytearray(path.read_bytes())
    assert data[36:40] == b"data"
    data[4:8] = min(size + 36, 0xFFFFFFFF).to_bytes(4, "little")
    data[40:44] = size.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return path


def sf_write(path: Path, samples: np.ndarray) -> Path:
    sf.write(path, samples, RATE)
    return path


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> np.ndarray:
    """The tone as load_audio reads it from a file that records its length."""
    return load_audio(sf_write(tmp_path_factory.mktemp("whole") / "tone.wav", tone()), max_seconds=None)


def test_a_flac_of_unknown_length_is_read_whole(tmp_path: Path, whole: np.ndarray) -> None:
    path = flac_of_unknown_length(tmp_path / "piped.flac", tone())
    assert recorded_seconds(path) is None  # not 2**63 frames
    np.testing.assert_array_equal(load_audio(path, max_seconds=None), whole)
    np.testing.assert_array_equal(load_audio(path, max_seconds=30), whole)


def test_a_flac_of_unknown_length_is_refused_by_what_it_decodes(tmp_path: Path) -> None:
    """An hour-long piped FLAC over a 5 s limit is refused after a few blocks, not decoded whole."""
    path = flac_of_unknown_length(tmp_path / "piped.flac", np.zeros(RATE * 3600, np.int16))
    with pytest.raises(AudioError) as info:
        load_audio(path, max_seconds=5)
    message = str(info.value)
    assert message.startswith(f"{path} is over ") and message.endswith(" s long; the limit is 5 s")
    assert float(message.split(" is over ")[1].split(" s ")[0]) < 5 + 2 * audio.BLOCK_FRAMES / RATE


@pytest.mark.parametrize("size", [0, 0x7FFFF000, 0x7FFFFFFF, 0xFFFFFFFF])
def test_a_wav_whose_data_size_is_a_placeholder_is_read_whole(
    tmp_path: Path, whole: np.ndarray, size: int
) -> None:
    """0 (a recorder that never went back), 0x7FFFF000 (sox to a pipe), 0x7FFFFFFF, 0xFFFFFFFF (ffmpeg)."""
    path = wav_with_data_size(tmp_path / "streamed.wav", tone(), size)
    np.testing.assert_array_equal(load_audio(path, max_seconds=None), whole)
    with pytest.raises(AudioError, match=r"is (over )?\d+\.\d s long; the limit is 5 s"):
        load_audio(path, max_seconds=5)


def test_a_wav_with_a_data_size_of_0_and_no_data_has_no_samples(tmp_path: Path) -> None:
    path = wav_with_data_size(tmp_path / "empty.wav", np.zeros(0, np.int16), 0)
    with pytest.raises(AudioError, match="contains no audio samples"):
        load_audio(path)


@pytest.mark.skipif(shutil.which("sox") is None, reason="sox is not installed")
@pytest.mark.parametrize("kind", ["flac", "wav"])
def test_what_sox_writes_to_a_pipe_is_read_whole(tmp_path: Path, whole: np.ndarray, kind: str) -> None:
    """Raw samples in on stdin (no length known), the file out on a pipe (no going back to write it)."""
    command = [
        "sox",
        "-t",
        "raw",
        "-r",
        str(RATE),
        "-e",
        "signed",
        "-b",
        "16",
        "-c",
        "1",
        "-",
        "-t",
        kind,
        "-",
    ]
    piped = subprocess.run(
        command, input=tone().tobytes(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True
    ).stdout
    path = tmp_path / f"piped.{kind}"
    path.write_bytes(piped)
    np.testing.assert_array_equal(load_audio(path, max_seconds=None), whole)
    assert len(whole) == SECONDS * SAMPLE_RATE
