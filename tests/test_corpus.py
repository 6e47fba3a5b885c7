"""Corpus transcription on Ray Data (`specdec.corpus`), on a local Ray started once for this file.

Every row is checked against `SpeculativeWhisper.transcribe` of its file alone (token ids), on the demo
models and on the bundled real pair; unreadable files become error rows while the rest is transcribed; a
run whose driver is killed leaves none of the Ray processes it started behind and resumes with every file
exactly once, a copy of a file that is done included; a run whose actor dies mid-batch completes with
every file exactly once. The pure parts (listing, keys, the store, what a rerun reuses, the stderr filter,
the resource plan) are tested without Ray.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import soundfile as sf

from specdec import cli
from specdec.corpus import pipeline, watchdog
from specdec.corpus.inputs import CorpusItem, list_inputs
from specdec.corpus.pipeline import plan_resources
from specdec.corpus.quiet import RAY_DATA_ACTOR_NOTICE, stderr_without
from specdec.corpus.rows import DoneRows, RunSettings, error_row
from specdec.corpus.run import CorpusOptions, transcribe_corpus
from specdec.corpus.store import SUMMARY, TRANSCRIPTS, CorpusStore, read_rows
from specdec.corpus.summary import summarise
from specdec.options import DecodeOptions

ROOT = Path(__file__).parent.parent
ASSETS = ROOT / "assets"
MAX_NEW_TOKENS = 12
DEMO_DECODE = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS)
ONE_THREAD = {"threads_per_worker": 1}  # as each pytest-xdist worker runs: one per core


def noise_clips(folder: Path, seconds: list[float], seed: int) -> list[Path]:
    """Noise clips of the given lengths, at a few sample rates and channel counts."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i, length in enumerate(seconds):
        rate, channels = [(16_000, 1), (44_100, 2), (8_000, 1)][i % 3]
        path = folder / f"clip-{i}.{'flac' if i % 2 else 'wav'}"
        sf.write(path, 0.1 * rng.standard_normal((round(rate * length), channels)), rate)
        paths.append(path)
    return paths


def reference_ids(whisper, paths: list[Path], languages: list[str | None] | None = None) -> dict[str, list]:
    """Each file's token ids from `SpeculativeWhisper.transcribe` of that file alone."""
    languages = languages or [DEMO_DECODE.language] * len(paths)
    found = {}
    for path, language in zip(paths, languages, strict=True):
        (result,) = whisper.transcribe(
            str(path), return_stats=True, language=language, max_new_tokens=DEMO_DECODE.max_new_tokens
        )
        found[os.path.abspath(path)] = list(result.token_ids)
    return found


def assert_each_once(rows: list[dict], paths: list[Path]) -> None:
    counts = Counter(row["audio"] for row in rows)
    assert counts == Counter(os.path.abspath(path) for path in paths), counts


@pytest.fixture(scope="module")
def ray_address():
    """One local Ray for the module: the runs in this process join it, a CLI subprocess joins it too."""
    import ray

    ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def real_run(ray_address, real_models, tmp_path_factory):
    """The bundled real pair on two real clips (one with its language in the manifest, one detected), a
    text file posing as audio, an empty file and a missing one, listed in a JSONL manifest."""
    folder = tmp_path_factory.mktemp("real")
    (folder / "not-audio.wav").write_text("this is not audio")
    (folder / "empty.flac").write_bytes(b"")
    entries = [
        {"path": str(ASSETS / "en-weather.wav"), "language": "en"},  # the English-only draft runs on this one
        {"path": str(ASSETS / "de-bahnhof.wav")},
        *({"path": name} for name in ("not-audio.wav", "empty.flac", "missing.wav")),
    ]
    manifest = folder / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    models = {"target": str(real_models["base"]), "draft": str(real_models["tiny.en"])}
    decode = DecodeOptions(word_timestamps=True)  # rows with timed words
    options = CorpusOptions(**models, decode=decode, batch_size=2, **ONE_THREAD)
    summary = transcribe_corpus(list_inputs(str(manifest)), folder / "out", options, progress=False)
    return {"summary": summary, "rows": read_rows(folder / "out" / TRANSCRIPTS)}


