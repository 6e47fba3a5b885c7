"""Real recorded English speech that no draft here was trained on, from what a package registry serves.

    python scripts/get_real_speech.py OUT

Every clip in assets/ but JFK is espeak-ng's; the shipped self-draft was trained on espeak-ng speech only.
Real speech that installs offline (no hub): the source distribution of `pyannote.audio` (MIT) carries 30 s
excerpts of AMI meetings (the AMI Meeting Corpus, CC BY 4.0: several speakers, far-field microphones,
overlapping talk) and a 30 s telephone call in its tests and sample; `gradio`, a requirement of the app,
carries three short film lines among its media assets. Written to OUT:

- `OUT/short/*.wav`: the film lines (3.5-8.4 s), as they are.
- `OUT/meeting/*.wav`: the telephone call and five AMI excerpts, each cut to 29.9 s (one window: at 30 s
  and one sample, whisper would take its long-form path); `OUT/meeting/sample.txt`: what is said in the
  call's 29.9 s, from the sdist's own transcript of it (`sample.stm`), the one reference among them.
- `OUT/long/ami-2min.wav`: four more AMI excerpts joined with 0.5 s of silence (2 minutes, long-form).

Needs `pip download` to reach a registry (it fetches the 14 MB sdist once, into OUT/cache).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import soundfile

PYANNOTE = "pyannote.audio==4.0.7"
SAMPLE_RATE = 16_000
ONE_WINDOW_SECONDS = 29.9
MEETING = ("sample", "dev00", "dev01", "tst00", "tst01", "trn01")  # one-window clips
LONG = ("trn02", "trn03", "trn04", "trn05")  # joined into a 2-minute clip
FILM_LINES = ("cate_blanch.mp3", "cate_blanch_2.mp3", "heath_ledger.mp3")  # gradio's, real speech


def sdist(cache: Path) -> Path:
    """pyannote.audio's source distribution, downloaded once."""
    found = sorted(cache.glob("pyannote_audio-*.tar.gz"))
    if not found:
        command = [sys.executable, "-m", "pip", "download", PYANNOTE, "--no-binary", ":all:", "--no-deps"]
        subprocess.run([*command, "-d", str(cache), "-q"], check=True)
        found = sorted(cache.glob("pyannote_audio-*.tar.gz"))
    return found[-1]


def call_transcript(archive: Path) -> str:
    """The words said in the telephone call's first ONE_WINDOW_SECONDS, from its STM transcript (one turn a
    line: file, channel, speaker, start, end, words)."""
    with tarfile.open(archive) as tar:
        member = next(member for member in tar.getmembers() if member.name.endswith("sample/sample.stm"))
        lines = tar.extractfile(member).read().decode().splitlines()
    turns = [line.split(maxsplit=5) for line in lines if line.strip()]
    return " ".join(turn[5] for turn in turns if float(turn[4]) <= ONE_WINDOW_SECONDS) + "\n"


def pyannote_waves(archive: Path) -> dict[str, np.ndarray]:
    """name -> 16 kHz mono float32 audio of the sdist's test excerpts and its sample."""
    waves = {}
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            path = Path(member.name)
            if path.suffix == ".wav" and ("tests/data" in member.name or path.parent.name == "sample"):
                audio, rate = soundfile.read(tar.extractfile(member), dtype="float32")
                assert rate == SAMPLE_RATE and audio.ndim == 1, member.name
                waves[path.stem] = audio
    return waves


def film_lines(out: Path) -> None:
    import gradio

    folder = Path(gradio.__file__).parent / "media_assets" / "audio"
    for name in FILM_LINES:
        audio, rate = soundfile.read(folder / name, dtype="float32")
        soundfile.write(out / f"{Path(name).stem}.wav", audio, rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    for folder in ("short", "meeting", "long", "cache"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    archive = sdist(out / "cache")
    waves = pyannote_waves(archive)
    (out / "meeting" / "sample.txt").write_text(call_transcript(archive))
    one_window = int(ONE_WINDOW_SECONDS * SAMPLE_RATE)
    for name in MEETING:
        soundfile.write(out / "meeting" / f"{name}.wav", waves[name][:one_window], SAMPLE_RATE)
    pause = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
    joined = np.concatenate([part for name in LONG for part in (waves[name], pause)][:-1])
    soundfile.write(out / "long" / "ami-2min.wav", joined, SAMPLE_RATE)
    film_lines(out / "short")
    print("\n".join(str(path) for path in sorted(out.glob("*/*.wav"))))


if __name__ == "__main__":
    main()
