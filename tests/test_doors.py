"""Each option through each door: a value other than its default, given at the Python API, /v1, the page's
Compare and Transcribe and the live stream, reaches the options the engine decodes with (the command line's
`transcribe` and `corpus`: tests/test_request.py); and the shared batch, which the page's Transcribe and
/v1 join, decodes every option as the request alone would, or refuses it with a message.

A recording double wraps the engine's two entries (`SpeculativeWhisper.transcribe_waveforms`, and the
shared batch's `Scheduler.submit`) and keeps the options each call was given; the server runs in this
process. Demo models (random weights) on a 4.6 s clip.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import httpx
import numpy as np
import pytest
from gradio_client import Client, handle_file

from specdec import request as requests
from specdec.api import SpeculativeWhisper
from specdec.app import openai_schema
from specdec.app import store as stores
from specdec.audio import load_audio
from specdec.options import DecodeOptions, TranscribeOptions, whisper_temperatures
from specdec.scheduler import Scheduler
from specdec.streaming.playback import stream_audio
from specdec.streaming.session import StreamOptions

CLIP = Path(__file__).parent.parent / "assets" / "de-bahnhof.wav"
SHORT = {"max_new_tokens": 8}  # random weights never end a window: a short budget keeps each decoding quick
# per option: a value other than its default, with what it needs beside it
ASKED = {
    "language": {"language": "de"},
    "task": {"task": "translate"},
    "timestamps": {"timestamps": True},
    "word_timestamps": {"word_timestamps": True},
    "temperature": {"temperature": 0.5, "seed": 3},
    "top_p": {"top_p": 0.9, "temperature": 0.5, "seed": 3},
    "seed": {"seed": 7, "temperature": 0.7},
    "num_draft_tokens": {"num_draft_tokens": 3},
    "adaptive": {"adaptive": False},
    "min_draft_tokens": {"min_draft_tokens": 2},
    "max_draft_tokens": {"max_draft_tokens": 8},
    "cost_aware": {"cost_aware": True},
    "draft_confidence": {"draft_confidence": 0.0},
    "max_new_tokens": {"max_new_tokens": 5},
    "no_speech_threshold": {"no_speech_threshold": 0.5, "logprob_threshold": -1.0},
    "logprob_threshold": {"logprob_threshold": -2.0},
    "compression_ratio_threshold": {"compression_ratio_threshold": 2.0},
    "condition_on_prev_tokens": {"condition_on_prev_tokens": True},
    "acceptance_threshold": {"acceptance_threshold": 0.3},
    "prompt_ids": {"prompt_ids": (1, 2, 3)},
    "long_form": {"long_form": "chunked"},
    "skip_silence": {"skip_silence": True},
    "batch_size": {"batch_size": 2},
    "speculative": {"speculative": False},
}
# the page's controls -> (its value, the fields it gives): its own vocabulary for some of them
PAGE = {
    "language": ("de", {"language": "de"}),
    "task": ("translate", {"task": "translate"}),
    "timestamps": (True, {"timestamps": True}),
    "draft_length": ("fixed", {"adaptive": False}),
    "num_draft_tokens": (3, {"num_draft_tokens": 3}),
    "temperature": (0.5, {"temperature": 0.5}),
    "seed": (7, {"seed": 7}),
    "long_form": ("chunked", {"long_form": "chunked"}),
    "skip_silence": (True, {"skip_silence": True}),
    "word_timestamps": (True, {"word_timestamps": True}),
    "detect_no_speech": (True, {"no_speech_threshold": 0.6, "logprob_threshold": -1.0}),
    "fallback": (True, {"temperature": whisper_temperatures(), "compression_ratio_threshold": 2.4}),
    "acceptance_threshold": (0.3, {"acceptance_threshold": 0.3}),
}
PAGE_OFF = {"detect_no_speech": False, "fallback": False}  # the page's two switches start on: off, the rest


@pytest.fixture
def received(monkeypatch) -> list[TranscribeOptions]:
    """The options of every call into the engine from now on (the recording double)."""
    seen: list[TranscribeOptions] = []
    decode, submit = SpeculativeWhisper.transcribe_waveforms, Scheduler.submit

    def recorded_decode(self, waveforms, options=None, *args, **kwargs):
        seen.append(TranscribeOptions.of(options))
        return decode(self, waveforms, options, *args, **kwargs)

    def recorded_submit(self, waveform, options, *args, **kwargs):
        seen.append(TranscribeOptions.of(options))
        return submit(self, waveform, options, *args, **kwargs)

    monkeypatch.setattr(SpeculativeWhisper, "transcribe_waveforms", recorded_decode)
    monkeypatch.setattr(Scheduler, "submit", recorded_submit)
    return seen


def took(options: TranscribeOptions, fields: dict) -> dict:
    """The fields whose value did not arrive: {name: (asked, arrived)}."""
    arrived = {name: getattr(options, name) for name in fields}
    return {name: (value, arrived[name]) for name, value in fields.items() if arrived[name] != value}


def test_every_declared_option_is_asked_here():
    declared = {field.name for field in dataclasses.fields(TranscribeOptions) if "help" in field.metadata}
    assert set(ASKED) == declared


@pytest.mark.parametrize("name", ASKED)
def test_the_python_api_takes_every_option(shared_pair, received, name):
    shared_pair.transcribe(str(CLIP), **(SHORT | ASKED[name]))
    assert received and took(received[-1], ASKED[name]) == {}


@pytest.fixture(scope="module")
def served(demo_models, serve_app):
    store = stores.ModelStore(stores.demo_pairs(demo_models["target"].parent), device="cpu", warm_up=False)
    with serve_app(store) as url:
        yield store, url


def v1(url: str, fields: dict, route: str = "transcriptions") -> httpx.Response:
    with CLIP.open("rb") as audio:
        files = {"file": (CLIP.name, audio, "audio/wav")}
        return httpx.post(f"{url}/v1/audio/{route}", data=fields, files=files, timeout=120)


def form_value(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# the options /v1 sets by OpenAI's fields or its route: (the form, the fields it gives)
V1_OPENAI = {
    "language": ({"language": "de"}, {"language": "de"}),
    "temperature": ({"temperature": "0.5", "fallback": "false"}, {"temperature": 0.5}),
    "prompt": ({"prompt": "Guten Tag"}, {}),  # its ids: checked below
    "timestamp_granularities[]": (
        {"timestamp_granularities[]": "word", "response_format": "verbose_json"},
        {"word_timestamps": True, "timestamps": True},
    ),
    "response_format": ({"response_format": "srt"}, {"timestamps": True}),
}


@pytest.mark.parametrize("name", [*openai_schema.declared_fields(), *V1_OPENAI, "translations"])
def test_v1_takes_every_option_by_openais_name_or_its_own(served, received, name):
    _, url = served
    route = "translations" if name == "translations" else "transcriptions"
    if name == "translations":
        form, expected = {}, {"task": "translate"}
    elif name in V1_OPENAI:
        form, expected = V1_OPENAI[name]
    elif name in requests.PRESETS:
        form, expected = {name: "true"}, requests.PRESETS[name].sets
    else:
        expected = ASKED[name]
        # fallback off: on, as OpenAI's model, /v1 makes one temperature Whisper's rising ones
        form = {"fallback": "false"} | {field: form_value(value) for field, value in expected.items()}
    answer = v1(url, {"model": "whisper-1", "max_new_tokens": "8", **form}, route)
    assert answer.status_code == 200, answer.text
    assert received and took(received[-1], expected) == {}
    if name == "prompt":
        assert received[-1].prompt_ids, "the prompt's ids reach the options"


@pytest.mark.parametrize(
    "form, field",
    [
        ({"num_draft_tokens": "three"}, "num_draft_tokens"),
        ({"top_p": "1.5", "temperature": "0.5"}, "top_p"),
        ({"adaptive": "maybe"}, "adaptive"),
        ({"no_speech_threshold": "0.5", "fallback": "false"}, "no_speech_threshold"),
        ({"long_form": "parallel"}, "long_form"),
        ({"seed": "-1"}, "seed"),
        ({"task": "translate"}, "task"),
        ({"word_timestamps": "true"}, "word_timestamps"),
        ({"detect_no_speech": "yes"}, "detect_no_speech"),
        ({"timestamps": "true"}, "timestamps"),  # json is not timed: only a field that says so is taken
        ({"speculative": "false"}, "speculative"),
        ({"num_draft_token": "3"}, "num_draft_token"),  # a near miss is named with the option it misses
        ({"batch_size": "4"}, "batch_size"),
    ],
)
def test_v1_refuses_a_bad_option_naming_its_field(served, form, field):
    _, url = served
    answer = v1(url, {"model": "whisper-1", **form})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == field


@pytest.mark.parametrize("button", ["/compare", "/transcribe"])
@pytest.mark.parametrize("control", PAGE)
def test_the_page_takes_every_option_it_shows(served, received, button, control):
    _, url = served
    value, expected = PAGE[control]
    values = PAGE_OFF | {"num_draft_tokens": 5, "seed": 0} | {control: value}
    if control in ("seed", "fallback"):
        values["temperature"] = 0.0 if control == "fallback" else 0.5
    if control == "seed":
        expected = expected | {"temperature": 0.5}
    client = Client(url, verbose=False)
    reference = {"reference": ""} if button == "/compare" else {}
    client.predict(
        audio=handle_file(str(CLIP)), pair=client_pair(served), **reference, **values, api_name=button
    )
    assert received and all(
        took(options, expected) == {} for options in received[-2 if button == "/compare" else -1 :]
    )


def client_pair(served) -> str:
    store, _ = served
    return store.default_pair


@pytest.mark.parametrize(
    "stream, expected",
    [
        ({"language": "de"}, {"language": "de"}),
        ({"num_draft_tokens": 3}, {"num_draft_tokens": 3}),
        ({"seed": 9}, {"seed": 9}),
        ({"fallback": False}, {"temperature": 0.0}),
        ({"use_draft": False, "reuse_hypothesis": False}, {"speculative": False}),
    ],
)
def test_the_stream_takes_its_options(shared_pair, received, stream, expected):
    waveform = load_audio(CLIP)[: 2 * 16000]
    list(stream_audio(shared_pair, waveform, StreamOptions(chunk_seconds=1.0, vad=False, **stream)))
    assert received and all(took(options, expected) == {} for options in received)


# the options the shared batch decodes: every one a clip up to 30 s takes (long-form modes are refused)
BATCHED = [name for name in ASKED if name not in ("long_form", "skip_silence", "batch_size")]
# values that change this clip's decoding on random weights and 8 tokens (ASKED's leave it as it is): a k
# kept whole, and Whisper's rules with thresholds this window fails
CHANGING = ASKED | {
    "adaptive": {"adaptive": False, "draft_confidence": 0.0},
    "no_speech_threshold": {"no_speech_threshold": 1e-12, "logprob_threshold": -0.5},
    "logprob_threshold": {"logprob_threshold": -0.5, "temperature": (0.0, 0.5), "seed": 1},
    "compression_ratio_threshold": {"compression_ratio_threshold": 0.5, "temperature": (0.0, 0.5), "seed": 1},
}
NO_EFFECT_HERE = {  # options whose value leaves this decoding as the default's, and why
    "max_draft_tokens": "k never grows: the random draft is rejected at almost every step",
    "condition_on_prev_tokens": "one window: no text before it",
}
TIMED = {"cost_aware"}  # k from measured pass costs: the steps depend on timings, the output does not


def signature(transcription) -> tuple:
    """What a decoding did, step by step: its tokens and words, each step's source, proposals and verdict,
    and each window's temperature, fallback and no-speech measures."""
    result = transcription.result
    steps = [(step.source, tuple(step.drafted), step.n_accepted) for step in result.steps]
    windows = [
        (window.temperature, window.fell_back, window.no_speech_prob, window.avg_logprob)
        for window in result.windows
    ]
    return transcription.token_ids, transcription.words, transcription.language, steps, windows


