"""The OpenAI-compatible endpoint beside the page (`app.openai_api`), served in-process on the demo models
as `python app.py` serves it (with an API key), and driven over loopback with the official `openai`
client: every response format, the error objects, the shared queue, and a client that disconnects.

Timings are never asserted: "stopped" is read from the engine's step counter (`engine.cancel.checks`).
"""

from __future__ import annotations

import concurrent.futures
import io
import json
import socket
import time
import urllib.parse
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import srt
import webvtt
from gradio_client import Client, handle_file

import app
from specdec.app import openai_api
from specdec.app import store as stores
from specdec.engine import cancel

CLIP = Path(__file__).parent.parent / "assets" / "en-fellow-americans.wav"  # the cheapest on the demo pair
SECONDS = 6.928  # the clip's length, to the millisecond
SHARED_DRAFT = list(stores.DEMO_PAIRS)[1]  # the page's label
MODEL = "target+draft-shared"  # the same pair's id on the API
KEY = "test-key"
MAX_WAITING = 2  # jobs in the line for the models before the API answers 429 (each door may fill it)
# Random weights fail Whisper's thresholds in every window (average log-probability about -1.2): with /v1's
# and the page's temperature fallback each would be sampled again; these tests compare greedy answers.
GREEDY = {"fallback": "false"}


@pytest.fixture(scope="module")
def server(demo_models, serve_app) -> str:
    """app.py's page and API on the demo models, on a free port; the app's served store is restored after."""
    store = stores.ModelStore(stores.demo_pairs(demo_models["target"].parent), device="cpu")
    store.whisper(SHARED_DRAFT)
    with serve_app(store, MAX_WAITING, api_key=KEY) as url:
        yield url


def api(server: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server}/v1", api_key=key, max_retries=0)


def transcribe(server: str, **options) -> object:
    options["extra_body"] = GREEDY | options.get("extra_body", {})
    with CLIP.open("rb") as audio:
        return api(server).audio.transcriptions.create(model=MODEL, file=audio, language="en", **options)


@pytest.fixture(scope="module")
def page_text(server) -> str:
    """The page's Transcribe button on the same clip and options, through gradio_client (no key: the page
    stays as configured)."""
    return Client(server + "/", verbose=False).predict(
        handle_file(str(CLIP)), SHARED_DRAFT, "en", fallback=False, api_name="/transcribe"
    )[0]


def test_models_lists_the_pairs_by_name(server):
    models = api(server).models.list().data
    assert {model.id for model in models} == {"target+draft-separate", MODEL}
    assert not any("/" in model.id for model in models)  # local folders by their names, no server path


def test_json_and_text_are_the_pages_transcript(server, page_text):
    assert page_text
    assert transcribe(server).text == page_text
    assert transcribe(server, response_format="text") == page_text + "\n"


def test_srt_and_vtt_parse_into_cues_within_the_clip(server):
    cues = list(srt.parse(transcribe(server, response_format="srt")))
    assert cues and all(0 <= c.start.total_seconds() <= c.end.total_seconds() <= SECONDS for c in cues)
    captions = webvtt.from_buffer(io.StringIO(transcribe(server, response_format="vtt")))
    assert [caption.text for caption in captions] == [cue.content for cue in cues]


