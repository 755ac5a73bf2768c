#!/usr/bin/env bash
# The GPU proof on the lent H200 (device tool), in three calls on one warm machine, after the four
# part-copy calls that ../shared/gpu/stage-vllm describes (carry .gpu/c1 .. .gpu/c4 one per call; since
# stop 13 the tracked tree is ~5 MB, so the wheel is cut in five 50-MiB parts .gpu/d1 .. d5 instead,
# `cp .gpu/dK/q* /root/vl/`, and .gpu/c5/install-on-gpu joins q0..q4):
#   A  carry [".gpu/c5", ".whl"]: install vLLM 0.22.0 + the studio's missing wheels, build the
#      full-size random model, run tests/vllm (the CI checks) and the LLM-alone benchmark
#   B  cosyvoice-studio bench, vLLM backend, 1/4/16/32 streams
#   F  (one call, when device time is short) install + model, bench vLLM, bench PyTorch, tests/vllm
#   C  cosyvoice-studio bench, PyTorch backend, same takes (CONCURRENCY=1,4,16 then 32: fits 10-min calls)
#   G1 carry [".gpu/c5", ".whl"]: install + model, the flow-solver check (graphs vs eager, batching), vLLM bench
#   G2 PyTorch bench on the same takes, then tests/vllm (the second session's plan: two full calls)
# .whl holds the studio's runtime deps missing there (soundfile, soxr, librosa, wetext, platformdirs...),
# fetched here with `pip download --platform manylinux... --python-version 3.12` (see benchmarks/README.md).
set -uo pipefail
step=${1:?usage: h200-run.sh A|B|C}
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 \
  STUDIO_CACHE_DIR=/tmp/studio-cache STUDIO_DATA_DIR=/tmp/studio-data STUDIO_CONFIG_DIR=/tmp/studio-config
tag=c${CONCURRENCY:-1,4,16,32}
tag=${tag//,/-}
bench=(python3 -m studio bench --model /tmp/full --concurrency "${CONCURRENCY:-1,4,16,32}" --tokens 100
       --max-num-seqs 32 --max-num-batched-tokens 8192 --gpu-memory-utilization 0.3)
install() {
  bash .gpu/c5/install-on-gpu >/dev/null || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  bash scripts/gpu/setup-studio.sh >/dev/null
  # Byte-code, as a user's pip install leaves it: the samples of stop 17 showed every start there compiling
  # imported sources anew (2.2 s of a warm start), nothing being written back
  python3 -m compileall -q -j 0 /tmp/site studio scripts >/dev/null 2>&1
  python3 -c "import sys, os; print('dont_write_bytecode', sys.dont_write_bytecode, os.environ.get('PYTHONDONTWRITEBYTECODE'))"
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
    python3 -c "import torch, vllm, transformers as t; print(torch.__version__, vllm.__version__, t.__version__)"
  } | tee "$out/gpu.txt"
  { time python3 -m studio make-model --size full /tmp/full; } >"$out/make-model.log" 2>&1
  tail -4 "$out/make-model.log"
}
bench_vllm_fp16() {  # $1: seconds allowed
  timeout "$1" "${bench[@]}" --backends vllm --fp16 --runs 2 --json "$out/bench-vllm-$tag.json" \
    >"$out/bench-vllm-$tag.log" 2>&1
  grep -E "^(vllm|pytorch) |peak|rror" "$out/bench-vllm-$tag.log" | cut -c1-400
}
budget_bench() {  # $1: tag, $2: seconds allowed, rest: extra bench flags (the VRAM budget sizes vLLM)
  local name=$1 limit=$2
  shift 2
  timeout "$limit" python3 -m studio bench --model /tmp/full --tokens 100 --max-num-seqs 64 \
    --max-num-batched-tokens 8192 --backends vllm --fp16 --runs 2 "$@" --json "$out/bench-$name.json" \
    >"$out/bench-$name.log" 2>&1
  grep -E "^(vllm|pytorch) |ready in|peak|rror" "$out/bench-$name.log" | cut -c1-420
}
cold_and_warm_starts() {  # $1: file prefix, $2: seconds allowed per start; one process per start
  local name
  for name in cold warm; do
    timeout "$2" python3 scripts/gpu/start_profile.py --model /tmp/full --json "$out/$1-$name.json" \
      >"$out/$1-$name.log" 2>&1
    echo "== $name: rc $?"
    grep -E "^ +[0-9]+ ms|took|Graph capturing|spawn|Traceback|Error|time_to_ready|\"at_s" "$out/$1-$name.log" \
      | grep -v "config:" | cut -c1-200 | tail -25
  done
}
sampled_start() {  # $1: folder under /tmp, $2: name, $3: seconds allowed, rest: environment (VAR=value ...)
  # One start in its own process, every thread's stack sampled (here and in vLLM's forked core)
  local dir=/tmp/$1 name=$2 limit=$3
  shift 3
  mkdir -p "$dir"
  env "$@" timeout "$limit" python3 scripts/gpu/start_profile.py --model /tmp/full --json "$dir/start-$name.json" \
    --sample "$dir/samples-$name" >"$dir/start-$name.log" 2>&1
  echo "== $name: rc $?"
  grep -E "time_to_ready_s|process_start_to_ready|\"at_s|at_load|after_warm_up" "$dir/start-$name.log" | head -6
  grep -E "^ +[0-9]+ ms|init engine|Graph capturing|Traceback|Error" "$dir/start-$name.log" | grep -v "config:" \
    | cut -c1-160 | tail -12
}
case $step in
S1)  # issue 11 (stop 13), after the four part-copy calls: install, then the chunk scheduler (the default) at
     # every level
  install
  budget_bench scheduler-c1-4-16-32-64 510 --concurrency 1,4,16,32,64
  ;;
