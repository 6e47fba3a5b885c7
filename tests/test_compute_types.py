"""Compute types: the target's encoder in bfloat16 or int8, and speculation still exact within each.

In each compute type the speculative output is, token for token, the target alone's and `generate()`'s on
the same model (its encoder converted), on the demo models of both encoder kinds (drafts accepted and
rejected) and on the real pair with its shipped self-draft; float32 leaves the pair as loaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from test_lossless import CLIPS, _generate

import app
from specdec import cli
from specdec.api import SpeculativeWhisper
from specdec.app.openai_schema import model_ids
from specdec.app.store import ModelStore, demo_pairs, offer_bfloat16, store_summary
from specdec.audio import load_audio
from specdec.corpus.command import corpus_options
from specdec.corpus.run import CorpusOptions
from specdec.engine import compute_types
from specdec.options import DEFAULT_COMPUTE_TYPE, DecodeOptions, TranscribeOptions

ASSETS = Path(__file__).parent.parent / "assets"
OPTIONS = DecodeOptions(language="en", max_new_tokens=24)


def test_what_each_compute_type_means(tmp_path):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert compute_types.resolve("default", cpu) == "float32"
    assert compute_types.resolve("int8", cpu) == "int8"
    assert compute_types.resolve("auto", cpu) == (
        "bfloat16" if compute_types.cpu_has_bfloat16() else "float32"
    )
    assert compute_types.resolve("default", cuda) == compute_types.resolve("auto", cuda) == "float16"
    with pytest.raises(ValueError, match="for a CPU"):
        compute_types.resolve("int8", cuda)
    with pytest.raises(ValueError, match="one of default, auto, float32, bfloat16, int8"):
        compute_types.resolve("float8", cpu)
    flags = tmp_path / "cpuinfo"
    flags.write_text("flags\t\t: fpu avx512f avx512_vnni\n")
    assert not compute_types.cpu_has_bfloat16(flags)
    flags.write_text("flags\t\t: fpu avx512f avx512_bf16\n")
    assert compute_types.cpu_has_bfloat16(flags)
    assert not compute_types.cpu_has_bfloat16(tmp_path / "missing")


@pytest.fixture(scope="module", params=["bfloat16", "int8"])
def compute_type(request) -> str:
    return request.param


@pytest.mark.parametrize("draft", ["draft-separate", "draft-shared"])
def test_speculation_is_the_target_alone_and_generate_in_each_compute_type(demo_models, compute_type, draft):
    whisper = SpeculativeWhisper(
        draft_model=str(demo_models[draft]), final_model=str(demo_models["target"]), device="cpu",
        compute_type=compute_type,
    )  # fmt: skip
    assert whisper.pair.compute_type == compute_type
    assert compute_types.encoder_compute_type(whisper.pair.target.model) == compute_type
    float32 = SpeculativeWhisper(draft_model=None, final_model=str(demo_models["target"]), device="cpu")
    accepted = rejected = 0
    for waveform in CLIPS.values():
        (speculative,) = whisper.transcribe_waveforms([waveform], OPTIONS)
        (alone,) = whisper.transcribe_waveforms([waveform], TranscribeOptions.of(OPTIONS, speculative=False))
        assert (
            list(speculative.token_ids)
            == list(alone.token_ids)
            == _generate(whisper.pair.target, waveform, OPTIONS)
        )
        accepted += speculative.result.num_accepted
        rejected += sum(s.n_accepted < len(s.drafted) for s in speculative.result.steps)
        (plain,) = float32.transcribe_waveforms([waveform], TranscribeOptions.of(OPTIONS, speculative=False))
        assert speculative.stats["compute_type"] == compute_type and plain.stats["compute_type"] == "float32"
    assert accepted > 0 and rejected > 0
    # the draft, and the model as loaded, keep their float32 encoder (a converted copy took its place)
    assert whisper.pair.draft.model.dtype == torch.float32


def test_the_real_pair_in_bfloat16_and_int8(real_models, compute_type):
    """whisper-base with its self-draft (sharing base's encoder): exact in the compute type, and its drafts
    still accepted on real English."""
    whisper = SpeculativeWhisper(
        draft_model="self", final_model=str(real_models["base"]), device="cpu", compute_type=compute_type
    )
    options = DecodeOptions(language="en")
    for name in ("en-jfk.flac", "en-weather.wav"):
        waveform = load_audio(ASSETS / name)
        (speculative,) = whisper.transcribe_waveforms([waveform], options)
        (alone,) = whisper.transcribe_waveforms([waveform], TranscribeOptions.of(options, speculative=False))
        reference = _generate(whisper.pair.target, waveform, options)
        assert list(speculative.token_ids) == list(alone.token_ids) == reference
        assert speculative.result.acceptance_rate > 0.5, name


def test_every_door_that_loads_models_takes_it(demo_models, monkeypatch):
    loaded = {}
    monkeypatch.setattr(cli, "SpeculativeWhisper", lambda **kwargs: loaded.update(kwargs), raising=False)
    args = argparse.Namespace(draft="auto", target="auto", device="cpu", compute_type="int8")
    cli._load_pair(args)
    assert loaded["compute_type"] == "int8"
    parser = cli._parser("specdec")
    assert parser.parse_args(["transcribe", "x.wav", "--compute-type", "bfloat16"]).compute_type == "bfloat16"
    corpus = parser.parse_args(["corpus", "in/", "--out", "out/", "--compute-type", "int8"])
    assert corpus_options(corpus).compute_type == "int8"
    with pytest.raises(ValueError, match="compute_type must be one of"):
        CorpusOptions(compute_type="float8")
    assert app.parse_args([]).compute_type == DEFAULT_COMPUTE_TYPE  # app.py names it before the package loads
    with pytest.raises(SystemExit, match="--compute-type must be one of"):
        app.make_store(app.parse_args(["--compute-type", "float8"]))
    store = ModelStore(demo_pairs(demo_models["target"].parent), "cpu", warm_up=False, compute_type="int8")
    whisper = store.whisper(store.default_pair)
    assert whisper.pair.compute_type == "int8" and store_summary(store).endswith("int8.")


def test_the_page_offers_the_default_pair_in_bfloat16_where_the_cpu_has_it(demo_models, monkeypatch):
    pairs = demo_pairs(demo_models["target"].parent)
    monkeypatch.setattr(compute_types, "cpu_has_bfloat16", lambda: False)
    store = ModelStore(dict(pairs), "cpu", warm_up=False)
    offer_bfloat16(store)
    assert store.pairs == pairs  # no native bfloat16: nothing more offered
    monkeypatch.setattr(compute_types, "cpu_has_bfloat16", lambda: True)
    offer_bfloat16(store)
    first, second, *_ = store.pairs
    assert second == f"{first} · encoder in bfloat16" and store.pairs[second] == store.pairs[first]
    assert store.whisper(second).pair.compute_type == "bfloat16"
    assert store.whisper(first).pair.compute_type == "float32"
    assert model_ids(store)["+".join(Path(name).name for name in pairs[first])] == first  # /v1: the server's
    already = ModelStore(dict(pairs), "cpu", warm_up=False, compute_type="bfloat16")
    offer_bfloat16(already)
    assert already.pairs == pairs
