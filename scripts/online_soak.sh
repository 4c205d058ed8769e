#!/usr/bin/env bash
# Soak of online drafter training (a benchmark, not part of `make test`): the topology of
# scripts/online-learning.sh and tests/connector/topology_test.sh on loopback -- redis-server
# (no persistence), two `dspark serve` (DSpark, exporting hidden states through the connector)
# and one `dspark train drafter --online` that sends them prompts, trains on the exported samples,
# deletes them from the store after each checkpoint and hot-reloads both servers' drafter -- for
# SECONDS, proving that no process grows:
#   * first a high-water round on both servers (long requests at full concurrency, exporting
#     requests of the trainer's shape; their samples deleted) brings them to their steady size;
#   * every INTERVAL s: VmRSS of redis-server, each server and the trainer, redis DBSIZE and
#     INFO memory used_memory, the servers' dspark:hidden_states_exports_total{result="written"}
#     and the samples trained, and the trainer's RSS at the end of its latest step (its log's
#     rss_mib), one CSV row (OUT/samples.csv);
#   * after the warm-up (--warmup S, default the first 20% of the run), a least-squares line per
#     series over time: its slope in KiB per minute and in bytes per exported request (the
#     exports both servers counted in the window; a server's own for a server); for the trainer
#     the series is its RSS at step ends, the same point of every step (sampled at random times
#     it also swings with each sample's length; the summary gives that range and its peak);
#   * fails (exit 1) when, for any process, RSS at the end is more than --max-growth-pct (2%) above
#     RSS at the end of the warm-up (each the median of the 3 samples there, so that one noisy
#     sample decides nothing; for redis-server plus the bytes of the samples it may hold at once,
#     below), or its slope is above both --max-slope-kib-min (default 256 KiB/min,
#     7.5 MiB over half an hour) and --max-bytes-per-export (default 4096 B: a leak of a whole
#     sample per request, ~300 KiB for the demo at 64 tokens, is far above it; a few bytes of bookkeeping
#     per request are not), or when redis's key count rises above the bound the trainer's design
#     allows (3 keys per sample; samples in flight, queued, trained and not yet checkpointed:
#     3 x (batch x save_every + 2 x batch + in_flight + 8)), or when a sample is still stored
#     after the trainer should have deleted it (its handle in OUT/run/online_consumed.jsonl,
#     trained at a step no later than the checkpoint before the latest: checked every sample,
#     exactly), or when any key stays untouched (OBJECT IDLETIME) for over --stale-s s (default
#     600; a sample is read once when ready and deleted at the checkpoint after it is trained, so
#     one that old is an orphan nobody deletes before the end-of-run sweep), or redis's
#     used_memory grows more than the same percentage plus that many samples' bytes;
#   * prints a summary table and writes it as OUT/summary.json.
# Every process it started is killed on exit (trap), whatever the exit path.
#   scripts/online_soak.sh [SECONDS=1800] [--build DIR] [--warmup S] [--interval 10] [--out DIR]
#                          [--max-tokens 64] [--batch 4] [--reload 10] [--max-growth-pct 2]
#                          [--max-slope-kib-min 256] [--max-bytes-per-export 4096] [--stale-s 600]
#                          [--keep]
# Environment: DSPARK (the dspark binary; dspark-train must be next to it, as `make build` leaves
# them), MODEL (models/demo), DRAFTER (models/demo-dspark), MAX_MODEL_LEN (the servers', 512). The environment passes to every
# process, e.g. DSPARK_TRAIN_CACHE_MIB (a hard cap on the trainer's tensor cache, default 8 GiB;
# it holds at most the peak of live tensor bytes anyway), ONEDNN_PRIMITIVE_CACHE_CAPACITY (the
# trainer sets 128 unless given) or MALLOC_ARENA_MAX (glibc's arenas, servers and trainer).
# The prompts are written by this script (arithmetic, word and list questions, distinct), many
# more than the run can answer, so the trainer never runs out; the training run's drafter-step-K
# directories beyond the newest 3 are removed as it goes (each ~15 MiB), checkpoints are kept 2 by
# the trainer itself. Needs redis-server and redis-cli (the redis-server package), curl, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DURATION=1800 BUILD=build WARMUP="" INTERVAL=10 OUT="" MAXTOK=64 BATCH=4 RELOAD=10
MAX_MODEL_LEN=${MAX_MODEL_LEN:-512}
MAX_GROWTH_PCT=2 MAX_SLOPE_KIB_MIN=256 MAX_BYTES_PER_EXPORT=4096 STALE_S=600 KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --warmup) WARMUP="$2"; shift 2 ;;
    --interval) INTERVAL="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --max-tokens) MAXTOK="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --reload) RELOAD="$2"; shift 2 ;;
    --max-growth-pct) MAX_GROWTH_PCT="$2"; shift 2 ;;
    --max-slope-kib-min) MAX_SLOPE_KIB_MIN="$2"; shift 2 ;;
    --max-bytes-per-export) MAX_BYTES_PER_EXPORT="$2"; shift 2 ;;
    --stale-s) STALE_S="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) DURATION="$1"; shift ;;
    *) echo "online_soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -z "$WARMUP" ]] && WARMUP=$((DURATION / 5))
