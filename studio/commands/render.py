"""``cosyvoice-studio render SCRIPT``: a long-form script (one line per utterance, ``[Voice]`` prefixes) to
one file per line, a joined file, SRT/WebVTT subtitles and a JSON manifest; ``--resume`` renders only what
changed. The model runs in this process (as in ``synth``), several lines at a time."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from studio import envs


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "render",
        help="render a multi-voice script to files, a joined track and subtitles",
        description="Render a script: one utterance per line, '[Voice] text' or '[Voice|instruction] text'; "
        "a line without a prefix keeps the voice before it; a blank line is a paragraph pause.",
    )
    parser.add_argument("script", metavar="SCRIPT", help="the script, a UTF-8 text file")
    parser.add_argument("--model", required=True, metavar="DIR", help="CosyVoice2 or CosyVoice3 model folder")
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="folder for 001.wav..., joined.*, script.json"
    )
    parser.add_argument(
        "--voice",
        action="append",
        default=[],
        metavar="NAME=WAV[:TRANSCRIPT]",
        help="a voice the script names (repeat); without a transcript it speaks cross-lingual. "
        "Names not given are looked up in the studio's saved voices",
    )
    parser.add_argument(
        "--default-voice",
        default="",
        metavar="NAME",
        help="the voice of lines before the first [Voice] (default: the first --voice)",
    )
    parser.add_argument("--format", default="wav", choices=("wav", "wav32f", "flac", "mp3", "ogg", "opus"))
    parser.add_argument(
        "--sample-rate", type=int, default=0, metavar="HZ", help="output rate (default: the model's)"
    )
    parser.add_argument(
        "--srt", action="store_true", help="write joined.srt and joined.vtt, one cue per line"
    )
    parser.add_argument(
        "--gap-ms", type=float, default=250, metavar="N", help="silence between lines (0: a 20 ms crossfade)"
    )
    parser.add_argument(
        "--paragraph-ms", type=float, default=750, metavar="N", help="silence at a blank line"
    )
    parser.add_argument(
        "--loudness",
        type=float,
        default=None,
        metavar="LUFS",
        help="normalise each line to this integrated loudness (EBU R128), e.g. -20",
    )
    parser.add_argument(
        "--true-peak", type=float, default=-1.0, metavar="DBTP", help="ceiling for --loudness"
    )
    parser.add_argument("--seed", type=int, default=None, metavar="N", help="reproducible lines")
    parser.add_argument("--speed", type=float, default=1.0, metavar="X")
    parser.add_argument("--concurrency", type=int, default=4, metavar="N", help="lines rendered at once")
    parser.add_argument(
        "--resume", action="store_true", help="keep lines already rendered unchanged in --out"
    )
    parser.add_argument("--vllm", action="store_true", help="run the LLM on vLLM (reported if unavailable)")
    parser.add_argument("--fp16", action="store_true", help="half precision flow and vocoder (GPU)")
    from studio.commands.vllm_flags import add_vllm_arguments

    add_vllm_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from studio.audio.errors import AudioError
    from studio.script.parse import ScriptError
    from studio.tts.errors import ModelFolderError

    try:
        return _render(args)
    except (
        ScriptError,
        AudioError,
        ModelFolderError,
        FileNotFoundError,
        ValueError,
    ) as exc:  # ExportError too
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full or read-only disk: the lines already written stay, with what is known
        print(
            f"error: {exc}; the lines written so far are kept: free space, then run again with --resume",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        print("stopped; what was rendered is kept: run again with --resume to go on", file=sys.stderr)
        return 130
    except Exception as exc:  # an internal failure: one clear line, the traceback on request
        if envs.DEBUG.enabled():
            raise
        print(
            f"error: render failed: {type(exc).__name__}: {exc} (STUDIO_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


def _settings(args: argparse.Namespace):
    from studio.script.manifest import RenderSettings

    if args.concurrency < 1:
        raise ValueError("--concurrency must be at least 1")
    return RenderSettings(
        format=args.format,
        sample_rate=args.sample_rate,
        gap_s=max(0.0, args.gap_ms) / 1000,
        paragraph_s=max(0.0, args.paragraph_ms) / 1000,
        loudness_lufs=args.loudness,
        ceiling_dbtp=args.true_peak,
        seed=args.seed,
        speed=args.speed,
    )


def _render(args: argparse.Namespace) -> int:
    from studio.atomic_files import ensure_folder
    from studio.script.parse import read_script, script_summary
    from studio.script.render import ScriptRender
    from studio.script.voices import load_voices, parse_voice_mapping
    from studio.settings import data_dir
    from studio.voices import VoiceLibrary

    settings = _settings(args)
    if not Path(args.model).is_dir():
        raise FileNotFoundError(f"model folder not found: {args.model}")
    default = args.default_voice or (parse_voice_mapping(args.voice[0])[0] if args.voice else "")
    count, used = script_summary(read_script(args.script, default))  # the whole script is checked first
    if count == 0:
        raise ValueError(f"{args.script} has no lines to say")
    library = VoiceLibrary(data_dir(create=False) / "voices")
    voices = load_voices(used, args.voice, library)
    out = ensure_folder(Path(args.out).expanduser())
    loaded = _load(args)
    try:
        from studio.runtime import runner

        render = ScriptRender(out, voices, settings, runner.output_rate(loaded.model))
        records = render.plan(read_script(args.script, default), resume=args.resume)
        _checkpoint(render, records)  # the lines' keys and files: --resume trusts files written after this
        reused = sum(r.done for r in records)
        print(
            f"{count} lines, {len(used)} voice(s); {reused} unchanged, {count - reused} to render "
            f"({loaded.backend} backend, {args.concurrency} at a time)"
        )
        started = time.perf_counter()
        _run_with_progress(render, records, loaded, args.concurrency)
        elapsed = time.perf_counter() - started
    finally:
        loaded.close()
    return _report(render, records, elapsed, count - reused, args.srt)


def _load(args: argparse.Namespace):
    from studio.commands.vllm_flags import vllm_options_from, vram_budget_from
    from studio.runtime import runner

    return runner.load_model(
        args.model,
        "vllm" if args.vllm else "pytorch",
        fp16=args.fp16,
        vllm_options=vllm_options_from(args),
        vram_budget_gb=vram_budget_from(args),
    )


def _run_with_progress(render, records, loaded, concurrency: int) -> None:
    import numpy as np
    from tqdm import tqdm

    from studio.runtime import runner

    rate = runner.output_rate(loaded.model)

    def synthesize(request, cancel: threading.Event):
        chunks: list = []

        told = threading.Event()

        def queued() -> None:  # once per line whose take waits in the take gate (to start or to grow)
            if not told.is_set():
                told.set()
                words = request.text if len(request.text) <= 40 else request.text[:39] + "…"
                bar.write(f"waiting for GPU memory… ({words})", file=sys.stderr)

        runner.run_take(
            loaded.model,
            request,
            cancel=cancel,
            on_chunk=chunks.append,
            backend=loaded.backend,
            on_queued=queued,
        )
        return (np.concatenate(chunks) if chunks else np.zeros(0, np.float32)), rate

    todo = sum(not r.done for r in records)
    last_save = [time.monotonic(), 0.0]  # when, and how long it took (a 100,000-line manifest is big)
    cancel = threading.Event()
    with tqdm(total=todo, unit="line", file=sys.stderr, dynamic_ncols=True, disable=todo == 0) as bar:

        def on_line(record) -> None:
            bar.update(1)
            if record.status == "failed":
                bar.write(f"line {record.number} failed: {record.error}")
            # A killed render keeps its lines; an unsaved manifest (a full disk) is retried at every line.
            if render.unsaved is not None or time.monotonic() - last_save[0] > max(5.0, 20 * last_save[1]):
                began = time.monotonic()
                _checkpoint(render, records, bar.write)
                last_save[:] = [time.monotonic(), time.monotonic() - began]

        try:
            render.run(records, synthesize, concurrency, on_line=on_line, cancel=cancel)
        except KeyboardInterrupt:
            cancel.set()
            _checkpoint(render, records)
            raise


def _checkpoint(render, records, say=None, **extra) -> bool:
    """Save the manifest; on a failing disk say so once and go on (the progress stays in memory)."""
    was_unsaved = render.unsaved is not None
    if render.checkpoint(records, **extra):
        return True
    if not was_unsaved:
        (say or (lambda text: print(text, file=sys.stderr)))(
            f"warning: cannot save {render.folder / 'script.json'} ({render.unsaved}); the render goes on "
            "and saves it at the next chance"
        )
    return False


def _report(render, records, elapsed: float, rendered: int, subtitles: bool) -> int:
    try:
        joined = render.join(records, subtitles=subtitles)
    except OSError:
        _checkpoint(render, records)
        raise
    failed = [r for r in records if r.status == "failed"]
    joined_name = joined.path.name if joined.path else None
    saved = _checkpoint(render, records, joined=joined_name, render_seconds=round(elapsed, 3))
    audio = sum(r.seconds for r in records if r.status == "rendered")
    per_minute = rendered / elapsed * 60 if elapsed > 0 and rendered else 0.0
    print(
        f"rendered {rendered - len(failed)} line(s) in {elapsed:.1f} s ({per_minute:.1f} lines/min, "
        f"{audio:.1f} s of audio)"
    )
    for record in records:
        for note in record.notes:
            print(f"line {record.number}: {note}", file=sys.stderr)
    if joined.path is not None:
        print(f"joined: {joined.path} ({joined.seconds:.1f} s)")
        for path in joined.subtitles:
            print(f"subtitles: {path}")
    if not saved:
        where = render.folder / "script.json"
        print(
            f"error: {where} could not be saved ({render.unsaved}); the line files are kept: "
            "free space, then run again with --resume",
            file=sys.stderr,
        )
        return 1
    print(f"manifest: {render.folder / 'script.json'}")
    if failed:
        names = ", ".join(
            f"{r.number} (script line {render.lines[r.number].source_line}: {r.error})" for r in failed
        )
        print(
            f"error: {len(failed)} line(s) failed: {names}; the joined file was not written. "
            "Run again with --resume to retry only them.",
            file=sys.stderr,
        )
        return 1
    return 0
