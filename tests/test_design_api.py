"""The original design's API, a contract: its snippet run verbatim on the bundled pair, the names it reads
(`max_tokens`, `result['text']`, `result['stats'][...]`, `SpeculativeConfig`), and its lossy acceptance
threshold: opt-in, said wherever its output shows, and only lossy where the target disagrees."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from specdec import SpeculativeConfig, SpeculativeWhisper, cli
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.trace import RELAXED

ROOT = Path(__file__).parent.parent
# the design's "API Usage", exactly as it is written there
SNIPPET = """
from specdec import SpeculativeWhisper, SpeculativeConfig
sw = SpeculativeWhisper()
outputs = sw.transcribe(["assets/en-jfk.flac", "assets/en-weather.wav"], max_tokens=200, batch_size=2)
results = sw.transcribe(["assets/en-jfk.flac"], return_stats=True)
print(results[0]['text'], results[0]['stats']['overall_acceptance_rate'], results[0]['stats']['avg_tokens_per_iteration'])
config = SpeculativeConfig(gamma=4, acceptance_threshold=0.8, temperature=0.0, use_adaptive_gamma=True)
SpeculativeWhisper(config=config)
"""  # noqa: E501
JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."  # noqa: E501
WEATHER = "The weather today is cool and bright"
CLIP = (0.1 * np.random.default_rng(3).standard_normal(3 * 16_000)).astype(np.float32)  # random models: noise


@pytest.mark.slow
def test_the_designs_snippet_runs_verbatim(monkeypatch):
    """On the bundled pair (whisper-base and its self-draft), from the checkout's root, as the design runs."""
    monkeypatch.chdir(ROOT)
    scope: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(SNIPPET, scope)  # noqa: S102 - the snippet is the test
    assert scope["outputs"][0] == JFK and scope["outputs"][1].startswith(WEATHER)
    text, rate, per_pass = printed.getvalue().rsplit(" ", 2)
    assert text == JFK and 0.5 < float(rate) <= 1 and float(per_pass) > 2
    stats = scope["results"][0]["stats"]
    assert stats["overall_acceptance_rate"] == stats["acceptance_rate"] and stats["lossless"] is True
    assert scope["config"].options().num_draft_tokens == 4


def test_transcription_answers_by_the_designs_keys(separate_pair):
    (result,) = separate_pair.transcribe([CLIP], sample_rate=16_000, return_stats=True, language="en")
    assert result["text"] == result.text
    assert result["stats"] == {**result.result.stats(), "compute_type": "float32"}  # trace + compute type
    assert dict(result)["token_ids"] == result.token_ids
    with pytest.raises(KeyError, match="'txt'"):
        result["txt"]


def test_max_tokens_is_max_new_tokens_and_unknown_names_are_named(separate_pair):
    (result,) = separate_pair.transcribe([CLIP], sample_rate=16_000, return_stats=True, max_tokens=3)
    assert len(result.result.tokens) <= 3
    with pytest.raises(TypeError, match="did you mean 'max_new_tokens'"):
        TranscribeOptions.of(None, max_new_token=3)
    with pytest.raises(TypeError, match="name the same option"):
        TranscribeOptions.of(None, max_tokens=3, max_new_tokens=4)


def test_speculative_config_is_the_options_it_names():
    config = SpeculativeConfig(gamma=4, acceptance_threshold=0.8, temperature=0.0, use_adaptive_gamma=False)
    assert config.options() == DecodeOptions(num_draft_tokens=4, acceptance_threshold=0.8, adaptive=False)
    assert SpeculativeConfig().options() == DecodeOptions()  # the defaults are exact, greedy, adaptive k
    with pytest.raises(ValueError, match="acceptance_threshold must be in"):
        SpeculativeConfig(acceptance_threshold=1.5)
    with pytest.raises(ValueError, match="sampling keeps the target's distribution"):
        SpeculativeConfig(acceptance_threshold=0.5, temperature=0.7)


def test_a_config_is_every_calls_default(separate_pair):
    lossy = SpeculativeWhisper.from_pair(separate_pair.pair, SpeculativeConfig(acceptance_threshold=0.2))
    (result,) = lossy.transcribe([CLIP], sample_rate=16_000, return_stats=True, language="en")
    assert not result.lossless and result["stats"]["acceptance_threshold"] == 0.2
    (exact,) = lossy.transcribe([CLIP], sample_rate=16_000, return_stats=True, acceptance_threshold=None)
    assert exact.lossless


