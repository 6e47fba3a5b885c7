"""`python -m benchmarks NAME [options]` (from a checkout): one runner for every benchmark (see --help).

tokens, batch, long and gpu are configurations of `benchmarks.ways`, every way to decode the same rows. Each
benchmark's options are its dataclass's fields, offered here as flags (the comment beside each field is its
help). The JSON report goes to --out (a folder, or the file an options class names as its OUT); the exit code
is 1 if any output differed from its reference.
"""

from __future__ import annotations

import os
import sys

# Busy-waiting OpenMP threads slow torch badly when another process shares the cores, so the benchmarks
# wait passively; cpu, e2e, stream, serve and app measure what a user meets, the runtime's default waiting.
# Read when torch loads: set before anything imports it.
if sys.argv[1:2] not in (["cpu"], ["e2e"], ["stream"], ["serve"], ["app"]):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import importlib  # noqa: E402
import inspect  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# name -> the module with its `run_and_report`, and its options dataclass
BENCHMARKS = {
    "tokens": ("benchmarks.ways", "BenchOptions"),
    "batch": ("benchmarks.ways", "BatchBenchOptions"),
    "long": ("benchmarks.ways", "LongBenchOptions"),
    "stream": ("benchmarks.stream", "StreamBenchOptions"),
    "cpu": ("benchmarks.cpu", "CpuBenchOptions"),
    "corpus": ("benchmarks.corpus", "CorpusBenchOptions"),
    "e2e": ("benchmarks.e2e", "E2eBenchOptions"),
    "serve": ("benchmarks.serve", "ServeBenchOptions"),
    "gpu": ("benchmarks.ways", "GpuBenchOptions"),
    "app": ("benchmarks.serve", "AppCheckOptions"),
    "profile": ("benchmarks.profile", "ProfileOptions"),
}
TYPES = {"int": int, "float": float, "str": str, "Path": Path}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="benchmark", required=True, metavar="NAME")
    for name, (module, options_class) in BENCHMARKS.items():
        options_type = getattr(importlib.import_module(module), options_class)
        _add_options(commands.add_parser(name, help=_help(options_type)), options_type)
    args = parser.parse_args(argv)
    module, options_class = BENCHMARKS[args.benchmark]
    options_type = getattr(importlib.import_module(module), options_class)
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(options_type)}
    options = options_type(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
    command = "python -m benchmarks " + " ".join(argv)
    report = importlib.import_module(module).run_and_report(options, Path(args.out), command)
    return 0 if report["identical"] else 1


def _add_options(command: argparse.ArgumentParser, options_type: type) -> None:
    helps = _field_comments(options_type)
    for field in dataclasses.fields(options_type):
        flag = "--" + field.name.replace("_", "-")
        default = field.default
        annotation = str(field.type)
        help_text = f"{helps.get(field.name, '')} (default: {default})"
        if annotation == "bool":
            command.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
            continue
        kind = next((t for name, t in TYPES.items() if re.search(rf"\b{name}\b", annotation)), str)
        nargs = "+" if annotation.startswith("tuple") else None
        command.add_argument(flag, type=kind, nargs=nargs, default=default, help=help_text)
    out = getattr(options_type, "OUT", None)  # a benchmark whose record is kept names its file
    if out is None:
        command.add_argument("--out", default="bench-results", help="folder for the JSON (and HTML) report")
    else:
        command.add_argument(
            "--out", default=out, help=f"the JSON report, the HTML beside it (default: {out})"
        )


def _field_comments(options_type: type) -> dict[str, str]:
    """Each field's `# comment` in the dataclass's source (or a base's): its help."""
    found = {}
    for cls in reversed(options_type.__mro__[:-1]):
        found.update(re.findall(r"^\s+(\w+): [^=\n]+=[^#\n]*#\s*(.+)$", inspect.getsource(cls), flags=re.M))
    return found


def _help(options_type: type) -> str:
    """The first line of the options' docstring (a preset's), else of its module's."""
    doc = options_type.__doc__ or ""
    if doc.startswith(f"{options_type.__name__}("):  # the dataclass's own, not written
        doc = sys.modules[options_type.__module__].__doc__ or ""
    return doc.strip().splitlines()[0].split(": ", 1)[-1]


if __name__ == "__main__":
    sys.exit(main())
