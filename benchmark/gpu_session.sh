#!/usr/bin/env bash
# One GPU session for issue 9: correctness first, then the benchmarks, then one table.
#   device run (carry .whl):  bash benchmark/gpu_session.sh
# Logs and JSON lines go to $OUT (benchmark/out when run by hand). Every stage has its own time
# limit so one hang cannot eat the call; the summary prints whatever finished. About 5 minutes on
# an H200 (tests ~1.5, bench_one_batch ~1.5, offline 2 x ~0.5, kernel bench ~1).
set -uo pipefail
OUT=${OUT:-benchmark/out}
mkdir -p "$OUT"
source "$(dirname "$0")/gpu_env.sh"
# Stages can be picked: STAGES="tests one_batch one_batch_fp8 offline kernels attn_sweep attn_splits gemv small_m
# variants variants_m host_ab long_ctx fp8 fp8_tests fp8_gemv fp8_halves fp8_one fp8_mm fp8_tri fp8_prof fp8_budget recipes hicache_tests hicache spec spec_tests spec_tree spec_draft ngram_text det det_bench eagle_paged eagle_tree fp8_mma fp8_mma_wide attn_pack prof256" (default: the first five).
STAGES=${STAGES:-"tests one_batch one_batch_fp8 offline kernels"}
has() { [[ " $STAGES " == *" $1 "* ]]; }
# At most 8 files come back from $OUT: stages append to a few logs.
stage() {  # log name, time limit (s), command...
  local name=$1 limit=$2; shift 2
  echo "=== $name (limit ${limit}s): $*" | tee -a "$OUT/$name.log"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >> "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "=== $name: rc=$rc in $((SECONDS - t0))s" | tee -a "$OUT/$name.log" "$OUT/summary.txt"
}

{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, \
'transformers', transformers.__version__)"; } 2>&1 | tee "$OUT/summary.txt"

if has tests; then
  stage gpu_tests 260 python3 -m pytest test/gpu -q -p no:cacheprovider --timeout=100 --durations=10 -rfE
fi
# SMOKE=1: the same stages on tiny shapes (a CPU check of this script, seconds).
if [[ ${SMOKE:-0} == 1 ]]; then
  ONE=(--model-config tiny-llama --batch-size 1 8 --input-len 32 --output-len 4 --long-prefill 64
       --max-total-tokens 8192)
  OFF=(--model-config tiny-qwen3 --num-prompts 16 --input-len-range 10 60 --output-len-range 5 30
       --max-total-tokens 8192)
else
  ONE=(--model-config llama3-8b --batch-size 1 4 8 64 256 --input-len 512 --output-len 32 --long-prefill 4096)
  OFF=(--model-config qwen3-0.6b --num-prompts 256 --input-len-range 100 1024 --output-len-range 100 1024)
fi
if has gemv; then
  # Tile sweep of the skinny matmul (graph-timed, PDL); the best configs go to gemv_configs.json.
  stage gemv 200 python3 benchmark/kernels/bench_gemv.py --out "$OUT/gemv_configs.json"
fi
# Every later stage uses the sweep's configs (gemv.py reads SGLANG_GEMV_CONFIGS) when it ran.
[[ -f "$OUT/gemv_configs.json" ]] && export SGLANG_GEMV_CONFIGS="$OUT/gemv_configs.json"
# The small-M tiles the variants_m stage binds: the small_m stage's output, or SMALL_M_JSON=<file>.
SMALL_M_JSON=${SMALL_M_JSON:-$OUT/small_m_configs.json}
if has small_m; then
  # Tile sweep of the tensor-core small-M matmul at 8 and 64 rows against cuBLAS; the configs that
  # beat cuBLAS go to $SMALL_M_JSON.
  stage small_m 300 python3 benchmark/kernels/bench_small_m.py --out "$SMALL_M_JSON"
