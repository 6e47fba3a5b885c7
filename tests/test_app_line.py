"""Both doors to the models on one server, as `python app.py --api-key KEY --protect-page` serves them
(in-process on the demo models, over loopback): the page's Gradio API behind a login, the fair and bounded
line shared with the OpenAI-compatible API, and a cancel that takes out only the job it names.

The jobs here are planted: a decoding that waits for the test to let it finish (and stops, as a real one
does, at its next check once cancelled), so the order is read from what ran, never from time. They take
turns, as Compare runs and chunked files do (a plain transcription joins the shared batch instead:
tests/test_openai_api.py).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file

import app
from specdec.app import compare, openai_schema
from specdec.app import store as stores
from specdec.engine import cancel

CLIP = Path(__file__).parent.parent / "assets" / "en-fellow-americans.wav"
SHARED_DRAFT = list(stores.DEMO_PAIRS)[1]
# fallback=False in each call: random weights fail Whisper's thresholds in every window, and the page's
# temperature fallback (on by default) would sample each one again
KEY = "line-key"
QUEUE_SIZE = 8  # a door holds 6 of them at most


@pytest.fixture(scope="module")
def server(demo_models, serve_app) -> str:
    store = stores.ModelStore(stores.demo_pairs(demo_models["target"].parent), device="cpu")
    store.whisper(SHARED_DRAFT)
    with serve_app(store, QUEUE_SIZE, api_key=KEY, protect_page=True) as url:
        yield url + "/"


class Planted:
    """Stands in for the page's and the API's decoding: records who ran, in order, and holds the models
    until the test opens the gate."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.gate = threading.Event()

    def decode(self, name: str) -> None:
        while not self.gate.wait(0.02):
            cancel.check()  # Cancelled once the job is stopped, as a real decoding between passes
        self.ran.append(name)

    def page(self, store, request, progress=None) -> tuple[str, str, dict]:
        self.decode(f"page {request.language}")
        return request.language, "", {}

    def api(self, store, asked) -> openai_schema.Answer:
        self.decode("api")
        raise stores.UserError("planted: no transcript")  # a 400, read as "it ran"


@pytest.fixture
def planted(monkeypatch) -> Planted:
    fake = Planted()
    monkeypatch.setattr(compare, "transcribe_clip", fake.page)
    monkeypatch.setattr(openai_schema, "transcribe", fake.api)
    # jobs that take turns, as a Compare or a chunked file does (a plain transcription joins the batch)
    monkeypatch.setattr(compare.CompareRequest, "batchable", property(lambda request: False))
    yield fake
    fake.gate.set()
    deadline = time.monotonic() + 60
    while app.JOBS["served"].running():
        assert time.monotonic() < deadline, "planted jobs were left in the line"
        time.sleep(0.05)


def page(server: str) -> Client:
    return Client(server, auth=("anyone", KEY), verbose=False)


def submit(client: Client, tag: str):
    """A page Transcribe job, told apart by its language field (the planted decoding echoes it)."""
    return client.submit(handle_file(str(CLIP)), SHARED_DRAFT, tag, fallback=False, api_name="/transcribe")


def api_request(server: str) -> httpx.Response:
    with CLIP.open("rb") as audio:
        return httpx.post(
            f"{server}v1/audio/transcriptions", files={"file": audio},
            data={"model": "whisper-1", "fallback": "false"},
            headers={"Authorization": f"Bearer {KEY}"}, timeout=120,
        )  # fmt: skip


def wait_for(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_the_page_and_its_api_need_the_key(server):
    with pytest.raises(Exception, match="(?i)credentials|login"):
        Client(server, verbose=False)
    joined = httpx.post(
        f"{server}gradio_api/queue/join", json={"data": [], "fn_index": 0, "session_hash": "x"}
    )
    assert joined.status_code == 401
    with pytest.raises(ValueError, match="(?i)login"):
        Client(server, auth=("anyone", "not-the-key"), verbose=False)
    text, _, stats, _ = page(server).predict(
        handle_file(str(CLIP)), SHARED_DRAFT, "en", fallback=False, api_name="/transcribe"
    )
    assert text and stats["speculative"]["num_generated"] > 0  # with the key: the real decoding


def test_a_keyed_request_is_not_starved_by_a_pile_of_page_jobs(server, planted):
    anonymous, other = page(server), page(server)
    pile = [submit(anonymous, tag) for tag in ("en", "de", "fr", "es")]
    wait_for(lambda: app.JOBS["served"].running() == 4, "the page's pile never lined up")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        keyed = pool.submit(api_request, server)
        wait_for(lambda: app.JOBS["served"].running() == 5, "the API request never lined up")
        another_page = submit(other, "it")
        wait_for(lambda: app.JOBS["served"].running() == 6, "the other page never lined up")
        planted.gate.set()
        assert keyed.result(timeout=60).status_code == 400  # the planted API decoding's answer
    assert another_page.result(timeout=60)[0] == "it"
    assert [job.result(timeout=60)[0] for job in pile] == ["en", "de", "fr", "es"]
    assert planted.ran[1] == "api"  # next: the API, whose door had not been served
    assert planted.ran.index("page it") <= 3  # the other page: after at most one more of the pile


def test_a_full_line_is_refused_alike_at_both_doors(server, planted):
    client = page(server)
    held = [submit(client, "en") for _ in range(6)]  # the page's share: 6 of 8
    wait_for(lambda: app.JOBS["served"].running() == 6, "the page jobs never lined up")
    with pytest.raises(
        Exception, match=r"The queue is full \(6 jobs waiting or running, 6 of them from the page\)"
    ):
        submit(client, "de").result(timeout=60)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        keyed = [pool.submit(api_request, server) for _ in range(2)]  # the API still finds its room
        wait_for(lambda: app.JOBS["served"].running() == 8, "the API requests never lined up")
        refused = api_request(server)
        assert refused.status_code == 429 and refused.headers["retry-after"]
        error = refused.json()["error"]
        assert error["code"] == "queue_full" and error["message"].startswith("The queue is full (8 jobs")
        with pytest.raises(Exception, match=r"The queue is full \(8 jobs"):
            submit(page(server), "fr").result(timeout=60)  # another page too: the line is full
        planted.gate.set()
        assert [request.result(timeout=60).status_code for request in keyed] == [400, 400]
    assert [job.result(timeout=60)[0] for job in held] == ["en"] * 6


def test_cancelling_a_queued_job_takes_out_that_job_only(server, planted):
    client = page(server)  # one client: Gradio's own cancel stops all of a client's running jobs
    running = submit(client, "en")
    wait_for(lambda: app.JOBS["served"].running() == 1, "the first job never started")
    queued = [submit(client, tag) for tag in ("de", "fr")]
    wait_for(lambda: app.JOBS["served"].running() == 3, "the queued jobs never lined up")
    queued[-1].cancel()
    wait_for(lambda: app.JOBS["served"].running() == 2, "the cancelled job stayed in the line", seconds=10)
    assert not running.done() and not queued[0].done()  # the running one was not stopped with it
    planted.gate.set()
    assert (running.result(timeout=60)[0], queued[0].result(timeout=60)[0]) == ("en", "de")
    assert planted.ran == ["page en", "page de"]
