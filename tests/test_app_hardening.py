"""The app against hostile and careless clients (app.py served in-process on the demo models, driven with
gradio_client over loopback): bounded inputs, cancelled work that stops, one queue for all model work,
clear errors that leave the server serving, and no memory or disk that grows with use.

Timings are never asserted: "stopped" is read from the engine's step counter (`engine.cancel.checks`),
which stands still once no decoding runs.
"""

from __future__ import annotations

import concurrent.futures
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from gradio_client import Client, handle_file
from gradio_client.exceptions import AppError

import app
from specdec.app import compare, uploads, views
from specdec.app import store as stores
from specdec.engine import cancel

CLIP = Path(__file__).parent.parent / "assets" / "de-bahnhof.wav"
SHARED_DRAFT = list(stores.DEMO_PAIRS)[1]
COMPARE = ("de", "transcribe", False, "fixed", 4, 0.0, 0, "sequential")  # language ... long-form mode
# each call passes fallback=False: random weights fail Whisper's thresholds in every window, and the page's
# temperature fallback (on by default) would sample each one again


@pytest.fixture(scope="module")
def client(app_url) -> Client:
    return Client(app_url, verbose=False)


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory) -> Path:
    """A minute of noise bursts: sequential long-form over two windows, seconds of decoding."""
    rng = np.random.default_rng(3)
    samples = rng.standard_normal(60 * 16_000) * (np.arange(60 * 16_000) % 8000 < 3000) * 0.2
    path = tmp_path_factory.mktemp("long") / "minute.wav"
    sf.write(path, samples.astype(np.float32), 16_000)
    return path


def idle_after(seconds: float = 1.0) -> bool:
    """No decoding step anywhere in this process for `seconds` (polled, so a slow machine only waits)."""
    before = cancel.checks()
    time.sleep(seconds)
    return cancel.checks() == before


def wait_until_decoding(timeout: float = 60.0) -> None:
    start = cancel.checks()
    deadline = time.monotonic() + timeout
    while cancel.checks() == start:
        assert time.monotonic() < deadline, "the job never started decoding"
        time.sleep(0.05)


def test_only_the_two_documented_endpoints_are_public(client):
    assert set(client.view_api(return_format="dict")["named_endpoints"]) == {"/compare", "/transcribe"}


def test_a_reference_over_the_limit_is_refused_before_any_decoding(client):
    before = cancel.checks()
    reference = "word " * (compare.MAX_REFERENCE_WORDS + 1)
    with pytest.raises(Exception, match=r"the limit is 20,000 characters and 4,000 words"):
        client.predict(
            handle_file(str(CLIP)), SHARED_DRAFT, *COMPARE, reference, fallback=False, api_name="/compare"
        )
    assert cancel.checks() == before


def test_a_long_reference_shows_a_bounded_alignment(client):
    reference = " ".join(["ja"] * 3_000)  # within the limits: scored in full, shown in part
    outputs = client.predict(
        handle_file(str(CLIP)), SHARED_DRAFT, *COMPARE, reference, fallback=False, api_name="/compare"
    )
    wer_html = outputs[8]
    assert "3000 reference words" in wer_html and "more words" in wer_html
    assert len(wer_html) < 120_000  # 400 aligned words a run (4.7 MB of reference once gave 111 MB)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("seed", 2**64, "seed must be a whole number from 0 to 4294967295"),
        ("seed", 1e300, "seed must be a whole number from 0 to 4294967295"),
        ("timestamps", "false", "timestamps must be true or false"),
        ("language", "x" * 100_000, "Unknown language 'xxxxxxxxxxxxxxxxxxxxxxxx'…"),
        ("temperature", 1e-40, "temperature must be 0 (greedy) or a finite number from 0.01 up"),
    ],
    ids=["seed-2**64", "seed-1e300", "timestamps-string", "language-100k", "temperature-1e-40"],
)
def test_bad_values_are_short_clear_errors_logged_in_one_line(client, capfd, field, value, message):
    settings = dict(zip(("language", "task", "timestamps"), COMPARE[:3], strict=True))
    settings |= {"seed": 0, "temperature": 0.0, field: value}
    with pytest.raises(Exception) as raised:
        client.predict(
            handle_file(str(CLIP)), SHARED_DRAFT, settings["language"], settings["task"],
            settings["timestamps"], "fixed", 4, settings["temperature"], settings["seed"], "sequential",
            fallback=False,
            api_name="/transcribe",
        )  # fmt: skip
    assert message in str(raised.value) and len(str(raised.value)) < 400
    assert "Traceback" not in capfd.readouterr().err


