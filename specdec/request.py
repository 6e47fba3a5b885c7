"""A request's options on the command line, built from their one declaration (`specdec.options.option`).

Each `TranscribeOptions` field declares its default, help and choices once; `add_option_arguments` turns
the fields a command takes into its arguments (a bool that defaults to False is a switch, one that
defaults to True has its `--no-` form, the rest take a value of the field's type), and
`options_from_arguments` reads them back into options, which check every value in one place. Whisper's
own values of its no-speech rule and temperature fallback come as two presets, `--detect-no-speech` and
`--fallback`, which an option given beside them overrides.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from collections.abc import Iterable

from specdec.options import (
    WHISPER_COMPRESSION_RATIO_THRESHOLD,
    WHISPER_LOGPROB_THRESHOLD,
    WHISPER_NO_SPEECH_THRESHOLD,
    DecodeOptions,
    TranscribeOptions,
    whisper_temperatures,
)

PRESETS = {  # name -> (help, the fields it sets)
    "detect_no_speech": (
        f"the no-speech rule with Whisper's values: --no-speech-threshold {WHISPER_NO_SPEECH_THRESHOLD} "
        f"--logprob-threshold {WHISPER_LOGPROB_THRESHOLD}",
        {"no_speech_threshold": WHISPER_NO_SPEECH_THRESHOLD, "logprob_threshold": WHISPER_LOGPROB_THRESHOLD},
    ),
    "fallback": (
        "Whisper's temperature fallback against loops and unsure text: temperatures from --temperature up "
        f"to 1 by 0.2 ({' '.join(f'{t:g}' for t in whisper_temperatures())} by default), "
        f"--compression-ratio-threshold {WHISPER_COMPRESSION_RATIO_THRESHOLD} --logprob-threshold "
        f"{WHISPER_LOGPROB_THRESHOLD} (each unless given; off by default, as generate())",
        {
            "compression_ratio_threshold": WHISPER_COMPRESSION_RATIO_THRESHOLD,
            "logprob_threshold": WHISPER_LOGPROB_THRESHOLD,
        },
    ),
}


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--target and --draft: a hub id, a short name or a folder each; by default the device's pair."""
    kinds = "hub id, short name, local or CTranslate2 (faster-whisper) folder"
    defaults = "default by device: base + its self-draft on a CPU (bundled), large-v3 + tiny on a GPU"
    parser.add_argument("--target", default="auto", help=f"{kinds}; {defaults}")
    parser.add_argument("--draft", default="auto", help=kinds)


def command_line_fields(options: type = DecodeOptions) -> tuple[str, ...]:
    """The fields of `options` on the command line: every declared one but those declared `flags=()`."""
    return tuple(field.name for field in dataclasses.fields(options) if flags(field))


def flags(field: dataclasses.Field) -> tuple[str, ...]:
    """A field's command-line names: as declared, else --its-name (none for an undeclared field)."""
    if "help" not in field.metadata:
        return ()
    return tuple(field.metadata.get("flags", (f"--{field.name.replace('_', '-')}",)))


def add_option_arguments(parser: argparse.ArgumentParser, names: Iterable[str]) -> None:
    """The arguments of the fields `names`, then the presets of the ones they set."""
    declared = _fields()
    names = tuple(names)
    for name in names:
        field = declared[name]
        parser.add_argument(*flags(field), dest=name, **_argument(field))
    for preset, (help_text, sets) in PRESETS.items():
        if set(sets) <= set(names):
            parser.add_argument(f"--{preset.replace('_', '-')}", action="store_true", help=help_text)


def options_from_arguments(
    args: argparse.Namespace, names: Iterable[str], options: type = TranscribeOptions
) -> DecodeOptions:
    """The options the parsed arguments of `names` give (each preset's values where no argument gives
    its own)."""
    given = {name: getattr(args, name) for name in names}
    for preset, (_, sets) in PRESETS.items():
        if getattr(args, preset, False):
            given |= {name: value for name, value in sets.items() if given.get(name) is None}
    if "temperature" in given:
        given["temperature"] = _temperature(given["temperature"], getattr(args, "fallback", False))
    return options(**given)


def _temperature(given: list[float] | None, fallback: bool) -> float | tuple[float, ...]:
    """One temperature or several; with --fallback, one becomes openai-whisper's steps from it up to 1."""
    given = given or [DecodeOptions.temperature]
    if len(given) > 1:
        return tuple(given)
    return whisper_temperatures(given[0]) if fallback else given[0]


def _argument(field: dataclasses.Field) -> dict:
    """argparse's keywords for one declared field."""
    kind, default = _kind(_types()[field.name]), field.default
    keywords = {"help": field.metadata["help"]}
    if kind is bool:
        if default is True:
            return keywords | {"action": argparse.BooleanOptionalAction, "default": True}
        return keywords | {"action": "store_true", "default": default}
    keywords |= {key: field.metadata[key] for key in ("nargs", "metavar", "choices") if key in field.metadata}
    if "nargs" in keywords:
        default = None  # read back by options_from_arguments (a list, or nothing given)
    if default is not None:
        keywords["help"] += " (default %(default)s)"
    return keywords | {"type": kind, "default": default}


def _kind(annotation) -> type:
    """The argument type of a field's annotation: its first non-None member (float of `float | tuple`)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next(member for member in typing.get_args(annotation) if member is not type(None))
    return annotation


@functools.cache
def _types() -> dict:
    return typing.get_type_hints(TranscribeOptions)


@functools.cache
def _fields() -> dict[str, dataclasses.Field]:
    return {field.name: field for field in dataclasses.fields(TranscribeOptions)}
