"""Transcripts as files (specdec/subtitles.py): SRT, WebVTT, text and JSON from timed segments, through the
Python API, the command line and the Compare view's downloads.

Formatting and reading segments from a trace are checked on planted data (the exact output, parsed back
by the `srt` and `webvtt-py` libraries); models run for three short decodes: the demo pair on a file
over 30 s and on a 2 s clip through the CLI, and the real pair once, for real timestamps.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import srt
import webvtt

from specdec import cli, subtitles
from specdec.api import Transcription
from specdec.app import downloads
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.subtitles import Cue, NoTimestamps
from specdec.trace import TARGET, DecodeResult, Segment, TokenRecord, Window

ASSETS = Path(__file__).parent.parent / "assets"
BEGIN = 1000  # the planted vocabulary's first timestamp id: `<|0.00|>`
WORDS = {1: " Hello", 2: " world.", 3: " Less", 4: " <than> &", 5: " -->", 6: " more", 7: " line\n\nbreak"}


def decode(token_ids) -> str:
    return "".join(WORDS[token_id] for token_id in token_ids)


def at(seconds: float) -> int:
    return BEGIN + round(seconds / 0.02)


def planted_result(tokens: list[tuple[int, int, bool]], windows: tuple[Window, ...]) -> DecodeResult:
    """A trace of (token id, window, kept) records, as a decoding with timestamps leaves it."""
    records = tuple(
        TokenRecord(token, TARGET, i, window, 0.9, None, kept)
        for i, (token, window, kept) in enumerate(tokens)
    )
    kept = tuple(record.token_id for record in records if record.kept)
    return DecodeResult(kept, (50258,), "en", records, (), (), (), 0.0, windows)


CUES = (
    Cue(0.0, 2.5, " Hello world.", (1, 2)),
    Cue(2.5, 3723.4567, " Less <than> & --> more", (3, 4, 5, 6)),
    Cue(3723.4567, 3723.5, "  ", ()),  # nothing to show: no cue
    Cue(3723.5, 3724.0, " line\n\nbreak", (7,)),  # a blank line would end the cue early
)


def test_planted_cues_as_srt_webvtt_and_text():
    expected_srt = (
        "1\n00:00:00,000 --> 00:00:02,500\nHello world.\n\n"
        "2\n00:00:02,500 --> 01:02:03,457\nLess <than> & -> more\n\n"
        "3\n01:02:03,500 --> 01:02:04,000\nline break\n\n"
    )
    expected_vtt = (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:02.500\nHello world.\n\n"
        "00:00:02.500 --> 01:02:03.457\nLess &lt;than&gt; &amp; --&gt; more\n\n"
        "01:02:03.500 --> 01:02:04.000\nline break\n\n"
    )
    assert subtitles.srt(CUES) == expected_srt
    assert subtitles.vtt(CUES) == expected_vtt
    assert subtitles.plain_text("ignored", CUES) == "Hello world.\nLess <than> & --> more\nline break\n"
    parsed = list(srt.parse(expected_srt))
    captions = webvtt.from_string(expected_vtt).captions
    assert [cue.content for cue in parsed] == ["Hello world.", "Less <than> & -> more", "line break"]
    assert [html.unescape(caption.text) for caption in captions] == [
        "Hello world.",
        "Less <than> & --> more",
        "line break",
    ]
    assert [cue.end.total_seconds() for cue in parsed] == [2.5, 3723.457, 3724.0]
    assert [caption.end for caption in captions] == ["00:00:02.500", "01:02:03.457", "01:02:04.000"]
    assert (
        subtitles.srt(()) == ""
        and subtitles.vtt(()) == "WEBVTT\n\n"
        and not webvtt.from_string("WEBVTT\n\n").captions
    )


def test_segments_from_a_trace_in_seconds_of_the_whole_file():
    windows = (Window(0, 0.0, 30.0), Window(1, 28.0, 6.3))
    tokens = [
        (at(0.0), 0, True), (1, 0, True), (2, 0, True), (at(2.0), 0, True),  # a segment, closed
        (at(2.0), 0, True), (3, 0, True), (at(4.5), 0, True), (at(4.5), 0, True),  # another, then a pair
        (6, 0, False), (at(29.0), 0, False),  # the tail after the last pair: not kept
        (at(0.5), 1, True), (6, 1, True), (at(9.0), 1, True),  # seconds 28.5 to 37: past the audio
        (at(9.5), 1, True), (7, 1, True),  # cut off at the end of the window: no end timestamp
    ]  # fmt: skip
    found = subtitles.segments_of(planted_result(tokens, windows), BEGIN, 0.02)
    assert found == (
        Segment(0.0, 2.0, (1, 2)),
        Segment(2.0, 4.5, (3,)),
        Segment(28.5, 37.0, (6,)),
        Segment(37.5, None, (7,)),
    )
    cues = subtitles.cues(found, decode, audio_seconds=34.3)
    assert [(cue.start_seconds, cue.end_seconds) for cue in cues] == [
        (0.0, 2.0),
        (2.0, 4.5),
        (28.5, 34.3),
        (34.3, 34.3),
    ]
    assert "".join(cue.text for cue in cues) == decode((1, 2, 3, 6, 7))


def test_missing_times_are_filled_and_times_never_go_back():
    segments = (
        Segment(None, 31.0, (1,)),  # no start: the beginning of the file
        Segment(31.0, None, (2,)),  # no end: the next start
        Segment(30.0, 32.0, (3,)),  # before the previous start: moved up to it
        Segment(33.0, None, (6,)),  # no end and nothing after it: the end of the audio
    )
    cues = subtitles.cues(segments, decode, audio_seconds=40.0)
    times = [(cue.start_seconds, cue.end_seconds) for cue in cues]
    assert times == [(0.0, 31.0), (31.0, 31.0), (31.0, 32.0), (33.0, 40.0)]
    chunked = planted_result([(1, 0, True), (2, 0, True)], (Window(0, 0.0, 30.0, chunk=0),))
    assert subtitles.segments_of(chunked, BEGIN, 0.02) == ()  # chunked: the merged segments, here none
    chunked = DecodeResult((1, 2), (), "en", (), (), (), (), 0.0, chunked.windows, segments=segments)
    assert subtitles.segments_of(chunked, BEGIN, 0.02) == segments


def test_without_timestamps_text_and_json_work_and_subtitles_say_what_is_missing(tmp_path):
    result = planted_result([(1, 0, True), (2, 0, True)], (Window(0, 0.0, 30.0),))
    transcription = Transcription("recordings/clip.wav", "Hello world.", result)
    for to_subtitles in (transcription.to_srt, transcription.to_vtt):
        with pytest.raises(NoTimestamps, match="timestamps=True.*--timestamps"):
            to_subtitles()
    assert transcription.to_text() == "Hello world.\n"
    record = json.loads(transcription.to_json())
    assert record["text"] == "Hello world." and record["segments"] is None
    assert record["token_ids"] == [1, 2] and len(record["tokens"]) == 2 and "stats" in record
    with pytest.raises(NoTimestamps):
        transcription.save(tmp_path, subtitles.FORMATS)
    assert not list(tmp_path.iterdir())  # a refused format writes nothing
    assert transcription.save(tmp_path, ("txt", "json")) == [tmp_path / "clip.txt", tmp_path / "clip.json"]


def assert_subtitles(srt_text: str, vtt_text: str, record: dict, audio_seconds: float) -> list[srt.Subtitle]:
    """SRT and WebVTT parse back to the JSON's segments: times that never go back and lie within the audio,
    and the transcript's text; the JSON holds the whole trace beside them."""
    parsed = list(srt.parse(srt_text))
    captions = webvtt.from_string(vtt_text).captions
    segments = [segment for segment in record["segments"] if segment["text"].strip()]
    starts = [cue.start.total_seconds() for cue in parsed]
    ends = [cue.end.total_seconds() for cue in parsed]
    assert parsed and len(captions) == len(parsed) == len(segments)
    assert starts == sorted(starts) == [segment["start_seconds"] for segment in segments]
    assert all(0 <= start <= end <= audio_seconds + 5e-4 for start, end in zip(starts, ends, strict=True))
    assert [caption.start_time.in_milliseconds() / 1000 for caption in captions] == starts
    assert "".join(segment["text"] for segment in record["segments"]).strip() == record["text"]
    shown = "".join(cue.content for cue in parsed)  # one line per cue, its spaces collapsed
    assert "".join(shown.split()) == "".join(record["text"].split())
    assert record["steps"] and record["stats"]["num_generated"] > 0
    return parsed