S2)  # same warm machine: the same levels with the scheduler off (each take runs its own chunks, flat combining)
  STUDIO_FLOW_SCHEDULER=0 budget_bench no-scheduler-c1-4-16-32-64 560 --concurrency 1,4,16,32,64
  ;;
S3)  # same warm machine: the 24 GiB budget at 16 and 32 streams, then vLLM's engine core in this process
  budget_bench scheduler-budget24-c16-32 300 --concurrency 16,32 --vram-budget 24
  VLLM_ENABLE_V1_MULTIPROCESSING=0 budget_bench scheduler-inproc-c1-16 250 --concurrency 1,16
  ;;
S4)  # stop 13, second machine start, after the five part-copy calls: install, the scheduler's audio against the
     # takes' own threads on CUDA, the GPU checks of CI, then the final defaults (32 chunks per tick) at 1-64
  install
  timeout 120 python3 scripts/gpu/scheduler_check.py --model /tmp/full --json "$out/scheduler-check.json" \
    >"$out/scheduler-check.log" 2>&1
  grep -E "^(PASS|FAIL|\{)|rror" "$out/scheduler-check.log" | cut -c1-220
  timeout 120 python3 -m pytest tests/tts/test_chunk_scheduler.py tests/tts/test_prompt_flow_cache.py -q \
    -p no:cacheprovider >"$out/pytest-gpu.log" 2>&1
  grep -E "passed|failed|rror" "$out/pytest-gpu.log" | tail -6
  budget_bench final-c1-16-32-64 300 --warmup-rounds 2 --concurrency 1,16,32,64
  ;;
S5)  # next session, after the five part-copy calls: install, the final defaults at every level with the
     # scheduler's host / GPU-wait / idle seconds (host-bound or GPU-bound?), then the 64-take trace
  install
  budget_bench final-c1-4-16-32-64 330 --warmup-rounds 2 --concurrency 1,4,16,32,64
  timeout 200 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 --tokens 100 \
    --streams 64 --out "$out/trace64" >"$out/trace64.log" 2>&1
  sed -n '/takes at once/,/Under torch/p' "$out/trace64/trace-take.md" 2>/dev/null || tail -20 "$out/trace64.log"
  ;;
S6)  # stop 14, after the five part-copy calls (scripts/gpu/stage.sh stages them): install, the scheduler's
     # audio with batched and incremental encoders against the takes' own threads, the CUDA tests of the
     # flow paths, then the defaults (the tick's encoders batched) at every level
  install
  timeout 150 python3 scripts/gpu/scheduler_check.py --model /tmp/full --json "$out/scheduler-check.json" \
    >"$out/scheduler-check.log" 2>&1
  grep -E "^(PASS|FAIL|\{)|rror" "$out/scheduler-check.log" | cut -c1-220
  timeout 150 python3 -m pytest tests/tts/test_batched_encode.py tests/tts/test_chunk_scheduler.py \
    tests/tts/test_prompt_flow_cache.py -q -p no:cacheprovider >"$out/pytest-gpu.log" 2>&1
  grep -E "passed|failed|rror" "$out/pytest-gpu.log" | tail -6
  budget_bench batch-encoder-c1-4-16-32-64 330 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S7)  # same warm machine: A/B, each chunk's own incremental encoder (stop 13's scheduler), then the 24 GiB budget
  STUDIO_FLOW_BATCH_ENCODER=0 budget_bench incremental-encoder-c1-16-32-64 280 --warmup-rounds 2 \
    --concurrency 1,16,32,64
  budget_bench batch-encoder-budget24-c16-32 220 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S8)  # same warm machine: CUDA MPS (one GPU context for vLLM's process and ours: no time-slicing), then the
     # 64-take trace
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
  mkdir -p /tmp/mps /tmp/mps-log
  if nvidia-cuda-mps-control -d; then
    echo "MPS daemon started"
    budget_bench mps-c1-16-64 300 --warmup-rounds 2 --concurrency 1,16,64
    echo quit | nvidia-cuda-mps-control
  else
    echo "MPS: no daemon (nvidia-cuda-mps-control missing or refused)"
  fi
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  timeout 200 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 --tokens 100 \
    --streams 64 --out "$out/trace64" >"$out/trace64.log" 2>&1
  sed -n '/takes at once/,/Under torch/p' "$out/trace64/trace-take.md" 2>/dev/null || tail -20 "$out/trace64.log"
  ;;
S9)  # same warm machine: 64 chunks per tick (the host no longer limits a tick), 1 and 64 streams
  STUDIO_FLOW_MAX_BATCH=64 budget_bench batch-encoder-max-batch-64-c1-64 280 --warmup-rounds 2 --concurrency 1,64
  ;;
S10)  # stop 14, second machine start, after the five part-copy calls: install, then a quarter of the budget
      # for the flow arena (the 24 GiB run batched 2.3 chunks a tick while 12 takes waited for memory):
      # 24 GiB at 16 and 32 streams, then the default budget at 64
  install
  STUDIO_FLOW_ARENA_SHARE=0.25 budget_bench arena-quarter-budget24-c16-32 220 --warmup-rounds 2 \
    --concurrency 16,32 --vram-budget 24
  STUDIO_FLOW_ARENA_SHARE=0.25 budget_bench arena-quarter-c64 150 --warmup-rounds 2 --concurrency 64
  ;;
S11)  # stop 14, third machine start, no vLLM needed (one call, carry [".whl"]): the studio's wheels, the
      # model, then the scheduler check with 3 untimed runs per path (S6 ran 1: does the batched encoder's
      # slower 8-at-once time come from graph captures of shapes first seen in the timed run?)
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
  python3 -m studio make-model --size full /tmp/full >"$out/make-model.log" 2>&1 || { tail -5 "$out/make-model.log"; exit 1; }
  for n in 3; do
    timeout 120 python3 scripts/gpu/scheduler_check.py --model /tmp/full --warmup $n \
      --json "$out/scheduler-check-warmup$n.json" >"$out/scheduler-check-warmup$n.log" 2>&1
    grep -E "^(PASS|FAIL)|rror" "$out/scheduler-check-warmup$n.log" | cut -c1-220
  done
  ;;
