#!/usr/bin/env bash
# The studio's GPU runs on the lent H200 (device tool): `bash scripts/gpu/run.sh STEP...`, on one warm machine.
# Before the first step: scripts/gpu/stage.sh here, then five calls with carry [".gpu/dK"] and command
# `mkdir -p /root/vl && cp .gpu/dK/q* /root/vl/` (K = 1..5), back to back.
# Steps (carry [".gpu/c5", ".whl"] on every call; OUT is the device tool's output folder):
#   install      vLLM 0.22.0 and the studio's missing wheels, the full-size random model in /tmp/full
#   gputests     the tests that need CUDA (captures, host copies, the flow's turn, RAS graphs) and tests/vllm
#   checks       CUDA graphs against eager (flow solver, flow encoder, HiFT batches) and the chunk scheduler's
#                audio against the takes' own threads (benchmarks/probes/*_check.py)
#   workload     bench --workload sentences: 64 streams, and 16 streams on a 24 GiB budget (workload64, workload24
#                alone)
#   capture-tests  the GPU tests of captures beside the takes' host copies and of expandable segments (a subset of
#                gputests)
#   grow24       the 24 GiB level with takes admitted by their text (bench --admit-by-text: each starts at the
#                length its text is expected to take and may grow to twice it, as a model that stops is admitted)
#   growing24, growing64  the 24 GiB and the 64-stream levels with growing admission (STUDIO_GROWING_ADMISSION=1:
#                a take admitted by its first chunks' state grows chunk by chunk)
#   twin64       the in-process twin of `http` at 64 clients (bench --admit-by-text bound: takes admitted by text
#                that run to their bound, as random weights through the server)
#   profile64    the 64-stream level with every thread's stack sampled (scripts/gpu/sampled_bench.py)
#   fp8          the 24 GiB level with the takes' flow state in float8 (STUDIO_FLOW_STATE_FP8=1) and its error probe
#   state-cost   a batched solve's time with keys/values against attention inputs, for 16-64 takes at 300 and 1000
#                frames of context (benchmarks/probes/flow_state_cost.py; needs no install step, only .whl)
#   compile-cost the same solve with its Euler step compiled by torch.compile (inductor) against as the studio runs
#                it, 1 and 16 takes at 300 frames (compiles take minutes; no install step either)
#   inputs64     the 64-stream level with the takes' states kept as attention inputs (STUDIO_FLOW_STATE_INPUTS=1),
#                then as keys/values, on the same machine; inputs24: the 24 GiB level with inputs, and in float8
#   share24      the 24 GiB level with a fifth of the rest for the flow's arena (STUDIO_FLOW_ARENA_SHARE=0.2:
#                batches beyond it run a step at a time), in fp16 and with float8 states
#   share64      the 64-stream level with a fifth of the rest for the arena (STUDIO_FLOW_ARENA_SHARE=0.2, the
#                default up to 32 GiB) where the default budget gives it half: more takes at once, smaller batches
#   long         bench --workload long (500-token takes) at 64 streams
#   http         serve --backend vllm and benchmarks/load_http.py --workload sentences at 64 and 128 clients
#   http24       the same at 16 clients on a 24 GiB budget
#   quick        bench --workload sentences at 1 and 16 streams, 32 takes (does the bench run here)
#   quick-ab     quick with an older commit's package (scripts/gpu/stage-ab.sh REV; carry ".gpu/ab" too), then
#                with this tree's, on the same machine
#   quick-segments  quick with the allocator's expandable segments (the default under a budget since stop 46),
#                then without (STUDIO_EXPANDABLE_SEGMENTS=0), on the same machine
#   tokens100    bench --tokens 100 (4 s rounds) at 1, 4, 16, 32, 64 streams: comparable with docs/perf-history.md
#   tokens100-24 the same at 16 and 32 streams on a 24 GiB budget
#   starts       a cold and a warm engine start, one process each (scripts/gpu/start_profile.py)
#   trace        one 16-take round traced take by take (scripts/gpu/trace_take.py; a Chrome trace and a table)
#   llm          the LM alone on vLLM, greedy and RAS, 1 and 16 streams (scripts/gpu/vllm_llm_bench.py)
#   cv3          CosyVoice3 (a full-size random Fun-CosyVoice3-0.5B in /tmp/full3): bench --tokens 100 at 1, 4 and
#                16 streams, then --workload sentences at 1 and 16 (issue 39's figures, beside CosyVoice2's), and
#                the streamed flow's and HiFT's probes in fp16 on CUDA (stream against re-run; batched against one
#                by one);
#                cv3-bench (make-model and --tokens 100, with the DiT's graphed solve and with it eager:
#                STUDIO_CUDA_GRAPHS=0) and cv3-probes (the rest; the flow and HiFT batch probes with --graphs) split it
#                across two calls; cv3-graphs: cv3-bench without its eager half; cv3-segments: cv3-graphs with
#                the allocator's fixed segments (STUDIO_EXPANDABLE_SEGMENTS=0)
# Steps can be chained: `bash scripts/gpu/run.sh install gputests workload`. A step that is not finished in time
# leaves its log in OUT. Results are named as benchmarks/results/DATE/ keeps them: copy OUT's JSON there.
set -uo pipefail
steps="install gputests capture-tests checks state-cost compile-cost quick quick-ab quick-segments workload workload64 workload24 grow24 fp8 share24 share64 long http http24 tokens100 tokens100-24 starts trace llm cv3 cv3-bench cv3-graphs cv3-probes"
[ $# -gt 0 ] || { echo "usage: run.sh STEP... (one or more of: $steps)" >&2; exit 2; }
out=${OUT:-/tmp/out}
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
    --json "$out/h200_workload-$name.json" >"$out/workload-$name.log" 2>&1
  echo "== $name: rc $?"
  grep -vE "^(INFO|WARNING|DEBUG)|^\(" "$out/workload-$name.log" | grep -E "^(vllm|pytorch) |rror|Traceback" | cut -c1-400
}

