"""OpenAI's Realtime transcription endpoint (`app.realtime`), served in-process on the demo models as
`python app.py` serves it (with an API key), driven by a real websocket client (`websockets`) and by the
official `openai` client: each committed turn's transcript is `SpeculativeWhisper.transcribe`'s on the same
audio, server VAD splits at a pause, both shapes of session update, error events that leave the session
usable, and the key.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import numpy as np
import openai
import pytest
import soundfile as sf
import soxr
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from specdec.app import store as stores
from specdec.app.jobs import MODEL_THREAD
from specdec.app.openai_schema import ApiError
from specdec.app.realtime_settings import TurnDetection
from specdec.app.realtime_turns import InputBuffer, SpeechStopped

ASSETS = Path(__file__).parent.parent / "assets"
RATE = 24_000  # OpenAI's PCM rate
CHUNK = RATE // 10  # 100 ms, as a microphone sends it
SHARED_DRAFT = list(stores.DEMO_PAIRS)[1]
MODEL = "target+draft-shared"
KEY = "test-key"
WAIT = 300  # seconds for an event (a loaded CI machine); never asserted
# random weights fail Whisper's thresholds in every window: with the fallback each turn would be sampled
# again at five temperatures; these tests compare greedy transcripts
GREEDY = {"language": "en", "fallback": False}
MANUAL = {"type": "transcription", "audio": {"input": {"transcription": GREEDY, "turn_detection": None}}}


@pytest.fixture(scope="module")
def store(demo_models) -> stores.ModelStore:
    store = stores.ModelStore(stores.demo_pairs(demo_models["target"].parent), device="cpu")
    store.pairs = {SHARED_DRAFT: store.pairs[SHARED_DRAFT]}  # the default pair: whisper-1
    store.whisper(SHARED_DRAFT)
    return store


@pytest.fixture(scope="module")
def server(store, serve_app) -> str:
    with serve_app(store, api_key=KEY) as url:
        yield url.replace("http://", "ws://")


def pcm24(name: str) -> np.ndarray:
    """An asset as OpenAI's input: 16-bit mono at 24 kHz."""
    audio, rate = sf.read(ASSETS / name, dtype="float32", always_2d=True)
    mono = soxr.resample(audio.mean(axis=1), rate, RATE, quality="HQ")
    return np.round(np.clip(mono, -1, 32767 / 32768) * 32768).astype("<i2")


def expected(store: stores.ModelStore, pcm: np.ndarray) -> str:
    """`SpeculativeWhisper.transcribe` on the same audio with the same options (on the models' thread)."""
    whisper = store.whisper(SHARED_DRAFT)
    (text,) = MODEL_THREAD.submit(lambda: whisper.transcribe(pcm, sample_rate=RATE, language="en")).result()
    return text


def session(server: str, key: str = KEY, **options) -> ClientConnection:
    headers = {"Authorization": f"Bearer {key}", **options.pop("headers", {})}
    return connect(f"{server}/v1/realtime?intent=transcription", additional_headers=headers, **options)


def send(ws: ClientConnection, kind: str, **fields) -> None:
    ws.send(json.dumps({"type": kind, **fields}))


def stream(ws: ClientConnection, pcm: np.ndarray) -> None:
    for start in range(0, len(pcm), CHUNK):
        audio = base64.b64encode(pcm[start : start + CHUNK].tobytes()).decode()
        send(ws, "input_audio_buffer.append", audio=audio)


def receive(ws: ClientConnection, until: str, count: int = 1) -> list[dict]:
    """Every event up to the count-th of type `until`, that one included."""
    events = []
    while count:
        events.append(json.loads(ws.recv(timeout=WAIT)))
        count -= events[-1]["type"] == until
    return events


def of(events: list[dict], kind: str) -> list[dict]:
    return [event for event in events if event["type"] == kind]


COMPLETED = "conversation.item.input_audio_transcription.completed"
DELTA = "conversation.item.input_audio_transcription.delta"


def test_a_committed_clip_is_the_targets_transcript(server, store):
    pcm = pcm24("en-jfk.flac")
    with session(server) as ws:
        assert json.loads(ws.recv(timeout=WAIT))["type"] == "session.created"
        send(ws, "session.update", session=MANUAL)
        (updated,) = receive(ws, "session.updated")
        assert updated["session"]["audio"]["input"]["turn_detection"] is None
        stream(ws, pcm)
        send(ws, "input_audio_buffer.commit")
        events = receive(ws, COMPLETED)
    kinds = [event["type"] for event in events]
    assert kinds[:2] == ["input_audio_buffer.committed", "conversation.item.added"]
    (completed,) = of(events, COMPLETED)
    item_id = events[0]["item_id"]
    assert completed["item_id"] == item_id and events[1]["item"]["id"] == item_id
    assert completed["transcript"] == expected(store, pcm)
    deltas = of(events, DELTA)
    assert deltas and "".join(delta["delta"] for delta in deltas).strip() == completed["transcript"]
    assert completed["usage"] == {"type": "duration", "seconds": round(len(pcm) / RATE, 3)}


