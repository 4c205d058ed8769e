#include "datagen/prompt_mix.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/rng.h"
#include "data/python_code.h"
#include "data/text_util.h"

namespace dspark::datagen {

const std::vector<PromptKind>& prompt_mix_kinds() {
  static const std::vector<PromptKind> k = {
      {"corpus_instruction", 0.20,
       "the corpus' own instruction turns (math, define, translate, code)"},
      {"manual", 0.13,
       "a GNU manual section to summarize, explain, list or answer questions about"},
      {"manual_multi", 0.04, "several manual passages and a question on them (retrieval-style)"},
      {"scripture", 0.03, "a KJV chapter to summarize, retell or explain"},
      {"words", 0.09,
       "GCIDE words to use in a sentence, contrast, give synonyms for or write with"},
      {"translate", 0.10, "FreeDict words and corpus sentences to translate, both directions"},
      {"code", 0.12, "a Python function to complete, explain, document, test or debug"},
      {"math", 0.10, "a word problem in one of several phrasings and answer formats"},
      {"writing", 0.11, "open writing, lists, step-by-step instructions and role play"},
      {"multi_turn", 0.08, "two turns, the second referring to the first answer"},
  };
  return k;
}

namespace {

std::vector<std::string> read_texts(const std::string& path) {
  const std::string text = read_text_file(path);
  std::vector<std::string> out;
  for_each_line(text, [&](std::string_view l, int64_t line) {
    if (data::trim(l).empty()) return;
    nlohmann::json j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string())
      fail(path, ":", line, ": expected a JSON object with a \"text\" string");
    out.push_back(j["text"].get<std::string>());
  });
  return out;
}

struct Manual {
  std::string title, node, body;
};
struct Chapter {
  std::string name, body;
};
struct Translation {
  std::string word, lang;  // word in `lang` (English when `to_english` is false)
  bool to_english;
};

bool is_chapter_title(std::string_view first) {
  // "Genesis 20", "1 Kings 3", "Song of Solomon 2"
  const size_t sp = first.rfind(' ');
  if (sp == std::string_view::npos || sp + 1 >= first.size()) return false;
  for (char c : first.substr(sp + 1))
    if (c < '0' || c > '9') return false;
  return true;
}

// A string cut at a paragraph or line boundary near `max_chars`.
std::string excerpt(const std::string& s, size_t max_chars) {
  if (s.size() <= max_chars) return std::string(data::trim(s));
  size_t cut = s.rfind("\n\n", max_chars);
  if (cut == std::string::npos || cut < max_chars / 2) cut = s.rfind('\n', max_chars);
  if (cut == std::string::npos || cut < max_chars / 2) cut = s.rfind(' ', max_chars);
  if (cut == std::string::npos) cut = max_chars;
  return std::string(data::trim(std::string_view(s).substr(0, cut)));
}

std::string quoted_word(std::string_view line) {
  const size_t a = line.find('"');
  if (a == std::string_view::npos) return "";
  const size_t b = line.find('"', a + 1);
  if (b == std::string_view::npos || b == a + 1 || b - a > 40) return "";
  return std::string(line.substr(a + 1, b - a - 1));
}

const std::vector<std::string> kLanguages = {"German",  "French", "Spanish",
                                             "Italian", "Dutch",  "Portuguese"};

struct Sources {
  std::vector<std::string> instructions;  // user turns
  std::vector<Manual> manuals;
  std::vector<Chapter> chapters;
  std::vector<std::string> words;      // GCIDE headwords
  std::vector<std::string> sentences;  // short plain sentences (GCIDE quotations, verses)
  std::vector<Translation> translations;
  std::vector<data::PyFunction> functions;
  std::vector<std::string> problems;  // math questions
  std::vector<std::string> topics;    // manual node names and GCIDE nouns
};

Sources load_sources(const std::string& dir) {
  Sources s;
  for (const std::string& t : read_texts(dir + "/instructions/train.jsonl"))
    if (auto u = chatml_first_user_turn(t)) s.instructions.push_back(std::move(*u));
  for (const std::string& t : read_texts(dir + "/prose/train.jsonl")) {
    const size_t nl = t.find('\n');
    const std::string_view first =
        std::string_view(t).substr(0, nl == std::string::npos ? t.size() : nl);
    const bool blank_after = nl != std::string::npos && nl + 1 < t.size() && t[nl + 1] == '\n';
    if (blank_after && is_chapter_title(first)) {
      s.chapters.push_back({std::string(first), t.substr(nl + 2)});
      const size_t v = t.find("\n1 ");
      if (v != std::string::npos) {
        const size_t e = t.find('\n', v + 3);
        std::string verse = t.substr(v + 3, (e == std::string::npos ? t.size() : e) - v - 3);
        if (verse.size() > 30 && verse.size() < 220) s.sentences.push_back(std::move(verse));
      }
    } else if (blank_after && first.find(": ") != std::string_view::npos && t.size() > 400) {
      const size_t c = first.find(": ");
      Manual m{std::string(first.substr(0, c)), std::string(first.substr(c + 2)), t.substr(nl + 2)};
      // the body's own heading line ("5.6.12 Session options") is a better topic than the node
      const size_t hl = m.body.find('\n');
      std::string heading(data::trim(std::string_view(m.body).substr(0, hl)));
      const size_t sp = heading.find(' ');
      if (sp != std::string::npos && sp < 10 &&
          std::isdigit(static_cast<unsigned char>(heading[0])))
        heading = heading.substr(sp + 1);
      if (heading.size() > 3 && heading.size() < 60) s.topics.push_back(heading + " in " + m.title);
      s.manuals.push_back(std::move(m));
    } else {
      // GCIDE: "Headword (pron), n. definition"; the headword up to the first " (" or ","
      const size_t e = first.find_first_of(",(");
      if (e == std::string_view::npos || e < 3) continue;
      std::string w(data::trim(first.substr(0, e)));
      if (w.size() < 3 || w.size() > 16) continue;
      bool alpha = true;
      for (char c : w) alpha = alpha && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
      if (!alpha) continue;
      s.words.push_back(data::lower_ascii(w));
      if (first.find(", n.") != std::string_view::npos) s.topics.push_back(data::lower_ascii(w));
      const size_t q = t.find(" --");
      const size_t dot = t.rfind(". ", q);
      if (q != std::string::npos && dot != std::string::npos && q - dot > 30 && q - dot < 200)
        s.sentences.push_back(
            std::string(data::trim(std::string_view(t).substr(dot + 2, q - dot - 2))));
    }
  }
  for (const std::string& t : read_texts(dir + "/translation/train.jsonl")) {
    const size_t nl = t.find('\n');
    const std::string_view first =
        std::string_view(t).substr(0, nl == std::string::npos ? t.size() : nl);
    const std::string w = quoted_word(first);
    if (w.empty()) continue;
    for (const std::string& lang : kLanguages) {
      if (first.find("from English to " + lang) != std::string_view::npos ||
          first.find("in " + lang) != std::string_view::npos ||
          first.find("into " + lang) != std::string_view::npos) {
        s.translations.push_back({w, lang, false});
        break;
      }
      if (first.find("the " + lang + " word") != std::string_view::npos ||
          first.find("from " + lang + " to English") != std::string_view::npos) {
        s.translations.push_back({w, lang, true});
        break;
      }
    }
  }
  for (const std::string& t : read_texts(dir + "/code/train.jsonl"))
    for (data::PyFunction& f : data::extract_python_functions(t, 40, 2500))
      s.functions.push_back(std::move(f));
  for (const std::string& t : read_texts(dir + "/math/train.jsonl")) {
    if (!data::starts_with(t, "Question: ")) continue;
    const size_t e = t.find("\n\nSolution:");
    if (e == std::string::npos) continue;
    s.problems.push_back(t.substr(10, e - 10));
  }
  const auto need = [&](size_t n, const char* what, const char* file) {
    if (n == 0)
      fail(dir, "/", file, ": holds no ", what, " (is this a `dspark corpus build` directory?)");
  };
  need(s.instructions.size(), "instruction turns", "instructions/train.jsonl");
  need(s.manuals.size(), "GNU manual sections", "prose/train.jsonl");
  need(s.chapters.size(), "KJV chapters", "prose/train.jsonl");
  need(s.words.size(), "GCIDE entries", "prose/train.jsonl");
  need(s.translations.size(), "dictionary pairs", "translation/train.jsonl");
  need(s.functions.size(), "Python functions with docstrings", "code/train.jsonl");
  need(s.problems.size(), "math questions", "math/train.jsonl");
  return s;
}

std::string fill(std::string t, const std::vector<std::pair<std::string, std::string>>& vars) {
  for (const auto& [k, v] : vars) t = data::replace_all(std::move(t), "{" + k + "}", v);
  return t;
}

std::string code_block(const std::string& c) {
  return "```python\n" + c + (c.empty() || c.back() != '\n' ? "\n" : "") + "```";
}

// A one-token bug: the first comparison, arithmetic operator or boolean constant flipped.
bool plant_bug(const std::string& body, Rng& rng, std::string* out) {
  static const std::vector<std::pair<std::string, std::string>> kSwaps = {
      {" < ", " <= "},   {" > ", " >= "},   {" <= ", " < "},  {" >= ", " > "},   {" == ", " != "},
      {" != ", " == "},  {" + 1", " - 1"},  {" - 1", " + 1"}, {"True", "False"}, {"False", "True"},
      {" and ", " or "}, {" or ", " and "}, {"[0]", "[1]"},   {"[-1]", "[0]"}};
  const size_t start = size_t(rng.below(kSwaps.size()));
  for (size_t i = 0; i < kSwaps.size(); ++i) {
    const auto& [a, b] = kSwaps[(start + i) % kSwaps.size()];
    const size_t at = body.find(a);
    if (at == std::string::npos) continue;
    *out = body.substr(0, at) + b + body.substr(at + a.size());
    return true;
  }
  return false;
}

class Builder {
 public:
  Builder(Sources s, uint64_t seed) : s_(std::move(s)), rng_(Rng::from_word(seed)) {}

