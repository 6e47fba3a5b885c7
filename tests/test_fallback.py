"""generate()'s temperature fallback and condition_on_prev_tokens, decoded speculatively.

Pure parts against transformers' own helpers on planted inputs: the compression ratio
(`_retrieve_compression_ratio`), the verdict (`_need_fallback`, the no-speech rule's override included),
the segments a window leaves (`_retrieve_segment`) and the prompt a conditioned window gets
(`_prepare_decoder_input_ids`). Then the engine against generate() itself, spied window by window and
attempt by attempt: on the demo models with planted thresholds (greedy retries make every attempt
deterministic: the decisions, the attempts' tokens, the prompts and the output must be generate()'s), at
batch sizes 1 and 3, the target alone and in the scheduler; a sampled fallback's first attempt and decision
are generate()'s and its later rows sample from generate()'s distribution at their temperature. On the real
whisper-base: gradio's cantina.wav (music) loops at temperature 0 and falls back as generate() decides, and
jfk passes at 0 and is generate()'s output with Whisper's fallback on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import random
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch
from starlette.datastructures import FormData
from test_lossless import CLIPS
from transformers import GenerationConfig
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopPLogitsWarper,
    WhisperNoSpeechDetection,
)
from transformers.generation.utils import GenerationMixin
from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

from specdec import cli
from specdec.api import Transcription
from specdec.app import compare, openai_schema
from specdec.app.openai_schema import ApiError
from specdec.audio import load_audio
from specdec.engine import clip_decoding
from specdec.options import (
    DecodeOptions,
    TranscribeOptions,
    whisper_fallback,
    whisper_temperatures,
)
from specdec.scheduler import Scheduler
from specdec.subtitles import Cue
from specdec.trace import TARGET_ENCODER, DecodeResult, Window
from specdec.whisper.fallback import Fallback, compression_ratio, previous_text, window_segments
from specdec.whisper.features import pair_features
from specdec.whisper.logits import LogitsPipeline, NoSpeechRule
from specdec.whisper.tokens import forced_prompt, split_window

ASSETS = Path(__file__).parent.parent / "assets"
MAX_NEW_TOKENS = 12
TIMESTAMP_BEGIN = 50365  # whisper-base's <|0.00|>
JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."  # noqa: E501


# --- the options ---


def test_a_float_temperature_stays_a_float_and_a_list_becomes_the_fallbacks_temperatures():
    assert DecodeOptions().temperature == 0.0 and DecodeOptions().temperatures == (0.0,)
    assert DecodeOptions(temperature=0.3).temperature == 0.3 and DecodeOptions(temperature=0.3).sampling
    listed = DecodeOptions(temperature=[0, 0.2, 0.4])
    assert listed.temperature == (0, 0.2, 0.4) and listed.temperatures == (0, 0.2, 0.4)
    assert hash(listed) == hash(DecodeOptions(temperature=(0, 0.2, 0.4)))  # frozen, compared by value
    assert listed.sampling and not DecodeOptions(temperature=(0.0,)).sampling
    for bad in (-0.1, [0.0, -1.0], [], float("nan"), "0.2", [True]):
        with pytest.raises(ValueError, match="temperature"):
            DecodeOptions(temperature=bad)
    with pytest.raises(ValueError, match="compression_ratio_threshold"):
        DecodeOptions(compression_ratio_threshold=float("inf"))


def test_whispers_values():
    assert whisper_temperatures() == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert whisper_temperatures(0.3) == (0.3, 0.5, 0.7, 0.9)  # openai-whisper's CLI: start, by 0.2, to 1
    assert whisper_temperatures(1.0) == (1.0,)
    assert whisper_fallback() == {
        "temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
        "compression_ratio_threshold": 2.4,
        "logprob_threshold": -1.0,
    }
    assert TranscribeOptions(**whisper_fallback()).temperatures == whisper_temperatures()


def test_the_default_is_generates_no_fallback_and_options_left_none_take_the_configs():
    config = GenerationConfig()
    rule = Fallback.of(config, DecodeOptions(temperature=whisper_temperatures()), 51865)
    assert not rule.has_next(0)  # no threshold: the first temperature is the only one
    assert not rule.condition_on_prev_tokens
    config.compression_ratio_threshold, config.condition_on_prev_tokens = 1.35, True
    rule = Fallback.of(config, DecodeOptions(temperature=(0.0, 0.5)), 51865)
    assert rule.compression_ratio_threshold == 1.35 and rule.condition_on_prev_tokens
    assert rule.has_next(0) and not rule.has_next(1)
    assert not Fallback.of(
        config, DecodeOptions(condition_on_prev_tokens=False), 51865
    ).condition_on_prev_tokens
    assert rule.conditions_next(0.4) and not rule.conditions_next(0.5)  # generate(): temperature < 0.5


# --- pure parts against transformers' helpers ---


@pytest.mark.parametrize("vocab_size", [51865, 51866, 51864, 200, 70_000])
def test_compression_ratio_is_generates(vocab_size):
    rng = random.Random(vocab_size)
    loop = [50258, 58, 7402, 14974, 0] * 40
    for tokens in (loop, [rng.randrange(min(vocab_size, 65_536)) for _ in range(50)], [50257], [1, 2, 1, 2]):
        tokens = [token % vocab_size for token in tokens]
        expected = WhisperGenerationMixin._retrieve_compression_ratio(torch.tensor(tokens), vocab_size)
        assert compression_ratio(tokens, vocab_size) == expected


def _transformers_need_fallback(
    tokens: list[int],
    warped_scores: torch.Tensor,
    no_speech_prob: float,
    config: GenerationConfig,
    temperature,
) -> tuple[bool, bool]:
    """transformers' `_need_fallback` on one window (its helpers are static: the class stands in for self)."""
    detector = WhisperNoSpeechDetection(no_speech_token=0, begin_index=4)
    detector._no_speech_prob = torch.tensor([no_speech_prob], dtype=torch.float32)
    outputs = [{"scores": list(warped_scores)}]
    return WhisperGenerationMixin._need_fallback(
        WhisperGenerationMixin, torch.tensor(tokens), outputs, 0, [detector], config, 51865, temperature
    )