workload() {
  workload_bench sentences-c64 240 --workload sentences --concurrency 64 --takes 128
  workload24
}

workload64() {  # the 64-stream level alone, each capture logged (its key and time)
  workload_bench sentences-c64 240 --workload sentences --concurrency 64 --takes 128 --log-graphs
  echo "captures: $(grep -c 'graph captured' "$out/workload-sentences-c64.log")"
  sed -n 's/^[0-9-]* [0-9:,]* \(.*\): CUDA graph captured.*/\1/p' "$out/workload-sentences-c64.log" | sort | uniq -c
}

profile64() {  # the 64-stream level with every thread's stack sampled: where the scheduler's host time goes
  timeout 260 python3 scripts/gpu/sampled_bench.py "$out/stacks-c64" --model /tmp/full "${engine[@]}" \
    --workload sentences --concurrency 64 --takes 128 --json "$out/h200_workload-sentences-c64-sampled.json" \
    >"$out/workload-sentences-c64-sampled.log" 2>&1
  echo "== profile64: rc $?"
  grep -E "^(vllm|pytorch) " "$out/workload-sentences-c64-sampled.log" | cut -c1-400
  sed -n '/^### flow-scheduler/,/^###/p' "$out"/stacks-c64-*.txt | head -40
}

workload24() {
  workload_bench sentences-c16-budget24 200 --workload sentences --concurrency 16 --takes 64 --vram-budget 24
}

growing24() {  # takes admitted by their first chunks' state, growing chunk by chunk (STUDIO_GROWING_ADMISSION)
  STUDIO_GROWING_ADMISSION=1 workload_bench sentences-c16-budget24-growing 200 --workload sentences \
    --concurrency 16 --takes 64 --vram-budget 24
}

growing64() {
  STUDIO_GROWING_ADMISSION=1 workload_bench sentences-c64-growing 240 --workload sentences --concurrency 64 \
    --takes 128
}

twin64() {  # the in-process twin of `http` at 64 clients: takes admitted by text that run to their bound
  workload_bench sentences-c64-bytext-bound 240 --workload sentences --concurrency 64 --takes 128 \
    --admit-by-text bound
}

grow24() {  # takes admitted by their text's expected length, growing towards its bound
  workload_bench sentences-c16-budget24-bytext 200 --workload sentences --concurrency 16 --takes 64 \
    --vram-budget 24 --admit-by-text
}

studio_wheels() {  # the studio's wheels alone, for the probes that need no vLLM (no install step)
  python3 -c "import soundfile" 2>/dev/null ||
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1
}

state_cost() {  # a solve's time per kind of state, batch and context (no vLLM needed: the studio's wheels only)
  studio_wheels
  timeout 330 python3 benchmarks/probes/flow_state_cost.py --profile 16,1000 --json "$out/h200_flow-state-cost.json" \
    >"$out/state-cost.log" 2>&1
  echo "== state cost: rc $?"
  grep -vE "^(INFO|WARNING|DEBUG)" "$out/state-cost.log" | tail -80 | cut -c1-200
}