S12)  # stop 15 (fast start), after the five part-copy calls: install, then one engine start per process:
      # cold (vLLM's compile cache empty), warm, warm without torch.compile, warm with vLLM made to spawn
  install
  start_profile() {  # $1: tag, rest: environment (VAR=value ...)
    local name=$1
    shift
    env "$@" timeout 170 python3 scripts/gpu/start_profile.py --model /tmp/full --json "$out/start-$name.json" \
      >"$out/start-$name.log" 2>&1
    grep -E "time_to_ready_s|process_start_to_ready|\"at_s|rror" "$out/start-$name.log" | head -6 | cut -c1-200
    grep -E "studio\.|took|seconds|Loading weights|Memory profiling|Graph capturing|init engine|compil|KV cache" \
      "$out/start-$name.log" | cut -c1-240 >"$out/start-$name.timeline"
  }
  start_profile cold STUDIO_VLLM_COMPILE=1
  start_profile warm STUDIO_VLLM_COMPILE=1
  start_profile no-compile STUDIO_VLLM_COMPILE=0
  start_profile spawn STUDIO_VLLM_COMPILE=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
  ;;
S13)  # same warm machine: every level with the new start (fork, KV cache bytes from the budget)
  budget_bench stop15-c1-4-16-32-64 540 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S14)  # same warm machine: without torch.compile at 1, 16 and 64 streams, then the 24 GiB budget
  STUDIO_VLLM_COMPILE=0 budget_bench stop15-no-compile-c1-16-64 330 --warmup-rounds 2 --concurrency 1,16,64
  budget_bench stop15-budget24-c16-32 230 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S15)  # stop 15, second machine start, after the five part-copy calls: install, a cold and a warm start
      # (one process each, the timeline printed), then bench at 1, 16, 64 streams and the 24 GiB budget
      # (bench no longer initialises CUDA before vLLM starts, so vLLM forks there too)
  install
  cold_and_warm_starts start 170
  budget_bench stop15-fork-c1-16-64 260 --warmup-rounds 2 --concurrency 1,16,64
  budget_bench stop15-fork-budget24-c16-32 200 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S16)  # stop 15, third machine start (little device time left): install, then a cold start (first export
      # with the fix then tried: export in a spawned process; since replaced by `spawning`) and a warm one
  install
  cold_and_warm_starts start16 110
  ;;
S17)  # stop 16, after the five part-copy calls: install, then three starts (one process each) with every thread's
      # stack sampled in this process and in vLLM's forked core (stack_sampler.py): the machine's first
      # (cold: writes the export, vLLM spawns, compiles), warm, warm without torch.compile; one tar back
  install
  sampled_start s17 cold 200 STUDIO_VLLM_COMPILE=1
  sampled_start s17 warm 200 STUDIO_VLLM_COMPILE=1
  sampled_start s17 no-compile 200 STUDIO_VLLM_COMPILE=0
  tar -czf "$out/s17-starts.tar.gz" -C /tmp s17
  timeout 150 python3 scripts/gpu/vllm_llm_bench.py --size full --concurrency 1,16 --tokens 200 \
    --json "$out/llm-only-ras-lean.json" >"$out/llm-only.log" 2>&1
  grep -E "^(greedy|ras)|rror" "$out/llm-only.log" | cut -c1-300
  ;;
S18)  # stop 16, second machine, after the five part-copy calls: install, then three starts one process each,
      # every thread's stack sampled (here and in vLLM's forked core): the machine's first (writes the export,
      # vLLM spawns), the second (vLLM's Triton sampler kernels compile once more), the third (all warm)
  install
  for name in first second third; do sampled_start s18 "$name" 170; done
  tar -czf "$out/s18-starts.tar.gz" -C /tmp s18
  ;;
S19)  # same warm machine: every level (RAS in fewer kernels, the new start)
  budget_bench stop16-c1-4-16-32-64 560 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S20)  # same warm machine: the 24 GiB budget at 16 and 32 streams
  budget_bench stop16-budget24-c16-32 230 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S21)  # same warm machine: the engine core spawned instead of forked, every level (the fork/spawn A/B)
  VLLM_WORKER_MULTIPROC_METHOD=spawn budget_bench stop16-spawned-c1-4-16-32-64 400 --warmup-rounds 2 \
    --concurrency 1,4,16,32,64
  ;;
S22)  # stop 17, after the five part-copy calls: install, three starts one process each, every thread's stack
      # sampled (flow and HiFT built without random init, vLLM's first request at its start, the warm-up
      # beside runs the voice's second take too), then every level
  install
  for name in first second third; do sampled_start s22 "$name" 170; done
  tar -czf "$out/s22-starts.tar.gz" -C /tmp s22
  ;;
S23)  # same warm machine: every level
  budget_bench stop17-c1-4-16-32-64 560 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S24)  # stop 17, second machine, after the five part-copy calls: install, the RAS tests on CUDA (graphed draw =
      # eager draw), the LM alone with RAS graphed and eager (greedy beside), then three sampled starts
  install
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/vllm/test_vllm_sampling.py >"$out/ras-tests.log" 2>&1 \
    || export STUDIO_RAS_GRAPHS=0  # the rest still measures something
  grep -E "passed|failed|Assertion|assert |Error" "$out/ras-tests.log" | head -8
  echo "STUDIO_RAS_GRAPHS=${STUDIO_RAS_GRAPHS:-1}"
  timeout 150 python3 scripts/gpu/vllm_llm_bench.py --size full --concurrency 1,16 --tokens 200 \
    --json "$out/llm-only-ras-graphs.json" >"$out/llm-only.log" 2>&1
  grep -E "^(greedy|ras)|rror" "$out/llm-only.log" | cut -c1-300
  STUDIO_RAS_GRAPHS=0 timeout 150 python3 scripts/gpu/vllm_llm_bench.py --size full --concurrency 1,16 \
    --tokens 200 --json "$out/llm-only-ras-eager.json" >"$out/llm-only-eager.log" 2>&1
  grep -E "^(greedy|ras)|rror" "$out/llm-only-eager.log" | cut -c1-300
  [ -n "${LM_ONLY:-}" ] && exit
  [ -n "${NO_STARTS:-}" ] && { budget_bench stop17-ras-graphs-c1-4-16-32-64 200 --warmup-rounds 2 \
    --concurrency 1,4,16,32,64; exit; }  # little device time left: the levels instead of the starts
  for name in first second third; do sampled_start s24 "$name" 150; done
  tar -czf "$out/s24-starts.tar.gz" -C /tmp s24
  ;;