def test_the_verdict_is_need_fallbacks_on_planted_windows():
    """Random windows (tokens, the target's processed scores, a no-speech probability) and thresholds
    planted around their own numbers: the decision (decode again) and the skip (no speech) are
    `_need_fallback`'s, greedy and sampled (generate() averages the warped scores times the temperature)."""
    rng = random.Random(0)
    config = GenerationConfig(decoder_start_token_id=1, no_timestamps_token_id=2, eos_token_id=3)
    decided = set()
    for case in range(300):
        temperature = rng.choice([0.0, 0.2, 0.7, 1.0])
        length = rng.randrange(1, 30)
        period = rng.choice([1, 3, 7, 1000])
        tokens = [rng.randrange(50) if i >= period else 10 + i for i in range(length)]
        tokens = [tokens[i % period] for i in range(length)] if period < 1000 else tokens
        scores = torch.randn(length, 64, generator=torch.Generator().manual_seed(case)) * rng.choice([1, 4])
        pipeline = LogitsPipeline(config, 4, False, temperature)
        rule = NoSpeechRule(0, 3, None, None, temperature)
        average = rule.avg_logprob(rule.token_logprobs(scores, tokens, pipeline))
        ratio = compression_ratio(tokens, 51865)
        no_speech_prob = rng.random()
        thresholds = {
            "compression_ratio_threshold": rng.choice([None, ratio, ratio * 0.99, ratio * 1.01, 2.4]),
            "logprob_threshold": rng.choice([None, average, average - 0.01, average + 0.01, -1.0]),
            "no_speech_threshold": rng.choice([None, no_speech_prob, no_speech_prob - 0.01, 0.6]),
        }
        if thresholds["logprob_threshold"] is None:
            thresholds["no_speech_threshold"] = None  # generate() fails without it (UnboundLocalError)
        options = DecodeOptions(temperature=temperature, **thresholds)
        generation_config = GenerationConfig(**thresholds)
        rule = NoSpeechRule.of(
            GenerationConfig(decoder_start_token_id=1, no_timestamps_token_id=2), options, [1]
        )
        verdict = Fallback.of(GenerationConfig(), options, 51865).verdict(
            tokens, average, rule.judge(no_speech_prob, average)
        )
        warped = pipeline.warpers(None, scores) if temperature > 0 else scores
        expected = _transformers_need_fallback(tokens, warped, no_speech_prob, generation_config, temperature)
        assert (verdict.needs_fallback, verdict.no_speech) == expected, (case, thresholds)
        assert verdict.compression_ratio == ratio
        decided.add(expected)
    assert decided == {(False, False), (True, False), (False, True)}  # every branch planted


def _transformers_segments(tokens: list[int]) -> list[list[int]]:
    segments, _ = WhisperGenerationMixin._retrieve_segment(
        seek_sequence=torch.tensor(tokens, dtype=torch.long),
        seek_outputs=[None],
        time_offset=torch.zeros(1, dtype=torch.float64),
        timestamp_begin=TIMESTAMP_BEGIN,
        seek_num_frames=torch.tensor([3000]),
        time_precision=0.02,
        time_precision_features=0.01,
        input_stride=2,
        prev_idx=0,
        idx=0,
        return_token_timestamps=False,
        decoder_input_ids=torch.zeros(1, 4, dtype=torch.long),
    )
    return [segment["tokens"].tolist() for segment in segments]


