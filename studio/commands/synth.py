"""``cosyvoice-studio synth``: synthesise one take to a file (WAV, FLAC, MP3, Ogg, Opus by its suffix) and print
first-chunk latency and RTF.

Runs the model in this process through the same loader and take runner as the engine
(``studio.runtime.runner``), so the backend choice is reported the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from studio import envs

#: The longest text one ``synth`` takes, in characters (about an hour of speech, ~350 MB of audio held until
#: the file is written); longer texts go through ``render``, one file per line. The server keeps OpenAI's 4096.
MAX_TEXT_CHARS = 50_000
#: Texts from this long show their progress on stderr, one line per finished segment.
PROGRESS_FROM_CHARS = 500


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "synth",
        help="synthesise text to an audio file",
        description="Synthesise one take with a voice prompt and write it (WAV, FLAC, MP3, Ogg or Opus).",
    )
    parser.add_argument("--model", required=True, metavar="DIR", help="CosyVoice2 or CosyVoice3 model folder")
    text = parser.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", help="the text to speak")
    text.add_argument("--text-file", metavar="F", help="read the text from a UTF-8 file")
    parser.add_argument("--prompt-wav", metavar="F", help="recording of the voice to clone")
    parser.add_argument("--prompt-text", default="", metavar="T", help="transcript of the prompt (zero-shot)")
    parser.add_argument("--mode", choices=("zero-shot", "cross-lingual", "instruct"), default="zero-shot")
    parser.add_argument("--instruct", default="", metavar="T", help="instruction (instruct mode)")
    parser.add_argument("--voice", default="", metavar="ID", help="a saved voice instead of --prompt-wav")
    parser.add_argument("--stream", action="store_true", help="synthesise in streaming chunks")
    parser.add_argument("--speed", type=float, default=1.0, metavar="X")
    parser.add_argument("--seed", type=int, default=None, metavar="N")
    parser.add_argument(
        "--tokens",
        type=int,
        default=None,
        metavar="N",
        help="decode exactly N speech tokens per sentence, ignoring stop ids (benchmarks, random weights)",
    )
    parser.add_argument("--vllm", action="store_true", help="run the LLM on vLLM (reported if unavailable)")
    parser.add_argument("--fp16", action="store_true", help="half precision flow and vocoder (GPU)")
    parser.add_argument("--warmup", action="store_true", help="warm up first, so latency excludes cold start")
    parser.add_argument(
        "--out",
        required=True,
        metavar="OUT.wav",
        help="where to write the take; its suffix picks the format: .wav, .flac, .mp3, .ogg, .opus",
    )
    parser.add_argument(
        "--sample-rate", type=int, default=0, metavar="HZ", help="output rate (default: the model's)"
    )
    parser.add_argument(
        "--loudness",
        type=float,
        default=None,
        metavar="LUFS",
        help="normalise to this integrated loudness (EBU R128, -1 dBTP ceiling), e.g. -20",
    )
    from studio.commands.transcribe import add_asr_arguments
    from studio.commands.vllm_flags import add_vllm_arguments

    add_asr_arguments(parser)  # zero-shot without --prompt-text transcribes the prompt
    add_vllm_arguments(parser)
    parser.set_defaults(func=run)


def _read_prompt(path: str):
    """(samples float32 mono, sample rate) of a prompt recording."""
    try:
        from studio.audio.io import load_audio
    except ImportError:
        import soundfile as sf

        samples, rate = sf.read(path, dtype="float32", always_2d=True)
        return samples.mean(axis=1), int(rate)
    from studio.request import MAX_PROMPT_SECONDS

    audio = load_audio(path, max_duration_s=MAX_PROMPT_SECONDS)
    return audio.samples, audio.sample_rate


SUFFIX_FORMATS = {".wav": "wav16", ".flac": "flac", ".mp3": "mp3", ".ogg": "ogg", ".opus": "opus"}


def output_format(path: Path):
    """The export format named by ``path``'s suffix (16-bit WAV for .wav)."""
    from studio.audio.export import ExportFormat

    try:
        return ExportFormat.parse(SUFFIX_FORMATS[path.suffix.lower()])
    except KeyError:
        raise ValueError(
            f"--out {path.name}: end it in {', '.join(SUFFIX_FORMATS)} to pick the format"
        ) from None


