"""`pip install .`: the wheel built from this checkout, installed into a fresh virtual environment and used
from outside the checkout, as a user would. The environment sees the packages of the interpreter running the
tests (torch and the rest are not installed again), whether that is a virtual environment or the system's, and
nothing is downloaded: the wheel is built with the setuptools already here.
"""

from __future__ import annotations

import email
import json
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a wheel built and installed: about ten seconds

ROOT = Path(__file__).parent.parent
# what the build reads from the checkout (pyproject.toml names the rest)
SOURCES = ("pyproject.toml", "requirements.txt", "README.md", "specdec")

# run from outside the checkout: the installed package's public names, its tokenizer (from the bundled
# vocabulary file) and its English normaliser (from the bundled spelling map)
USE_INSTALLED = """
import json

import specdec
from specdec import DecodeOptions, SpeculativeWhisper
from specdec.wer import normalize
from specdec.whisper.demo import V3, build_tokenizer

tokenizer = build_tokenizer(V3)
ids = tokenizer.encode(" Hello world", add_special_tokens=False)
print(json.dumps({
    "location": specdec.__file__,
    "ids": ids,
    "decoded": tokenizer.decode(ids),
    "vocabulary": len(tokenizer),
    "normalised": normalize("The colour, Mr. Smith!", "en"),
}))
"""


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def environment_site_packages(python: Path) -> Path:
    """The site-packages folder of the environment whose interpreter is `python`."""
    asked = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=python.parent)
    assert asked.returncode == 0, asked.stderr
    return Path(asked.stdout.strip())


def requirements() -> list[str]:
    lines = (line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines())
    return [line for line in lines if line]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of a copy of the checkout (the build's own files stay out of the checkout)."""
    # the build backend pyproject.toml asks for, already here: nothing to download
    pytest.importorskip("setuptools", minversion="77")
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
    built = run(*pip_wheel, "-w", out, source, cwd=source)
    assert built.returncode == 0, built.stdout + built.stderr
    return next(out.glob("specdec-*.whl"))


def test_wheel_declares_requirements_and_command(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(name.rsplit("/", 1)[0] for name in names if name.endswith(".dist-info/METADATA"))
        metadata = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        entry_points = zipfile.Path(archive, f"{info}/entry_points.txt")
        assert entry_points.exists() and "specdec = specdec.cli:main" in entry_points.read_text()
    assert metadata.get_all("Requires-Dist") == requirements()
    for asset in ("multilingual.tiktoken", "english-normalizer.json", "LICENSE-whisper-vocabulary.txt"):
        assert f"specdec/whisper/assets/{asset}" in names
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/"))]


def test_installed_package_works_outside_the_checkout(wheel, tmp_path):
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    python = environment / "bin" / "python"
    # pip (and torch, ...) come from the packages of the interpreter running the tests, after the
    # environment's own (system_site_packages would give the base interpreter's, not an outer venv's);
    # the install goes into the environment
    found_here = environment_site_packages(python)
    (found_here / "outer-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = run(python, "-m", "pip", "install", "--no-deps", "--no-index", wheel, cwd=tmp_path)
    assert install.returncode == 0, install.stdout + install.stderr

    used = run(python, "-c", USE_INSTALLED, cwd=tmp_path)
    assert used.returncode == 0, used.stderr
    found = json.loads(used.stdout)
    assert Path(found["location"]).is_relative_to(environment)  # the installed copy, not the checkout
    assert found["ids"] == [2425, 1002] and found["decoded"] == " Hello world"  # GPT-2's BPE ids
    assert found["vocabulary"] == 51866  # large-v3's: text, special and timestamp tokens
    assert found["normalised"] == "the color mister smith"

    command = environment / "bin" / "specdec"
    assert command.exists(), "no `specdec` command installed"
    helped = run(command, "transcribe", "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: specdec transcribe") and "--num-draft-tokens" in helped.stdout