def _planted_window(rng: random.Random) -> list[int]:
    """Text and timestamps as a window may generate them: pairs, singles, a single at the end or not."""
    return [
        TIMESTAMP_BEGIN + rng.randrange(0, 1500, 25) if rng.random() < 0.35 else rng.randrange(20, 500)
        for _ in range(rng.randrange(0, 14))
    ]


def test_window_segments_are_retrieve_segments_and_hold_the_kept_tokens():
    rng = random.Random(1)
    for _ in range(400):
        tokens = _planted_window(rng)
        if not tokens:
            continue  # generate() keeps at least the window's end-of-text
        segments = window_segments(tokens, TIMESTAMP_BEGIN)
        assert segments == _transformers_segments(tokens), tokens
        kept, _ = split_window(tokens, TIMESTAMP_BEGIN, 3000)
        assert sum(segments, []) == tokens[:kept]


@pytest.mark.parametrize("prompt_ids", [(), (400, 401, 402)], ids=["no-prompt", "prompt"])
def test_a_conditioned_windows_prompt_is_prepare_decoder_input_ids(prompt_ids):
    """Segments planted (with timestamp pairs, empty ones, more than 223 tokens), each window conditioned
    or not: the prompt is the one `_prepare_decoder_input_ids` builds for it."""
    rng = random.Random(len(prompt_ids))
    config = GenerationConfig(
        decoder_start_token_id=50258,
        prev_sot_token_id=50361,
        no_timestamps_token_id=50364,
        pad_token_id=50257,
        eos_token_id=50257,
    )
    config.prompt_condition_type = "first-segment"  # generate()'s default (`_set_prompt_condition_type`)
    init = [50258, 50259, 50360, 50364]
    prompt = torch.tensor([config.prev_sot_token_id, *prompt_ids]) if prompt_ids else None
    for _ in range(60):
        windows = [
            window_segments(_planted_window(rng) * rng.choice([1, 30]), TIMESTAMP_BEGIN) for _ in range(3)
        ]
        segments = [list(prompt_ids)] if prompt_ids else []
        segments += [segment for window in windows[: rng.randrange(0, 4)] for segment in window]
        conditioned = rng.choice([True, False])
        current = [[{"tokens": torch.tensor(segment, dtype=torch.long)} for segment in segments]]
        expected, _ = WhisperGenerationMixin._prepare_decoder_input_ids(
            cur_bsz=1, init_tokens=torch.tensor([init]), current_segments=current, batch_idx_map=[0],
            do_condition_on_prev_tokens=[conditioned], prompt_ids=prompt, generation_config=config,
            config=type("Config", (), {"max_target_positions": 448}), device="cpu", suppress_tokens=None,
            timestamp_begin=TIMESTAMP_BEGIN, kwargs={},
        )  # fmt: skip
        if conditioned and segments:
            previous, is_conditioned = previous_text(segments, TIMESTAMP_BEGIN, 448), True
        else:
            previous, is_conditioned = list(prompt_ids), False
        ours = forced_prompt(config, None, DecodeOptions(), previous, is_conditioned)
        ours = ours[: ours.index(config.decoder_start_token_id)] + init  # the part before it, then the same
        assert ours == expected[0].tolist()


