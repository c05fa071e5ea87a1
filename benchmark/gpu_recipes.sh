#!/usr/bin/env bash
# The serving recipes (benchmark/README.md a-d) on the GPU machine in one call, at the guide's sizes.
#   here, once: python benchmark/save_tokenizer.py .tok/smollm2; echo /.tok/ >> .git/info/exclude
#   device run (carry .whl .tok):  bash benchmark/gpu_recipes.sh
# The model is Llama-3-8B-shaped with dummy weights and the SmolLM2 tokenizer (no checkpoint can
# reach that machine; .tok/smollm2 is the embedded model's tokenizer, saved by the converter).
# Four server starts, ordered so the most useful rows come first if the call runs out of time:
#   1 radix on: a (radix on), b (prompt stability), c and d peers;  2 radix off: a;
#   3 --max-queued-requests 4: c;  4 --stream-interval 8: d.
# Every run appends to $OUT/recipes.jsonl (one tag each) and its table to $OUT/recipes.log;
# server logs go to $OUT/servers.log. Plots and ratios are drawn afterwards from the JSONL.
# SMOKE=1: tiny shapes, a CPU check of this script.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmark/out}
mkdir -p "$OUT"
source benchmark/gpu_env.sh
PORT=${PORT:-30231}
MODEL_DIR=/tmp/sgl-recipe-model
LOG="$OUT/recipes.log"
if [[ ${SMOKE:-0} == 1 ]]; then
  CFG=tiny-llama; SYS=256; Q=16; GEN=8; B_SYS=300; C_IN=64; C_OUT=8; D_OUT=24; E_OUT=8; EXTRA=(--max-total-tokens 8192)
else
  CFG=llama3-8b; SYS=2048; Q=128; GEN=256; B_SYS=2000; C_IN=256; C_OUT=32; D_OUT=128; E_OUT=128; EXTRA=()
fi
python3 benchmark/model_configs.py "$CFG" "$MODEL_DIR" --tokenizer-dir "${TOK_DIR:-.tok/smollm2}" >/dev/null || exit 1
{ date -u; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null; } | tee -a "$LOG"

source benchmark/server_lifecycle.sh
start_recipe_server() {  # start_recipe_server NAME FLAGS...: the dummy-weight model, logs in servers.log
  local name=$1; shift
  local t0=$SECONDS
  echo "=== server $name: $*" | tee -a "$LOG" >> "$OUT/servers.log"
  if start_server "$OUT/servers.log" 120 --model-path "$MODEL_DIR" --load-format dummy --enable-metrics \
      "${EXTRA[@]}" "$@" 2>> "$LOG"; then
    echo "=== $name healthy after $((SECONDS - t0)) s" | tee -a "$LOG"
  else
    echo "=== $name did not come up" | tee -a "$LOG"; return 1
  fi
}
bench() {  # bench TAG ARGS...: one bench_serving run, 150 s at most
  local tag=$1; shift
  echo "=== run $tag" >> "$LOG"
  timeout 150 python3 benchmark/bench_serving.py --port "$PORT" --disable-tqdm --no-plot \
    --output-file "$OUT/recipes.jsonl" --tag "$tag" "$@" >> "$LOG" 2>&1
  echo "=== run $tag rc=$?" | tee -a "$LOG"
}
GSP=(--dataset-name generated-shared-prefix --gsp-num-groups 4 --gsp-prompts-per-group 16 --gsp-system-prompt-len "$SYS"
     --gsp-question-len "$Q" --gsp-output-len "$GEN" --max-concurrency 8 --flush-cache)
QUEUE=(--dataset-name random --num-prompts 64 --max-concurrency 64 --random-input-len "$C_IN" --random-output-len "$C_OUT")
STREAM=(--dataset-name random --num-prompts 16 --max-concurrency 4 --random-input-len 128 --random-output-len "$D_OUT")
OVERLAP=(--dataset-name random --num-prompts 256 --max-concurrency 64 --random-input-len 512 --random-output-len "$E_OUT")