fi
if has variants_m; then
  # Decode steps with the 2-64-row matmuls on cuBLAS, on our kernel where the sweep found it faster
  # (auto with $SMALL_M_JSON, profiled at bs 64), and on our kernel everywhere (triton).
  export SGLANG_SMALL_M_CONFIGS="$SMALL_M_JSON"
  VAR=(--model-config llama3-8b --batch-size 1 4 8 64 --input-len 512 --output-len 32 --bw 4.21e12 --flops 7.8e14)
  [[ ${SMOKE:-0} == 1 ]] && VAR=(--model-config tiny-llama --batch-size 1 4 8 --input-len 32 --output-len 4 --max-total-tokens 8192)
  PROF=64
  [[ ${SMOKE:-0} == 1 ]] && PROF=8
  for v in "m_cublas cublas" "m_auto auto --profile-bs $PROF" "m_triton triton"; do
    set -- $v
    stage one_batch 90 python3 benchmark/bench_one_batch.py "${VAR[@]}" --skinny-matmul "$2" "${@:3}" \
      --result-file "$OUT/one_batch.jsonl" --tag "$1"
  done
  unset SGLANG_SMALL_M_CONFIGS
fi
if has variants; then
  # Decode steps with PDL and the Triton GEMV (one-row matmuls) switched on and off, same process image:
  # plain = cuBLAS + plain launches, pdl = PDL launches of our kernels, gemv = GEMV without PDL,
  # pdl_gemv = both (profiled at bs 1). Uses the sweep's configs when the gemv stage ran first.
  VAR=(--model-config llama3-8b --batch-size 1 4 8 64 --input-len 512 --output-len 32 --bw 4.21e12 --flops 7.8e14)
  [[ ${SMOKE:-0} == 1 ]] && VAR=(--model-config tiny-llama --batch-size 1 4 8 --input-len 32 --output-len 4 --max-total-tokens 8192)
  for v in "plain cublas --disable-pdl" "pdl cublas" "gemv triton --disable-pdl" "pdl_gemv triton --profile-bs 1 --bench-sampler"; do
    set -- $v
    stage one_batch 90 python3 benchmark/bench_one_batch.py "${VAR[@]}" --skinny-matmul "$2" "${@:3}" \
      --result-file "$OUT/one_batch.jsonl" --tag "$1"
  done
fi
if has host_ab; then
  # The same decode steps on an older tree (AB_OLD: an unpacked commit, e.g. `git archive REV | tar -x
  # -C _ab_old`) and on this one, alternating in one call so host speed is the same for both; this
  # tree also splits the synced step into host phases (--host-breakdown; the older one may lack it).
  AB_OLD=$(realpath "${AB_OLD:-_ab_old}")
  OUTA=$(realpath "$OUT")
  HAB=(--model-config llama3-8b --batch-size ${AB_BS:-1 8 64 256} --input-len 512 --output-len 32 --bw 4.21e12 --flops 7.8e14)
  [[ ${SMOKE:-0} == 1 ]] && HAB=(--model-config tiny-llama --batch-size 1 8 --input-len 32 --output-len 4 --max-total-tokens 8192)
  mkdir -p /tmp/sgl_old && ln -sfn "$AB_OLD" /tmp/sgl_old/sglang
  for i in ${AB_ROUNDS:-1 2}; do
    stage one_batch 120 env PYTHONPATH="/tmp/sgl_old:$AB_OLD:${PYTHONPATH:-}" bash -c 'cd "$0" && python3 \
      benchmark/bench_one_batch.py "$@"' "$AB_OLD" "${HAB[@]}" --result-file "$OUTA/one_batch.jsonl" --tag "old$i"
    stage one_batch 120 python3 benchmark/bench_one_batch.py "${HAB[@]}" --host-breakdown ${AB_NEW_ARGS:-} \
      --result-file "$OUT/one_batch.jsonl" --tag "new$i"
  done
fi
if has one_batch; then
  HF_ARGS=(--hf --hf-batch-size 1 8)
  [[ ${HF:-1} == 0 ]] && HF_ARGS=()
  # PROFILE_BS: decode kernel tables (per-kernel time per step, idle share) at these batch sizes.
  stage one_batch 200 python3 benchmark/bench_one_batch.py "${ONE[@]}" "${HF_ARGS[@]}" --bench-sampler \
    --profile-bs ${PROFILE_BS:-1 64} --result-file "$OUT/one_batch.jsonl"