def test_cli_writes_every_format_of_a_long_file_in_seconds_of_the_whole_file(
    separate_pair, tmp_path, monkeypatch, capsys
):
    clips = [load_audio(path) for path in sorted(ASSETS.glob("*.wav"))]
    waveform = np.concatenate([*clips, clips[0]])  # 30.9 s: long-form, a second window from 30 s
    path = tmp_path / "long.wav"
    sf.write(path, waveform, SAMPLE_RATE)
    monkeypatch.setattr(cli, "SpeculativeWhisper", lambda **models: separate_pair)  # loaded once per session
    out = tmp_path / "out"
    code = cli.main([
        "transcribe", str(path), "--timestamps", "--language", "en", "--max-new-tokens", "10",
        "--output-format", "all", "--output-dir", str(out), "--json",
    ])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert sorted(file.name for file in out.iterdir()) == ["long.json", "long.srt", "long.txt", "long.vtt"]
    written = {file.suffix: file.read_text(encoding="utf-8") for file in out.iterdir()}
    record = json.loads(written[".json"])
    assert record["text"] == json.loads(printed.out)["speculative"]["text"] and len(record["windows"]) == 2
    parsed = assert_subtitles(written[".srt"], written[".vtt"], record, len(waveform) / SAMPLE_RATE)
    assert parsed[-1].start.total_seconds() >= 30.0  # the second window's times count from the file's start
    assert written[".txt"].splitlines() == [cue.content for cue in parsed]