S25)  # same warm machine: every level (RAS graphed)
  budget_bench stop17-ras-graphs-c1-4-16-32-64 400 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S26)  # stop 18, after the five part-copy calls: install, the CUDA tests of this stop (the flow's GPU turn, the
      # prompt embeddings apart), then one take traced with the flow's turn (the default) and without it
  install
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/tts/test_host_transfer.py tests/tts/test_flow_turn.py \
    >"$out/s26-tests.log" 2>&1
  grep -E "passed|failed|Error" "$out/s26-tests.log" | tail -3
  for turn in 250 0; do
    STUDIO_FLOW_TURN_MS=$turn timeout 170 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 \
      --tokens 100 --streams 16 --out "/tmp/s26/trace-turn-$turn" >"/tmp/s26-trace-$turn.log" 2>&1
    echo "== turn $turn: rc $?"
    grep -E "^(first chunk|LM:|Before the first|First chunk:|wall )|Traceback|Error" "/tmp/s26-trace-$turn.log" | head -12
    cp "/tmp/s26-trace-$turn.log" "/tmp/s26/trace-turn-$turn/run.log" 2>/dev/null
  done
  tar -czf "$out/s26-traces.tar.gz" -C /tmp s26
  ;;
S27)  # same warm machine: every level with the flow's turn (the default), the short first hop at 1 and 16 after
  budget_bench stop18-c1-4-16-32-64 570 --warmup-rounds 2 --concurrency 1,4,16,32,64 --first-hop 10 \
    --first-hop-levels 1,16
  ;;
S28)  # same warm machine: the A/B without the turn at 1, 16 and 64 streams, then the 24 GiB budget with it
  STUDIO_FLOW_TURN_MS=0 budget_bench stop18-no-turn-c1-16-64 290 --warmup-rounds 2 --concurrency 1,16,64
  budget_bench stop18-vram-budget-24 260 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S29)  # stop 18, second machine, after the five part-copy calls: install, which small GPU operations wait behind
      # the flow's queued work, the CUDA tests of this stop, one take traced with the flow's turn (counters and
      # warnings of the 16-take round), then 1, 16 and 64 streams with the turn
  install
  timeout 60 python3 scripts/gpu/side_stream_check.py 2>&1 | tee "$out/side-stream-check.txt" | tail -10
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/tts/test_host_transfer.py tests/tts/test_flow_turn.py \
    >"$out/s29-tests.log" 2>&1
  grep -E "passed|failed|Error" "$out/s29-tests.log" | tail -3
  timeout 150 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 --tokens 100 --streams 16 \
    --out /tmp/s29/trace-turn-250 >/tmp/s29-trace.log 2>&1
  echo "== trace: rc $?"
  grep -E "^(first chunk|LM:|Before the first|First chunk:|wall |Counters)|WARNING|Traceback|Error" /tmp/s29-trace.log \
    | grep -v "jit_monitor\|input_processor\|base.py" | cut -c1-300 | head -20
  cp /tmp/s29-trace.log /tmp/s29/trace-turn-250/run.log 2>/dev/null
  tar -czf "$out/s29-trace.tar.gz" -C /tmp s29
  budget_bench stop18-turn-c1-16-64 230 --warmup-rounds 2 --concurrency 1,16,64
  ;;
S30)  # same warm machine: the A/B without the turn at 1, 16 and 64 streams, then 24 GiB with the turn at 16 and 32
  STUDIO_FLOW_TURN_MS=0 budget_bench stop18-no-turn-c1-16-64 230 --warmup-rounds 2 --concurrency 1,16,64
  budget_bench stop18-vram-budget-24 200 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S31)  # stop 18, third machine, after the five part-copy calls: install, the host-copy test, every level with the
      # final code (the turn only when the LM decodes for no other take), then without the turn at 1 and 16
  install
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/tts/test_host_transfer.py >"$out/s31-tests.log" 2>&1
  grep -E "passed|failed|Error" "$out/s31-tests.log" | tail -2
  budget_bench stop18-c1-4-16-32-64 330 --warmup-rounds 2 --concurrency 1,4,16,32,64
  STUDIO_FLOW_TURN_MS=0 budget_bench stop18-no-turn-c1-16 150 --warmup-rounds 2 --concurrency 1,16
  ;;
S32)  # stop 19, after the five part-copy calls: install, which host copies of a flow tick wait for the GPU's
      # queued work (same stream), then the 16- and 64-take rounds traced take by take and tick by tick
  install
  timeout 60 python3 scripts/gpu/side_stream_check.py 2>&1 | tee "$out/side-stream-check.txt" | tail -14
  timeout 330 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 --tokens 100 --streams 16,64 \
    --out /tmp/s32/trace >/tmp/s32-trace.log 2>&1
  echo "== trace: rc $?"
  grep -E "^(first chunk|LM:|First chunk:|wall |Counters)|^\| (tick|copy|flow.begin|flow.encoder.batch)|Traceback|Error" \
    /tmp/s32-trace.log | cut -c1-200 | head -60
  cp /tmp/s32-trace.log /tmp/s32/trace/run.log 2>/dev/null
  tar -czf "$out/s32-trace.tar.gz" -C /tmp s32
  ;;
