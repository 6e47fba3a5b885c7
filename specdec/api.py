"""The Python API: `SpeculativeWhisper(draft_model, final_model).transcribe(audio)`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from specdec import longform, subtitles
from specdec.audio import MAX_LONG_SECONDS, SAMPLE_RATE, AudioError, AudioSource, load_audio
from specdec.engine import compute_types, kernels, replay
from specdec.engine.fast_draft import tune_draft
from specdec.engine.windows import MakeDrafter, decode_clips
from specdec.longform.chunked import CHUNK_BATCH_SIZE, decode_chunked
from specdec.longform.sequential import decode_sequential
from specdec.longform.speech import decode_speech
from specdec.options import DEFAULT_COMPUTE_TYPE, DecodeOptions, SpeculativeConfig, TranscribeOptions
from specdec.trace import DecodeResult
from specdec.whisper import word_times
from specdec.whisper.features import pair_features
from specdec.whisper.models import DraftSettings, ModelPair, load_pair
from specdec.whisper.tokens import TIMESTAMP_SECONDS, timestamp_begin
from specdec.whisper.word_times import Word


class BatchAudioError(AudioError):
    """Some clips of a batch could not be read; the others were transcribed and are kept here.

    `results` holds, in input order, each clip's result (as `transcribe` would have returned it) or the
    AudioError that stands in its place, so nothing already decoded is lost.
    """

    def __init__(self, results: list) -> None:
        failed = [result for result in results if isinstance(result, AudioError)]
        done = len(results) - len(failed)
        super().__init__(
            f"{len(failed)} of {len(results)} clips unreadable ({done} transcribed): {failed[0]}"
        )
        self.results = results


@dataclass(frozen=True)
class Transcription:
    """One clip's transcript with the full decoding record."""

    audio: str  # file path, or a description of an array
    text: str
    result: DecodeResult
    segments: tuple[subtitles.Cue, ...] | None = None  # in seconds of the whole file; None: no timestamps
    words: tuple[Word, ...] | None = None  # timed words (word_timestamps=True), in seconds of the whole file
    compute_type: str = "float32"  # what the target's encoder computed in (`engine.compute_types`)

    @property
    def token_ids(self) -> tuple[int, ...]:
        return self.result.token_ids

    @property
    def stats(self) -> dict:
        """The decoding's statistics (`DecodeResult.stats`: acceptance, tokens per pass, seconds, ...) and
        the compute type."""
        return {**self.result.stats(), "compute_type": self.compute_type}

    @property
    def lossless(self) -> bool:
        """The text is the target's own (False: decoded with a lossy acceptance threshold)."""
        return self.result.lossless

    KEYS = ("audio", "text", "stats", "language", "token_ids", "segments", "words", "lossless")

    def keys(self) -> tuple[str, ...]:
        """The names a result answers by, as the original design reads it (`result['text']`,
        `result['stats']['overall_acceptance_rate']`); `dict(result)` is a plain dict of them."""
        return self.KEYS

    def __getitem__(self, key: str):
        if key not in self.KEYS:
            raise KeyError(f"{key!r}: a Transcription has {', '.join(self.KEYS)}")
        return getattr(self, key)

    @property
    def language(self) -> str:
        return self.result.language

    def to_dict(self) -> dict:
        """JSON-ready: the text, the whole trace with its statistics, the timed segments (start, end,
        text, token ids; None without timestamps) in place of the trace's own `segments` (chunked
        decoding's merged token ids with the model's times, before any was filled in), and the timed
        words (None without word timestamps)."""
        segments = None if self.segments is None else [dataclasses.asdict(cue) for cue in self.segments]
        words = None if self.words is None else [dataclasses.asdict(word) for word in self.words]
        found = {"audio": self.audio, "text": self.text, **self.result.to_dict(), "segments": segments}
        return {**found, "words": words, "stats": self.stats}

    def to_srt(self, by_word: bool = False) -> str:
        """SubRip subtitles, a cue per segment (needs timestamps: `subtitles.NoTimestamps` otherwise), or
        with by_word a cue per word (needs word timestamps)."""
        return subtitles.srt(self._cues(by_word))

    def to_vtt(self, by_word: bool = False) -> str:
        """WebVTT subtitles, a cue per segment or, with by_word, per word (as `to_srt`)."""
        return subtitles.vtt(self._cues(by_word))

    def _cues(self, by_word: bool) -> tuple[subtitles.Cue, ...] | None:
        if not by_word:
            return self.segments
        if self.words is None:
            raise subtitles.NoTimestamps("Word-level subtitles", "word")
        return tuple(subtitles.Cue(word.start, word.end, word.text, ()) for word in self.words)

    def to_text(self) -> str:
        """Plain text: one segment per line with timestamps, else the whole text on one line."""
        return subtitles.plain_text(self.text, self.segments)

    def to_json(self) -> str:
        """`to_dict()` as JSON: the transcript, its segments and the full trace."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def render(self, output_format: str, by_word: bool = False) -> str:
        """The transcript in one of `subtitles.FORMATS`: "txt", "srt", "vtt" or "json" (by_word: subtitles
        with a cue per word)."""
        writers = {
            "txt": self.to_text,
            "srt": lambda: self.to_srt(by_word),
            "vtt": lambda: self.to_vtt(by_word),
            "json": self.to_json,
        }
        if output_format not in writers:
            raise ValueError(f"unknown output format {output_format!r}; choose from {', '.join(writers)}")
        return writers[output_format]()

    def save(
        self,
        directory: str | Path,
        formats: Sequence[str] = subtitles.FORMATS,
        stem: str | None = None,
        by_word: bool = False,
    ) -> list[Path]:
        """Write `stem.txt`, `stem.srt`, ... into directory (stem: the audio file's name without its
        extension; by_word: subtitles with a cue per word); every format is rendered before any file is
        written. The paths written."""
        texts = {output_format: self.render(output_format, by_word) for output_format in formats}
        return subtitles.write(texts, directory, stem or Path(self.audio).stem)


class SpeculativeWhisper:
    """A target Whisper model sped up by a draft model; output identical to the target alone."""

    def __init__(
        self,
        draft_model: str | None = "auto",
        final_model: str = "auto",
        device: str = "auto",
        dtype: torch.dtype | None = None,
        packed_kernels: bool = True,
        draft_settings: DraftSettings | None = None,
        config: SpeculativeConfig | None = None,
        cuda_graphs: bool = True,
        compute_type: str = DEFAULT_COMPUTE_TYPE,
    ) -> None:
        """Load both models (hub ids, short names such as 'tiny', local or CTranslate2 folders) and validate
        the pair. "auto": whisper-base with its self-draft on a CPU (real weights shipped in packages),
        large-v3 with tiny on a GPU. draft_model=None decodes with the target alone.

        packed_kernels: give the models' decoders oneDNN-packed weights (CPU, float32; faster steps, the
        same output; `engine.kernels.pack`, undone by `kernels.unpack(model)`).
        draft_settings: how the draft runs (int8, a restricted vocabulary, reading only the audio, pooled
        encoder frames); never changes the output. None: `fast_draft.CPU_DRAFT` for float32 on a CPU,
        the plain draft elsewhere; `DraftSettings()`: the plain draft (`engine.fast_draft.tune_draft`).
        config: the speculation settings every call decodes with unless it says otherwise (gamma,
        acceptance_threshold, temperature, use_adaptive_gamma); None: exact, greedy, adaptive k.
        cuda_graphs: on CUDA, decode in fixed shapes, each decoder step replayed as a CUDA graph (the same
        output; `engine.replay`, undone by `replay.disable(model)`): one row's steps are captured here
        (`warm_up`), those of more rows on first use. Elsewhere nothing changes.
        compute_type: what the target's encoder computes in on a CPU, as faster-whisper names it: "default"
        (as loaded: float32; on CUDA float16), "float32", "bfloat16", "int8" or "auto" (bfloat16 where the
        CPU runs it natively); the speculative output is the target alone's and generate()'s on the same
        model in each (`engine.compute_types`)."""
        self.defaults = _defaults(config)
        self.pair = load_pair(final_model, draft_model, device=device, dtype=dtype)
        if packed_kernels:
            for model in (self.pair.target, self.pair.draft):
                if model is not None:
                    kernels.pack(model.model)
        self.pair = compute_types.apply(tune_draft(self.pair, draft_settings), compute_type)
        models = [loaded.model for loaded in (self.pair.target, self.pair.draft) if loaded is not None]
        if cuda_graphs and any([replay.enable(model) for model in models]):
            self.warm_up()  # captures one row's steps

    @classmethod
    def from_pair(cls, pair: ModelPair, config: SpeculativeConfig | None = None) -> SpeculativeWhisper:
        """Wrap an already loaded pair as it is (its models are not packed: see `kernels.pack`)."""
        instance = cls.__new__(cls)
        instance.pair = pair
        instance.defaults = _defaults(config)
        return instance

    def transcribe(
        self,
        audio: AudioSource | Sequence[AudioSource],
        options: DecodeOptions | None = None,
        *,
        sample_rate: int | None = None,
        return_stats: bool = False,
        errors: str = "raise",
        **fields,
    ) -> list[str | AudioError] | list[Transcription | AudioError]:
        """Transcribe clips: paths, arrays (with sample_rate) or (sample_rate, array) tuples, up to 4 hours.

        options: a `TranscribeOptions` (how to decode and run; `DecodeOptions` alone: speculative, the
        rest as default; None: the `config` given at construction), with any of its fields given as
        keywords replacing its own (language="de", timestamps=True, speculative=False, batch_size=8,
        long_form="chunked", max_tokens=200 as max_new_tokens, ...).
        Returns the texts, or with return_stats=True the Transcriptions (text, segments, stats, trace), in
        input order. Clips are read batch_size at a time and decoded as `transcribe_waveforms` does.
        Unreadable clips never stop the others: with errors="return" each one's AudioError stands in its
        place in the list; with errors="raise" (default) a single clip raises its AudioError, and several
        raise a BatchAudioError once all the others are transcribed, with every result in its `results`.
        """
        if options is not None and not isinstance(options, DecodeOptions):
            kind = type(options).__name__
            raise TypeError(f"options must be a TranscribeOptions, not {kind} (give sample_rate= by name)")
        options = TranscribeOptions.of(options or self.defaults, **fields)
        if errors not in ("raise", "return"):
            raise ValueError(f"errors must be 'raise' or 'return', not {errors!r}")
        sources = _as_list(audio)
        results: list[Transcription | AudioError] = []
        for start in range(0, len(sources), options.batch_size):
            batch = sources[start : start + options.batch_size]
            loaded = [_load(source, sample_rate) for source in batch]
            readable = [i for i, waveform in enumerate(loaded) if not isinstance(waveform, AudioError)]
            names = [_describe(batch[i]) for i in readable]
            decoded = self.transcribe_waveforms([loaded[i] for i in readable], options, names)
            transcriptions = dict(zip(readable, decoded, strict=True))
            results += [transcriptions.get(i, waveform) for i, waveform in enumerate(loaded)]
        if not return_stats:
            results = [result if isinstance(result, AudioError) else result.text for result in results]
        failed = [result for result in results if isinstance(result, AudioError)]
        if failed and errors == "raise":
            raise failed[0] if len(results) == 1 else BatchAudioError(results)
        return results

    def transcribe_waveforms(
        self,
        waveforms: Sequence[np.ndarray],
        options: DecodeOptions | None = None,
        names: Sequence[str] | None = None,
        make_drafter: MakeDrafter | None = None,
    ) -> list[Transcription]:
        """16 kHz mono float32 waveforms -> Transcriptions, in order (options: see `transcribe`).

        Those up to 30 s are decoded batch_size at a time as one batch, each row accepting its own number
        of draft tokens (`engine.loop`); every output is the same as decoded alone. Each longer one is
        decoded long-form on its own (timestamps always on, as generate() requires): long_form
        "sequential" is Whisper's own algorithm, generate()'s output on the whole file
        (`longform.sequential`); "chunked" decodes overlapping 30 s chunks as one batch and merges them as
        transformers' ASR pipeline does (`longform.chunked`); skip_silence decodes only its speech
        (`longform.speech`). make_drafter: each batch's drafter (`engine.windows.MakeDrafter`; clips up to
        30 s and sequential long-form).
        """
        options = TranscribeOptions.of(options or self.defaults)
        names = list(names) if names is not None else ["audio"] * len(waveforms)
        transcriptions: dict[int, Transcription] = {}
        short = [i for i, waveform in enumerate(waveforms) if not longform.is_long(waveform)]
        for start in range(0, len(short), options.batch_size):
            together = short[start : start + options.batch_size]
            features = [pair_features(self.pair, waveforms[i], options.speculative) for i in together]
            results = decode_clips(self.pair, features, options, options.speculative, make_drafter)
            for i, result in zip(together, results, strict=True):
                transcriptions[i] = self.transcription(names[i], result, len(waveforms[i]) / SAMPLE_RATE)
        for i, waveform in enumerate(waveforms):
            if i not in transcriptions:
                result = self._decode_long(waveform, options, make_drafter)
                transcriptions[i] = self.transcription(names[i], result, len(waveform) / SAMPLE_RATE)
        return [transcriptions[i] for i in range(len(waveforms))]

    def _decode_long(
        self, waveform: np.ndarray, options: TranscribeOptions, make_drafter: MakeDrafter | None
    ) -> DecodeResult:
        """A waveform over 30 s, long-form as options ask."""
        pair, speculative, progress = self.pair, options.speculative, options.progress
        if options.word_timestamps and (options.skip_silence or options.long_form != "sequential"):
            raise ValueError("word timestamps work on sequential long-form (no chunks, no skipped silence)")
        if make_drafter is not None and (options.skip_silence or options.long_form != "sequential"):
            raise ValueError(
                "make_drafter works for sequential long-form only (no chunks, no skipped silence)"
            )
        chunk_batch = options.batch_size if options.batch_size > 1 else CHUNK_BATCH_SIZE
        if options.skip_silence:
            batch = options.batch_size if options.long_form != "chunked" else chunk_batch
            return decode_speech(pair, waveform, options, speculative, options.long_form, batch, progress)
        if options.long_form == "chunked":
            return decode_chunked(pair, waveform, options, speculative, chunk_batch, progress)
        return decode_sequential(pair, waveform, options, speculative, progress, make_drafter)

    def warm_up(self) -> None:
        """Run both paths once on a second of silence, so that no timed run pays first-call costs (on CUDA,
        one row's decoder steps captured as graphs among them)."""
        silence = np.zeros(SAMPLE_RATE, dtype=np.float32)
        options = DecodeOptions(language="en", max_new_tokens=4)
        for speculative in (True, False):
            self.transcribe_waveforms([silence], TranscribeOptions.of(options, speculative=speculative))

    def decode_text(self, token_ids: Sequence[int]) -> str:
        """Target ids -> text without special or timestamp tokens."""
        return self.pair.target.processor.tokenizer.decode(list(token_ids), skip_special_tokens=True).strip()

    def transcription(self, name: str, result: DecodeResult, audio_seconds: float) -> Transcription:
        """A decoding's text and, when it was decoded with timestamps, its timed segments (its audio named
        `name`, audio_seconds long)."""
        config = self.pair.target.model.generation_config
        segments = None
        if config.no_timestamps_token_id not in result.prompt_ids:
            found = subtitles.segments_of(result, timestamp_begin(config), TIMESTAMP_SECONDS)
            segments = subtitles.cues(found, self._segment_text, audio_seconds)
        words = None
        if result.token_spans is not None:
            tokenizer = self.pair.target.processor.tokenizer
            words = word_times.words(tokenizer, result.token_ids, result.token_spans, result.language)
        text = self.decode_text(result.token_ids)
        return Transcription(name, text, result, segments, words, self.pair.compute_type)

    def _segment_text(self, token_ids: Sequence[int]) -> str:
        """A segment's text as decoded, its leading space kept, so that the segments join into the text."""
        return self.pair.target.processor.tokenizer.decode(list(token_ids), skip_special_tokens=True)


def _defaults(config: SpeculativeConfig | None) -> TranscribeOptions:
    if config is not None and not isinstance(config, SpeculativeConfig):
        raise TypeError(f"config must be a SpeculativeConfig, not {type(config).__name__}")
    return TranscribeOptions.of(config.options() if config is not None else None)


def _load(source: AudioSource, sample_rate: int | None) -> np.ndarray | AudioError:
    try:
        return load_audio(source, sample_rate=sample_rate, max_seconds=MAX_LONG_SECONDS)
    except AudioError as error:
        return error


def _as_list(audio: AudioSource | Sequence[AudioSource]) -> list[AudioSource]:
    is_gradio_tuple = isinstance(audio, tuple) and len(audio) == 2 and isinstance(audio[0], int)
    if isinstance(audio, (str, Path, np.ndarray)) or is_gradio_tuple:
        return [audio]
    return list(audio)


def _describe(audio: AudioSource) -> str:
    if isinstance(audio, (str, Path)):
        return str(audio)
    array = audio[1] if isinstance(audio, tuple) else audio
    return f"array{tuple(array.shape)}"
