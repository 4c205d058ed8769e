// Source parsers on small synthetic inputs made here: gzip/dictzip, dictd indexes, GCIDE
// markup, FreeDict entries, info manuals, the BRS LZW windows of the KJV, Python functions.
#include <gtest/gtest.h>

#include <string>

#include "core/crc32.h"
#include "core/error.h"
#include "core/rng.h"
#include "data/bible.h"
#include "data/compress.h"
#include "data/dictd.h"
#include "data/freedict.h"
#include "data/gcide.h"
#include "data/info_manual.h"
#include "data/python_code.h"
#include "data/system.h"
#include "data/text_util.h"
#include "test_util.h"

namespace dspark::data {
namespace {

using testing::TempDir;

// Deterministic pseudo-English with plenty of repetition (so LZW tables fill up).
std::string words(size_t bytes, uint64_t seed) {
  static const char* kWords[] = {"the", "and", "of", "light", "waters", "firmament", "said", "God", "earth",
                                 "heaven", "darkness", "divided", "evening", "morning", "day", "was", "it",
                                 "good", "upon", "face", "deep", "Spirit", "moved", "form", "void", "seed"};
  Rng rng = Rng::from_word(seed);
  std::string s;
  while (s.size() < bytes) {
    s += kWords[rng.below(26)];
    s += rng.below(9) == 0 ? ".\n" : " ";
  }
  return s;
}

TEST(Compress, GzipMembersAndErrors) {
  TempDir t;
  const std::string a = t.path() + "/a.gz";
  write_gzip_file(a, "first member\n");
  const std::string one = testing::slurp(a);
  write_gzip_file(a, "second member\n");
  const std::string two = one + testing::slurp(a);
  EXPECT_EQ(gunzip(two, "two"), "first member\nsecond member\n");
  const std::string path = t.write("bad.gz", two.substr(0, two.size() - 5));
  try {
    read_gzip_file(path);
    FAIL() << "truncated gzip accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(crc32_bytes("123456789", 9), 0xCBF43926u);  // the standard CRC-32 check value
  EXPECT_EQ(crc32_hex(0xCBF43926u), "cbf43926");
}

TEST(Compress, LzwDecodesCompressOutput) {
  for (const size_t n : {size_t(1), size_t(100), size_t(5000), size_t(300000)}) {
    const std::string text = words(n, n);
    const std::string packed = testing::lzw_compress(text);
    EXPECT_LT(packed.size(), text.size() + 16);
    EXPECT_EQ(lzw_decompress(packed, "test"), text) << "size " << n;
  }
  // KwKwK: a run of one byte exercises the code-not-yet-in-table case.
  const std::string run(70000, 'a');
  EXPECT_EQ(lzw_decompress(testing::lzw_compress(run), "run"), run);
}

TEST(Bible, DecodesWindowsAndSplitsChapters) {
  std::string text = "Holy Bible, Authorized (King James) Version.  Textfile 930105.\n";
  text += "Ge1:1 In the beginning God created the heaven and the earth.\n";
  text += "Ge1:2 " + words(3000, 1).substr(0, 2000) + "\n";
  text += "Ge2:1 Thus the heavens and the earth were finished.\n";
  text += "1Sm3:4 That the LORD called Samuel: and he answered, Here am I.\n";
  text += "Rev22:21 The grace of our Lord Jesus Christ be with you all. Amen.\n";
  TempDir t;
  const std::string path = t.write("bible.data", testing::make_brs_file(text, 1024));
  EXPECT_EQ(read_brs_data_file(path), text);
  const auto ch = bible_chapters(text);
  ASSERT_EQ(ch.size(), 4u);
  EXPECT_EQ(ch[0].book, "Genesis");
  EXPECT_EQ(ch[0].chapter, 1);
  EXPECT_EQ(ch[0].text.substr(0, 70), "Genesis 1\n\n1 In the beginning God created the heaven and the earth.\n2 ");
  EXPECT_EQ(ch[1].text, "Genesis 2\n\n1 Thus the heavens and the earth were finished.");
  EXPECT_EQ(ch[2].book, "1 Samuel");
  EXPECT_EQ(ch[3].text, "Revelation 22\n\n21 The grace of our Lord Jesus Christ be with you all. Amen.");
  // A damaged header is an error naming the file.
  std::string bad = testing::make_brs_file(text, 1024);
  bad[0] = 'X';
  const std::string bad_path = t.write("bad.data", bad);
  try {
    read_brs_data_file(bad_path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad_path), std::string::npos);
  }
}

TEST(Dictd, ReadsIndexAndDictzip) {
  TempDir t;
  const auto [index, dict] = testing::make_dictd({
      {{"00-database-info"}, "00-database-info\n   about this file\n"},
      {{"Apple", "apple"}, "Apple \\Ap\"ple\\, n.\n   A fruit.\n   [1913 Webster]\n"},
      {{"Pear"}, "Pear \\Pear\\, n.\n   Another fruit.\n"},
  });
  const std::string ipath = t.write("x.index", index);
  write_gzip_file(t.path() + "/x.dict.dz", dict);
  const auto es = read_dictd(ipath, t.path() + "/x.dict.dz");
  ASSERT_EQ(es.size(), 2u);  // one per article; meta entries skipped
  EXPECT_EQ(es[0].headword, "Apple");
  EXPECT_EQ(es[0].body, "Apple \\Ap\"ple\\, n.\n   A fruit.\n   [1913 Webster]\n");
  EXPECT_EQ(es[1].headword, "Pear");
  EXPECT_EQ(read_dictd(ipath, t.path() + "/x.dict.dz", false).size(), 3u);
  uint64_t v;
  ASSERT_TRUE(decode_dictd_number("BA", &v));
  EXPECT_EQ(v, 64u);
  EXPECT_EQ(encode_dictd_number(4095), "//");
  // An entry past the end of the dictionary names the index file and line.
  const std::string bad = t.write("bad.index", "word\tzzzz\tB\n");
  try {
    read_dictd(bad, t.path() + "/x.dict.dz");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ":1"), std::string::npos) << e.what();
  }
}