def run_killed_once_a_row_is_written(command: list[str], out: Path) -> dict:
    """The command in a subprocess that starts a Ray of its own, `kill -9`ed once it has written a row;
    what it left: its stderr and every process it had started that still runs a minute later."""
    alone = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}  # its own Ray
    driver = subprocess.Popen(command, cwd=ROOT, env=alone, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    started: dict[int, int] = {}  # every process it started: id -> start time
    deadline = time.monotonic() + 300
    while not list((out / "rows").glob("part-*.jsonl")) and driver.poll() is None:
        assert time.monotonic() < deadline, "no row written in 300 s"
        started.update(watchdog.descendants(driver.pid))
        time.sleep(0.02)
    driver.send_signal(signal.SIGKILL)
    stderr = driver.communicate()[1].decode()
    assert driver.returncode == -signal.SIGKILL, f"the run ended before it was killed: {stderr}"
    deadline = time.monotonic() + 60
    while (left := [pid for pid, start in started.items() if watchdog.start_time(pid) == start]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
    names = []
    for pid in left:  # the test's own leftovers, ended before the rerun
        with contextlib.suppress(OSError):
            names.append((Path("/proc") / str(pid) / "comm").read_text().strip())
            os.kill(pid, signal.SIGKILL)
    return {"stderr": stderr, "started": started, "left_running": names}


def dies_once(marker: Path) -> type:
    """A test double of the corpus actor: the first to decode a batch exits its process before returning
    it, as a crashed machine would (once per run: it creates `marker` first). Defined in a function, so
    that Ray pickles the class itself for its actors instead of importing it from the tests."""

    class DiesOnce(pipeline.Transcriber):
        def decode(self, *args, **kwargs) -> list[dict]:  # called for the files a batch has to decode
            rows = super().decode(*args, **kwargs)
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return rows
            os._exit(1)

    return DiesOnce


@pytest.fixture(scope="module")
def resumed_run(ray_address, demo_models, tmp_path_factory):
    """`python -m specdec corpus` on six clips in a subprocess that starts its own Ray, killed once it
    has written a row; then, with a copy of a file it did added to the input, the same command run again
    in this process on the module's Ray, an actor made to die after decoding its first batch; then the
    finished run once more."""
    folder = tmp_path_factory.mktemp("resumed")
    clips = noise_clips(folder / "in", [1.0, 1.5, 1.0, 2.0, 1.0, 1.5], seed=1)
    out = folder / "out"
    arguments = [
        "corpus", str(folder / "in"), "--out", f"{out}/", "--target", str(demo_models["target"]),
        "--draft", str(demo_models["draft-separate"]), "--language", "en",
        "--max-new-tokens", str(MAX_NEW_TOKENS), "--threads-per-worker", "1",
    ]  # fmt: skip
    killed = run_killed_once_a_row_is_written(
        [sys.executable, "-m", "specdec", *arguments, "--batch-size", "1"], out
    )
    killed["transcripts"] = (out / TRANSCRIPTS).exists()
    with CorpusStore(out) as store:
        killed["rows"] = {row["audio"]: row for row in store.rows()}
        (store.journal / ".part-x.jsonl.1.tmp").write_text('{"audio": "half')  # as if killed mid-write
    done = Path(min(killed["rows"]))
    copy = done.with_name(f"copy-of-{done.name}")  # the same bytes as a file done, listed after the clips
    shutil.copyfile(done, copy)

    marker = folder / "actor-killed"
    runs = []
    for actor in (dies_once(marker), pipeline.Transcriber):  # the killed run resumed; the finished one again
        patched = mock.patch.object(pipeline, "Transcriber", actor)
        with patched, contextlib.redirect_stdout(io.StringIO()) as printed:
            exit_code = cli.main([*arguments, "--batch-size", "2"])
        with CorpusStore(out) as store:
            journal = store.rows()
        runs.append(
            {
                "exit_code": exit_code,
                "printed": printed.getvalue(),
                "summary": json.loads((out / SUMMARY).read_text()),
                "rows": read_rows(out / TRANSCRIPTS),
                "journal": journal,
                "parts": list((out / "rows").glob("part-*.jsonl")),
            }
        )
    return {
        "clips": clips,
        "copy": copy,
        "inputs": [os.path.abspath(path) for path in (*clips, copy)],
        "out": out,
        "killed": killed,
        "resumed": runs[0],
        "again": runs[1],
        "actor_killed": marker.exists(),
    }


@pytest.mark.slow  # the killed run below, which started its own Ray: CI runs it
def test_a_killed_run_that_started_ray_leaves_no_ray_process_behind(resumed_run):
    """`kill -9` of a run that started Ray itself: every process it had started (Ray's GCS, raylet,
    agents and workers) ends (the raylet's agents lived on, orphaned, before `corpus.watchdog`)."""
    started, left = resumed_run["killed"]["started"], resumed_run["killed"]["left_running"]
    assert len(started) > 3, "Ray's processes were seen"
    assert not left, f"still running a minute after the run was killed: {left}"


@pytest.mark.slow  # real models in a fresh actor: CI runs it; -m 'not slow' skips it
def test_rows_equal_transcribe_of_each_file_alone_on_the_real_pair(real_run, real_pair):
    rows = real_run["rows"]
    for row, clip, language in zip(rows[:2], ("en-weather", "de-bahnhof"), ("en", None), strict=True):
        path = str(ASSETS / f"{clip}.wav")
        (alone,) = real_pair.transcribe(path, return_stats=True, language=language, word_timestamps=True)
        assert row["token_ids"] == list(alone.token_ids), (
            f"{clip}: corpus row differs from transcribe() alone"
        )
        assert row["text"] == alone.text and row["language"] == alone.language
        assert row["words"] == alone.to_dict()["words"] and len(row["words"]) > 5
        assert row["segments"] is None and row["stats"]["num_generated"] >= len(alone.token_ids)
    assert [row["language"] for row in rows[:2]] == ["en", "de"]  # the manifest's; the detected one
    assert [round(row["duration_seconds"], 1) for row in rows[:2]] == [6.4, 4.6]


@pytest.mark.slow  # the same run as above
def test_bad_files_become_error_rows_and_the_rest_is_transcribed(real_run):
    rows, summary = real_run["rows"], real_run["summary"]
    assert [Path(row["audio"]).name for row in rows][2:] == ["not-audio.wav", "empty.flac", "missing.wav"]
    errors = {Path(row["audio"]).name: row for row in rows if row["error"] is not None}
    assert set(errors) == {"not-audio.wav", "empty.flac", "missing.wav"}
    assert "not an audio file" in errors["not-audio.wav"]["error"]
    assert "empty" in errors["empty.flac"]["error"]
    assert "could not read" in errors["missing.wav"]["error"]
    assert errors["missing.wav"]["key"] is None and errors["empty.flac"]["key"] is not None
    assert all(row["text"] is None and row["token_ids"] is None for row in errors.values())
    assert (summary.files, summary.transcribed, summary.failures) == (5, 2, 3)
    assert summary.acceptance_rate is not None and summary.target_passes_saved > 0


@pytest.mark.slow  # a CLI subprocess killed mid-run, then a rerun: CI runs it
def test_a_killed_run_resumes_with_every_file_exactly_once(resumed_run):
    clips, killed, resumed = resumed_run["clips"], resumed_run["killed"], resumed_run["resumed"]
    assert not killed["transcripts"] and 1 <= len(killed["rows"]) < len(clips)
    assert RAY_DATA_ACTOR_NOTICE.decode() not in killed["stderr"]  # the actors had started
    done_before = len(killed["rows"]) + 1  # and the copy of one of them
    summary, rows = resumed["summary"], resumed["rows"]
    assert (summary["resumed"], summary["transcribed"]) == (done_before, len(clips) - len(killed["rows"]))
    assert resumed["exit_code"] == 0
    assert_each_once(rows, [*clips, resumed_run["copy"]])
    for row in rows:  # the killed run's rows are kept as they were written
        assert row["audio"] not in killed["rows"] or killed["rows"][row["audio"]] == row
    assert len(resumed["parts"]) == 1 and len(resumed["journal"]) == len(rows)  # compacted


@pytest.mark.slow  # the same runs as above
def test_a_copy_of_a_done_file_gets_its_own_row_when_a_killed_run_resumes(resumed_run):
    """The copy (the same bytes as a file the killed run did, under another path) is lent that file's row,
    not decoded (the summary counts it resumed); its row is in the journal, so the finished run, run again,
    decodes nothing."""
    paths, out, killed = resumed_run["inputs"], resumed_run["out"], resumed_run["killed"]["rows"]
    done = next(path for path in paths if path in killed)
    for run, (resumed, transcribed) in (
        (resumed_run["resumed"], (len(killed) + 1, len(paths) - 1 - len(killed))),
        (resumed_run["again"], (len(paths), 0)),
    ):
        assert run["exit_code"] == 0
        assert f"{out}/{TRANSCRIPTS}: {len(paths)} rows" in run["printed"].splitlines()  # no "//"
        rows = run["rows"]
        assert [row["audio"] for row in rows] == paths
        assert rows[-1] == {**killed[done], "audio": paths[-1]}  # lent, not decoded
        assert (run["summary"]["resumed"], run["summary"]["transcribed"]) == (resumed, transcribed)
        assert sorted(row["audio"] for row in run["journal"]) == sorted(paths)
    assert resumed_run["again"]["rows"] == resumed_run["resumed"]["rows"]


@pytest.mark.slow  # the same runs as above
def test_rows_equal_transcribe_of_each_file_alone_on_the_demo_models(resumed_run, separate_pair):
    rows = resumed_run["resumed"]["rows"]
    assert {row["audio"]: row["token_ids"] for row in rows} == reference_ids(
        separate_pair, [*resumed_run["clips"], resumed_run["copy"]]
    )
    for row in rows:
        assert row["text"] == separate_pair.decode_text(row["token_ids"]) and row["language"] == "en"
    assert [row["duration_seconds"] for row in rows[:-1]] == [1.0, 1.5, 1.0, 2.0, 1.0, 1.5]


@pytest.mark.slow  # the same runs as above
def test_an_actor_killed_mid_batch_is_replaced_and_every_file_is_done_once(resumed_run):
    assert resumed_run["actor_killed"], "the fault was not injected"
    assert resumed_run["resumed"]["summary"]["failures"] == 0
    assert_each_once(resumed_run["resumed"]["rows"], [*resumed_run["clips"], resumed_run["copy"]])


def test_inputs_from_a_folder_a_glob_and_a_manifest(tmp_path):
    clips = noise_clips(tmp_path / "a" / "b", [0.5, 0.5], seed=3)
    (tmp_path / "a" / "notes.txt").write_text("not listed")
    assert list_inputs(str(tmp_path / "a")) == [CorpusItem(os.path.abspath(p)) for p in sorted(clips)]
    assert list_inputs(str(tmp_path / "a" / "**" / "*.wav")) == [CorpusItem(os.path.abspath(clips[0]))]
    manifest = tmp_path / "a" / "list.jsonl"
    manifest.write_text(
        '{"audio": "b/clip-1.flac", "language": "de"}\n{"audio": "b/clip-1.flac", "language": "de"}\n'
    )
    assert list_inputs(str(manifest)) == [CorpusItem(os.path.abspath(clips[1]), "de")]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no audio files"):
        list_inputs(str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="no file matches"):
        list_inputs(str(tmp_path / "*.mp3"))


def test_the_command_refuses_an_input_without_audio_in_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("no audio here")
    exit_code = cli.main(["corpus", str(tmp_path), "--out", str(tmp_path / "out")])
    error = capsys.readouterr().err
    assert exit_code == cli.EXIT_BAD_SETUP and error.count("\n") == 1 and "no audio files" in error
    assert not (tmp_path / "out").exists()  # refused before anything was started or written


def test_the_key_follows_the_models_the_options_and_the_file_language():
    settings = RunSettings("base", "tiny.en", "cpu", "sequential", DecodeOptions(language="en"))
    assert settings.digest(None) == settings.digest("en") != settings.digest("de")
    for other in (
        RunSettings("base", "tiny.en", "cpu", "chunked", DecodeOptions(language="en")),
        RunSettings("base", "tiny", "cpu", "sequential", DecodeOptions(language="en")),
        RunSettings("base", "tiny.en", "cpu", "sequential", DecodeOptions(language="en", timestamps=True)),
        RunSettings("base", "tiny.en", "cpu", "sequential", DecodeOptions(language="en"), "bfloat16"),
    ):
        assert other.digest(None) != settings.digest(None)


def test_the_store_reads_whole_rows_newest_first_and_locks_its_folder(tmp_path):
    with CorpusStore(tmp_path) as store:
        store.append([error_row("a.wav", "old", "k1"), error_row("b.wav", "b", None)])
        store.append([error_row("a.wav", "new", "k1")])
        (store.journal / ".part-x.jsonl.1.tmp").write_text('{"key": "half')  # a crash mid-write
        assert [(row["audio"], row["error"]) for row in store.rows()] == [("a.wav", "new")]
        with pytest.raises(ValueError, match="another corpus run"):
            CorpusStore(tmp_path)


def planted_row(path: str, key: str) -> dict:
    """A transcript no model gives, as a run would have written it for path."""
    stats = {"num_generated": 3, "num_target_passes": 2, "num_drafted": 4, "num_accepted": 2}
    return {
        "audio": path, "duration_seconds": 1.0, "language": "en", "text": " planted", "segments": None,
        "token_ids": [1, 2, 3], "stats": stats, "error": None, "key": key,
    }  # fmt: skip


def test_the_store_keeps_a_row_per_path_when_files_have_the_same_bytes(tmp_path):
    with CorpusStore(tmp_path) as store:
        rows = [planted_row("a.wav", "k1"), planted_row("copy-of-a.wav", "k1")]
        store.append(rows)
        store.append(rows)  # as a run killed while compacting leaves the journal: each row twice
        assert store.rows() == rows
        store.finish(rows, summarise(rows, [True, True], 1.0))
        assert store.rows() == rows and len(list(store.journal.glob("part-*.jsonl"))) == 1


def test_a_rerun_keeps_each_paths_row_and_lends_transcripts_only_to_the_same_bytes():
    transcript, failed = planted_row("a.wav", "k1"), error_row("bad.wav", "bad.wav: not audio", "k2")
    done = DoneRows([transcript, failed])
    index = done.index()
    assert index.is_done("a.wav", "k1") and done.row("a.wav", "k1") == transcript
    lent = done.row("copy.wav", "k1")
    assert index.is_done("copy.wav", "k1") and lent == {**transcript, "audio": "copy.wav"}
    assert done.holds(transcript) and not done.holds(lent)  # the copy's row is new to the journal
    assert index.is_done("bad.wav", "k2") and not index.is_done("copy-of-bad.wav", "k2")  # decoded again
    assert not index.is_done("a.wav", "k3")  # other bytes, or other options
    retry = DoneRows([transcript, failed], retry_errors=True).index()
    assert retry.is_done("a.wav", "k1") and not retry.is_done("bad.wav", "k2")


def test_stderr_loses_only_the_notice_about_ray_datas_actor_arguments(capfd):
    notice = b"[E core_worker.cc:1] Actor 'MapWorker' " + RAY_DATA_ACTOR_NOTICE + b". See ...\n"
    with stderr_without(RAY_DATA_ACTOR_NOTICE) as terminal:
        os.write(2, b"before\n" + notice + b"[E core_worker.cc:2] a real error\n")  # as C++ writes
        print("a warning", file=sys.stderr)
        os.write(2, b"no newline")
        terminal.write("progress\n")
    os.write(2, b"\nafter\n")
    err = capfd.readouterr().err
    assert err.count("\n") == 6 and RAY_DATA_ACTOR_NOTICE.decode() not in err
    for expected in ("before", "a real error", "a warning", "no newline", "progress", "after"):
        assert expected in err


def test_the_actor_pool_leaves_cpu_to_the_read_tasks():
    one = plan_resources("cpu", None, None, 1.0, node_cpus=[2.0], cluster_gpus=0)
    two = plan_resources("cpu", 2, None, 1.0, node_cpus=[2.0], cluster_gpus=0)
    assert (one.workers, one.threads, one.cpus_per_worker) == (1, 2, 1.5)
    assert (two.workers, two.threads, two.cpus_per_worker) == (2, 1, 0.75)
    gpus = plan_resources("cuda", None, None, 0.5, node_cpus=[16.0, 16.0], cluster_gpus=2)
    assert (gpus.workers, gpus.gpus_per_worker, gpus.cpus_per_worker, gpus.threads) == (4, 0.5, 1.0, 8)
    crowded = plan_resources("cuda", None, None, 1.0, node_cpus=[4.0], cluster_gpus=4)  # a CPU per GPU
    assert (crowded.workers, crowded.cpus_per_worker) == (4, 0.875)