def write_wav(path: Path, samples, sample_rate: int) -> list[str]:
    """Write the take atomically through the audio core's exporter, in the format of ``path``'s suffix;
    returns its warnings."""
    from studio.atomic_files import ensure_folder
    from studio.audio.export import write_audio

    ensure_folder(path.parent)
    return write_audio(path, samples, sample_rate, output_format(path), overwrite=True).warnings


class OutputRefused(Exception):
    """``--out`` could not be written; the take was kept in the recovery folder (or could not be)."""


def write_or_keep(path: Path, samples, sample_rate: int, text: str) -> list[str]:
    """`write_wav`, or, when the disk refuses it, keep the take in the recovery folder and say where."""
    from studio.atomic_files import DiskError
    from studio.audio.errors import ExportError
    from studio.recovery import KeptTake, recovery_store, store_or_keep

    try:
        return write_wav(path, samples, sample_rate)
    except (ExportError, DiskError) as exc:
        problem = str(exc)
        recovery = recovery_store()
        kept = store_or_keep(recovery, samples, sample_rate, recovery, text=text, name=path.stem)
        if isinstance(kept, KeptTake):
            where = "it could not be kept either: " + kept.problem
        else:
            where = f"the take was kept as {recovery.wav_path(kept.id)}"
        raise OutputRefused(f"{problem.rstrip('.')}; {where}") from exc


def _transcribe_prompt(args: argparse.Namespace, prompt, prompt_sr: int) -> str:
    """Zero-shot without ``--prompt-text``: transcribe the prompt (``--asr-model`` or the setting) and say so."""
    from studio.asr.transcriber import AsrError, Transcriber, resolve_model
    from studio.commands.transcribe import asr_model_from

    try:
        folder = resolve_model(asr_model_from(args), progress=lambda message: print(message, file=sys.stderr))
        heard = Transcriber(folder).transcribe(prompt, prompt_sr, args.language)
    except AsrError as exc:
        raise ValueError(f"zero-shot needs the prompt's transcript: give --prompt-text, or {exc}") from exc
    print(f"heard in the prompt ({heard.language_name}, {heard.seconds:.1f} s): {heard.text}")
    return heard.text


