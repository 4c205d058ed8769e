// Conformance of a tokenizer trained by `dspark tokenizer train` with the reference JavaScript
// implementation (@lenml/tokenizers, a fork of transformers.js):
//
//   node trained_conformance_test.mjs DSPARK_BINARY NPM_DIR WORK_DIR
//
// Generates a training text, trains a 2048-token tokenizer with the dspark CLI, loads the
// resulting tokenizer.json + tokenizer_config.json with the JS library, and checks on a few
// hundred strings (seen and unseen kinds, random Unicode) that
//   - `dspark tokenize` gives the same ids as the JS encode,
//   - the JS decode returns the original string,
//   - the special tokens are single ids after the learned ones; the vocabulary has 2048 entries,
//   - the JS Jinja chat template gives dspark's ChatML prompt.
// The strings are encoded in one `dspark tokenize` call, joined by <|endoftext|> (added tokens
// split the text first, so each string's ids are independent of its neighbours).
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [dspark, npmDir, workDir] = process.argv.slice(2);
if (!dspark || !npmDir || !workDir) {
  console.error("usage: node trained_conformance_test.mjs DSPARK_BINARY NPM_DIR WORK_DIR");
  process.exit(2);
}
fs.mkdirSync(workDir, { recursive: true });
const VOCAB = 2048;

// mulberry32
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  const pick = (arr) => arr[Math.floor(next() * arr.length)];
  return { next, int, pick };
}

const WORDS = (
  "the of and to in is that for it with as was on be by this are from at or an which model token " +
  "speculative decoding draft verify accept sample probability library river morning students history " +
  "don't it's we're they've I'm you'll she'd Python Linux Debian " +
  "café élève naïve Straße Größe über Москва ёжик Ελλάδα ἀρχή שָׁלוֹם مرحبا नमस्ते क्षत्रिय ภาษาไทย " +
  "我们 今天 北京 日本語 ひらがな カタカナ ｶﾀｶﾅ 안녕하세요 Zażółć gęślą İstanbul ılık"
).split(" ");
const SYL = "ka re sto mi lun dra ve pho tiq zen ar bel cor nu ish gla wem ox yu tha".split(" ");
const EMOJI = ["🎉", "😀", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "❤️", "🚀", "✨", "🤖"];
const SPACE = ["  ", "   ", "\t", "\n\n\n", "\r\n", " \n ", "    \n", "\u00a0", "\u3000"];
const CODE = [
  (r) => `def f${r.int(0, 99)}(x, y=None):\n    """Doc."""\n    return [i ** 2 for i in range(${r.int(0, 999)})]\n`,
  (r) => `int g${r.int(0, 99)}(const std::vector<int>& v) {\n\tint s = 0;\n\tfor (auto x : v) s += x << 2;\n\treturn s; // sum\n}\n`,
  (r) => `const h = async (a, b) => {\n  await fetch(\`/api/\${a}?q=${r.int(0, 50)}\`);\n  return a !== b;\n};\n`,
];

function sentence(r) {
  const n = r.int(3, 14);
  const out = [];
  for (let i = 0; i < n; i++) {
    let w = r.next() < 0.3 ? Array.from({ length: r.int(1, 4) }, () => r.pick(SYL)).join("") : r.pick(WORDS);
    if (r.next() < 0.08) w += " " + r.int(0, 99999);
    out.push(w);
  }
  return out.join(" ") + r.pick([".", "!", "?", "...", ":", ","]);
}
function documentText(r) {
  const parts = [];
  const n = r.int(2, 9);
  for (let i = 0; i < n; i++) {
    const k = r.int(0, 9);
    if (k === 0) parts.push(r.pick(EMOJI).repeat(r.int(1, 3)));
    else if (k === 1) parts.push(r.pick(CODE)(r));
    else if (k === 2) parts.push(r.pick(SPACE));
    else if (k === 3) parts.push(`<|im_start|>user\n${sentence(r)}<|im_end|>\n<|im_start|>assistant\n${sentence(r)}<|im_end|>\n`);
    else if (k === 4) parts.push(String(r.int(0, 1e9)));
    else parts.push(sentence(r));
  }
  return parts.join(r.next() < 0.25 ? "\n" : " ");
}
const RANGES = [
  [0x20, 0x7e], [0x09, 0x0d], [0xa0, 0x24f], [0x300, 0x36f], [0x370, 0x3ff], [0x400, 0x4ff], [0x590, 0x6ff],
  [0x900, 0x97f], [0xe00, 0xe7f], [0x3040, 0x30ff], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xe000, 0xe0ff],
  [0xfe00, 0xfe0f], [0xff00, 0xffef], [0x1f300, 0x1faff], [0x10000, 0x1007f], [0xe0000, 0xe007f],
];
function randomUnicode(r, n) {
  let s = "";
  for (let i = 0; i < n; i++) {
    const [lo, hi] = r.pick(RANGES);
    s += String.fromCodePoint(r.int(lo, hi));
  }
  return s;
}

