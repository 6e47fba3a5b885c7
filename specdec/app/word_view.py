"""The page's timed words: the clip's own player, and each word a button that plays the audio from it; the
word being played is highlighted. The words come from the speculative transcript (`Transcription.words`,
the target's own alignment), the audio from the clip the page decoded, served by Gradio's file route."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence
from urllib.parse import quote

from specdec.whisper.word_times import Word

STYLE = """<style>
.specdec-words { line-height: 2.0; font-size: 1.05rem; margin-top: 0.4em; }
.specdec-words button.specdec-word { all: unset; cursor: pointer; border-radius: 4px; padding: 0 2px; }
.specdec-words button.specdec-word:hover { background: #e0e7ff; }
.specdec-words button.specdec-word.playing { background: #fde68a; }
.specdec-player { width: 100%; margin-top: 0.3em; }
</style>"""

# js_on_load of the words' gr.HTML (`element`: its root, kept while its value changes): a click on a word
# plays the clip from the word's start; while it plays, the word at the current time is highlighted
# (media events do not bubble, so the listener catches them on their way down)
JS = """
element.addEventListener('click', (event) => {
  const word = event.target.closest('.specdec-word');
  const player = element.querySelector('audio.specdec-player');
  if (!word || !player) return;
  player.currentTime = parseFloat(word.dataset.start);
  player.play();
});
element.addEventListener('timeupdate', (event) => {
  if (!event.target.classList || !event.target.classList.contains('specdec-player')) return;
  const now = event.target.currentTime;
  for (const word of element.querySelectorAll('.specdec-word')) {
    word.classList.toggle('playing', now >= +word.dataset.start && now < +word.dataset.end);
  }
}, true);
"""


def word_dicts(words: Sequence[Word] | None) -> list[dict] | None:
    """Words as the page's details (JSON) give them: start, end and text."""
    return None if words is None else [dataclasses.asdict(word) for word in words]


def words_html(words: Sequence[dict] | None, audio_path: str | None) -> str:
    """The player and the words (`word_dicts`) as buttons (empty without word timestamps); audio_path: the
    decoded clip, a file Gradio serves (an upload, a recording or an example)."""
    if not words or not audio_path:
        return ""
    source = f"gradio_api/file={quote(audio_path)}"
    buttons = "".join(
        f'<button class="specdec-word" data-start="{word["start"]:.2f}" data-end="{word["end"]:.2f}" '
        f'title="{word["start"]:.2f}-{word["end"]:.2f} s">{html.escape(word["text"])}</button>'
        for word in words
    )
    player = f'<audio class="specdec-player" controls preload="metadata" src="{source}"></audio>'
    hint = "<small>Click a word to play the clip from it.</small>"
    return f'{STYLE}{player}{hint}<div class="specdec-words">{buttons}</div>'
