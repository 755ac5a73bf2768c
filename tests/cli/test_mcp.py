"""``cosyvoice-studio mcp`` driven by the MCP SDK's own stdio client, on the tiny model: the tools listed, the
saved voices, a take written to a file, an unknown voice as a tool error, a script rendered to a folder, and
no process left once the client has gone."""

from __future__ import annotations

import json
import sys

import anyio
import pytest
import soundfile as sf

from studio.runtime.warmup import synthetic_voice
from studio.voices import VoiceLibrary
from tests.lifetime.process_tree import tagged_env, wait_until_none_left

pytest.importorskip("mcp")
pytestmark = pytest.mark.timeout(300)

SCRIPT = "[Narrator] Good morning, this is the first line.\n[Narrator] And the second one.\n"


@pytest.fixture
def voices(tmp_path):
    library = VoiceLibrary(tmp_path / "voices")
    library.save("Narrator", 0.4 * synthetic_voice(16000, 3.0), 16000, "A calm voice reads a few words.")
    return library.folder


def _payload(result) -> dict:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content.get("result", result.structured_content)
    return json.loads(result.content[0].text)


def _text(result) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


async def _session(tiny_model_dir, voices, tmp_path, tag_env, check):
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "studio",
            "mcp",
            "--model",
            str(tiny_model_dir),
            "--backend",
            "pytorch",
            "--voices",
            str(voices),
            "--out-dir",
            str(tmp_path / "out"),
        ],
        env=tag_env,
        cwd=str(tmp_path),
    )
    async with Client(params, read_timeout_seconds=240) as client:
        await check(client)


def test_the_mcp_server_lists_voices_speaks_renders_and_exits(tmp_path, tiny_model_dir, voices):
    env, tag = tagged_env()

    async def check(client) -> None:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"list_voices", "speak_to_file", "speak_to_speakers", "render_script"} <= tools

        listed = _payload(await client.call_tool("list_voices", {}))
        assert [v["name"] for v in listed["voices"]] == ["Narrator"] and listed["model"] in (
            "loading",
            "ready",
        )

        spoken = _payload(
            await client.call_tool(
                "speak_to_file",
                {"text": "Hello from the studio.", "voice": "narrator", "path": "hello.wav", "seed": 3},
            )
        )
        info = sf.info(tmp_path / "out" / "hello.wav")
        assert spoken["path"] == str(tmp_path / "out" / "hello.wav")
        assert info.samplerate == spoken["sample_rate"] == 24000 and info.frames > 0

        unknown = await client.call_tool("speak_to_file", {"text": "Hi.", "voice": "Nobody", "path": "x.wav"})
        assert unknown.is_error and "Nobody" in _text(unknown) and "Narrator" in _text(unknown)
        empty = await client.call_tool("speak_to_file", {"text": "  ", "voice": "Narrator", "path": "x.wav"})
        assert empty.is_error and "empty" in _text(empty)
        bad_path = await client.call_tool(
            "speak_to_file", {"text": "Hi.", "voice": "Narrator", "path": "x.doc"}
        )
        assert bad_path.is_error and ".wav" in _text(bad_path)
        too_long = await client.call_tool(
            "speak_to_file", {"text": "word " * 2000, "voice": "Narrator", "path": "x.wav"}
        )
        assert too_long.is_error and "render_script" in _text(too_long)

        rendered = _payload(
            await client.call_tool("render_script", {"script": SCRIPT, "out_dir": str(tmp_path / "story")})
        )
        assert [line["status"] for line in rendered["lines"]] == ["rendered", "rendered"]
        for name in ("001.wav", "002.wav", "joined.wav", "joined.srt", "script.json"):
            assert (tmp_path / "story" / name).is_file(), name
        assert sf.info(tmp_path / "story" / "002.wav").frames > 0

    anyio.run(_session, tiny_model_dir, voices, tmp_path, env, check)
    wait_until_none_left(tag, timeout=30)  # the client closed stdin: the server closed its model and exited


def test_the_speakers_tool_says_when_there_is_no_audio_output(tmp_path, tiny_model_dir, voices):
    from studio.mcp.speakers import NoSpeakers, output_device

    try:
        output_device()
    except NoSpeakers:
        pass
    else:
        pytest.skip("this machine has an audio output")
    env, tag = tagged_env()

    async def check(client) -> None:
        result = await client.call_tool("speak_to_speakers", {"text": "Hello.", "voice": "Narrator"})
        assert result.is_error and "speak_to_file" in _text(result)

    anyio.run(_session, tiny_model_dir, voices, tmp_path, env, check)
    wait_until_none_left(tag, timeout=30)
