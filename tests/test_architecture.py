"""The package's shape, read from its own imports (docs/architecture.md): wings with one-way imports.

base (options, request, trace, audio, wer, internals)  <-  whisper/  <-  engine/  <-  longform/  <-  api
<-  streaming/  <-  corpus/  <-  cli, app/ ;  distill/ on whisper/ and engine/, for cli ;  scheduler on
longform/, for app/ ;  benchmarks/ (outside the package) on top, through public interfaces.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "specdec"
BASE = {
    "specdec",
    "specdec.options",
    "specdec.request",
    "specdec.trace",
    "specdec.audio",
    "specdec.media",
    "specdec.wer",
    "specdec.subtitles",
    "specdec.vad",
    "specdec.internals",
}
# a wing may import itself, the base, and the wings listed for it
ALLOWED = {
    "whisper": {"whisper"},
    "engine": {"whisper", "engine"},
    "longform": {"whisper", "engine", "longform"},
    "api": {"whisper", "engine", "longform"},
    "streaming": {"whisper", "engine", "longform", "api", "streaming"},
    "corpus": {"whisper", "engine", "longform", "api", "corpus"},
    "distill": {"whisper", "engine", "distill"},
    "scheduler": {"whisper", "engine", "longform"},
    "cli": {"whisper", "engine", "longform", "api", "streaming", "corpus", "distill"},
    "app": {"whisper", "engine", "longform", "api", "streaming", "scheduler", "app"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The specdec and benchmarks modules a file imports (at any depth, type-checking ones included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in ("specdec", "benchmarks")}


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def wing(name: str) -> str | None:
    """'engine' for specdec.engine.loop; None for the base modules."""
    if name in BASE or name.split(".")[:2] == ["specdec", "__main__"]:
        return None
    return name.split(".")[1]


def test_each_wing_imports_only_the_wings_below_it():
    known = modules()
    for name, path in known.items():
        own = wing(name)
        for imported in imports(path):
            target = next((m for m in (imported, imported.rsplit(".", 1)[0]) if m in known), None)
            assert not imported.startswith("benchmarks"), f"{name} imports the benchmarks"
            if own is None or target is None or target in BASE:
                continue
            assert wing(target) in ALLOWED[own], f"{name} ({own}) imports {target} ({wing(target)})"


def test_no_module_imports_another_that_imports_it_back():
    known = modules()
    graph = {
        name: {m for i in imports(path) for m in (i, i.rsplit(".", 1)[0]) if m in known and m != name}
        for name, path in known.items()
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in graph[name]:
            assert state.get(target) != 1, "import cycle: " + " -> ".join([*path, name, target])
            if target not in state:
                visit(target, [*path, name])
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name, [])


def test_benchmarks_use_no_private_engine_names():
    """Benchmarks plug in through public interfaces: no `_private` name of specdec is imported."""
    for path in (ROOT / "benchmarks").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specdec"):
                private = [alias.name for alias in node.names if alias.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


def test_the_engines_map_names_every_module_it_holds():
    """engine/__init__.py's docstring is the engine's map: a module missing from it is a room no newcomer
    finds."""
    import specdec.engine

    held = {path.stem for path in (PACKAGE / "engine").glob("*.py") if path.stem != "__init__"}
    named = set(re.findall(r"\b\w+\b", specdec.engine.__doc__))
    assert held - named == set()
