#!/usr/bin/env bash
# On the GPU machine (after .gpu/c5/install-on-gpu): make `studio` importable and install its vLLM
# plugin entry point without pip (no registry there): a minimal dist-info in /tmp/site.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
info=/tmp/site/cosyvoice_studio-0.1.0.dist-info
mkdir -p "$info"
printf 'Metadata-Version: 2.1\nName: cosyvoice-studio\nVersion: 0.1.0\n' > "$info/METADATA"
printf '[vllm.general_plugins]\ncosyvoice_studio = studio.tts.llm.vllm.plugin:register\n\n[console_scripts]\ncosyvoice-studio = studio.cli:main\n' > "$info/entry_points.txt"
[ -d /tmp/site/wheels-extra ] || true
echo "export PYTHONPATH=/tmp/site:$root VLLM_USE_FLASHINFER_SAMPLER=0 STUDIO_CACHE_DIR=/tmp/studio-cache"
