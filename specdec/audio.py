"""Audio input for Whisper: decode a file, array or Gradio tuple to 16 kHz mono float32.

Files: soundfile (libsndfile) reads WAV, FLAC, OGG, MP3 and the like; any other file goes to ffmpeg
through PyAV (`specdec.media`): m4a/AAC, webm/Opus, mp4, mkv, mov, ... A video gives its first audio
stream. Both decoders feed the same block-by-block downmix and streaming resampler, and both check the
length from the file's header (or container) before decoding, where it is recorded, and block by block
while decoding, where it is not: a FLAC or WAV written to a pipe cannot go back to write its length
(FLAC's STREAMINFO leaves the sample count at 0, "unknown"; a WAV's data size is 0 or a placeholder).

Truncated files, as soundfile 0.14 / libsndfile 1.2.2 and PyAV 18 (ffmpeg 8) handle them: a readable
prefix is accepted when the decoder yields one cleanly, anything else is an ``AudioError``.
- WAV: refused when the data chunk is shorter than the header says ("the file is cut short").
- FLAC: reading fails with "flac decoder lost sync"; this becomes an ``AudioError``.
- MP3: libsndfile reads the frames present without a word, so a file whose first frame is a Xing/Info or
  VBRI tag (LAME, ffmpeg and libsndfile write one, with the stream's frame count) is refused when it
  decodes to less than that count; without such a tag the length is only estimated from the file's size,
  and a cut file is read as its prefix. (An ID3 TLEN, in milliseconds and rarely written, is not read.)
- OGG/Vorbis: depending on where it is cut, the file fails to open ("malformed"), decodes to zero samples
  (an ``AudioError``), or decodes to its readable prefix (accepted).
- MP4/M4A/MOV: an ``AudioError`` either way: the index ("moov") written at the end is lost, or, written
  first, it points past the end of the file and the decoder rejects the missing packet.
- WebM/Matroska: its readable prefix (accepted); a recording's length is often not recorded at all, so
  the prefix is all there is to go by.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from specdec import media

SAMPLE_RATE = 16_000
MAX_SECONDS = 30.0  # one Whisper window: the limit of short-form decoding
# The shortest audio decoded: a spoken syllable takes about 0.1 s or more, and Whisper given less (a
# 1-sample WAV) still answers a word it made up, sure of it (" you"). See docs/usage.md.
MIN_SECONDS = 0.1
MAX_LONG_SECONDS = 4 * 3600.0  # long-form decoding (specdec.longform): a sane upper bound
BLOCK_FRAMES = 1 << 16  # frames read from a file at a time, so that it is never decoded whole
MAX_ARRAY_CHANNELS = 8  # an array with more "channels" than this has most likely been passed transposed
UNKNOWN_FRAMES = 2**63 - 1  # libsndfile's frame count for a file whose header does not know its length
# A WAV data size at or above this is a streaming writer's placeholder, not a length: 0xFFFFFFFF (ffmpeg),
# 0x7FFFF000 (sox), 0x7FFFFFFF (arecord). A cut-off WAV with over 2 GiB of data is read as its prefix.
WAV_PLACEHOLDER_SIZE = 0x7FFFF000
MPEG_FRAME_SAMPLES = 1152  # one MPEG audio frame: the shortfall below a promised length still taken

AudioSource = str | os.PathLike | np.ndarray | tuple[int, np.ndarray]


class AudioError(ValueError):
    """Audio that cannot be used, with a one-line message meant for the user."""


def load_audio(
    source: AudioSource, sample_rate: int | None = None, max_seconds: float | None = MAX_SECONDS
) -> np.ndarray:
    """Load a path, a numpy array (with ``sample_rate``) or a Gradio ``(rate, array)`` tuple.

    Returns contiguous float32 mono samples at ``SAMPLE_RATE``, shape (samples,). ``max_seconds=None``
    disables the length limit. Raises ``AudioError`` for anything unusable.
    """
    if isinstance(source, (str, os.PathLike)):
        if sample_rate is not None:
            raise AudioError(f"{source}: sample_rate is only for numpy arrays; a file carries its own rate")
        return _read_file(Path(source), max_seconds)
    if isinstance(source, tuple):
        if sample_rate is not None or len(source) != 2:
            raise AudioError("audio tuple: expected (sample_rate, array) as Gradio gives, and no sample_rate")
        name, (rate, samples) = "audio", source
        samples = _array_to_frames(name, samples)
    elif isinstance(source, np.ndarray):
        if sample_rate is None:
            raise AudioError("audio array: sample_rate is required when passing a numpy array")
        name, samples, rate = "audio array", _array_to_frames("audio array", source), sample_rate
    else:
        raise AudioError(f"unsupported audio source of type {type(source).__name__}; use a path or an array")
    _check_rate(name, rate)
    _check_duration(name, len(samples), rate, max_seconds)
    return _to_whisper_input(name, samples, rate)


def recorded_seconds(path: str | os.PathLike) -> float | None:
    """A file's length as its header or container records it, without decoding it; None where it is not
    recorded or the file cannot be opened (decoding then says why)."""
    try:
        info = sf.info(str(path))
    except (sf.SoundFileError, RuntimeError, OSError):
        pass
    else:
        frames = _header_frames(info.frames)
        return None if frames is None else frames / info.samplerate
    try:
        with media.first_audio_stream(str(path)) as stream:
            return stream.seconds
    except media.MediaError:
        return None


def _read_file(path: Path, max_seconds: float | None) -> np.ndarray:
    """Decode a file with soundfile, or with ffmpeg when soundfile cannot open it, checking its length
    from the header first where the header knows it."""
    name = _checked_path(path)
    try:
        info = sf.info(name)
    except (sf.SoundFileError, RuntimeError, OSError) as err:
        return _read_media(name, max_seconds, _reason(err))
    _check_rate(name, info.samplerate)
    wav_size_known = info.format not in ("WAV", "WAVEX") or _check_wav_complete(name, path)
    frames = _header_frames(info.frames)
    if frames is None and (info.frames != 0 or not wav_size_known):
        # A length the header does not know: libsndfile reads nothing (a WAV's data size of 0) or fails
        # at the end (FLAC), ffmpeg reads to the end, the limit applied block by block.
        return _read_media(name, max_seconds, "its header does not record its length")
    if frames is not None:  # reject long files from the header, before decoding them into memory
        _check_duration(name, frames, info.samplerate, max_seconds)
    promised = _length_promised(info.format, path)
    try:
        with sf.SoundFile(name) as audio_file:
            blocks = _read_blocks(audio_file)
            return _blocks_to_whisper_input(name, blocks, info.samplerate, frames, max_seconds, promised)
    except (sf.SoundFileError, RuntimeError, OSError) as err:
        reason = _reason(err)
        raise AudioError(f"{name}: could not decode audio; truncated or corrupt? ({reason})") from err


def _read_blocks(audio_file: sf.SoundFile) -> Iterator[np.ndarray]:
    """The file's (frames, channels) float32 blocks, each as long as what was read: `SoundFile.blocks`
    counts the blocks from the header and yields whole ones, stale samples after a file's end included,
    where the file holds less than its header says (a cut-off MP3)."""
    while len(block := audio_file.read(BLOCK_FRAMES, dtype="float32", always_2d=True)):
        yield block


def _read_media(name: str, max_seconds: float | None, soundfile_reason: str) -> np.ndarray:
    """Decode the first audio stream of a file through ffmpeg, its length checked from the container
    before decoding where the container records it (and while decoding where it does not)."""
    try:
        with media.first_audio_stream(name) as stream:
            rate = stream.sample_rate
            _check_rate(name, rate)
            expected = round(stream.seconds * rate) if stream.seconds else None
            if expected:
                _check_duration(name, expected, rate, max_seconds)
            blocks = stream.blocks(BLOCK_FRAMES)
            return _blocks_to_whisper_input(name, blocks, rate, expected or None, max_seconds)
    except media.NotMedia as err:
        raise AudioError(
            f"{name}: not an audio file soundfile can decode ({soundfile_reason}) nor ffmpeg ({err})"
        ) from err
    except media.MediaError as err:
        raise AudioError(f"{name}: {err}") from err


def _blocks_to_whisper_input(
    name: str,
    blocks: Iterable[np.ndarray],
    rate: int,
    expected_frames: int | None,
    max_seconds: float | None,
    promised: bool = False,
) -> np.ndarray:
    """(frames, channels) blocks at the file's rate -> one 16 kHz mono float32 array.

    Never more than one block at the file's own rate is in memory besides the output: each block is
    downmixed and fed to a streaming resampler (the same samples as resampling the whole file at once).
    A file longer than max_seconds is refused as soon as a block goes past it (its header may not say:
    expected_frames is None); promised: expected_frames is an exact count, and a file that holds less is
    cut short."""
    resampler = None
    if rate != SAMPLE_RATE:
        resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
    output = _Output(
        BLOCK_FRAMES if expected_frames is None else math.ceil(expected_frames * SAMPLE_RATE / rate) + 64
    )
    num_frames = 0
    for block in blocks:
        num_frames += len(block)
        if max_seconds is not None and num_frames > max_seconds * rate:
            _check_duration(name, num_frames, rate, max_seconds, at_least=True)
        mono = _downmix(name, block)
        output.append(mono if resampler is None else resampler.resample_chunk(mono))
    if promised and expected_frames is not None and num_frames < expected_frames - MPEG_FRAME_SAMPLES:
        raise AudioError(
            f"{name}: the file is cut short: its header promises {expected_frames / rate:.2f} s of audio "
            f"but it holds {num_frames / rate:.2f} s"
        )
    _check_duration(name, num_frames, rate, max_seconds)
    if resampler is not None:
        output.append(resampler.resample_chunk(np.zeros(0, np.float32), last=True))
        if output.size == 0:
            raise AudioError(f"{name}: too short ({num_frames} samples at {rate} Hz)")
    return output.samples()


class _Output:
    """A float32 array filled piece by piece; allocated once from the header's length, or grown as it
    fills where the header does not know it."""

    def __init__(self, capacity: int) -> None:
        self.buffer = np.empty(capacity, np.float32)
        self.size = 0

    def append(self, piece: np.ndarray) -> None:
        if self.size + len(piece) > len(self.buffer):  # no length known, or a header that undercounts
            self.buffer = np.concatenate(
                [self.buffer, np.empty(max(len(piece), len(self.buffer) // 2), np.float32)]
            )
        self.buffer[self.size : self.size + len(piece)] = piece
        self.size += len(piece)

    def samples(self) -> np.ndarray:
        return self.buffer[: self.size]


def _checked_path(path: Path) -> str:
    """The file's name, after checking it exists and is a non-empty regular file."""
    name = str(path)
    if not path.exists():
        raise AudioError(f"{name}: no such file")
    if not path.is_file():
        raise AudioError(f"{name}: not a regular file")
    if path.stat().st_size == 0:
        raise AudioError(f"{name}: file is empty (0 bytes)")
    return name


