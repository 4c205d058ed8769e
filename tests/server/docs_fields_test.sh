#!/usr/bin/env bash
# Every request field the server's tables name (server/openai_request.cpp: handled, ignored and
# neutral ones) appears, in backquotes, in docs/serving.md ("Request fields").
#   bash docs_fields_test.sh REPO_ROOT
set -euo pipefail
root=${1:?repository root}
src=$root/src/server/openai_request.cpp
doc=$root/docs/serving.md
# The tables: neutral_values()'s keys (not their values), then every name in common_fields(),
# completion_fields() and chat_fields().
fields=$( (sed -n '/neutral_values() {/,/^}/p' "$src" | grep -o '^ *{"[a-z_]*"' | grep -o '[a-z_]*'
           sed -n '/^FieldTable common_fields() {/,/^std::string short_dump/p' "$src" | grep -o '"[a-z_]*"' | tr -d '"') | sort -u)
[ -n "$fields" ] || { echo "no fields found in $src"; exit 1; }
missing=0 n=0
for f in $fields; do
  n=$((n + 1))
  grep -q "\`$f\`" "$doc" || { echo "docs/serving.md does not list \`$f\`"; missing=$((missing + 1)); }
done
echo "$n fields, $missing missing from docs/serving.md"
[ "$missing" -eq 0 ]
