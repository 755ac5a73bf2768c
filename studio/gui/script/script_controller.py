"""Renders a script through the engine process: a few lines at a time (the engine serves takes
concurrently), each line's file written into the project the moment its take finishes, the manifest
after it, so a closed studio or a crashed engine loses at most the lines in flight. Retake gives one line a
new seed and renders only it."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PySide6.QtCore import QObject, Signal

from studio.engine.protocol import AudioChunk, EngineState, Error, State, TakeFinished, TakeQueued
from studio.script.manifest import LineRecord, RenderSettings
from studio.script.parse import ScriptLine
from studio.script.project import voices_for
from studio.script.render import ScriptRender, line_request

PROJECT_SETTINGS = RenderSettings(format="wav16")
ENGINE_GONE = (
    "take lost:",
    "the engine is not running",
)  # the client's words when the engine went away  # lossless in the project; exports convert


@dataclass
class _InFlight:
    record: LineRecord
    chunks: list[np.ndarray] = field(default_factory=list)
    rate: int = 0


class ScriptController(QObject):
    sig_line = Signal(object)  # a LineRecord whose status changed
    sig_progress = Signal(int, int)  # lines done (rendered, reused or failed), lines in the render
    sig_finished = Signal(str)  # a summary: the render ended (or stopped)
    sig_message = Signal(str)

    def __init__(self, bridge, library, parent: QObject | None = None, concurrency: int = 4):
        super().__init__(parent)
        self.bridge, self.library = bridge, library
        self.concurrency = concurrency
        self.render: ScriptRender | None = None
        self.records: list[LineRecord] = []
        self.queue: list[LineRecord] = []
        self.inflight: dict[str, _InFlight] = {}
        self.started_at = 0.0
        self.run_lines: set[int] = set()  # the lines the last run sent to the engine
        self.engine_down = False  # crashed or stopped: nothing is sent until it is ready again
        bridge.sig_take_queued.connect(self._on_queued)
        bridge.sig_chunk.connect(self._on_chunk)
        bridge.sig_take_finished.connect(self._on_finished)
        bridge.sig_error.connect(self._on_error)
        bridge.sig_state_changed.connect(self._on_state)

    @property
    def busy(self) -> bool:
        return bool(self.inflight or self.queue)

    def plan(self, folder: Path, lines: list[ScriptLine]) -> list[LineRecord]:
        """The render's records (voices checked, unchanged lines reused from the project); raises
        ScriptError for an empty script or an unknown voice."""
        voices = voices_for({line.voice for line in lines}, self.library)
        self.render = ScriptRender(folder, voices, PROJECT_SETTINGS, model_rate=0)
        self.records = self.render.plan(lines, resume=True)
        self.render.save(self.records)
        return self.records

    def render_all(self, folder: Path, lines: list[ScriptLine]) -> list[LineRecord]:
        records = self.plan(folder, lines)
        self.queue = [r for r in records if not r.done]
        self._begin_run()
        for record in self.queue:
            record.status = "queued"
            self.sig_line.emit(record)
        self._report_progress()
        self.dispatch()
        return records

    def retake(self, number: int) -> None:
        """A new seed for line ``number``; only it renders again (the others keep their files)."""
        record = next((r for r in self.records if r.number == number), None)
        if record is None or record.status in ("queued", "waiting", "rendering"):
            return
        record.seed, record.status, record.error = random.randrange(2**31), "queued", ""
        if not self.busy:
            self._begin_run()
        self.queue.append(record)
        self.sig_line.emit(record)
        self.dispatch()

    def _begin_run(self) -> None:
        self.started_at, self.run_lines = time.monotonic(), set()

    def stop(self) -> None:
        for record in self.queue:
            record.status = "pending"
            self.sig_line.emit(record)
        self.queue = []
        for request_id in list(self.inflight):
            self.bridge.cancel(request_id)

    # -- engine events -----------------------------------------------------------------------------
    def dispatch(self) -> None:
        while self.queue and len(self.inflight) < self.concurrency and not self.engine_down:
            record = self.queue.pop(0)
            line = self.render.lines[record.number]
            try:
                request = line_request(line, self.render.voice_of(line), record.seed, PROJECT_SETTINGS.speed)
            except ValueError as exc:  # a line the engine would refuse (an empty instruction...)
                self._fail(record, str(exc))
                continue
            record.status = "rendering"
            self.run_lines.add(record.number)
            self.inflight[request.request_id] = _InFlight(record)
            self.sig_line.emit(record)
            self.bridge.synthesize(request)

    def _on_queued(self, queued: TakeQueued) -> None:
        """The line's take waits for GPU memory other takes hold (to start, or to go on): its status says so
        until its next audio comes."""
        take = self.inflight.get(queued.request_id)
        if take is not None:
            take.record.status = "waiting"
            self.sig_line.emit(take.record)

    def _on_chunk(self, chunk: AudioChunk) -> None:
        take = self.inflight.get(chunk.request_id)
        if take is not None:
            take.chunks.append(np.asarray(chunk.samples, dtype=np.float32))
            take.rate = int(chunk.sample_rate)
            if take.record.status == "waiting":
                take.record.status = "rendering"
                self.sig_line.emit(take.record)

    def _on_finished(self, finished: TakeFinished) -> None:
        take = self.inflight.pop(finished.request_id, None)
        if take is None:
            return
        record = take.record
        if finished.stats.cancelled or not take.chunks:
            record.status, record.error = (
                ("pending", "") if finished.stats.cancelled else ("failed", "no audio")
            )
        else:
            try:
                self.render.finish_line(record, np.concatenate(take.chunks), take.rate)
            except Exception as exc:  # noqa: BLE001 - a full disk: this line failed, say why, go on
                record.status, record.error = "failed", str(exc)
        self._line_done(record)

    def _on_error(self, error: Error) -> None:
        if error.request_id is None:
            return  # the engine itself: its state change ends the lines in flight
        take = self.inflight.pop(error.request_id, None)
        if take is None:
            return
        if error.message.startswith(ENGINE_GONE):  # not this line's fault: the rest wait for the engine
            self.engine_down = True
            self.stop()
        self._fail(take.record, error.message)

    def _on_state(self, state: State) -> None:
        if state.state in (EngineState.READY, EngineState.BUSY):
            self.engine_down = False
        elif state.state in (EngineState.CRASHED, EngineState.STOPPED, EngineState.ERROR):
            self.engine_down = True
            for take in list(self.inflight.values()):
                self._fail(take.record, f"the engine {state.state.value} during this line")
            self.inflight.clear()
            self.stop()

    def _fail(self, record: LineRecord, reason: str) -> None:
        record.status, record.error = "failed", reason
        self._line_done(record)

    def _line_done(self, record: LineRecord) -> None:
        self.sig_line.emit(record)
        try:
            self.render.save(self.records)
        except OSError as exc:
            self.sig_message.emit(f"Could not save the script's manifest: {exc}")
        self._report_progress()
        self.dispatch()
        if not self.busy:
            self.sig_finished.emit(self.summary())

    def _report_progress(self) -> None:
        done = sum(r.status in ("rendered", "reused", "failed") for r in self.records)
        self.sig_progress.emit(done, len(self.records))

    def summary(self) -> str:
        """What the last run did: lines rendered (and how fast), unchanged, failed, not rendered."""
        ran = [r for r in self.records if r.number in self.run_lines]
        rendered = sum(r.status == "rendered" for r in ran)
        took = time.monotonic() - self.started_at
        text = f"{rendered} line(s) rendered in {took:.1f} s"
        unchanged = sum(r.status == "reused" for r in self.records)
        text += f", {unchanged} unchanged" if unchanged else ""
        failed = [r for r in self.records if r.status == "failed"]
        if failed:
            text += "; failed: " + "; ".join(f"line {r.number} ({r.error})" for r in failed)
        waiting = sum(r.status == "pending" for r in self.records)
        return text + (f"; {waiting} not rendered (stopped)" if waiting else "")