compile_cost() {  # the solve with its step compiled by inductor, against as the studio runs it
  studio_wheels
  timeout 540 python3 benchmarks/probes/flow_state_cost.py --kinds kv,kv+compile --batches 1,16 --contexts 300 \
    --json "$out/h200_flow-compile-cost.json" >"$out/compile-cost.log" 2>&1
  echo "== compile cost: rc $?"
  grep -vE "^(INFO|WARNING|DEBUG)" "$out/compile-cost.log" | tail -12 | cut -c1-200
}

inputs64() {  # the 64-stream level with the takes' states kept as attention inputs, then as keys/values (A/B)
  STUDIO_FLOW_STATE_INPUTS=1 workload_bench sentences-c64-inputs 240 --workload sentences --concurrency 64 \
    --takes 128
  workload_bench sentences-c64 240 --workload sentences --concurrency 64 --takes 128
}

inputs24() {  # the 24 GiB level with attention inputs, then with them in float8
  STUDIO_FLOW_STATE_INPUTS=1 workload_bench sentences-c16-budget24-inputs 200 --workload sentences \
    --concurrency 16 --takes 64 --vram-budget 24
  STUDIO_FLOW_STATE_INPUTS=1 STUDIO_FLOW_STATE_FP8=1 workload_bench sentences-c16-budget24-inputs-fp8 200 \
    --workload sentences --concurrency 16 --takes 64 --vram-budget 24
}

fp8() {  # the takes' flow state in float8: the 24 GiB level with it, and its error on CUDA in fp16
  STUDIO_FLOW_STATE_FP8=1 workload_bench sentences-c16-budget24-fp8 200 --workload sentences --concurrency 16 \
    --takes 64 --vram-budget 24
  timeout 150 python3 benchmarks/probes/flow_state_check.py --device cuda --dtype float16 --tokens 400 \
    --json "$out/h200_flow-state-fp8.json" >"$out/fp8-probe.log" 2>&1
  echo "== fp8 probe: rc $?"
  tail -9 "$out/fp8-probe.log" | cut -c1-200
}

share24() {  # the 24 GiB level with a fifth of the rest for the flow's arena (its batches then run a step at a
  # time when an arena of every step would not fit): in fp16, then with the takes' states in float8
  STUDIO_FLOW_ARENA_SHARE=0.2 workload_bench sentences-c16-budget24-share02 200 \
    --workload sentences --concurrency 16 --takes 64 --vram-budget 24
  STUDIO_FLOW_ARENA_SHARE=0.2 STUDIO_FLOW_STATE_FP8=1 workload_bench sentences-c16-budget24-share02-fp8 200 \
    --workload sentences --concurrency 16 --takes 64 --vram-budget 24
}

share64() {  # the 64-stream level with a fifth for the arena (at 64 streams: 21 takes at once, peak 50 GiB)
  STUDIO_FLOW_ARENA_SHARE=0.2 workload_bench sentences-c64-share02 240 --workload sentences --concurrency 64 \
    --takes 128
}

long() {
  workload_bench long-c64 240 --workload long --concurrency 64 --takes 64
}

quick() {
  workload_bench sentences-c1-c16-quick 240 --workload sentences --concurrency 1,16 --takes 32
}

quick_ab() {  # the quick bench with the staged older package (scripts/gpu/stage-ab.sh), then with this tree's
  [ -f .gpu/ab/studio.tar.gz ] || { echo "quick-ab: run scripts/gpu/stage-ab.sh REV first" >&2; return 1; }
  local rev here=$PWD
  rev=$(cat .gpu/ab/rev)
  rm -rf /tmp/ab && mkdir -p /tmp/ab && tar -xzf .gpu/ab/studio.tar.gz -C /tmp/ab
  (cd /tmp/ab && PYTHONPATH=/tmp/site:/tmp/ab timeout 240 python3 -m studio bench --model /tmp/full "${engine[@]}" \
    --workload sentences --concurrency 1,16 --takes 32 --json "$out/h200_workload-sentences-c1-c16_ab-$rev.json" \
    >"$out/workload-ab-$rev.log" 2>&1)
  echo "== quick with $rev: rc $?"
  grep -E "^(vllm|pytorch) |rror" "$out/workload-ab-$rev.log" | cut -c1-400
  cd "$here" || return 1
  workload_bench sentences-c1-c16_ab-tree 240 --workload sentences --concurrency 1,16 --takes 32
}