  std::vector<std::string> make(const std::string& kind) {
    if (kind == "corpus_instruction") return {pick(s_.instructions)};
    if (kind == "manual") return {manual()};
    if (kind == "manual_multi") return {manual_multi()};
    if (kind == "scripture") return {scripture()};
    if (kind == "words") return {words()};
    if (kind == "translate") return {translate()};
    if (kind == "code") return {code()};
    if (kind == "math") return {math()};
    if (kind == "writing") return {writing()};
    if (kind == "multi_turn") return multi_turn();
    fail("prompt mix: unknown kind ", kind);
  }

 private:
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[size_t(rng_.below(v.size()))];
  }
  std::string one(const std::vector<std::string>& v) { return pick(v); }
  // One of `asks` about an excerpt of `body` (lo to hi characters): `vars`, then {text}, filled in.
  std::string about_excerpt(const std::string& body, int64_t lo, int64_t hi,
                            const std::vector<std::string>& asks,
                            std::vector<std::pair<std::string, std::string>> vars) {
    vars.emplace_back("text", excerpt(body, size_t(rng_.range(lo, hi))));
    return fill(one(asks), vars);
  }

  std::string manual() {
    static const std::vector<std::string> kAsk = {
        "Summarize:\n\n{text}",
        "Summarize this section of the {title} manual in a few sentences.\n\n{text}",
        "{text}\n\nWhat is this section about? Answer briefly.",
        "Here is an excerpt from the documentation of {title}:\n\n{text}\n\nExplain it in plain "
        "words "
        "for a beginner.",
        "Read the text below and list its main points as bullets.\n\n{text}",
        "Documentation ({node}):\n{text}\n\nWhat problem does this feature solve?",
        "{text}\n\nTL;DR",
        "Explain the part of the {title} documentation called \"{node}\".",
        "I am reading the {title} manual. What does the section \"{node}\" cover, and when would I "
        "need it?",
        "Write a short tutorial, with an example, based on this documentation:\n\n{text}",
        "Give a one-paragraph overview of the following.\n\n{text}",
        "From the passage below, which options or commands are mentioned, and what does each do?"
        "\n\n{text}",
    };
    const Manual& m = pick(s_.manuals);
    return about_excerpt(m.body, 600, 3000, kAsk, {{"title", m.title}, {"node", m.node}});
  }

