#!/usr/bin/env bash
# The studio's runs on the lent H200 (device tool), one step per call, on one warm machine.
# Before the first step: scripts/gpu/stage.sh here, then five calls with carry [".gpu/dK"] and command
# `mkdir -p /root/vl && cp .gpu/dK/q* /root/vl/` (K = 1..5), back to back.
# Steps (carry [".gpu/c5", ".whl"] on every call; OUT is the device tool's output folder):
#   install      vLLM 0.22.0 and the studio's missing wheels, the full-size random model in /tmp/full
#   workload     bench --workload sentences: 64 streams, and 16 streams on a 24 GiB budget
#   long         bench --workload long (500-token takes) at 64 streams
#   http         serve --backend vllm and benchmarks/load_http.py --workload sentences at 64 and 128 clients
#   http24       the same at 16 clients on a 24 GiB budget
#   quick        bench --workload sentences at 1 and 16 streams, 32 takes (does the bench run here)
#   tokens100    today's bench --tokens 100 levels (1, 4, 16, 32, 64), for comparison with earlier stops
# Steps can be chained: `bash scripts/gpu/run.sh install workload`. A step that is not finished in time
# leaves its log in OUT.
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: run.sh STEP... (install, quick, workload, long, http, http24, tokens100)" >&2; exit 2; }
out=${OUT:-/tmp/out}
day=$(date -u +%Y-%m-%d)
mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 \
  STUDIO_CACHE_DIR=/tmp/studio-cache STUDIO_DATA_DIR=/tmp/studio-data STUDIO_CONFIG_DIR=/tmp/studio-config
engine=(--backends vllm --fp16 --max-num-seqs 64 --max-num-batched-tokens 8192)

install() {
  bash .gpu/c5/install-on-gpu >/dev/null || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  bash scripts/gpu/setup-studio.sh >/dev/null
  python3 -m compileall -q -j 0 /tmp/site studio scripts >/dev/null 2>&1
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import torch, vllm, transformers as t; print(torch.__version__, vllm.__version__, t.__version__)"
  } | tee "$out/gpu.txt"
  [ -f /tmp/full/cosyvoice2.yaml ] || python3 -m studio make-model --size full /tmp/full >"$out/make-model.log" 2>&1
  tail -2 "$out/make-model.log" 2>/dev/null
}

workload_bench() {  # $1: name, $2: seconds allowed, rest: bench flags
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 -m studio bench --model /tmp/full "${engine[@]}" "$@" \
    --json "$out/$day-nvidia-h200-workload-$name.json" >"$out/workload-$name.log" 2>&1
  echo "== $name: rc $?"
  grep -vE "^(INFO|WARNING|DEBUG)|^\(" "$out/workload-$name.log" | grep -E "^(vllm|pytorch) |rror|Traceback" | cut -c1-400
}

workload() {
  workload_bench sentences-c64 240 --workload sentences --concurrency 64 --takes 128
  workload_bench sentences-c16-budget24 200 --workload sentences --concurrency 16 --takes 64 --vram-budget 24
}

long() {
  workload_bench long-c64 240 --workload long --concurrency 64 --takes 64
}

quick() {
  workload_bench sentences-c1-c16-quick 240 --workload sentences --concurrency 1,16 --takes 32
}

voices() {  # four synthetic voices in the server's library (as bench --workload makes them)
  python3 - <<'EOF'
from studio.commands.bench_workload import voice_prompts
from studio.engine.warmup import WARMUP_PROMPT_TEXT
from studio.voices import VoiceLibrary

library = VoiceLibrary("/tmp/voices")
for index, prompt in enumerate(voice_prompts(4)):
    if f"v{index}" not in {voice.slug for voice in library.list()}:
        library.save(f"v{index}", prompt, 16000, WARMUP_PROMPT_TEXT)
EOF
}

serve_level() {  # $1: name, $2: seconds allowed, $3: clients, rest: serve flags
  local name=$1 limit=$2 clients=$3
  shift 3
  python3 -m studio serve --model /tmp/full --backend vllm --voices /tmp/voices --port 8080 \
    --max-num-seqs 64 --max-num-batched-tokens 8192 "$@" >"$out/serve-$name.log" 2>&1 &
  local server=$!
  for _ in $(seq 240); do
    curl -s localhost:8080/health | grep -q '"ready"' && break
    sleep 1
  done
  timeout "$limit" python3 benchmarks/load_http.py --url http://127.0.0.1:8080 --voice v0,v1,v2,v3 \
    --workload sentences --clients "$clients" --json "$out/$day-nvidia-h200-http-$name.json" \
    >"$out/http-$name.log" 2>&1
  echo "== $name: rc $?"
  tail -5 "$out/http-$name.log" | cut -c1-400
  kill -TERM "$server"
  wait "$server"
  echo "serve exit $?; left: $(pgrep -fc 'VLLM|studio serve' || true)"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
}

http() {
  voices
  serve_level sentences-c64-c128 330 64,128
}

http24() {
  voices
  serve_level sentences-c16-budget24 200 16 --vram-budget 24
}

tokens100() {
  timeout 540 python3 -m studio bench --model /tmp/full "${engine[@]}" --tokens 100 --runs 2 \
    --concurrency 1,4,16,32,64 --json "$out/$day-nvidia-h200-tokens100.json" >"$out/tokens100.log" 2>&1
  echo "== tokens100: rc $?"
  grep -E "^(vllm|pytorch) |rror" "$out/tokens100.log" | cut -c1-400
}

for step in "$@"; do
  case $step in
    install | quick | workload | long | http | http24 | tokens100) "$step" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