TEST(Gcide, StripsMarkup) {
  const std::string raw =
      "Cat \\Cat\\ (k[a^]t), n. [AS. cat; akin to G. katze, Icel. k[\"o]ttr. Cf. {Kitten}.]\n"
      "   1. (Zool.) Any animal of the family {Felidae}; as, the {Angora\n"
      "      cat}. See {Un*wor\"thi*ly}.\n"
      "      [1913 Webster +PJC]\n"
      "\n"
      "   2. A strong tackle used to draw an anchor.\n"
      "      [1913 Webster] Catamount\n";
  GcideEntry e;
  ASSERT_TRUE(clean_gcide_entry("cat", raw, &e));
  EXPECT_EQ(e.headword, "Cat");
  EXPECT_EQ(e.text,
            "Cat, n. [AS. cat; akin to G. katze, Icel. köttr. Cf. Kitten.]\n"
            "1. (Zool.) Any animal of the family Felidae; as, the Angora cat. See Unworthily.\n"
            "2. A strong tackle used to draw an anchor.");
  EXPECT_EQ(e.definition,
            "n.\n1. (Zool.) Any animal of the family Felidae; as, the Angora cat. See Unworthily.\n"
            "2. A strong tackle used to draw an anchor.");
  EXPECT_EQ(gcide_accents("caf['e] [ae]on [=a] [root]2"), "café æon ā √2");
  GcideEntry empty;
  EXPECT_FALSE(clean_gcide_entry("x", "x\n   [1913 Webster]\n", &empty));
}

TEST(Freedict, ParsesEntry) {
  FreedictEntry e;
  ASSERT_TRUE(parse_freedict_entry(
      "Absicht /ˈapzɪçt/ <fem, n, sg>\n [jur.] intent <n>, purpose <n>\n"
      "         Note: law\n      \"with good intent\"  - in guter Absicht\n   Synonym: {Vorsatz}\n see: {absichtlich}\n",
      &e));
  EXPECT_EQ(e.headword, "Absicht");
  EXPECT_EQ(e.pos, "fem, n, sg");
  ASSERT_EQ(e.translations.size(), 1u);
  EXPECT_EQ(e.translations[0], "[jur.] intent, purpose");
  ASSERT_EQ(e.notes.size(), 1u);
  EXPECT_EQ(e.notes[0], "law");
  ASSERT_EQ(e.examples.size(), 1u);
  EXPECT_EQ(e.examples[0].first, "with good intent");
  EXPECT_EQ(e.examples[0].second, "in guter Absicht");
  ASSERT_TRUE(parse_freedict_entry("account /əkaunt/\n1. facture\n2. compte\n", &e));
  EXPECT_EQ(e.translations, (std::vector<std::string>{"facture", "compte"}));
  EXPECT_FALSE(parse_freedict_entry("lonely /x/\n see: {alone}\n", &e));
  EXPECT_EQ(language_name("nld"), "Dutch");
}

TEST(InfoManual, NodesWithoutMenusIndexesOrLicences) {
  const std::string body(300, 'x');
  const std::string info =
      "This is frob.info, produced by makeinfo.\n\x1f\n"
      "File: frob.info,  Node: Top,  Next: Intro,  Up: (dir)\n\nGNU Frob\n********\n\nThis manual is short.\n\n"
      "* Menu:\n\n* Intro::\n\n\x1f\n"
      "File: frob.info,  Node: Intro,  Next: Concept Index,  Prev: Top,  Up: Top\n\n"
      "1 Introduction\n**************\n\n"
      "The ‘frob’ program frobs files.  *Note Invoking\nfrob::, for details; see *note the options: Options.\n\n"
      "     frob -v FILE\n\n" + body + "\n\n* Menu:\n\n* Sub::  A sub node.\n\x1f\n"
      "File: frob.info,  Node: Concept Index,  Prev: Intro,  Up: Top\n\n" + std::string("\0\b[index\0\b]\n", 12) +
      "* Menu:\n\n* frob:  Intro.   (line 6)\n" + body + "\n\x1f\n"
      "File: frob.info,  Node: GNU Free Documentation License,  Up: Top\n\n" + body + "\n\x1f\nTag Table:\nNode: Top\x7f" "88\n\x1f\nEnd Tag Table\n";
  std::string title;
  const auto nodes = parse_info_manual(info, &title);
  EXPECT_EQ(title, "GNU Frob");
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].node, "Intro");
  EXPECT_EQ(nodes[0].text, "1 Introduction\n\nThe ‘frob’ program frobs files.  See Invoking frob, for details; see the options.\n\n"
                           "     frob -v FILE\n\n" + body);
  int part = -1;
  EXPECT_EQ(info_manual_name("/usr/share/info/find.info-2.gz", &part), "find");
  EXPECT_EQ(part, 2);
  EXPECT_EQ(info_manual_name("/usr/share/info/sed.info.gz", &part), "sed");
  EXPECT_EQ(part, 0);
}