def _user_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [ValueError, FileNotFoundError, OSError, OutputRefused]
    for module, name in (
        ("studio.audio.errors", "AudioError"),
        ("studio.tts.errors", "SynthesisError"),
        ("studio.tts.errors", "ModelFolderError"),
    ):
        try:
            errors.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def run(args: argparse.Namespace) -> int:
    from studio.lifetime import sigterm_exits

    try:
        with sigterm_exits():  # a SIGTERM while vLLM starts leaves none of its processes
            return _synth(args)
    except _user_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # an internal failure: one clear line, the traceback on request
        if envs.DEBUG.enabled():
            raise
        print(
            f"error: synthesis failed: {type(exc).__name__}: {exc} (STUDIO_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


def _read_text(args: argparse.Namespace) -> str:
    """The text to say, refused (before the model loads) when it is longer than `MAX_TEXT_CHARS`."""
    too_long = (
        f"synth takes at most {MAX_TEXT_CHARS:,} characters (about an hour of speech); split the text, or "
        "use 'render' with a script (one file per line)"
    )
    if args.text_file:
        path = Path(args.text_file)
        if path.is_file() and path.stat().st_size > 4 * MAX_TEXT_CHARS:  # UTF-8: at most 4 bytes a character
            raise ValueError(f"{path} is {path.stat().st_size:,} bytes long; {too_long}")
        text = path.read_text(encoding="utf-8")
    else:
        text = args.text
    if len(text) > MAX_TEXT_CHARS:
        raise ValueError(f"the text has {len(text):,} characters; {too_long}")
    return text


def _progress_printer(stream: bool):
    """``on_progress`` for a long take: a line on stderr per finished segment (streamed: at most one a second)."""
    import time

    started = time.perf_counter()
    last, segments = [-1.0], [0]

    def show(tokens: int, audio_seconds: float) -> None:
        now = time.perf_counter() - started
        segments[0] += 1
        if not stream or now - last[0] >= 1.0:
            last[0] = now
            done = f"{audio_seconds:.1f} s of audio in {now:.1f} s"
            line = f"progress: {done}" if stream else f"progress: segment {segments[0]}, {done}"
            print(line, file=sys.stderr, flush=True)

    return show


def _synth(args: argparse.Namespace) -> int:
    import numpy as np

    from studio.engine.protocol import Synthesize
    from studio.runtime import runner
    from studio.runtime.warmup import warmup_request

    if not Path(args.model).is_dir():
        raise FileNotFoundError(f"model folder not found: {args.model}")
    fmt = output_format(Path(args.out))  # a wrong suffix or rate is said before the model loads
    if args.sample_rate:
        fmt.check_rate(args.sample_rate)
    text = _read_text(args)
    if not args.prompt_wav and not args.voice:
        raise ValueError("give --prompt-wav F (a recording of the voice) or --voice ID (a saved voice)")
    prompt, prompt_sr = _read_prompt(args.prompt_wav) if args.prompt_wav else (None, 0)
    prompt_text = args.prompt_text
    if args.mode == "zero-shot" and prompt is not None and not prompt_text.strip():
        prompt_text = _transcribe_prompt(args, prompt, prompt_sr)
    request = Synthesize(
        text,
        mode=args.mode,
        prompt_wav=prompt,
        prompt_sr=prompt_sr,
        voice_id=args.voice,
        prompt_text=prompt_text,
        instruct=args.instruct,
        speed=args.speed,
        seed=args.seed,
        stream=args.stream,
        exact_speech_tokens=args.tokens,
    )
    from studio.commands.vllm_flags import vllm_options_from, vram_budget_from

    loaded = runner.load_model(
        args.model,
        "vllm" if args.vllm else "pytorch",
        fp16=args.fp16,
        vllm_options=vllm_options_from(args),
        vram_budget_gb=vram_budget_from(args),
        warm_beside=args.warmup,
    )
    try:
        print(f"backend: {loaded.backend}" + (f" ({loaded.backend_reason})" if loaded.backend_reason else ""))
        print(f"model loaded in {loaded.load_seconds:.2f} s")
        if args.warmup:
            warm = runner.run_take(loaded.model, warmup_request(), backend=loaded.backend)
            print(f"warmed up in {warm.total_seconds:.2f} s")
        chunks: list = []
        progress = _progress_printer(args.stream) if len(text) >= PROGRESS_FROM_CHARS else None
        stats = runner.run_take(
            loaded.model, request, on_chunk=chunks.append, on_progress=progress, backend=loaded.backend
        )
    finally:
        loaded.close()
    audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    if audio.size == 0:
        raise ValueError("the model produced no audio")
    out = Path(args.out)
    from studio.atomic_files import remove_leftover_parts
    from studio.audio.loudness import master

    remove_leftover_parts(out.parent)  # what an earlier synth killed while writing here left

    audio, rate, notes = master(audio, runner.output_rate(loaded.model), args.sample_rate, args.loudness)
    for warning in notes + write_or_keep(out, audio, rate, text):
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {out} ({stats.audio_seconds:.2f} s of audio at {rate} Hz)")
    print(f"first-chunk latency: {stats.first_chunk_latency * 1000:.0f} ms")
    print(
        f"RTF: {stats.rtf:.3f} ({stats.total_seconds:.2f} s for {stats.audio_seconds:.2f} s, "
        f"{stats.speech_tokens} speech tokens, {stats.chunks} chunk(s))"
    )
    return 0