// --- Train with the CLI.
const train = rng(12345);
let corpus = "";
while (corpus.length < 400000) corpus += documentText(train) + (train.next() < 0.1 ? "<|endoftext|>" : "") + "\n";
const corpusFile = path.join(workDir, "train.txt");
fs.writeFileSync(corpusFile, corpus);
const tokDir = path.join(workDir, "tok");
const tokFile = path.join(tokDir, "tokenizer.json");
execFileSync(dspark, ["tokenizer", "train", "--input", corpusFile, "--vocab-size", String(VOCAB), "--out", tokFile, "--quiet"], {
  stdio: ["ignore", "inherit", "inherit"],
});

// --- Load with the JS library.
const { TokenizerLoader } = await import(pathToFileURL(path.join(npmDir, "node_modules", "@lenml", "tokenizers", "dist", "main.mjs")).href);
const tok = await TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tokFile, "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer_config.json"), "utf8")),
});

let failures = 0;
const fail = (msg) => {
  failures++;
  if (failures <= 20) console.log("FAIL " + msg);
};

// Vocabulary and special tokens: the added tokens follow the learned ones.
const file = JSON.parse(fs.readFileSync(tokFile, "utf8"));
const learned = Object.keys(file.model.vocab).length;
if (learned !== VOCAB - 16) fail(`${learned} learned tokens, expected ${VOCAB - 16} (the corpus ran out of pairs?)`);
const vocabSize = tok.model.vocab.length;
if (vocabSize !== VOCAB) fail(`JS vocabulary has ${vocabSize} entries, expected ${VOCAB}`);
const specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>", "<|reserved_0|>"];
specials.forEach((s, i) => {
  const ids = tok.encode(s, { add_special_tokens: false });
  if (ids.length !== 1 || ids[0] !== learned + i) fail(`${s} encodes to ${JSON.stringify(ids)}, expected [${learned + i}]`);
});
const EOT = learned;

// --- Strings: held-out documents, random Unicode, edge cases (none contains <|endoftext|>).
const test = rng(777);
const cases = ["", " ", "\n", "  \n  ", "\t\t\n\r\n", "a", "\u0301", "<|im_end", "<<|im_end|>>", "<|mask|><|mask|>", "1234567890"];
while (cases.length < 250) cases.push(documentText(test));
while (cases.length < 450) cases.push(randomUnicode(test, test.int(1, 40)));
for (let i = 0; cases.length < 500; i += 7919) cases.push(corpus.slice(i % (corpus.length - 400), (i % (corpus.length - 400)) + 300).toWellFormed().replaceAll("<|endoftext|>", ""));

const joined = cases.join("<|endoftext|>");
const jsIds = tok.encode(joined, { add_special_tokens: false });
const out = execFileSync(dspark, ["tokenize", "--tokenizer", tokFile, "--json"], { input: Buffer.from(joined, "utf8"), maxBuffer: 1 << 28 });
const dsIds = JSON.parse(out.toString("utf8")).ids;

// Split both by <|endoftext|> and compare string by string.
const split = (ids) => {
  const parts = [[]];
  for (const id of ids) id === EOT ? parts.push([]) : parts[parts.length - 1].push(id);
  return parts;
};
const jsParts = split(jsIds), dsParts = split(dsIds);
if (jsParts.length !== cases.length) fail(`JS ids split into ${jsParts.length} parts, expected ${cases.length}`);
if (dsParts.length !== cases.length) fail(`dspark ids split into ${dsParts.length} parts, expected ${cases.length}`);
let tokens = 0, bytes = 0;
for (let i = 0; i < cases.length; i++) {
  const s = cases[i], a = jsParts[i] ?? [], b = dsParts[i] ?? [];
  if (JSON.stringify(a) !== JSON.stringify(b)) fail(`ids differ for ${JSON.stringify(s)}:\n  js:     ${JSON.stringify(a)}\n  dspark: ${JSON.stringify(b)}`);
  const decoded = a.length ? tok.decode(a, { skip_special_tokens: false }) : "";
  if (decoded !== s) fail(`JS decode of ${JSON.stringify(s)} gave ${JSON.stringify(decoded)}`);
  tokens += a.length;
  bytes += Buffer.byteLength(s, "utf8");
}

// --- Chat template: ChatML as dspark's apply_chat_template writes it.
const messages = [
  { role: "system", content: "You are helpful." },
  { role: "user", content: "Hi there" },
];
const chat = tok.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true });
const expected = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n";
if (chat !== expected) fail(`chat template gave ${JSON.stringify(chat)}, expected ${JSON.stringify(expected)}`);

console.log(`${cases.length} strings, ${tokens} tokens, ${bytes} bytes (${(bytes / Math.max(1, tokens)).toFixed(2)} bytes/token): ` +
            `${failures} failures`);
process.exit(failures ? 1 : 0);