fi
if has one_batch_fp8; then
  # fp8 KV: bytes per token halved (pool twice the tokens), KV reads halved at large batch.
  stage one_batch 120 python3 benchmark/bench_one_batch.py "${ONE[@]}" --kv-cache-dtype fp8_e4m3 \
    --result-file "$OUT/one_batch.jsonl" --tag fp8_kv
fi
if has fp8; then
  # FP8 weights (--quantization fp8, per-channel, online from the dummy bf16 weights): the decode step
  # against its own floor (half the weight bytes), with bf16 and fp8 KV; pool tokens in the JSON.
  stage one_batch 150 python3 benchmark/bench_one_batch.py "${ONE[@]}" --quantization fp8 \
    --result-file "$OUT/one_batch.jsonl" --tag fp8_w
  stage one_batch 150 python3 benchmark/bench_one_batch.py "${ONE[@]}" --quantization fp8 \
    --kv-cache-dtype fp8_e4m3 --result-file "$OUT/one_batch.jsonl" --tag fp8_w_kv
fi
if has fp8_ab; then
  # One-row FP8 products on the GEMV (default) against _scaled_mm on rows padded to 16.
  FAB=(--model-config llama3-8b --batch-size 1 --input-len 512 --output-len 32 --quantization fp8)
  stage one_batch 90 python3 benchmark/bench_one_batch.py "${FAB[@]}" --result-file "$OUT/one_batch.jsonl" --tag fp8_gemv
  stage one_batch 90 env SGLANG_FP8_ONE_ROW=scaled_mm python3 benchmark/bench_one_batch.py "${FAB[@]}" \
    --result-file "$OUT/one_batch.jsonl" --tag fp8_scaled_mm
fi
if has fp8_prof; then
  # Where the bs 1 FP8 step goes: decode kernel tables (per-kernel time, idle share) for fp8 and bf16.
  FP=(--model-config llama3-8b --batch-size 1 --input-len 512 --output-len 16 --profile-bs 1)
  [[ ${SMOKE:-0} == 1 ]] && FP=(--model-config tiny-llama --batch-size 1 --input-len 32 --output-len 4 --profile-bs 1 --max-total-tokens 8192)
  stage one_batch 120 python3 benchmark/bench_one_batch.py "${FP[@]}" --quantization fp8 \
    --result-file "$OUT/one_batch.jsonl" --tag fp8_prof
  stage one_batch 120 python3 benchmark/bench_one_batch.py "${FP[@]}" --result-file "$OUT/one_batch.jsonl" --tag bf16_prof
fi
if has fp8_small_m; then
  # 1-64-row FP8 products on the small-M tensor-core kernel (fp8 weights widened in registers)
  # against the default (GEMV for one row, _scaled_mm with per-token activation scales above).
  FSM=(--model-config llama3-8b --batch-size 1 8 64 256 --input-len 512 --output-len 32 --quantization fp8)
  stage one_batch 100 python3 benchmark/bench_one_batch.py "${FSM[@]}" --result-file "$OUT/one_batch.jsonl" --tag fp8_default
  stage one_batch 100 env SGLANG_FP8_SMALL_M=1 python3 benchmark/bench_one_batch.py "${FSM[@]}" \
    --result-file "$OUT/one_batch.jsonl" --tag fp8_small_m
fi
if has fp8_tests; then
  stage gpu_tests 200 python3 -m pytest test/gpu/test_fp8_gpu.py -q -p no:cacheprovider --timeout=100 -rfE
fi
if has fp8_gemv; then
  # The one-row FP8 word GEMV (issue 24) swept per shape and scale layout against the
  # conversion-based GEMV; the best tiles go to fp8_gemv_configs.json, which fp8_tri binds.
  FG=()
  [[ ${SMOKE:-0} == 1 ]] && FG=(--shapes o_proj)
  stage fp8_gemv 240 python3 benchmark/kernels/bench_gemv.py --fp8 "${FG[@]}" --out "$OUT/fp8_gemv_configs.json"
