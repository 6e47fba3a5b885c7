"""The Compare badge's line for a run where speculation lost: slower end to end than the target alone, and
why, read from the two traces' numbers (the draft proposed nothing; its tokens were rarely accepted; it
cost more than the target passes it saved; or the encoders, which no draft shortens, took the time).
"""

from __future__ import annotations

from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specdec.trace import DRAFT_ENCODER, DecodeResult

# Below this share of accepted draft tokens a draft saves less than one target pass in two of those it
# judges: too few to pay for its own passes at the draft costs the app offers
LOW_ACCEPTANCE = 0.5


def slower_line(baseline: DecodeResult, speculative: DecodeResult) -> str:
    """'Slower here (0.58x): ...' when the speculative run took longer end to end than the target alone,
    with the reason its numbers give; '' otherwise."""
    if not (0 < baseline.total_seconds < speculative.total_seconds):
        return ""
    ratio = baseline.total_seconds / speculative.total_seconds
    return f"Slower here ({ratio:.2f}x): {_reason(baseline, speculative)}."


def _reason(baseline: DecodeResult, speculative: DecodeResult) -> str:
    rate = speculative.acceptance_rate
    if rate is None:
        return "the draft proposed nothing, so no target pass was saved and speculation only added its cost"
    saved = baseline.num_target_passes - speculative.num_target_passes
    passes = f"{saved} of {baseline.num_target_passes} target passes saved"
    if speculative.decode_seconds >= baseline.decode_seconds:
        if rate < LOW_ACCEPTANCE:
            return (
                f"the draft's tokens were accepted {rate:.0%} of the time ({passes}): "
                f"{_knows(speculative.language)}"
            )
        saved_seconds = baseline.verify_seconds - speculative.verify_seconds
        return (
            f"the draft's passes took {speculative.draft_seconds:.2f} s, more than the "
            f"{saved_seconds:.2f} s of target passes they saved ({rate:.0%} of its tokens accepted, {passes})"
        )
    share = speculative.encoder_and_alignment_seconds / speculative.total_seconds
    own = " (the draft has an encoder of its own)" if _has_draft_encoder(speculative) else ""
    return (
        f"the decoding was faster, but the clip is short and the encoders{own} took {share:.0%} of the run "
        f"({speculative.encoder_seconds:.2f} s against the target alone's {baseline.encoder_seconds:.2f} s), "
        "which no draft shortens"
    )


def _knows(language: str) -> str:
    if language == "en":
        return "the draft predicts this speech poorly"
    return f"the draft does not know {LANGUAGES.get(language, language).title()} well"


def _has_draft_encoder(result: DecodeResult) -> bool:
    return any(encoding.model == DRAFT_ENCODER for encoding in result.encodings)
