"""Batched speculative decoding: every row's output is its clip's output decoded alone, for every draft kind.

The batches mix clips of different lengths and spoken languages (assets/*.wav in English, German and
Spanish, and test_lossless' noise and bursts); each clip decoded alone (a batch of one) is itself checked
against transformers' generate() in test_lossless.py. Beyond the output, the tests check what batching is
for: rows accept different numbers of draft tokens in the same batched step, and a row that finishes
leaves the batch (the target runs exactly as many row-passes as the rows' own steps add up to).
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import torch
from test_lossless import CLIPS

from specdec import cli
from specdec.api import BatchAudioError, SpeculativeWhisper
from specdec.audio import AudioError, load_audio
from specdec.engine import windows
from specdec.engine.cache import CachedDecoder
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.trace import ACCEPTED
from specdec.whisper.features import encode, features
from specdec.whisper.tokens import language_token_id

ASSETS = Path(__file__).parent.parent / "assets"
MAX_NEW_TOKENS = 24
SPOKEN = ("en-weather", "de-bahnhof", "es-biblioteca")


def batch_clips() -> dict[str, np.ndarray]:
    """Five clips from 2 s to 9 s: speech in three languages, noise and bursts."""
    clips = {name: load_audio(ASSETS / f"{name}.wav") for name in SPOKEN}
    return {**clips, "noise-2s": CLIPS["noise-2s"], "bursts-9s": CLIPS["bursts-9s"]}


BATCH = batch_clips()


def decode_alone(
    whisper: SpeculativeWhisper, options: DecodeOptions, speculative: bool = True, clips: dict = BATCH
) -> list:
    return [
        whisper.transcribe_waveforms([waveform], TranscribeOptions.of(options, speculative=speculative))[0]
        for waveform in clips.values()
    ]


def decode_together(
    whisper: SpeculativeWhisper, options: DecodeOptions, speculative: bool = True, clips: dict = BATCH
) -> list:
    run = TranscribeOptions.of(options, speculative=speculative, batch_size=len(clips))
    return whisper.transcribe_waveforms(list(clips.values()), run, list(clips))


def assert_same_outputs(batched: list, alone: list) -> None:
    for together, single in zip(batched, alone, strict=True):
        assert together.token_ids == single.token_ids, f"{together.audio}: batched output differs from alone"
        assert together.result.prompt_ids == single.result.prompt_ids and together.language == single.language


def test_a_batch_of_speech_and_noise_in_five_languages_equals_each_clip_alone(separate_pair, monkeypatch):
    """Every option and draft kind at batch sizes 1 and 3 is in test_lossless.py; here five clips of 2-9 s,
    speech and noise, in one batch, each row with a self-consistent trace. The random target detects one
    language for every clip, so the rows get en, de, es, ... as if detected; each must decode as that clip
    alone with that language forced (the draft's prompt too, in its ids)."""
    whisper = separate_pair
    config = whisper.pair.target.model.generation_config
    languages = ["en", "de", "es", "fr", "ja"]
    forced = [language_token_id(config, language) for language in languages]

    def languages_of_rows(config, logits):  # what the detection says (a forced language is never detected)
        return forced[: logits.shape[0]]

    monkeypatch.setattr(windows, "detected_languages", languages_of_rows)
    options = DecodeOptions(max_new_tokens=MAX_NEW_TOKENS)
    batched = decode_together(whisper, options)
    for language, together, waveform in zip(languages, batched, BATCH.values(), strict=True):
        alone = whisper.transcribe_waveforms([waveform], dataclasses.replace(options, language=language))[0]
        assert together.language == language and together.token_ids == alone.token_ids
    drafted = sum(t.result.num_drafted for t in batched)
    assert 0 < sum(t.result.num_accepted for t in batched) < drafted, "accept and reject paths"
    for transcription in batched:  # each row has a normal, self-consistent trace
        result = transcription.result
        assert tuple(token.token_id for token in result.tokens if token.kept) == result.token_ids
        assert [step.index for step in result.steps] == list(range(len(result.steps)))
        assert sum(token.label == ACCEPTED for token in result.tokens) == result.num_accepted


def test_rows_accept_their_own_number_and_finished_rows_leave(separate_pair, monkeypatch):
    target_model = separate_pair.pair.target.model
    target_batch_sizes = []
    feed = CachedDecoder.feed

    def recording_feed(decoder, token_ids):  # a spy: records the target's batch sizes, then feeds
        if decoder.model is target_model:
            target_batch_sizes.append(len(token_ids))
        return feed(decoder, token_ids)

    monkeypatch.setattr(CachedDecoder, "feed", recording_feed)
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS)
    results = [t.result for t in decode_together(separate_pair, options)]
    # rows of one batched step share its pass; in some pass rows kept different numbers of drafts
    accepted_by_step = defaultdict(list)
    for result in results:
        for step in result.steps:
            accepted_by_step[step.pass_index].append(step.n_accepted)
    assert any(len(set(n_accepted)) > 1 for n_accepted in accepted_by_step.values())
    assert max(len(n) for n in accepted_by_step.values()) == len(BATCH)
    # a clip whose window is done rejoins with its next window at the next pass: the target runs at least
    # as many passes as the longest clip needs and at most one round per window after another; each row
    # is in exactly its own passes (finished rows have left)
    steps_by_window = defaultdict(list)
    for result in results:
        for window in {step.window for step in result.steps}:
            steps_by_window[window].append(sum(step.window == window for step in result.steps))
    assert len(set(steps_by_window[0])) > 1, "the rows should finish at different steps"
    longest_clip = max(len(result.steps) for result in results)
    assert longest_clip <= len(target_batch_sizes) <= sum(max(steps) for steps in steps_by_window.values())
    rows_by_pass = Counter(step.pass_index for result in results for step in result.steps)
    assert [rows_by_pass[index] for index in sorted(rows_by_pass)] == target_batch_sizes
    assert sum(target_batch_sizes) == sum(len(result.steps) for result in results)
    assert target_batch_sizes[0] == len(BATCH) and min(target_batch_sizes) == 1


