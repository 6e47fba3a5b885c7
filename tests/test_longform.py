"""Long audio (over 30 s): sequential mode is generate()'s own long-form output, token for token; chunked
mode merges its batched chunks as transformers' ASR pipeline does; features are made window by window.

The long inputs are the assets clips (speech in four languages) played in a row, 40-70 s.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from test_lossless import no_speech_rule
from transformers.models.whisper.tokenization_whisper import _find_longest_common_sequence
from transformers.pipelines.automatic_speech_recognition import chunk_iter

from specdec import cli
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, AudioError, load_audio
from specdec.engine.windows import decode_clips
from specdec.longform import chunked as chunking
from specdec.longform.sequential import decode_sequential
from specdec.options import DecodeOptions
from specdec.whisper import features as features_module
from specdec.whisper.features import pair_features, window_features
from specdec.whisper.tokens import WINDOW_FRAMES, timestamp_begin

ASSETS = Path(__file__).parent.parent / "assets"


def long_waveform(repeats: int = 2, tail_seconds: float = 0.0) -> np.ndarray:
    """The five assets clips, `repeats` times in a row (26 s each time), then tail_seconds of the first."""
    clips = [load_audio(path) for path in sorted(ASSETS.glob("*.wav"))]
    tail = clips[0][: round(tail_seconds * SAMPLE_RATE)]
    return np.concatenate(clips * repeats + [tail])


LONG = long_waveform()  # 52.7 s: three 30 s chunks
SEQUENTIAL = np.concatenate([long_waveform(repeats=1), LONG[: 8 * SAMPLE_RATE]])  # 34.3 s: two windows


def whole_features(whisper: SpeculativeWhisper, waveform: np.ndarray, draft: bool = False) -> torch.Tensor:
    """What generate()'s long-form docs feed it: the extractor on the whole file, unpadded, untruncated."""
    model = whisper.pair.draft if draft else whisper.pair.target
    return model.processor.feature_extractor(
        waveform, sampling_rate=SAMPLE_RATE, truncation=False, padding="longest", return_tensors="pt"
    ).input_features


def generate_long(whisper: SpeculativeWhisper, waveform: np.ndarray, options: DecodeOptions) -> list[int]:
    """transformers' long-form generate(): greedy, no temperature fallback, its own defaults otherwise
    (the no-speech rule's thresholds as the options give them)."""
    target = whisper.pair.target
    inputs = target.processor.feature_extractor(
        waveform,
        sampling_rate=SAMPLE_RATE,
        truncation=False,
        padding="longest",
        return_attention_mask=True,
        return_tensors="pt",
    )
    assert inputs.input_features.shape[-1] > WINDOW_FRAMES  # generate() takes its long-form path
    prompt_ids = None
    if options.prompt_ids:  # as WhisperProcessor.get_prompt_ids gives it
        prompt_ids = torch.tensor(
            [target.model.generation_config.prev_sot_token_id, *options.prompt_ids],
            device=target.model.device,
        )
    with torch.inference_mode():
        sequences = target.model.generate(
            inputs.input_features.to(target.model.device, target.model.dtype),
            attention_mask=inputs.attention_mask.to(target.model.device),
            language=options.language,
            task=options.task,
            return_timestamps=True,
            compression_ratio_threshold=None,
            max_new_tokens=options.max_new_tokens,
            prompt_ids=prompt_ids,
            **({"logprob_threshold": None} | no_speech_rule(options)),
        )
    sequence = sequences[0].tolist()
    while sequence and sequence[-1] == target.model.generation_config.pad_token_id:
        sequence.pop()
    return sequence


# --- features, window by window ---


@pytest.mark.parametrize("draft", [False, True], ids=["target-128-mel", "draft-80-mel"])
def test_windowed_features_are_the_whole_file_features(separate_pair, draft):
    waveform = long_waveform(tail_seconds=1.234)
    model = separate_pair.pair.draft if draft else separate_pair.pair.target
    windows = features_module.model_features(model, waveform)
    whole = whole_features(separate_pair, waveform, draft)
    assert windows.shape == tuple(whole.shape)
    for seek in (0, 1234, WINDOW_FRAMES, whole.shape[-1] - 700, whole.shape[-1] - 1):
        assert torch.equal(windows.window(seek).cpu(), window_features(whole, seek)), f"seek {seek}"


# --- sequential mode == generate() ---


