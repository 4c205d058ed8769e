#!/usr/bin/env bash
# Reproduces the demo drafters for the demo target, the equal-budget comparison of docs/drafters.md
# with its defaults (DSpark, DFlash and EAGLE-3), and models/demo-dspark with STEPS=2400
# METHODS=dspark ALL_PROMPTS_T1=0 (the same recipe, three times the steps). Stages: response
# regeneration -> hidden-state extraction -> drafters trained on the same data with the same budget
# and depth -> STS calibration of the DSpark drafter -> per-domain benchmarks
# (every drafter verifying full blocks, and DSpark with the prefix length policy) -> f32 exactness.
#
#   scripts/train-demo-drafters.sh [WORK_DIR] [TARGET_DIR] [CORPUS_DIR]
#     defaults: build/demo-drafters, models/demo, build/demo-target/corpus
#
# Every stage resumes or reuses complete output. Environment: PROMPTS (regenerated prompts, 24000),
# MIX_PROMPTS (prompts built, 40000), EXCLUDE (evaluation sets the prompts are checked against),
# METHODS ("dspark dflash eagle3"), BENCH_PROMPTS (per domain, 20), STEPS (optimizer steps of DSpark
# and DFlash, 800), EAGLE3_STEPS (260: at two layers an unrolled EAGLE-3 step costs about 4x a
# DSpark step on this data, 5.6 s against 1.4-1.6 s, so 260 of them take at least the training
# time of 800 DSpark steps), BATCH (sequences per step, 16), ANCHORS (per sequence, 64), DRAFTS
# (gamma, 8), LAYERS (decoder layers of every method: the same depth, 2), PRECISION (auto: bf16
# autocast where the CPU has AVX512-BF16 or AMX, else f32), ALL_PROMPTS_T1 (1: also every
# held-out prompt at T=1; 0: skip), VOCAB (draft vocabulary of the DSpark drafter, 2048 ids; 0: none),
# DSPARK_INIT (a DSpark drafter to start the DSpark run from, e.g. models/demo-dspark; empty: random),
# SLIDING_WINDOW (the drafters' sliding_window, written to their config.json; 0: --init's, else none).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-build/demo-drafters}
TARGET=${2:-models/demo}
CORPUS=${3:-build/demo-target/corpus}
BIN=${BIN:-build}
PROMPTS=${PROMPTS:-24000}
MIX_PROMPTS=${MIX_PROMPTS:-40000}
STEPS=${STEPS:-800}
EAGLE3_STEPS=${EAGLE3_STEPS:-260}
ANCHORS=${ANCHORS:-64}
DRAFTS=${DRAFTS:-8}
LAYERS=${LAYERS:-2}
BATCH=${BATCH:-16}
PRECISION=${PRECISION:-auto}
TAPS=${TAPS:-1,3,4}
METHODS=${METHODS:-dspark dflash eagle3}
BENCH_PROMPTS=${BENCH_PROMPTS:-20}
VOCAB=${VOCAB:-2048}
SLIDING_WINDOW=${SLIDING_WINDOW:-0}
mkdir -p "$WORK"

# 1. Regeneration prompts of every kind a chat model gets (datagen prompts: manual sections to
#    summarize or question, words, translation both ways, code to explain / test / fix, word
#    problems in several phrasings, open writing, two-turn chats, and the corpus' own instruction
#    turns), built from the corpus' train split and checked against the evaluation sets when they
#    are there; then the target answers PROMPTS of them (T 0.7, top-p 0.8, top-k 20). The file is
#    shuffled, so any prefix is a mix: a smaller PROMPTS answers its first PROMPTS.
EXCLUDE=${EXCLUDE:-../shared/data/spec_bench.jsonl,../shared/data/mt_bench.jsonl}
exclude=()
[ -f "${EXCLUDE%%,*}" ] && exclude=(--exclude "$EXCLUDE")
[ -f "$WORK/prompts.jsonl" ] || "$BIN/dspark" datagen prompts --corpus "$CORPUS" --count "$MIX_PROMPTS" --seed 1 \
  "${exclude[@]}" --out "$WORK/prompts.jsonl"
"$BIN/dspark" datagen regenerate --model "$TARGET" --prompts "$WORK/prompts.jsonl" --limit "$PROMPTS" \
  --out "$WORK/regen.jsonl" --max-tokens 256
# 2. Its hidden states at the drafters' target layers.
"$BIN/dspark" datagen hidden --model "$TARGET" --data "$WORK/regen.jsonl" --layers "$TAPS" --out "$WORK/hidden"

# 3. Three drafters: same data, batch, anchors, drafts per pass and depth; DSpark and DFlash the same
#    steps, EAGLE-3 at least the same training time.
for method in $METHODS; do
  steps=$STEPS
  [ "$method" = eagle3 ] && steps=$EAGLE3_STEPS
  if [ ! -f "$WORK/$method/drafter/config.json" ]; then
    resume=()
    [ -f "$WORK/$method/latest" ] && resume=(--resume)
    init=()
    [ "$method" = dspark ] && [ -n "${DSPARK_INIT:-}" ] && init=(--init "$DSPARK_INIT")
    start=$(date +%s)
    "$BIN/dspark" train drafter --method "$method" --target "$TARGET" --data "$WORK/hidden" --out "$WORK/$method" \
      --layers "$LAYERS" --drafts "$DRAFTS" --anchors "$ANCHORS" --steps "$steps" --batch "$BATCH" --threads 2 \
      --precision "$PRECISION" --sliding-window "$SLIDING_WINDOW" --save-every 50 "${resume[@]}" "${init[@]}"
    echo "{\"method\": \"$method\", \"train_seconds\": $(($(date +%s) - start))}" > "$WORK/$method/train_time.json"
  fi