fi
[[ -f "$OUT/fp8_gemv_configs.json" ]] && export SGLANG_FP8_GEMV_CONFIGS="$OUT/fp8_gemv_configs.json"
if has fp8_halves; then
  # The one-row f16x2 FP8 GEMV (per channel) swept per shape against the word GEMV; its best tiles
  # go to fp8_halves_configs.json, which later stages bind.
  FG=()
  [[ ${SMOKE:-0} == 1 ]] && FG=(--shapes o_proj)
  stage fp8_halves 240 python3 benchmark/kernels/bench_gemv.py --halves "${FG[@]}" --out "$OUT/fp8_halves_configs.json"
fi
[[ -f "$OUT/fp8_halves_configs.json" ]] && export SGLANG_FP8_HALVES_CONFIGS="$OUT/fp8_halves_configs.json"
if has fp8_one; then
  # Batch-1 decode with FP8 weights: the f16x2 GEMV, the word GEMV (the default), and bf16, in one
  # call (the bs-1 target of issue 24 is against the same call's floor).
  F1=(--model-config llama3-8b --batch-size 1 --input-len 512 --output-len 32)
  [[ ${SMOKE:-0} == 1 ]] && F1=(--model-config tiny-llama --batch-size 1 --input-len 32 --output-len 4 --max-total-tokens 8192)
  stage one_batch 120 env SGLANG_FP8_ONE_ROW=halves python3 benchmark/bench_one_batch.py "${F1[@]}" \
    --quantization fp8 --result-file "$OUT/one_batch.jsonl" --tag fp8_halves
  stage one_batch 120 env SGLANG_FP8_ONE_ROW=words python3 benchmark/bench_one_batch.py "${F1[@]}" \
    --quantization fp8 --result-file "$OUT/one_batch.jsonl" --tag fp8_words
  stage one_batch 120 python3 benchmark/bench_one_batch.py "${F1[@]}" --result-file "$OUT/one_batch.jsonl" --tag bf16
fi
if has fp8_mma; then
  # FP8 products with x quantized inside the tensor-core kernel (no quantization launch): its GPU
  # tests, the one-row tile sweep against the word GEMV, then decode steps at 1-64 rows with it
  # (SGLANG_FP8_ONE_ROW=mma SGLANG_FP8_FUSED_QUANT=1) against the default, alternated, and bf16.
  FG=()
  [[ ${SMOKE:-0} == 1 ]] && FG=(--shapes o_proj)
  stage gpu_tests 200 python3 -m pytest test/gpu/test_fp8_gpu.py -q -p no:cacheprovider --timeout=100 -rfE -k fused
  stage fp8_mma 240 python3 benchmark/kernels/bench_gemv.py --mma --bw "${BW_TBS:-4.2}" "${FG[@]}"
  FM=(--model-config llama3-8b --batch-size 1 8 64 --input-len 512 --output-len 32 --quantization fp8)
  [[ ${SMOKE:-0} == 1 ]] && FM=(--model-config tiny-llama --batch-size 1 8 --input-len 32 --output-len 4 --max-total-tokens 8192 --quantization fp8)
  for round in 1 2; do
    stage one_batch 120 python3 benchmark/bench_one_batch.py "${FM[@]}" --result-file "$OUT/one_batch.jsonl" --tag fp8_default$round
    stage one_batch 120 env SGLANG_FP8_ONE_ROW=mma SGLANG_FP8_FUSED_QUANT=1 python3 benchmark/bench_one_batch.py \
      "${FM[@]}" --result-file "$OUT/one_batch.jsonl" --tag fp8_mma$round
  done
fi
if has fp8_mma_wide; then
  # One row: the fused kernel only for the widest weight (gate_up), the word GEMV elsewhere,
  # against the default, alternated.
  FW=(--model-config llama3-8b --batch-size 1 --input-len 512 --output-len 32 --quantization fp8)
  for round in 1 2; do
    stage one_batch 100 python3 benchmark/bench_one_batch.py "${FW[@]}" --result-file "$OUT/one_batch.jsonl" --tag fp8_words$round
    stage one_batch 100 env SGLANG_FP8_ONE_ROW=mma_wide python3 benchmark/bench_one_batch.py "${FW[@]}" \
      --result-file "$OUT/one_batch.jsonl" --tag fp8_mma_wide$round
  done