# --- the engine against generate(), attempt by attempt ---


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One decoding of one window: its prompt, its generated tokens (end-of-text included), its temperature,
    and what was decided about it."""

    prompt: list[int]
    tokens: list[int]
    temperature: float
    fell_back: bool
    no_speech: bool


def generate_kwargs(target, options: DecodeOptions) -> dict:
    config = target.model.generation_config
    prompt = {"prompt_ids": torch.tensor([config.prev_sot_token_id, *options.prompt_ids])}
    return {
        "language": options.language, "task": options.task, "return_timestamps": options.timestamps,
        "max_new_tokens": options.max_new_tokens, "temperature": options.temperature,
        "compression_ratio_threshold": options.compression_ratio_threshold,
        "logprob_threshold": options.logprob_threshold, "no_speech_threshold": options.no_speech_threshold,
        "condition_on_prev_tokens": options.condition_on_prev_tokens,
        **(prompt if options.prompt_ids else {}),
    }  # fmt: skip


GENERATED: dict[tuple, tuple[list[int], list[Attempt]]] = {}


def generate_attempts(
    target, waveform: np.ndarray, options: DecodeOptions
) -> tuple[list[int], list[Attempt]]:
    """generate()'s output (target ids, no end-of-text) and every decoding it made, spied on (without
    sampling: once per checkpoint, audio and options)."""
    if options.sampling:
        return _generate_attempts(target, waveform, options)
    key = (target.name, waveform.tobytes(), options)
    if key not in GENERATED:
        GENERATED[key] = _generate_attempts(target, waveform, options)
    return GENERATED[key]


def _generate_attempts(
    target, waveform: np.ndarray, options: DecodeOptions
) -> tuple[list[int], list[Attempt]]:
    prompts, verdicts = [], []
    generate, need_fallback = GenerationMixin.generate, WhisperGenerationMixin._need_fallback

    def spy_generate(self, *args, **kwargs):
        prompts.append(kwargs["decoder_input_ids"][0].tolist())
        return generate(self, *args, **kwargs)

    def spy_need_fallback(
        self, seek_sequence, seek_outputs, index, processors, config, vocab_size, temperature
    ):
        verdict = need_fallback(
            self, seek_sequence, seek_outputs, index, processors, config, vocab_size, temperature
        )
        verdicts.append((seek_sequence.tolist(), temperature or 0.0, *verdict))
        return verdict

    long = len(waveform) > 30 * 16_000  # generate()'s long-form input: the whole file, and its mask
    whole = {"truncation": False, "padding": "longest", "return_attention_mask": True} if long else {}
    features = target.processor.feature_extractor(
        waveform, sampling_rate=16_000, return_tensors="pt", **whole
    )
    mask = {"attention_mask": features.attention_mask} if long else {}
    with pytest.MonkeyPatch.context() as patch, torch.inference_mode():
        patch.setattr(GenerationMixin, "generate", spy_generate)
        patch.setattr(WhisperGenerationMixin, "_need_fallback", spy_need_fallback)
        output = target.model.generate(features.input_features, **mask, **generate_kwargs(target, options))
    sequence = (output["sequences"] if isinstance(output, dict) else output)[0].tolist()
    eos = target.model.generation_config.eos_token_id
    attempts, index = [], 0  # index: the attempt's temperature in options.temperatures
    for prompt, (tokens, temperature, needs_fallback, skip) in zip(prompts, verdicts, strict=True):
        again = needs_fallback and index + 1 < len(options.temperatures)  # the last is kept, failing or not
        attempts.append(Attempt(prompt, tokens, temperature, again, skip))
        index = index + 1 if again else 0
    return [token for token in sequence if token != eos], attempts


@contextlib.contextmanager
def spied_prompts():
    """The forced prompt of every row the engine makes (one clip at a time)."""
    prompts = []
    original = clip_decoding.forced_prompt

    def spy(*args, **kwargs):
        prompts.append(original(*args, **kwargs))
        return prompts[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clip_decoding, "forced_prompt", spy)
        yield prompts


def our_attempts(result, prompts: list[list[int]] | None = None) -> list[Attempt]:
    """A result's windows as attempts (prompts: the spied ones, else left empty)."""
    return [
        Attempt(
            prompts[i] if prompts is not None else [],
            [token.token_id for token in result.tokens if token.window == window.index],
            window.temperature,
            window.fell_back,
            window.no_speech,
        )
        for i, window in enumerate(result.windows)
    ]


def without_prompts(attempts: list[Attempt]) -> list[Attempt]:
    return [dataclasses.replace(attempt, prompt=[]) for attempt in attempts]


GREEDY: dict[tuple, list[Window]] = {}


def greedy_windows(whisper, options: DecodeOptions, clips: list[np.ndarray]) -> list[Window]:
    """The windows of the clips decoded greedily by the target alone (once per checkpoint, clips and options:
    the seed does not change a greedy decoding)."""
    greedy = dataclasses.replace(options, temperature=0.0, seed=None)
    key = (whisper.pair.target.name, greedy, tuple(clip.tobytes() for clip in clips))
    if key not in GREEDY:
        alone = TranscribeOptions.of(greedy, speculative=False)
        GREEDY[key] = [
            w for result in whisper.transcribe_waveforms(clips, alone) for w in result.result.windows
        ]
    return GREEDY[key]


def between(windows: list[Window]) -> float:
    """A log-probability threshold that splits the windows' averages in two."""
    averages = sorted(window.avg_logprob for window in windows)
    middle = len(averages) // 2
    return (averages[middle - 1] + averages[middle]) / 2


def planted(whisper, options: DecodeOptions, case: str, clips: list[np.ndarray]) -> DecodeOptions:
    """Thresholds that send some windows to the next temperature and keep others ("between": the average
    log-probability of the clips' greedy windows split in two), every window ("always": any ratio is above
    0), or judge every window no speech, which overrides the fallback ("no-speech")."""
    if case == "always":
        return dataclasses.replace(options, compression_ratio_threshold=0.0)
    if case == "no-speech":
        return dataclasses.replace(options, logprob_threshold=0.0, no_speech_threshold=0.0)
    return dataclasses.replace(options, logprob_threshold=between(greedy_windows(whisper, options, clips)))


THREE = [CLIPS["noise-2s"], CLIPS["chirp-4s"], CLIPS["bursts-9s"]]


