#!/usr/bin/env bash
# Trains the demo target's drafters on a machine with a CUDA PyTorch: DSpark, DFlash and EAGLE-3
# side by side on one GPU, on the same regenerated data (the target computes the hidden states on
# the GPU: no hidden-state dataset), with the same depth, batch, anchors and wall-clock time.
# Builds dspark-train there against that PyTorch, with the Debian libraries of scripts/gpu-deps.sh,
# checks that a few steps on the GPU follow the same steps on the CPU, then trains until SECONDS
# after the script started (less what loading, validation and writing take).
#
#   scripts/gpu-train-drafters.sh OVERLAY DATA OUT_DIR SECONDS
#     OVERLAY  scripts/gpu-deps.sh's overlay.tar.xz
#     DATA     dspark datagen regenerate's JSONL (.xz allowed), with DATA.meta.json (or the JSONL's) beside it
#     OUT_DIR  METHOD.safetensors.partNN per method (cat them) and logs.tar.gz (the configs, logs and the
#              build's output)
# Environment: BIN (a dspark-train to use instead of building one), DEVICE (cuda), METHODS
# ("dspark dflash eagle3"), BATCH (16), ANCHORS (512), LAYERS (2), THREADS (4 per trainer).
set -euo pipefail
cd "$(dirname "$0")/.."
overlay=$1 data=$2 out=$3 budget=$4
start=$(date +%s)
DEVICE=${DEVICE:-cuda}
METHODS=${METHODS:-dspark dflash eagle3}
BATCH=${BATCH:-16}
ANCHORS=${ANCHORS:-512}
LAYERS=${LAYERS:-2}
THREADS=${THREADS:-4}
work=${WORK:-/tmp/dspark-gpu}
rm -rf "$work"
mkdir -p "$work" "$out"
log() { echo "[$(($(date +%s) - start)) s] $*"; }

if [ -z "${BIN:-}" ]; then
  ovl=$work/overlay
  mkdir -p "$ovl"
  tar -C "$ovl" -xJf "$overlay"
  find "$ovl" -name '*.pc' -exec sed -i "s|=/usr|=$ovl/usr|g" {} +
  export PATH=$ovl/usr/bin:/usr/local/cuda/bin:$PATH
  export PKG_CONFIG_PATH=$ovl/usr/lib/x86_64-linux-gnu/pkgconfig:$ovl/usr/share/pkgconfig:$ovl/usr/lib/pkgconfig
  export LD_LIBRARY_PATH=$ovl/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  log "torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'), $(c++ --version | head -1)"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSPARK_TESTS=OFF -DDSPARK_FUZZ=OFF \
    -DCMAKE_PREFIX_PATH="$ovl/usr;$torch_prefix" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
  ninja -C build-gpu dspark-train >> "$work/build.log" 2>&1 || { grep -E -B2 -A6 "error|Error" "$work/build.log" | head -80; exit 1; }
  BIN=build-gpu/dspark-train
  log "built $BIN"
fi

# The data, and its record of which target answered (the trainer checks it against --target).
jsonl=$work/regen.jsonl
case $data in *.xz) xz -dc "$data" > "$jsonl" ;; *) cp "$data" "$jsonl" ;; esac
meta=${data%.xz}.meta.json
[ -f "$meta" ] && cp "$meta" "$jsonl.meta.json"
log "data: $(wc -l < "$jsonl") records"

common=(--target models/demo --target-layers 1,3,4 --layers "$LAYERS" --drafts 8 --seed 42)
# A few steps on the GPU must follow the same steps on the CPU (f32 both; TF32 is off).
if [ "$DEVICE" != cpu ]; then
  head -n 64 "$jsonl" > "$work/smoke.jsonl"
  cp "$jsonl.meta.json" "$work/smoke.jsonl.meta.json" 2>/dev/null || true
  for dev in cpu "$DEVICE"; do
    "$BIN" drafter --method dspark --data "$work/smoke.jsonl" "${common[@]}" --out "$work/smoke-$dev" --steps 3 \
      --batch 4 --anchors 32 --precision f32 --device "$dev" --threads "$THREADS" > "$work/smoke-$dev.log" 2>&1 \
      || { tail -20 "$work/smoke-$dev.log"; exit 1; }
  done
  python3 - "$work/smoke-cpu/train_log.jsonl" "$work/smoke-$DEVICE/train_log.jsonl" <<'PY'
import json, sys
def losses(p):
    return [j["loss"] for j in map(json.loads, open(p)) if "loss" in j and "event" not in j]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("smoke losses cpu", a, "gpu", b)
if len(a) != 3 or len(b) != 3 or any(abs(x - y) > 1e-3 * abs(x) for x, y in zip(a, b)):
    sys.exit("the GPU's steps do not follow the CPU's")
PY
  log "smoke: GPU follows CPU"
fi

left=$((start + budget - $(date +%s) - 60))  # loading, validation and writing
[ "$left" -gt 30 ] || { log "no time left to train ($left s)"; exit 1; }
log "training ${METHODS// /, } for $left s each, side by side"
pids=()
for m in $METHODS; do
  timeout $((left + 240)) "$BIN" drafter --method "$m" --data "$jsonl" "${common[@]}" --out "$work/run-$m" \
    --anchors "$ANCHORS" --batch "$BATCH" --steps 1000000 --time-limit "$left" --save-every 1000000 \
    --device "$DEVICE" --threads "$THREADS" > "$work/run-$m.log" 2>&1 &
  pids+=($!)
done
(sleep 90; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv 2>/dev/null > "$work/gpu-util.txt") &
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
for m in $METHODS; do
  tail -c 600 "$work/run-$m.log" | tr '\r' '\n' | tail -3
  # Files come back from the GPU machine in pieces of at most 16 MiB (cat them together).
  [ -f "$work/run-$m/drafter/model.safetensors" ] && split -b 15M -d "$work/run-$m/drafter/model.safetensors" "$out/$m.safetensors.part"
done
(cd "$work" && tar -czf "$out/logs.tar.gz" --ignore-failed-read build.log gpu-util.txt smoke-*.log run-*.log \
  run-*/train_log.jsonl run-*/drafter/config.json 2>/dev/null) || true
log "done (status $status)"
exit $status
