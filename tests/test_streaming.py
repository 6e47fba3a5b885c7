"""Live transcription without a browser: a clip fed in chunks, as the Live view and `stream` feed it. Every
update is the target alone on its buffer; committed text only grows. The word rule on scripted hypotheses
(a test double for the decoding, timed word by word): words two hypotheses agree on are committed at
once, unheard or unsure ones wait, a sentence end is cut at with committed audio kept before what is not
committed yet, a stretch with no sentence end is cut between committed words, a hypothesis that skipped
speech and a buffer that never agrees still lose nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from specdec.audio import SAMPLE_RATE, load_audio
from specdec.engine.cancel import Cancelled, cancellable
from specdec.options import TranscribeOptions
from specdec.streaming.session import StreamOptions, StreamSession, quietest_pause
from specdec.trace import TARGET, DecodeResult, TokenRecord
from specdec.whisper.tokens import text_ids, timestamp_begin

ASSETS = Path(__file__).parent.parent / "assets"
CHUNK = SAMPLE_RATE  # 1 s
WORD_SECONDS = 0.3  # a scripted hypothesis' text tokens, one word each, every 0.3 s


def chunks(waveform: np.ndarray, size: int = CHUNK) -> list[np.ndarray]:
    return [waveform[start : start + size] for start in range(0, len(waveform), size)]


def speech(name: str = "en-weather") -> np.ndarray:
    return load_audio(ASSETS / f"{name}.wav")


def run(session: StreamSession, waveform: np.ndarray) -> list:
    return [session.feed(chunk) for chunk in chunks(waveform)]


@pytest.fixture(scope="module")
def trimmed_stream(separate_pair):
    """Two clips back to back, with short limits so that buffers are cut and prompts passed."""
    waveform = np.concatenate(
        [speech("en-weather")[: 5 * SAMPLE_RATE], speech("en-fellow-americans")[: 4 * SAMPLE_RATE]]
    )
    options = StreamOptions(language="en", trim_seconds=3.0, max_load=None)  # every chunk decoded
    session = StreamSession(separate_pair, options)
    return waveform, session, run(session, waveform)


def assert_each_is_the_target_alone(
    whisper, waveform: np.ndarray, decoded: list, options: StreamOptions
) -> None:
    """Each decoded update's hypothesis is the target alone on that update's buffer, with its prompt and the
    stream's decoding options (a window the fallback sampled is the target's in distribution only: none
    here)."""
    for update in decoded:
        start = round(update.buffer_start_seconds * SAMPLE_RATE)
        buffer = waveform[start : round(update.buffer_end_seconds * SAMPLE_RATE)]
        stream_options = options.decode_options(update.language, update.prompt_ids)
        alone = whisper.transcribe_waveforms(
            [buffer], TranscribeOptions.of(stream_options, speculative=False)
        )
        assert not update.result.sampled and update.hypothesis == alone[0].token_ids, f"update {update.index}"


def test_every_update_is_the_target_alone_on_its_buffer(separate_pair, trimmed_stream):
    waveform, session, updates = trimmed_stream
    decoded = [update for update in updates if update.decoded]
    assert len(decoded) >= 8 and any(update.prompt_ids for update in decoded)  # trimmed at least once
    assert_each_is_the_target_alone(separate_pair, waveform, decoded, session.options)
    accepted = sum(stats["accepted"] for update in decoded for stats in update.proposals.values())
    drafted = sum(stats["drafted"] for update in decoded for stats in update.proposals.values())
    assert 0 < accepted < drafted


class SetAfterChecks(threading.Event):
    """A test double for the Live view's Stop: an event that reads as set from its (checks + 1)-th check
    on, so that a decoding is cancelled that many target passes or windows in."""

    def __init__(self, checks: int) -> None:
        super().__init__()
        self.left = checks

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0


def comparable(value):
    """A session attribute as plain values (arrays and tensors by their bytes, objects by their fields)."""
    if isinstance(value, np.ndarray | torch.Tensor):
        return (str(value.dtype), tuple(value.shape), np.asarray(value).tobytes())
    if isinstance(value, list | tuple):
        return [comparable(item) for item in value]
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return {name: comparable(item) for name, item in vars(value).items()}
    return value


def session_state(session: StreamSession) -> dict:
    return {name: comparable(value) for name, value in vars(session).items() if name != "whisper"}


@pytest.mark.parametrize("checks", [0, 3], ids=["before-the-first-pass", "three-passes-in"])
def test_a_cancelled_feed_leaves_the_session_as_it_was(separate_pair, checks):
    """Stop during an update (`engine.cancel`): the feed raises Cancelled and every piece of the session's
    state is as before it, so the same chunk fed again gives what a session never cancelled gives."""
    pieces = chunks(speech()[: 4 * SAMPLE_RATE])
    options = StreamOptions(language="en", max_load=None)
    cancelled, never = StreamSession(separate_pair, options), StreamSession(separate_pair, options)
    for piece in pieces[:2]:
        cancelled.feed(piece), never.feed(piece)
    before = session_state(cancelled)
    stop = SetAfterChecks(checks)
    with pytest.raises(Cancelled), cancellable(stop):
        cancelled.feed(pieces[2])
    assert stop.left < 0 and session_state(cancelled) == before
    for piece in pieces[2:]:
        cancelled.feed(piece), never.feed(piece)
    finished = cancelled.finish(), never.finish()
    assert [u.hypothesis for u in cancelled.updates] == [u.hypothesis for u in never.updates]
    assert finished[0].committed_text == finished[1].committed_text != ""


def test_committed_text_only_grows(trimmed_stream):
    _, session, updates = trimmed_stream
    texts = [update.committed_text for update in updates] + [session.finish().committed_text]
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False))
    assert texts[-1] and len(texts[-1]) > len(texts[len(texts) // 2])


def test_clear_and_finish_reset_and_commit(separate_pair):
    session = StreamSession(separate_pair, StreamOptions(language="en"))
    run(session, speech()[: 3 * SAMPLE_RATE])
    stopped = session.finish()
    assert stopped.committed_text and not stopped.tentative_text
    session.clear()
    assert session.committed_text == "" and session.updates == [] and len(session.buffer) == 0
    assert session.feed(np.zeros(CHUNK, dtype=np.float32)).decoded is False


def test_a_slow_stream_decodes_fewer_longer_updates_and_every_one_is_the_target_alone(separate_pair):
    """At a pace no update can keep (max_load tiny), speech is held back up to max_wait_seconds: an update
    every 2 s of audio instead of every chunk, each the target's own on its buffer, and the held-back end
    decoded where the speech ends (the clip's silent last chunk), its hypothesis committed whole."""
    waveform = speech()  # 6.4 s
    options = StreamOptions(language="en", vad=False, max_load=1e-9, max_wait_seconds=2.0)
    session = StreamSession(separate_pair, options)
    updates = [*run(session, waveform), session.finish()]
    decoded = [update for update in updates if update.decoded]
    assert [update.held_back for update in updates[:6]] == [False, True, False, True, False, True]
    assert len(decoded) == 4 and not updates[-2].speech and updates[-2].decoded
    assert updates[-2].committed_tokens == len(updates[-2].hypothesis) and len(session.buffer) == 0
    assert_each_is_the_target_alone(separate_pair, waveform, decoded, session.options)
    assert session.committed_text == updates[-2].committed_text != ""


def test_speech_held_back_is_decoded_where_the_utterance_ends(separate_pair):
    """An utterance held back for the pace and then ended by silence: the silent chunk decodes it and
    commits it whole, so nothing said waits for the next utterance."""
    words = load_audio(ASSETS / "en-jfk.flac")[round(3.2 * SAMPLE_RATE) : round(4.2 * SAMPLE_RATE)]
    stream = np.concatenate([words, np.zeros(2 * SAMPLE_RATE, np.float32)])
    options = StreamOptions(language="en", max_load=1e-9)
    session = StreamSession(separate_pair, options)
    session.last_update_seconds = 1.0  # as if an earlier update had been slow
    held, ended, rested = run(session, stream)
    assert held.speech and held.held_back and not held.decoded
    assert not ended.speech and ended.decoded and ended.committed_tokens == len(ended.hypothesis) > 0
    assert ended.committed_text == separate_pair.decode_text(list(ended.hypothesis))
    assert not rested.decoded and session.committed_text == ended.committed_text


def test_silence_is_not_decoded_and_invents_no_text(separate_pair):
    session = StreamSession(separate_pair, StreamOptions(language="en"))
    quiet = 1e-4 * np.random.default_rng(0).standard_normal(CHUNK).astype(np.float32)
    updates = [session.feed(chunk) for chunk in (np.zeros(CHUNK, np.float32), quiet, quiet)]
    assert not any(update.decoded for update in updates)
    assert session.finish().committed_text == "" and len(session.buffer) == 0


def test_hypothesis_reuse_needs_fewer_target_passes(shared_pair):
    """Same stream with and without reuse. On random weights a hypothesis repeats only where new audio
    changes nothing, so the stream ends with a pause that is fed through (energy gate and VAD off)."""
    waveform = np.concatenate([speech()[: 3 * SAMPLE_RATE], np.zeros(3 * SAMPLE_RATE, np.float32)])
    passes = {}
    for reuse in (True, False):
        options = StreamOptions(language="en", reuse_hypothesis=reuse, silence_dbfs=float("-inf"), vad=False)
        updates = run(StreamSession(shared_pair, options), waveform)
        passes[reuse] = np.mean([update.target_passes for update in updates if update.decoded])
    print(f"target passes per update: reuse {passes[True]:.1f}, draft model alone {passes[False]:.1f}")
    assert passes[True] < passes[False]


def test_the_quietest_pause_is_the_longest_gap_between_words():
    """Planted: speech-like noise with a 50 ms gap at 3 s and a 300 ms one at 5 s; the cut lands in the long
    one, inside the range asked for."""
    waveform = 0.1 * np.random.default_rng(0).standard_normal(8 * SAMPLE_RATE).astype(np.float32)
    waveform[3 * SAMPLE_RATE : round(3.05 * SAMPLE_RATE)] = 0
    waveform[5 * SAMPLE_RATE : round(5.3 * SAMPLE_RATE)] = 0
    assert 5 * SAMPLE_RATE <= quietest_pause(waveform, SAMPLE_RATE, 7 * SAMPLE_RATE) <= 5.3 * SAMPLE_RATE
    assert 3 * SAMPLE_RATE <= quietest_pause(waveform, SAMPLE_RATE, 4 * SAMPLE_RATE) <= 3.1 * SAMPLE_RATE


# --- the word rule, on scripted hypotheses ---


class ScriptedDecoder:
    """A test double for the decoding: each decoded update gets the next scripted hypothesis, its text
    tokens timed WORD_SECONDS apart from the buffer's start (or at the times given), with the target
    probabilities given (1.0 unless said)."""

    def __init__(self, session: StreamSession, hypotheses: list) -> None:
        self.session = session
        self.hypotheses = iter(hypotheses)
        session._decode = self.decode

    def decode(self, waveform: np.ndarray | None = None) -> DecodeResult:
        token_ids, *more = next(self.hypotheses)
        times = more[0] if more and more[0] is not None else None
        probabilities = more[1] if len(more) > 1 else {}
        return scripted_result(self.session, token_ids, times, probabilities)


def scripted_result(
    session: StreamSession, token_ids: list[int], times=None, probabilities=None
) -> DecodeResult:
    """A decoding's result with token spans: text token i spans (times[i] - 0.25, times[i]) seconds of the
    buffer (default: every WORD_SECONDS), a timestamp token nothing."""
    begin = timestamp_begin(session.whisper.pair.target.model.generation_config)
    spans, text = [], 0
    for token in token_ids:
        if token >= begin:
            spans.append((spans[-1][1], spans[-1][1]) if spans else (0.0, 0.0))
            continue
        end = times[text] if times else (text + 1) * WORD_SECONDS - 0.05
        spans.append((max(end - 0.25, 0.0), end))
        text += 1
    records = [
        TokenRecord(t, TARGET, 0, 0, (probabilities or {}).get(i, 1.0), None) for i, t in enumerate(token_ids)
    ]
    return DecodeResult(tuple(token_ids), (), "en", tuple(records), (), (), (), 0.0, token_spans=tuple(spans))


def words(whisper, text: str) -> list[int]:
    """Text as the target's tokens (one per word for the common words used here)."""
    return text_ids(whisper.pair.target.processor.tokenizer, text)


def scripted_session(whisper, **options) -> StreamSession:
    return StreamSession(whisper, StreamOptions(language="en", vad=False, max_load=None, **options))


LOUD = 0.1 * np.ones(CHUNK, dtype=np.float32)


def test_words_two_hypotheses_agree_on_are_committed_at_once(separate_pair):
    """The second hypothesis repeats the first's words and adds two: the four agreed on are committed by
    it (not waiting for a segment's end), the two new ones stay tentative."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    first, second = (
        words(separate_pair, " And so my fellow"),
        words(separate_pair, " And so my fellow Americans ask"),
    )
    session = scripted_session(separate_pair)
    ScriptedDecoder(session, [([begin, *first],), ([begin, *second],)])
    one, two = session.feed(LOUD), session.feed(LOUD)
    assert one.committed_text == "" and one.tentative_text == "And so my fellow"
    assert two.committed_text == "And so my fellow" and two.tentative_text == "Americans ask"
    assert [word.text for word in two.committed_words] == [" And", " so", " my", " fellow"]
    assert two.committed_tokens == 5  # <|0.00|> and the four words: the view shows them committed
    assert all(0 <= lag <= 2.0 for lag in two.commit_lags)


def test_words_the_buffer_has_not_heard_are_not_committed(separate_pair):
    """A prompt's text can make Whisper write words it has not heard yet, piled on the buffer's last frame:
    two hypotheses agreeing on such words commit only those heard (ending margin_seconds before the end)."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    said = words(separate_pair, " And so my fellow Americans ask not what")
    heard = [0.3, 0.6, 0.9, 1.2]  # the rest at the end of a 2 s buffer, as the alignment puts them
    session = scripted_session(separate_pair)
    ScriptedDecoder(
        session, [([begin, *said], [*heard, 1.0, 1.0, 1.0, 1.0]), ([begin, *said], [*heard, *[2.0] * 4])]
    )
    session.feed(LOUD)
    assert session.feed(LOUD).committed_text == "And so my fellow"


def test_unsure_words_two_hypotheses_agree_on_wait_and_a_contradiction_loses_nothing(separate_pair):
    """As whisper-base on en-weather's first seconds: "but when a ..." twice, the target unsure of "but"
    (0.16), then "The weather today is ...": nothing of the early guess is committed, and the final text is
    the later hypotheses' words."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    guess, right = (
        words(separate_pair, " but when a tornado"),
        words(separate_pair, " The weather today is cool"),
    )
    unsure = {1: 0.16}
    hypotheses = [([begin, *guess[:3]], None, unsure), ([begin, *guess], None, unsure), ([begin, *right],)]
    session = scripted_session(separate_pair)
    ScriptedDecoder(session, [*hypotheses, ([begin, *right, *words(separate_pair, " and")],)])
    updates = [session.feed(LOUD) for _ in range(4)]
    assert [update.committed_text for update in updates[:3]] == ["", "", ""]
    assert updates[3].committed_text == "The weather today is cool"  # "and", the last word, waits
    assert session.finish().committed_text == "The weather today is cool and"


def test_a_sentence_end_is_cut_at_keeping_committed_audio_before_what_is_not_committed(separate_pair):
    """Committed words through a sentence's end and 3 s past it: the buffer is cut at the sentence end,
    its text becomes the prompt, and the committed words after it stay committed in the buffer (found
    again in the next hypothesis, which draws from the cut buffer's time)."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    sentence, more = (
        words(separate_pair, " One two three."),
        words(separate_pair, " We keep on talking and talking so"),
    )
    said = [begin, *sentence, *more]
    times = [0.3, 0.6, 0.9, 1.0, *(1.5 + 0.5 * i for i in range(len(more)))]  # "so" at 5.0 s of a 6 s buffer
    session = scripted_session(separate_pair, context_seconds=3.0)
    ScriptedDecoder(session, [(said, times), (said, times)])
    loud = np.concatenate([LOUD] * 3)
    session.feed(loud), session.feed(loud)
    assert session.buffer_start_seconds == pytest.approx(1.0, abs=0.1)  # at the gap after "three."
    assert session._prompt_ids() == tuple(sentence)
    assert session.committed_text == "One two three. We keep on talking and talking"  # "so" is the last word
    assert [word.text for word in session.committed][:2] == [" We", " keep"]
    assert session.hypothesis[0] == begin and session.hypothesis[1:] == more


def test_a_long_stretch_without_a_sentence_end_is_cut_between_committed_words(separate_pair):
    """Whisper writes dense speech as one open sentence: past cut_seconds of committed audio with no sentence
    or segment end, the buffer is cut at the widest gap between committed words."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    said = words(separate_pair, " one two three four five six seven eight nine ten eleven twelve")
    times = [0.5 * (i + 1) for i in range(len(said))]
    times[5:] = [t + 0.6 for t in times[5:]]  # a wider gap after "five", quiet
    session = scripted_session(separate_pair, cut_seconds=2.0, context_seconds=1.0)
    ScriptedDecoder(session, [([begin, *said], times), ([begin, *said], times)])
    loud = np.concatenate([LOUD] * 4)
    loud[round(2.7 * SAMPLE_RATE) : round(3.1 * SAMPLE_RATE)] = 0
    session.feed(loud), session.feed(loud)
    assert 2.7 <= session.buffer_start_seconds <= 3.1  # between "five" (ends 2.5) and "six" (starts 3.35)
    assert separate_pair.decode_text(list(session._prompt_ids())) == "one two three four five"


def test_a_hypothesis_that_skips_speech_is_committed_and_the_rest_decoded_anew(separate_pair):
    """Whisper sometimes ends its text seconds before the buffer ends (it skipped speech) and a later
    hypothesis disagrees before the end of it, so no agreement is ever reached: once the text ends
    `stall_seconds` before the buffer, its segments are committed and the buffer cut where they end."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    each = words(separate_pair, " one two three four five")
    hypotheses = [([begin, token, begin + 50], [0.5]) for token in each]  # each ends at 1.0 s, each differs
    session = scripted_session(separate_pair)
    ScriptedDecoder(session, hypotheses)
    updates = [session.feed(LOUD) for _ in hypotheses]
    assert [len(update.committed_words) for update in updates] == [0, 0, 0, 0, 1]  # 1.0 s < 5 s - 3 s
    assert session.committed_text == "five" and session.buffer_start_seconds == 1.0


def test_speech_the_last_hypothesis_skipped_is_decoded_where_the_utterance_ends(separate_pair):
    """Speech held back to the end, whose hypothesis stops at 1.0 s of a 5 s buffer: finish() commits it,
    decodes the 4 s after it on their own and commits that too."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    one, two, three = words(separate_pair, " one two three")
    hypotheses = [([begin, one, begin + 25],), ([begin, two, begin + 50],), ([begin, three, begin + 150],)]
    options = {"max_load": 1e-9, "max_wait_seconds": 10.0}
    session = StreamSession(separate_pair, StreamOptions(language="en", vad=False, **options))
    ScriptedDecoder(session, hypotheses)
    updates = [session.feed(LOUD) for _ in range(5)]
    assert [update.decoded for update in updates] == [True, False, False, False, False]
    final = session.finish()
    assert final.decoded and final.committed_text == "two three"
    assert len(session.buffer) == 0 and session.hypothesis == []


def test_a_buffer_that_never_agrees_is_cut_at_a_pause_and_nothing_is_lost(separate_pair):
    """Hypotheses that never agree: past trim_seconds the audio up to the quietest pause is decoded again
    and committed whole, the rest stays in the buffer; the final text is both decodings' text."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    ten, eleven, twelve, thirteen, fourteen, fifteen = words(
        separate_pair, " ten eleven twelve thirteen fourteen fifteen"
    )
    hypotheses = [
        ([begin, ten],),
        ([begin, eleven],),
        ([begin, twelve],),
        ([begin, thirteen, fourteen],),
        ([begin, fifteen],),
    ]
    session = scripted_session(separate_pair, trim_seconds=2.5)
    ScriptedDecoder(session, hypotheses)
    loud = 0.1 * np.random.default_rng(1).standard_normal(3 * CHUNK).astype(np.float32)
    loud[round(1.6 * CHUNK) : round(1.9 * CHUNK)] = 0  # the pause
    updates = [session.feed(chunk) for chunk in chunks(loud)]
    assert session.committed_text == "thirteen fourteen"  # decoded up to the pause
    assert 1.6 <= session.buffer_start_seconds <= 1.9 and updates[-1].tentative_text == ""
    session.feed(loud[:CHUNK])
    assert session.finish().committed_text == "thirteen fourteen fifteen"


def test_a_hypothesis_that_lost_the_committed_words_cuts_them_off(separate_pair):
    """Whisper, its prompt holding the words the audio says again (a clip looped), may skip them: where the
    newest hypothesis holds none of the committed words, their audio is cut from the buffer, nothing is
    committed from it, and the next updates decode and commit what follows."""
    begin = timestamp_begin(separate_pair.pair.target.model.generation_config)
    said, more = words(separate_pair, " ask not what your country"), words(separate_pair, " can do for you")
    first = [begin, *said, more[0]]
    later = [begin, *more, *words(separate_pair, " and")]
    hypotheses = [(first,), (first,), ([begin, *more], [2.0, 2.3, 2.6, 2.9]), (later,), (later,)]
    session = scripted_session(separate_pair)
    ScriptedDecoder(session, hypotheses)
    updates = [session.feed(LOUD) for _ in hypotheses]
    assert updates[1].committed_text == "ask not what your country"  # "can" ends in the last 0.5 s
    assert updates[2].committed_words == () and 1.4 <= session.buffer_start_seconds <= 1.8
    assert session._prompt_ids() == tuple(said)  # the committed words' audio left with them
    assert session.finish().committed_text == "ask not what your country can do for you and"
