"""A self-draft made by `python -m specdec distill` on the demo models: training fits the target's readings,
the draft decodes losslessly with both accepted and rejected proposals, and is refused for another target's
weights or changed bytes. (The demo target's readings are random text: no draft generalises to held-out audio
there; that is measured on the real pair, `python -m benchmarks e2e`.)"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from specdec import cli
from specdec.api import SpeculativeWhisper
from specdec.audio import SAMPLE_RATE, load_audio
from specdec.distill import data
from specdec.distill.command import recipe_changes
from specdec.distill.train import Proposable, TrainingOptions, train_draft
from specdec.engine.fast_draft import frequent_draft_ids
from specdec.options import DecodeOptions
from specdec.whisper.models import DraftKind, PairError, load_pair
from specdec.whisper.self_draft import DRAFT_FILE, RECIPE_FILE, SelfDraft, read_recipe

ASSETS = Path(__file__).parent.parent / "assets"
CLIPS = {"en": ["en-weather.wav", "en-fellow-americans.wav", "en-jfk.flac"], "de": ["de-bahnhof.wav"]}


@pytest.fixture(scope="module")
def audio_dir(tmp_path_factory) -> Path:
    """The English and German assets cut into consecutive 1.5-4 s pieces, in folders named by language."""
    folder = tmp_path_factory.mktemp("distill-audio")
    rng = np.random.default_rng(0)
    for language, names in CLIPS.items():
        (folder / language).mkdir()
        for name in names:
            audio = load_audio(ASSETS / name)
            start = 0
            while start < len(audio) - SAMPLE_RATE:
                length = int(rng.uniform(1.5, 4.0) * SAMPLE_RATE)
                piece = audio[start : start + length]
                soundfile.write(folder / language / f"{Path(name).stem}-{start}.wav", piece, SAMPLE_RATE)
                start += length
    return folder


@pytest.fixture(scope="module")
def distilled(demo_models, audio_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("self-draft")
    arguments = ["distill", str(demo_models["target"]), str(audio_dir), str(out), "--window-seconds", "4"]
    assert cli.main([*arguments, "--held-out", "0.25", "--batch-size", "4", "--epochs", "2"]) == 0
    return out


def test_training_fits_the_targets_readings(demo_models, distilled):
    """Trained on windows and measured on the same ones, the draft's agreement with the target must rise
    well above where its copied layers start: the loss points the right way."""
    readings = data.load_dataset(next((distilled / "cache").glob("*/training.pt")))
    target = load_pair(str(demo_models["target"]), None, device="cpu").target.model
    # the demo target's text is random ids, most of them past the CPU draft's 16384 most frequent
    options = TrainingOptions(epochs=1, batch_size=4, learning_rate=1e-4, patience=2, vocabulary=None)
    _, history = train_draft(target, readings, readings, options)
    agreements = [round(a.overall, 3) for a in history]  # measured 0.59 -> 0.80 (-> 0.96 a second epoch)
    assert max(agreements[1:]) > agreements[0] + 0.1, agreements


def test_a_draft_is_taught_every_token_it_may_propose_timestamps_and_end_of_text_among_them(
    demo_models, distilled
):
    """Training's tokens with a restricted vocabulary are the ones the engine's draft proposes from:
    trained on text tokens only, a draft's timestamps and end-of-text were never learnt (on real meetings
    they were a third of its misses)."""
    pair = load_pair(str(demo_models["target"]), str(distilled), device="cpu")
    student, size = pair.draft.model, 1000
    trained = torch.nonzero(Proposable.of(student, size).columns >= 0).flatten()
    proposed = frequent_draft_ids(pair.vocabulary, student.config.vocab_size, size)
    assert torch.equal(trained, proposed)
    first_timestamp = pair.target.model.generation_config.no_timestamps_token_id + 1
    specials = {student.config.eos_token_id, first_timestamp, student.config.vocab_size - 1}
    assert specials <= set(trained.tolist())


def test_distill_writes_the_draft_and_its_recipe(distilled):
    recipe = json.loads((distilled / RECIPE_FILE).read_text())
    assert set(recipe["recipe"]["data"]["training_tokens_by_language"]) == {"en", "de"}
    assert set(recipe["recipe"]["held_out_agreement"]["draft"]) >= {"en", "de", "en+timestamps", "overall"}
    assert (distilled / DRAFT_FILE).stat().st_size < 5_000_000  # two layers of the demo target, float16


def test_self_draft_decodes_losslessly_with_accepted_and_rejected_proposals(demo_models, distilled):
    whisper = SpeculativeWhisper(str(distilled), str(demo_models["target"]), device="cpu")
    assert whisper.pair.kind is DraftKind.SHARED_ENCODER
    assert whisper.pair.draft.model.model.encoder is whisper.pair.target.model.model.encoder
    assert whisper.pair.draft.trained_languages == {"en", "de"}
    drafted = accepted = 0
    # the random target's detected language is arbitrary: the languages the draft was trained in are forced
    for name, language in (("en-jfk.flac", "en"), ("de-bahnhof.wav", "de"), ("es-biblioteca.wav", "de")):
        for options in (DecodeOptions(language=language), DecodeOptions(language=language, timestamps=True)):
            speculative = whisper.transcribe(ASSETS / name, options, return_stats=True)[0]
            alone = whisper.transcribe(ASSETS / name, options, return_stats=True, speculative=False)[0]
            assert speculative.token_ids == alone.token_ids, name
            result = speculative.result
            drafted, accepted = drafted + result.num_drafted, accepted + result.num_accepted
    assert 0 < accepted < drafted, (accepted, drafted)
    for options in (DecodeOptions(language="es"), DecodeOptions(language="de", task="translate")):
        untrained = whisper.transcribe(ASSETS / "es-biblioteca.wav", options, return_stats=True)[0]
        assert untrained.result.num_drafted == 0, options  # the target alone: the draft never learnt these


def test_self_draft_is_refused_for_another_targets_weights(demo_models, distilled, tmp_path):
    other = tmp_path / "other-target"
    shutil.copytree(demo_models["target"], other)
    pair = load_pair(str(other), None, device="cpu")
    with torch.no_grad():
        pair.target.model.model.decoder.embed_tokens.weight[7] += 1.0  # a fine-tune changes the embeddings
    pair.target.model.save_pretrained(other)
    with pytest.raises(PairError, match="was made for"):
        load_pair(str(other), str(distilled), device="cpu")


def test_a_bfloat16_target_is_told_to_load_in_float16_or_float32(demo_models, distilled):
    with pytest.raises(PairError, match="float16 or float32"):
        load_pair(str(demo_models["target"]), str(distilled), device="cpu", dtype=torch.bfloat16)


def test_self_draft_name_without_a_shipped_draft_says_how_to_make_one(demo_models):
    with pytest.raises(PairError, match="python -m specdec distill"):
        load_pair(str(demo_models["target"]), "self", device="cpu")


def test_changed_draft_weights_are_refused(demo_models, distilled, tmp_path):
    copy = tmp_path / "changed"
    shutil.copytree(distilled, copy)
    with open(copy / DRAFT_FILE, "r+b") as handle:
        handle.seek(-4, 2)
        handle.write(b"\x00\x01\x02\x03")
    with pytest.raises(PairError, match="SHA-256"):
        load_pair(str(demo_models["target"]), str(copy), device="cpu")


def test_distill_offers_the_cpu_drafts_vocabulary_and_pooling_by_default():
    from specdec.distill.command import CPU_DRAFT_FRAME_POOLING, CPU_DRAFT_VOCABULARY
    from specdec.distill.train import TrainingOptions
    from specdec.engine.fast_draft import CPU_DRAFT

    assert CPU_DRAFT.vocabulary == CPU_DRAFT_VOCABULARY
    assert CPU_DRAFT.frame_pooling == CPU_DRAFT_FRAME_POOLING == TrainingOptions().frame_pooling


@pytest.mark.parametrize(
    ("recipe", "languages"),
    [
        ({"data": {"training_tokens_by_language": {"en": 10, "de": 3}}}, {"en", "de"}),
        ({"held_out_agreement": {"draft": {"overall": 0.6, "fr": 0.4, "fr+timestamps": 0.3}}}, {"fr"}),
        ({"data": "espeak-ng sentences"}, None),  # free-form, as a hand-made recipe may be
        (None, None),
        ({"held_out_agreement": {"draft": 0.6}}, None),
    ],
)
def test_a_self_drafts_languages_come_from_its_recipe_or_are_every_language(recipe, languages):
    draft = SelfDraft("target", "digest", (0,), {"format": "specdec-self-draft-1", "recipe": recipe})
    assert draft.languages == (frozenset(languages) if languages else None)


def test_a_recording_longer_than_a_window_is_cut_into_pieces_not_left_out(tmp_path):
    """A user's recordings are often minutes long: each becomes consecutive pieces of at most a window,
    read from the file, beside short clips packed as before."""
    long_audio = np.concatenate([load_audio(ASSETS / name) for name in CLIPS["en"]] * 3)  # ~72 s
    soundfile.write(tmp_path / "meeting.flac", long_audio, SAMPLE_RATE)
    soundfile.write(tmp_path / "short.wav", long_audio[: 2 * SAMPLE_RATE], SAMPLE_RATE)
    rng = random.Random(0)
    windows = data.plan_windows(data.find_clips(tmp_path), rng)
    pieces = sorted((c for w in windows for c in w if c.path.name == "meeting.flac"), key=lambda c: c.start)
    assert len(pieces) >= 3 and pieces[0].start == 0
    assert all(piece.seconds <= data.MAX_WINDOW_SECONDS for piece in pieces)
    for before, after in zip(pieces, pieces[1:], strict=False):
        assert after.start == pytest.approx(before.start + before.seconds)
    covered = pieces[-1].start + pieces[-1].seconds
    assert len(long_audio) / SAMPLE_RATE - covered < data.MIN_PIECE_SECONDS
    assert any(c.path.name == "short.wav" for w in windows for c in w)
    middle = pieces[1]
    first = round(middle.start * SAMPLE_RATE)
    audio = data.window_audio([middle], rng)
    np.testing.assert_allclose(audio, long_audio[first : first + len(audio)], atol=1e-4)
    assert len(audio) == round(middle.seconds * SAMPLE_RATE)


def test_unreadable_files_are_left_out_with_a_message_and_the_rest_kept(demo_models, tmp_path, capsys):
    folder = tmp_path / "audio"
    folder.mkdir()
    soundfile.write(folder / "good.wav", load_audio(ASSETS / "en-weather.wav"), SAMPLE_RATE)
    (folder / "empty.wav").write_bytes(b"")
    (folder / "junk.flac").write_bytes(b"fLaC not really")
    told: list[str] = []
    windows = data.plan_windows(data.find_clips(folder), random.Random(0), on_skip=told.append)
    assert [[clip.path.name for clip in window] for window in windows] == [["good.wav"]]
    assert sorted(why.split(":")[0].rsplit("/", 1)[-1] for why in told) == ["empty.wav", "junk.flac"]
    told.clear()  # a file that breaks between planning and reading: the window keeps the others
    window = [data.Clip(folder / "junk.flac", None), windows[0][0]]
    audio = data.window_audio(window, random.Random(0), on_skip=told.append)
    assert len(audio) == len(load_audio(folder / "good.wav")) and len(told) == 1
    (folder / "good.wav").unlink()
    arguments = ["distill", str(demo_models["target"]), str(folder), str(tmp_path / "out")]
    assert cli.main(arguments) == 2
    error = capsys.readouterr().err
    assert "junk.flac" in error and "none of the 2 audio files" in error


def test_distill_resumes_a_self_draft_where_it_left_off(demo_models, audio_dir, distilled, tmp_path, capsys):
    """--resume trains a self-draft further (a user adapting the shipped one to their recordings): on the
    same held-out windows it starts at the agreement it ended with, and its recipe keeps the first one's."""
    out = tmp_path / "resumed"
    shutil.copytree(distilled / "cache", out / "cache")  # the same audio read by the same target: only trains
    arguments = ["distill", str(demo_models["target"]), str(audio_dir), str(out), "--window-seconds", "4"]
    options = ["--held-out", "0.25", "--batch-size", "4", "--epochs", "1", "--learning-rate", "1e-4"]
    assert cli.main([*arguments, *options, "--resume", str(distilled)]) == 0
    first = json.loads((distilled / RECIPE_FILE).read_text())["recipe"]
    resumed = json.loads((out / RECIPE_FILE).read_text())["recipe"]
    assert resumed["agreement_by_epoch"][0] == pytest.approx(max(first["agreement_by_epoch"]), abs=1e-4)
    assert resumed["resumed_from"]["recipe"] == first
    assert resumed["training"]["layers"] == first["training"]["layers"]
    assert "--frame-pooling" not in capsys.readouterr().err  # the same options: nothing to say
    pooled_twice = TrainingOptions(vocabulary=first["training"]["vocabulary"], frame_pooling=2)
    [change] = recipe_changes(read_recipe(distilled).recipe, pooled_twice)
    assert "trained with --frame-pooling 4; this run trains it with 2" in change
    [old, _] = recipe_changes({"recipe": {"training": {"vocabulary": None}}}, TrainingOptions())
    assert "--vocabulary all" in old  # and a recipe from before pooling was trained on every frame
    assert cli.main([*arguments, "--resume", "self"]) == 2
    assert "no self-draft ships for this target" in capsys.readouterr().err
    assert cli.main([*arguments, "--resume", str(distilled), "--layers", "0"]) == 2
    assert "leave out --layers" in capsys.readouterr().err
    assert cli.main([*arguments, "--layers", "0,99"]) == 2  # said before the long reading, not after it
    assert "decoder layers are 0 to" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a window of no audio would cut a long recording forever
        cli.main([*arguments[:-2], "--window-seconds", "0"])


def test_a_header_that_does_not_know_its_length_is_not_taken_at_its_word(tmp_path):
    """A WAV left by a recorder writing to a pipe says 0 (or a placeholder) for its data size: its length
    is found by decoding it, not read as 0 (left out) or as a huge number (cut into pieces forever)."""
    audio = load_audio(ASSETS / "en-weather.wav")
    soundfile.write(tmp_path / "streamed.wav", audio, SAMPLE_RATE, subtype="PCM_16")
    raw = bytearray((tmp_path / "streamed.wav").read_bytes())
    data_size = raw.index(b"data") + 4
    raw[data_size : data_size + 4] = (0xFFFFFFFF).to_bytes(4, "little")  # ffmpeg's placeholder
    (tmp_path / "streamed.wav").write_bytes(bytes(raw))
    told: list[str] = []
    windows = data.plan_windows(data.find_clips(tmp_path), random.Random(0), on_skip=told.append)
    assert not told and [[clip.seconds for clip in window] for window in windows] == [[None]]
    assert len(data.window_audio(windows[0], random.Random(0))) == len(audio)
