"""Previous-text prompts (generate()'s prompt_ids), which live transcription passes between windows."""

from __future__ import annotations

import pytest
import torch
from test_pairs import CLIPS

from specdec.options import DecodeOptions

PREVIOUS_TEXT = " The weather report follows, with the forecast for tomorrow."


@pytest.mark.parametrize("timestamps", [False, True], ids=["text", "timestamps"])
def test_prompted_decoding_matches_generate_and_the_draft_does_not_change_it(pair_of_each_kind, timestamps):
    _, whisper = pair_of_each_kind
    target = whisper.pair.target
    prompt_ids = tuple(target.processor.tokenizer.encode(PREVIOUS_TEXT, add_special_tokens=False))
    options = DecodeOptions(language="en", timestamps=timestamps, prompt_ids=prompt_ids, max_new_tokens=40)
    waveform = CLIPS["chirp-4s"]
    speculative = whisper.transcribe_waveform(waveform, options)
    baseline = whisper.transcribe_waveform(waveform, options, speculative=False)
    assert speculative.token_ids == baseline.token_ids
    assert 0 < speculative.result.acceptance_rate < 1
    prev_sot = target.model.generation_config.prev_sot_token_id
    assert speculative.result.prompt_ids[: len(prompt_ids) + 1] == (prev_sot, *prompt_ids)

    features = target.processor.feature_extractor(waveform, sampling_rate=16_000, return_tensors="pt")
    with torch.inference_mode():
        output = target.model.generate(
            features.input_features, language="en", return_timestamps=timestamps, max_new_tokens=40,
            prompt_ids=torch.tensor([prev_sot, *prompt_ids]),
        )  # fmt: skip
    sequence = (output["sequences"] if isinstance(output, dict) else output)[0].tolist()
    eos = target.model.generation_config.eos_token_id
    while sequence and sequence[-1] == eos:
        sequence.pop()
    assert list(baseline.token_ids) == sequence