def _header_frames(frames: int) -> int | None:
    """The frame count soundfile found in a file's header, or None where the header does not know it."""
    return frames if 0 < frames < UNKNOWN_FRAMES else None


def _check_wav_complete(name: str, path: Path) -> bool:
    """Refuse a WAV file whose data chunk is shorter than its header says (a cut-off download or copy);
    True when the header gives the data's size, False when it does not.

    libsndfile quietly reads the samples present, so this reads the RIFF chunk headers itself (the
    standard library's `wave` reads PCM only). A data size of 0 or a placeholder (`WAV_PLACEHOLDER_SIZE`)
    means "unknown" (a recorder or pipe that never went back to write it) and is accepted."""
    size = path.stat().st_size
    with path.open("rb") as file:
        if file.read(12)[8:12] != b"WAVE":
            return True
        byte_rate = 0
        while len(header := file.read(8)) == 8:
            chunk_id, chunk_size = header[:4], int.from_bytes(header[4:], "little")
            if chunk_id == b"fmt ":
                byte_rate = int.from_bytes(file.read(16)[8:12], "little")
                file.seek(chunk_size - 16 + chunk_size % 2, os.SEEK_CUR)
            elif chunk_id == b"data":
                if chunk_size == 0 or chunk_size >= WAV_PLACEHOLDER_SIZE:
                    return False
                held = size - file.tell()
                if byte_rate and held < chunk_size:
                    raise AudioError(
                        f"{name}: the file is cut short: its header promises {chunk_size / byte_rate:.2f} s "
                        f"of audio but it holds {max(held, 0) / byte_rate:.2f} s"
                    )
                return True
            else:
                file.seek(chunk_size + chunk_size % 2, os.SEEK_CUR)
    return True


