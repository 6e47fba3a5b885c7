"""The end-to-end benchmark's report: each configuration timed on each clip in every round, speculative
output checked against the target alone's, the summary per draft, the JSON and the HTML beside it; clips
and drafts that cannot be used end it with a message.

Runs on the demo checkpoints (seconds): the target and the draft given by folder, a clip of noise written
here. Timings are never asserted: they are benchmark figures.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile

from benchmarks.__main__ import main
from benchmarks.e2e import (
    TARGET_ALONE,
    Config,
    E2eBenchOptions,
    clips,
    free_decode_bound,
    request_ceiling,
    summary,
)
from specdec.audio import SAMPLE_RATE


def test_default_clips_are_the_assets_and_the_long_one():
    found = {clip.name: clip for clip in clips(E2eBenchOptions())}
    assert {"en-jfk", "de-bahnhof", "fr-marche", "es-biblioteca", "en-six-parts"} <= set(found)
    assert [name for name, clip in found.items() if clip.long] == ["en-six-parts"]
    assert [clip.name for clip in clips(E2eBenchOptions(clips="en-jfk,fr-marche.wav"))] == [
        "en-jfk",
        "fr-marche",
    ]
    with pytest.raises(SystemExit, match="no audio file no-such-clip"):
        clips(E2eBenchOptions(clips="no-such-clip"))


def test_a_folder_stands_for_the_audio_files_under_it(tmp_path):
    for name in ("meeting/b.wav", "meeting/a.wav", "short/c.wav"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        soundfile.write(tmp_path / name, np.zeros(SAMPLE_RATE, dtype=np.float32), SAMPLE_RATE)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "sdist.tar.gz").write_bytes(b"not audio")
    found = clips(E2eBenchOptions(clips=f"en-jfk,{tmp_path}"))
    assert [clip.name for clip in found] == ["en-jfk", "meeting/a", "meeting/b", "short/c"]
    extra = [clip.name for clip in clips(E2eBenchOptions(extra=str(tmp_path / "meeting")))]
    assert extra[-2:] == ["meeting/a", "meeting/b"] and "en-six-parts" in extra


def test_a_requests_ceiling_speeds_up_only_its_decode():
    # 1 s alone, 0.6 s of it decoding: at a decode ceiling of 3x, 0.4 + 0.2 s; at any ceiling, above 0.4 s
    alone = {"median_seconds": 1.0, "decode_seconds": 0.6}
    assert request_ceiling(alone, 3.0) == pytest.approx(1 / 0.6)
    assert request_ceiling(alone, 1.0) == pytest.approx(1.0)
    assert request_ceiling(alone, 1e9) < 1 / 0.4


CONFIGS = [Config(TARGET_ALONE), Config("draft d", "d")]


def _row(clip: str, configuration: str, language: str, long: bool, seconds: float, drafted: int) -> dict:
    """A made-up row of the report: a request of `seconds`, half of it decoding; 10 target passes alone,
    4 with a draft that drafted `drafted` tokens."""
    alone = configuration == TARGET_ALONE
    return {
        "clip": clip, "configuration": configuration, "draft": None if alone else "d",
        "clip_language": language, "long_form": long, "ratio": 1.0, "ratio_own_type": 1.0,
        "median_seconds": seconds,
        "decode_seconds": seconds / 2, "draft_seconds": 0.0 if alone else 0.01 * drafted,
        "verify_seconds": 0.1 if alone else 0.05, "target_passes": 10 if alone or not drafted else 4,
        "drafted": 0 if alone else drafted, "accepted": 0 if alone else drafted // 2,
    }  # fmt: skip


def test_the_ceilings_take_short_english_and_long_clips_and_count_an_undrafted_one_as_the_target_alone():
    clips_ = [("en-a", "en", False, 1.0, 8), ("en-b", "en", False, 1.0, 0), ("de-a", "de", False, 2.0, 6)]
    clips_ += [("long", "en", True, 4.0, 30)]
    rows = [_row(c, TARGET_ALONE, lang, long, s, 0) for c, lang, long, s, _ in clips_]
    rows += [_row(c, "draft d", lang, long, s, n) for c, lang, long, s, n in clips_]
    found = summary(rows, CONFIGS)["d"]
    alone = {row["clip"]: row for row in rows if row["configuration"] == TARGET_ALONE}
    short, long = (found["drafting_costs"][kind]["decode_ceiling"] for kind in ("short", "long_form"))
    # short English: en-a at the short clips' ceiling (costs pooled with de-a), en-b undrafted at 1.0
    assert found["ceiling_ratio"]["short_english"] == pytest.approx(
        (request_ceiling(alone["en-a"], short) + 1) / 2
    )
    assert found["ceiling_ratio"]["long_form"] == pytest.approx(request_ceiling(alone["long"], long))
    # a draft that ran on no English clip and no long one: the target alone's 1.0 there, no long-form bound
    german_only = [row for row in rows if row["clip"] != "long"]
    for row in german_only:
        if row["draft"] and row["clip_language"] == "en":
            row.update(drafted=0, accepted=0, target_passes=10)
    assert summary(german_only, CONFIGS)["d"]["ceiling_ratio"] == {"short_english": 1.0, "long_form": None}


def test_the_bound_of_a_free_decode_is_the_target_alones_encoder_share():
    """The median over the target alone's short clips heard as English, and apart from it over the long-form
    ones; another language's clips and the drafts' rows do not count."""
    shares = {"en-a": 0.5, "en-b": 0.75, "en-c": 0.8, "de-a": 0.9}  # of each request alone, its decode
    rows = []
    for clip, share in shares.items():
        language = clip[:2]
        alone = _row(clip, TARGET_ALONE, language, False, 1.0, 0) | {"decode_seconds": share}
        rows += [alone, _row(clip, "draft d", language, False, 0.5, 4) | {"decode_seconds": 0.45}]
    # 1 / (1 - share): 2x, 4x, 5x for English; German's 10x and the drafts' rows left out
    assert free_decode_bound(rows) == {"short_english": pytest.approx(4.0), "long_form": None}
    rows += [_row("long", TARGET_ALONE, "en", True, 4.0, 0) | {"decode_seconds": 3.0}]
    assert free_decode_bound(rows) == {"short_english": pytest.approx(4.0), "long_form": pytest.approx(4.0)}


@pytest.mark.slow  # a benchmark smoke test (two models loaded, warmed up, two rounds): CI runs it
def test_report_on_demo_models(demo_models, tmp_path):
    clip = tmp_path / "noise.wav"
    noise = 0.1 * np.random.default_rng(3).standard_normal(2 * SAMPLE_RATE)
    soundfile.write(clip, noise.astype(np.float32), SAMPLE_RATE)
    draft, out = str(demo_models["draft-shared"]), tmp_path / "report" / "e2e.json"
    code = main(
        [
            "e2e", "--target", str(demo_models["target"]), "--drafts", draft, "--clips", str(clip),
            "--repeats", "2", "--no-faster-whisper", "--out", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    alone, speculative = report["rows"]
    assert (alone["configuration"], speculative["configuration"]) == ("target alone", f"draft {draft}")
    assert len(alone["all_seconds"]) == len(speculative["all_seconds"]) == 2
    assert speculative["identical"] is True and speculative["drafted"] > 0
    assert speculative["target_passes"] < alone["target_passes"]
    assert report["summary"][draft]["long_form_ratio"] is None  # no long clip given
    costs = report["summary"][draft]["drafting_costs"]  # figures, never asserted: only that they are there
    assert list(costs) == ["short"] and {"draft", "verify", "decode_ceiling"} <= set(costs["short"])
    assert report["summary"][draft]["ceiling_ratio"]["long_form"] is None
    bound = report[
        "free_decode_bound"
    ]  # the noise may be heard in any language: only the long-form one is sure
    assert set(bound) == {"short_english", "long_form"} and bound["long_form"] is None
    assert report["identical"] and out.with_suffix(".html").exists()


@pytest.mark.slow
def test_each_compute_type_is_checked_against_its_own_target_alone(demo_models, tmp_path):
    clip, out = tmp_path / "noise.wav", tmp_path / "e2e.json"
    soundfile.write(
        clip, (0.1 * np.random.default_rng(4).standard_normal(SAMPLE_RATE)).astype(np.float32), SAMPLE_RATE
    )
    draft = str(demo_models["draft-shared"])
    code = main(
        [
            "e2e", "--target", str(demo_models["target"]), "--drafts", draft, "--clips", str(clip),
            "--repeats", "1", "--no-faster-whisper", "--compute-types", "default,int8", "--out", str(out),
        ]
    )  # fmt: skip
    report = json.loads(out.read_text())
    rows = {row["configuration"]: row for row in report["rows"]}
    assert code == 0 and list(rows) == [
        "target alone",
        f"draft {draft}",
        "target alone int8",
        f"draft {draft} int8",
    ]
    assert [row["compute_type"] for row in rows.values()] == ["default", "default", "int8", "int8"]
    assert all(row["identical"] and row["same_as_generate"] for row in rows.values())
    assert set(report["summary"]) == {draft, f"{draft} int8"}


def test_a_draft_that_cannot_be_loaded_ends_with_its_message(demo_models, tmp_path):
    target = str(demo_models["target"])
    with pytest.raises(SystemExit, match="the draft 'self' cannot draft .* no self-draft ships"):
        main(["e2e", "--target", target, "--drafts", "self", "--clips", "en-jfk", "--out", str(tmp_path)])
