"""The model run in this process: loading it with an explicit backend choice and running one take
(runner.py), and the built-in warm-up prompt (warmup.py). The engine process, serve, synth, bench, render
and the MCP server all run takes through it. Never imports Qt."""
