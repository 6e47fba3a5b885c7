"""/v1 on the real weights, through the official `openai` client, as `python app.py` serves it (whisper-base
with its self-draft): timed words (`timestamp_granularities[]=word`) as the Python API times them; a
streamed transcription whose deltas add up to the text; a translation of German speech into English, token
for token what the target alone gives; an English-only target refused a translation with a clear error,
the server still serving."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

import app
from specdec.app import store as stores

ASSETS = Path(__file__).parent.parent / "assets"
GERMAN, JFK = ASSETS / "de-bahnhof.wav", ASSETS / "en-jfk.flac"
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
    greedy = {"compare": "true", "fallback": "false"}  # one temperature, as the target alone's below
    answer = translate(server, "base+self", response_format="verbose_json", extra_body=greedy)
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


def test_words_come_timed_as_the_python_api_times_them(server):
    with JFK.open("rb") as audio:
        answer = client(server).audio.transcriptions.create(
            model="base+self", file=audio, response_format="verbose_json",
            timestamp_granularities=["word", "segment"],
        )  # fmt: skip
    whisper = app.STORES["served"].whisper("base+self")
    found = whisper.transcribe(str(JFK), timestamps=True, word_timestamps=True, return_stats=True)
    expected = [(word.text.strip(), word.start, word.end) for word in found[0].words]
    assert [(word.word, word.start, word.end) for word in answer.words] == expected
    assert answer.segments and ("country", 5.76, 6.24) in expected  # faster-whisper: 5.76-6.24 s


def test_a_streamed_transcription_adds_up_to_the_text(server):
    with JFK.open("rb") as audio:
        events = list(client(server).audio.transcriptions.create(model="base+self", file=audio, stream=True))
    deltas = [event.delta for event in events if event.type == "transcript.text.delta"]
    assert events[-1].type == "transcript.text.done" and "".join(deltas) == events[-1].text
    assert 1 < len(deltas) < len(events[-1].text.split())  # several words a pass: the draft's, accepted


def test_text_deltas_split_no_character_and_add_up(real_models):
    """Told token by token, the deltas never cut a character whose bytes span tokens; they make the text."""
    from transformers import WhisperTokenizer

    from specdec.app.openai_schema import TextDeltas

    tokenizer = WhisperTokenizer.from_pretrained(real_models["base"])
    text = " Grüße aus Köln 😀, 東京 und zurück."
    ids = tokenizer.encode(text, add_special_tokens=False)
    sent: list[str] = []
    deltas = TextDeltas(tokenizer, sent.append)
    for end in range(1, len(ids) + 1):
        deltas(ids[:end])
    assert "".join(sent) == text.strip() and not any("\ufffd" in piece for piece in sent)
    assert len(sent) < len(ids)  # some tokens held a part of a character only
