#!/usr/bin/env bash
# Lists the functions (lambdas included) in src/ longer than LIMIT lines (default 150), longest
# first, from the first line of the definition to its closing brace, then the longest of all.
# Needs universal-ctags (Debian package universal-ctags) and python3. Exits 1 when any is over.
#
#   scripts/long-functions.sh [LIMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-150}
command -v ctags >/dev/null && ctags --version 2>/dev/null | grep -q "Universal Ctags" ||
  { echo "long-functions.sh: needs universal-ctags (apt-get install universal-ctags)" >&2; exit 2; }
ctags -R --languages=C++ --kinds-C++=f --fields=+ne --output-format=json -f - src |
python3 -c '
import json, re, sys
limit = int(sys.argv[1])
rows = []
for line in sys.stdin:
    t = json.loads(line)
    if t.get("_type") != "tag" or "end" not in t:
        continue
    name = t["name"] if "scope" not in t else t["scope"] + "::" + t["name"]
    name = re.sub(r"__anon[0-9a-f]+", "(anonymous)", name)
    rows.append((t["end"] - t["line"] + 1, t["path"], t["line"], name))
rows.sort(key=lambda r: (-r[0], r[1], r[2]))
over = [r for r in rows if r[0] > limit]
for n, path, line, name in over:
    print(f"{n:5d}  {path}:{line}  {name}")
if rows:
    n, path, line, name = rows[0]
    print(f"longest: {n} lines, {path}:{line} {name}")
sys.exit(1 if over else 0)
' "$limit"