def _length_promised(file_format: str, path: Path) -> bool:
    """The header's frame count is exact, so a file that decodes to less is cut short: FLAC's STREAMINFO,
    and an MP3's frame count in a Xing/Info or VBRI tag (without one, libsndfile estimates it)."""
    return file_format == "FLAC" or (file_format == "MP3" and _mp3_counts_frames(path))


def _mp3_counts_frames(path: Path) -> bool:
    """The MP3's first frame (after an ID3v2 tag) is a Xing/Info tag with its frame-count flag, or VBRI."""
    with path.open("rb") as file:
        head = file.read(10)
        start = 0
        if head[:3] == b"ID3" and len(head) == 10:  # its size: four 7-bit bytes, then a footer if flagged
            start = 10 + (
                (head[6] & 0x7F) << 21 | (head[7] & 0x7F) << 14 | (head[8] & 0x7F) << 7 | head[9] & 0x7F
            )
            start += 10 if head[5] & 0x10 else 0
        file.seek(start)
        data = file.read(4096)
    sync = next((i for i in range(len(data) - 1) if data[i] == 0xFF and data[i + 1] & 0xE0 == 0xE0), None)
    if sync is None or len(data) < sync + 44:
        return False
    frame = data[sync:]
    mpeg1, mono = (frame[1] >> 3) & 3 == 3, frame[3] >> 6 == 3
    side_info = (17 if mono else 32) if mpeg1 else (9 if mono else 17)
    tag = frame[4 + side_info : 12 + side_info]
    counted = tag[:4] in (b"Xing", b"Info") and int.from_bytes(tag[4:8], "big") & 1
    return bool(counted) or frame[36:40] == b"VBRI"