  std::string manual_multi() {
    const int n = int(rng_.range(2, 4));
    std::string docs;
    const Manual* last = nullptr;
    for (int i = 0; i < n; ++i) {
      last = &pick(s_.manuals);
      docs += "[" + std::to_string(i + 1) + "] " + last->title + ", " + last->node + "\n" +
              excerpt(last->body, 900) + "\n\n";
    }
    static const std::vector<std::string> kAsk = {
        "{docs}Using the passages above, explain what \"{node}\" is used for.",
        "Context:\n{docs}Question: how is {node} described in these documents? Cite the passage "
        "numbers.",
        "{docs}Which of these passages is about {title}, and what does it say?",
        "Answer from the sources only.\n\n{docs}What do these passages have in common?",
    };
    return fill(one(kAsk), {{"docs", docs}, {"node", last->node}, {"title", last->title}});
  }

  std::string scripture() {
    static const std::vector<std::string> kAsk = {
        "Summarize {name} of the King James Bible.",
        "Retell this passage in modern, simple English:\n\n{text}",
        "Summarize:\n\n{text}",
        "{text}\n\nWho are the people named in this passage, and what happens to them?",
        "What is the main message of {name}? Quote one verse.",
        "Explain the meaning of the following verses.\n\n{text}",
    };
    const Chapter& c = pick(s_.chapters);
    return about_excerpt(c.body, 500, 2500, kAsk, {{"name", c.name}});
  }