done

# 4. Sequential Temperature Scaling of the DSpark confidence head on held-out (validation) prompts.
if [ ! -f "$WORK/calibration.json" ]; then
  python3 - "$CORPUS/instructions/validation.jsonl" "$WORK/calib_prompts.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        text = json.loads(line)["text"]
        user = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]
        out.write(json.dumps({"prompt": user}) + "\n")
EOF
  "$BIN/dspark" calibrate --model "$TARGET" --drafter "$WORK/dspark/drafter" --prompts "$WORK/calib_prompts.jsonl" \
    --limit 48 --max-tokens 96 --json > "$WORK/calibration.json"
fi

# 4b. A draft vocabulary for the calibrated DSpark drafter (the one committed as models/demo-dspark):
#     the VOCAB ids most frequent in the regenerated responses. It keeps the full head, so greedy
#     rounds draft over the draft vocabulary and sampled rounds over the full one.
if [ "$VOCAB" -gt 0 ] && [ ! -f "$WORK/dspark_vocab/drafter/config.json" ]; then
  mkdir -p "$WORK/dspark_vocab"
  "$BIN/dspark" drafter reduce-vocab --model "$TARGET" --drafter "$WORK/dspark/drafter" --data "$WORK/regen.jsonl" \
    --size "$VOCAB" --out "$WORK/dspark_vocab/drafter" --json > "$WORK/dspark_vocab/vocab.json"
fi

# 5. Accepted length and speedup per domain on the corpus' held-out prompts, at T=0 and T=1: every
#    drafter verifying full blocks, then DSpark again with the hardware-aware prefix length policy
#    choosing each round's length (its cost curve profiled on this machine at load), "dspark_sched".
# bench_run RUN TEMP LIMIT OUT_DIR: the five domains for one run (a method, or dspark_sched).
# Runs: a method, dspark_sched (adaptive verification), dspark_vocab (the drafter of step 4b).
bench_run() {
  local run=$1 temp=$2 limit=$3 dir=$4 method=${1%_sched} extra="" domain out
  method=${method%_vocab}
  local drafter="$WORK/$run/drafter"
  [ "$run" = dspark_sched ] && drafter="$WORK/dspark/drafter"
  [ "$method" = dspark ] && extra=', "rejection_sample_method": "block"'
  [ "$run" = dspark_sched ] && extra="$extra"', "enable_adaptive_verification": true'
  local cfg="{\"model\": \"$drafter\", \"method\": \"$method\", \"num_speculative_tokens\": $DRAFTS, \"draft_sample_method\": \"probabilistic\"$extra}"
  for domain in math translation prose instructions code; do
    out="$dir/bench-$run-T$temp-$domain.json"
    [ -f "$out" ] && continue
    local raw=()
    [ "$domain" = code ] && raw=(--raw)
    "$BIN/dspark" bench spec --model "$TARGET" --speculative-config "$cfg" \
      --prompts "$CORPUS/prompts/$domain.jsonl" --limit "$limit" --max-tokens 96 --temperature "$temp" \
      "${raw[@]}" --json > "$out.tmp" && mv "$out.tmp" "$out"
  done
}
runs=$METHODS
case " $METHODS " in *" dspark "*) runs="$runs dspark_sched" ;; esac
[ -f "$WORK/dspark_vocab/drafter/config.json" ] && runs="$runs dspark_vocab"
for run in $runs; do
  for temp in 0 1; do bench_run "$run" "$temp" "$BENCH_PROMPTS" "$WORK"; done
done

# 5b. The paper's protocol temperature (T=1, full blocks) on every held-out prompt of each domain
#     (100, code 63): the margins with less sampling noise than BENCH_PROMPTS per domain.
if [ "${ALL_PROMPTS_T1:-1}" = 1 ]; then
  mkdir -p "$WORK/all-prompts-T1"
  for method in $METHODS; do bench_run "$method" 1 0 "$WORK/all-prompts-T1"; done
fi

# 6. Exactness: in f32, greedy speculative output must be token-identical to plain greedy output.
exact_runs=$METHODS
[ -f "$WORK/dspark_vocab/drafter/config.json" ] && exact_runs="$exact_runs dspark_vocab"
for run in $exact_runs; do
  method=${run%_vocab}
  out="$WORK/f32-$run.json"
  if [ ! -f "$out" ]; then
    cfg="{\"model\": \"$WORK/$run/drafter\", \"method\": \"$method\", \"num_speculative_tokens\": $DRAFTS}"
    "$BIN/dspark" bench spec --model "$TARGET" --speculative-config "$cfg" --dtype f32 \
      --prompts "$CORPUS/prompts/instructions.jsonl" --limit 10 --max-tokens 96 --temperature 0 --json > "$out.tmp"
    mv "$out.tmp" "$out"
  fi
  # Checked on every run, also for output kept from an earlier one.
  python3 - "$out" <<'EOF'
import json, sys
a = json.load(open(sys.argv[1]))["all"]
if a["identical_outputs"] != a["prompts"]:
    sys.exit("%s: f32 greedy output differs from plain decoding in %d of %d prompts"
             % (sys.argv[1], a["prompts"] - a["identical_outputs"], a["prompts"]))
EOF
done
echo "drafters: $WORK/{dspark,dflash,eagle3}/drafter, $WORK/dspark_vocab/drafter (models/demo-dspark); calibration: $WORK/calibration.json; benchmarks: $WORK/bench-*.json, $WORK/all-prompts-T1, $WORK/f32-*.json"