@pytest.mark.parametrize("case", ["between", "always", "no-speech"])
@pytest.mark.parametrize("run", ["speculative", "target-alone", "batch-of-3"])
def test_greedy_retries_are_generates_attempt_by_attempt(separate_pair, case, run):
    """Temperatures (0, 0, 0): every attempt deterministic, so each one's tokens, the decision on it, the
    number of attempts and the output must be generate()'s with the same options. Where every window is
    judged alike ("always", "no-speech"), one clip shows it unless a batch is decoded."""
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS, temperature=(0.0, 0.0, 0.0))
    options = planted(separate_pair, options, case, THREE)
    batch_size = 3 if run == "batch-of-3" else 1
    clips = THREE if case == "between" or batch_size > 1 else [CLIPS["chirp-4s"]]
    run_options = TranscribeOptions.of(options, speculative=run != "target-alone", batch_size=batch_size)
    results = separate_pair.transcribe_waveforms(clips, run_options)
    fell_back = 0
    for waveform, transcription in zip(clips, results, strict=True):
        expected_ids, expected = generate_attempts(separate_pair.pair.target, waveform, options)
        assert our_attempts(transcription.result) == without_prompts(expected)
        assert list(transcription.token_ids) == expected_ids
        assert all(w.compression_ratio is not None for w in transcription.result.windows)
        # a window decoded again reads the encoder states of its first decoding: one call a window
        encoded = [e for e in transcription.result.encodings if e.model == TARGET_ENCODER]
        assert len(encoded) == sum(not w.fell_back for w in transcription.result.windows)
        fell_back += sum(attempt.fell_back for attempt in expected)
    if case == "between":
        assert 0 < fell_back < 2 * len(clips)  # some windows decoded again, some kept at once
    elif case == "always":
        assert fell_back == 2 * len(clips)  # every window three times, the last kept
    else:
        assert fell_back == 0 and all(r.result.no_speech and r.text == "" for r in results)


def test_a_sampled_fallbacks_first_attempt_and_decision_are_generates(separate_pair):
    """Temperatures (0, 1): the greedy attempt and the decision on it are generate()'s; a window that fails
    is decoded again at 1.0 (its last temperature: kept), sampled, so only its temperature is compared."""
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS, temperature=(0.0, 1.0), seed=3)
    options = planted(separate_pair, options, "between", THREE)
    for waveform in THREE:
        result = separate_pair.transcribe_waveforms([waveform], options)[0].result
        _, expected = generate_attempts(separate_pair.pair.target, waveform, options)
        ours = our_attempts(result)
        assert ours[0] == without_prompts(expected)[0]
        if expected[0].fell_back:
            assert [a.temperature for a in ours[:2]] == [a.temperature for a in expected[:2]] == [0.0, 1.0]
            assert not ours[1].fell_back and result.sampled
            kept = [token.token_id for token in result.tokens if token.kept]
            assert kept == list(result.token_ids) and all(t.window > 0 for t in result.tokens if t.kept)


def test_a_fallback_row_samples_from_generates_distribution_at_its_temperature(separate_pair):
    """The row that decodes a window again: its temperature's warper and the no-speech rule's rescaling,
    so that acceptance (Leviathan et al., exact: tests/test_acceptance.py) samples generate()'s
    distribution at that temperature, the draft's proposals from the same."""
    options = DecodeOptions(language="en", temperature=(0.0, 0.4, 0.8), top_p=0.9, logprob_threshold=0.0)
    features = pair_features(separate_pair.pair, CLIPS["chirp-4s"], True)
    clip = clip_decoding.ClipDecoding(features, torch.Generator(), options)
    clip.language_id = separate_pair.pair.target.model.generation_config.lang_to_id["<|en|>"]
    for attempt, temperature in enumerate(options.temperatures):
        clip.attempt = attempt
        row = clip.next_row(separate_pair.pair, torch.device("cpu"))
        assert row.pipeline.sampling is (temperature > 0) and row.no_speech.temperature == temperature
        scores = torch.randn(2, 51865, generator=torch.Generator().manual_seed(attempt))
        if temperature > 0:  # generate()'s warpers for do_sample=True at this temperature, then softmax
            warped = TopPLogitsWarper(0.9)(None, TemperatureLogitsWarper(temperature)(None, scores.clone()))
            assert torch.equal(row.pipeline.probs(scores), torch.softmax(warped, dim=-1))


def conditioned_attempts(
    whisper, waveform: np.ndarray, options: DecodeOptions
) -> tuple[list[Window], list[Attempt]]:
    """Ours against generate()'s, prompts included: the same attempts, the same output (our windows and
    generate()'s attempts returned)."""
    with spied_prompts() as prompts:
        result = whisper.transcribe_waveforms([waveform], options)[0]
    expected_ids, expected = generate_attempts(whisper.pair.target, waveform, options)
    assert our_attempts(result.result, prompts) == expected
    assert list(result.token_ids) == expected_ids
    return list(result.result.windows), expected