S33)  # same warm machine: the short first hop (10 tokens) against the default at 1 and 16 streams
  budget_bench stop19-first-hop 400 --warmup-rounds 2 --concurrency 1,16 --first-hop 10 --first-hop-levels 1,16
  ;;
S34)  # stop 19, second machine, after the five part-copy calls: install, the CUDA tests touched, then the
      # 16-take round traced take by take (first chunks gathered into one tick), with its GPU waits
  install
  timeout 90 python3 -m pytest -q -p no:cacheprovider tests/tts/test_host_transfer.py tests/tts/test_chunk_scheduler.py \
    >"$out/s34-tests.log" 2>&1
  grep -E "passed|failed|Error" "$out/s34-tests.log" | tail -2
  timeout 240 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 --tokens 100 --streams 16 \
    --out /tmp/s34/trace >/tmp/s34-trace.log 2>&1
  echo "== trace: rc $?"
  sed -n '/## 16 takes/,/## Under/p' /tmp/s34/trace/trace-take.md | grep -vE "^\| (20[0-9][0-9]|flow.solve|flow.prompt|hift|lm.request|prompt)" \
    | cut -c1-160 | head -60
  cp /tmp/s34-trace.log /tmp/s34/trace/run.log 2>/dev/null
  tar -czf "$out/s34-trace.tar.gz" -C /tmp s34
  ;;
S35)  # same warm machine: every level with the final code
  budget_bench stop19-levels 420 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S36)  # same warm machine: the A/B without gathering first chunks at 1, 16 and 64 streams
  STUDIO_FLOW_GATHER_MS=0 budget_bench stop19-no-gather 300 --warmup-rounds 2 --concurrency 1,16,64
  ;;
S37)  # stop 19, third machine, after the five part-copy calls: install, then 32 streams three ways (the 32-stream
      # level had 6 graph captures in its timed rounds at S35): as is, without gathering, without the turn; the
      # solver's captures and arena growth logged
  install
  for variant in default STUDIO_FLOW_GATHER_MS=0 STUDIO_FLOW_TURN_MS=0; do
    env "${variant/default/BENCH_VARIANT=default}" timeout 150 python3 -c "import logging, sys
logging.basicConfig(level=logging.WARNING, format='%(relativeCreated)9.0f %(name)s %(message)s')
logging.getLogger('studio.tts.flow.streaming.solver').setLevel(logging.INFO)
from studio.cli import main
sys.exit(main(sys.argv[1:]))" bench --model /tmp/full --tokens 100 --max-num-seqs 64 --max-num-batched-tokens 8192 \
      --backends vllm --fp16 --runs 2 --warmup-rounds 2 --concurrency 32 --json "$out/bench-stop19-c32-${variant%%=*}.json" \
      >"$out/bench-stop19-c32-${variant%%=*}.log" 2>&1
    echo "== $variant: rc $?"
    grep -E "^vllm |studio.tts.flow|rror" "$out/bench-stop19-c32-${variant%%=*}.log" | cut -c1-330 | tail -14
  done
  ;;
S38)  # same warm machine: what float16 autocast costs the fp16 flow (kernels, ms per first chunk, 16 takes)
  timeout 240 python3 scripts/gpu/autocast_check.py --model /tmp/full --json "$out/autocast-check.json" 2>&1 \
    | grep -vE "Warning|warn" | tail -6
  ;;
S39)  # stop 19, fourth machine (short of device time), after the five part-copy calls: install, then the final
      # defaults (first chunks gathered up to 16 takes, the fp16 flow without autocast) at 1, 16 and 32 streams
  install
  budget_bench stop19-final-c1-16-32 150 --warmup-rounds 2 --runs 1 --concurrency 1,16,32
  ;;
S40)  # next stop's first machine, after the five part-copy calls: install, the fused q/k/v on CUDA (graphs equal
      # eager, the kernels of a first chunk)
  install
  timeout 150 python3 scripts/gpu/flow_solver_check.py --model /tmp/full --dtypes float16 --streams 1,16 \
    --solvers graphs --json "$out/flow-solver-check.json" 2>&1 | grep -E "PASS|FAIL|info|one take" | cut -c1-200
  timeout 120 python3 scripts/gpu/autocast_check.py --model /tmp/full --json "$out/autocast-check.json" 2>&1 \
    | grep -vE "Warning|warn" | cut -c1-300 | tail -4
  ;;
S41)  # same warm machine: every level with the final code
  budget_bench stop20-levels 420 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S42)  # same warm machine: the 24 GiB budget at 16 and 32 streams
  budget_bench stop20-vram-budget-24 200 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S43)  # stop 20, second machine, after the five part-copy calls: install, the flow encoder's graphs checked
      # against eager and timed, then every level with them (and the LM's request sent before the flow's setup)
  install
  timeout 150 python3 scripts/gpu/encoder_graphs_check.py --model /tmp/full --json "$out/encoder-graphs-check.json" \
    2>&1 | grep -E "PASS|FAIL|Error" | cut -c1-260
  budget_bench stop20-encoder-graphs-levels 330 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S44)  # same warm machine: the same code with the encoder eager (A/B), 1 and 16 streams; then the starts
  STUDIO_FLOW_ENCODER_GRAPHS=0 budget_bench stop20-encoder-eager-c1-16 200 --warmup-rounds 2 --concurrency 1,16
  cold_and_warm_starts stop20-start 150
  ;;
S45)  # stop 20, third machine: install, graphs against eager (a shape now runs eagerly once, then is captured
      # without a warm-up pass), then every level
  install
  timeout 150 python3 scripts/gpu/flow_solver_check.py --model /tmp/full --dtypes float16 --streams 1,16 \
    --solvers graphs --json "$out/flow-solver-check.json" 2>&1 | grep -E "PASS|FAIL|info|one take" | cut -c1-200
  budget_bench stop20-eager-first-levels 330 --warmup-rounds 2 --concurrency 1,4,16,32,64
  grep -E "captured|failed" "$out/bench-stop20-eager-first-levels.log" | cut -c1-200 | tail -12
  ;;
