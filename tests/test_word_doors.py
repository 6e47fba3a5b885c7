"""Timed words are one computation: the same clip gives the same words and times at every door, whether
the door decodes with timestamp tokens or not: the Python API (with and without), the command line (its
lines, --json, word subtitles), /v1's verbose_json through the official client, and the page's Compare
and Transcribe word views. On the real whisper-base with its self-draft; the first word starts and ends
where faster-whisper puts it (0.00-0.52 s on whisper-base float32), not at 0.00-0.00."""

from __future__ import annotations

import json
import re
from pathlib import Path

import openai
import pytest
import srt

from specdec import cli
from specdec.app import compare
from specdec.app import store as stores

JFK = Path(__file__).parent.parent / "assets" / "en-jfk.flac"
LABEL = "base+self"
FASTER_WHISPER_FIRST = (0.00, 0.52)  # " And" on whisper-base float32, word_timestamps=True
CLI_LINE = re.compile(r"^  \[\s*([\d.]+) ->\s*([\d.]+)\] (.+)$")

pytestmark = pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client's mark on it


@pytest.fixture(scope="module")
def served(real_models, serve_app):
    store = stores.ModelStore({LABEL: ("base", "self")}, device="cpu", warm_up=False)
    with serve_app(store) as url:
        yield store, url


def triples(words) -> list[tuple[str, float, float]]:
    return [(word.text.strip(), word.start, word.end) for word in words]


def from_dicts(words: list[dict]) -> list[tuple[str, float, float]]:
    return [(word["text"].strip(), word["start"], word["end"]) for word in words]


def test_every_door_gives_the_same_timed_words(served, tmp_path, monkeypatch, capsys):
    store, url = served
    whisper = store.whisper(LABEL)
    doors = {}
    for timestamps in (False, True):
        found = whisper.transcribe(str(JFK), word_timestamps=True, timestamps=timestamps, return_stats=True)
        doors[f"api, timestamps={timestamps}"] = triples(found[0].words)

    monkeypatch.setattr(cli, "SpeculativeWhisper", lambda **_: whisper, raising=False)
    subtitles = ["--word-subtitles", "--output-format", "srt", "--output-dir", str(tmp_path)]
    assert cli.main(["transcribe", str(JFK), "--word-timestamps", *subtitles]) == 0  # its lines and a file
    lines = [CLI_LINE.match(line) for line in capsys.readouterr().out.splitlines()]
    doors["cli lines"] = [(m[3], float(m[1]), float(m[2])) for m in lines if m]
    cues = srt.parse((tmp_path / "en-jfk.srt").read_text(encoding="utf-8"))
    doors["cli srt"] = [(c.content, c.start.total_seconds(), c.end.total_seconds()) for c in cues]
    assert cli.main(["transcribe", str(JFK), "--word-timestamps", "--json"]) == 0
    doors["cli --json"] = from_dicts(json.loads(capsys.readouterr().out)["speculative"]["words"])

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    with JFK.open("rb") as audio:
        answer = client.audio.transcriptions.create(
            model=LABEL, file=audio, response_format="verbose_json", timestamp_granularities=["word"]
        )
    doors["/v1 verbose_json"] = [(word.word, word.start, word.end) for word in answer.words]

    request = compare.CompareRequest(audio=str(JFK), pair=LABEL, word_timestamps=True, detect_no_speech=False)
    view = compare.compare_clip(store, request)
    doors["page, Compare"] = triples(view.comparison.speculative.words)
    _, _, stats = compare.transcribe_clip(store, request)
    doors["page, Transcribe"] = from_dicts(stats["words"])

    reference = doors["api, timestamps=False"]
    assert len(reference) == 22 and reference[0][0] == "And"
    assert {door: words for door, words in doors.items() if words != reference} == {}
    first = reference[0][1:]
    assert all(abs(a - b) <= 0.1 for a, b in zip(first, FASTER_WHISPER_FIRST, strict=True)), first
