"""The self-draft that ships for whisper-base, on real speech: two of base's own decoder layers, trained by
`scripts/make_shipped_draft.py` on espeak-ng speech in twelve languages, reading base's encoder states.

It loads by name (`--draft self`) around the bundled base and runs no encoder of its own; its output is
`generate()`'s, with and without timestamps, language forced and detected, in English, German and a
recorded French phone prompt (where most of its drafts are rejected); it is accepted on real English
speech (JFK, never seen in training) and proposes in German too, where the English-only tiny.en cannot.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_joining import run_arrivals
from test_lossless import reference_ids

from specdec.api import SpeculativeWhisper
from specdec.app.store import draft_note
from specdec.audio import load_audio
from specdec.options import DecodeOptions
from specdec.whisper.models import DraftKind
from specdec.whisper.self_draft import SHIPPED, read_recipe

ASSETS = Path(__file__).parent.parent / "assets"
MIN_JFK_ACCEPTANCE = 0.6  # measured: see docs/models.md
CASES = {
    "jfk": ("en-jfk.flac", DecodeOptions()),
    "weather-timestamps": ("en-weather.wav", DecodeOptions(timestamps=True)),
    "de-forced": ("de-bahnhof.wav", DecodeOptions(language="de")),
    "de-timestamps": ("de-bahnhof.wav", DecodeOptions(timestamps=True)),
    "fr-recorded": ("recorded/fr-pas-en-service.flac", DecodeOptions(language="fr")),  # most drafts rejected
}


@pytest.fixture(scope="module")
def self_pair(real_models) -> SpeculativeWhisper:
    return SpeculativeWhisper(draft_model="self", final_model=str(real_models["base"]), device="cpu")


@pytest.fixture(scope="module")
def decoded(self_pair) -> dict:
    return {
        case: self_pair.transcribe(ASSETS / name, options, return_stats=True)[0]
        for case, (name, options) in CASES.items()
    }


def test_the_shipped_draft_is_base_2l_and_shares_bases_encoder(self_pair):
    (folder,) = [path for path in SHIPPED.iterdir() if path.is_dir()]
    assert read_recipe(folder).layers == (0, 5)
    assert self_pair.pair.kind is DraftKind.SHARED_ENCODER
    assert self_pair.pair.draft.model.model.encoder is self_pair.pair.target.model.model.encoder
    assert len(self_pair.pair.draft.model.model.decoder.layers) == 2


@pytest.mark.parametrize("case", list(CASES))
def test_self_draft_output_is_generates(self_pair, decoded, case):
    name, options = CASES[case]
    assert list(decoded[case].token_ids) == reference_ids(self_pair, load_audio(ASSETS / name), options), case


def test_self_draft_is_accepted_on_real_english_and_drafts_german(decoded):
    jfk = decoded["jfk"].result
    assert MIN_JFK_ACCEPTANCE <= jfk.acceptance_rate <= 1, jfk.acceptance_rate
    german = decoded["de-forced"].result
    assert german.num_drafted > 0 and german.num_accepted > 0  # an English-only draft is not even run here
    print(f"acceptance: jfk {jfk.acceptance_rate:.2f}, de-bahnhof {german.acceptance_rate:.2f}")


def test_self_draft_is_not_run_outside_the_languages_and_task_it_was_trained_for(self_pair):
    """Its recipe names the twelve languages it learnt to transcribe; es-biblioteca, which base hears as
    Thai, and a translation are decoded by the target alone (nothing drafted), its own output as always;
    German transcription is drafted."""
    trained = {"cs", "de", "en", "es", "fr", "it", "nl", "pl", "pt", "ru", "sv", "tr"}
    assert self_pair.pair.draft.trained_languages == trained
    cases = [
        ("es-biblioteca.wav", DecodeOptions(), "th", False),
        ("de-bahnhof.wav", DecodeOptions(task="translate"), "de", False),
        ("de-bahnhof.wav", DecodeOptions(), "de", True),
    ]
    for name, options, language, drafts in cases:
        speculative = self_pair.transcribe(ASSETS / name, options, return_stats=True)[0]
        alone = self_pair.transcribe(ASSETS / name, options, return_stats=True, speculative=False)[0]
        assert speculative.language == language and speculative.token_ids == alone.token_ids, name
        assert (speculative.result.num_drafted > 0) is drafts, (name, options)
    note = draft_note(self_pair, "th", "transcribe")  # what the page says under its verdict
    assert "trained to transcribe cs, de, en" in note and "on th audio the target decodes alone" in note
    assert draft_note(self_pair, "de", "transcribe") == ""


def test_clips_joining_a_running_batch_detect_their_own_language_as_alone(self_pair):
    """The language is read from the target's own pass over each joining row (its cross-attention keys and
    values then reused); rows joining a running batch must get the language, tokens and word times they get
    alone (a pass over the batch's other rows must not disturb theirs)."""
    word_timed = DecodeOptions(max_new_tokens=30, timestamps=True, word_timestamps=True)
    arrivals = [  # (clip, options, speculative, the step of the running batch at which it joins)
        ("en-jfk.flac", DecodeOptions(max_new_tokens=30), True, 0),
        ("de-bahnhof.wav", word_timed, True, 2),
        ("es-biblioteca.wav", DecodeOptions(max_new_tokens=30), True, 2),
        ("fr-marche.wav", DecodeOptions(max_new_tokens=30, language="fr"), True, 5),
    ]
    audio = {name: load_audio(ASSETS / name) for name, *_ in arrivals}
    clips = run_arrivals(self_pair, arrivals, audio=audio)
    config = self_pair.pair.target.model.generation_config
    for name, options, _, _ in arrivals:
        together = clips[name].result(config)
        alone = self_pair.transcribe(ASSETS / name, options, return_stats=True)[0].result
        assert (together.language, together.token_ids) == (alone.language, alone.token_ids), name
        assert together.token_spans == alone.token_spans, name
    assert [clips[name].result(config).language for name, *_ in arrivals] == ["en", "de", "th", "fr"]