def test_seeded_sampling_in_a_batch_is_reproducible(separate_pair):
    options = DecodeOptions(language="en", temperature=0.8, seed=3, max_new_tokens=20)
    first = decode_together(separate_pair, options, clips=CLIPS)
    again = decode_together(separate_pair, options, clips=CLIPS)
    assert [t.token_ids for t in first] == [t.token_ids for t in again]
    assert all(token.target_prob > 0 for t in first for token in t.result.tokens)


def test_unreadable_file_in_a_batch(separate_pair, tmp_path):
    bad = tmp_path / "not-audio.wav"
    bad.write_text("this is not audio")
    files = [ASSETS / "en-weather.wav", bad, ASSETS / "de-bahnhof.wav"]
    texts = separate_pair.transcribe(files, batch_size=3, language="en", max_new_tokens=20, errors="return")
    assert isinstance(texts[1], AudioError) and "not-audio.wav" in str(texts[1])
    alone = [separate_pair.transcribe(path, language="en", max_new_tokens=20)[0] for path in files[::2]]
    assert [texts[0], texts[2]] == alone
    with pytest.raises(BatchAudioError, match="1 of 3 clips unreadable") as raised:  # by default
        separate_pair.transcribe(files, batch_size=2, language="en", max_new_tokens=20)
    assert raised.value.results[::2] == alone and isinstance(raised.value.results[1], AudioError)
    with pytest.raises(AudioError, match="not-audio.wav"):
        separate_pair.transcribe(bad)


def test_batched_cache_matches_one_row_caches(separate_pair):
    """Ragged feeds (0 to 5 tokens a row) and per-row rollbacks give each row its own cache's logits."""
    model = separate_pair.pair.target.model
    hidden = [encode(model, features(separate_pair.pair.target, w))[0] for w in list(BATCH.values())[:3]]
    alone = [CachedDecoder(model, h) for h in hidden]
    together = CachedDecoder(model, torch.cat(hidden))
    generator = torch.Generator().manual_seed(0)
    prompt = separate_pair.pair.target.model.generation_config.decoder_start_token_id
    feeds = [[[prompt]] * 3] + [
        [
            torch.randint(
                0, 50_000, (int(torch.randint(0, 6, (1,), generator=generator)),), generator=generator
            ).tolist()
            for _ in alone
        ]
        for _ in range(12)
    ]
    for step, rows in enumerate(feeds):
        if step == 8:  # drop the middle row
            together.keep([0, 2])
            alone = [alone[0], alone[2]]
        rows = rows if len(alone) == 3 else [rows[0], rows[2]]
        for decoder, logits, tokens in zip(alone, together.feed(rows), rows, strict=True):
            if tokens:
                torch.testing.assert_close(logits, decoder.feed([tokens])[0], rtol=1e-4, atol=1e-4)
        lengths = [
            max(1, length - int(torch.randint(0, 3, (1,), generator=generator)))
            for length in together.lengths
        ]
        together.rollback(lengths)
        for decoder, length in zip(alone, lengths, strict=True):
            decoder.rollback([length])


def test_cli_batch_with_a_bad_file(demo_models, separate_pair, tmp_path, capsys):
    bad = tmp_path / "not-audio.wav"
    bad.write_text("this is not audio")
    files = [str(ASSETS / "es-biblioteca.wav"), str(bad), str(ASSETS / "en-weather.wav")]
    exit_code = cli.main(
        [
            "transcribe", *files, "--batch-size", "3", "--compare", "--json", "--device", "cpu",
            "--target", str(demo_models["target"]), "--draft", str(demo_models["draft-separate"]),
            "--language", "en", "--max-new-tokens", "30",
        ]
    )  # fmt: skip
    output = capsys.readouterr()
    assert exit_code == cli.EXIT_BAD_INPUT
    assert [line for line in output.err.splitlines() if "not-audio.wav" in line][0].startswith(
        "specdec: error:"
    )
    records = [json.loads(line) for line in output.out.splitlines()]
    assert [record["audio"] for record in records] == files[::2]
    for record, path in zip(records, files[::2], strict=True):
        alone = separate_pair.transcribe(path, language="en", max_new_tokens=30, return_stats=True)[0]
        assert record["identical"] and record["speculative"]["token_ids"] == list(alone.token_ids)
