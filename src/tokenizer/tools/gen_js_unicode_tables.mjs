// Generates js_unicode_ranges.inc, js_unicode_composition.inc and js_unicode_decomposition.inc
// (each under 1,000 lines) from the Node.js that runs it:
//  - the code point ranges that JavaScript's RegExp (with the `u` flag) matches for \p{L},
//    \p{N} and \s. The tokenizer rewrites those escapes in pre-tokenizer regexes into explicit
//    classes so that PCRE2 (whose Unicode tables may be older) matches what transformers.js does;
//  - the normalization data behind String.prototype.normalize: the canonical combining class
//    of every non-starter and the canonical decomposition (NFD) of every decomposable code
//    point except Hangul syllables, and the pairs that canonical composition combines. The
//    tokenizer normalizes with utf8proc and falls back to these tables for text holding code
//    points on which utf8proc's (older) data differs.
//
//   node src/tokenizer/tools/gen_js_unicode_tables.mjs src/tokenizer
import { writeFileSync } from "node:fs";

function ranges(re) {
  const out = [];
  let start = -1;
  for (let c = 0; c <= 0x110000; c++) {
    const ok = c < 0x110000 && !(c >= 0xd800 && c <= 0xdfff) && re.test(String.fromCodePoint(c));
    if (ok && start < 0) start = c;
    if (!ok && start >= 0) {
      out.push([start, c - 1]);
      start = -1;
    }
  }
  return out;
}
const hex = (c) => "0x" + c.toString(16).toUpperCase();
const emit = (name, rs) => {
  const lines = [];
  for (let i = 0; i < rs.length; i += 6)
    lines.push("    " + rs.slice(i, i + 6).map(([a, b]) => `{${hex(a)}, ${hex(b)}}`).join(", ") + ",");
  return `inline constexpr CodepointRange ${name}[] = {\n${lines.join("\n")}\n};\n`;
};

// Canonical combining classes, found through String.prototype.normalize: a non-starter X with
// class k is reordered after a character of a lower class and before one of a higher class.
// One long-standing representative per class value (all values Unicode uses).
const CLASS_REPS = [[1,0x334],[6,0x16FF0],[7,0x93C],[8,0x3099],[9,0x94D],[10,0x5B0],[11,0x5B1],[12,0x5B2],[13,0x5B3],
  [14,0x5B4],[15,0x5B5],[16,0x5B6],[17,0x5B7],[18,0x5B8],[19,0x5B9],[20,0x5BB],[21,0x5BC],[22,0x5BD],[23,0x5BF],[24,0x5C1],
  [25,0x5C2],[26,0xFB1E],[27,0x64B],[28,0x64C],[29,0x64D],[30,0x618],[31,0x619],[32,0x61A],[33,0x651],[34,0x652],[35,0x670],
  [36,0x711],[84,0xC55],[91,0xC56],[103,0xE38],[107,0xE48],[118,0xEB8],[122,0xEC8],[129,0xF71],[130,0xF72],[132,0xF74],
  [202,0x321],[214,0x1DCE],[216,0x31B],[218,0x1DFA],[220,0x316],[222,0x59A],[224,0x302E],[226,0x1D16D],[228,0x5AE],
  [230,0x300],[232,0x315],[233,0x35C],[234,0x35D],[240,0x345]].map(([k, c]) => [k, String.fromCodePoint(c)]);
