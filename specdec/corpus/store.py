"""The output folder of a corpus run, written so that a crash at any moment loses no finished row and
never leaves half of one.

    DIR/rows/part-*.jsonl   the journal: each part holds whole rows, written to a temporary file, synced
                            and renamed into place (a rename is atomic), as the rows come in
    DIR/transcripts.jsonl   one row per input file, in input order, written the same way at the end
    DIR/summary.json        the run's figures, likewise

A rerun reads the journal back (the newest row of each path and key wins) and skips what it holds
(`rows.DoneRows`). At the end of a run the journal is compacted into one part: the new part is in place
before the old ones go, so a crash in between leaves duplicates, which the next read folds together. One
run at a time may write a folder.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from specdec.corpus.summary import Summary

TRANSCRIPTS = "transcripts.jsonl"
SUMMARY = "summary.json"
JOURNAL = "rows"


class CorpusStore:
    """An output folder, locked for the life of the object (`close`, or use it as a context manager)."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)
        self.journal = self.folder / JOURNAL
        self.journal.mkdir(parents=True, exist_ok=True)
        self._lock = (self.folder / ".lock").open("w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise ValueError(f"another corpus run is writing to {self.folder}") from None
        self._parts_written = 0

    def __enter__(self) -> CorpusStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._lock.close()  # releases the lock

    def rows(self) -> list[dict]:
        """Every row in the journal that has a key: the newest of each path and key (two paths with the
        same bytes have a row each)."""
        found: dict[tuple[str, str], dict] = {}
        for part in self._parts():
            for line in part.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                if row.get("key"):
                    found[row["audio"], row["key"]] = row
        return list(found.values())

    def append(self, rows: Sequence[dict]) -> None:
        """Add rows to the journal as one new part (nothing, for no rows)."""
        if rows:
            self._parts_written += 1
            name = f"part-{time.time_ns()}-{os.getpid()}-{self._parts_written:06d}.jsonl"
            write_atomically(self.journal / name, _jsonl(rows))

    def finish(self, rows: Sequence[dict], summary: Summary) -> None:
        """The run's transcripts (one row per input file, in order) and summary; then compact the journal."""
        write_atomically(self.folder / TRANSCRIPTS, _jsonl(rows))
        write_atomically(self.folder / SUMMARY, json.dumps(summary.to_dict(), indent=1) + "\n")
        old_parts = self._parts()
        self.append(self.rows())
        for part in old_parts:
            part.unlink()

    def _parts(self) -> list[Path]:
        """The journal's parts, oldest first (their names start with the time they were written)."""
        return sorted(self.journal.glob("part-*.jsonl"))


def read_rows(path: str | os.PathLike) -> list[dict]:
    """The rows of a JSONL file (transcripts.jsonl)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


def write_atomically(path: Path, text: str) -> None:
    """Write a file whole or not at all: a hidden temporary file, synced, then renamed over path."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself survives a power cut
    finally:
        os.close(directory)


def _jsonl(rows: Iterable[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
