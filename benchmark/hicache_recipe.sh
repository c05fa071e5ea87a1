#!/usr/bin/env bash
# The guide's HiCache point (Step 7) on the GPU machine in one call: groups of users sharing long
# system prompts, two turns per user, with the prefixes fitting the device pool and with 4x more
# prefix bytes than the pool, each with and without the host tier.
#   here, once: python benchmark/save_tokenizer.py .tok/smollm2; echo /.tok/ >> .git/info/exclude
#   device run (carry .whl .tok):  bash benchmark/hicache_recipe.sh
# Llama-3-8B-shaped dummy model (128 KiB of KV per token) with a fixed device pool of POOL tokens.
# Every run appends to $OUT/hicache.jsonl (with per-request TTFTs), its table to $OUT/hicache.log;
# the TTFT CDFs of each pair go to $OUT/hicache-{fit,over}-ttft.png; bench_host_copy.py measures
# the link first. SMOKE=1: tiny shapes, a CPU check of this script.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmark/out}
mkdir -p "$OUT"
source benchmark/gpu_env.sh
PORT=${PORT:-30241}
MODEL_DIR=/tmp/sgl-hicache-model
LOG="$OUT/hicache.log"
if [[ ${SMOKE:-0} == 1 ]]; then
  CFG=tiny-llama; POOL=1024; SYS=128; Q=16; GEN=4; FIT=2; OVER=16; USERS=2; CONC=4; RATIO=6
else
  CFG=llama3-8b; POOL=24576; SYS=2048; Q=128; GEN=32; FIT=4; OVER=48; USERS=${USERS:-8}; CONC=16; RATIO=6
fi
python3 benchmark/model_configs.py "$CFG" "$MODEL_DIR" --tokenizer-dir "${TOK_DIR:-.tok/smollm2}" >/dev/null || exit 1
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null; } | tee -a "$LOG"
if [[ ${SMOKE:-0} != 1 && ${COPY_RATES:-1} == 1 ]]; then
  echo "=== host copy rates" | tee -a "$LOG"
  timeout 120 python3 benchmark/kernels/bench_host_copy.py --tokens 2048 --layers 32 \
    --out "$OUT/hicache.jsonl" 2>&1 | tee -a "$LOG"
fi

source benchmark/server_lifecycle.sh
run_pair() {  # run_pair NAME GROUPS: the workload on a server without and with the host tier
  local name=$1 groups=$2
  for tier in off on; do
    local flags=(--model-path "$MODEL_DIR" --load-format dummy --enable-metrics --max-total-tokens "$POOL")
    [[ $tier == on ]] && flags+=(--enable-hierarchical-cache --hicache-ratio "$RATIO")
    local t0=$SECONDS tag="$name-$tier"
    echo "=== server $tag: ${flags[*]}" | tee -a "$LOG" >> "$OUT/servers.log"
    if ! start_server "$OUT/servers.log" 150 "${flags[@]}" 2>> "$LOG"; then
      echo "=== $tag did not come up" | tee -a "$LOG"; continue
    fi
    echo "=== $tag healthy after $((SECONDS - t0)) s" | tee -a "$LOG"
    timeout 200 python3 benchmark/bench_serving.py --port "$PORT" --disable-tqdm --no-plot \
      --dataset-name generated-shared-prefix --gsp-num-groups "$groups" --gsp-prompts-per-group "$USERS" \
      --gsp-num-turns 2 --gsp-system-prompt-len "$SYS" --gsp-question-len "$Q" --gsp-output-len "$GEN" \
      --max-concurrency "$CONC" --flush-cache --output-details \
      --output-file "$OUT/hicache.jsonl" --tag "$tag" >> "$LOG" 2>&1
    echo "=== run $tag rc=$?" | tee -a "$LOG"
    get "$URL/server_info" | python3 -c "
import json, sys
i = json.load(sys.stdin)
keys = ['cache_hit_rate', 'cached_tokens_device_total', 'cached_tokens_host_total',
        'hicache_load_back_bytes_total', 'hicache_load_back_seconds_total', 'hicache_write_bytes_total',
        'hicache_host_total_tokens', 'max_total_num_tokens']
out = {k: i.get(k) for k in keys}
b, s = out['hicache_load_back_bytes_total'], out['hicache_load_back_seconds_total']
if b and s:
    out['load_back_GB_per_s'] = round(b / s / 1e9, 2)
print('$tag server', json.dumps(out))" | tee -a "$LOG"
    stop_server
  done
  python3 benchmark/plot_ttft_cdf.py "$OUT/hicache.jsonl" --tags "$name-off" "$name-on" \
    --out "$OUT/hicache-$name-ttft.png" --title "TTFT, $groups groups x $SYS-token system prompts, pool $POOL tokens" \
    >> "$LOG" 2>&1
}
run_pair over "$OVER"
run_pair fit "$FIT"
grep -E "^=== |server \{" "$LOG"