@pytest.mark.parametrize(
    ("language", "speculative"),
    [("en", True), (None, True), (None, False)],  # de, speculative: for each draft kind below
    ids=["en-previous-text-speculative", "detected-language-speculative", "detected-language-target-only"],
)
def test_sequential_equals_generate(separate_pair, speculative, language):
    tokenizer = separate_pair.pair.target.processor.tokenizer
    # a previous text conditions every window (generate()'s prompt_ids)
    previous_text = tuple(tokenizer.encode(" Weather and travel.", add_special_tokens=False))
    options = DecodeOptions(language=language, prompt_ids=previous_text if language else ())
    result = decode_sequential(separate_pair.pair, SEQUENTIAL, options, speculative)
    assert list(result.token_ids) == generate_long(separate_pair, SEQUENTIAL, options)
    starts = [window.start_seconds for window in result.windows]
    assert len(starts) >= 2 and starts[0] == 0.0 and starts == sorted(starts)
    if speculative:
        assert 0 < result.acceptance_rate < 1


def test_sequential_equals_generate_for_each_draft_kind(pair_of_each_kind):
    kind, whisper = pair_of_each_kind
    options = DecodeOptions(language="de")
    result = decode_sequential(whisper.pair, SEQUENTIAL, options)
    assert list(result.token_ids) == generate_long(whisper, SEQUENTIAL, options), kind
    assert result.num_accepted > 0
    starts = [window.start_seconds for window in result.windows]  # seeks to a timestamp inside a window
    assert len(starts) >= 2 and any(start % 30 for start in starts), starts
    SEQUENTIAL_GERMAN[kind] = result.token_ids


def test_sequential_skips_a_window_judged_no_speech_as_generate(separate_pair):
    """A threshold planted just under the first window's no-speech probability: generate() drops that
    window and seeks on 30 s (a previous text before <|startoftranscript|>); so does decode_sequential,
    and keeps the next window, less likely silent."""
    tokenizer = separate_pair.pair.target.processor.tokenizer
    previous_text = tuple(tokenizer.encode(" Weather and travel.", add_special_tokens=False))
    options = DecodeOptions(language="en", prompt_ids=previous_text, max_new_tokens=24)
    measuring = dataclasses.replace(options, no_speech_threshold=1.0, logprob_threshold=0.0, max_new_tokens=1)
    first = decode_sequential(separate_pair.pair, SEQUENTIAL, measuring).windows[0].no_speech_prob
    options = dataclasses.replace(options, no_speech_threshold=first * 0.99, logprob_threshold=0.0)
    result = decode_sequential(separate_pair.pair, SEQUENTIAL, options)
    assert list(result.token_ids) == generate_long(separate_pair, SEQUENTIAL, options)
    assert [window.no_speech for window in result.windows] == [True, False]
    assert result.windows[1].start_seconds == 30.0 and result.token_ids and not result.no_speech
    assert not any(token.kept for token in result.tokens if token.window == 0)


SEQUENTIAL_GERMAN: dict = {}  # decode_sequential of SEQUENTIAL in German, by draft kind (checked above)


def test_transcribe_a_long_file_reports_progress_and_reads_window_by_window(
    separate_pair, tmp_path, monkeypatch
):
    path = tmp_path / "long.flac"
    sf.write(path, SEQUENTIAL, SAMPLE_RATE)
    frames_per_call = []
    log_mel = features_module.WindowedFeatures.log_mel
    monkeypatch.setattr(
        features_module.WindowedFeatures,
        "log_mel",
        lambda self, start, stop: (
            frames_per_call.append(min(stop, self.num_frames) - start) or log_mel(self, start, stop)
        ),
    )
    extractor = type(separate_pair.pair.target.processor.feature_extractor)
    monkeypatch.setattr(extractor, "__call__", lambda *a, **k: pytest.fail("features of the whole file"))
    reports = []
    options = {"language": "de"}
    (transcription,) = separate_pair.transcribe(
        str(path),
        return_stats=True,
        progress=lambda done, message: reports.append((done, message)),
        **options,
    )
    kind = separate_pair.pair.kind
    if kind not in SEQUENTIAL_GERMAN:  # run alone or first
        expected = decode_sequential(separate_pair.pair, SEQUENTIAL, DecodeOptions(**options))
        SEQUENTIAL_GERMAN[kind] = expected.token_ids
    assert transcription.token_ids == SEQUENTIAL_GERMAN[kind]
    assert frames_per_call and max(frames_per_call) <= WINDOW_FRAMES  # never the whole file at once
    fractions = [done for done, _ in reports]
    assert len(reports) == len(transcription.result.windows) and fractions == sorted(fractions)
    assert fractions[-1] == 1.0 and all(done > 0 for done in fractions)