fi
if has attn_pack; then
  # KV heads per decode-attention program (issue 23): the kernel table, then decode steps and the
  # offline workload with the rule at 4 programs per SM (the default) and with packing off, alternated.
  stage attn_pack 200 python3 benchmark/kernels/bench_attention.py --only pack --bw "${BW:-4.2e12}"
  PK=(--model-config llama3-8b --batch-size 64 128 256 --input-len 512 --output-len 32)
  PQ=(--model-config qwen3-0.6b --batch-size 256 --input-len 768 --output-len 32)
  if [[ ${SMOKE:-0} == 1 ]]; then
    PK=(--model-config tiny-llama --batch-size 8 --input-len 32 --output-len 4 --max-total-tokens 8192)
    PQ=("${PK[@]}")
  fi
  for v in "pack_rule 4" "pack_off 0"; do
    set -- $v
    stage one_batch 120 env SGLANG_DECODE_KV_PACK_PROGRAMS=$2 python3 benchmark/bench_one_batch.py "${PK[@]}" \
      --result-file "$OUT/one_batch.jsonl" --tag "llama_$1"
    stage one_batch 90 env SGLANG_DECODE_KV_PACK_PROGRAMS=$2 python3 benchmark/bench_one_batch.py "${PQ[@]}" \
      --result-file "$OUT/one_batch.jsonl" --tag "qwen3_$1"
    stage offline 120 env SGLANG_DECODE_KV_PACK_PROGRAMS=$2 python3 benchmark/bench_offline_throughput.py "${OFF[@]}" \
      --result-file "$OUT/offline.jsonl" --tag "$1"
  done
fi
if has prof256; then
  # Where a bs-256 bf16 decode step goes (issue 23): the kernel table without PDL, so each kernel's
  # time is its own.
  P2=(--model-config llama3-8b --batch-size 256 --input-len 512 --output-len 16 --profile-bs 256 --disable-pdl)
  [[ ${SMOKE:-0} == 1 ]] && P2=(--model-config tiny-llama --batch-size 8 --input-len 32 --output-len 4 --profile-bs 8 --disable-pdl --max-total-tokens 8192)
  stage one_batch 150 python3 benchmark/bench_one_batch.py "${P2[@]}" --result-file "$OUT/one_batch.jsonl" --tag bf16_prof256
fi
if has fp8_mm; then
  # FP8 matmuls alone (issue 24): bf16 cuBLAS, _scaled_mm, the GEMV and the Triton FP8 x FP8 kernel
  # (per-channel, tile sweep; 128-block) at 1-256 rows; the tiles that beat the default path go to
  # fp8_gemm_configs.json, which the fp8_tri stage then binds.
  FMM=()
  [[ ${SMOKE:-0} == 1 ]] && FMM=(--m 1 8 --shapes o_proj --no-sweep)
  stage fp8_mm 300 python3 benchmark/kernels/bench_fp8_matmul.py "${FMM[@]}" --out "$OUT/fp8_gemm_configs.json"
