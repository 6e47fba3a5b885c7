"""A file played as a live stream: `python -m specdec stream`, `specdec.streaming.playback` and the stream
benchmark.

The stream command runs as a user runs it (a subprocess) on the demo models, its error cases through the
same `main(argv)` in-process; real-time pacing runs on a fake clock.
Timings are never asserted: latencies are benchmark figures.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from benchmarks.stream import StreamBenchOptions, goals, load_whispers, measure, table
from specdec import cli
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.streaming.playback import stream_audio, summarise
from specdec.streaming.session import StreamOptions, Update
from specdec.streaming.words import StreamWord

ASSETS = Path(__file__).parent.parent / "assets"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdec", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_stream_command_prints_committed_text_as_it_grows_and_the_figures(demo_models, tmp_path):
    clip = tmp_path / "weather-4s.wav"
    sf.write(clip, load_audio(ASSETS / "en-weather.wav")[: 4 * SAMPLE_RATE], SAMPLE_RATE)
    result = run_cli(
        "stream", str(clip), "--chunk", "1.0", "--language", "en", "--device", "cpu",
        "--target", str(demo_models["target"]), "--draft", str(demo_models["draft-shared"]),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    final = next(index for index, line in enumerate(lines) if line.startswith(f"{clip} [en]: "))
    text = lines[final].split(": ", 1)[1]
    # not a terminal: each newly committed piece on its own line, stamped with the stream time
    pieces = [re.fullmatch(r"\s*(\d+\.\d) s  (.*)", line) for line in lines[:final]]
    assert pieces and all(pieces), lines[:final]
    times = [float(piece.group(1)) for piece in pieces]
    assert times == sorted(times) and times[-1] <= 4.0
    position = 0
    for piece in pieces:  # the committed pieces, in order, are the final text's
        position = text.index(piece.group(2), position) + len(piece.group(2))
    figures = "\n".join(lines[final + 1 :])
    passes = float(re.search(r"target passes per decoded update: (\d+\.\d)", figures).group(1))
    median, p95 = map(float, re.search(r"median (\d+\.\d+) s, p95 (\d+\.\d+) s", figures).groups())
    assert passes >= 1 and 0 < median <= p95
    assert "real-time factor:" in figures and "hypothesis reuse on" in figures and "reused" in figures
    assert "held back for the pace (decoding at most 50% of real time)" in figures


@pytest.mark.parametrize(
    ("content", "args", "exit_code", "message"),
    [
        (b"", (), 1, "file is empty"),
        (b"this is not audio", (), 1, "not an audio file"),
        (None, ("--chunk", "0"), 2, "--chunk must be positive"),
        (None, ("--max-load", "-1"), 2, "--max-load must be 0 or more"),
    ],
    ids=["empty", "not-audio", "zero-chunk", "negative-load"],
)
def test_stream_user_errors_are_one_line(demo_models, tmp_path, capsys, content, args, exit_code, message):
    audio = tmp_path / "clip.wav"
    if content is None:
        audio = ASSETS / "fr-marche.wav"
    else:
        audio.write_bytes(content)
    code = cli.main([
        "stream", str(audio), *args, "--device", "cpu",
        "--target", str(demo_models["target"]), "--draft", str(demo_models["draft-shared"]),
    ])  # fmt: skip
    error = capsys.readouterr().err
    assert code == exit_code
    assert error.strip().count("\n") == 0 and "Traceback" not in error
    assert error.startswith("specdec: error:") and message in error


class FakeClock:
    """Time that passes only when slept through (or when the test says so)."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_realtime_feeds_each_chunk_at_its_end_and_catches_up_when_late(separate_pair):
    """Silence (never decoded, so fast) played in real time: 3.5 s in 1 s chunks."""
    clock = FakeClock()
    silence = np.zeros(int(3.5 * SAMPLE_RATE), np.float32)
    fed_at = []
    stream = stream_audio(separate_pair, silence, StreamOptions(), True, clock=clock, sleep=clock.sleep)
    for update in stream:
        fed_at.append(clock.now - 100.0)
        if update.index == 0:
            clock.now += 1.5  # the first update took 1.5 s: the second chunk is late and not waited for
    assert fed_at == pytest.approx([1.0, 2.5, 3.0, 3.5, 3.5])  # the last: finish()
    assert clock.sleeps == pytest.approx([1.0, 0.5, 0.5])
    assert [update.stream_seconds for update in stream_audio(separate_pair, silence)][-1] == 3.5

    fast = FakeClock()
    at_8k = np.zeros(2 * 8_000, np.float32)
    updates = list(stream_audio(separate_pair, at_8k, sample_rate=8_000, clock=fast, sleep=fast.sleep))
    assert fast.sleeps == [] and [update.stream_seconds for update in updates] == [1.0, 2.0, 2.0]


