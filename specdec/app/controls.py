"""The page's controls: those both views share (the pair of models, the language), and each option's
control built from its one declaration (`specdec.options.option`, `specdec.request`)."""

from __future__ import annotations

import gradio as gr

from specdec import request
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


def control(name: str, **shown) -> gr.components.Component:
    """The page's control of a declared option or preset: its label, its help as the info line, its
    default, and its choices (a radio) or bounds (a slider) as declared; a switch is a checkbox, any other
    a number. `shown` overrides any of these (the page's own default, a longer info line)."""
    if name in request.PRESETS:
        preset = request.PRESETS[name]
        return gr.Checkbox(**({"value": False, "label": preset.label, "info": preset.help} | shown))
    declared = request.declared(name)
    door = declared.metadata
    keywords = {"label": door["label"], "info": door["help"], "value": declared.default} | shown
    kind = request.kind(name)
    if kind is bool:
        return gr.Checkbox(**keywords)
    if "choices" in door:
        return gr.Radio(list(door["choices"]), **keywords)
    if "bounds" in door:
        least, most, step = door["bounds"]
        return gr.Slider(least, most, step=step, **keywords)
    return gr.Number(precision=0 if kind is int else None, **keywords)


def info(name: str) -> str:
    """A declared option's help, as its control's info line shows it."""
    return request.declared(name).metadata["help"]
