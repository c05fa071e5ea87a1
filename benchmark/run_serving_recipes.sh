#!/usr/bin/env bash
# The serving recipes of benchmark/README.md, each with its peer, one server at a time.
#   bash benchmark/run_serving_recipes.sh [a] [b] [c] [d] [e]     (no argument: all)
# Writes benchmark/results/<recipe>*.{jsonl,txt,png}; server logs go to LOGDIR (default /tmp).
# PORT (default 30123), OUT and LOGDIR can be overridden.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-30123}
OUT=${OUT:-benchmark/results}
LOGDIR=${LOGDIR:-/tmp}
mkdir -p "$OUT"
source benchmark/server_lifecycle.sh
start_recipe_server() {  # start_recipe_server LOGNAME FLAGS...: the default model; exits if it does not come up
  start_server "$LOGDIR/sglang-recipe-$1.log" 300 "${@:2}" || exit 1
}

bench() { python benchmark/bench_serving.py --port "$PORT" --disable-tqdm "$@"; }

compare() {  # compare FILE TAG_A TAG_B OUT_STEM: bar chart + ratio table of the last run of each tag
  python benchmark/bench_serving.py --compare "$1" "$1" --compare-tags "$2" "$3" --plot-file "$4.png" | tee "$4.txt"
}

# (a) shared prefix, radix on vs off: 4 groups x 16, 512-token system prompts, 32-token questions,
#     16 output tokens (GSP_OUT overrides), 8 in flight (the guide's 2048/128/256 scaled down for a 2-core CPU).
recipe_a() {
  local out_len=${GSP_OUT:-16}
  local stem="$OUT/a-gsp"
  [ "$out_len" = 16 ] || stem="$OUT/a-gsp-out$out_len"
  local gsp=(--dataset-name generated-shared-prefix --gsp-num-groups 4 --gsp-prompts-per-group 16
             --gsp-system-prompt-len 512 --gsp-question-len 32 --gsp-output-len "$out_len" --max-concurrency 8
             --flush-cache --output-file "$stem.jsonl")
  start_recipe_server a-radix-on --enable-metrics
  bench "${gsp[@]}" --tag radix-on | tee "$stem-radix-on.txt"
  curl -s "$URL/metrics" | grep -E '^sglang:(cache_hit_rate|cached_tokens_total|prompt_tokens_total)' \
    >"$stem-radix-on-metrics.txt" || true
  stop_server
  start_recipe_server a-radix-off --enable-metrics --disable-radix-cache
  bench "${gsp[@]}" --tag radix-off | tee "$stem-radix-off.txt"
  stop_server
  compare "$stem.jsonl" radix-off radix-on "$stem-compare"
}

# (b) stable prompt vs request id at the start vs at the end of a ~2000-token system prompt.
recipe_b() {
  start_recipe_server b-stability --enable-metrics
  python benchmark/bench_prompt_stability.py --port "$PORT" --system-len 2000 --rounds 5 --max-new-tokens 16 \
    --output-file "$OUT/b-stability.jsonl" | tee "$OUT/b-stability.txt"
  stop_server
}

# (c) --max-queued-requests 4 under 64 concurrent requests, vs no limit.
recipe_c() {
  local load=(--dataset-name random --num-prompts 64 --max-concurrency 64 --random-input-len 256
              --random-output-len 32 --output-file "$OUT/c-queue.jsonl")
  start_recipe_server c-queue-limit --enable-metrics --max-queued-requests 4
  bench "${load[@]}" --tag queue-limit-4 | tee "$OUT/c-queue-limit-4.txt"
  stop_server
  start_recipe_server c-no-limit --enable-metrics
  bench "${load[@]}" --tag no-limit | tee "$OUT/c-no-limit.txt"
  stop_server
  compare "$OUT/c-queue.jsonl" no-limit queue-limit-4 "$OUT/c-queue-compare"
}

# (d) --stream-interval 8 vs 1: frames per request and the client's ITL distribution.
recipe_d() {
  local load=(--dataset-name random --num-prompts 16 --max-concurrency 4 --random-input-len 128
              --random-output-len 64 --output-file "$OUT/d-stream.jsonl")
  start_recipe_server d-si1 --enable-metrics
  bench "${load[@]}" --tag stream-interval-1 | tee "$OUT/d-stream-interval-1.txt"
  stop_server
  start_recipe_server d-si8 --enable-metrics --stream-interval 8
  bench "${load[@]}" --tag stream-interval-8 | tee "$OUT/d-stream-interval-8.txt"
  stop_server
  compare "$OUT/d-stream.jsonl" stream-interval-1 stream-interval-8 "$OUT/d-stream-compare"
}

# (e) overlap schedule on vs off, decode-heavy.
recipe_e() {
  local load=(--dataset-name random --num-prompts 32 --max-concurrency 8 --random-input-len 128
              --random-output-len 48 --output-file "$OUT/e-overlap.jsonl")
  start_recipe_server e-overlap-on --enable-metrics
  bench "${load[@]}" --tag overlap-on | tee "$OUT/e-overlap-on.txt"
  stop_server
  start_recipe_server e-overlap-off --enable-metrics --disable-overlap-schedule
  bench "${load[@]}" --tag overlap-off | tee "$OUT/e-overlap-off.txt"
  stop_server
  compare "$OUT/e-overlap.jsonl" overlap-off overlap-on "$OUT/e-overlap-compare"
}

for r in ${@:-a b c d e}; do "recipe_$r"; done