fi
if has fp8_tri; then
  # Decode steps with FP8 weights: the default paths (word GEMV for one row, the Triton FP8 x FP8
  # kernel for decode batches, _scaled_mm above), an older default (conversion GEMV, _scaled_mm
  # from 2 rows), bf16 in the same call, and a block-scaled FP8 checkpoint (dummy, 128 x 128).
  FT=(--model-config llama3-8b --batch-size 1 8 64 256 --input-len 512 --output-len 32)
  [[ ${SMOKE:-0} == 1 ]] && FT=(--model-config tiny-llama --batch-size 1 8 --input-len 32 --output-len 4 --max-total-tokens 8192)
  FTB=llama3-8b-fp8-blocks
  [[ ${SMOKE:-0} == 1 ]] && FTB=tiny-llama-fp8-blocks
  [[ -f "$OUT/fp8_gemm_configs.json" ]] && export SGLANG_FP8_GEMM_CONFIGS="$OUT/fp8_gemm_configs.json"
  stage one_batch 120 python3 benchmark/bench_one_batch.py "${FT[@]}" --quantization fp8 \
    --result-file "$OUT/one_batch.jsonl" --tag fp8_default
  stage one_batch 120 env SGLANG_FP8_ONE_ROW=gemv SGLANG_FP8_TRITON_MAX_M=0 python3 benchmark/bench_one_batch.py \
    "${FT[@]}" --quantization fp8 --result-file "$OUT/one_batch.jsonl" --tag fp8_prev
  stage one_batch 120 python3 benchmark/bench_one_batch.py "${FT[@]}" --result-file "$OUT/one_batch.jsonl" --tag bf16
  stage one_batch 150 python3 benchmark/bench_one_batch.py "${FT[@]:2}" --model-config "$FTB" \
    --result-file "$OUT/one_batch.jsonl" --tag fp8_blocks
fi
if has fp8_budget; then
  # The guide's FP8 point at a fixed memory budget through the server (carry .tok too).
  stage fp8_budget 540 env OUT="$OUT" bash benchmark/fp8_budget_recipe.sh
fi
if has offline; then
  for mode in ${OFFLINE_MODES:-on off}; do
    flag=()
    [[ $mode == off ]] && flag=(--disable-overlap-schedule)
    stage offline 110 python3 benchmark/bench_offline_throughput.py "${OFF[@]}" "${flag[@]}" \
      --result-file "$OUT/offline.jsonl"
  done
fi
if has kernels; then
  stage bench_attention 80 python3 benchmark/kernels/bench_attention.py
fi
if has attn_sweep; then
  # Decode attention at the bench_one_batch shape (ctx 512 + 16): stage-1 configs and the split heuristic.
  stage bench_attention 120 python3 benchmark/kernels/bench_attention.py --only decode --sweep --sweep-ctx 528 \
    --sweep-bs 64 1 --no-extend-sweep
fi
if has attn_splits; then
  # Decode attention: stage-1 configs with one split at the bs-64 shape, then every request forced to
  # 1/2/3/4/8 splits at ctx 528-4096 and bs 16-128 next to what the split heuristic picks.
  stage bench_attention 200 python3 benchmark/kernels/bench_attention.py --only decode --sweep \
    --sweep-ctx 528 1024 2048 4096 --sweep-bs 64 --sweep-config-splits 1 --no-extend-sweep
fi
if has long_ctx; then
  # Decode over batch x context and chunked long prefills against their floors (issue 23), with the
  # HF static-cache peer at LONG_HF cells; LONG_KV=fp8_e4m3 for the fp8-KV table.
  LONG=(--model-config llama3.1-8b --batch-size 1 8 64 256 --context 512 4096 32768 131072
        --prefill 8192 32768 131072 --steps 16 --bw 4.21e12 --flops 7.8e14)
  [[ ${SMOKE:-0} == 1 ]] && LONG=(--model-config tiny-llama --batch-size 1 4 --context 64 512
        --prefill 256 --chunk 64 --steps 4 --max-total-tokens 8192)
  stage long_ctx ${LONG_LIMIT:-420} python3 benchmark/bench_long_context.py "${LONG[@]}" \
    --hf-cells ${LONG_HF:-} --kv-cache-dtype ${LONG_KV:-auto} --result-file "$OUT/long_ctx.jsonl"
fi
if has spec_tree || has spec_tests; then
  # Draft trees (issue 26): the GPU tests (tree verify passes), then chains against trees with the
  # same 8 rows per request (7 nodes: the oracle's chain of 4 and 3 wrong siblings of its first
  # draft); both replay the decode graphs.
  stage gpu_tests 200 python3 -m pytest test/gpu/test_speculative_gpu.py \
    -q -p no:cacheprovider -rfE
