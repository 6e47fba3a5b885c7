"""/v1's `text` answer: OpenAI's, the transcript whole as `json`'s `text`, whatever segments it has."""

from __future__ import annotations

import json
from types import SimpleNamespace

from starlette.datastructures import FormData

from specdec.api import Transcription
from specdec.app import compare, openai_schema
from specdec.subtitles import Cue
from specdec.trace import DecodeResult

TEXT = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do."


def answered(response_format: str, transcription: Transcription) -> str:
    request = compare.CompareRequest(audio="clip.wav", pair="base+tiny.en")
    asked = openai_schema.Asked("base+tiny.en", request, response_format, prompt="", check=False)
    answer = openai_schema.Answer(transcription, seconds=40.0)
    return openai_schema.response(asked, answer).body.decode()


def long_transcription() -> Transcription:
    """A long clip's transcript: decoded long-form with timestamps, so in segments that cut sentences."""
    result = DecodeResult((), (), "en", (), (), (), (), 0.0)
    cut = TEXT.index(" ask not")
    segments = (Cue(0.0, 28.5, " " + TEXT[:cut], ()), Cue(28.5, 40.0, TEXT[cut:], ()))
    return Transcription("clip.wav", TEXT, result, segments)


def test_text_is_the_json_text_in_one_piece_on_long_audio() -> None:
    transcription = long_transcription()
    text = answered("text", transcription)
    assert text == json.loads(answered("json", transcription))["text"] + "\n"
    assert text.count("\n") == 1


def test_the_txt_file_keeps_one_segment_a_line() -> None:
    """`Transcription.to_text()` (the command line's .txt) stays openai-whisper's .txt."""
    assert (
        long_transcription().to_text()
        == "And so, my fellow Americans,\nask not what your country can do for you, ask what you can do.\n"
    )


def test_v1_keeps_generate_defaults_no_speech_rule_off() -> None:
    """The page turns Whisper's no-speech rule on; /v1, like the Python API and the CLI, keeps generate()'s
    default (off), so its answer stays generate()'s output."""
    store_double = SimpleNamespace(pairs={"base+tiny.en": ("base", "tiny.en")}, default_pair="base+tiny.en")
    form = FormData([("model", "base+tiny.en")])
    request = openai_schema.asked(form, store_double, "clip.wav").request
    assert request.options().no_speech_threshold is None
    assert compare.CompareRequest(audio="clip.wav", pair="base+tiny.en").options().no_speech_threshold
