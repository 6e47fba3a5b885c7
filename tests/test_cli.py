"""The command-line contract: the first tests run `python -m specdec` as a user runs it (a subprocess, so
the entry point, its exit status and what it imports); the rest call the same `main(argv)` in-process (no
interpreter start-up per test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specdec import cli
from specdec.api import Transcription
from specdec.trace import TARGET_ENCODER, DecodeResult, Encoding

# what a command loads when it runs; asking for help loads none of them
HEAVY_LIBRARIES = ("torch", "transformers", "gradio", "ray", "silero_vad", "plotly", "pandas", "scipy")
# `python -m specdec ... --help` for each command, in one interpreter, then the heavy libraries it loaded
HELP_SCRIPT = """
import runpy, sys
heavy = sys.argv[1:]
for command in ([], ["transcribe"], ["stream"], ["corpus"], ["import-ct2"], ["demo-models"]):
    sys.argv = ["specdec", *command, "--help"]
    try:
        runpy.run_module("specdec", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        assert stop.code == 0, (command, stop.code)
print(" ".join(name for name in heavy if name in sys.modules), file=sys.stderr)
"""


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdec", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_help_loads_no_heavy_library():
    """`--help` answers at once: torch, transformers, Gradio and Ray load only when a command runs."""
    result = subprocess.run(
        [sys.executable, "-c", HELP_SCRIPT, *HEAVY_LIBRARIES],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage: python -m specdec" in result.stdout and "--num-draft-tokens" in result.stdout
    assert result.stderr.split() == []


def test_transcribe_json_compare_with_a_bad_file_in_the_middle(demo_models, tmp_path):
    rng = np.random.default_rng(0)
    good = tmp_path / "stereo-44k.flac"
    sf.write(good, 0.1 * rng.standard_normal((44_100 * 3, 2)), 44_100)
    bad = tmp_path / "not-audio.wav"
    bad.write_text("this is not audio")
    other = tmp_path / "mono-8k.wav"
    sf.write(other, 0.1 * rng.standard_normal(8_000 * 2), 8_000)
    result = run_cli(
        "transcribe", str(good), str(bad), str(other),
        "--target", str(demo_models["target"]), "--draft", str(demo_models["draft-separate"]),
        "--language", "en", "--max-new-tokens", "30", "--compare", "--json", "--device", "cpu",
    )  # fmt: skip
    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("specdec: error:")]
    assert len(error_lines) == 1 and "not-audio.wav" in error_lines[0]
    assert "Traceback" not in result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["audio"] for r in records] == [str(good), str(other)]
    for record in records:
        assert record["identical"] is True
        assert record["speculative"]["token_ids"] == record["baseline"]["token_ids"]
        assert record["speculative"]["text"] == record["baseline"]["text"]
        assert set(record["speculative"]) >= {"text", "token_ids", "seconds", "acceptance_rate", "steps"}
        assert all(t < 50257 or t > 50364 for t in record["speculative"]["token_ids"])  # no prompt, no eot
        assert {"drafted", "n_accepted", "target_token"} <= set(record["speculative"]["steps"][0])


def test_timestamps_and_text_output(demo_models, tmp_path, capsys):
    clip = tmp_path / "clip.wav"
    sf.write(clip, 0.1 * np.random.default_rng(1).standard_normal(16_000 * 2), 16_000)
    exit_code = cli.main([
        "transcribe", str(clip), "--target", str(demo_models["target"]), "--device", "cpu",
        "--draft", str(demo_models["draft-shared"]), "--timestamps", "--max-new-tokens", "20", "--compare",
    ])  # fmt: skip
    output = capsys.readouterr()
    assert exit_code == 0, output.err
    assert "output identical" in output.out and "acceptance" in output.out


def test_bad_model_is_one_line_and_exit_2(tmp_path, capsys):
    exit_code = cli.main(["transcribe", str(tmp_path / "x.wav"), "--target", str(tmp_path / "missing")])
    error = capsys.readouterr().err
    assert exit_code == cli.EXIT_BAD_SETUP == 2
    assert error.strip().count("\n") == 0 and "no model folder" in error


def test_demo_models_command_writes_three_checkpoints(tmp_path, capsys):
    assert cli.main(["demo-models", str(tmp_path)]) == 0, capsys.readouterr().err
    for name in ("target", "draft-separate", "draft-shared"):
        assert (tmp_path / name / "config.json").exists()
        assert (tmp_path / name / "generation_config.json").exists()


def test_detect_no_speech_leaves_a_tone_empty(real_models, tmp_path, capsys):
    """A 440 Hz tone is " you" to whisper-base, as to generate(); with Whisper's no-speech rule (off by
    default, as in generate()) the window is judged no speech and the CLI says so."""
    tone = tmp_path / "tone.wav"
    sf.write(tone, 0.3 * np.sin(2 * np.pi * 440 * np.arange(16_000 * 3) / 16_000), 16_000)
    pair = ["--target", str(real_models["base"]), "--draft", str(real_models["tiny.en"]), "--device", "cpu"]
    outputs = {}
    for flags in ([], ["--detect-no-speech"]):
        exit_code = cli.main(["transcribe", str(tone), "--json", *pair, *flags])
        outputs[bool(flags)] = json.loads(capsys.readouterr().out)
        assert exit_code == 0
    spoken, judged = outputs[False]["speculative"], outputs[True]["speculative"]
    assert spoken["text"].strip() and not spoken["no_speech"]
    assert judged["text"] == "" and judged["no_speech"]
    exit_code = cli.main(["transcribe", str(tone), *pair, "--no-speech-threshold", "0.6"])
    assert exit_code == 2 and "needs logprob_threshold" in capsys.readouterr().err


def test_word_timestamps_print_and_come_in_json(real_models, capsys):
    """--word-timestamps on real speech: a line per word with its times, and the same words in --json."""
    clip = Path(__file__).parent.parent / "assets" / "en-jfk.flac"
    pair = ["--target", str(real_models["base"]), "--draft", "self", "--device", "cpu", "--word-timestamps"]
    assert cli.main(["transcribe", str(clip), *pair]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  [  5.76 ->   6.24] country" in lines
    assert cli.main(["transcribe", str(clip), *pair, "--json"]) == 0
    words = json.loads(capsys.readouterr().out)["speculative"]["words"]
    assert {"start": 5.76, "end": 6.24, "text": " country"} in words and len(words) == 22


def test_word_subtitles_need_word_timestamps(tmp_path, capsys):
    clip = str(Path(__file__).parent.parent / "assets" / "en-jfk.flac")
    assert cli.main(["transcribe", clip, "--word-subtitles", "--output-format", "srt"]) == 2
    assert "--word-subtitles needs --word-timestamps" in capsys.readouterr().err
    assert cli.main(["transcribe", clip, "--word-subtitles", "--word-timestamps"]) == 2
    assert "add --output-format srt or vtt" in capsys.readouterr().err


def test_the_compare_line_says_how_far_end_to_end_could_go():
    """0.6 s alone, 0.5 s speculative, 0.4 s of it the encoder: 1.20x, 1.50x with a decode taking no time."""

    def transcription(total: float) -> Transcription:
        encoding = Encoding(0, TARGET_ENCODER, 1, 0.4)
        return Transcription("a.wav", "hi", DecodeResult((1,), (), "en", (), (), (), (encoding,), total))

    report = cli.text_report(transcription(0.5), transcription(0.6))
    assert "speedup 1.20x (at most 1.50x with a decode taking no time); output identical" in report


def test_each_file_written_is_named_on_stderr(demo_models, tmp_path, monkeypatch, capsys):
    """--output-format without --output-dir writes into the current folder, and says so: each file by its
    full path on stderr (stdout keeps the transcript alone)."""
    clip = tmp_path / "clip.wav"
    sf.write(clip, 0.1 * np.random.default_rng(2).standard_normal(16_000), 16_000)
    monkeypatch.chdir(tmp_path)
    pair = ["--target", str(demo_models["target"]), "--draft", str(demo_models["draft-shared"])]
    arguments = ["transcribe", str(clip), *pair, "--device", "cpu", "--max-new-tokens", "5", "--json"]
    assert cli.main([*arguments, "--output-format", "txt"]) == 0
    printed = capsys.readouterr()
    told = [line for line in printed.err.splitlines() if line.startswith("specdec:")]  # not the progress bars
    assert told == [f"specdec: wrote {tmp_path / 'clip.txt'}"]
    assert json.loads(printed.out)["audio"] == str(clip)
    assert cli.main([*arguments, "--output-format", "json", "--output-dir", "out"]) == 0
    assert f"specdec: wrote {tmp_path / 'out' / 'clip.json'}" in capsys.readouterr().err


def test_a_device_is_named_as_torch_names_it_and_one_not_here_is_refused_clearly(monkeypatch, capsys):
    """cpu, auto, cuda and cuda:N are taken (as the app takes them); a CUDA device the machine lacks is
    refused in one line before anything loads; a name torch would not take is refused by the parser."""
    from specdec.whisper import models

    monkeypatch.setattr(cli, "SpeculativeWhisper", lambda **models: pytest.fail("models loaded"))
    monkeypatch.setattr(models.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(models.torch.cuda, "device_count", lambda: 1)
    assert str(models.pick_device("cuda:0")) == "cuda:0" and str(models.pick_device("auto")) == "cuda"
    assert cli.main(["transcribe", "clip.wav", "--device", "cuda:1"]) == cli.EXIT_BAD_SETUP
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "cuda:1 is not here: this machine has 1 CUDA device (cuda:0)" in error
    monkeypatch.setattr(models.torch.cuda, "is_available", lambda: False)
    assert str(models.pick_device("auto")) == "cpu"
    assert cli.main(["transcribe", "clip.wav", "--device", "cuda"]) == cli.EXIT_BAD_SETUP
    assert "cuda is not here: this machine has no CUDA device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["transcribe", "clip.wav", "--device", "gpu"])
    assert "device must be auto, cpu, cuda or cuda:N" in capsys.readouterr().err
