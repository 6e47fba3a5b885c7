"""The page's example clips: each is there, short, with its reference text, and assets/SOURCES.md says where
it comes from and under which licence; people speaking come before synthetic voices. Nothing is decoded."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
import soundfile as sf

import app
from specdec.app import controls

SOURCES = app.ASSETS / "SOURCES.md"
MAX_RECORDED_BYTES = 1_000_000  # the recordings added for the page, all together


def source_entries() -> list[str]:
    """SOURCES.md's bullets, each joined into one line."""
    entries, current = [], None
    for line in SOURCES.read_text(encoding="utf-8").splitlines():
        if line.startswith("- "):
            current = line[2:]
            entries.append(current)
        elif line.startswith("  ") and current is not None:
            entries[-1] = current = f"{current} {line.strip()}"
        else:
            current = None
    return entries


def entry_for(clip: str) -> str:
    """The bullet that names the clip (a path under assets/, or a pattern matching it) before its colon."""
    found = [
        entry
        for entry in source_entries()
        if any(fnmatch.fnmatch(clip, name) for name in entry.partition(": ")[0].strip().split("`")[1::2])
    ]
    assert len(found) == 1, f"{clip}: {len(found)} entries in {SOURCES.name}"
    return found[0]


def example_names() -> list[str]:
    return [Path(clip).relative_to(app.ASSETS).as_posix() for clip, _, _ in app.examples()]


@pytest.mark.parametrize("row", app.examples(), ids=lambda row: Path(row[0]).name)
def test_each_example_is_a_short_clip_with_its_reference_text(row):
    clip, reference, language = row
    info = sf.info(clip)
    assert 1 < info.duration <= 30  # one window: the page's first click answers in seconds
    assert reference and reference == Path(clip).with_suffix(".txt").read_text(encoding="utf-8").strip()
    assert language in controls.LANGUAGES and Path(clip).name.startswith(f"{language}-")


@pytest.mark.parametrize("clip", example_names())
def test_each_example_says_where_it_is_from_and_its_licence(clip):
    entry = entry_for(clip)
    assert "Licence: " in entry and len(entry) > 80, entry


def test_people_speaking_come_first():
    synthetic = ["espeak-ng" in entry_for(clip) for clip in example_names()]
    assert not synthetic[0]
    assert synthetic == sorted(synthetic)  # every recording before every synthetic voice


def test_the_recordings_stay_small():
    recorded = sorted((app.ASSETS / "recorded").glob("*.flac"))
    assert recorded and sum(path.stat().st_size for path in recorded) < MAX_RECORDED_BYTES
    for path in recorded:
        assert sf.info(path).samplerate == 16_000 and sf.info(path).channels == 1
