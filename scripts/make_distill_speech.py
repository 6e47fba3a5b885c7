"""Unlabelled speech for distilling a draft: sentences in many languages spoken by espeak-ng or Festival.

    python scripts/make_distill_speech.py OUT [--per-language 400] [--languages en,de,...] [--seed 0]
    python scripts/make_distill_speech.py OUT --languages en --texts fortunes   # English prose and dialogue
    python scripts/make_distill_speech.py OUT --synth festival --languages en,it,cs,ru --texts fortunes

No human transcript is needed (the draft learns the target's own outputs), so any text serves. The texts come
from what ships offline: the translated messages of the Debian packages installed here (gettext catalogs under
/usr/share/locale, read with Python's `gettext`; their English originals for English) and, for English, the
docstrings of Python's standard library. `--texts fortunes` takes English sentences from the Debian
package `fortunes` instead (quotations, jokes and dialogue: closer to speech than UI messages;
`apt-get install fortunes`). Each sentence is spoken by a voice of its language at a random speed
and pitch (espeak-ng's variants), resampled with sox to 16 kHz mono: OUT/<language>/<n>.wav and <n>.txt.
Needs `apt-get install espeak-ng sox`.

`--synth festival` speaks with voices made from recordings of people instead of espeak-ng's formant
synthesis: Flite's and Festival's diphone, unit-selection and HTS voices (seven English ones, two Italian,
two Czech, one Russian), each sentence at a random speed (Flite's own duration stretch, else sox's
tempo) and shifted in pitch by up to two semitones.
Needs `apt-get install flite festival festvox-kdlpc16k festvox-kallpc16k festvox-us-slt-hts
festvox-italp16k festvox-itapc16k festvox-ru festvox-czech-dita festvox-czech-machac sox`.
"""

from __future__ import annotations

import argparse
import gettext
import glob
import pydoc
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# Whisper code -> (gettext catalog folder, espeak-ng voice)
LANGUAGES = {
    "en": (None, "en-us"),
    "de": ("de", "de"),
    "es": ("es", "es"),
    "fr": ("fr", "fr-fr"),
    "nl": ("nl", "nl"),
    "it": ("it", "it"),
    "pt": ("pt", "pt"),
    "ru": ("ru", "ru"),
    "pl": ("pl", "pl"),
    "sv": ("sv", "sv"),
    "tr": ("tr", "tr"),
    "cs": ("cs", "cs"),
}
# Whisper code -> Flite ("flite:") and Festival voices built from recordings of people
FESTIVAL_VOICES = {
    "en": (
        "flite:awb",
        "flite:rms",
        "flite:slt",
        "flite:kal16",
        "kal_diphone",
        "ked_diphone",
        "cmu_us_slt_arctic_hts",
    ),
    "it": ("lp_diphone", "pc_diphone"),
    "cs": ("czech_dita", "czech_machac"),
    "ru": ("msu_ru_nsh_clunits",),
}
FESTIVAL_ENCODINGS = {"it": "iso-8859-1", "cs": "iso-8859-2"}  # what those voices read; the others UTF-8
ENGLISH_VOICES = ("en-us", "en-gb", "en-gb-x-rp", "en-us-nyc", "en-gb-scotland", "en-029")
VARIANTS = ("", "+m1", "+m2", "+m3", "+m4", "+f1", "+f2", "+f3", "+f4")
MIN_WORDS, MAX_WORDS = 5, 30
FORTUNES = "/usr/share/games/fortunes"
UNSPEAKABLE = re.compile(r"[%{}<>\\/_=|\[\]@#$^*~`&]|\.\.\.|--|\n")  # format strings, markup, paths


def usable(text: str) -> bool:
    """A sentence worth speaking: plain words, 5-30 of them, no format codes or markup."""
    words = text.split()
    return (
        MIN_WORDS <= len(words) <= MAX_WORDS
        and not UNSPEAKABLE.search(text)
        and any(c.isalpha() for c in text)
    )


def catalog_sentences(folder: str | None) -> list[str]:
    """Translated messages of every gettext catalog for one locale folder (None: their English originals)."""
    pattern = f"/usr/share/locale/{folder or '*'}/LC_MESSAGES/*.mo"
    sentences = set()
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path, "rb") as handle:
                catalog = gettext.GNUTranslations(handle)._catalog
        except (OSError, UnicodeDecodeError, LookupError):  # some catalogs are not UTF-8 or broken
            continue
        for original, translated in catalog.items():
            text = original if folder is None else translated
            if isinstance(original, tuple):
                original = original[0]
            if isinstance(text, str) and original and usable(text.strip()):
                sentences.add(" ".join(text.split()))
    return sorted(sentences)


def docstring_sentences() -> list[str]:
    """Sentences of the standard library's docstrings (English prose that ships with Python)."""
    import builtins
    import collections
    import json
    import os
    import pathlib
    import statistics
    import string
    import textwrap

    sentences = set()
    for module in (builtins, collections, json, os, pathlib, statistics, string, textwrap, random, re):
        text = pydoc.render_doc(module, renderer=pydoc.plaintext)
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(text.split())):
            if usable(sentence) and sentence[0].isupper():
                sentences.add(sentence)
    return sorted(sentences)