@pytest.mark.parametrize(
    ("prompt", "clip", "max_new_tokens"),
    [(False, "noise-2s", 40), (True, "chirp-4s", 30)],
    ids=["no-prompt", "prompt"],
)
def test_condition_on_prev_tokens_is_generates(separate_pair, prompt, clip, max_new_tokens):
    """Timestamps on, so that the seek loop decodes several windows of a clip: each window's prompt holds
    the segments kept so far (and prompt_ids' text), token for token generate()'s prompts and output, greedy
    and then with the greedy retries of the fallback in between (a window decoded again after text was
    kept: its prompt conditioned too)."""
    tokenizer = separate_pair.pair.target.processor.tokenizer
    previous = tuple(tokenizer.encode(" Weather and travel.", add_special_tokens=False)) if prompt else ()
    options = DecodeOptions(
        language="en", timestamps=True, condition_on_prev_tokens=True, prompt_ids=previous,
        max_new_tokens=max_new_tokens,
    )  # fmt: skip
    windows, greedy = conditioned_attempts(separate_pair, CLIPS[clip], options)
    assert sum(len(attempt.prompt) > len(greedy[0].prompt) for attempt in greedy) > 0  # saw earlier text
    retries = dataclasses.replace(options, temperature=(0.0, 0.0), logprob_threshold=between(windows))
    _, expected = conditioned_attempts(separate_pair, CLIPS[clip], retries)
    assert any(attempt.fell_back and len(attempt.prompt) > len(expected[0].prompt) for attempt in expected)


