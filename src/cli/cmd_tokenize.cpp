// dspark tokenize: text on stdin -> token ids on stdout (or ids -> text with --decode).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "core/flags.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

namespace {

std::string read_stdin() {
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) data.append(buf, n);
  if (std::ferror(stdin)) fail("cannot read standard input");
  return data;
}

// Ids for --decode: a JSON array, a JSON object with "ids", or whitespace-separated integers.
std::vector<int32_t> parse_ids(const std::string& input) {
  std::vector<int32_t> ids;
  const size_t first = input.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return ids;
  if (input[first] == '[' || input[first] == '{') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(input);
    } catch (const nlohmann::json::parse_error& e) {
      fail("stdin: invalid JSON: ", e.what());
    }
    if (j.is_object()) {
      if (!j.contains("ids")) fail("stdin: JSON object has no \"ids\" field");
      j = j["ids"];
    }
    if (!j.is_array()) fail("stdin: expected a JSON array of token ids");
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_number_integer()) fail("stdin: element ", i, " is not an integer token id: ", j[i].dump());
      const auto v = j[i].get<int64_t>();
      if (v < INT32_MIN || v > INT32_MAX) fail("stdin: token id ", v, " out of range");
      ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
  }
  size_t i = first;
  while (i < input.size()) {
    const size_t end = input.find_first_of(" \t\r\n", i);
    const std::string word = input.substr(i, end == std::string::npos ? std::string::npos : end - i);
    char* stop = nullptr;
    const long long v = std::strtoll(word.c_str(), &stop, 10);
    if (word.empty() || *stop || v < INT32_MIN || v > INT32_MAX) fail("stdin: '", word, "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    if (end == std::string::npos) break;
    i = input.find_first_not_of(" \t\r\n", end);
    if (i == std::string::npos) break;
  }
  return ids;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  Args args;
  args.flag("model", "model directory holding tokenizer.json, or a GGUF file")
      .flag("tokenizer", "path of a tokenizer.json (instead of --model)")
      .flag("json", "print {\"ids\": [...], \"count\": N} (with --decode: {\"text\": ...})", false)
      .flag("add-special-tokens", "apply the tokenizer's post-processor (e.g. add BOS)", false)
      .flag("decode", "read token ids (whitespace-separated or a JSON array) and print the text", false)
      .flag("skip-special-tokens", "with --decode: leave special tokens out of the text", false);
  if (!args.parse(argc, argv, "tokenize",
                  "Reads UTF-8 text from stdin and prints its token ids, space-separated on one line.\n"
                  "With --decode, reads token ids from stdin and prints the text."))
    return 0;
  if (args.has("model") == args.has("tokenizer")) fail("give exactly one of --model DIR or --tokenizer FILE");
  std::unique_ptr<Tokenizer> tok =
      args.has("model") ? Tokenizer::from_dir(args.str("model")) : Tokenizer::from_file(args.str("tokenizer"));

  const std::string input = read_stdin();
  if (args.on("decode")) {
    const std::vector<int32_t> ids = parse_ids(input);
    const std::string text = tok->decode(ids, args.on("skip-special-tokens"));
    if (args.on("json")) {
      std::cout << nlohmann::json{{"text", text}}.dump() << "\n";
    } else {
      std::cout << text;
    }
  } else {
    const std::vector<int32_t> ids = tok->encode(input, args.on("add-special-tokens"));
    if (args.on("json")) {
      nlohmann::ordered_json out;
      out["ids"] = ids;
      out["count"] = ids.size();
      std::cout << out.dump() << "\n";
    } else {
      std::string line;
      line.reserve(ids.size() * 7);
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) line += ' ';
        line += std::to_string(ids[i]);
      }
      std::cout << line << "\n";
    }
  }
  std::cout.flush();
  if (!std::cout) fail("cannot write standard output");
  return 0;
}

}  // namespace dspark