def test_longer_than_four_hours_is_one_clear_error(separate_pair):
    with pytest.raises(AudioError, match=r"^audio is 14401\.0 s long; the limit is 4 hours$"):
        separate_pair.transcribe((1, np.zeros(4 * 3600 + 1, dtype=np.float32)))


# --- chunked mode ---


def pipeline_strides(num_samples: int) -> list[tuple[int, int, int]]:
    """(chunk length, left stride, right stride) of each chunk the ASR pipeline cuts (chunk_length_s=30)."""
    chunk, stride = 30 * SAMPLE_RATE, 5 * SAMPLE_RATE
    extractor = type("Extractor", (), {"sampling_rate": SAMPLE_RATE, "__call__": lambda *a, **k: {}})()
    return [item["stride"] for item in chunk_iter(np.zeros(num_samples), extractor, chunk, stride, stride)]


@pytest.mark.parametrize("seconds", [30.5, 45.0, 52.67, 60.0, 100.01])
def test_chunks_are_the_pipelines(seconds):
    num_samples = round(seconds * SAMPLE_RATE)
    chunks = chunking.plan_chunks(num_samples)
    assert [(c.stop - c.start, c.stride_left, c.stride_right) for c in chunks] == pipeline_strides(
        num_samples
    )
    assert chunks[-1].stop == num_samples


def tagged(sequences: list[list[int]]) -> list[list[chunking.Tagged]]:
    return [[(token, (c, i)) for i, token in enumerate(ids)] for c, ids in enumerate(sequences)]


def test_longest_common_merge_is_transformers():
    rng = np.random.default_rng(0)
    for _ in range(200):
        text = rng.integers(0, 6, size=60).tolist()  # a small alphabet: many partial matches
        starts = sorted(rng.integers(0, 40, size=3).tolist())
        sequences = [text[start : start + int(rng.integers(5, 25))] for start in starts]
        sequences = [
            ids if rng.random() > 0.2 else rng.integers(0, 6, size=len(ids)).tolist() for ids in sequences
        ]
        merged = chunking.longest_common_merge(tagged(sequences))
        assert [token for token, _ in merged] == list(_find_longest_common_sequence(sequences))


def random_chunk_output(rng: np.random.Generator, begin: int) -> list[int]:
    """Text tokens from a small alphabet between increasing timestamp pairs, sometimes a single ending."""
    ids, at = [], 0
    while at < 1400 and rng.random() > 0.1:
        ids.append(begin + at)
        ids += rng.integers(100, 106, size=int(rng.integers(0, 8))).tolist()
        at += int(rng.integers(1, 300))
        ids.append(begin + min(at, 1500))
    return ids + (rng.integers(100, 106, size=3).tolist() if rng.random() < 0.3 else [])


def decode_asr(whisper: SpeculativeWhisper, ids: list[list[int]], chunks: list, timestamps: bool):
    """The ASR pipeline's merge (the tokenizer's _decode_asr) of the chunks' outputs, strides in seconds."""
    outputs = [
        {
            "tokens": torch.tensor([chunk_ids]),
            "stride": tuple(x / SAMPLE_RATE for x in (c.stop - c.start, c.stride_left, c.stride_right)),
        }
        for chunk_ids, c in zip(ids, chunks, strict=True)
    ]
    tokenizer = whisper.pair.target.processor.tokenizer
    return tokenizer._decode_asr(
        outputs, return_timestamps=timestamps, return_language=False, time_precision=0.02
    )


def assert_merged_like_the_pipeline(whisper: SpeculativeWhisper, ids: list[list[int]], chunks: list) -> None:
    tokenizer = whisper.pair.target.processor.tokenizer
    begin = timestamp_begin(whisper.pair.target.model.generation_config)
    timestamps = any(token >= begin for chunk_ids in ids for token in chunk_ids)
    text, optional = decode_asr(whisper, ids, chunks, timestamps)
    pieces = chunking.merge_chunks(ids, chunks, begin, set(tokenizer.all_special_ids))
    texts = [tokenizer.decode([token for token, _ in piece.tokens]) for piece in pieces]
    assert "".join(texts) == text
    if timestamps:
        assert [(p.start_seconds, p.end_seconds) for p in pieces] == [
            c["timestamp"] for c in optional["chunks"]
        ]
        assert texts == [c["text"] for c in optional["chunks"]]