def test_summary_of_a_short_stream_is_sane(shared_pair):
    waveform = load_audio(ASSETS / "en-weather.wav")[: 3 * SAMPLE_RATE]
    updates = list(stream_audio(shared_pair, waveform, StreamOptions(language="en")))
    summary = summarise(updates)
    decoded = [update for update in updates if update.decoded]
    assert summary.updates == 4 and summary.decoded_updates == len(decoded) >= 2
    assert summary.audio_seconds == 3.0
    assert summary.passes_per_update == np.mean([update.target_passes for update in decoded]) >= 1
    assert 0 < summary.median_latency_seconds <= summary.p95_latency_seconds
    assert summary.processing_seconds == pytest.approx(sum(update.latency_seconds for update in updates))
    assert summary.real_time_factor == pytest.approx(summary.processing_seconds / 3.0)
    assert set(summary.acceptance) <= {"reused", "draft"} and "draft" in summary.acceptance
    assert all(0 <= rate <= 1 for rate in summary.acceptance.values())
    assert sum(summary.tokens_by_source.values()) == sum(len(update.hypothesis) for update in decoded)
    assert set(summary.to_dict()) >= {"real_time_factor", "acceptance", "passes_per_update"}


def test_summary_figures_on_planted_updates():
    def update(index: int, latency: float, passes: int, decoded: bool = True) -> Update:
        return Update(
            index, index + 1.0, decoded, "", "", latency,
            token_sources=("reused", "target") if decoded else (),
            proposals={"reused": {"steps": 1, "drafted": 4, "accepted": 3}} if decoded else {},
            result=SimpleNamespace(num_target_passes=passes) if decoded else None,
        )  # fmt: skip

    updates = [update(0, 0.1, 2), update(1, 0.4, 4), update(2, 0.01, 0, decoded=False), update(3, 0.2, 6)]
    summary = summarise(updates)
    assert (summary.decoded_updates, summary.passes_per_update, summary.audio_seconds) == (3, 4.0, 4.0)
    assert summary.median_latency_seconds == pytest.approx(0.2)  # skipped chunks left out
    assert summary.p95_latency_seconds == pytest.approx(0.38)  # linear interpolation
    assert summary.real_time_factor == pytest.approx(0.71 / 4.0)  # every update's processing counts
    assert summary.proposals == {"reused": {"steps": 3, "drafted": 12, "accepted": 9}}
    assert summary.acceptance == {"reused": 0.75} and summary.tokens_by_source == {"reused": 3, "target": 3}
    empty = summarise([])
    assert (empty.decoded_updates, empty.median_latency_seconds, empty.real_time_factor) == (0, 0.0, 0.0)
    # committed words: from each one's end in the audio to its update's text being ready
    words = [StreamWord(" a", (1,), 0.0, end, 1.0, 0) for end in (0.5, 1.5, 3.0)]
    late = dataclasses.replace(updates[3], committed_words=tuple(words))  # ready at 4.0 + 0.2 s
    lagged = summarise([*updates[:3], late])
    assert late.commit_lags == pytest.approx([3.7, 2.7, 1.2])
    assert lagged.committed_words == 3 and lagged.median_commit_lag_seconds == pytest.approx(2.7)


@pytest.mark.slow  # a benchmark or soak smoke test: CI runs it; -m 'not slow' skips it
def test_stream_bench_checks_every_update_and_reports_goals(shared_pair):
    waveform = load_audio(ASSETS / "en-weather.wav")[: 3 * SAMPLE_RATE]
    rows = measure({"draft-shared": shared_pair}, waveform, 1.0, log=lambda _: None)
    assert [row["config"] for row in rows] == ["draft-shared + reuse", "draft-shared only", "target alone"]
    assert all(row["identical"] and not row["mismatched_updates"] for row in rows)
    by_name = {row["config"]: row for row in rows}
    assert by_name["target alone"]["proposals"] == {}
    assert by_name["target alone"]["passes_per_update"] > by_name["draft-shared only"]["passes_per_update"]
    assert len({row["final_text"] for row in rows}) == 1  # the same stream, whoever drafts
    found = goals(rows, ["draft-shared"], 1.0)
    assert [goal["met"] is not None for goal in found] == [True, True]
    assert "target alone" in table(rows)
    with pytest.raises(ValueError, match="--size small"):
        load_whispers(StreamBenchOptions(size="large-v3"))