@functools.cache
def decoded_alone(whisper, options: TranscribeOptions) -> tuple:
    (alone,) = whisper.transcribe_waveforms([load_audio(CLIP)], options)
    return signature(alone)


@pytest.mark.parametrize("name", BATCHED)
def test_the_shared_batch_decodes_every_option_as_alone(shared_pair, name):
    """The batch's decoding of a request is step for step the request's alone (with the option, which
    changes that decoding: the default's is another)."""
    options = TranscribeOptions(**(SHORT | CHANGING[name]))
    batched = Scheduler(shared_pair).submit(load_audio(CLIP), options, CLIP.name).result(120)
    alone = decoded_alone(shared_pair, options)
    if name in TIMED:
        assert signature(batched)[:3] == alone[:3]  # tokens, words, language
        return
    assert signature(batched) == alone
    if name not in NO_EFFECT_HERE:
        assert alone != decoded_alone(shared_pair, TranscribeOptions(**SHORT)), f"{name} changed nothing"


@pytest.mark.parametrize("name", ["long_form", "skip_silence"])
def test_the_shared_batch_refuses_long_form_other_than_sequential(shared_pair, name):
    long = np.tile(load_audio(CLIP), 8)
    with pytest.raises(ValueError, match="sequentially here"):
        Scheduler(shared_pair).submit(long, TranscribeOptions(**ASKED[name]), "long").result(120)


