"""What the MCP tools do, without MCP: the model (loaded once, in the background), the voice library, one take
to a file or the speakers, and a script rendered to a folder. Takes run through the engine's take runner
(`studio.runtime.runner`) and scripts through `studio.script.render`, as ``synth`` and ``render`` do.

Every refusal the caller can fix (unknown voice, empty or long text, a bad path) is a `ToolProblem` whose
message says what to change."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import numpy as np

from studio.script.parse import MAX_LINE_CHARS, ScriptError, ScriptLine
from studio.voices import VoiceLibrary

log = logging.getLogger("studio.mcp")
LOAD_WAIT_S = 300.0  # how long a tool waits for the model still loading before it says "try again"
VOICE_ADVICE = "save {them} in the studio (the voice panel) first, or use a voice that list_voices shows"


class ToolProblem(Exception):
    """A request the caller can correct; the message is what the assistant reads."""


class StudioRuntime:
    """The model and the voice library behind the tools; `start` loads the model on a thread, `close` ends it."""

    def __init__(
        self,
        model_dir: str,
        voices: VoiceLibrary,
        backend: str = "pytorch",
        fp16: bool = False,
        vllm_options: dict | None = None,
        vram_budget_gb: float = 0.0,
        out_dir: Path | None = None,
    ):
        self.model_dir, self.library, self.backend = model_dir, voices, backend
        self.load_options = {"fp16": fp16, "vllm_options": vllm_options, "vram_budget_gb": vram_budget_gb}
        self.out_dir = Path(out_dir or Path.cwd())  # where relative paths point
        self.stopping = threading.Event()  # set by `close`: takes in flight stop at their next chunk
        self._ready = threading.Event()
        self._loaded = None
        self._failure = ""
        self._started = time.monotonic()
        self._loader = threading.Thread(target=self._load, name="model-load", daemon=True)

    # -- the model -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._started = time.monotonic()
        self._loader.start()

    def _load(self) -> None:
        from studio.runtime import runner

        log.info("loading %s (%s backend)", self.model_dir, self.backend)
        try:
            self._loaded = runner.load_model(self.model_dir, self.backend, **self.load_options)
        except Exception as exc:  # noqa: BLE001 - reported by every tool that needs the model
            log.exception("the model failed to load")
            self._failure = f"{type(exc).__name__}: {exc}"
        else:
            reason = f" ({self._loaded.backend_reason})" if self._loaded.backend_reason else ""
            log.info(
                "model ready in %.1f s, %s backend%s", self._loaded.load_seconds, self._loaded.backend, reason
            )
        finally:
            self._ready.set()

    @property
    def state(self) -> str:
        """ "loading", "ready" or "failed: why"."""
        if not self._ready.is_set():
            return "loading"
        return f"failed: {self._failure}" if self._failure else "ready"

    def model(self, wait_s: float = LOAD_WAIT_S):
        """The loaded `EngineModel`, waiting up to ``wait_s`` for the load; a `ToolProblem` when it failed."""
        if not self._ready.wait(wait_s):
            waited = time.monotonic() - self._started
            raise ToolProblem(
                f"the voice model is still loading ({waited:.0f} s so far); try again in a moment"
            )
        if self._loaded is None:
            raise ToolProblem(f"the voice model failed to load: {self._failure}")
        return self._loaded

    def close(self) -> None:
        """Stop takes in flight, wait for a load under way, and shut the model down."""
        self.stopping.set()
        if self._loader.is_alive():
            self._loader.join()
        if self._loaded is not None:
            self._loaded.close()
            self._loaded = None
            log.info("model closed")

    # -- voices ----------------------------------------------------------------------------------------
    def list_voices(self) -> list[dict]:
        return [
            {"name": v.name, "id": v.slug, "transcript": v.transcript, "seconds": round(v.duration_s, 2)}
            for v in self.library.list()
        ]

    def _voice(self, name: str):
        from studio.script.voices import load_voices

        if not name.strip():
            raise ToolProblem("give a voice: one of list_voices' names or ids")
        try:
            return next(iter(load_voices([name.strip()], [], self.library, advice=VOICE_ADVICE).values()))
        except ScriptError as exc:
            raise ToolProblem(str(exc)) from None

    # -- takes -----------------------------------------------------------------------------------------
    def synthesize(self, request, cancel: threading.Event | None = None) -> tuple[np.ndarray, int]:
        """One take of ``request`` (a `Synthesize`): (float32 samples, rate); the script renderer's synthesiser."""
        from studio.runtime import runner

        loaded = self.model()
        chunks: list[np.ndarray] = []
        runner.run_take(
            loaded.model,
            request,
            cancel=cancel or self.stopping,
            on_chunk=chunks.append,
            backend=loaded.backend,
        )
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        if audio.size == 0 and not self.stopping.is_set():
            raise ToolProblem("the model produced no audio for this text")
        return audio, runner.output_rate(loaded.model)

    def take(
        self, text: str, voice: str, instruction: str = "", speed: float = 1.0, seed: int | None = None
    ) -> tuple[np.ndarray, int]:
        """``text`` said by the saved ``voice`` (instruct mode with an ``instruction``), as one script line."""
        from studio.script.render import line_request

        text = " ".join((text or "").split())
        if not text:
            raise ToolProblem("the text is empty: give something to say")
        if len(text) > MAX_LINE_CHARS:
            raise ToolProblem(
                f"the text has {len(text):,} characters; one take says at most {MAX_LINE_CHARS:,}: "
                "split it, or use render_script with one line per sentence or paragraph"
            )
        if not 0.5 <= speed <= 2.0:
            raise ToolProblem(f"speed must be between 0.5 and 2.0, not {speed}")
        prompt = self._voice(voice)
        line = ScriptLine(1, 1, prompt.name, text, (instruction or "").strip())
        return self.synthesize(line_request(line, prompt, seed, speed))

    def speak_to_file(self, text: str, voice: str, path: str, **options) -> dict:
        """A take written to ``path`` (its suffix picks WAV, FLAC, MP3, Ogg or Opus); relative to `out_dir`."""
        from studio.audio.errors import ExportError
        from studio.commands.synth import SUFFIX_FORMATS, output_format, write_wav

        target = self._output_path(path)
        try:
            output_format(target)
        except ValueError:
            raise ToolProblem(
                f"path {target.name!r}: end it in {', '.join(SUFFIX_FORMATS)} to pick the format"
            ) from None
        audio, rate = self.take(text, voice, **options)
        if self.stopping.is_set():
            raise ToolProblem("the server is shutting down")
        try:
            warnings = write_wav(target, audio, rate)
        except (OSError, ExportError) as exc:  # DiskError too: a folder that cannot be made or written
            raise ToolProblem(f"cannot write {target}: {exc}") from None
        return {
            "path": str(target),
            "seconds": round(audio.size / rate, 3),
            "sample_rate": rate,
            "warnings": warnings,
        }

    def speak_to_speakers(self, text: str, voice: str, **options) -> dict:
        from studio.mcp.speakers import NoSpeakers, output_device, play

        advice = "; use speak_to_file to write the take to a file instead"
        try:
            output_device()  # said before the take is made
            audio, rate = self.take(text, voice, **options)
            play(audio, rate)
        except NoSpeakers as exc:
            raise ToolProblem(f"cannot play here: {exc}{advice}") from None
        return {"played_seconds": round(audio.size / rate, 3), "sample_rate": rate}

    def _resolve(self, path: str, what: str) -> Path:
        if not (path or "").strip():
            raise ToolProblem(f"give {what}")
        target = Path(path.strip()).expanduser()
        return target if target.is_absolute() else self.out_dir / target

    def _output_path(self, path: str) -> Path:
        target = self._resolve(path, "a path for the file, e.g. take.wav")
        if target.is_dir():
            from studio.commands.synth import SUFFIX_FORMATS

            raise ToolProblem(f"{target} is a folder; give a file name ending in {', '.join(SUFFIX_FORMATS)}")
        return target

    # -- scripts ---------------------------------------------------------------------------------------
    def render_script(
        self,
        script: str,
        out_dir: str,
        default_voice: str = "",
        file_format: str = "wav",
        subtitles: bool = True,
        concurrency: int = 2,
    ) -> dict:
        """Each line of ``script`` (``[Voice] text`` lines) to a file in ``out_dir``, then ``joined.*``,
        subtitles and ``script.json``, as ``cosyvoice-studio render`` writes them."""
        from studio.atomic_files import ensure_folder
        from studio.runtime import runner
        from studio.script.manifest import RenderSettings
        from studio.script.parse import parse_lines, script_summary
        from studio.script.render import ScriptRender
        from studio.script.voices import load_voices

        folder = self._resolve(out_dir, "a folder for the files, e.g. story")
        if folder.exists() and not folder.is_dir():
            raise ToolProblem(f"{folder} is a file; give a folder for the script's files")
        try:
            lines = list(parse_lines(script.splitlines(), default_voice.strip()))
            count, used = script_summary(lines)
            if count == 0:
                raise ToolProblem(
                    "the script has no lines to say: write one '[Voice] text' line per utterance"
                )
            voices = load_voices(used, [], self.library, advice=VOICE_ADVICE)
            settings = RenderSettings(format=file_format)
            render = ScriptRender(
                ensure_folder(folder), voices, settings, runner.output_rate(self.model().model)
            )
            records = render.plan(lines)
        except (ScriptError, ValueError) as exc:
            raise ToolProblem(str(exc)) from None
        except OSError as exc:
            raise ToolProblem(f"cannot write to {folder}: {exc}") from None
        render.run(records, self.synthesize, max(1, min(concurrency, 8)), cancel=self.stopping)
        try:
            joined = render.join(records, subtitles=subtitles)
            render.save(records, joined=joined.path.name if joined.path else None)
        except OSError as exc:  # a full disk: the line files written so far stay
            raise ToolProblem(
                f"cannot write to {folder}: {exc}; the line files written so far are kept"
            ) from None
        return {
            "folder": str(folder),
            "lines": [
                {
                    "number": r.number,
                    "voice": r.voice,
                    "file": r.file,
                    "status": r.status,
                    "seconds": round(r.seconds, 3),
                    **({"error": r.error} if r.error else {}),
                }
                for r in records
            ],
            "joined": str(joined.path) if joined.path else None,
            "subtitles": [str(p) for p in joined.subtitles],
            "manifest": str(folder / "script.json"),
        }