def test_merge_is_the_pipelines_on_random_timestamped_outputs(separate_pair):
    rng = np.random.default_rng(1)
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    for _ in range(100):
        chunks = chunking.plan_chunks(int(rng.integers(31, 120)) * SAMPLE_RATE)
        assert_merged_like_the_pipeline(
            separate_pair, [random_chunk_output(rng, begin) for _ in chunks], chunks
        )


@pytest.mark.parametrize("timestamps", [True, False], ids=["timestamps", "text"])
def test_batched_chunks_equal_each_chunk_alone_and_merge_like_the_pipeline(separate_pair, timestamps):
    pair = separate_pair.pair
    options = DecodeOptions(timestamps=timestamps, max_new_tokens=30)
    chunks = chunking.plan_chunks(len(LONG))
    together = chunking.decode_chunks(pair, LONG, chunks, options)
    alone = [
        decode_clips(pair, [pair_features(pair, LONG[chunk.start : chunk.stop])], options)[0]
        for chunk in chunks
    ]
    assert len(chunks) == 3 and [r.token_ids for r in together] == [r.token_ids for r in alone]
    assert_merged_like_the_pipeline(separate_pair, [list(r.token_ids) for r in together], chunks)


def test_chunked_transcript_trace_and_file_relative_times(separate_pair):
    reports = []
    (transcription,) = separate_pair.transcribe(
        LONG, sample_rate=SAMPLE_RATE, long_form="chunked", language="de", timestamps=True, max_new_tokens=60,
        return_stats=True, progress=lambda done, message: reports.append(done),
    )  # fmt: skip
    result = transcription.result
    chunks = chunking.plan_chunks(len(LONG))
    assert sorted({window.chunk for window in result.windows}) == [0, 1, 2]
    for index, window in enumerate(result.windows):
        chunk_start, chunk_stop = chunks[window.chunk].start_seconds, chunks[window.chunk].stop / SAMPLE_RATE
        assert window.index == index and chunk_start <= window.start_seconds < chunk_stop
        assert window.start_seconds + window.seconds <= chunk_stop + 1e-9
    assert {record.window for record in result.tokens} <= set(range(len(result.windows)))
    assert [record.token_id for record in result.tokens if record.kept] == list(result.token_ids)
    assert [step.index for step in result.steps] == list(range(len(result.steps)))
    assert result.segments and result.token_ids == tuple(t for s in result.segments for t in s.token_ids)
    starts = [s.start_seconds for s in result.segments if s.start_seconds is not None]
    assert any(start > 30 for start in starts)  # file-relative, not chunk-relative
    assert transcription.text == separate_pair.decode_text(result.token_ids) and reports[-1] == 1.0
    # the three chunks shared their batched passes: timings count each pass once
    steps_per_chunk = Counter(result.windows[step.window].chunk for step in result.steps)
    stats = result.stats()
    assert max(steps_per_chunk.values()) <= stats["num_batched_passes"] < stats["num_target_passes"]
    assert stats["verify_seconds"] == pytest.approx(sum(p.verify_seconds for p in result.passes))
    assert len({e.index for e in result.encodings}) == len(result.encodings) < 2 * len(result.windows)


def test_cli_transcribes_a_long_file_in_chunked_mode(demo_models, tmp_path, capsys):
    path = tmp_path / "long.wav"
    sf.write(path, LONG, SAMPLE_RATE)
    code = cli.main([
        "transcribe", str(path), "--long-form", "chunked",
        "--target", str(demo_models["target"]), "--draft", str(demo_models["draft-separate"]),
        "--language", "de", "--max-new-tokens", "30", "--compare", "--json", "--device", "cpu",
    ])  # fmt: skip
    output = capsys.readouterr()
    assert code == 0, output.err
    (record,) = [json.loads(line) for line in output.out.splitlines()]
    assert record["identical"] is True and record["speculative"]["text"]
    assert {step["window"] for step in record["speculative"]["steps"]} >= {0, 1, 2}