def test_verbose_json_gives_segments_and_the_speculative_statistics(server):
    check = {"compare": "true"}  # specdec's own field: decode with the target alone too, and compare
    answer = transcribe(
        server, response_format="verbose_json", timestamp_granularities=["segment"], extra_body=check
    )
    assert (answer.language, answer.duration) == ("english", SECONDS)
    assert answer.segments and "".join(segment.text for segment in answer.segments).strip() == answer.text
    assert all(segment.start <= segment.end <= SECONDS for segment in answer.segments)
    for segment in answer.segments:  # OpenAI Whisper's numbers of the segment's window, never null
        assert segment.seek >= 0 and segment.avg_logprob < 0 and 0 <= segment.no_speech_prob <= 1
        assert segment.compression_ratio > 0
    statistics = answer.model_extra["speculative"]
    assert statistics["identical_to_target"] is True  # checked: the target alone ran too
    assert 0 < statistics["acceptance_rate"] < 1 and statistics["tokens_per_target_pass"] > 1
    assert statistics["target_passes_saved"] > 0 and statistics["decode_seconds"] > 0


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client marks translations.create
def test_a_long_non_ascii_file_name_is_cut_to_what_a_file_system_takes(server, page_text):
    """86 characters of 3 bytes each are 258 bytes, past the 255 of a file name: the upload is kept under
    a shorter name, on both doors, and an error names the file by it."""
    name = "日" * 86 + ".wav"
    answer = httpx.post(
        f"{server}/v1/audio/transcriptions",
        files={"file": (name, CLIP.read_bytes())},
        data={"model": MODEL, "language": "en", **GREEDY},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert answer.status_code == 200 and answer.json()["text"] == page_text
    broken = httpx.post(
        f"{server}/v1/audio/transcriptions",
        files={"file": (name, b"RIFF\x00\x00\x00\x00WAVEfmt garbage")},
        data={"model": MODEL},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    assert broken.status_code == 400 and "日日日" in broken.json()["error"]["message"]
    files = {"files": (name, CLIP.read_bytes())}
    uploaded = httpx.post(f"{server}/gradio_api/upload", files=files, timeout=60)
    assert uploaded.status_code == 200  # the page's door: Gradio's upload cache cuts it too (200 bytes)
    (path,) = uploaded.json()
    assert Path(path).name.startswith("日日日") and len(Path(path).name.encode()) <= 255


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/nothing-here", 404, "unknown_url"),
        ("POST", "/v1/chat/completions", 404, "unknown_url"),
        ("GET", "/v1/audio/transcriptions", 405, "method_not_allowed"),
        ("DELETE", "/v1/models", 405, "method_not_allowed"),
    ],
)
def test_other_paths_and_methods_answer_openai_errors_after_the_key(server, method, path, status, code):
    unkeyed = httpx.request(method, server + path, timeout=30)
    assert unkeyed.status_code == 401 and unkeyed.json()["error"]["code"] == "invalid_api_key"
    keyed = httpx.request(method, server + path, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert keyed.status_code == status
    assert keyed.json() == {
        "error": {"message": keyed.json()["error"]["message"], "type": "invalid_request_error",
                  "param": None, "code": code}
    }  # fmt: skip
    assert path in keyed.json()["error"]["message"]
    if status == 405:
        assert keyed.headers["allow"] in ("GET", "POST")


def test_a_file_named_only_by_filename_star_is_the_file(server, page_text):
    """RFC 5987's `filename*=UTF-8''...` alone (RFC 7578 says not to send it; some clients do) names the
    file part: it is read as the file, under its decoded name, not as a text field over 64 KB."""
    boundary = "specdec-boundary"
    name = "日本語 clip.wav".encode()
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\n{MODEL}\r\n'.encode(),
        f'--{boundary}\r\nContent-Disposition: form-data; name="language"\r\n\r\nen\r\n'.encode(),
        f'--{boundary}\r\nContent-Disposition: form-data; name="fallback"\r\n\r\nfalse\r\n'.encode(),
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
        f"filename*=UTF-8''{urllib.parse.quote(name)}\r\nContent-Type: audio/wav\r\n\r\n".encode(),
        CLIP.read_bytes(),
        f"\r\n--{boundary}--\r\n".encode(),
    ]
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": f"multipart/form-data; boundary={boundary}"}
    url = f"{server}/v1/audio/transcriptions"
    answer = httpx.post(url, content=b"".join(parts), headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    assert answer.json()["text"] == page_text


def test_a_stalled_upload_is_answered_408_and_let_go(server, monkeypatch):
    """A client that sends part of its body and then nothing: answered 408 once it has paused longer than
    the limit (shortened here), its connection closed; the server goes on serving."""
    monkeypatch.setattr(openai_api, "UPLOAD_IDLE_SECONDS", 0.5)
    url = httpx.URL(f"{server}/v1/audio/transcriptions")
    head = (
        f"POST {url.path} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\nAuthorization: Bearer {KEY}\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n"
    )
    with socket.create_connection((url.host, url.port), timeout=30) as client:
        client.sendall(head.encode() + b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\n')
        answer = b""
        while chunk := client.recv(65536):  # until the server closes the connection
            answer += chunk
    status, _, body = answer.partition(b"\r\n")[0], None, answer.partition(b"\r\n\r\n")[2]
    assert status.startswith(b"HTTP/1.1 408"), answer[:300]
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert api(server).models.list().data  # still serving


def test_translations_are_the_targets_translate_task(server):
    """POST /v1/audio/translations through the official client: the target's translate task, token for token
    the target alone's (compare=true) and the Python API's with task="translate"."""
    whisper = app.STORES["served"].whisper(SHARED_DRAFT)
    translated, transcribed = (
        whisper.transcribe(str(CLIP), language="en", task=task, speculative=False)[0]
        for task in ("translate", "transcribe")
    )
    assert translated != transcribed  # the task token changes this pair's output: the route must set it
    with CLIP.open("rb") as audio:
        answer = api(server).audio.translations.create(
            model=MODEL, file=audio, extra_body={"language": "en", **GREEDY}
        )
    assert answer.text == translated
    with CLIP.open("rb") as audio:
        verbose = api(server).audio.translations.create(
            model=MODEL, file=audio, response_format="verbose_json", extra_body={"compare": "true", **GREEDY}
        )
    assert verbose.language == "english"  # OpenAI's: a translation's language is its output's
    assert verbose.model_extra["task"] == "translate" and verbose.segments
    assert verbose.model_extra["speculative"]["identical_to_target"] is True


def test_a_streamed_transcription_comes_pass_by_pass_and_ends_whole(server, page_text):
    """stream=true through the official client: transcript.text.delta events that add up to the text, then
    transcript.text.done with the text the page gives; fewer deltas than tokens (a pass settles several)."""
    with CLIP.open("rb") as audio:
        events = list(
            api(server).audio.transcriptions.create(
                model=MODEL, file=audio, language="en", stream=True, extra_body=GREEDY
            )
        )
    deltas = [event.delta for event in events if event.type == "transcript.text.delta"]
    assert events[-1].type == "transcript.text.done" and events[-1].text == page_text
    assert "".join(deltas) == page_text
    whisper = app.STORES["served"].whisper(SHARED_DRAFT)
    alone = whisper.transcribe(str(CLIP), language="en", return_stats=True)[0].result
    assert 1 < len(deltas) <= alone.num_target_passes < len(alone.token_ids)


def test_a_streaming_client_that_leaves_has_its_decoding_stopped(server, tmp_path):
    rng = np.random.default_rng(3)  # a minute of noise bursts: long-form, seconds of decoding
    samples = rng.standard_normal(60 * 16_000) * (np.arange(60 * 16_000) % 8000 < 3000) * 0.2
    sf.write(tmp_path / "minute.wav", samples.astype(np.float32), 16_000)
    files = {"file": ("minute.wav", (tmp_path / "minute.wav").read_bytes())}
    fields, key = {"model": MODEL, "stream": "true", **GREEDY}, {"Authorization": f"Bearer {KEY}"}
    with httpx.stream(
        "POST", f"{server}/v1/audio/transcriptions", data=fields, files=files, headers=key, timeout=60
    ) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        first = next(line for line in answer.iter_lines() if line)
        assert '"transcript.text.delta"' in first  # then the client leaves
    deadline = time.monotonic() + 30
    while app.JOBS["served"].running():  # found gone, stopped at the next target pass
        assert time.monotonic() < deadline, "the decoding of a client that left went on"
        time.sleep(0.05)
    time.sleep(0.5)  # the pass that saw the cancellation may check once more on its way out
    before = cancel.checks()
    time.sleep(1.0)
    assert cancel.checks() == before


MB = 1024 * 1024


@pytest.mark.parametrize(
    ("case", "status", "code", "param"),
    [
        ("bad-file", 400, "invalid_file", "file"),
        ("unknown-model", 404, "model_not_found", "model"),
        ("oversize", 413, "file_too_large", "file"),
        ("just-over-the-limit", 413, "file_too_large", "file"),  # within the room for the other fields
        ("long-prompt", 400, None, "prompt"),
        ("wrong-key", 401, "invalid_api_key", None),
        ("no-key", 401, "invalid_api_key", None),
        ("stream-and-compare", 400, None, "stream"),
        ("tiny-temperature", 400, None, "temperature"),  # would overflow the sampling of the whole batch
        ("one-sample", 400, "invalid_file", "file"),  # too short to hold a word (Whisper said " you")
    ],
)
def test_errors_are_openai_error_objects_and_the_server_keeps_serving(
    server, tmp_path, case, status, code, param
):
    path = tmp_path / "broken.wav"
    sizes = {"oversize": 26 * MB, "just-over-the-limit": 25 * MB + 200 * 1024}  # the limit is 25 MB
    path.write_bytes(bytes(sizes[case]) if case in sizes else b"RIFF\x00\x00\x00\x00WAVEfmt garbage")
    if case == "one-sample":
        sf.write(path, np.full(1, 0.1, dtype=np.float32), 16_000)
    fields = {"model": "whisper-9" if case == "unknown-model" else MODEL}
    if case == "long-prompt":
        fields["prompt"] = "word " * 200_000  # 1 MB of previous text
    if case == "stream-and-compare":
        fields.update(stream="true", compare="true")
    if case == "tiny-temperature":
        fields["temperature"] = "1e-40"
    headers = {"Authorization": "Bearer nope"} if case == "wrong-key" else {}
    if case != "no-key":
        headers.setdefault("Authorization", f"Bearer {KEY}")
    with path.open("rb") as audio:
        answer = httpx.post(
            f"{server}/v1/audio/transcriptions",
            files={"file": audio},
            data=fields,
            headers=headers,
            timeout=60,
        )
    assert answer.status_code == status
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and (error["code"], error["param"]) == (
        code,
        param,
    )
    assert "Traceback" not in answer.text and str(tmp_path) not in answer.text and "/tmp" not in answer.text
    if case == "bad-file":
        assert "broken.wav" in error["message"]
    if case == "one-sample":
        assert error["message"] == "broken.wav is 0 ms long: too short to hold a word (at least 0.1 s)"
    if case == "just-over-the-limit":
        assert error["message"] == "The file is over the limit of 25 MB."
    if case == "long-prompt":
        assert "'prompt'" in error["message"] and "64 KB" in error["message"]
    assert api(server).models.list().data  # still serving


def test_ten_concurrent_requests_are_answered_or_told_to_retry(server, page_text):
    serial = page_text  # the API's own serial answer too (test_json_and_text_are_the_pages_transcript)

    def one_client(_: int) -> str | openai.RateLimitError:
        try:
            return transcribe(server).text
        except openai.RateLimitError as error:
            return error

    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(one_client, range(10)))
    answered = [answer for answer in answers if isinstance(answer, str)]
    refused = [answer for answer in answers if not isinstance(answer, str)]
    print(f"10 concurrent requests: {len(answered)} answered, {len(refused)} told to retry")
    assert answered and all(answer == serial for answer in answered)
    assert len(answered) + len(refused) == 10
    assert all(e.status_code == 429 and e.response.headers["retry-after"] for e in refused)
    assert all(e.body["code"] == "queue_full" for e in refused)
    assert app.JOBS["served"].running() == 0


def test_concurrent_requests_share_the_targets_passes_and_answer_as_alone(server):
    """Two clips sent at once (the line holds two here) join one batch: each answer is the one it gets
    alone, and the target ran fewer passes than their own passes add up to."""
    clips = [CLIP, CLIP.parent / "de-bahnhof.wav"]

    def send(path: Path) -> object:
        with path.open("rb") as audio:
            return api(server).audio.transcriptions.create(
                model=MODEL, file=audio, response_format="verbose_json", extra_body=GREEDY
            )

    alone = [send(path) for path in clips]
    whisper = app.STORES["served"].whisper(SHARED_DRAFT)
    batch = app.JOBS["served"].scheduler(whisper).batch
    before = batch.clock.num_passes
    with concurrent.futures.ThreadPoolExecutor(len(clips)) as pool:
        together = list(pool.map(send, clips))
    assert [answer.text for answer in together] == [answer.text for answer in alone]
    own_passes = [answer.model_extra["speculative"]["target_passes"] for answer in together]
    print(f"passes: {own_passes} on their own, {batch.clock.num_passes - before} run")
    assert batch.clock.num_passes - before < sum(own_passes)


def test_a_client_that_disconnects_has_its_decoding_stopped(server, tmp_path):
    rng = np.random.default_rng(3)  # a minute of noise bursts: long-form, seconds of decoding
    samples = rng.standard_normal(60 * 16_000) * (np.arange(60 * 16_000) % 8000 < 3000) * 0.2
    sf.write(tmp_path / "minute.wav", samples.astype(np.float32), 16_000)
    audio, key = (tmp_path / "minute.wav").read_bytes(), {"Authorization": f"Bearer {KEY}"}
    url = f"{server}/v1/audio/transcriptions"
    request = httpx.Request(
        "POST", url, data={"model": MODEL, **GREEDY}, files={"file": ("minute.wav", audio)}, headers=key
    )
    head = f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {request.url.netloc.decode()}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in request.headers.items() if name != "host")
    start = cancel.checks()
    with socket.create_connection((request.url.host, request.url.port)) as client:
        client.sendall(head.encode() + b"\r\n" + request.read())
        deadline = time.monotonic() + 60
        while cancel.checks() == start:
            assert time.monotonic() < deadline, "the request never started decoding"
            time.sleep(0.05)
    deadline = time.monotonic() + 30
    while app.JOBS["served"].running():  # found gone at the next poll; stopped at the next target pass
        assert time.monotonic() < deadline, "the decoding of a client that left went on"
        time.sleep(0.05)
    time.sleep(0.5)  # the pass that saw the cancellation may check once more on its way out
    before = cancel.checks()
    time.sleep(1.0)
    assert cancel.checks() == before


def test_the_designs_transcribe_endpoint_answers_text_and_duration(server, page_text):
    """The original design's `POST /transcribe`: a multipart file in, `{"text": [...], "duration": s}` out,
    the same pair, key and errors as /v1."""
    headers = {"Authorization": f"Bearer {KEY}"}
    with CLIP.open("rb") as audio:
        answer = httpx.post(f"{server}/transcribe", files={"file": (CLIP.name, audio)}, headers=headers,
                            data={"language": "en", **GREEDY}, timeout=300)  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert set(body) == {"text", "duration"} and body["text"] == [page_text] and body["duration"] > 0
    with CLIP.open("rb") as audio:
        unkeyed = httpx.post(f"{server}/transcribe", files={"file": (CLIP.name, audio)}, timeout=60)
    assert unkeyed.status_code == 401
    no_file = httpx.post(f"{server}/transcribe", data={"language": "en"}, headers=headers, files={"x": b""})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    with CLIP.open("rb") as audio:
        other_format = httpx.post(f"{server}/transcribe", files={"file": (CLIP.name, audio)}, headers=headers,
                                  data={"response_format": "srt"}, timeout=60)  # fmt: skip
    assert other_format.status_code == 400 and other_format.json()["error"]["param"] == "response_format"
