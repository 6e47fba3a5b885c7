"""Recorded English speech to train a self-draft on, from a Debian package: a game's voice acting.

    python scripts/get_game_speech.py OUT [--lines N] [--seed S] [--min-seconds T]

A self-draft learns from audio its target reads, no transcripts needed (`specdec distill`), and what it
learns from synthetic voices (espeak-ng, Festival) carries over poorly to people speaking
(docs/benchmarks.md). The CD version of the adventure game "Flight of the Amazon Queen" (1995, freeware:
Debian's `flight-of-the-amazon-queen`, free to redistribute with its readme) holds 4.5 hours of recorded
English dialogue, about 6,600 lines spoken by its cast, as MP3 at 11,025 Hz inside its data file
`queen.1c`. This script fetches the package (`apt-get download`, into OUT/cache), reads the file's table of
entries and writes each line of dialogue (or N of them, drawn with the seed, of those at least T seconds
long) as OUT/en/NAME.wav at its own rate (reading it for training resamples it); the folder's name tells
`specdec distill` the language. A line the game stores twice (34 of them, under two names) is written once.
For measuring rather than training: `--lines 12 --min-seconds 3.5` gives sentences of the length a user
records (docs/benchmarks.md).

Needs Debian's `apt-get` (with its package lists: `apt-get update`) and `dpkg-deb`; the package is in main.

queen.1c begins with "QTBL", a 6-byte version, a floppy and a demo flag, the codec of its sounds (1: MP3),
the number of entries (16 bits, big-endian); then 21 bytes per entry: a name (12 bytes, zero-padded), a
bundle number, and the entry's offset from the file's start and its size (32 bits each, big-endian). The
speech is in the entries named *.SB, beside the sound effects, named by a number, maybe a letter, and "S"
up to eight characters (116BSSSS).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile

PACKAGE = "flight-of-the-amazon-queen"
DATA_FILE = "usr/share/scummvm/flight-of-the-amazon-queen/queen.1c"
MP3 = 1
ENTRY = struct.Struct(">12sBII")  # name, bundle, offset, size
SOUND_EFFECT = re.compile(r"\d+[A-Z]?S+")
NOT_DIALOGUE = {"BLANK000", "ROCKPAKS"}  # a near-silent entry and a sound named otherwise


def data_file(cache: Path) -> Path:
    """queen.1c from the Debian package, downloaded and unpacked into cache once."""
    unpacked = cache / "package"
    if not (unpacked / DATA_FILE).is_file():
        cache.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(["apt-get", "download", PACKAGE], cwd=cache, check=True)
            package = sorted(cache.glob(f"{PACKAGE}_*.deb"))[-1]
            subprocess.run(["dpkg-deb", "-x", str(package), str(unpacked)], check=True)
        except (OSError, subprocess.CalledProcessError) as error:
            sys.exit(f"could not fetch Debian's {PACKAGE} (needs apt-get, dpkg-deb, apt-get update): {error}")
    return unpacked / DATA_FILE


def dialogue_entries(data: bytes) -> dict[str, tuple[int, int]]:
    """Each line of dialogue's name -> (offset, size) in the data file."""
    if data[:4] != b"QTBL" or data[12] != MP3:
        raise ValueError("not a queen.1c with its sounds in MP3")
    (count,) = struct.unpack_from(">H", data, 13)
    entries = {}
    for index in range(count):
        raw_name, _, offset, size = ENTRY.unpack_from(data, 15 + index * ENTRY.size)
        name = raw_name.rstrip(b"\0").decode("ascii")
        stem, _, suffix = name.partition(".")
        if suffix == "SB" and not SOUND_EFFECT.fullmatch(stem) and stem not in NOT_DIALOGUE:
            entries[stem] = (offset, size)
    return entries


def decoded(data: bytes, entry: tuple[int, int]) -> tuple[np.ndarray, int]:
    """An entry's audio (samples, or (samples, channels)) and its sample rate."""
    offset, size = entry
    return soundfile.read(io.BytesIO(data[offset : offset + size]), dtype="float32")


def _seconds(audio: np.ndarray, rate: int) -> float:
    return len(audio) / rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--lines", type=int, default=None, help="how many lines to write (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="which lines, with --lines")
    parser.add_argument("--min-seconds", type=float, default=0.0, help="only lines at least this long")
    args = parser.parse_args()
    if args.lines is not None and args.lines < 1:
        parser.error("--lines must be at least 1")
    data = data_file(args.out / "cache").read_bytes()
    entries = dialogue_entries(data)
    first_named = {}  # each recording's bytes -> the first name it is stored under
    for name, (offset, size) in sorted(entries.items()):
        first_named.setdefault(hashlib.sha256(data[offset : offset + size]).digest(), name)
    names = sorted(first_named.values())
    if args.min_seconds:  # an MP3 entry's length is known once it is decoded
        names = [name for name in names if _seconds(*decoded(data, entries[name])) >= args.min_seconds]
    if args.lines is not None:
        names = sorted(random.Random(args.seed).sample(names, min(args.lines, len(names))))
    folder = args.out / "en"
    folder.mkdir(parents=True, exist_ok=True)
    seconds = 0.0
    for name in names:
        audio, rate = decoded(data, entries[name])
        soundfile.write(folder / f"{name}.wav", audio, rate, subtype="PCM_16")
        seconds += _seconds(audio, rate)
    print(f"{len(names)} lines of dialogue, {seconds / 60:.1f} minutes, in {folder}", file=sys.stderr)


if __name__ == "__main__":
    main()
