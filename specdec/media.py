"""The first audio stream of any audio or video container ffmpeg reads (m4a, webm, mp4, mkv, ...), via PyAV.

`specdec.audio.load_audio` calls this for the files soundfile cannot open. It yields float32 blocks at the
stream's own rate, shape (frames, channels), one block at a time, so a long file is never decoded whole;
the caller downmixes and resamples them as it does soundfile's blocks.

Only the containers in `FORMATS` are opened, and only from local files: a playlist (HLS, ffconcat) names
other files or URLs, which ffmpeg would otherwise open on behalf of whoever uploaded it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import av

# ffmpeg's demuxers for audio and video files (a name matches any of a demuxer's aliases: "mov" is
# mov,mp4,m4a,3gp,3g2,mj2; "matroska" is matroska,webm). No playlists, image sequences or devices.
FORMATS = (
    "aac,ac3,aiff,amr,ape,asf,au,avi,caf,dts,eac3,flac,flv,matroska,mov,mp3,mpeg,mpegts,mxf,ogg,rm,"
    "truehd,w64,wav,wv"
)
OPEN_OPTIONS = {"format_whitelist": FORMATS, "protocol_whitelist": "file"}


class MediaError(ValueError):
    """A file ffmpeg opened but cannot give audio from; the message is one line, without the file's name."""


class NotMedia(MediaError):
    """A file that is not an audio or video container ffmpeg opens (under `FORMATS`)."""


class AudioStream:
    """The first audio stream of an open container: its rate, its length if recorded, and its blocks."""

    def __init__(self, container: av.container.InputContainer, stream: av.AudioStream) -> None:
        self.container = container
        self.stream = stream
        self.sample_rate: int = stream.codec_context.sample_rate
        self.seconds: float | None = _recorded_seconds(container, stream)

    def blocks(self, num_frames: int) -> Iterator[np.ndarray]:
        """Decoded audio as float32 blocks of about num_frames frames, shape (frames, channels).

        Every frame is converted to planar float at the stream's rate (a stream whose layout or rate
        changes midway keeps its first layout and its header's rate). A packet the decoder or demuxer
        rejects ends the stream with a MediaError, whatever was decoded before it."""
        av = _pyav()
        converter = av.AudioResampler(format="fltp", rate=self.sample_rate)
        pending: list[np.ndarray] = []  # each (channels, frames)
        held = 0
        try:
            for frame in self.container.decode(self.stream):
                for converted in converter.resample(frame):
                    pending.append(converted.to_ndarray())
                    held += converted.samples
                if held >= num_frames:
                    yield np.concatenate(pending, axis=1).T
                    pending, held = [], 0
            pending += [converted.to_ndarray() for converted in converter.resample(None)]
        except (av.error.FFmpegError, OSError) as err:
            raise MediaError(f"could not decode audio; truncated or corrupt? ({_reason(err)})") from err
        if pending:
            yield np.concatenate(pending, axis=1).T


@contextlib.contextmanager
def first_audio_stream(path: str) -> Iterator[AudioStream]:
    """Open a local file and give its first audio stream; NotMedia when ffmpeg does not open it, and a
    MediaError when it holds no audio stream. The file is closed on leaving."""
    av = _pyav()
    try:
        container = av.open(path, options=OPEN_OPTIONS, metadata_errors="ignore")
    except av.error.ArgumentError as err:  # what format_whitelist answers for any other demuxer
        raise NotMedia("a format not read here, such as a playlist or an image") from err
    except (av.error.FFmpegError, OSError) as err:
        container_kind = _container_kind(path)
        if container_kind:  # its signature is there, so the rest is missing or damaged
            raise MediaError(
                f"could not open this {container_kind} file; truncated or corrupt? ({_reason(err)})"
            ) from err
        raise NotMedia(_reason(err)) from err
    with container:
        if not container.streams:
            raise MediaError("no streams found; truncated or corrupt?")
        if not container.streams.audio:
            kinds = " and ".join(sorted({stream.type for stream in container.streams}))
            raise MediaError(f"no audio stream (the file holds {kinds} only)")
        yield AudioStream(container, container.streams.audio[0])


def _recorded_seconds(container: av.container.InputContainer, stream: av.AudioStream) -> float | None:
    """The stream's length as the container records it (the file's, when the stream's is not), or None
    where neither is recorded (a browser's MediaRecorder webm)."""
    if stream.duration is not None and stream.time_base is not None and stream.duration > 0:
        return float(stream.duration * stream.time_base)
    if container.duration is not None and container.duration > 0:
        return container.duration / _pyav().time_base
    return None


def _pyav():
    """PyAV, imported on first use: only files soundfile cannot open need it (wav, flac and ogg never do),
    and importing it loads ffmpeg's libraries."""
    import av

    return av


def _container_kind(path: str) -> str | None:
    """The container a file's first bytes announce ("MP4/M4A/MOV", "WebM/Matroska"), or None."""
    try:
        with open(path, "rb") as file:
            head = file.read(12)
    except OSError:
        return None
    if head[4:8] == b"ftyp":
        return "MP4/M4A/MOV"
    if head[:4] == b"\x1a\x45\xdf\xa3":  # EBML
        return "WebM/Matroska"
    return None


def _reason(err: Exception) -> str:
    """ffmpeg's message, without the errno and the file name PyAV adds."""
    return str(getattr(err, "strerror", None) or err).strip().rstrip(".")
