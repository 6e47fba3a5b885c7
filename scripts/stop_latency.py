"""Seconds from the Live view's Stop to its final text, on the CPU default pair.

Each clip (cut at the given second, often mid-sentence) is fed to a Live listener in real time as the
browser sends it (0.5 s chunks), Stop is pressed right after the last chunk, and the time until
`Listener.stop()` returns the final committed text is printed with the audio still undecoded at Stop.

    python scripts/stop_latency.py
    python scripts/stop_latency.py assets/en-jfk.flac assets/long/en-talk.ogg:30.4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specdec.api import SpeculativeWhisper  # noqa: E402
from specdec.app.live import Listener  # noqa: E402
from specdec.audio import SAMPLE_RATE, load_audio  # noqa: E402
from specdec.streaming.session import StreamOptions, StreamSession  # noqa: E402

CLIPS = (
    "assets/en-jfk.flac",
    "assets/en-weather.wav",
    "assets/long/en-six-parts.flac:21.3",
    "assets/long/en-six-parts.flac:37.7",
    "assets/long/en-talk.ogg:30.4",
    "assets/long/en-talk.ogg:52.9",
)
CHUNK_SECONDS = 0.5  # as often as the page's microphone sends


def stop_seconds(whisper: SpeculativeWhisper, clip: str, language: str) -> tuple[float, float, str]:
    """(seconds from Stop to the final text, seconds undecoded at Stop, the final text) of one clip."""
    path, _, cut = clip.partition(":")
    waveform = load_audio(path, max_seconds=None)
    waveform = waveform[: round(float(cut) * SAMPLE_RATE)] if cut else waveform
    listener = Listener(StreamSession(whisper, StreamOptions(language=language)))
    size, start = round(CHUNK_SECONDS * SAMPLE_RATE), time.monotonic()
    for at in range(0, len(waveform), size):
        time.sleep(max(start + (at + size) / SAMPLE_RATE - time.monotonic(), 0.0))
        listener.hear(SAMPLE_RATE, waveform[at : at + size])
    stopped, undecoded = time.monotonic(), listener.undecoded_seconds
    final = listener.stop()
    return time.monotonic() - stopped, undecoded, final.committed_text


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("clips", nargs="*", default=CLIPS, help="FILE or FILE:SECONDS (cut there)")
    parser.add_argument("--language", default="en")
    arguments = parser.parse_args()
    whisper = SpeculativeWhisper(device="cpu")
    whisper.warm_up()
    took = []
    for clip in arguments.clips:
        seconds, undecoded, text = stop_seconds(whisper, clip, arguments.language)
        took.append(seconds)
        print(f"{clip}: Stop to final text {seconds:.2f} s ({undecoded:.1f} s undecoded) ...{text[-50:]!r}")
    print(f"median {statistics.median(took):.2f} s, max {max(took):.2f} s")


if __name__ == "__main__":
    main()