def test_the_page_sends_chunked_and_speech_only_requests_to_a_job_of_their_own():
    from specdec.app import compare

    for name in ("long_form", "skip_silence"):
        request = compare.CompareRequest(audio="a.wav", pair="p", **ASKED[name])
        assert not request.batchable
    assert compare.CompareRequest(audio="a.wav", pair="p").batchable


def test_decode_options_are_declared_for_the_command_line():
    assert set(requests.command_line_fields(DecodeOptions)) == set(ASKED) - {
        "prompt_ids",
        "long_form",
        "skip_silence",
        "batch_size",
        "speculative",
    }


@pytest.mark.parametrize(
    "form",
    [
        {"task": "transcribe"},
        {"timestamps": "false"},
        {"acceptance_threshold": "0"},
        {"include[]": "logprobs"},
    ],
)
def test_v1_takes_a_field_that_agrees_with_what_is_set_here_and_leaves_others_alone(served, form):
    _, url = served
    answer = v1(url, {"model": "whisper-1", "max_new_tokens": "8", **form})
    assert answer.status_code == 200, answer.text
    assert "X-Specdec-Lossy" not in answer.headers  # an acceptance threshold of 0 is exact, as on the page


def test_a_lossy_answer_says_so_in_every_format(served):
    _, url = served
    for response_format in ("json", "text", "srt", "vtt", "verbose_json"):
        fields = {"model": "whisper-1", "max_new_tokens": "8", "response_format": response_format}
        exact = v1(url, fields)
        assert exact.status_code == 200 and "X-Specdec-Lossy" not in exact.headers
        lossy = v1(url, fields | {"acceptance_threshold": "0.3"})
        assert lossy.status_code == 200 and "not the target's own" in lossy.headers["X-Specdec-Lossy"]
        if response_format in ("json", "verbose_json"):
            assert "not the target's own" in lossy.json()["lossy"] and "lossy" not in exact.json()