  std::string words() {
    const std::string& a = pick(s_.words);
    const std::string& b = pick(s_.words);
    const std::string& c = pick(s_.words);
    static const std::vector<std::string> kAsk = {
        "Use the word \"{a}\" in a sentence.",
        "Give three synonyms for \"{a}\", and an example sentence for each.",
        "What is the difference between \"{a}\" and \"{b}\"?",
        "Write a short story that uses the words {a}, {b} and {c}.",
        "What does {a} mean? Where does the word come from?",
        "Is \"{a}\" a noun, a verb or an adjective? Explain with examples.",
        "Explain the word \"{a}\" to a ten-year-old.",
        "Write a limerick about a {a}.",
        "define {a}",
        "Give the opposite of \"{a}\" and use both in one sentence.",
    };
    return fill(one(kAsk), {{"a", a}, {"b", b}, {"c", c}});
  }

  std::string translate() {
    if (rng_.chance(0.3) && !s_.sentences.empty()) {
      const std::string& sent = pick(s_.sentences);
      const std::string& lang = pick(kLanguages);
      static const std::vector<std::string> kAsk = {
          "Translate English to {lang}: {s}",
          "Translate into {lang}:\n\n{s}",
          "How would you say this in {lang}? \"{s}\"",
          "{s}\n\nPlease give the {lang} version.",
      };
      return fill(one(kAsk), {{"lang", lang}, {"s", sent}});
    }
    const Translation& t = pick(s_.translations);
    static const std::vector<std::string> kTo = {
        "Translate {lang} to English: {w}", "What does the {lang} word \"{w}\" mean in English?",
        "{w} ({lang}) -> English?",
        "I saw the word \"{w}\" in a {lang} text. What is it in English, "
        "and how is it used?",
        "Translate from {lang}: {w}"};
    static const std::vector<std::string> kFrom = {
        "Translate English to {lang}: {w}", "How do I say \"{w}\" in {lang}?",
        "What is the {lang} for \"{w}\"? Give an example sentence.", "\"{w}\" in {lang}, please.",
        "Give the {lang} translation of the English word {w}, with its gender if it is a noun."};
    return fill(one(t.to_english ? kTo : kFrom), {{"lang", t.lang}, {"w", t.word}});
  }

  std::string code() {
    const data::PyFunction& f = pick(s_.functions);
    const std::string sig = f.name + "(" + f.params + ")";
    const int style = int(rng_.below(8));
    switch (style) {
      case 0:
        return "Explain what this Python function does, step by step.\n\n" + code_block(f.source);
      case 1:
        return "Write unit tests (unittest) for this function:\n\n" + code_block(f.source);
      case 2: {
        std::string buggy;
        if (plant_bug(f.body, rng_, &buggy))
          return "This function has a bug. Find it and give the corrected code.\n\n" +
                 code_block(f.header + buggy);
        return "Review this code and suggest improvements.\n\n" + code_block(f.source);
      }
      case 3:
        return "Add type hints to this function and keep its behaviour.\n\n" + code_block(f.source);
      case 4:
        return "Write a Python function " + sig + ". " + f.summary;
      case 5:
        return code_block(f.header) + "\nComplete the function above.";
      case 6:
        return "What is the time complexity of " + f.name + "? Explain.\n\n" + code_block(f.source);
      default:
        return "Rewrite " + f.name + " so that it is shorter and easier to read.\n\n" +
               code_block(f.source);
    }
  }

  std::string math() {
    const std::string& q = pick(s_.problems);
    static const std::vector<std::string> kAsk = {
        "{q}",
        "{q} Show your work.",
        "Solve step by step: {q}",
        "{q}\nGive only the final number.",
        "Problem: {q}\nReason it through, then write \"Answer:\" and the result.",
        "My teacher gave us this: {q} How do I solve it?",
        "{q} Explain the calculation as a numbered list of steps.",
        "Q: {q}\nA:",
        "Can you check this? {q} I think the answer is {guess}.",
        "Write a Python program that computes the answer to this problem and prints it: {q}",
    };
    return fill(one(kAsk), {{"q", q}, {"guess", std::to_string(rng_.range(2, 400))}});
  }