S46)  # same warm machine: the starts (cold, then warm), then the encoder eager at 1 and 16 streams (A/B)
  cold_and_warm_starts stop20-start 150
  STUDIO_FLOW_ENCODER_GRAPHS=0 budget_bench stop20-encoder-eager-c1-16 200 --warmup-rounds 2 --concurrency 1,16
  ;;
S47)  # stop 20, last machine: install, then every level (HiFT's shapes also run eagerly once; every graph
      # capture counted: solver, encoder, HiFT)
  install
  budget_bench stop20-final-levels 240 --warmup-rounds 2 --concurrency 1,4,16,32,64
  ;;
S50)  # stop 21, first machine, after the five part-copy calls: install, a cold start (the machine's first
      # engine, stack-sampled: where a fresh machine's 60-73 s go), HiFT batched against chunk by chunk
  install
  timeout 200 python3 scripts/gpu/start_profile.py --model /tmp/full --json "$out/stop21-start-cold.json" \
    --sample "$out/stop21-start-cold" >"$out/stop21-start-cold.log" 2>&1
  echo "== cold: rc $?"
  grep -E "took|Graph capturing|Compiling|Dynamo|time_to_ready|load_seconds|\"at_s" "$out/stop21-start-cold.log" \
    | cut -c1-200 | tail -25
  timeout 150 python3 scripts/gpu/hift_batch_check.py --model /tmp/full --json "$out/hift-batch-check.json" \
    2>&1 | grep -E "PASS|FAIL|Error" | cut -c1-220
  ;;
S51)  # same warm machine: every level with HiFT batched, every graph capture logged
  budget_bench stop21-hift-batch-levels 420 --warmup-rounds 3 --concurrency 1,4,16,32,64 --log-graphs
  grep -cE "captured" "$out/bench-stop21-hift-batch-levels.log"
  ;;
S52)  # stop 21, second machine, after the five part-copy calls: install, a cold start (the first start now
      # forks vLLM's core: its export is cast without the OpenMP pool), a warm one, then the causal convs as
      # GEMMs against cuDNN (kernels, first chunk, 16 takes, distance)
  install
  cold_and_warm_starts stop21-fork-start 150
  timeout 240 python3 scripts/gpu/conv_gemm_check.py --model /tmp/full --json "$out/conv-gemm-check.json" \
    2>&1 | grep -E "^(cudnn|gemm|relative)|Error" | cut -c1-330
  ;;
S53)  # same warm machine: every level with the final code (tails in fp16, convs as GEMMs, HiFT batched)
  budget_bench stop21-final-levels 420 --warmup-rounds 3 --concurrency 1,4,16,32,64 --log-graphs
  grep -cE "captured" "$out/bench-stop21-final-levels.log"
  ;;
S54)  # stop 21, third machine, after the five part-copy calls: install, every level with the old arena let go
      # before a larger one is made (S53's 32 streams peaked at 98 GiB while the arena grew)
  install
  budget_bench stop21-arena-levels 420 --warmup-rounds 3 --concurrency 1,4,16,32,64 --log-graphs
  grep -E "work arena" "$out/bench-stop21-arena-levels.log" | cut -c1-160
  ;;
S55)  # stop 21, last machine, after the five part-copy calls: install, the solver's graphs (now on ShapeGraphs)
      # against eager, then 1 and 16 streams with captures while idle
  install
  timeout 120 python3 scripts/gpu/flow_solver_check.py --model /tmp/full --dtypes float16 --streams 1,16 \
    --solvers graphs --json "$out/flow-solver-check.json" 2>&1 | grep -E "PASS|FAIL|Error" | cut -c1-200
  budget_bench stop21-idle-capture-c1-16 150 --warmup-rounds 3 --concurrency 1,16 --log-graphs
  ;;
S56)  # stop 22, first machine, after the five part-copy calls: install, captures that do not wait for queued
      # work (tests/tts/test_cuda_capture.py), the solver's graphs on ShapeGraphs against eager (the whole log
      # kept: S55 printed an inference-tensor error here), 1 and 16 streams with captures while the flow
      # scheduler is idle, then the 24 GiB budget
  install
  timeout 60 python3 -m pytest tests/tts/test_cuda_capture.py tests/tts/test_host_transfer.py -q \
    -p no:cacheprovider >"$out/pytest-capture.log" 2>&1
  grep -E "passed|failed|rror|assert" "$out/pytest-capture.log" | tail -8
  timeout 100 python3 scripts/gpu/flow_solver_check.py --model /tmp/full --dtypes float16 --streams 1,16 \
    --solvers graphs --json "$out/flow-solver-check.json" >"$out/flow-solver-check.log" 2>&1
  grep -E "PASS|FAIL|Error|^\{" "$out/flow-solver-check.log" | cut -c1-240
  grep -B2 -A28 -m1 "Traceback" "$out/flow-solver-check.log" | cut -c1-200
  budget_bench stop22-idle-capture-c1-16 140 --warmup-rounds 3 --concurrency 1,16 --log-graphs
  grep -E "capture failed|while idle failed" "$out/bench-stop22-idle-capture-c1-16.log" | head -3
  budget_bench stop22-vram-budget-24 170 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S58)  # stop 22's second try, after the five part-copy calls: S56 again with RAS's graphs taking a new pool when
      # the tables grow (S56: vLLM's engine died at 16 streams, "use_count > 0" on the old pool's reuse)
  install
  timeout 120 python3 -m pytest tests/tts/test_cuda_capture.py tests/tts/test_host_transfer.py \
    tests/vllm/test_vllm_sampling.py -q -p no:cacheprovider >"$out/pytest-capture.log" 2>&1
  grep -E "passed|failed|rror|assert" "$out/pytest-capture.log" | tail -8
  budget_bench stop22-idle-capture-c1-16 140 --warmup-rounds 3 --concurrency 1,16 --log-graphs
  grep -E "capture failed|while idle failed|INTERNAL ASSERT" "$out/bench-stop22-idle-capture-c1-16.log" | head -3
  budget_bench stop22-vram-budget-24 170 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
