"""POST /v1/audio/translations on the real weights, through the official `openai` client, as `python app.py`
serves it: whisper-base (with its self-draft) says German speech in English, token for token what the
target alone gives; an English-only target is refused with a clear error and the server keeps serving."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

import app
from specdec.app import store as stores

GERMAN = Path(__file__).parent.parent / "assets" / "de-bahnhof.wav"
PAIRS = {"base+self": ("base", "self"), "tiny.en+tiny.en": ("tiny.en", "tiny.en")}

pytestmark = pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client's mark on it


@pytest.fixture(scope="module")
def server(real_models, serve_app) -> str:
    store = stores.ModelStore(PAIRS, device="cpu", warm_up=False)
    with serve_app(store) as url:
        yield url


def client(server: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)


def translate(server: str, model: str, **options) -> object:
    with GERMAN.open("rb") as audio:
        return client(server).audio.translations.create(model=model, file=audio, **options)


def test_german_speech_comes_back_in_english_as_the_target_alone_says_it(server):
    answer = translate(server, "base+self", response_format="verbose_json", extra_body={"compare": "true"})
    whisper = app.STORES["served"].whisper("base+self")
    german = whisper.transcribe(str(GERMAN), timestamps=True, speculative=False)[0]
    english = whisper.transcribe(str(GERMAN), task="translate", timestamps=True, speculative=False)[0]
    assert answer.text == english != german
    assert "Berlin" in german and answer.text.isascii()  # the German transcript, and an English translation
    assert answer.language == "english" and answer.model_extra["speculative"]["identical_to_target"] is True


def test_an_english_only_target_cannot_translate_and_says_so(server):
    with pytest.raises(openai.BadRequestError) as refused:
        translate(server, "tiny.en+tiny.en")
    error = refused.value.body
    assert error["param"] == "model" and "English-only" in error["message"]
    with GERMAN.open("rb") as audio:  # it still transcribes
        assert client(server).audio.transcriptions.create(model="tiny.en+tiny.en", file=audio).text
