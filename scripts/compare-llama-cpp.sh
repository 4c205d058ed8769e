#!/usr/bin/env bash
# dspark against llama.cpp on the same GGUF files, interleaved in one run so that both see the
# same machine load:
#   llama.cpp: llama-bench -n 64 (decode tok/s) and -p 9 -ub 9 (one 9-token step);
#   dspark:    dspark bench step --tokens 1,9 at context 64 (a 1-token and a 9-token step).
# With --depths D1,D2,...: the same at each depth D (llama-bench -d D with -n 32; dspark bench
# step --contexts D). llama-bench fills a depth by prefilling it, once per test: at 32,768 on two
# cores that takes tens of minutes.
# --decode-only skips llama-bench's 9-token step: with -ub 9 it also fills the depth 9 tokens at a
# time (at 8,192 on two cores that took over 10 minutes).
# Each round runs the commands once per file and depth, in turn; the table gives medians over
# rounds.
#
#   LLAMA_CPP_DIR=/path/to/llama.cpp/build scripts/compare-llama-cpp.sh [--rounds N] [--threads T]
#     [--depths D,...] [--decode-only] FILE.gguf...
#
# LLAMA_CPP_DIR is a llama.cpp build directory holding bin/llama-bench (build it outside this
# repository; docs/performance.md says how). Prints a Markdown table; --json FILE also writes
# every measurement.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
dspark=${DSPARK:-$here/build/dspark}
rounds=3
threads=$(nproc)
depths=0
decode_only=0
json_out=""
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    --depths) depths=$2; shift 2 ;;
    --decode-only) decode_only=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "compare-llama-cpp: unknown flag $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
[ -n "${LLAMA_CPP_DIR:-}" ] || { echo "compare-llama-cpp: set LLAMA_CPP_DIR to a llama.cpp build directory (with bin/llama-bench)" >&2; exit 2; }
bench="$LLAMA_CPP_DIR/bin/llama-bench"
[ -x "$bench" ] || { echo "compare-llama-cpp: $bench is not an executable" >&2; exit 2; }
[ -x "$dspark" ] || { echo "compare-llama-cpp: $dspark is not built (make build, or set DSPARK)" >&2; exit 2; }
[ ${#files[@]} -gt 0 ] || { echo "compare-llama-cpp: give one or more .gguf files" >&2; exit 2; }
for f in "${files[@]}"; do [ -f "$f" ] || { echo "compare-llama-cpp: no file $f" >&2; exit 2; }; done
IFS=, read -r -a depth_list <<< "$depths"
for d in "${depth_list[@]}"; do
  [[ "$d" =~ ^[0-9]+$ ]] || { echo "compare-llama-cpp: --depths: '$d' is not a token count" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "llama.cpp: $("$bench" --version 2>&1 | head -1 || true); dspark: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'); $threads threads" >&2
for r in $(seq 1 "$rounds"); do
  for i in "${!files[@]}"; do
    f=${files[$i]}
    for d in "${depth_list[@]}"; do
      echo "round $r/$rounds: $(basename "$f") at depth $d" >&2
      # At depth, one repetition of each: llama-bench prefills the depth again for every one.
      n=64 ctx=64 reps=3
      [ "$d" -gt 0 ] && n=32 ctx=$d reps=1
      "$bench" -m "$f" -t "$threads" -d "$d" -p 0 -n "$n" -r 1 -o json > "$work/$i.$d.$r.tg.json" 2>/dev/null
      if [ "$decode_only" = 0 ]; then
        "$bench" -m "$f" -t "$threads" -d "$d" -p 9 -ub 9 -n 0 -r "$reps" -o json > "$work/$i.$d.$r.pp.json" 2>/dev/null
      fi
      "$dspark" bench step --model "$f" --threads "$threads" --contexts "$ctx" --batches 1 --tokens 1,9 \
        --prefill-tokens 0 --reps 5 --json > "$work/$i.$d.$r.ds.json" 2>/dev/null
    done
  done
done

python3 - "$work" "$rounds" "$json_out" "$depths" "${files[@]}" <<'EOF'
import json, os, statistics, sys
work, rounds, out, depths = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].split(",")
files = sys.argv[5:]
rows, dump = [], []
for i, f in enumerate(files):
    for dep in depths:
        tg, pp, d1, d9, frac, wbytes = [], [], [], [], [], 0
        for r in range(1, rounds + 1):
            t = json.load(open(f"{work}/{i}.{dep}.{r}.tg.json"))[0]
            pp_file = f"{work}/{i}.{dep}.{r}.pp.json"
            p = json.load(open(pp_file))[0] if os.path.exists(pp_file) else {"avg_ts": float("nan")}
            d = json.load(open(f"{work}/{i}.{dep}.{r}.ds.json"))
            tg.append(t["avg_ts"])
            pp.append(p["avg_ts"])
            steps = {s["tokens_per_seq"]: s["ms"] for s in d["steps"]}
            d1.append(steps[1]); d9.append(steps[9])
            frac.append(d.get("decode_stream_fraction", 0.0))
            wbytes = d["streamed_weight_bytes"]
            dump.append({"file": f, "depth": int(dep), "round": r, "llama_tg_tok_s": t["avg_ts"], "llama_pp9_tok_s": p["avg_ts"],
                         "dspark_ms_1": steps[1], "dspark_ms_9": steps[9], "dspark_dram_gb_s": d["dram_read_gb_s"],
                         "dspark_roofline_fraction": frac[-1], "llama_cpp_build": t.get("build_commit", "")})
        m = statistics.median
        l_dec = m(tg); l_ratio = (9.0 / m(pp)) / (1.0 / m(tg))
        d_dec = 1000.0 / m(d1); d_ratio = m(d9) / m(d1)
        rows.append((os.path.basename(f), int(dep), wbytes / 1e9, l_dec, d_dec, d_dec / l_dec, m(frac), l_ratio, d_ratio))
print("| file | depth | weights read / token | llama.cpp decode tok/s | dspark decode tok/s | dspark / llama.cpp | dspark roofline | llama.cpp 9-token ÷ 1-token step | dspark 9-token ÷ 1-token step |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    l_ratio = "n/a" if r[7] != r[7] else f"{r[7]:.2f}"  # NaN: --decode-only
    print(f"| {r[0]} | {r[1] or 64} | {r[2]:.2f} GB | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f}x | {r[6]:.2f} | {l_ratio} | {r[8]:.2f} |")
if out:
    json.dump(dump, open(out, "w"), indent=1)
EOF
