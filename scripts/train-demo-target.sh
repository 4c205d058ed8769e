#!/usr/bin/env bash
# Reproduces the embedded demo target (models/demo) from scratch on this machine:
# corpus -> tokenizer -> tokenized shards -> target LM training -> evaluation.
#
#   scripts/train-demo-target.sh [WORK_DIR]     (default: build/demo-target)
#
# Every stage reuses its output when it is already complete. The training stage resumes
# from its latest checkpoint if interrupted. About 2.3-2.5 hours on 2 cores (2.32 h on 2026-12-01).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-build/demo-target}
BIN=${BIN:-build}
STEPS=${STEPS:-1500}
mkdir -p "$WORK"

"$BIN/dspark" corpus build --out "$WORK/corpus" --seed 1
if [ ! -f "$WORK/tokenizer/tokenizer.json" ]; then
  "$BIN/dspark" tokenizer train --corpus "$WORK/corpus" --vocab-size 8192 --out "$WORK/tokenizer/tokenizer.json"
fi
if [ ! -f "$WORK/tokens/manifest.json" ]; then
  "$BIN/dspark" corpus tokenize --corpus "$WORK/corpus" --tokenizer "$WORK/tokenizer/tokenizer.json" --out "$WORK/tokens"
fi
resume=()
[ -f "$WORK/run/latest" ] && resume=(--resume)
"$BIN/dspark" train lm --config models/demo-config/config.json \
  --tokenizer "$WORK/tokenizer/tokenizer.json" --data "$WORK/tokens" --out "$WORK/run" \
  --steps "$STEPS" --batch 8 --seq-len 512 --lr 2e-3 --warmup 50 --min-lr-ratio 0.1 \
  --weight-decay 0.1 --clip 1.0 --seed 1234 --threads 2 --precision auto \
  --eval-every 250 --eval-windows 8 --save-every 250 "${resume[@]}"
"$BIN/dspark" train eval --model "$WORK/run/model" --data "$WORK/tokens" --split validation --windows 64 \
  > "$WORK/run/validation.json"
echo "model: $WORK/run/model; validation: $WORK/run/validation.json"