def _reason(err: Exception) -> str:
    """libsndfile's own message without the "Error opening '<path>': " prefix. Its MPEG reader answers
    a file named .mp3 that is not one with "File does not exist or is not a regular file" (the file was
    checked to be a regular file before): that is said as its other readers say it."""
    reason = str(getattr(err, "error_string", err)).strip().rstrip(".")
    return "Format not recognised" if reason.startswith("File does not exist or is not a regular") else reason


def _array_to_frames(name: str, array: np.ndarray) -> np.ndarray:
    """Validate an in-memory array and return float frames, shape (samples, channels)."""
    array = np.asarray(array)
    if array.ndim == 1:
        array = array[:, None]
    elif array.ndim == 2 and array.shape[0] <= MAX_ARRAY_CHANNELS < array.shape[1]:
        array = array.T  # (channels, samples) -> (samples, channels)
    elif array.ndim != 2:
        raise AudioError(f"{name}: expected a 1-D or 2-D array, got shape {array.shape}")
    if array.shape[1] > MAX_ARRAY_CHANNELS:
        raise AudioError(f"{name}: shape {array.shape} has more than {MAX_ARRAY_CHANNELS} channels")
    return _to_float(name, array)


def _to_float(name: str, array: np.ndarray) -> np.ndarray:
    """Floats pass through; integer PCM is scaled to [-1, 1) by its full range."""
    if np.issubdtype(array.dtype, np.floating):
        return array
    if np.issubdtype(array.dtype, np.signedinteger):
        return array.astype(np.float64) / -float(np.iinfo(array.dtype).min)
    if np.issubdtype(array.dtype, np.unsignedinteger):  # e.g. 8-bit WAV: zero is mid-range
        half = float(np.iinfo(array.dtype).max // 2 + 1)
        return (array.astype(np.float64) - half) / half
    raise AudioError(f"{name}: unsupported sample type {array.dtype}")


def _check_rate(name: str, rate: object) -> None:
    """A sample rate must be a positive, finite number."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.integer, np.floating)):
        raise AudioError(f"{name}: sample rate must be a number, got {rate!r}")
    if not np.isfinite(rate) or rate <= 0:
        raise AudioError(f"{name}: sample rate must be positive, got {rate}")


def _check_duration(
    name: str, num_samples: int, rate: float, max_seconds: float | None, at_least: bool = False
) -> None:
    """Reject empty audio and, unless ``max_seconds`` is None, audio longer than it (``at_least``: the
    file has not been read to its end, num_samples is only what was read so far)."""
    if num_samples == 0:
        raise AudioError(f"{name}: contains no audio samples")
    seconds = num_samples / rate
    if seconds < MIN_SECONDS and not at_least:
        raise AudioError(
            f"{name} is {seconds * 1000:.0f} ms long: too short to hold a word (at least {MIN_SECONDS:g} s)"
        )
    length = f"{'over ' if at_least else ''}{seconds:.1f} s"
    # A limit other than one window's (an app's, MAX_LONG_SECONDS) is a plain limit: name it.
    if max_seconds is not None and seconds > max_seconds != MAX_SECONDS:
        raise AudioError(f"{name} is {length} long; the limit is {duration_text(max_seconds)}")
    if max_seconds is not None and seconds > max_seconds:
        raise AudioError(
            f"{name} is {length} long; this takes one {max_seconds:g} s window at most "
            "(SpeculativeWhisper.transcribe decodes longer audio long-form)"
        )


def duration_text(seconds: float) -> str:
    """A length limit as people say it: "45 s", "10 min", "4 hours"."""
    if seconds >= 3600:
        return f"{seconds / 3600:g} hour" + ("" if seconds == 3600 else "s")
    if seconds >= 60:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _to_whisper_input(name: str, frames: np.ndarray, rate: float) -> np.ndarray:
    """Downmix (samples, channels) frames by averaging, check values, resample to 16 kHz float32."""
    mono = _downmix(name, frames)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ")
        if mono.size == 0:
            raise AudioError(f"{name}: too short ({len(frames)} samples at {rate} Hz)")
    # Always a fresh array, so callers never alias (and mutate) the array they passed in.
    return np.array(mono, dtype=np.float32, order="C", copy=True)


def to_mono(name: str, samples: np.ndarray) -> np.ndarray:
    """A 1-D or 2-D array of any sample type -> float32 mono at its own rate (a live chunk: no resampling)."""
    return _downmix(name, _array_to_frames(name, samples))


def _downmix(name: str, frames: np.ndarray) -> np.ndarray:
    """(samples, channels) -> (samples,) float32 by averaging the channels; NaN or inf is an error."""
    mono = frames.astype(np.float32, copy=False).mean(axis=1, dtype=np.float32)
    if not np.isfinite(mono).all():
        raise AudioError(f"{name}: contains NaN or infinite samples")
    return mono
