"""A request's options at every door, built from their one declaration (`specdec.options.option`).

Each `TranscribeOptions` field declares its default, help and choices once. From them: the command line
(`add_option_arguments`: a bool that defaults to False is a switch, one that defaults to True has its
`--no-` form, the rest take a value of the field's type, read back by `options_from_arguments`), a form
field's text read as the field's type (`parse`: /v1's fields), and the page's controls
(`specdec.app.controls`). The values of the command line, the page and /v1 become options in one
function, `options_from_values` (the Python API takes the options' own fields; a live stream decodes
with its own fixed settings, `StreamOptions.decode_options`), and the options check every value in one
place. Whisper's own values of its no-speech rule and temperature
fallback come as two presets, `detect_no_speech` and `fallback` (`--detect-no-speech`, `--fallback`, the
page's two switches, /v1's fields), which a value given beside them overrides.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import numbers
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from specdec.options import (
    WHISPER_COMPRESSION_RATIO_THRESHOLD,
    WHISPER_LOGPROB_THRESHOLD,
    WHISPER_NO_SPEECH_THRESHOLD,
    DecodeOptions,
    TranscribeOptions,
    whisper_temperatures,
)


@dataclass(frozen=True)
class Preset:
    """A switch for several options at once: Whisper's own values of one of its rules."""

    help: str
    sets: dict  # field -> value, each unless a value is given beside the switch
    label: str  # its name on the page


PRESETS = {
    "detect_no_speech": Preset(
        "Whisper's no-speech rule with its values (no-speech probability over "
        f"{WHISPER_NO_SPEECH_THRESHOLD:g} and average log-probability under {WHISPER_LOGPROB_THRESHOLD:g},"
        " as openai-whisper's transcribe()): a window judged silence is left empty; off: every window is "
        "decoded, as generate() by default",
        {"no_speech_threshold": WHISPER_NO_SPEECH_THRESHOLD, "logprob_threshold": WHISPER_LOGPROB_THRESHOLD},
        "Leave windows of no speech empty",
    ),
    "fallback": Preset(
        "Whisper's temperature fallback with its values (openai-whisper's transcribe()): a window whose "
        f"tokens compress more than {WHISPER_COMPRESSION_RATIO_THRESHOLD:g} times under zlib (a loop) or "
        f"whose average log-probability is under {WHISPER_LOGPROB_THRESHOLD:g} is decoded again, sampled, at "
        "the next temperature from the one chosen up to 1 by 0.2; off: one temperature, as generate() by "
        "default",
        {
            "compression_ratio_threshold": WHISPER_COMPRESSION_RATIO_THRESHOLD,
            "logprob_threshold": WHISPER_LOGPROB_THRESHOLD,
        },
        "Temperature fallback against loops",
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


def declared(name: str) -> dataclasses.Field:
    """The declaration of the option `name` (a `TranscribeOptions` field)."""
    return _fields()[name]


def kind(name: str) -> type:
    """The type of a declared option's values (its annotation's first member that is not None), or of a
    preset's (bool)."""
    return bool if name in PRESETS else _kind(_types()[name])


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
    for name, preset in PRESETS.items():
        if set(preset.sets) <= set(names):
            parser.add_argument(f"--{name.replace('_', '-')}", action="store_true", help=preset.help)


def options_from_arguments(
    args: argparse.Namespace, names: Iterable[str], options: type = TranscribeOptions
) -> DecodeOptions:
    """The options the parsed arguments of `names` give (`options_from_values` of them and the presets')."""
    names = tuple(names)
    presets = [name for name, preset in PRESETS.items() if set(preset.sets) <= set(names)]
    return options_from_values({name: getattr(args, name) for name in (*names, *presets)}, options)


def options_from_values(values: Mapping[str, object], options: type = TranscribeOptions) -> DecodeOptions:
    """The options a door's values give: declared fields by name, and the presets' switches (each sets its
    values where no value of the door gives its own; `fallback` makes one temperature openai-whisper's
    steps from it up to 1; an acceptance threshold of 0 is exact decoding, as None). Every value is
    checked by the options (ValueError)."""
    given = {name: value for name, value in values.items() if name not in PRESETS}
    if given.get("acceptance_threshold") == 0:  # a door's 0 (the page's slider at its end): exact
        given["acceptance_threshold"] = None
    for name, preset in PRESETS.items():
        switched = values.get(name, False)
        if not isinstance(switched, bool):
            raise ValueError(f"{name} must be true or false, not {str(switched)[:20]!r}")
        if switched:
            given |= {field: value for field, value in preset.sets.items() if given.get(field) is None}
    if "temperature" in given or values.get("fallback"):
        given["temperature"] = _temperature(given.get("temperature"), values.get("fallback") is True)
    return options(**given)


def parse(name: str, text: str) -> object:
    """A declared option's value from a form field's text, by the field's type: true/false (or 1/0), a
    whole number, a number or text (ValueError saying what the field takes)."""
    of = kind(name)
    if of is bool:
        return switch(name, text)
    if of in (int, float):
        try:
            value = of(text)
        except ValueError:
            raise ValueError(f"{name} must be {'a whole number' if of is int else 'a number'}") from None
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number")
        return value
    return text


def switch(name: str, text: str) -> bool:
    """A switch's value from text: true or false (or 1 or 0; ValueError otherwise)."""
    if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"{name} must be true or false")
    return text.lower() in ("true", "1")


def _temperature(given: object, fallback: bool) -> object:
    """One temperature or several (a door's list of one is its number); with `fallback`, a number from 0
    becomes openai-whisper's steps from it up to 1 (anything else is left for the options to refuse)."""
    given = DecodeOptions.temperature if given is None else given
    if isinstance(given, (list, tuple)):
        if len(given) != 1:
            return tuple(given)
        given = given[0]
    is_number = isinstance(given, numbers.Real) and not isinstance(given, bool)
    if fallback and is_number and math.isfinite(given) and given >= 0:
        return whisper_temperatures(given)
    return given


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
