"""Each request option declared once (`specdec.options.option`) and read the same by every command: a value
other than its default given on the command line of `transcribe` and of `corpus` reaches the options."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from specdec import cli, request
from specdec.corpus.command import corpus_options
from specdec.options import DecodeOptions, TranscribeOptions, whisper_temperatures

# per field: its arguments and the value they give (none of them the default)
GIVEN = {
    "language": (["--language", "de"], "de"),
    "task": (["--task", "translate"], "translate"),
    "timestamps": (["--timestamps"], True),
    "word_timestamps": (["--word-timestamps"], True),
    "temperature": (["--temperature", "0", "0.4"], (0.0, 0.4)),
    "top_p": (["--top-p", "0.9", "--temperature", "0.5"], 0.9),
    "seed": (["--seed", "7"], 7),
    "num_draft_tokens": (["--num-draft-tokens", "3"], 3),
    "adaptive": (["--no-adaptive"], False),
    "min_draft_tokens": (["--min-draft-tokens", "2"], 2),
    "max_draft_tokens": (["--max-draft-tokens", "8"], 8),
    "cost_aware": (["--cost-aware"], True),
    "draft_confidence": (["--draft-confidence", "0"], 0.0),
    "max_new_tokens": (["--max-tokens", "20"], 20),
    "no_speech_threshold": (["--no-speech-threshold", "0.5", "--logprob-threshold", "-1"], 0.5),
    "logprob_threshold": (["--logprob-threshold", "-2"], -2.0),
    "compression_ratio_threshold": (["--compression-ratio-threshold", "2"], 2.0),
    "condition_on_prev_tokens": (["--condition-on-prev-tokens"], True),
    "acceptance_threshold": (["--acceptance-threshold", "0.3"], 0.3),
    "long_form": (["--long-form", "chunked"], "chunked"),
    "batch_size": (["--batch-size", "4"], 4),
    "skip_silence": (["--skip-silence"], True),
}
TRANSCRIBE_FIELDS = request.command_line_fields(TranscribeOptions)
CORPUS_FIELDS = (*request.command_line_fields(DecodeOptions), "long_form")
COMMANDS = {  # command -> (its arguments before the options, the fields it takes, its options type)
    "transcribe": (["transcribe", "a.wav"], TRANSCRIBE_FIELDS, TranscribeOptions),
    "corpus": (["corpus", "in/", "--out", "out/"], CORPUS_FIELDS, DecodeOptions),
}


def parsed(command: str, *arguments: str) -> tuple[argparse.Namespace, DecodeOptions]:
    """The parsed arguments, and the options the command runs with."""
    args = cli._parser("specdec").parse_args([*COMMANDS[command][0], *arguments])
    if command == "corpus":
        return args, corpus_options(args).decode
    return args, cli.transcribe_options(args)


def test_every_decoding_option_is_on_the_command_line_but_the_prompts_ids():
    declared = {field.name for field in dataclasses.fields(DecodeOptions)}
    assert set(request.command_line_fields(DecodeOptions)) == declared - {"prompt_ids"}
    assert set(GIVEN) == set(request.command_line_fields(TranscribeOptions))


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name", GIVEN)
def test_an_option_given_reaches_the_options(command, name):
    _, names, _ = COMMANDS[command]
    if name not in names:
        pytest.skip(f"{command} takes no {name}")
    arguments, expected = GIVEN[name]
    args, options = parsed(command, *arguments)
    found = getattr(options, name) if hasattr(options, name) else getattr(args, name)  # corpus: long_form
    assert found == expected and expected != getattr(TranscribeOptions(), name)


@pytest.mark.parametrize("command", COMMANDS)
def test_nothing_given_is_the_defaults_and_the_presets_are_whispers_values(command):
    assert parsed(command)[1] == COMMANDS[command][2]()
    options = parsed(command, "--fallback", "--detect-no-speech", "--logprob-threshold", "-2")[1]
    assert options.temperatures == whisper_temperatures()
    assert (options.compression_ratio_threshold, options.no_speech_threshold) == (2.4, 0.6)
    assert options.logprob_threshold == -2.0  # an option given beside a preset wins


def test_a_bad_value_is_refused_by_the_options_checks():
    with pytest.raises(ValueError, match="top_p"):
        parsed("corpus", "--top-p", "2")