S59)  # stop 22, a fresh machine after the five part-copy calls: cold and warm start, then every level again
      # with the scheduler closed with the model (S57's bench aborted at exit: an idle capture at shutdown)
  install
  cold_and_warm_starts stop22-start 120
  budget_bench stop22-levels-again 420 --warmup-rounds 3 --concurrency 1,4,16,32,64 --log-graphs
  grep -cE "terminate called|Aborted" "$out/bench-stop22-levels-again.log"  # S57: 1, at exit
  ;;
S57)  # same warm machine: every level with captures while idle, then the LM alone at 1 stream (its part of a
      # first chunk varied 56-90 ms between processes), the GPU's clocks before it
  budget_bench stop22-levels 420 --warmup-rounds 3 --concurrency 1,4,16,32,64 --log-graphs
  grep -cE "captured" "$out/bench-stop22-levels.log"
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
  timeout 90 python3 scripts/gpu/vllm_llm_bench.py --size full --concurrency 1 --tokens 100 \
    --json "$out/stop22-llm-alone.json" >"$out/stop22-llm-alone.log" 2>&1
  grep -E "^(greedy|ras)|rror" "$out/stop22-llm-alone.log" | cut -c1-300
  ;;
S48)  # next stop's first machine, after the five part-copy calls: install, HiFT batched against chunk by chunk
      # (equal, timed), then every level with it (stop 20 ended before HiFT's batches could be measured)
  install
  timeout 150 python3 scripts/gpu/hift_batch_check.py --model /tmp/full --json "$out/hift-batch-check.json" \
    2>&1 | grep -E "PASS|FAIL|Error" | cut -c1-220
  budget_bench stop21-hift-batch-levels 300 --warmup-rounds 3 --concurrency 1,4,16,32,64 --log-graphs
  grep -cE "captured" "$out/bench-stop21-hift-batch-levels.log"
  ;;
S49)  # same warm machine: HiFT chunk by chunk (A/B) at 1 and 16 streams, then the 24 GiB budget
  STUDIO_HIFT_BATCH_FRAMES=0 budget_bench stop21-hift-alone-c1-16 200 --warmup-rounds 3 --concurrency 1,16 --log-graphs
  budget_bench stop21-vram-budget-24 200 --warmup-rounds 2 --concurrency 16,32 --vram-budget 24
  ;;
F1)  # stop 12, last session, after the four part-copy calls: install, the LM alone (greedy vs RAS, 1 stream),
     # then the default budget at every level, and 1 and 16 streams again with the first chunk after 10 tokens
  install
  timeout 110 python3 scripts/gpu/vllm_llm_bench.py --size full --concurrency 1 --tokens 200 \
    --json "$out/llm-only-h200.json" >"$out/llm-only.log" 2>&1
  grep -E "^(greedy|ras)|rror" "$out/llm-only.log" | cut -c1-400
  budget_bench default-c1-4-16-32-64 330 --concurrency 1,4,16,32,64 --first-hop 10 --first-hop-levels 1,16
  ;;
F2)  # same warm machine: the 24 GiB budget at 16 streams, then vLLM's engine core in this process (1 stream)
  budget_bench budget24-c16 150 --concurrency 16 --vram-budget 24
  VLLM_ENABLE_V1_MULTIPROCESSING=0 budget_bench inproc-c1 110 --concurrency 1
  ;;
H10)  # issue 11 (stop 12, second session), after the four part-copy calls: install, the vLLM checks, the trace
  install
  timeout 260 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 --tokens 100 \
    --streams 16 --out "$out/trace" >"$out/trace.log" 2>&1
  sed -n '1,60p' "$out/trace/trace-take.md" 2>/dev/null || tail -20 "$out/trace.log"
  grep -E "took|seconds|secs" "$out/trace.log" | grep -v Warning | cut -c1-200 | head -8
  ;;
H11)  # same warm machine: the default budget at every level
  budget_bench default-c1-4-16-32-64 540 --concurrency 1,4,16,32,64
  grep -E "took|seconds|secs" "$out/bench-default-c1-4-16-32-64.log" | grep -v Warning | cut -c1-200 | head -8
  ;;
H12)  # same warm machine: the 24 GiB budget at 16 streams, then the short first hop at 1 stream
  budget_bench budget24-c16 170 --concurrency 16 --vram-budget 24
  budget_bench first-hop-10-c1 120 --concurrency 1 --first-hop 10
  ;;
H7)  # issue 11 (stop 12), after the four part-copy calls: install, the CI's vLLM checks on the GPU (async
     # scheduling on), one traced take, the LM alone greedy vs RAS
  install
  timeout 200 python3 -m pytest tests/vllm tests/tts/test_vram_budget.py tests/tts/test_prompt_flow_cache.py -q \
    -p no:cacheprovider >"$out/pytest-vllm.log" 2>&1
  grep -E "passed|failed|rror" "$out/pytest-vllm.log" | tail -8
  timeout 200 python3 scripts/gpu/trace_take.py --model /tmp/full --backend vllm --fp16 --tokens 100 \
    --out "$out/trace" >"$out/trace.log" 2>&1
  sed -n '1,45p' "$out/trace/trace-take.md" 2>/dev/null || tail -20 "$out/trace.log"
  grep -E "took|seconds|secs" "$out/trace.log" | grep -v Warning | cut -c1-200 | head -12
  timeout 170 python3 scripts/gpu/vllm_llm_bench.py --size full --concurrency 1,16,64 --tokens 200 \
    --json "$out/llm-only-h200.json" >"$out/llm-only.log" 2>&1
  grep -E "^(greedy|ras|pytorch)|rror" "$out/llm-only.log" | cut -c1-600
  ;;