def test_a_lossy_stream_and_the_design_endpoint_say_so_too(served):
    _, url = served
    fields = {"model": "whisper-1", "max_new_tokens": "8", "acceptance_threshold": "0.3"}
    streamed = v1(url, fields | {"stream": "true"})
    assert streamed.status_code == 200 and "X-Specdec-Lossy" in streamed.headers
    done = [line for line in streamed.text.splitlines() if "transcript.text.done" in line]
    assert done and "not the target's own" in done[0]
    with CLIP.open("rb") as audio:
        files = {"file": (CLIP.name, audio, "audio/wav")}
        design = httpx.post(f"{url}/transcribe", data=fields, files=files, timeout=120)
    assert design.status_code == 200 and "X-Specdec-Lossy" in design.headers
    assert "not the target's own" in design.json()["lossy"]


def test_every_control_of_the_page_is_sent_here():
    from specdec.app.compare_tab import COMPARE_API

    assert set(PAGE) == set(COMPARE_API) - {"audio", "pair", "reference"}


def test_gradio_hands_the_page_handler_its_values_then_the_request_and_the_progress():
    """The page's handlers take their values by position and find the request and the progress tracker
    after them, where Gradio puts them by the handler's signature."""
    import asyncio

    import gradio as gr
    from gradio.helpers import special_args

    from specdec.app.compare_tab import COMPARE_API, api_handler

    seen = {}

    async def run(asked, request, progress):
        seen.update(asked=asked, request=request, progress=progress)

    handler = api_handler(COMPARE_API, run)
    values = ["a.wav", "p", "de", *[None] * (len(COMPARE_API) - 3)]
    request = object()
    inputs, progress_index, _, _ = special_args(handler, list(values), request=request)
    asyncio.run(handler(*inputs))
    assert (seen["asked"].audio, seen["asked"].pair, seen["asked"].language) == ("a.wav", "p", "de")
    assert seen["request"] is request and isinstance(seen["progress"], gr.Progress)
    assert progress_index == len(COMPARE_API) + 1  # after the values and the request
