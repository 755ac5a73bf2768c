"""The MCP server: the `StudioRuntime`'s work as tools (list_voices, speak_to_file, speak_to_speakers,
render_script) on the official SDK's `MCPServer`. A `ToolProblem` becomes an MCP tool error carrying its
message; the model loads when the server starts and is closed when the client goes (stdin closes)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from pydantic import Field

from studio.mcp.runtime import StudioRuntime, ToolProblem

INSTRUCTIONS = (
    "CosyVoice Studio speaks text in saved, cloned voices. Call list_voices for the voices, then speak_to_file "
    "(a WAV, FLAC, MP3, Ogg or Opus file) or speak_to_speakers; render_script turns a '[Voice] text' script "
    "into one file per line, a joined file and subtitles."
)
Text = Annotated[str, Field(description="what to say (one take; longer texts: render_script)")]
Voice = Annotated[str, Field(description="a saved voice's name or id, as list_voices gives them")]
Instruction = Annotated[str, Field(description="optional: how to say it, e.g. 'speak slowly and softly'")]
Speed = Annotated[float, Field(description="speaking rate, 0.5 to 2.0")]
Seed = Annotated[int | None, Field(description="optional: the same seed gives the same take")]


def tool_errors(work: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a `ToolProblem` into the SDK's `ToolError` (an MCP error result with the message, no traceback)."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(work)
    def guarded(*args, **kwargs):
        try:
            return work(*args, **kwargs)
        except ToolProblem as exc:
            raise ToolError(str(exc)) from None

    return guarded


def build_server(runtime: StudioRuntime):
    """An `MCPServer` whose tools run on ``runtime`` (started by the server's lifespan, closed after it)."""
    from mcp.server import MCPServer

    @asynccontextmanager
    async def lifespan(_server) -> AsyncIterator[None]:
        runtime.start()
        try:
            yield
        finally:
            import anyio

            await anyio.to_thread.run_sync(runtime.close)

    from studio import __version__

    server = MCPServer("cosyvoice-studio", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)

    @server.tool()
    @tool_errors
    def list_voices() -> dict:
        """The saved voices (name, id, transcript, prompt length) and whether the voice model is ready."""
        return {"voices": runtime.list_voices(), "model": runtime.state}

    @server.tool()
    @tool_errors
    def speak_to_file(
        text: Text,
        voice: Voice,
        path: Annotated[
            str,
            Field(
                description=(
                    "the file to write; its suffix picks the format: .wav, .flac, .mp3, .ogg, .opus; "
                    "a relative path is under the server's output folder"
                )
            ),
        ],
        instruction: Instruction = "",
        speed: Speed = 1.0,
        seed: Seed = None,
    ) -> dict:
        """Say ``text`` in a saved voice and write it to an audio file; returns the path, length and rate."""
        return runtime.speak_to_file(text, voice, path, instruction=instruction, speed=speed, seed=seed)

    @server.tool()
    @tool_errors
    def speak_to_speakers(
        text: Text, voice: Voice, instruction: Instruction = "", speed: Speed = 1.0, seed: Seed = None
    ) -> dict:
        """Say ``text`` in a saved voice on this machine's speakers (when it has an audio output)."""
        return runtime.speak_to_speakers(text, voice, instruction=instruction, speed=speed, seed=seed)

    @server.tool()
    @tool_errors
    def render_script(
        script: Annotated[
            str,
            Field(
                description=(
                    "one utterance per line: '[Voice] text' or '[Voice|instruction] text'; a line without a prefix "
                    "keeps the voice before it; a blank line is a paragraph pause"
                )
            ),
        ],
        out_dir: Annotated[
            str, Field(description="the folder for 001.wav..., joined.*, subtitles, script.json")
        ],
        default_voice: Annotated[str, Field(description="the voice of lines before the first [Voice]")] = "",
        file_format: Annotated[str, Field(description="wav, wav32f, flac, mp3, ogg or opus")] = "wav",
        subtitles: Annotated[bool, Field(description="also write joined.srt and joined.vtt")] = True,
    ) -> dict:
        """Render a multi-voice script to one file per line, a joined file and subtitles."""
        return runtime.render_script(script, out_dir, default_voice, file_format, subtitles)

    return server
