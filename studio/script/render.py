"""Rendering a script: plan the lines (voices checked, unchanged lines reused), render the others a few at a
time through any synthesiser (the engine in this process, or the engine process), write one file per line
as each finishes, then join them into one track with subtitles. Audio is never all in memory at once: a
line's samples live until its file is written; the join reads the files back one by one.

Usage::

    render = ScriptRender(folder, voices, settings, model_rate=24000)
    records = render.plan(read_script(path, default_voice), resume=True)
    render.run(records, synthesize, concurrency=4, on_line=print)   # synthesize(request, cancel) -> (audio, rate)
    joined = render.join(records, subtitles=True)
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.atomic_files import atomic_write_bytes, remove_leftover_parts
from studio.audio.export import ExportFormat, resample, write_audio
from studio.request import Mode
from studio.script.assemble import Cue, Joiner, srt_text, vtt_text
from studio.script.manifest import (
    LineRecord,
    RenderSettings,
    VoicePrompt,
    line_key,
    line_seed,
    load_manifest,
    save_manifest,
)
from studio.script.parse import ScriptError, ScriptLine

Synthesizer = Callable[[object, threading.Event], tuple[np.ndarray, int]]
JOINED_STEM = "joined"
STAGING = ".resume"
SUPERSEDED = ".superseded"


@dataclass
class JoinResult:
    path: Path | None  # None when a line failed (the join would have a hole)
    seconds: float
    subtitles: list[Path]
    missing: list[int]


def line_request(line: ScriptLine, voice: VoicePrompt, seed: int | None, speed: float):
    """The engine's take for one line: instruct with an instruction, zero-shot with a transcript, else
    cross-lingual."""
    from studio.engine.protocol import Synthesize

    mode = Mode.INSTRUCT if line.instruction else Mode.ZERO_SHOT if voice.transcript else Mode.CROSS_LINGUAL
    return Synthesize(
        line.text,
        mode=mode,
        prompt_wav=voice.samples,
        prompt_sr=voice.sample_rate,
        prompt_text=voice.transcript,
        instruct=line.instruction,
        speed=speed,
        seed=seed,
        stream=False,
    )


class ScriptRender:
    def __init__(
        self,
        folder: str | os.PathLike,
        voices: Mapping[str, VoicePrompt],
        settings: RenderSettings,
        model_rate: int,
    ):
        self.folder = Path(folder)
        self.voices = {name.casefold(): voice for name, voice in voices.items()}
        self.settings = settings
        self.fmt = ExportFormat.parse(settings.format)
        self.rate = settings.sample_rate or model_rate  # 0: the rate of the first line the model makes
        if self.rate:
            self.fmt.check_rate(self.rate)
        self.lines: dict[int, ScriptLine] = {}
        self.unsaved: OSError | None = None  # why the last checkpoint could not save the manifest

    # -- planning ----------------------------------------------------------------------------------
    def voice_of(self, line: ScriptLine) -> VoicePrompt:
        try:
            return self.voices[line.voice.casefold()]
        except KeyError:
            known = ", ".join(sorted(v.name for v in self.voices.values())) or "none"
            raise ScriptError(f"unknown voice {line.voice!r} (voices: {known})", line.source_line) from None

    def file_name(self, number: int, count: int) -> str:
        return f"{number:0{max(3, len(str(count)))}d}{self.fmt.suffix}"

    def plan(self, lines: Iterable[ScriptLine], resume: bool = False) -> list[LineRecord]:
        """One record per line; every voice is checked before anything renders. With ``resume`` a line
        whose key matches a finished line of the earlier render keeps that file (moved if it moved)."""
        remove_leftover_parts(self.folder)  # files a render killed while writing left
        before = load_manifest(self.folder) if resume else []
        earlier = {r.key: r for r in before if r.done or self._written(r)}
        records = []
        for line in lines:
            voice = self.voice_of(line)
            key = line_key(line, voice, self.settings)
            seed = self._seed(line, earlier.get(key))
            self.lines[line.number] = line
            records.append(
                LineRecord(
                    line.number, voice.name, line.text, line.instruction, line.paragraph_before, seed, key
                )
            )
        if not records:
            raise ScriptError("the script has no lines to say")
        for record in records:
            record.file = self.file_name(record.number, len(records))
        self._reuse(records, earlier, before)
        # A file at a pending line's name is not this line's take: it must not be trusted by a later resume.
        for record in records:
            if not record.done:
                (self.folder / record.file).unlink(missing_ok=True)
        return records

    def _written(self, record: LineRecord) -> bool:
        """Whether a line the manifest still calls pending or failed has its whole file: a render whose
        manifest could not be saved (a full disk) wrote it. Files are renamed into place when complete, and
        `plan` removes what lies at a pending line's name, so a file found there is that line's take."""
        import soundfile as sf

        if not record.file or not record.key or not (self.folder / record.file).is_file():
            return False
        try:
            info = sf.info(self.folder / record.file)
        except (OSError, RuntimeError):  # soundfile's LibsndfileError is a RuntimeError
            return False
        if info.frames <= 0 or info.samplerate <= 0:
            return False
        record.status, record.seconds, record.error = "rendered", info.frames / info.samplerate, ""
        return True

    def _seed(self, line: ScriptLine, old: LineRecord | None) -> int:
        if self.settings.seed is not None:
            return line_seed(line, self.settings.seed)
        return old.seed if old is not None and old.seed is not None else random.randrange(2**31)

    def _reuse(
        self, records: list[LineRecord], earlier: dict[str, LineRecord], before: list[LineRecord]
    ) -> None:
        """Unchanged lines keep their files (moved to their new numbers); files of lines that changed or
        went go to ``.superseded/`` (the last take of each key), so a shorter script leaves no 051.wav
        behind, and a line put back as it was (an undone edit or removal) gets its take back from there.
        Files of another format stay."""
        staging = self.folder / STAGING  # a file may move to a name another one still holds
        if staging.is_dir():  # a render killed while moving files: they go back under their old names
            for left in staging.iterdir():
                if not (self.folder / left.name).exists():
                    os.replace(left, self.folder / left.name)
        moves, used = [], set()
        for record in records:
            old = earlier.get(record.key)
            if old is None or old.file in used or not (self.folder / old.file).is_file():
                continue
            used.add(old.file)
            moves.append((record, old))
        superseded = self.folder / SUPERSEDED
        for old in before:
            path = self.folder / old.file
            if old.file and old.file not in used and old.file.endswith(self.fmt.suffix) and path.is_file():
                superseded.mkdir(exist_ok=True)
                os.replace(path, superseded / f"{old.key}-{old.seed}{self.fmt.suffix}")
        if moves:
            staging.mkdir(exist_ok=True)
            for _record, old in moves:
                os.replace(self.folder / old.file, staging / old.file)
            for record, old in moves:
                os.replace(staging / old.file, self.folder / record.file)
                record.status, record.seconds, record.notes = "reused", old.seconds, old.notes
            staging.rmdir()
        self._bring_back(records, superseded, {record.number for record, _old in moves})

    def _bring_back(self, records: list[LineRecord], superseded: Path, placed: set[int]) -> None:
        import soundfile as sf

        for record in records:
            if record.number in placed or not superseded.is_dir():
                continue
            kept = sorted(superseded.glob(f"{record.key}-*{self.fmt.suffix}"))
            if not kept:
                continue
            seed = kept[0].name[len(record.key) + 1 : -len(self.fmt.suffix)]
            os.replace(kept[0], self.folder / record.file)
            info = sf.info(self.folder / record.file)
            record.status, record.seconds = "reused", info.frames / info.samplerate
            record.seed = int(seed) if seed.isdigit() and self.settings.seed is None else record.seed
            placed.add(record.number)
        if placed and not self.rate:  # the model's rate, as the earlier render wrote it
            first = next(r for r in records if r.number in placed)
            self.rate = sf.info(self.folder / first.file).samplerate

    # -- rendering ---------------------------------------------------------------------------------
    def run(
        self,
        records: list[LineRecord],
        synthesize: Synthesizer,
        concurrency: int = 4,
        on_line: Callable[[LineRecord], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        """Render every pending line, ``concurrency`` at a time; a line that fails is marked failed (with
        the reason) and the others go on. ``cancel`` stops at the lines in flight."""
        cancel = cancel or threading.Event()
        pending = iter([r for r in records if not r.done])
        running: dict[Future, LineRecord] = {}
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="line") as pool:
            while True:
                while len(running) < max(1, concurrency) and not cancel.is_set():
                    record = next(pending, None)
                    if record is None:
                        break
                    running[pool.submit(self.render_line, record, synthesize, cancel)] = record
                if not running:
                    return
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    record = running.pop(future)
                    if on_line is not None:
                        on_line(record)

    def render_line(self, record: LineRecord, synthesize: Synthesizer, cancel: threading.Event) -> LineRecord:
        line = self.lines[record.number]
        try:
            audio, rate = synthesize(
                line_request(line, self.voice_of(line), record.seed, self.settings.speed), cancel
            )
            if cancel.is_set():
                record.status, record.error = "pending", "stopped"
                return record
            self.finish_line(record, audio, rate)
        except Exception as exc:  # noqa: BLE001 - one line's failure is reported, the others go on
            record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"
        return record

    def finish_line(self, record: LineRecord, audio: np.ndarray, rate: int) -> None:
        """Resample, normalise and write one line's file (replacing an older take of it)."""
        from studio.audio.loudness import master

        audio = np.asarray(audio, dtype=np.float32)
        if audio.size == 0:
            raise ValueError("the model produced no audio")
        if not self.rate:
            self.fmt.check_rate(rate)
            self.rate = rate
        audio, _rate, notes = master(
            audio, rate, self.rate, self.settings.loudness_lufs, self.settings.ceiling_dbtp
        )
        result = write_audio(self.folder / record.file, audio, self.rate, self.fmt, overwrite=True)
        record.seconds, record.notes = audio.size / self.rate, notes + result.warnings
        record.status, record.error = "rendered", ""

    # -- joining -----------------------------------------------------------------------------------
    def gap_before(self, record: LineRecord) -> float:
        return self.settings.paragraph_s if record.paragraph_before else self.settings.gap_s

    def join(self, records: list[LineRecord], subtitles: bool = True) -> JoinResult:
        """``joined.EXT`` from the line files in order, each line's cue, and ``joined.srt``/``.vtt``."""
        import soundfile as sf

        from studio.audio.stream_writer import StreamingAudioWriter

        missing = [r.number for r in records if not r.done]
        if missing:
            return JoinResult(None, 0.0, [], missing)
        target = self.folder / f"{JOINED_STEM}{self.fmt.suffix}"
        with StreamingAudioWriter(target, self.rate, self.fmt) as out:
            joiner = Joiner(out.write, self.rate)
            for record in records:
                samples, rate = sf.read(self.folder / record.file, dtype="float32", always_2d=True)
                samples = resample(samples.mean(axis=1), rate, self.rate)
                record.start_s, record.end_s = joiner.add(samples, self.gap_before(record))
            frames = joiner.close()
        written = []
        if subtitles:
            cues = [Cue(r.start_s, r.end_s, r.text, r.voice) for r in records]
            for suffix, text in ((".srt", srt_text(cues)), (".vtt", vtt_text(cues))):
                path = self.folder / f"{JOINED_STEM}{suffix}"
                atomic_write_bytes(path, text.encode("utf-8"))
                written.append(path)
        return JoinResult(target, frames / self.rate, written, [])

    def save(self, records: list[LineRecord], **extra) -> Path:
        return save_manifest(self.folder, self.settings, records, {"sample_rate": self.rate, **extra})

    def checkpoint(self, records: list[LineRecord], **extra) -> bool:
        """`save`, or on a full or failing disk keep the progress in memory (`unsaved` says why) for the next
        checkpoint: the render goes on with the lines that still fit."""
        try:
            self.save(records, **extra)
        except OSError as exc:
            self.unsaved = exc
            return False
        self.unsaved = None
        return True