def test_real_timestamps_give_subtitles_of_the_transcript(real_pair):
    clip = ASSETS / "en-fellow-americans.wav"
    (transcription,) = real_pair.transcribe(str(clip), language="en", timestamps=True, return_stats=True)
    assert transcription.text.startswith("And so my fellow Americans")
    record = json.loads(transcription.to_json())
    parsed = assert_subtitles(transcription.to_srt(), transcription.to_vtt(), record, sf.info(clip).duration)
    assert " ".join(cue.content for cue in parsed) == transcription.text  # segments end between words


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--output-format", "srt"], "srt needs --timestamps"),
        (["--output-dir", "out"], "all (the default with --output-dir) needs --timestamps"),
        (["x/clip.flac", "--output-format", "txt"], "both write clip.txt"),
    ],
)
def test_cli_refuses_files_it_cannot_write_before_loading_models(arguments, message, monkeypatch, capsys):
    monkeypatch.setattr(cli, "SpeculativeWhisper", lambda **models: pytest.fail("models loaded"))
    assert cli.main(["transcribe", "clip.wav", *arguments]) == cli.EXIT_BAD_SETUP
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error


def test_the_compare_views_downloads(tmp_path):
    result = planted_result([(at(0.0), 0, True), (1, 0, True), (2, 0, True), (at(1.5), 0, True)], ())
    timed = Transcription("en-weather.wav", "Hello world.", result, (Cue(0.0, 1.5, " Hello world.", (1, 2)),))
    folder = downloads.session_folder(tmp_path, "../../escape")
    assert folder.is_relative_to(tmp_path / downloads.FOLDER)  # the client's session id is only hashed
    srt_file, vtt_file, json_file = downloads.write(timed, folder)
    assert [Path(path).name for path in (srt_file, vtt_file, json_file)] == [
        "en-weather.srt", "en-weather.vtt", "en-weather.json"
    ]  # fmt: skip
    assert [cue.content for cue in srt.parse(Path(srt_file).read_text(encoding="utf-8"))] == ["Hello world."]
    assert json.loads(Path(json_file).read_text(encoding="utf-8"))["tokens"]  # the full trace
    untimed = Transcription("other.wav", "Hello world.", result)
    assert downloads.write(untimed, folder) == [None, None, str(folder / "other.json")]
    assert sorted(path.name for path in folder.iterdir()) == [
        "other.json"
    ]  # the earlier run's files are gone
    downloads.clear(folder)
    assert not folder.exists()
