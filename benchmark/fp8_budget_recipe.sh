#!/usr/bin/env bash
# The guide's FP8 point (Step 6) at a fixed memory budget: the same device bytes for weights + KV
# (--mem-fraction-static of the H200 sized to BUDGET_GB, an L4-sized card by default) with bf16
# weights, fp8 weights, and fp8 weights + fp8 KV; 64 concurrent users through the server each time.
#   here, once: python benchmark/save_tokenizer.py .tok/smollm2; echo /.tok/ >> .git/info/exclude
#   device run (carry .whl .tok):  bash benchmark/fp8_budget_recipe.sh
# Llama-3-8B-shaped dummy model. Every run appends to $OUT/fp8_budget.jsonl, its table and the
# server's pool / weight bytes to $OUT/fp8_budget.log. SMOKE=1: tiny shapes, a CPU check.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmark/out}
mkdir -p "$OUT"
source benchmark/gpu_env.sh
PORT=${PORT:-30251}
MODEL_DIR=/tmp/sgl-fp8-model
LOG="$OUT/fp8_budget.log"
if [[ ${SMOKE:-0} == 1 ]]; then
  CFG=tiny-llama; IN=64; OUTLEN=16; N=16; CONC=8; SIZE=(--max-total-tokens 4096)
else
  CFG=llama3-8b; IN=${IN:-2048}; OUTLEN=${OUTLEN:-512}; N=${N:-128}; CONC=64
  TOTAL=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).total_memory)")
  SIZE=(--mem-fraction-static "$(python3 -c "print(round(${BUDGET_GB:-24} * 1e9 / $TOTAL, 4))")")
fi
python3 benchmark/model_configs.py "$CFG" "$MODEL_DIR" --tokenizer-dir "${TOK_DIR:-.tok/smollm2}" >/dev/null || exit 1
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null; echo "budget ${SIZE[*]}"; } | tee -a "$LOG"

source benchmark/server_lifecycle.sh
for v in "bf16" "fp8_w --quantization fp8" "fp8_w_kv --quantization fp8 --kv-cache-dtype fp8_e4m3"; do
  set -- $v
  tag=$1; shift
  flags=(--model-path "$MODEL_DIR" --load-format dummy --enable-metrics "${SIZE[@]}" "$@")
  t0=$SECONDS
  echo "=== server $tag: ${flags[*]}" | tee -a "$LOG" >> "$OUT/servers.log"
  if ! start_server "$OUT/servers.log" 180 "${flags[@]}" 2>> "$LOG"; then
    echo "=== $tag did not come up" | tee -a "$LOG"; continue
  fi
  echo "=== $tag healthy after $((SECONDS - t0)) s" | tee -a "$LOG"
  get "$URL/server_info" | python3 -c "
import json, sys
i = json.load(sys.stdin)
print('$tag server', json.dumps({k: i.get(k) for k in ('max_total_num_tokens', 'weight_bytes', 'quantization',
      'kv_cache_dtype', 'mem_fraction_static', 'max_running_requests', 'num_retractions_total')}))" | tee -a "$LOG"
  timeout 240 python3 benchmark/bench_serving.py --port "$PORT" --disable-tqdm --no-plot \
    --dataset-name random --num-prompts "$N" --max-concurrency "$CONC" --random-input-len "$IN" \
    --random-output-len "$OUTLEN" --random-range-ratio 1.0 --output-file "$OUT/fp8_budget.jsonl" --tag "$tag" >> "$LOG" 2>&1
  echo "=== run $tag rc=$?" | tee -a "$LOG"
  get "$URL/server_info" | python3 -c "
import json, sys
i = json.load(sys.stdin)
print('$tag after', json.dumps({k: i.get(k) for k in ('num_retractions_total', 'num_decode_steps', 'cache_hit_rate')}))" | tee -a "$LOG"
  grep -E "retract|#running-req" "$OUT/servers.log" | tail -n 2 >> "$LOG"
  stop_server
done
# A copy: under gpu_session.sh this script's stdout is appended to $LOG itself.
cp "$LOG" /tmp/fp8_budget_summary.log
grep -E "^=== |server \{|Output token throughput|Median TPOT|Median TTFT" /tmp/fp8_budget_summary.log | uniq
