"""The previous hypothesis as a draft: exact output, and consulted even while the draft model is paused."""

from __future__ import annotations

from pathlib import Path

from specdec.audio import load_audio
from specdec.engine.drafters import PreviousHypothesis, Proposal, continuation
from specdec.options import DecodeOptions, TranscribeOptions
from specdec.trace import DRAFT_MODEL, HYPOTHESIS

ASSETS = Path(__file__).parent.parent / "assets"
OPTIONS = DecodeOptions(language="en", adaptive=True, num_draft_tokens=4)


class AlwaysRejectedDraftDouble:
    """Test double for a useless draft model: proposes a suppressed token, which the target never keeps."""

    free = False

    def __init__(self, token_id: int) -> None:
        self.token_id = token_id
        self.calls = 0

    def propose(self, rows, num_draft_tokens) -> list[Proposal]:
        self.calls += 1
        return [Proposal([self.token_id] * k, None, DRAFT_MODEL) for k in num_draft_tokens]

    def keep(self, rows) -> None:
        pass


def test_hypothesis_drafts_while_the_draft_model_is_paused(separate_pair):
    """The hypothesis holds the target's output except a garbled stretch; the useless draft model fills
    that stretch, gets paused, and the hypothesis must still propose as soon as it realigns."""
    model = separate_pair.pair.target.model
    waveform = load_audio(ASSETS / "fr-marche.wav")
    target_alone = TranscribeOptions.of(OPTIONS, speculative=False)
    alone = list(separate_pair.transcribe_waveforms([waveform], target_alone)[0].token_ids)
    assert len(alone) >= 45
    config = model.generation_config
    garbled = [config.suppress_tokens[0]] * 10  # never the target's choice
    hypothesis = alone[:10] + garbled + alone[30:] + [config.eos_token_id]
    drafters = []

    def previous_hypothesis(rows, draft_model):
        fallback = AlwaysRejectedDraftDouble(config.suppress_tokens[0])
        drafters.append(PreviousHypothesis([hypothesis] * len(rows), fallback, model.config.vocab_size))
        return drafters[-1]

    result = separate_pair.transcribe_waveforms([waveform], target_alone, make_drafter=previous_hypothesis)[
        0
    ].result
    assert list(result.token_ids) == alone  # exact, whatever the draft
    drafter = drafters[0]
    assert drafter.fallback.calls >= 6  # the draft model filled the garbled stretch, enough to be paused
    steps = [step for step in result.steps if step.window == 0]  # a later window has its own drafter
    expected = []  # the rule: the hypothesis first, unless it has nothing here or was just rejected
    for step in steps:
        generated = [record.token_id for record in result.tokens if record.step < step.index]
        previous = result.steps[step.index - 1] if step.index else None
        just_rejected = (
            previous and expected[-1] == HYPOTHESIS and previous.n_accepted < len(previous.drafted)
        )
        found = continuation(hypothesis, generated, result.prompt_ids)
        expected.append(HYPOTHESIS if found and not just_rejected else "other")
    reused = [step.source == HYPOTHESIS for step in steps]
    assert reused == [source == HYPOTHESIS for source in expected]
    accepted_reused = sum(step.n_accepted for step, is_reused in zip(steps, reused, strict=True) if is_reused)
    print(f"{reused.count(True)} reused proposals, {accepted_reused} of their tokens accepted")
    assert reused.count(True) >= 4 and accepted_reused >= 25
    assert any(step.n_accepted == len(step.drafted) > 5 for step in steps)  # longer than the draft's k


def test_continuation_where_the_texts_agree_diverge_and_repeat():
    hypothesis = [1, 2, 3, 4, 5, 6, 99]
    assert continuation(hypothesis, [1, 2]) == [3, 4, 5, 6, 99]  # by position
    assert continuation(hypothesis, [7, 2, 3, 4]) == [5, 6, 99]  # after its last 3 tokens, in the hypothesis
    assert continuation(hypothesis, [7, 8]) == []  # too short to look up
    prompt = [50, 10, 11, 12, 13, 14]
    assert continuation(hypothesis, [7, 10, 11, 12], prompt, limit=3) == [13, 14, 7]  # then the prompt
    # the newest tokens end the hypothesis: nothing follows them there, the prompt has what does
    assert continuation([7, 1, 2, 3], [9, 1, 2, 3], [1, 2, 3, 4], limit=2) == [4, 9]
    loop = [20, 21, 22, 23, 21, 22, 23]
    assert continuation(hypothesis, loop, prompt, limit=5) == [21, 22, 23, 21, 22]  # a loop goes on
    assert continuation(hypothesis, [30, 31, 32, 30, 31], prompt) == []  # the tail itself is no earlier text