def test_lossy_output_is_the_targets_up_to_its_first_relaxed_token(separate_pair):
    """A low threshold keeps draft tokens the target would not choose: labelled as such, and until the first
    of them, every token is the target alone's (a clip whose first token is relaxed at 0.3, and one whose
    first relaxed token at 0.5 comes after tokens of the target's own)."""
    options = TranscribeOptions(language="en", max_new_tokens=16, num_draft_tokens=6, adaptive=False)
    firsts = []
    for seed, threshold in ((0, 0.3), (2, 0.5)):
        clip = (0.1 * np.random.default_rng(seed).standard_normal(3 * 16_000)).astype(np.float32)
        (exact,) = separate_pair.transcribe_waveforms([clip], options)
        lossy_options = TranscribeOptions.of(options, acceptance_threshold=threshold)
        (lossy,) = separate_pair.transcribe_waveforms([clip], lossy_options)
        assert exact.result.lossless and not lossy.result.lossless
        kept = [token for token in lossy.result.tokens if token.kept]
        relaxed = [i for i, token in enumerate(kept) if token.label == RELAXED]
        assert relaxed, "no relaxed token: the clip exercised nothing lossy"
        assert lossy.result.num_relaxed == len(relaxed)
        first = relaxed[0]
        assert lossy.token_ids[:first] == exact.token_ids[:first]
        assert lossy.token_ids[first] != exact.token_ids[first]
        firsts.append(first)
    assert max(firsts) > 0  # a prefix of the target's own tokens was compared


def test_threshold_one_keeps_only_the_targets_choices(separate_pair):
    options = TranscribeOptions(language="en", max_new_tokens=24)
    (exact,) = separate_pair.transcribe_waveforms([CLIP], options)
    (full,) = separate_pair.transcribe_waveforms(
        [CLIP], TranscribeOptions.of(options, acceptance_threshold=1.0)
    )
    assert full.token_ids == exact.token_ids and full.result.num_relaxed == 0


def test_the_cli_says_a_lossy_output_is_not_the_targets(separate_pair, tmp_path, monkeypatch, capsys):
    import soundfile as sf

    clip = tmp_path / "noise.wav"
    sf.write(clip, (0.1 * np.random.default_rng(1).standard_normal(3 * 16_000)).astype(np.float32), 16_000)
    monkeypatch.setattr(cli, "SpeculativeWhisper", lambda **models: separate_pair)  # loaded once per session
    common = ["transcribe", str(clip), "--language", "en", "--max-tokens", "12", "--compare"]
    assert cli.main([*common, "--acceptance-threshold", "0.3", "--no-adaptive"]) == 0
    report = capsys.readouterr().out
    assert "LOSSY (acceptance threshold 0.3): not the target's own output" in report
    assert cli.main([*common, "--acceptance-threshold", "0.3", "--no-adaptive", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["speculative"]["lossless"] is False and "token_edits" in record["lossy_cost"]
    assert cli.main([*common, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["speculative"]["lossless"] is True and "lossy_cost" not in record


def test_the_compare_view_says_a_lossy_run_is_not_the_targets_and_what_it_cost(separate_pair):
    from specdec.app import compare, views

    options = TranscribeOptions(
        language="en", max_new_tokens=16, num_draft_tokens=6, adaptive=False, acceptance_threshold=0.3
    )
    for seed in range(6):  # a clip where the threshold kept a token the target would not have chosen
        clip = (0.1 * np.random.default_rng(seed).standard_normal(3 * 16_000)).astype(np.float32)
        comparison = compare.compare(separate_pair, clip, options)
        if comparison.speculative.result.num_relaxed:
            break
    assert comparison.baseline.result.lossless  # the target alone is exact whatever its options say
    assert not comparison.identical and comparison.lossy_cost.token_edits > 0
    badge = views.verdict_html(comparison)
    assert "LOSSY (acceptance threshold 0.3, as asked): not the target's own output" in badge
    assert "This is a bug" not in badge and "Saved:" in badge
    rows = {row[0]: row[2] for row in views.metrics_rows(comparison)}
    assert rows["LOSSY: tokens kept the target would not have chosen"] == str(
        comparison.speculative.result.num_relaxed
    )
    exact = compare.compare(separate_pair, clip, TranscribeOptions.of(options, acceptance_threshold=None))
    assert exact.lossy_cost is None and not any(
        row[0].startswith("LOSSY") for row in views.metrics_rows(exact)
    )