@pytest.mark.parametrize(("temperatures", "conditions"), [((0.0, 0.4), True), ((0.0, 0.6), False)])
def test_a_window_ended_at_half_or_more_conditions_no_other(separate_pair, temperatures, conditions):
    """Every window fails at 0 and ends at the second temperature: from 0.5 on, generate() does not put its
    text in the next window's prompt (nor do we); below, it does. Sampled: the prompts' shape is compared
    (one clip, where the seek loop goes on past a first window; generate() sampling from torch's seeded
    generator, so that its windows are the same on every run)."""
    options = DecodeOptions(
        language="en", timestamps=True, condition_on_prev_tokens=True, max_new_tokens=60, seed=0,
        temperature=temperatures, compression_ratio_threshold=0.0,
    )  # fmt: skip
    prev_sot = separate_pair.pair.target.model.generation_config.prev_sot_token_id
    waveform = CLIPS["bursts-9s"]
    with spied_prompts() as prompts:
        result = separate_pair.transcribe_waveforms([waveform], options)[0].result
    with torch.random.fork_rng():
        torch.manual_seed(0)
        _, expected = generate_attempts(separate_pair.pair.target, waveform, options)
    checked = 0
    for attempts in (our_attempts(result, prompts), expected):
        assert [a.temperature for a in attempts] == list(temperatures) * (len(attempts) // 2)
        later = attempts[2:]  # the windows after the first (each decoded twice)
        assert all((prev_sot in attempt.prompt) is conditions for attempt in later)
        checked += len(later)
    assert checked > 0  # the seek loop went on past a first window


def test_sequential_long_form_falls_back_and_conditions_as_generate(separate_pair):
    """34 s of the assets' clips: generate()'s long-form path (the whole file's features and its mask),
    window by window, with greedy retries and conditioning on the text kept so far."""
    clips = [load_audio(path) for path in sorted(ASSETS.glob("*.wav"))]
    waveform = np.concatenate([*clips, clips[0][: 8 * 16_000]])
    assert len(waveform) > 30 * 16_000
    options = DecodeOptions(
        language="en", timestamps=True, condition_on_prev_tokens=True, temperature=(0.0, 0.0)
    )
    options = planted(separate_pair, options, "between", [waveform])
    with spied_prompts() as prompts:
        result = separate_pair.transcribe_waveforms([waveform], options)[0]
    expected_ids, expected = generate_attempts(separate_pair.pair.target, waveform, options)
    assert our_attempts(result.result, prompts) == expected
    assert list(result.token_ids) == expected_ids
    seeks = {window.start_seconds for window in result.result.windows}
    assert len(seeks) >= 2 and any(attempt.fell_back for attempt in expected)


def test_the_scheduler_decodes_fallback_requests_as_alone(shared_pair):
    """Requests with the fallback join a running batch; a window decoded again rejoins it as a new row;
    each answer is generate()'s (greedy retries), its attempts too."""
    options = DecodeOptions(language="en", max_new_tokens=MAX_NEW_TOKENS, temperature=(0.0, 0.0, 0.0))
    options = planted(shared_pair, options, "between", THREE)
    scheduler = Scheduler(shared_pair)
    futures = [scheduler.submit(waveform, options, f"clip-{i}") for i, waveform in enumerate(THREE)]
    fell_back = 0
    for waveform, future in zip(THREE, futures, strict=True):
        transcription = future.result(120)
        expected_ids, expected = generate_attempts(shared_pair.pair.target, waveform, options)
        assert our_attempts(transcription.result) == without_prompts(expected)
        assert list(transcription.token_ids) == expected_ids
        fell_back += sum(attempt.fell_back for attempt in expected)
        assert transcription.result.mean_batch_rows > 1
    assert fell_back > 0


def test_word_timestamps_time_the_kept_decoding_only(separate_pair):
    options = DecodeOptions(
        language="en", max_new_tokens=MAX_NEW_TOKENS, temperature=(0.0, 0.0), compression_ratio_threshold=0.0,
        word_timestamps=True,
    )  # fmt: skip
    result = separate_pair.transcribe_waveforms([CLIPS["chirp-4s"]], options)[0].result
    assert [w.fell_back for w in result.windows] == [True, False]
    assert len(result.token_spans) == len(result.token_ids) > 0


# --- the real whisper-base ---


def cantina() -> np.ndarray:
    """Three seconds of music that ship with gradio (its media_assets), where whisper-base loops (found
    without importing gradio, which takes seconds)."""
    gradio = Path(importlib.util.find_spec("gradio").origin).parent
    return load_audio(gradio / "media_assets" / "audio" / "cantina.wav")


def test_real_music_loops_at_zero_and_falls_back_as_generate_decides(real_pair):
    """cantina.wav: at temperature 0 base writes "[♪ OUTRO MUSIC PLAYING" again and again (a window cut to
    32 tokens here, to keep the test short: a ratio of 3.0); generate() with Whisper's values judges the loop
    by its compression ratio and decodes the window again. Ours: the same greedy tokens, the same ratio, the
    same decision, and a window decoded again at 0.2, speculative and alone."""
    options = DecodeOptions(language="en", max_new_tokens=32, seed=0, **whisper_fallback())
    first_only = dataclasses.replace(options, temperature=(0.0,))  # generate()'s first attempt, greedy
    music = cantina()
    _, (expected,) = generate_attempts(real_pair.pair.target, music, first_only)
    loop = real_pair.pair.target.processor.tokenizer.decode(expected.tokens, skip_special_tokens=True)
    assert loop.count("OUTRO MUSIC PLAYING") >= 5
    ratio = WhisperGenerationMixin._retrieve_compression_ratio(torch.tensor(expected.tokens), 51865)
    assert ratio > 2.4
    for speculative in (True, False):
        run = TranscribeOptions.of(options, speculative=speculative, temperature=(0.0, 0.2))
        result = real_pair.transcribe_waveforms([music], run)[0].result
        first, second = result.windows[:2]
        assert our_attempts(result)[0] == dataclasses.replace(expected, prompt=[], fell_back=True)
        assert first.fell_back and first.compression_ratio == ratio and second.temperature == 0.2


def test_real_speech_passes_at_zero_and_is_generates_output(real_pair):
    waveform = load_audio(ASSETS / "en-jfk.flac")
    options = DecodeOptions(language="en", seed=0, **whisper_fallback())
    expected_ids, expected = generate_attempts(real_pair.pair.target, waveform, options)
    transcription = real_pair.transcribe_waveforms([waveform], options)[0]
    assert list(transcription.token_ids) == expected_ids and transcription.text == JFK
    assert our_attempts(transcription.result) == without_prompts(expected) and len(expected) == 1
    (window,) = transcription.result.windows
    assert window.temperature == 0.0 and not window.fell_back and window.compression_ratio < 2.4


# --- the doors: Python API, command line, the page, /v1 ---


def test_the_python_api_takes_the_fallbacks_options_by_name(separate_pair):
    """`transcribe(..., temperature=(...), compression_ratio_threshold=...)`; a float temperature as ever."""
    (transcription,) = separate_pair.transcribe(
        CLIPS["chirp-4s"], sample_rate=16_000, language="en", max_new_tokens=MAX_NEW_TOKENS,
        temperature=(0.0, 0.0), compression_ratio_threshold=0.0, condition_on_prev_tokens=True,
        return_stats=True,
    )  # fmt: skip
    assert [(w.temperature, w.fell_back) for w in transcription.result.windows] == [(0.0, True), (0.0, False)]
    (text,) = separate_pair.transcribe(
        CLIPS["chirp-4s"], sample_rate=16_000, language="en", max_new_tokens=4, temperature=0.3, seed=1
    )
    assert isinstance(text, str)


def test_the_command_line_falls_back_and_says_so(separate_pair, tmp_path, monkeypatch, capsys):
    clip = tmp_path / "chirp.wav"
    sf.write(clip, CLIPS["chirp-4s"], 16_000)
    monkeypatch.setattr(cli, "SpeculativeWhisper", lambda **models: separate_pair)  # loaded once per session
    argv = ["transcribe", str(clip), "--device", "cpu", "--language", "en", "--max-new-tokens", "12"]
    fallback = ["--temperature", "0", "0", "--compression-ratio-threshold", "0"]
    assert cli.main([*argv, *fallback, "--json"]) == 0
    windows = json.loads(capsys.readouterr().out)["speculative"]["windows"]
    assert [(w["temperature"], w["fell_back"]) for w in windows] == [(0.0, True), (0.0, False)]
    assert windows[0]["compression_ratio"] > 0
    assert cli.main([*argv, *fallback]) == 0
    assert "  fallback: window at 0.0 s decoded at 0 (ratio " in capsys.readouterr().out


def test_the_command_lines_switch_is_whispers_values():
    def rules(*flags: str) -> dict:
        args = cli._parser("specdec").parse_args(["transcribe", "a.wav", *flags])
        options = cli.transcribe_options(args)
        names = ("temperature", "compression_ratio_threshold", "logprob_threshold", "no_speech_threshold")
        return {name: getattr(options, name) for name in names}

    off = {"compression_ratio_threshold": None, "logprob_threshold": None, "no_speech_threshold": None}
    assert rules() == {"temperature": 0.0, **off}  # generate()'s default: no fallback
    assert rules("--temperature", "0.3") == {"temperature": 0.3, **off}
    assert rules("--temperature", "0", "0.5")["temperature"] == (0.0, 0.5)
    assert rules("--fallback") == {"temperature": whisper_temperatures(), **off, **whisper_fallback()}
    assert rules("--fallback", "--temperature", "0.4")["temperature"] == (0.4, 0.6, 0.8, 1.0)
    both = rules("--fallback", "--detect-no-speech", "--logprob-threshold", "-2")
    assert (both["logprob_threshold"], both["no_speech_threshold"], both["compression_ratio_threshold"]) == (
        -2.0, 0.6, 2.4,
    )  # fmt: skip


def test_the_page_falls_back_with_whispers_values_by_default():
    request = compare.CompareRequest(audio="clip.wav", pair="base")
    assert request.fallback and request.options().temperatures == whisper_temperatures()
    options = request.options()
    assert (options.compression_ratio_threshold, options.logprob_threshold) == (2.4, -1.0)
    hotter = dataclasses.replace(request, temperature=0.5).options()
    assert hotter.temperatures == (0.5, 0.7, 0.9)
    off = dataclasses.replace(request, fallback=False, detect_no_speech=False).options()
    assert (
        off.temperature == 0.0 and off.compression_ratio_threshold is None and off.logprob_threshold is None
    )
    with pytest.raises(compare.UserError, match="fallback must be true or false"):
        dataclasses.replace(request, fallback="yes").options()


def test_v1_falls_back_as_openais_model_unless_asked_not_to():
    store = SimpleNamespace(pairs={"base+tiny.en": ("base", "tiny.en")}, default_pair="base+tiny.en")
    asked = openai_schema.asked(FormData([("model", "base+tiny.en")]), store, "clip.wav")
    assert asked.request.options().temperatures == whisper_temperatures()
    assert asked.request.options().no_speech_threshold is None  # the no-speech rule stays generate()'s: off
    form = FormData([("model", "base+tiny.en"), ("fallback", "false"), ("temperature", "0.2")])
    off = openai_schema.asked(form, store, "clip.wav").request.options()
    assert off.temperature == 0.2 and off.compression_ratio_threshold is None
    with pytest.raises(ApiError, match="fallback must be true or false"):
        openai_schema.asked(FormData([("model", "base+tiny.en"), ("fallback", "maybe")]), store, "clip.wav")


def test_a_window_decoded_again_is_not_the_clips_verdict():
    """`no_speech` reads the kept decodings only; `sampled` any decoding above 0; /v1's segment reports the
    temperature its window ended at."""
    windows = (
        Window(0, 0.0, 3.0, temperature=0.0, compression_ratio=5.8, fell_back=True),
        Window(1, 0.0, 3.0, no_speech=True, temperature=0.2, compression_ratio=1.1),
    )
    result = DecodeResult((), (), "en", (), (), (), (), 0.0, windows=windows)
    assert result.no_speech and result.sampled
    assert not dataclasses.replace(result, windows=windows[:1]).sampled
    transcription = Transcription("clip.wav", "la", result, (Cue(0.5, 2.0, " la", ()),))
    request = compare.CompareRequest(audio="clip.wav", pair="base", timestamps=True)
    asked = openai_schema.Asked("base", request, "verbose_json", prompt="", check=False)
    body = openai_schema.response(asked, openai_schema.Answer(transcription, seconds=3.0)).body
    (segment,) = json.loads(body)["segments"]
    assert segment["temperature"] == 0.2
