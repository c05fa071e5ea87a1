#!/usr/bin/env bash
# Issue 23 in one GPU call: where the time goes around the decode step.
#   device run (carry .whl .tok):  bash benchmark/gpu_server_path.sh
# 1 ragged decode attention (bench_attention.py --only ragged): split rules on the offline
#   workload's and a chat server's batch shapes;
# 2 the offline workload with the step trace (each pass against its floor, device idle time);
# 3 bench_one_batch at bs 64 / 256, context 768 (the server runs' mean);
# 4 `sglang serve` with the step trace and the loop profiler, random 512 in / 512 out at 64 and 256
#   in flight (one trace file per level; step_trace_report.py reads them afterwards).
# PARTS picks (default "ragged offline one_batch serve"). SMOKE=1: tiny shapes, a CPU check.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmark/out}
mkdir -p "$OUT"
source benchmark/gpu_env.sh
PORT=${PORT:-30241}
LOG="$OUT/server_path.log"
PARTS=${PARTS:-"ragged offline one_batch serve"}
part() { [[ " $PARTS " == *" $1 "* ]]; }
run() {  # run NAME LIMIT CMD...: output to the log, status line to the log and stdout
  local name=$1 limit=$2; shift 2
  echo "=== $name: $*" >> "$LOG"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
  echo "=== $name rc=$? in $((SECONDS - t0)) s" | tee -a "$LOG"
}
if [[ ${SMOKE:-0} == 1 ]]; then
  CFG=tiny-llama; OFF=(--model-config tiny-qwen3 --num-prompts 16 --input-len-range 10 60
    --output-len-range 5 30 --max-total-tokens 8192); ONE=(--model-config tiny-llama --input-len 48
    --max-total-tokens 32768); IN=48; OUTLEN=16; LEVELS="4 8"; EXTRA=(--max-total-tokens 8192)
else
  CFG=llama3-8b; OFF=(--model-config qwen3-0.6b --num-prompts 256 --input-len-range 100 1024
    --output-len-range 100 1024); ONE=(--model-config llama3-8b --input-len 768); IN=512; OUTLEN=512
  LEVELS=${LEVELS:-"64 256"}; EXTRA=()
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,clocks.sm --format=csv,noheader 2>/dev/null; } | tee -a "$LOG"

if part ragged; then
  run ragged 150 python3 benchmark/kernels/bench_attention.py --only ragged
fi
if part offline; then
  run offline 200 python3 benchmark/bench_offline_throughput.py "${OFF[@]}" \
    --step-trace "$OUT/trace-offline.jsonl" --result-file "$OUT/results.jsonl" --tag offline-trace
fi
if part one_batch; then
  run one_batch 200 python3 benchmark/bench_one_batch.py "${ONE[@]}" --batch-size 64 256 \
    --output-len 32 --result-file "$OUT/results.jsonl" --tag one-batch-ctx768
fi
if part serve; then
  MODEL_DIR=/tmp/sgl-path-model
  python3 benchmark/model_configs.py "$CFG" "$MODEL_DIR" --tokenizer-dir "${TOK_DIR:-.tok/smollm2}" >/dev/null || exit 1
  source benchmark/server_lifecycle.sh
  TRACE="$OUT/trace-serve.jsonl"
  if SGLANG_STEP_TRACE="$TRACE" SGLANG_LOOP_PROFILE=1 start_server "$OUT/servers.log" 150 \
      --model-path "$MODEL_DIR" --load-format dummy "${EXTRA[@]}" 2>> "$LOG"; then
    for n in $LEVELS; do
      run "serve-$n" 150 python3 benchmark/bench_serving.py --port "$PORT" --disable-tqdm --no-plot \
        --dataset-name random --random-range-ratio 1 --random-input-len "$IN" \
        --random-output-len "$OUTLEN" --num-prompts $((3 * n)) --max-concurrency "$n" \
        --output-file "$OUT/results.jsonl" --tag "serve-$n"
      get "$URL/server_info" > /dev/null  # the scheduler writes its finished passes first
      mv "$TRACE" "$OUT/trace-serve-$n.jsonl" 2>/dev/null
    done
  else
    echo "=== server did not come up" | tee -a "$LOG"
  fi
  stop_server
fi
grep -E "^=== " "$LOG"
