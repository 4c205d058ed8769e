#!/usr/bin/env bash
# Connections at scale against `dspark serve` (a benchmark, not part of `make test`, which runs the
# same test at 200 idle, 20 slowloris and 200 streams): IDLE connections that never send a byte
# and SLOWLORIS ones that send a header line a second must not delay a completion by more than
# MAX_DELAY_MS over its time alone; then STREAMS concurrent streaming requests (most waiting for
# one of 16 slots) must all complete while /health answers. Prints the delay, /health's worst
# time and the server's RSS at start, with the connections open, at the peak and after.
#   scripts/serve_connections.sh [IDLE=1000] [SLOWLORIS=100] [STREAMS=1000] [BUILD=build]
# Environment: DSPARK (the binary), MODEL, THREADS (default 0: every core), MAX_DELAY_MS (100),
# JSON (write the figures there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
idle=${1:-1000}
slow=${2:-100}
streams=${3:-1000}
build=${4:-build}
dspark=${DSPARK:-$root/$build/dspark}
[ -x "$dspark" ] || { echo "serve_connections: $dspark not found (make build first, or set DSPARK)"; exit 1; }
command -v node >/dev/null || { echo "serve_connections: node not found (scripts/install-deps.sh installs Node.js)"; exit 1; }
exec node "$root/tests/server/connections_test.mjs" --dspark "$dspark" --model "${MODEL:-$root/models/demo}" \
  --threads "${THREADS:-0}" --idle "$idle" --slowloris "$slow" --streams "$streams" \
  --max-delay-ms "${MAX_DELAY_MS:-100}" ${JSON:+--json "$JSON"}