  std::string topic() {
    return rng_.chance(0.5) && !s_.topics.empty() ? pick(s_.topics) : pick(s_.words);
  }

  std::string writing() {
    static const std::vector<std::string> kAsk = {
        "Write a short blog post about {t}.",
        "Write an email to a colleague explaining {t}.",
        "List {n} tips about {t}.",
        "Give step-by-step instructions for working with {t}.",
        "Write a poem about {t}.",
        "Describe {t} to someone who has never heard of it.",
        "Write a dialogue between a teacher and a student about {t}.",
        "You are an expert on {t}. A customer asks you for advice. What do you say?",
        "Write a product description for something related to {t}.",
        "Make a numbered list of the pros and cons of {t}.",
        "Write a paragraph arguing for {t}, then one arguing against it.",
        "Give me a plan, day by day, to learn about {t} in one week.",
        "What are common mistakes people make with {t}? Answer as bullet points.",
        "Write the opening of a mystery story set around {t}.",
        "Imagine you are a tour guide. Introduce {t} to visitors.",
        "Explain {t} in three sentences.",
        "Compare {t} and {u} in a table.",
        "Write a formal letter of complaint about {t}.",
    };
    return fill(one(kAsk),
                {{"t", topic()}, {"u", topic()}, {"n", std::to_string(rng_.range(3, 8))}});
  }

  std::vector<std::string> multi_turn() {
    static const std::vector<std::string> kFirst = {
        "manual", "words", "code", "math", "writing", "translate", "corpus_instruction"};
    std::vector<std::string> turns = make(one(kFirst));
    static const std::vector<std::string> kThen = {
        "Now make your answer shorter.",
        "Can you explain that more simply?",
        "Summarize what you just said in one sentence.",
        "Give me another example.",
        "Turn your answer into a bulleted list.",
        "Translate your answer into {lang}.",
        "Why is that so?",
        "Rewrite it in a more formal tone.",
        "Are you sure? Please check your answer again.",
        "Thanks. What should I read next to learn more about this?",
        "Write the same thing as a short poem.",
        "Now explain it as if I were five years old.",
    };
    turns.push_back(fill(one(kThen), {{"lang", pick(kLanguages)}}));
    return turns;
  }

  Sources s_;
  Rng rng_;
};

}  // namespace

std::vector<MixedPrompt> build_prompt_mix(const std::string& corpus_dir, int64_t count,
                                          uint64_t seed) {
  if (count < 1) fail("prompt mix: --count must be at least 1, not ", count);
  Builder b(load_sources(corpus_dir), data::mix64(seed ^ 0x70726f6d70746d69ull));
  const auto& kinds = prompt_mix_kinds();
  double total = 0;
  for (const PromptKind& k : kinds) total += k.weight;
  std::vector<int64_t> n(kinds.size());
  int64_t used = 0;
  for (size_t i = 0; i < kinds.size(); ++i)
    used += n[i] = int64_t(std::floor(double(count) * kinds[i].weight / total));
  for (size_t i = 0; used < count; i = (i + 1) % kinds.size(), ++used) ++n[i];
  std::vector<MixedPrompt> out;
  out.reserve(size_t(count));
  for (size_t i = 0; i < kinds.size(); ++i)
    for (int64_t j = 0; j < n[i]; ++j) {
      MixedPrompt p;
      p.kind = kinds[i].name;
      p.prompt.turns = b.make(p.kind);
      out.push_back(std::move(p));
    }
  // Fisher-Yates with the mix's own generator: any prefix is a mix of every kind.
  Rng shuffle = Rng::from_word(data::mix64(seed ^ 0x73687566666c65ull));
  for (size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[size_t(shuffle.below(i))]);
  for (size_t i = 0; i < out.size(); ++i) out[i].prompt.id = int64_t(i);
  return out;
}

std::string prompt_mix_line(const MixedPrompt& p) {
  nlohmann::json j;
  j["kind"] = p.kind;
  if (p.prompt.turns.size() == 1)
    j["prompt"] = p.prompt.turns[0];
  else
    j["turns"] = p.prompt.turns;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace dspark::datagen