def test_server_vad_splits_a_clip_at_its_pause(server, store):
    speech = pcm24("en-fellow-americans.wav")  # pauses inside it: under 0.2 s
    silence = np.zeros(int(1.5 * RATE), dtype="<i2")
    pcm = np.concatenate([speech, silence, speech, silence])
    turn_detection = {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
    }
    audio_input = {"transcription": GREEDY, "turn_detection": turn_detection}
    with session(server) as ws:
        send(ws, "session.update", session={"type": "transcription", "audio": {"input": audio_input}})
        stream(ws, pcm)
        events = receive(ws, COMPLETED, count=2)
    started, stopped = (
        of(events, "input_audio_buffer.speech_started"),
        of(events, "input_audio_buffer.speech_stopped"),
    )
    assert len(started) == len(stopped) == len(of(events, "input_audio_buffer.committed")) == 2
    second_speech_ms = (len(speech) + len(silence)) * 1000 // RATE
    assert started[0]["audio_start_ms"] == 0
    assert len(speech) * 1000 // RATE < stopped[0]["audio_end_ms"] <= started[1]["audio_start_ms"]
    assert second_speech_ms - 300 - 100 <= started[1]["audio_start_ms"] <= second_speech_ms - 300 + 100
    completed = {event["item_id"]: event["transcript"] for event in of(events, COMPLETED)}
    for start, stop in zip(started, stopped, strict=True):
        assert start["item_id"] == stop["item_id"]
        turn = pcm[start["audio_start_ms"] * RATE // 1000 : stop["audio_end_ms"] * RATE // 1000]
        assert completed[start["item_id"]] == expected(store, turn)


def test_a_client_that_sends_no_update_gets_the_defaults(server):
    pcm = np.concatenate([pcm24("en-fellow-americans.wav"), np.zeros(RATE, dtype="<i2")])
    with session(server) as ws:
        created = json.loads(ws.recv(timeout=WAIT))
        stream(ws, pcm)
        events = receive(ws, "input_audio_buffer.committed")
    # leaving stops the turn's decoding (with the fallback, random weights would be sampled five more times)
    assert created["type"] == "session.created" and created["session"]["type"] == "transcription"
    assert created["session"]["audio"]["input"] == {
        "format": {"type": "audio/pcm", "rate": RATE},
        "transcription": {"model": MODEL, "language": None, "prompt": "", "fallback": True},
        "turn_detection": {
            "type": "server_vad",
            "threshold": 0.5,
            "prefix_padding_ms": 300,
            "silence_duration_ms": 500,
        },
        "noise_reduction": None,
    }
    kinds = [event["type"] for event in events]
    assert kinds == ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", kinds[-1]]


def test_the_beta_shape_and_the_current_one_in_one_session(server, store):
    pcm = pcm24("en-fellow-americans.wav")
    beta = {"input_audio_format": "pcm16", "input_audio_transcription": {"model": "whisper-1", **GREEDY}}
    with session(server, headers={"OpenAI-Beta": "realtime=v1"}) as ws:
        created = json.loads(ws.recv(timeout=WAIT))
        send(ws, "transcription_session.update", session=beta)
        (updated,) = receive(ws, "transcription_session.updated")
        current = {"type": "transcription", "audio": {"input": {"turn_detection": None}}}
        send(ws, "session.update", session=current)  # answered in its own shape
        (current_updated,) = receive(ws, "session.updated")
        stream(ws, pcm)
        send(ws, "input_audio_buffer.commit")
        events = receive(ws, COMPLETED)
    assert created["type"] == "transcription_session.created"
    assert created["session"]["input_audio_format"] == "pcm16"
    assert created["session"]["turn_detection"]["type"] == "server_vad"
    transcription = {"model": "whisper-1", "language": "en", "prompt": "", "fallback": False}
    assert updated["session"]["input_audio_transcription"] == transcription
    assert updated["session"]["turn_detection"]["silence_duration_ms"] == 500
    assert current_updated["session"]["audio"]["input"]["transcription"] == transcription
    assert current_updated["session"]["audio"]["input"]["turn_detection"] is None
    kinds = [event["type"] for event in events]
    assert "conversation.item.created" in kinds and "conversation.item.added" not in kinds  # the beta's
    assert of(events, COMPLETED)[0]["transcript"] == expected(store, pcm)


def test_bad_events_get_error_events_and_the_sessions_go_on(server, store):
    pcm = pcm24("en-fellow-americans.wav")
    odd = base64.b64encode(b"\x00\x01\x02").decode()
    current = lambda **audio_input: {"type": "transcription", "audio": {"input": audio_input}}  # noqa: E731
    bad = [  # (event, the param named, the code)
        ({"type": "input_audio_buffer.append", "audio": "not base64!"}, "audio", "invalid_value"),
        ({"type": "input_audio_buffer.append", "audio": odd}, "audio", "invalid_value"),
        ({"type": "response.create"}, "type", "invalid_value"),
        ({"type": "input_audio_buffer.commit"}, None, "input_audio_buffer_commit_empty"),
        ({"type": "session.update", "session": {"type": "realtime"}}, "session.type", "invalid_value"),
        (
            {"type": "session.update", "session": current(format={"type": "audio/pcm", "rate": 16000})},
            "session.audio.input.format",
            "invalid_value",
        ),
        (
            {"type": "transcription_session.update", "session": {"input_audio_format": "g711_ulaw"}},
            "session.input_audio_format",
            "invalid_value",
        ),
        (
            {"type": "session.update", "session": current(turn_detection={"type": "semantic_vad"})},
            "session.audio.input.turn_detection.type",
            "invalid_value",
        ),
        (
            {"type": "session.update", "session": current(turn_detection={"threshold": 2})},
            "session.audio.input.turn_detection.threshold",
            None,
        ),
        (
            {"type": "session.update", "session": current(transcription={"model": "gpt-4o-transcribe"})},
            "session.audio.input.transcription.model",
            "model_not_found",
        ),
        (
            {"type": "session.update", "session": current(transcription={"prompt": "word " * 20_000})},
            "session.audio.input.transcription.prompt",
            None,
        ),
        (
            {
                "type": "transcription_session.update",
                "session": {"input_audio_transcription": {"language": "xx"}},
            },
            "session.input_audio_transcription.language",
            None,
        ),
    ]
    with session(server) as ws, session(server) as other:
        receive(other, "session.created")
        receive(ws, "session.created")
        send(ws, "session.update", session=MANUAL)
        receive(ws, "session.updated")
        for number, (event, param, code) in enumerate(bad):
            ws.send(json.dumps({**event, "event_id": f"client_{number}"}))
            (error,) = receive(ws, "error")  # nothing else: a refused update changes nothing
            assert error["error"]["type"] == "invalid_request_error" and error["error"]["message"]
            assert (error["error"]["param"], error["error"]["code"]) == (param, code), event
            assert error["error"]["event_id"] == f"client_{number}"
        ws.send("{not json")
        ws.send(b"\x00\x01")
        codes = [error["error"]["code"] for error in receive(ws, "error", count=2)]
        assert codes == ["invalid_json", "invalid_value"]
        stream(ws, pcm)  # the session goes on, its settings as they were before the refused updates
        send(ws, "input_audio_buffer.commit")
        (completed,) = of(receive(ws, COMPLETED), COMPLETED)
        send(other, "input_audio_buffer.clear")  # and so does another session
        assert receive(other, "input_audio_buffer.cleared")[-1]["type"] == "input_audio_buffer.cleared"
    assert completed["transcript"] == expected(store, pcm)


def test_the_key_and_the_intent_are_checked_before_a_session_opens(server):
    url = f"{server}/v1/realtime?intent=transcription"
    for headers in ({"Authorization": "Bearer wrong"}, {}):
        with pytest.raises(InvalidStatus) as refused:
            connect(url, additional_headers=headers)
        assert refused.value.response.status_code == 401
        assert json.loads(refused.value.response.body)["error"]["code"] == "invalid_api_key"
    with pytest.raises(InvalidStatus) as refused:
        connect(f"{server}/v1/realtime", additional_headers={"Authorization": f"Bearer {KEY}"})
    assert refused.value.response.status_code == 400
    assert json.loads(refused.value.response.body)["error"]["param"] == "intent"
    # a browser cannot send headers: OpenAI's browser clients give the key as a subprotocol
    with connect(url, subprotocols=["realtime", f"openai-insecure-api-key.{KEY}"]) as ws:
        assert ws.subprotocol == "realtime"
        assert json.loads(ws.recv(timeout=WAIT))["type"] == "session.created"


def test_sessions_past_the_line_s_bound_are_refused(store, serve_app):
    with serve_app(store, 2, api_key=KEY) as url:  # a line of 2 jobs: 2 sessions at most
        server = url.replace("http://", "ws://")
        with session(server) as first, session(server) as second:
            receive(first, "session.created")
            receive(second, "session.created")
            with pytest.raises(InvalidStatus) as refused:
                session(server)
        assert refused.value.response.status_code == 429
        assert refused.value.response.headers["Retry-After"]
        assert json.loads(refused.value.response.body)["error"]["code"] == "session_limit"
        for _ in range(100):  # until the server has seen both leave (never a time asserted)
            try:
                with session(server) as again:
                    assert json.loads(again.recv(timeout=WAIT))["type"] == "session.created"
                break
            except InvalidStatus:
                time.sleep(0.1)
        else:
            pytest.fail("the sessions that left still count")


def openai_client(server: str) -> openai.OpenAI:
    """The official client on this server (the beta realtime takes wss:// unless given the websocket URL)."""
    base_url = server.replace("ws://", "http://") + "/v1"
    return openai.OpenAI(base_url=base_url, websocket_base_url=f"{server}/v1", api_key=KEY, max_retries=0)


def test_the_official_client_transcribes_a_turn(server, store):
    client = openai_client(server)
    if not hasattr(client, "realtime"):
        pytest.skip(f"openai {openai.__version__} has no client.realtime")
    pcm = pcm24("en-fellow-americans.wav")
    with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        connection.session.update(session=MANUAL)
        for start in range(0, len(pcm), CHUNK):
            connection.input_audio_buffer.append(
                audio=base64.b64encode(pcm[start : start + CHUNK].tobytes()).decode()
            )
        connection.input_audio_buffer.commit()
        events = []
        for event in connection:
            events.append(event)
            if event.type in (COMPLETED, "error"):
                break
    assert events[0].type == "session.created" and events[0].session.type == "transcription"
    assert events[-1].type == COMPLETED, events[-1]
    assert events[-1].transcript == expected(store, pcm)


def test_the_official_clients_beta_transcription_session(server, store):
    client = openai_client(server)
    beta = getattr(getattr(client, "beta", None), "realtime", None)
    if beta is None:
        pytest.skip(f"openai {openai.__version__} has no client.beta.realtime")
    pcm = pcm24("en-fellow-americans.wav")
    with beta.connect(model="whisper-1", extra_query={"intent": "transcription"}) as connection:
        if not hasattr(connection, "transcription_session"):
            pytest.skip(f"openai {openai.__version__}'s beta realtime has no transcription sessions")
        session = {"input_audio_transcription": {"model": "whisper-1", **GREEDY}, "turn_detection": None}
        connection.transcription_session.update(session=session)
        for start in range(0, len(pcm), CHUNK):
            connection.input_audio_buffer.append(
                audio=base64.b64encode(pcm[start : start + CHUNK].tobytes()).decode()
            )
        connection.input_audio_buffer.commit()
        kinds, transcript = [], None
        for event in connection:
            kinds.append(event.type)
            if event.type in (COMPLETED, "error"):
                transcript = getattr(event, "transcript", None)
                break
    assert kinds[:2] == ["transcription_session.created", "transcription_session.updated"]
    assert kinds[-1] == COMPLETED
    assert transcript == expected(store, pcm)


def test_a_turn_is_cut_at_the_longest_clip_and_a_buffer_without_vad_stops_there():
    speech = pcm24("en-fellow-americans.wav").tobytes()  # 6.9 s, its pauses under 0.2 s
    heard = InputBuffer(TurnDetection(), max_seconds=2.0).append(speech)
    turns = [change.turn for change in heard if isinstance(change, SpeechStopped)]
    assert len(turns) >= 3
    assert all(turn.end - turn.start <= 2 * RATE for turn in turns)
    assert all(later.start >= earlier.end for earlier, later in zip(turns, turns[1:], strict=False))
    manual = InputBuffer(None, max_seconds=2.0)
    manual.append(bytes(4 * RATE))  # 2 s of 16-bit samples
    with pytest.raises(ApiError) as full:
        manual.append(bytes(2))
    assert (full.value.param, full.value.code) == ("audio", "input_audio_buffer_full")
    turn = manual.commit()
    assert (turn.start, turn.end) == (0, 2 * RATE)
    with pytest.raises(ApiError) as empty:
        manual.commit()
    assert empty.value.code == "input_audio_buffer_commit_empty"
