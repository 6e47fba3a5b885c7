"""Controls both views share: the pair of models and the language."""

from __future__ import annotations

import gradio as gr

from specdec.app.store import ModelStore

LANGUAGES = ["auto", "en", "de", "fr", "es", "it", "pt", "nl", "ja", "zh", "ru", "ar", "hi", "ko"]


def pair_dropdown(store: ModelStore, choices: list[tuple[str, str]]) -> gr.Dropdown:
    """The pair of models a run uses (the page's width: a pair's name is read whole)."""
    return gr.Dropdown(
        choices,
        value=store.default_pair,
        label="Models: target ← draft",
        info="A pair marked unavailable cannot be loaded here (no hub access); the bundled pair always can.",
    )