quick_segments() {  # does the allocator's expandable segments cost time? (they cure fragmentation)
  workload_bench sentences-c1-c16-segments 240 --workload sentences --concurrency 1,16 --takes 32
  STUDIO_EXPANDABLE_SEGMENTS=0 workload_bench sentences-c1-c16-no-segments 240 --workload sentences \
    --concurrency 1,16 --takes 32
}

voices() {  # four synthetic voices in the server's library (as bench --workload makes them)
  python3 - <<'EOF'
from studio.commands.bench_workload import voice_prompts
from studio.runtime.warmup import WARMUP_PROMPT_TEXT
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
    --workload sentences --clients "$clients" --json "$out/h200_http-$name.json" \
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

levels_bench() {  # $1: name, $2: seconds allowed, rest: bench flags (4 s rounds: 100 tokens a take)
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 -m studio bench --model /tmp/full "${engine[@]}" --tokens 100 --runs 2 \
    --warmup-rounds 3 "$@" --json "$out/h200_$name.json" >"$out/$name.log" 2>&1
  echo "== $name: rc $?"
  grep -E "^(vllm|pytorch) |rror" "$out/$name.log" | cut -c1-400
}

tokens100() {
  levels_bench tokens100 540 --concurrency 1,4,16,32,64
}

tokens100_24() {
  levels_bench tokens100-budget24 230 --concurrency 16,32 --vram-budget 24
}

gputests() {
  timeout 300 python3 -m pytest -q -p no:cacheprovider tests/tts/test_cuda_capture.py tests/tts/test_host_transfer.py \
    tests/tts/test_flow_turn.py tests/tts/test_batched_encode.py tests/tts/test_scheduler.py \
    tests/tts/test_prompt_flow_cache.py tests/tts/test_vram_budget.py tests/tts/test_flow_solver.py \
    tests/tts/cosyvoice3/test_cv3_cuda_graphs.py tests/vllm >"$out/gputests.log" 2>&1
  echo "== gputests: rc $?"
  grep -E "passed|failed|rror|assert" "$out/gputests.log" | tail -8 | cut -c1-300
}

checks() {  # each prints PASS or FAIL per comparison and writes its figures as JSON
  local check
  for check in flow_solver encoder_graphs hift_batch scheduler; do
    timeout 150 python3 "benchmarks/probes/${check}_check.py" --model /tmp/full --json "$out/h200_$check-check.json" \
      >"$out/$check-check.log" 2>&1
    echo "== $check: rc $?"
    grep -E "PASS|FAIL|Error" "$out/$check-check.log" | cut -c1-260
  done
}

starts() {  # one process per start: the machine's first (cold: export written, LM compiled), then a warm one
  local name
  for name in cold warm; do
    timeout 200 python3 scripts/gpu/start_profile.py --model /tmp/full --json "$out/h200_start-$name.json" \
      >"$out/start-$name.log" 2>&1
    echo "== start $name: rc $?"
    grep -E "time_to_ready|process_start_to_ready|Traceback|Error" "$out/start-$name.log" | cut -c1-200 | tail -6
  done
}

trace() {
  timeout 240 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 --tokens 100 --streams 16 \
    --out "$out/trace-16-takes" >"$out/trace.log" 2>&1
  echo "== trace: rc $?"
  grep -E "^(first chunk|LM:|First chunk:|wall )|Traceback|Error" "$out/trace.log" | cut -c1-200 | head -12
}

llm() {
  timeout 200 python3 scripts/gpu/vllm_llm_bench.py --size full --concurrency 1,16 --tokens 200 \
    --json "$out/h200_llm-alone.json" >"$out/llm.log" 2>&1
  echo "== llm: rc $?"
  grep -E "^(greedy|ras)|rror" "$out/llm.log" | cut -c1-300
}

cv3() {
  cv3_bench
  cv3_probes
}

cv3_bench() {
  cv3_graphs
  STUDIO_CUDA_GRAPHS=0 timeout 200 python3 -m studio bench --model /tmp/full3 "${engine[@]}" --tokens 100 --runs 2 \
    --warmup-rounds 2 --concurrency 1,4,16 --json "$out/h200_cv3-tokens100-eager.json" >"$out/cv3-eager.log" 2>&1
  echo "== cv3 tokens100, the DiT's solve eager (STUDIO_CUDA_GRAPHS=0): rc $?"
  grep -E "^(vllm|pytorch) |rror|Traceback" "$out/cv3-eager.log" | cut -c1-400
}

cv3_graphs() {  # cv3-bench without its eager half; $1: a suffix for the files
  local name="cv3-tokens100${1:-}"
  [ -f /tmp/full3/cosyvoice3.yaml ] ||
    python3 -m studio make-model --family cosyvoice3 --size full /tmp/full3 >"$out/make-model-cv3.log" 2>&1
  timeout 280 python3 -m studio bench --model /tmp/full3 "${engine[@]}" --tokens 100 --runs 2 --warmup-rounds 2 \
    --concurrency 1,4,16 --json "$out/h200_$name.json" >"$out/$name.log" 2>&1
  echo "== $name: rc $?"
  grep -E "^(vllm|pytorch) |rror|Traceback" "$out/$name.log" | cut -c1-400
}

cv3_segments() {  # cv3-graphs with the allocator's fixed segments (expandable segments off)
  STUDIO_EXPANDABLE_SEGMENTS=0 cv3_graphs -no-segments
}

capture_tests() {  # the GPU tests of graph capture beside the takes' copies and of the allocator's segments
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/tts/test_cuda_capture.py tests/tts/test_vram_budget.py \
    >"$out/capture-tests.log" 2>&1
  echo "== capture tests: rc $?"
  grep -E "passed|failed|rror|assert" "$out/capture-tests.log" | tail -8 | cut -c1-300
}

cv3_probes() {
  timeout 240 python3 -m studio bench --model /tmp/full3 "${engine[@]}" --workload sentences --concurrency 1,16 \
    --takes 32 --json "$out/h200_cv3-workload-sentences.json" >"$out/cv3-workload.log" 2>&1
  echo "== cv3 workload: rc $?"
  grep -E "^(vllm|pytorch) |rror|Traceback" "$out/cv3-workload.log" | cut -c1-400
  timeout 150 python3 benchmarks/probes/cv3_flow_stream_check.py --size full --seconds 12 --device cuda \
    --dtype float16 --json "$out/h200_cv3-flow-stream-check.json" >"$out/cv3-flow-stream.log" 2>&1
  echo "== cv3 flow stream (fp16, CUDA): rc $?"
  tail -12 "$out/cv3-flow-stream.log" | cut -c1-200
  timeout 150 python3 benchmarks/probes/cv3_flow_batch_check.py --size full --takes 1,4,16 --device cuda \
    --dtype float16 --graphs --json "$out/h200_cv3-flow-batch-check.json" >"$out/cv3-flow-batch.log" 2>&1
  echo "== cv3 flow batch (fp16, CUDA): rc $?"
  tail -9 "$out/cv3-flow-batch.log" | cut -c1-200
  timeout 150 python3 benchmarks/probes/cv3_hift_batch_check.py --size full --takes 1,4,16 --device cuda \
    --dtype float16 --json "$out/h200_cv3-hift-batch-check.json" >"$out/cv3-hift-batch.log" 2>&1
  echo "== cv3 hift batch (fp16, CUDA): rc $?"
  tail -6 "$out/cv3-hift-batch.log" | cut -c1-200
  timeout 150 python3 benchmarks/probes/cv3_hift_batch_check.py --size full --takes 1,4,16 --device cuda \
    --dtype float16 --graphs --json "$out/h200_cv3-hift-batch-graphs-check.json" >"$out/cv3-hift-graphs.log" 2>&1
  echo "== cv3 hift batch, network graphed (fp16, CUDA): rc $?"
  tail -6 "$out/cv3-hift-graphs.log" | cut -c1-200
}

for step in "$@"; do
  case $step in
    tokens100-24) tokens100_24 ;;
    cv3-bench) cv3_bench ;;
    cv3-probes) cv3_probes ;;
    cv3-graphs) cv3_graphs ;;
    cv3-segments) cv3_segments ;;
    capture-tests) capture_tests ;;
    state-cost) state_cost ;;
    compile-cost) compile_cost ;;
    quick-ab) quick_ab ;;
    quick-segments) quick_segments ;;
    install | gputests | checks | quick | workload | workload64 | workload24 | grow24 | growing24 | growing64 | profile64 | twin64 | fp8 | inputs64 | inputs24 | share24 | share64 | long | http | http24 | tokens100 | starts | trace | llm | cv3)
      "$step" ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
  esac
done
