"""Many requests at once (`specdec.scheduler`): requests from several threads join one running batch, each
answered with exactly what it gets alone; a cancelled one leaves without changing the others; a request's
own problem is its alone.

Demo models (random weights): the clips of test_batching in three languages, noise and bursts, with other
options per request, and a long file (sequential long-form, its windows rejoining the batch one by one);
and the real CPU default pair on the assets, 42 s of English among them and one request cancelled.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from test_batching import BATCH

from specdec.api import SpeculativeWhisper
from specdec.audio import MAX_LONG_SECONDS, SAMPLE_RATE, load_audio
from specdec.engine.cancel import Cancelled
from specdec.options import MIN_TEMPERATURE, DecodeOptions, TranscribeOptions
from specdec.scheduler import Scheduler
from specdec.trace import DRAFT_MODEL
from specdec.whisper.logits import LogitsPipeline

ASSETS = Path(__file__).parent.parent / "assets"
GREEDY = DecodeOptions(max_new_tokens=24)
LONG = np.concatenate([BATCH["en-weather"], BATCH["bursts-9s"], BATCH["de-bahnhof"], BATCH["bursts-9s"]] * 2)
LONG_REAL_SECONDS = 42.2
REQUESTS = [  # (clip, options, speculative)
    ("en-weather", GREEDY, True),
    ("de-bahnhof", dataclasses.replace(GREEDY, timestamps=True), True),
    ("es-biblioteca", dataclasses.replace(GREEDY, language="es"), True),
    ("noise-2s", GREEDY, False),
    ("bursts-9s", GREEDY, True),
    ("long", GREEDY, True),
]


def waveform(name: str) -> np.ndarray:
    return LONG if name == "long" else BATCH[name]


@functools.cache  # decoding is deterministic: each clip's reference is decoded once for every test here
def alone(whisper, name: str, options: DecodeOptions, speculative: bool) -> tuple[int, ...]:
    run = TranscribeOptions.of(options, speculative=speculative)
    (transcription,) = whisper.transcribe_waveforms([waveform(name)], run)
    return transcription.token_ids


def test_concurrent_requests_share_passes_and_decode_as_alone(shared_pair):
    assert len(LONG) / 16000 > 30
    scheduler = Scheduler(shared_pair)
    with ThreadPoolExecutor(len(REQUESTS)) as clients:
        futures = [
            clients.submit(
                lambda r=request: scheduler.submit(
                    waveform(r[0]), TranscribeOptions.of(r[1], speculative=r[2]), r[0]
                ).result(120)
            )
            for request in REQUESTS
        ]
        results = [future.result() for future in futures]
    shared = 0
    for (name, options, speculative), result in zip(REQUESTS, results, strict=True):
        assert result.token_ids == alone(shared_pair, name, options, speculative), f"{name} differs"
        assert result.audio == name and result.result.total_seconds > 0
        shared += sum(one.rows > 1 for one in result.result.passes)
    assert shared > 10, "the requests shared target passes"
    assert len(results[-1].result.windows) > 1 and results[-1].segments, "the long file, window by window"
    assert scheduler.decoding == 0 and scheduler.waiting == 0


def test_a_fixed_draft_length_is_honoured_in_the_shared_batch(shared_pair):
    """Requests asking for a fixed k (the page's "Draft length: fixed", /v1's) draft exactly that k at every
    step they draft, sharing passes with an adaptive one; each output still its own alone."""
    fixed = DecodeOptions(max_new_tokens=24, num_draft_tokens=3, adaptive=False, draft_confidence=0.0)
    requests = [("en-weather", fixed), ("bursts-9s", fixed), ("de-bahnhof", GREEDY)]
    scheduler = Scheduler(shared_pair)
    futures = [scheduler.submit(waveform(name), options, name) for name, options in requests]
    results = [future.result(120) for future in futures]
    for (name, options), result in zip(requests, results, strict=True):
        assert result.token_ids == alone(shared_pair, name, options, True)
    drafted = [
        (len(step.drafted), step.index)
        for result in results[:2]
        for step, tokens_left in _drafting_steps(result.result)
        if tokens_left > 3  # room for the whole k (the budget caps the last steps)
    ]
    assert drafted and {length for length, _ in drafted} == {3}
    assert sum(one.rows > 1 for one in results[0].result.passes) > 0  # they shared passes


EOS = 50257  # the demo target's end-of-text (multilingual Whisper's)


def _drafting_steps(result):
    """A decoding's steps that drafted from the model, each with the tokens its window had left."""
    generated = 0
    for step in result.steps:
        if step.drafted and step.source == DRAFT_MODEL and EOS not in step.drafted:  # (drafting ends at eos)
            yield step, 24 - generated
        generated += step.n_accepted + 1


def test_a_cancelled_request_leaves_and_a_bad_one_fails_alone(shared_pair):
    scheduler = Scheduler(shared_pair, max_rows=2)
    stop = threading.Event()
    cancelled = scheduler.submit(LONG, GREEDY, "long", stop=stop)
    bad = scheduler.submit(BATCH["en-weather"], dataclasses.replace(GREEDY, language="klingon"))
    good = [scheduler.submit(BATCH[name], GREEDY, name) for name in ("en-weather", "de-bahnhof")]
    time.sleep(0.5)
    stop.set()
    with pytest.raises(Cancelled):
        cancelled.result(120)
    with pytest.raises(ValueError, match="unsupported language"):
        bad.result(120)
    for name, future in zip(("en-weather", "de-bahnhof"), good, strict=True):
        assert future.result(120).token_ids == alone(shared_pair, name, GREEDY, True)