# SERVERS picks which servers run (default the four above); "si1" is a server for the (d) peer alone,
# so SERVERS="si1 si8" measures the stream-interval pair by itself; "eon eoff" adds recipe (e).
SERVERS=${SERVERS:-"on off queue si8"}
want() { [[ " $SERVERS " == *" $1 "* ]]; }
if want on && start_recipe_server radix-on; then
  bench a-radix-on "${GSP[@]}"
  get "$URL/metrics" | grep -E '^sglang:(cache_hit_rate|cached_tokens_total|prompt_tokens_total)' >> "$LOG"
  echo "=== run b-stability" >> "$LOG"
  timeout 100 python3 benchmark/bench_prompt_stability.py --port "$PORT" --system-len "$B_SYS" --rounds 5 \
    --max-new-tokens 16 --output-file "$OUT/recipes.jsonl" >> "$LOG" 2>&1
  echo "=== run b-stability rc=$?" | tee -a "$LOG"
  bench c-no-limit "${QUEUE[@]}"
  bench d-stream-interval-1 "${STREAM[@]}"
fi
stop_server
if want si1 && start_recipe_server stream-interval-1; then bench d-stream-interval-1 "${STREAM[@]}"; fi
stop_server
if want off && start_recipe_server radix-off --disable-radix-cache; then bench a-radix-off "${GSP[@]}"; fi
stop_server
if want queue && start_recipe_server queue-limit --max-queued-requests 4; then bench c-queue-limit-4 "${QUEUE[@]}"; fi
stop_server
if want si8 && start_recipe_server stream-interval-8 --stream-interval 8; then bench d-stream-interval-8 "${STREAM[@]}"; fi
stop_server
# (e) overlap schedule on vs off, decode-heavy: only when asked for (SERVERS="eon eoff").
if want eon && start_recipe_server overlap-on; then bench e-overlap-on "${OVERLAP[@]}"; fi
stop_server
if want eoff && start_recipe_server overlap-off --disable-overlap-schedule; then bench e-overlap-off "${OVERLAP[@]}"; fi
stop_server
# (f) the guide's speculation warning: the shared-prefix recipe in a pool that holds the four
# system prompts with little to spare, plain vs NGRAM (whose verify slots are reserved per step):
# the radix hit rate of each (SERVERS="spoff spon").
SPOOL=(--max-total-tokens $((4 * SYS + 8 * (SYS + Q + GEN))))
for v in "spoff" "spon --speculative-algorithm NGRAM --speculative-num-draft-tokens 4"; do
  set -- $v
  tag=$1; shift
  if want "$tag" && start_recipe_server "$tag" "${SPOOL[@]}" "$@"; then
    bench "f-$tag" "${GSP[@]}"
    get "$URL/metrics" | grep -E '^sglang:(cache_hit_rate|spec_accept_length)' | sed "s/^/$tag /" >> "$LOG"
  fi
  stop_server
done
# (g) EAGLE-3 through the server (a random head of the model's shape, paged with graphs), its verify
# passes told to accept 2 drafts each (SGLANG_SIMULATE_ACC_LEN=3: 3 tokens per step, whatever the
# random head drafts), against the plain server, at 1, 8 and 32 in flight (SERVERS="gplain geagle").
SIM=(--dataset-name random --random-input-len 512 --random-output-len "$E_OUT")
HEAD=$(python3 -c "import sys; sys.path.insert(0, 'benchmark'); from bench_speculative import write_head_config; print(write_head_config('$MODEL_DIR', 'EAGLE3'))")
for v in "gplain" "geagle --speculative-algorithm EAGLE3 --speculative-draft-model-path $HEAD --speculative-num-draft-tokens 4 --speculative-num-steps 3 --speculative-eagle-topk 1"; do
  set -- $v
  tag=$1; shift
  if want "$tag" && SGLANG_SIMULATE_ACC_LEN=$([[ $tag == geagle ]] && echo 3) start_recipe_server "$tag" "$@"; then
    for c in 1 8 32; do bench "g-$tag-c$c" "${SIM[@]}" --num-prompts $((c < 4 ? 8 : 2 * c)) --max-concurrency "$c"; done
    get "$URL/metrics" | grep -E '^sglang:spec_accept_length' | sed "s/^/$tag /" >> "$LOG"
  fi
  stop_server
done
grep -E "^=== " "$LOG"
