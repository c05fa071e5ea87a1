#!/usr/bin/env bash
# SGLang's own client tools against this server: the real `python -m sglang.bench_serving --backend
# sglang` (PyPI sglang 0.5.23) directly and through the real sglang-router, plus /generate (single and
# batch) and the OpenAI routes through the router. Both packages live in a separate virtualenv, since
# they install an import package named `sglang` too.
#   bash benchmark/real_sglang_clients.sh
# VENV (default .venv-sglang-clients), PORT, ROUTER_PORT, NUM_PROMPTS, OUT and LOGDIR can be overridden.
# Fails unless every request succeeds and bench_serving's generated and retokenized token totals agree.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-sglang-clients}
PORT=${PORT:-30124}
ROUTER_PORT=${ROUTER_PORT:-30125}
NUM_PROMPTS=${NUM_PROMPTS:-64}
OUT=${OUT:-benchmark/results}
LOGDIR=${LOGDIR:-/tmp}
mkdir -p "$OUT"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --no-deps "sglang==0.5.23" "sglang-router"
  # What `import sglang.bench_serving` and the router's launcher pull in (found by importing them), not
  # sglang's whole GPU dependency list. torch 2.14.1 + torchvision 0.29.1 are what pip finds locally here.
  "$VENV/bin/pip" install -q aiohttp numpy requests tqdm transformers pillow openai pybase64 orjson psutil \
    "torch==2.14.1" "torchvision==0.29.1" starlette msgspec pyzmq IPython datasets apache-tvm-ffi \
    sentencepiece compressed-tensors gguf setproctitle uvicorn fastapi
fi
TOK="$LOGDIR/sglang-tok-smollm2"
python benchmark/save_tokenizer.py "$TOK" >/dev/null
# bench_serving's datasets download ShareGPT; this one is the repository's own corpus in ShareGPT form
# (natural text, so greedy outputs are canonical tokenizations and retokenizing them is exact).
DATA="$LOGDIR/sglang-corpus-sharegpt.json"
python3 - "$DATA" <<'EOF'
import json, re, sys
text = open("benchmark/data/corpus.txt").read()
sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) > 6]
convs = [{"id": f"c{i}", "conversations": [
    {"from": "human", "value": f"Continue the story in two sentences: {sents[i % len(sents)]}"},
    {"from": "gpt", "value": sents[(i * 7 + 3) % len(sents)]}]} for i in range(256)]
json.dump(convs, open(sys.argv[1], "w"))
EOF

source benchmark/server_lifecycle.sh
start_server "$LOGDIR/sglang-real-clients.log" 300 --enable-metrics || exit 1
ROUTER_PID=""
cleanup() { [ -n "$ROUTER_PID" ] && kill "$ROUTER_PID" 2>/dev/null; stop_server; }
trap cleanup EXIT

# bench_serving's own sampling params, plus skip_special_tokens false: with ignore_eos the model runs
# past <|im_end|>, and a special token skipped in the text cannot be counted when it is retokenized.
EXTRA='{"sampling_params": {"temperature": 0.0, "max_new_tokens": 32, "ignore_eos": true, "skip_special_tokens": false}}'

bench() {  # bench PORT OUTFILE: the real bench_serving, run outside the repository so nothing shadows it
  (cd "$LOGDIR" && "$OLDPWD/$VENV/bin/python" -W ignore -m sglang.bench_serving --backend sglang \
    --host 127.0.0.1 --port "$1" --tokenizer "$TOK" --dataset-name sharegpt --dataset-path "$DATA" \
    --sharegpt-output-len 32 --num-prompts "$NUM_PROMPTS" --max-concurrency 8 --seed 1 --disable-tqdm \
    --extra-request-body "$EXTRA") | tee "$2"
  python3 - "$2" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
def num(label):
    m = re.search(rf"{re.escape(label)}:\s+(\d+)", text)
    return int(m.group(1)) if m else None
ok, gen, retok = num("Successful requests"), num("Total generated tokens"), num("Total generated tokens (retokenized)")
print(f"check: successful={ok} generated={gen} retokenized={retok}")
if ok is None or gen is None or gen != retok:
    sys.exit("bench_serving: generated and retokenized token totals differ (or the table is missing)")
EOF
}

echo "== bench_serving --backend sglang, direct =="
bench "$PORT" "$OUT/real-bench-serving-direct.txt"

echo "== sglang-router in front =="
(cd "$LOGDIR" && "$OLDPWD/$VENV/bin/python" -m sglang_router.launch_router \
  --worker-urls "http://127.0.0.1:$PORT" --host 127.0.0.1 --port "$ROUTER_PORT") >"$LOGDIR/sglang-router.log" 2>&1 &
ROUTER_PID=$!
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$ROUTER_PORT/health" >/dev/null 2>&1 && break
  sleep 0.5
done
R="http://127.0.0.1:$ROUTER_PORT"
post() { curl -sS -o /dev/stderr -w "%{http_code}" "$R$1" -H 'content-type: application/json' -d "$2"; }
for body in \
  '{"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}' \
  '{"text": "Count:", "stream": true, "sampling_params": {"max_new_tokens": 4}}'; do
  code=$(post /generate "$body" 2>>"$OUT/real-router.txt"); echo "router /generate -> $code" | tee -a "$OUT/real-router.txt"
  [ "$code" = 200 ] || exit 1
done
chat='{"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}'
code=$(post /v1/chat/completions "$chat" 2>>"$OUT/real-router.txt"); echo "router /v1/chat/completions -> $code" | tee -a "$OUT/real-router.txt"
[ "$code" = 200 ] || exit 1

# sglang-router 0.3.2 refuses a batch `text` list itself (422, before any worker sees it), so the batch
# goes to the server directly, with the fields the router adds to what it forwards.
batch='{"text": ["Hello", "The sky is"], "sampling_params": {"max_new_tokens": 4}, "model": null,
  "return_hidden_states": false, "background": false, "no_logs": false, "return_bytes": false, "return_entropy": false}'
code=$(curl -sS -o /dev/stderr -w "%{http_code}" "$URL/generate" -H 'content-type: application/json' -d "$batch" \
  2>>"$OUT/real-router.txt"); echo "direct batch /generate with the router's fields -> $code" | tee -a "$OUT/real-router.txt"
[ "$code" = 200 ] || exit 1

echo "== bench_serving --backend sglang, through the router =="
bench "$ROUTER_PORT" "$OUT/real-bench-serving-router.txt"