fi
if has spec_tree; then
  TREE=(--model-config llama3-8b --batch-size 1 8 32 64 --accept 0.9 1.0 --num-draft-tokens 8)
  [[ ${SMOKE:-0} == 1 ]] && TREE=(--model-config tiny-llama --batch-size 1 4 --accept 1.0 --input-len 32
        --output-len 16 --max-total-tokens 4096 --num-draft-tokens 8)
  stage spec 200 python3 benchmark/bench_speculative.py "${TREE[@]}" --result-file "$OUT/spec.jsonl"
  stage spec 200 python3 benchmark/bench_speculative.py "${TREE[@]}" --tree-breadth 4 \
    --result-file "$OUT/spec.jsonl"
fi
if has spec_draft; then
  # A real draft model's cost (issue 26): Llama-3.2-1B drafting for Llama-3-8B (same vocabulary),
  # chains and trees, draft decode passes under CUDA graphs and eager; oracle verdicts.
  SD=(--model-config llama3-8b --draft-model-config llama3.2-1b --batch-size 1 8 32 --accept 0.8 1.0)
  [[ ${SMOKE:-0} == 1 ]] && SD=(--model-config tiny-llama --draft-model-config tiny-llama
        --batch-size 1 4 --accept 1.0 --input-len 32 --output-len 16 --max-total-tokens 4096)
  # SD_EAGER="0" or "1" runs only one of the two variants (one device call may not hold both).
  for e in ${SD_EAGER:-0 1}; do
    eager=""; [[ $e == 1 ]] && eager=--draft-eager
    stage spec_draft 150 python3 benchmark/bench_speculative.py "${SD[@]}" --num-draft-tokens 4 \
      $eager --result-file "$OUT/spec_draft.jsonl"
    stage spec_draft 150 python3 benchmark/bench_speculative.py "${SD[@]}" --num-draft-tokens 8 \
      --topk 4 --num-steps 3 $eager --result-file "$OUT/spec_draft.jsonl"
  done
fi
if has ngram_text; then
  # NGRAM on real text (issue 26): a trained model (the SmolLM2 GGUF at $NGRAM_MODEL, its tokenizer
  # read from the file; the device carry limit is below its size, so it travels in two parts over two
  # back-to-back calls, .gguf_parts/a/part to /tmp/smol.a first, then .gguf_parts/b/part joined to
  # it) copying prose and code, and answering open questions, against plain decoding.
  NT=(--model-path "${NGRAM_MODEL:-/tmp/smollm2.gguf}"
      --batch-size 1 8 32 --num-draft-tokens 4 8 --tree-breadth 4)
  [[ ${SMOKE:-0} == 1 ]] && NT=(--batch-size 1 --num-draft-tokens 4 --max-new-tokens 16 --workload quote)
  stage ngram_text 420 python3 benchmark/bench_ngram_text.py "${NT[@]}" --result-file "$OUT/ngram_text.jsonl"
fi
if has hicache_tests; then
  stage gpu_tests 150 python3 -m pytest test/gpu/test_hicache_gpu.py -q -p no:cacheprovider --timeout=100 -rfE
fi
if has hicache; then
  # HiCache (issue 25): host copy rates, then the shared-prefix recipe with prefixes that fit and
  # with 4x more prefix bytes than the device pool, each without and with the host tier (carry .tok).
  stage hicache_run 420 env OUT="$OUT" bash benchmark/hicache_recipe.sh
fi
if has spec; then
  # Speculative decoding (issue 26): GPU tests, then time per output token against accept length
  # with oracle drafts at set keep rates, plain decoding in the same process.
  stage gpu_tests 120 python3 -m pytest test/gpu/test_speculative_gpu.py -q -p no:cacheprovider -rfE
  SPEC=(--model-config llama3-8b --batch-size 1 8 32 64 --accept 0 0.6 0.9 1.0 --num-draft-tokens 4)
  [[ ${SMOKE:-0} == 1 ]] && SPEC=(--model-config tiny-llama --batch-size 1 4 --accept 0 1.0 --input-len 32
        --output-len 16 --max-total-tokens 4096)
  stage spec 300 python3 benchmark/bench_speculative.py "${SPEC[@]}" --result-file "$OUT/spec.jsonl"