const NFD = (s) => s.normalize("NFD");
function combiningClass(s) {
  const [, lo] = CLASS_REPS[0];
  const [, hi] = CLASS_REPS[CLASS_REPS.length - 1];
  if (s === lo || s === hi) return s === lo ? 1 : 240;
  if (NFD(s + lo) !== lo + s && NFD(hi + s) !== s + hi) return 0;  // never reordered: a starter
  for (const [k, r] of CLASS_REPS) {
    if (s === r) return k;
    if (NFD(s + r) !== r + s && NFD(r + s) !== s + r) return k;  // neither order changes: same class
  }
  throw new Error(`U+${s.codePointAt(0).toString(16)}: combining class not among the representatives`);
}
const nonstarters = [];
const decomps = [];  // [cp, composite?, [nfd code points]]
for (let c = 0; c < 0x110000; c++) {
  if (c >= 0xd800 && c <= 0xdfff) continue;
  const s = String.fromCodePoint(c);
  const d = NFD(s);
  if (d !== s) {
    if (c >= 0xac00 && c <= 0xd7a3) continue;  // Hangul syllables: algorithmic
    decomps.push([c, s.normalize("NFC") === s, [...d].map((x) => x.codePointAt(0))]);
    continue;
  }
  const k = combiningClass(s);
  if (k) nonstarters.push([c, k]);
}
// Primary composites as the pair NFC combines: {first, second, composite}. The pair is read off
// the full decomposition: the second is one of its code points (the last one first), the first
// the composed rest; it must compose back to the composite.
const compositions = [];
for (const [c, composite, d] of decomps) {
  if (!composite) continue;
  let found = null;
  for (let i = d.length - 1; i >= 1 && !found; i--) {
    const first = String.fromCodePoint(...d.slice(0, i), ...d.slice(i + 1)).normalize("NFC");
    if ([...first].length !== 1) continue;
    const second = String.fromCodePoint(d[i]);
    if ((first + second).normalize("NFC") === String.fromCodePoint(c)) found = [first.codePointAt(0), d[i]];
  }
  if (!found) throw new Error(`U+${c.toString(16)}: cannot find the pair it composes from`);
  compositions.push([found[0], found[1], c]);
}
const decompData = [];
const decompIndex = decomps.map(([c, composite, d]) => {
  const off = decompData.length;
  decompData.push(...d);
  return `{${hex(c)}, ${off}, ${d.length}, ${composite ? 1 : 0}}`;
});
const rows = (items, per) => {
  const lines = [];
  for (let i = 0; i < items.length; i += per) lines.push("    " + items.slice(i, i + per).join(", ") + ",");
  return lines.join("\n");
};

const header = (what) => `// Generated by tools/gen_js_unicode_tables.mjs with Node.js ${process.version}
// (ICU ${process.versions.icu}, Unicode ${process.versions.unicode}). Do not edit.
// ${what}
#pragma once
namespace dspark::tokenizer_detail {
`;
const dir = process.argv[2];
if (!dir) {
  console.error("usage: node gen_js_unicode_tables.mjs OUT_DIR");
  process.exit(2);
}
writeFileSync(`${dir}/js_unicode_ranges.inc`, header("The inclusive code point ranges that a JavaScript RegExp with the u flag matches.") +
  `inline constexpr char kJsUnicodeVersion[] = "${process.versions.unicode}";
${emit("kJsLetter", ranges(/^\p{L}$/u))}${emit("kJsNumber", ranges(/^\p{N}$/u))}${emit("kJsSpace", ranges(/^\s$/u))}}  // namespace dspark::tokenizer_detail
`);
writeFileSync(`${dir}/js_unicode_composition.inc`, header("What String.prototype.normalize uses to order and compose.") +
  `// Canonical combining class of every non-starter: {code point, class}.
inline constexpr NonStarter kJsNonStarters[] = {
${rows(nonstarters.map(([c, k]) => `{${hex(c)}, ${k}}`), 6)}
};
// Primary composites but Hangul syllables: {first, second, composite}.
inline constexpr Composition kJsCompositions[] = {
${rows(compositions.map(([a, b, c]) => `{${hex(a)}, ${hex(b)}, ${hex(c)}}`), 4)}
};
}  // namespace dspark::tokenizer_detail
`);
writeFileSync(`${dir}/js_unicode_decomposition.inc`, header("What String.prototype.normalize uses to decompose.") +
  `// Full canonical decomposition (NFD) of every decomposable code point but Hangul syllables:
// {code point, offset into kJsDecompData, length, primary composite (NFC keeps it)}.
inline constexpr Decomposition kJsDecompositions[] = {
${rows(decompIndex, 4)}
};
inline constexpr uint32_t kJsDecompData[] = {
${rows(decompData.map(hex), 10)}
};
}  // namespace dspark::tokenizer_detail
`);