(( WARMUP < DURATION )) || { echo "online_soak: --warmup $WARMUP must be under the run's $DURATION s" >&2; exit 2; }
[[ "$BUILD" == /* ]] || BUILD="$ROOT/$BUILD"
DSPARK=${DSPARK:-$BUILD/dspark}
MODEL=${MODEL:-$ROOT/models/demo}
DRAFTER=${DRAFTER:-$ROOT/models/demo-dspark}
[[ -x "$DSPARK" ]] || { echo "online_soak: $DSPARK not found (make build, or --build DIR, or DSPARK=...)" >&2; exit 2; }
[[ -x "$(dirname "$DSPARK")/dspark-train" ]] ||
  { echo "online_soak: no dspark-train next to $DSPARK (\`dspark train\` runs it from there; DSPARK_TRAIN=ON)" >&2; exit 2; }
for t in redis-server redis-cli curl python3; do
  command -v "$t" > /dev/null || { echo "online_soak: $t not found (scripts/install-deps.sh)" >&2; exit 2; }
done
[[ -d "$MODEL" && -d "$DRAFTER" ]] || { echo "online_soak: no $MODEL or $DRAFTER" >&2; exit 2; }
[[ -z "$OUT" ]] && OUT=$(mktemp -d /tmp/dspark-online-soak.XXXXXX)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RUN="$OUT/run"
[[ -e "$RUN" ]] && { echo "online_soak: $RUN exists (choose another --out)" >&2; exit 2; }

PIDS=()
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for _ in $(seq 50); do
    local alive=0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
    (( alive )) || break
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null || true; done
  wait 2> /dev/null || true
  if [[ $KEEP != 1 && $rc == 0 ]]; then  # the checkpoints and drafters are ~100 MiB; the rest stays
    rm -rf "$RUN"/checkpoint-* "$RUN"/drafter-step-* "$RUN"/drafter
  fi
  echo "online_soak: CSV, summary.json and logs in $OUT" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
die() {
  echo "online_soak: FAIL: $*" >&2
  for f in "$OUT"/*.log; do [[ -f "$f" ]] && { echo "--- $f" >&2; tail -n 12 "$f" >&2; }; done
  exit 1
}

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(port)
redis-server --port "$RP" --bind 127.0.0.1 --save "" --appendonly no --dir "$OUT" > "$OUT/redis.log" 2>&1 &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
rcli() { redis-cli -p "$RP" "$@"; }
for _ in $(seq 100); do rcli ping > /dev/null 2>&1 && break; sleep 0.1; done
rcli ping > /dev/null 2>&1 || die "redis-server did not start"
STORE="redis://127.0.0.1:$RP/0"
SPEC='{"method": "dspark", "model": "'"$DRAFTER"'", "num_speculative_tokens": 8}'
KVT='{"kv_connector": "HiddenStatesConnector", "kv_role": "kv_producer", "kv_connector_extra_config": {"store": "'"$STORE"'"}}'
URLS=() SPIDS=()
for s in 0 1; do
  "$DSPARK" serve --model "$MODEL" --port 0 --threads 1 --max-model-len "$MAX_MODEL_LEN" --speculative-config "$SPEC" \
    --kv-transfer-config "$KVT" --enable-drafter-reload --allowed-drafter-root "$OUT" > "$OUT/serve$s.log" 2>&1 &
  SPIDS[$s]=$!
  PIDS+=("$!")
  for _ in $(seq 900); do
    grep -q "listening on" "$OUT/serve$s.log" 2> /dev/null && break
    kill -0 "${SPIDS[$s]}" 2> /dev/null || die "server $s exited"
    sleep 0.2
  done
  URLS[$s]=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$OUT/serve$s.log" | head -1)
  [[ -n "${URLS[$s]}" ]] || die "server $s did not start"
done

rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status" 2> /dev/null || true; }
exports() {  # written exports of one server (empty when /metrics does not answer)
  curl -s -m 5 "$1/metrics" 2> /dev/null |
    sed -n 's/^dspark:hidden_states_exports_total{.*result="written"} \([0-9]*\).*/\1/p' | head -1
}

# The servers' high-water round, before the trainer starts: buffers sized by the largest step (the
# forward pass's workspace and logits rows, the drafter's, the exporter's) and the KV pages that the
# longest batch touches grow once, to what the heaviest load needs, and then stay. The trainer's
# own requests reach that load only by chance (two servers grew by 10 MiB over the first 14
# minutes of a 30-minute run, then stayed flat), so it is forced here on both servers at once:
# --max-num-seqs (16) requests with long prompts that run to 128 tokens each (about 490 positions
# of the servers' --max-model-len, MAX_MODEL_LEN=512 by default; the trainer's requests stay far
# below it), and 2 x 16 exporting chat requests of the trainer's shape. Their samples are deleted
# from the store before the run.
WARM_DIR="$OUT/warmup"
mkdir -p "$WARM_DIR"
python3 - "$WARM_DIR" "$MAXTOK" << 'EOF'
import json, os, sys
d, maxtok = sys.argv[1], int(sys.argv[2])
words = "the quick brown fox jumps over a lazy dog while seven small birds sing near the river".split()
for i in range(16):
    prompt = " ".join(words[(i + k) % len(words)] for k in range(270)) + f" Summarize this, part {i}."
    json.dump({"prompt": prompt, "max_tokens": 128, "ignore_eos": True, "temperature": 0},
              open(os.path.join(d, f"long{i}.json"), "w"))
for i in range(32):
    json.dump({"messages": [{"role": "user", "content": f"What is {7 + i} times {3 + i % 5}?"}],
               "max_tokens": maxtok, "temperature": 0, "return_token_ids": True,
               "kv_transfer_params": {"include_output_tokens": True}},
              open(os.path.join(d, f"chat{i}.json"), "w"))
EOF
warm_jobs() {
  local u i
  for u in "${URLS[@]}"; do
    for i in $(seq 0 15); do echo "$u/v1/completions $WARM_DIR/long$i.json"; done
    for i in $(seq 0 31); do echo "$u/v1/chat/completions $WARM_DIR/chat$i.json"; done
  done
}
TW=$(date +%s)
warm_jobs | xargs -P 96 -L 1 sh -c \
  'code=$(curl -s -o /dev/null -w "%{http_code}" -m 600 -H "Content-Type: application/json" --data-binary "@$1" "$0"); [ "$code" = 200 ] || { echo "$0 $1: HTTP $code" >&2; exit 255; }' ||
  die "a warm-up request failed"
sleep 1
rcli flushdb > /dev/null
WARM_EXPORTS=()
for s in 0 1; do WARM_EXPORTS[$s]=$(exports "${URLS[$s]}"); done
echo "online_soak: high-water round on both servers in $(( $(date +%s) - TW )) s; RSS KiB serve0 $(rss "${SPIDS[0]}") serve1 $(rss "${SPIDS[1]}"); its ${WARM_EXPORTS[0]:-?}+${WARM_EXPORTS[1]:-?} exports deleted"

# Distinct prompts, many more than the run answers (the demo answers 1-3 a second over both servers
# on 2 cores): 10 per second of the run, at least 2000. --steps defaults to prompts / batch.
NPROMPTS=$(( DURATION * 10 > 2000 ? DURATION * 10 : 2000 ))
python3 - "$NPROMPTS" > "$OUT/prompts.jsonl" << 'EOF'
import json, sys
n = int(sys.argv[1])
kinds = ["What is {a} times {b}?", "Write one sentence about the number {a}.",
         "Tom has {a} apples and buys {b} more. How many does he have?",
         "List {b} words that start with the letter {c}.",
         "A train travels {a} km in {b} hours. What is its speed?",
         "Explain briefly why {a} is {p}."]
for i in range(n):
    a, b = 3 + i, 2 + i % 7
    print(json.dumps({"prompt": kinds[i % len(kinds)].format(
        a=a, b=b, c="abcdefghijklmnoprstw"[i % 20], p="even" if a % 2 == 0 else "odd")}))
EOF

T0=$(date +%s)
"$DSPARK" train drafter --online --method dspark --target "$MODEL" --init "$DRAFTER" \
  --prompts "$OUT/prompts.jsonl" --servers "${URLS[0]},${URLS[1]}" --store "$STORE" --out "$RUN" \
  --max-tokens "$MAXTOK" --batch "$BATCH" --lr 2e-4 --save-every "$RELOAD" --reload-every "$RELOAD" \
  --threads 1 > "$OUT/train.log" 2>&1 &
TPID=$!  # `dspark train` execs dspark-train: the same process
PIDS+=("$TPID")

trained() { [[ -f "$RUN/online_consumed.jsonl" ]] && wc -l < "$RUN/online_consumed.jsonl" || echo 0; }
prune_drafters() {  # keep the newest 3 drafter-step-K (a server may be loading the newest)
  local d
  for d in $(ls -d "$RUN"/drafter-step-* 2> /dev/null | sort -V | head -n -3 || true); do rm -rf "$d"; done
}
# Samples the trainer has trained and checkpointed, and so deleted, that are still in the store:
# handles in online_consumed.jsonl trained at a step no later than the checkpoint before the
# latest (the latest's deletes may be under way).
leaked() {
  local last
  last=$(sed -n 's/^checkpoint-0*\([0-9][0-9]*\)$/\1/p' "$RUN/latest" 2> /dev/null || true)
  [[ -n "$last" && -f "$RUN/online_consumed.jsonl" ]] || { echo 0; return; }
  rcli --scan 2> /dev/null | sed 's/:[a-z_]*$//' | sort -u > "$OUT/.handles" || true
  awk -v prev=$((last - RELOAD)) '
    NR == FNR { h[$0] = 1; next }
    match($0, /"handle":"[^"]*"/) {
      hd = substr($0, RSTART + 10, RLENGTH - 11)
      if (match($0, /"step":[0-9]+/) && substr($0, RSTART + 7, RLENGTH - 7) + 0 <= prev && (hd in h)) n++
    }
    END { print n + 0 }' "$OUT/.handles" "$RUN/online_consumed.jsonl"
}
CSV="$OUT/samples.csv"
echo "t_s,redis_rss_kib,serve0_rss_kib,serve1_rss_kib,trainer_rss_kib,trainer_step_rss_kib,redis_keys,redis_stale_keys,redis_leaked_keys,redis_used_memory,serve0_exports,serve1_exports,trained,reloads" > "$CSV"
# Keys no command has touched for STALE_S seconds: a sample is read once when it is ready and
# deleted at the checkpoint after it is trained (every --reload steps), so one left that long is
# one the trainer will never delete (a leak), whatever the key count does meanwhile.
STALE_LUA="local n = 0 for _, k in ipairs(redis.call('keys', '*')) do if redis.call('object', 'idletime', k) > tonumber(ARGV[1]) then n = n + 1 end end return n"
# The trainer's RSS at the end of its latest step (its log's rss_mib, in KiB): the same point of
# every step. Sampled from outside at random times, its RSS also holds whatever part of the step's
# working set was not served from its tensor cache, which the sample's length decides (the demo's
# swings by 100-150 MiB), and a line fitted through that says more about where the samples fell.
step_rss() {
  local v
  v=$(tac "$RUN/train_log.jsonl" 2> /dev/null | grep -m 1 -o '"rss_mib":[0-9.]*' | cut -d: -f2 || true)
  [[ -n "$v" ]] && awk -v m="$v" 'BEGIN { printf "%.0f", m * 1024 }'
}
sample() {
  local t=$(( $(date +%s) - T0 )) keys stale leak mem e0 e1 rl
  keys=$(rcli dbsize 2> /dev/null | tr -d '\r' || true)
  stale=$(rcli eval "$STALE_LUA" 0 "$STALE_S" 2> /dev/null | tr -d '\r' || true)
  leak=$(leaked)
  rl=$(grep -c '"event":"reload"' "$RUN/train_log.jsonl" 2> /dev/null || true)
  mem=$(rcli info memory 2> /dev/null | tr -d '\r' | sed -n 's/^used_memory:\([0-9]*\)$/\1/p' || true)
  e0=$(exports "${URLS[0]}") e1=$(exports "${URLS[1]}")  # the trainer's (the warm-up's taken off)
  [[ -n "$e0" ]] && e0=$(( e0 - ${WARM_EXPORTS[0]:-0} ))
  [[ -n "$e1" ]] && e1=$(( e1 - ${WARM_EXPORTS[1]:-0} ))
  echo "$t,$(rss "$REDIS_PID"),$(rss "${SPIDS[0]}"),$(rss "${SPIDS[1]}"),$(rss "$TPID"),$(step_rss),$keys,$stale,$leak,$mem,$e0,$e1,$(trained),${rl:-0}" >> "$CSV"
}
echo "online_soak: ${DURATION}s (warm-up ${WARMUP}s), sampling every ${INTERVAL}s into $CSV"
echo "  redis $REDIS_PID (port $RP), serve0 ${SPIDS[0]} ${URLS[0]}, serve1 ${SPIDS[1]} ${URLS[1]}, trainer $TPID"
sample
next=$((T0 + INTERVAL))
while (( $(date +%s) - T0 < DURATION )); do
  sleep $(( next > $(date +%s) ? next - $(date +%s) : 0 ))
  next=$((next + INTERVAL))
  for pn in "redis-server:$REDIS_PID" "serve0:${SPIDS[0]}" "serve1:${SPIDS[1]}" "trainer:$TPID"; do
    kill -0 "${pn#*:}" 2> /dev/null ||
      die "${pn%%:*} (pid ${pn#*:}) ended at t=$(( $(date +%s) - T0 ))s (see its log; a trainer that ran out of prompts needs more)"
  done
  sample
  prune_drafters
  if (( ( $(date +%s) - T0 ) % 60 < INTERVAL )); then
    tail -n 1 "$CSV" | awk -F, '{printf "  t=%4ss rss KiB redis %s serve0 %s serve1 %s trainer %s (step end %s) | keys %s (leaked %s) | exports %s+%s trained %s reloads %s\n", $1,$2,$3,$4,$5,$6,$7,$9,$11,$12,$13,$14}'
  fi