def fortune_sentences() -> list[str]:
    """Sentences of the Debian `fortunes` package's English files (quotations, dialogue, jokes)."""
    sentences = set()
    for path in sorted(glob.glob(f"{FORTUNES}/*")):
        if "." in Path(path).name:  # the .dat indexes and .u8 links
            continue
        for entry in Path(path).read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            lines = [line for line in entry.splitlines() if not line.strip().startswith("--")]  # attributions
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(" ".join(lines).split())):
                if usable(sentence) and sentence[0].isupper():
                    sentences.add(sentence)
    return sorted(sentences)


def english_sentences(texts: str) -> list[str]:
    if texts == "fortunes":
        if not glob.glob(f"{FORTUNES}/*"):
            sys.exit(f"no fortunes in {FORTUNES}: apt-get install fortunes")
        return fortune_sentences()
    return catalog_sentences(None) + docstring_sentences()


def speak(text: str, voice: str, rng: random.Random, out: Path) -> None:
    """text spoken by voice at a random speed and pitch, as a 16 kHz mono WAV."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as raw:
        speed, pitch = rng.randint(130, 185), rng.randint(30, 70)
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", raw.name, "--stdin"],
            input=text.encode(),
            check=True,
        )
        subprocess.run(["sox", raw.name, "-r", "16000", "-c", "1", "-b", "16", str(out)], check=True)


def speak_festival(text: str, voice: str, language: str, rng: random.Random, out: Path) -> bool:
    """text spoken by a Flite or Festival voice at a random speed and pitch, as a 16 kHz mono WAV; False
    where the voice could not say it (a voice error or hang; characters its language's encoding lacks are
    dropped from the sentence)."""
    stretch, cents = round(rng.uniform(0.85, 1.25), 2), rng.randint(-200, 200)
    sox_effects = ["pitch", str(cents)]
    with tempfile.TemporaryDirectory() as scratch:
        words, raw = Path(scratch, "words.txt"), Path(scratch, "raw.wav")
        words.write_bytes(text.encode(FESTIVAL_ENCODINGS.get(language, "utf-8"), errors="ignore"))
        if voice.startswith("flite:"):
            command = ["flite", "-voice", voice[6:], "--setf", f"duration_stretch={stretch}", "-f", words]
        else:  # the HTS and unit-selection voices ignore Festival's Duration_Stretch: sox sets the speed
            command = ["text2wave", "-eval", f"(voice_{voice})", words]
            sox_effects += ["tempo", "-s", f"{1 / stretch:.3f}"]
        try:
            spoken = subprocess.run([*command, "-o", raw], capture_output=True, timeout=120)
            if spoken.returncode != 0 or not raw.is_file() or raw.stat().st_size < 4000:
                return False
            subprocess.run(
                ["sox", raw, "-r", "16000", "-c", "1", "-b", "16", str(out), *sox_effects],
                check=True,
                capture_output=True,
            )
        except (subprocess.TimeoutExpired, subprocess.CalledProcessError):
            out.unlink(missing_ok=True)
            return False
    if out.stat().st_size < 16_044:  # under half a second of 16-bit samples (a voice's broken header)
        out.unlink()
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--per-language", type=int, default=400)
    parser.add_argument("--languages", default=",".join(LANGUAGES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--texts", choices=("catalogs", "fortunes"), default="catalogs", help="English texts (see above)"
    )
    parser.add_argument(
        "--synth", choices=("espeak-ng", "festival"), default="espeak-ng", help="the voices (see above)"
    )
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    languages = args.languages.split(",")
    if args.synth == "festival" and set(languages) - set(FESTIVAL_VOICES):
        sys.exit(f"--synth festival speaks {', '.join(FESTIVAL_VOICES)}, not {args.languages}")
    for language in languages:
        folder, voice = LANGUAGES[language]
        sentences = english_sentences(args.texts) if folder is None else catalog_sentences(folder)
        chosen = rng.sample(sentences, min(args.per_language, len(sentences)))
        directory = args.out / language
        directory.mkdir(parents=True, exist_ok=True)
        for n, text in enumerate(chosen):
            if (directory / f"{n:05d}.txt").exists():  # made by an earlier run with the same seed
                continue
            wav = directory / f"{n:05d}.wav"
            if args.synth == "festival":
                said = speak_festival(text, rng.choice(FESTIVAL_VOICES[language]), language, rng, wav)
                if not said:
                    print(f"{language} {n:05d}: the voice could not say {text!r}", file=sys.stderr)
                    continue
            else:
                voices = ENGLISH_VOICES if language == "en" else (voice,)
                speak(text, rng.choice(voices) + rng.choice(VARIANTS), rng, wav)
            (directory / f"{n:05d}.txt").write_text(text + "\n")
        print(f"{language}: {len(chosen)} of {len(sentences)} sentences", file=sys.stderr)


if __name__ == "__main__":
    main()