TEST(PythonCode, ExtractsDocumentedTopLevelFunctions) {
  const std::string src =
      "import os\n\n"
      "@cache\n"
      "def add(a, b=1,\n        *, c=None):\n    \"\"\"Return the sum of a and b.\n\n    More text.\n    \"\"\"\n"
      "    total = a + b\n\n    return total\n\n"
      "def _private(x):\n    \"\"\"Hidden helper function here.\"\"\"\n    return x\n\n"
      "def nodoc(x):\n    return x\n\n"
      "class K:\n    def method(self):\n        \"\"\"A method, not top level.\"\"\"\n        return 1\n\n"
      "def short():\n    '''Only a docstring here.'''\n\n"
      "def cont(a, \\\n         b):\n    \"\"\"Join the two values with a plus.\"\"\"\n    return a + b\n\n"
      "def greet(name):\n    r'''Say hello to someone politely.'''\n    print('hi', name)\n";
  const auto fs = extract_python_functions(src);
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[0].name, "add");
  EXPECT_EQ(fs[0].params, "a, b=1, *, c=None");
  EXPECT_EQ(fs[0].summary, "Return the sum of a and b.");
  EXPECT_EQ(fs[0].header,
            "@cache\ndef add(a, b=1,\n        *, c=None):\n    \"\"\"Return the sum of a and b.\n\n    More text.\n    \"\"\"\n");
  EXPECT_EQ(fs[0].body, "    total = a + b\n\n    return total\n");
  EXPECT_EQ(fs[0].source, fs[0].header + fs[0].body);
  EXPECT_EQ(fs[1].name, "cont");
  EXPECT_EQ(fs[1].params, "a, b");
  EXPECT_EQ(fs[2].name, "greet");
  EXPECT_EQ(fs[2].body, "    print('hi', name)\n");

  EXPECT_TRUE(skip_python_file("/encodings/cp1252.py", "\"\"\" Python Character Mapping Codec cp1252 generated from 'X' with gencodec.py.\n"));
  EXPECT_TRUE(skip_python_file("/test/test_os.py", "import os\n"));
  EXPECT_TRUE(skip_python_file("/big.py", std::string(300000, '#')));
  EXPECT_FALSE(skip_python_file("/json/decoder.py", "\"\"\"Implementation of JSONDecoder\n\"\"\"\nimport re\n"));
}

TEST(TextUtil, NormalizedHashAndUtf8) {
  EXPECT_EQ(normalized_hash("Hello  World\n"), normalized_hash("hello world"));
  EXPECT_NE(normalized_hash("hello world"), normalized_hash("hello, world"));
  EXPECT_EQ(sanitize_utf8("a\xff" "b\r\nc\x01"), "a\xEF\xBF\xBD" "b\nc");
  EXPECT_TRUE(is_valid_utf8("grüß"));
  EXPECT_EQ(json_quote("a\"b\\\n\x02"), "\"a\\\"b\\\\\\n\\u0002\"");
  EXPECT_EQ(json_quote("x\u2028y\u0085z"), "\"x\\u2028y\\u0085z\"");
  Rng a = Rng::from_word(5), b = Rng::from_word(5);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next(), b.next());
}

TEST(System, LicenceFromCopyright) {
  const std::string dep5 =
      "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\n"
      "Files: *\nCopyright: FSF\nLicense: GPL-3+\n\n"
      "Files: doc/*\nCopyright: FSF\nLicense: GFDL-NIV-1.3+\n\n"
      "Files: deu-eng/*\nLicense: GPL-2+\n";
  EXPECT_EQ(licence_from_copyright(dep5, {"doc/"}, true, "x"), "GFDL-NIV-1.3+");
  EXPECT_EQ(licence_from_copyright(dep5, {"deu-eng/"}, false, "x"), "GPL-2+");
  EXPECT_EQ(licence_from_copyright(dep5, {}, false, "x"), "GPL-3+");
  EXPECT_EQ(licence_from_copyright("under the terms of the GNU General Public License as published by\n"
                                   "the Free Software Foundation; either version 2, or (at your option)\n"
                                   "any later version.\n",
                                   {}, false, "x"),
            "GPL-2+");
  EXPECT_EQ(licence_from_copyright("The text is in the public domain.", {}, false, "x"), "public domain");
}

}  // namespace
}  // namespace dspark::data