@dataclasses.dataclass(frozen=True)
class FailingRowOptions(TranscribeOptions):
    """Test double: a request whose row decodes a few steps in the shared batch, then raises inside the
    batch's step, where no row is named (as a row whose sampling distribution overflowed did): each greedy
    row's verify reads its options' acceptance_threshold."""

    reads: itertools.count = dataclasses.field(default_factory=itertools.count, compare=False)

    def __getattribute__(self, name: str):
        if name == "acceptance_threshold" and next(object.__getattribute__(self, "reads")) >= 8:
            raise RuntimeError("planted: this row cannot be decoded")
        return object.__getattribute__(self, name)


def test_a_row_failing_inside_the_batch_step_fails_its_request_alone(shared_pair, caplog):
    """Four good requests and one whose row raises mid-decoding, in one batch: the bad one gets its error,
    each good one exactly its own output (decoded again, apart from the one at fault)."""
    scheduler = Scheduler(shared_pair)
    names = ("en-weather", "de-bahnhof", "long", "bursts-9s")
    good = [scheduler.submit(waveform(name), GREEDY, name) for name in names]
    bad = scheduler.submit(BATCH["en-weather"], FailingRowOptions(max_new_tokens=24), "bad")
    with caplog.at_level(logging.WARNING, "specdec.scheduler"):
        with pytest.raises(RuntimeError, match="planted"):
            bad.result(120)
        for name, future in zip(names, good, strict=True):
            assert future.result(120).token_ids == alone(shared_pair, name, GREEDY, True), f"{name} differs"
    assert "decode again, apart" in caplog.text  # the failure came inside a shared step
    assert scheduler.decoding == 0 and scheduler.waiting == 0


@pytest.mark.parametrize("temperature", [1e-40, 1e-38, 0.005, -0.5, math.nan, math.inf])
def test_a_temperature_that_would_overflow_the_sampling_is_refused(temperature):
    with pytest.raises(ValueError, match="temperature must be 0 .greedy. or a finite number from 0.01 up"):
        DecodeOptions(temperature=temperature)


def test_the_least_temperature_samples_from_finite_probabilities(shared_pair):
    """At MIN_TEMPERATURE the largest logits a float16 model gives still make a distribution (at 1e-40
    they overflow to NaN, which failed the whole batch)."""
    config = shared_pair.pair.target.model.generation_config
    pipeline = LogitsPipeline(config, 3, False, temperature=MIN_TEMPERATURE)
    scores = torch.tensor([[65504.0, 65000.0, -65504.0, -math.inf]]).repeat_interleave(4, dim=1)
    probs = pipeline.probs(scores)
    assert torch.isfinite(probs).all() and probs.sum().item() == pytest.approx(1.0)


def test_the_real_pair_under_concurrency_decodes_each_request_as_alone(real_models):
    """The CPU default pair (whisper-base with its self-draft, real weights): short clips in three languages
    and 42 s of English (its second window rejoining), sent from threads at once, one of them cancelled
    while it decodes; every other answer equals the one it gets alone."""
    whisper = SpeculativeWhisper(draft_model="self", final_model=str(real_models["base"]), device="cpu")
    scheduler = Scheduler(whisper)
    names = ("en-jfk.flac", "de-bahnhof.wav", "es-biblioteca.wav", "en-weather.wav", "long/en-six-parts.flac")
    audio = {name: load_audio(ASSETS / name, max_seconds=MAX_LONG_SECONDS) for name in names}
    long = audio["long/en-six-parts.flac"]  # its first four parts, to the pause after them: two windows
    audio["long/en-six-parts.flac"] = long[: round(LONG_REAL_SECONDS * SAMPLE_RATE)]
    options = DecodeOptions()
    stop = threading.Event()
    cancelled = scheduler.submit(audio["long/en-six-parts.flac"], options, "cancelled", stop=stop)
    with ThreadPoolExecutor(len(names)) as clients:
        futures = {name: clients.submit(scheduler.submit, audio[name], options, name) for name in names}
        time.sleep(1.0)
        stop.set()
        answers = {name: future.result().result(300) for name, future in futures.items()}
    with pytest.raises(Cancelled):
        cancelled.result(300)
    for name, answer in answers.items():
        waveform = audio[name]
        (alone,) = whisper.transcribe_waveforms([waveform], options)
        assert answer.token_ids == alone.token_ids, f"{name}: differs from alone"
    assert len(answers["long/en-six-parts.flac"].result.windows) > 1, "the long one, window by window"
    assert max(answer.result.mean_batch_rows for answer in answers.values()) > 1.5, "they shared passes"
    assert {answer.language for answer in answers.values()} >= {"en", "de"}


def test_a_followed_request_is_told_its_settled_output_pass_by_pass_and_nothing_is_taken_back(shared_pair):
    """on_tokens: each call extends the one before (nothing told is dropped later, not even where a window
    loses its tail after the last timestamp pair and is decoded again), the last one is the answer's tokens,
    and one target pass may settle several tokens (the draft's, accepted)."""
    scheduler = Scheduler(shared_pair)
    tails_dropped = 0
    for name, options in [("en-weather", GREEDY), ("de-bahnhof", REQUESTS[1][1]), ("long", GREEDY)]:
        told: list[list[int]] = []
        transcription = scheduler.submit(waveform(name), options, name, on_tokens=told.append).result(120)
        assert len(told) > 1 and tuple(told[-1]) == transcription.token_ids
        grown = [len(after) - len(before) for before, after in zip(told, told[1:], strict=False)]
        assert all(after[: len(before)] == before for before, after in zip(told, told[1:], strict=False))
        assert min(grown) > 0 and max(grown) > 1
        tails_dropped += sum(not record.kept for record in transcription.result.tokens)
    assert tails_dropped  # the long file re-decoded some window's tail: told only what was kept