def test_a_cancelled_job_stops_decoding_and_the_next_one_runs(app_url, long_clip):
    job = Client(app_url, verbose=False).submit(  # one client per job (Gradio cancels by session and fn)
        handle_file(str(long_clip)), SHARED_DRAFT, *COMPARE, "", fallback=False, api_name="/compare"
    )
    wait_until_decoding()
    job.cancel()
    assert idle_after(1.0), "the decoding went on after the cancel"
    assert app.JOBS["served"].running() == 0
    text, _, stats, _ = Client(app_url, verbose=False).predict(
        handle_file(str(CLIP)), SHARED_DRAFT, "de", fallback=False, api_name="/transcribe"
    )
    assert text and stats["speculative"]["num_generated"] > 0


def test_a_client_that_goes_away_has_its_job_stopped(app_url, long_clip):
    """A client process killed mid-job: Gradio's unload (its heartbeat stopped) stops the session's job."""
    script = (
        "import sys, time; from gradio_client import Client, handle_file; "
        "Client(sys.argv[1], verbose=False).submit(handle_file(sys.argv[2]), sys.argv[3], "
        f"*{list(COMPARE)!r}, '', api_name='/compare'); time.sleep(600)"
    )
    client = subprocess.Popen([sys.executable, "-c", script, app_url, str(long_clip), SHARED_DRAFT])
    try:
        wait_until_decoding(timeout=120)
    finally:
        client.kill()
        client.wait()
    deadline = time.monotonic() + 60
    while app.JOBS["served"].running():  # unload fires on the lost heartbeat; the job ends at its next pass
        assert time.monotonic() < deadline, "the job of a client that went away kept running"
        time.sleep(0.1)
    assert idle_after(1.0)


def test_a_refused_upload_is_deleted(client, tmp_path):
    bad = tmp_path / "refused-upload.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt garbage")
    with pytest.raises(Exception, match="refused-upload.wav"):
        client.predict(handle_file(str(bad)), SHARED_DRAFT, fallback=False, api_name="/transcribe")
    assert not list(uploads.GRADIO_CACHE.rglob("refused-upload.wav"))
    assert app.UPLOAD_CACHE  # and everything else ages out of Gradio's cache (delete_cache)


def test_audio_too_short_to_hold_a_word_is_refused_on_the_page(client, tmp_path):
    one = tmp_path / "one-sample.wav"
    sf.write(one, np.full(1, 0.1, dtype=np.float32), 16_000)
    with pytest.raises(Exception, match="one-sample.wav is 0 ms long: too short to hold a word"):
        client.predict(handle_file(str(one)), SHARED_DRAFT, api_name="/transcribe")


def test_twenty_concurrent_clients_get_their_serial_answer_or_a_clear_queue_full(app_url, client):
    serial = client.predict(
        handle_file(str(CLIP)), SHARED_DRAFT, "de", fallback=False, api_name="/transcribe"
    )[0]

    def one_client(_: int) -> str:
        try:
            return Client(app_url, verbose=False).predict(
                handle_file(str(CLIP)), SHARED_DRAFT, "de", fallback=False, api_name="/transcribe"
            )[0]
        except Exception as error:  # past the line's bound (app.jobs) the rest are told so
            return f"error: {error}"

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(one_client, range(20)))
    answered = [answer for answer in answers if not answer.startswith("error: ")]
    refused = [answer for answer in answers if answer.startswith("error: ")]
    print(f"20 concurrent clients: {len(answered)} answered, {len(refused)} told the queue is full")
    assert answered and all(answer == serial for answer in answered)
    assert all("queue is full" in answer.lower() for answer in refused), refused[:1]
    assert (
        client.predict(handle_file(str(CLIP)), SHARED_DRAFT, "de", fallback=False, api_name="/transcribe")[0]
        == serial
    )