fi
if has det; then
  # Deterministic inference (seeds step 15): the GPU tests with the large-tile matmul config for
  # more than 256 rows (the sm_90 default: its prefills must give the small config's bits, or the
  # batch-invariance tests fail) and with one config (off), then the config sweep (same-bits column).
  stage det_tests 200 python3 -m pytest test/gpu/test_deterministic_gpu.py -q -p no:cacheprovider -rfE
  stage det_tests 200 env SGLANG_INVARIANT_MM_LARGE=off \
    python3 -m pytest test/gpu/test_deterministic_gpu.py -q -p no:cacheprovider -rfE
  stage det_mm 150 python3 benchmark/kernels/bench_invariant_matmul.py --m 1 64 300 4096
fi
if has det_bench; then
  # The flag's cost: plain, deterministic, and deterministic with one matmul config, same call.
  DB=(--model-config llama3-8b --batch-size 1 8 64 --input-len 512 --output-len 32)
  [[ ${SMOKE:-0} == 1 ]] && DB=(--model-config tiny-llama --batch-size 1 8 --input-len 32 --output-len 4
        --max-total-tokens 8192)
  stage det_bench 150 python3 benchmark/bench_one_batch.py "${DB[@]}" --result-file "$OUT/det.jsonl"
  stage det_bench 150 python3 benchmark/bench_one_batch.py "${DB[@]}" \
    --enable-deterministic-inference --result-file "$OUT/det.jsonl"
  stage det_bench 150 env SGLANG_INVARIANT_MM_LARGE=off python3 benchmark/bench_one_batch.py \
    "${DB[@]}" --enable-deterministic-inference --result-file "$OUT/det.jsonl"
fi
if has eagle_paged || has eagle_tree; then
  # EAGLE-3 drafting paged with graphs (the default) against per-request caches (--draft-eager),
  # a random head of the target's shape, oracle verdicts at a set keep rate (issue 26).
  EP=(--model-config llama3-8b --eagle EAGLE3 --batch-size 1 8 32 64 --accept 0.8)
  [[ ${SMOKE:-0} == 1 ]] && EP=(--model-config tiny-llama --eagle EAGLE3 --batch-size 1 4 --accept 1.0
        --input-len 32 --output-len 16 --max-total-tokens 4096)
  SHAPES=()
  has eagle_paged && SHAPES+=("--num-draft-tokens 4")
  has eagle_tree && SHAPES+=("--num-draft-tokens 7 --topk 3 --num-steps 3")
  for shape in "${SHAPES[@]}"; do
    for e in ${EP_EAGER:-0 1}; do
      eager=""; [[ $e == 1 ]] && eager=--draft-eager
      # shellcheck disable=SC2086
      stage eagle_paged ${EP_LIMIT:-200} python3 benchmark/bench_speculative.py "${EP[@]}" $shape \
        $eager --result-file "$OUT/eagle_paged.jsonl"
    done
  done
fi
if has recipes; then
  # Serving recipes through real servers (benchmark/gpu_recipes.sh; carry .tok too). Servers in
  # RECIPE_SERVERS (default: the stream-interval and overlap pairs); the Triton compile log lines land in servers.log.
  # Files: recipes.{log,jsonl}, servers.log, serving.log: with tests + one_batch that is the 8 that come back.
  stage serving 240 env SERVERS="${RECIPE_SERVERS:-si1 si8 eon eoff}" OUT="$OUT" bash benchmark/gpu_recipes.sh
  grep -h "Triton compiled" "$OUT/servers.log" | tee -a "$OUT/summary.txt"
fi
python3 benchmark/gpu_summary.py "$OUT" | tee -a "$OUT/summary.txt"
# At most 8 files come back: BUNDLE=1 packs every log, JSONL and PNG into one archive.
if [[ ${BUNDLE:-0} == 1 ]]; then
  (cd "$OUT" && tar czf bundle.tgz --exclude=bundle.tgz --exclude=summary.txt ./* && \
    find . -maxdepth 1 -type f ! -name bundle.tgz ! -name summary.txt -delete)
fi
