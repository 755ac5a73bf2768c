"""The voices a script names: mapped to recordings (``NAME=WAV[:TRANSCRIPT]``) or found in the voice library
by name. Only the voices the script uses are loaded, and an unknown one is an error before anything renders."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from studio.script.manifest import VoicePrompt
from studio.script.parse import ScriptError

PROMPT_MAX_S = 30.0  # the model reads at most 30 s of a prompt


def parse_voice_mapping(spec: str) -> tuple[str, Path, str]:
    """``NAME=WAV[:TRANSCRIPT]`` -> (name, recording, transcript); the recording's path may hold colons
    (``C:\\voices\\a.wav``): the transcript starts after the first colon that ends an existing file."""
    name, sep, rest = spec.partition("=")
    if not sep or not name.strip() or not rest:
        raise ScriptError(f"--voice {spec!r}: write NAME=RECORDING.wav or NAME=RECORDING.wav:TRANSCRIPT")
    if Path(rest).is_file():
        return name.strip(), Path(rest), ""
    for index, char in enumerate(rest):
        if char == ":" and Path(rest[:index]).is_file():
            return name.strip(), Path(rest[:index]), rest[index + 1 :].strip()
    raise ScriptError(f"--voice {name.strip()}: no recording at {rest.split(':')[0]!r}")


CLI_ADVICE = "map {them} with --voice NAME=RECORDING.wav[:TRANSCRIPT] or save {them} in the studio"


def load_voices(
    names: Iterable[str], mappings: Iterable[str], library=None, advice: str = CLI_ADVICE
) -> dict[str, VoicePrompt]:
    """The prompt of each name the script uses: a ``--voice`` mapping first, else a saved voice of
    ``library`` (a `studio.voices.VoiceLibrary`) with that name (any case)."""
    from studio.audio.errors import AudioError
    from studio.audio.io import load_audio

    mapped = {}
    for spec in mappings:
        name, path, transcript = parse_voice_mapping(spec)
        mapped[name.casefold()] = (name, path, transcript)
    saved = {voice.name.casefold(): voice for voice in (library.list() if library is not None else [])}
    saved.update({voice.slug.casefold(): voice for voice in saved.copy().values()})
    voices, unknown = {}, []
    for wanted in names:
        key = wanted.casefold()
        if key in mapped:
            name, path, transcript = mapped[key]
            try:
                audio = load_audio(path, max_duration_s=None, duration_s=PROMPT_MAX_S)
            except AudioError as exc:
                raise ScriptError(f"voice {name}: {exc}") from None
            voices[key] = VoicePrompt(name, audio.samples, audio.sample_rate, transcript)
        elif key in saved:
            voice = saved[key]
            samples, rate, transcript = library.load_prompt(voice.slug)
            voices[key] = VoicePrompt(voice.name, samples, rate, transcript, voice.slug)
        else:
            unknown.append(wanted)
    if unknown:
        known = sorted({n for n, _, _ in mapped.values()} | {v.name for v in saved.values()})
        them = "them" if len(unknown) > 1 else "it"
        raise ScriptError(
            f"unknown voice{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
            f"{advice.format(them=them)} (known: {', '.join(known) or 'none'})"
        )
    return voices