H8)  # same warm machine: the default budget at every level
  budget_bench default-c1-4-16-32-64 540 --concurrency 1,4,16,32,64
  grep -E "took|seconds|secs" "$out/bench-default-c1-4-16-32-64.log" | grep -v Warning | cut -c1-200 | head -12
  ;;
H9)  # same warm machine: the 24 GiB budget
  budget_bench budget24-c1-16-32 480 --concurrency 1,16,32 --vram-budget 24
  ;;
H1)  # issue 11 (stop 10): install, model, tests/vllm on the GPU, then the default budget at 1/4/16 (cold start)
  install
  timeout 200 python3 -m pytest tests/vllm tests/tts/test_vram_budget.py -q -p no:cacheprovider \
    >"$out/pytest-vllm.log" 2>&1
  grep -E "passed|failed|rror" "$out/pytest-vllm.log" | tail -8
  budget_bench default-c1-4-16 330 --concurrency 1,4,16
  ;;
H2)  # same warm machine: a 24 GiB card simulated (warm start: vLLM's compile cache and our export kept)
  budget_bench budget24-c1-4-16-32 560 --concurrency 1,4,16,32 --vram-budget 24
  ;;
H4)  # after the four part-copy calls: install, then the half-arena split at both budgets
  install
  budget_bench arena-half-budget24-c1-16-32 270 --concurrency 1,16,32 --vram-budget 24
  budget_bench arena-half-default-c16-32-64 300 --concurrency 16,32,64
  ;;
H5)  # after the four part-copy calls: install, the default budget at every level (cold start)
  install
  budget_bench default-c1-4-16-32-64 480 --concurrency 1,4,16,32,64
  ;;
H6)  # same warm machine: the 24 GiB budget at 1/4/16/32 (warm start)
  budget_bench budget24-c1-4-16-32 560 --concurrency 1,4,16,32 --vram-budget 24
  ;;
H3)  # the default budget at 32 and 64 streams
  budget_bench default-c32-64 560 --concurrency 32,64
  ;;
G1)  # after the four part-copy calls: install, model, flow-solver check, vLLM bench (fp16 flow/HiFT)
  install
  timeout 150 python3 scripts/gpu/flow_solver_check.py --model /tmp/full --streams 1,16 \
    --json "$out/flow-solver-h200.json" >"$out/flow-solver.log" 2>&1
  grep -E "^(PASS|FAIL|info|\{|torch|peak)|rror" "$out/flow-solver.log" | cut -c1-220
  bench_vllm_fp16 330
  ;;
G3)  # after the four part-copy calls, when little device time is left: install, model, vLLM bench only
  install
  bench_vllm_fp16 300
  ;;
G2)  # same warm machine: PyTorch bench (same takes, fp16), then the vLLM checks of CI on the GPU
  export CONCURRENCY=${CONCURRENCY:-1,4,16}
  tag=c${CONCURRENCY//,/-}
  timeout 320 "${bench[@]}" --concurrency "$CONCURRENCY" --backends pytorch --fp16 --runs 1 \
    --json "$out/bench-pytorch-$tag.json" >"$out/bench-pytorch-$tag.log" 2>&1
  grep -E "^(vllm|pytorch) |peak|rror" "$out/bench-pytorch-$tag.log" | cut -c1-400
  timeout 200 python3 -m pytest tests/vllm -q -p no:cacheprovider >"$out/pytest-vllm.log" 2>&1
  grep -E "passed|failed|rror" "$out/pytest-vllm.log" | tail -8
  ;;
F)  # everything that matters in one call, most important first (what finishes comes back)
  install
  "${bench[@]}" --backends vllm --runs 1 --json "$out/bench-vllm-$tag.json" >"$out/bench-vllm-$tag.log" 2>&1
  grep -E "^(vllm|pytorch) |peak|rror" "$out/bench-vllm-$tag.log"
  "${bench[@]}" --backends pytorch --runs 1 --json "$out/bench-pytorch-$tag.json" >"$out/bench-pytorch-$tag.log" 2>&1
  grep -E "^(vllm|pytorch) |peak|rror" "$out/bench-pytorch-$tag.log"
  python3 -m pytest tests/vllm -x -q -p no:cacheprovider >"$out/pytest-vllm.log" 2>&1
  grep -E "passed|failed|Error" "$out/pytest-vllm.log" | tail -8
  ;;
A)
  install
  python3 scripts/gpu/vllm_smoke.py >"$out/smoke.log" 2>&1
  grep -E "^(PASS|FAIL|first)" "$out/smoke.log"
  python3 -m pytest tests/vllm -q -p no:cacheprovider >"$out/pytest-vllm.log" 2>&1
  grep -E "passed|failed|Error" "$out/pytest-vllm.log" | tail -8
  python3 scripts/gpu/vllm_llm_bench.py --size full --json "$out/llm-only-h200.json" >"$out/llm-only.log" 2>&1
  grep -E "^(greedy|ras|pytorch)|Error" "$out/llm-only.log"
  ;;
B)
  "${bench[@]}" --backends vllm --runs 2 --json "$out/bench-vllm-$tag.json" >"$out/bench-vllm-$tag.log" 2>&1
  grep -E "^(vllm|pytorch) |peak|rror" "$out/bench-vllm-$tag.log"
  ;;
C)
  "${bench[@]}" --backends pytorch --runs 1 --json "$out/bench-pytorch-$tag.json" >"$out/bench-pytorch-$tag.log" 2>&1
  grep -E "^(vllm|pytorch) |peak|rror" "$out/bench-pytorch-$tag.log"
  ;;
esac