@pytest.mark.slow  # a benchmark or soak smoke test: CI runs it; -m 'not slow' skips it
def test_a_soak_of_comparisons_holds_memory_and_disk(client):
    def call() -> None:
        client.predict(
            handle_file(str(CLIP)), SHARED_DRAFT, *COMPARE, "", fallback=False, api_name="/compare"
        )

    call()
    files = sum(1 for _ in uploads.GRADIO_CACHE.rglob("*")) if uploads.GRADIO_CACHE.exists() else 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MB
    for _ in range(5):
        call()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - peak
    new_files = sum(1 for _ in uploads.GRADIO_CACHE.rglob("*")) - files
    print(f"5 more comparisons: peak memory +{grown:.0f} MB, {new_files} new files in the upload cache")
    assert grown < 150 and new_files <= 2


def test_a_microphone_chunk_equal_to_an_earlier_one_is_not_lost():
    # Gradio names a cached upload by its content's hash and never rewrites it: the same chunk again
    # (silence, a looped clip) arrives under the path of the file read and deleted the first time
    folder = Path(tempfile.mkdtemp(dir=uploads.GRADIO_CACHE))  # where Gradio puts uploads
    chunk = folder / "audio.wav"
    samples = (np.arange(8_000) % 100).astype(np.int16)
    sf.write(chunk, samples, 16_000)
    first = uploads.take_chunk(str(chunk))
    assert not chunk.exists()  # deleted at once
    again = uploads.take_chunk(str(chunk))
    assert again[0] == first[0] == 16_000 and np.array_equal(again[1], samples)
    broken = folder / "broken.wav"
    broken.write_bytes(b"RIFF....not audio")
    with pytest.raises(Exception, match="unreadable chunk") as refused:
        uploads.take_chunk(str(broken))
    assert str(folder) not in str(refused.value) and not broken.exists()  # no server path for the page


def test_the_no_speech_checkbox_reaches_the_decoding(client, tmp_path):
    """On (the page's default) a silent recording is answered "No speech detected"; off, it is decoded as
    generate() decodes it by default, through both endpoints."""
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(2 * 16_000, dtype=np.float32), 16_000)
    with pytest.raises(AppError, match=views.NO_SPEECH):
        client.predict(handle_file(str(silent)), SHARED_DRAFT, "en", fallback=False, api_name="/transcribe")
    text = client.predict(
        handle_file(str(silent)),
        SHARED_DRAFT,
        "en",
        detect_no_speech=False,
        fallback=False,
        api_name="/transcribe",
    )[0]
    baseline, speculative = client.predict(
        handle_file(str(silent)),
        SHARED_DRAFT,
        *COMPARE,
        "",
        detect_no_speech=False,
        fallback=False,
        api_name="/compare",
    )[:2]
    assert text and baseline == speculative


def test_the_page_says_a_lossy_run_is_not_the_targets(client):
    """The page's opt-in acceptance threshold, through its API: the badge and metrics of Compare and the
    tokens of Transcribe say the output is not the target's; 0 (the default) stays exact; out of range is
    a clear error."""
    settings = (handle_file(str(CLIP)), SHARED_DRAFT, *COMPARE)
    outputs = client.predict(*settings, "", False, False, True, False, 0.05, api_name="/compare")
    assert "LOSSY (acceptance threshold 0.05, as asked): not the target's own output" in outputs[2]
    assert "This is a bug" not in outputs[2]
    assert any(row[0].startswith("LOSSY") for row in outputs[4]["data"])
    exact = client.predict(*settings, "", False, False, True, False, api_name="/compare")
    assert "Identical" in exact[2] and "LOSSY" not in exact[2]
    _, tokens, stats, _ = client.predict(*settings, False, False, True, False, 0.05, api_name="/transcribe")
    assert "LOSSY (acceptance threshold 0.05" in tokens and stats["speculative"]["lossless"] is False
    with pytest.raises(Exception, match="1.5 is greater than maximum value 1"):  # the slider's own check
        client.predict(*settings, False, False, True, False, 1.5, api_name="/transcribe")
