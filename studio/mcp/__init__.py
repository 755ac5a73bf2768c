"""``cosyvoice-studio mcp``: the studio as a Model Context Protocol server (stdio) so assistants can speak.

`runtime` holds the model (loaded once, in the background) and does the work through the engine's take runner
and the script renderer; `server` exposes it as MCP tools; `speakers` plays a take when an audio library is
there."""