done
reloads=$(grep -c '"event":"reload"' "$RUN/train_log.jsonl" 2> /dev/null || true)
reload_fail=$(awk '/"event":"reload"/ { if (gsub(/"status":200/, "&") < 2) f++ } END { print f + 0 }' "$RUN/train_log.jsonl" 2> /dev/null || true)
KEYBOUND=$(( 3 * (BATCH * RELOAD + 2 * BATCH + 4 + 8) ))
# One sample's hidden-state bytes, on average (for the bound on redis's used_memory).
SAMPLE_BYTES=$(curl -s -m 5 "${URLS[0]}/metrics" | awk '
  /^dspark:hidden_states_export_bytes_total/ { b = $NF }
  /^dspark:hidden_states_exports_total.*result="written"/ { n = $NF }
  END { if (n > 0) printf "%d", b / n; else print 0 }' || true)

python3 - "$CSV" "$OUT/summary.json" "$WARMUP" "$MAX_GROWTH_PCT" "$MAX_SLOPE_KIB_MIN" "$MAX_BYTES_PER_EXPORT" \
  "$KEYBOUND" "$STALE_S" "${reloads:-0}" "${reload_fail:-0}" "${SAMPLE_BYTES:-0}" "$DURATION" << 'EOF'
import csv, json, statistics, sys
(path, out, warmup, max_pct, max_slope, max_bpe, keybound, stale_s, reloads, reload_fail,
 sample_bytes, duration) = sys.argv[1:]
warmup, max_pct, max_slope, max_bpe = float(warmup), float(max_pct), float(max_slope), float(max_bpe)
keybound, stale_s, sample_bytes = int(keybound), int(stale_s), int(sample_bytes or 0)
num = lambda v: float(v) if v not in ("", None) else None
rows = [{k: num(v) for k, v in r.items()} for r in csv.DictReader(open(path))]
post = [r for r in rows if r["t_s"] >= warmup]
fails = []
if len(post) < 6:
    sys.exit(f"online_soak: only {len(post)} samples after the warm-up: run longer or sample more often")

def fit(col, rs):
    pts = [(r["t_s"] / 60.0, r[col]) for r in rs if r[col] is not None]
    n = len(pts)
    mx, my = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx if sxx else 0.0  # per minute

def exports(r, which):
    return sum(r[c] or 0 for c in which)

def window_exports(which):
    return exports(post[-1], which) - exports(post[0], which)

both = ("serve0_exports", "serve1_exports")
minutes = (post[-1]["t_s"] - post[0]["t_s"]) / 60.0
table = {}
for name, col, which in (("redis-server", "redis_rss_kib", both), ("serve0", "serve0_rss_kib", ("serve0_exports",)),
                         ("serve1", "serve1_rss_kib", ("serve1_exports",)), ("trainer", "trainer_step_rss_kib", both)):
    vals = [r for r in post if r[col] is not None]
    if len(vals) < 6:
        sys.exit(f"online_soak: only {len(vals)} samples of {col} after the warm-up")
    slope = fit(col, vals)  # KiB per minute
    start = statistics.median(r[col] for r in vals[:3])
    end = statistics.median(r[col] for r in vals[-3:])
    growth = 100.0 * (end - start) / start
    n_exp = window_exports(which)
    bpe = slope * minutes * 1024.0 / n_exp if n_exp > 0 else None
    n_rel = (post[-1]["reloads"] or 0) - (post[0]["reloads"] or 0)
    kpr = slope * minutes / n_rel if n_rel > 0 else None
    table[name] = {"rss_start_kib": start, "rss_end_kib": end, "rss_peak_kib": max(r[col] for r in rows if r[col] is not None),
                   "growth_pct": round(growth, 3), "slope_kib_per_min": round(slope, 2),
                   "bytes_per_export": round(bpe, 1) if bpe is not None else None, "exports_in_window": n_exp,
                   "kib_per_reload": round(kpr, 1) if kpr is not None else None, "reloads_in_window": n_rel}
    # redis holds up to the key bound's samples at any moment (a sawtooth between checkpoints):
    # its RSS may differ by that much at the two ends besides the percentage.
    allow = start * max_pct / 100.0 + (keybound // 3 * sample_bytes / 1024.0 if name == "redis-server" else 0.0)
    table[name]["growth_allowed_kib"] = round(allow, 1)
    if end - start > allow:
        fails.append(f"{name}: RSS grew {growth:.2f}% after the warm-up ({start:.0f} -> {end:.0f} KiB), "
                     f"bound {max_pct}%" + (f" + {keybound // 3} samples" if name == "redis-server" else ""))
    if slope > max_slope and (bpe is None or bpe > max_bpe):
        fails.append(f"{name}: RSS slope {slope:.1f} KiB/min ({bpe if bpe is None else round(bpe)} B per export), "
                     f"bounds {max_slope} KiB/min and {max_bpe} B per export")
# The trainer's RSS as sampled from outside, for the record: its range after the warm-up.
raw = [r["trainer_rss_kib"] for r in post if r["trainer_rss_kib"] is not None]
table["trainer"].update({"sampled_min_kib": min(raw), "sampled_max_kib": max(raw),
                         "sampled_peak_kib": max(r["trainer_rss_kib"] for r in rows if r["trainer_rss_kib"] is not None)})
keys = [r["redis_keys"] for r in rows if r["redis_keys"] is not None]
key_slope = fit("redis_keys", post)
mem_start = statistics.median(r["redis_used_memory"] for r in post[:3])
mem_end = statistics.median(r["redis_used_memory"] for r in post[-3:])
mem_slope = fit("redis_used_memory", post) / 1024.0
stale = [r["redis_stale_keys"] for r in rows if r["redis_stale_keys"] is not None]
leaked = [r["redis_leaked_keys"] for r in rows if r["redis_leaked_keys"] is not None]
redis = {"keys_max": max(keys), "keys_end": keys[-1], "keys_bound": keybound, "keys_slope_per_min": round(key_slope, 3),
         "stale_keys_max": max(stale), "stale_after_s": stale_s, "leaked_samples_max": max(leaked),
         "used_memory_start": mem_start, "used_memory_end": mem_end, "used_memory_slope_kib_per_min": round(mem_slope, 2),
         "sample_bytes": sample_bytes}
if max(keys) > keybound:
    fails.append(f"redis: {max(keys):.0f} keys at the most, bound {keybound} (samples not deleted after use?)")
if max(leaked) > 0:
    fails.append(f"redis: up to {max(leaked):.0f} samples still stored after the checkpoint that should have deleted them")
if max(stale) > 0:
    fails.append(f"redis: up to {max(stale):.0f} keys untouched for over {stale_s} s (samples never deleted)")
mem_allow = mem_start * max_pct / 100.0 + (keybound // 3) * sample_bytes
if mem_end - mem_start > mem_allow:
    fails.append(f"redis: used_memory grew {mem_end - mem_start:.0f} B after the warm-up, bound {mem_allow:.0f} B")
total_exports = exports(rows[-1], both)
trained = rows[-1]["trained"]
if total_exports <= 0:
    fails.append("the servers exported nothing")
if trained <= 0:
    fails.append("the trainer trained nothing")
if int(reload_fail) > 0:
    fails.append(f"{reload_fail} of {reloads} drafter reloads were not answered 200 by both servers")
summary = {"duration_s": float(duration), "warmup_s": warmup, "samples": len(rows), "samples_after_warmup": len(post),
           "exports_total": total_exports, "exports_after_warmup": window_exports(both), "trained": trained,
           "reloads": int(reloads),
           "bounds": {"max_growth_pct": max_pct, "max_slope_kib_per_min": max_slope,
                      "max_bytes_per_export": max_bpe, "max_keys": keybound, "stale_key_s": stale_s},
           "processes": table, "redis": redis, "pass": not fails, "failures": fails}
json.dump(summary, open(out, "w"), indent=2)
print(f"\n{'process':<13}{'RSS start':>11}{'RSS end':>11}{'peak':>11}{'growth':>9}{'slope':>11}{'per export':>12}{'per reload':>12}")
print(f"{'':<13}{'KiB':>11}{'KiB':>11}{'KiB':>11}{'%':>9}{'KiB/min':>11}{'bytes':>12}{'KiB':>12}")
for n, d in table.items():
    bpe = f"{d['bytes_per_export']:.0f}" if d["bytes_per_export"] is not None else "-"
    kpr = f"{d['kib_per_reload']:.0f}" if d["kib_per_reload"] is not None else "-"
    print(f"{n:<13}{d['rss_start_kib']:>11.0f}{d['rss_end_kib']:>11.0f}{d['rss_peak_kib']:>11.0f}{d['growth_pct']:>9.2f}"
          f"{d['slope_kib_per_min']:>11.1f}{bpe:>12}{kpr:>12}")
t = table["trainer"]
print(f"trainer: RSS at the end of each step above; sampled at any time after the warm-up "
      f"{t['sampled_min_kib']:.0f}-{t['sampled_max_kib']:.0f} KiB, peak {t['sampled_peak_kib']:.0f} KiB")
print(f"redis keys: max {redis['keys_max']:.0f} (bound {keybound}), end {redis['keys_end']:.0f}, "
      f"slope {key_slope:.2f}/min, trained+checkpointed yet stored: max {max(leaked):.0f}, "
      f"untouched > {stale_s} s: max {max(stale):.0f}; used_memory {mem_start/1048576:.2f} -> {mem_end/1048576:.2f} MiB "
      f"({mem_slope:.1f} KiB/min)")
print(f"exports {total_exports:.0f} ({window_exports(both):.0f} after the warm-up), trained {trained:.0f}, "
      f"reloads {reloads}")
for f in fails: print("FAIL:", f)
print("PASS" if not fails else "FAIL", "-", out)
sys.exit(0 if not fails else 1)
EOF
