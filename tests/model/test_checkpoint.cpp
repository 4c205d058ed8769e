// Bad checkpoints get errors that name the file and the tensor or field; never a crash.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/safetensors.h"
#include "model/model.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A safetensors file from a header written by hand (nlohmann would fold duplicate keys).
void write_raw_safetensors(const std::string& path, std::string header, const std::string& data) {
  while (header.size() % 8) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(uint64_t(header.size()) >> (8 * i)));
  std::ofstream(path, std::ios::binary) << out << header << data;
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("dspark_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    cfg_ = shape_config("tiny-qwen3");
    save_model_dir(cfg_, *random_source(3), dir_.string(), DType::BF16);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const char* name) const { return (dir_ / name).string(); }
  json config() const { return json::parse(read_text_file(file("config.json"))); }
  void write_config(const json& j) const { std::ofstream(file("config.json")) << j.dump(); }
  // Rewrites model.safetensors through `edit` of its tensors (name -> dtype, shape, data).
  void rewrite(const std::function<void(std::map<std::string, TensorView>&, SafetensorsWriter&)>& edit) {
    std::string path = file("model.safetensors");
    std::vector<uint8_t> bytes;
    {
      SafetensorsFile f(path);
      auto tensors = f.tensors();
      SafetensorsWriter w;
      edit(tensors, w);
      w.write(path + ".new");
    }
    fs::rename(path + ".new", path);
  }
  // The JSON header of model.safetensors as text, and its data section.
  std::pair<std::string, std::string> split_file() const {
    const std::string bytes = read_text_file(file("model.safetensors"));
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | uint8_t(bytes[size_t(i)]);
    std::string header = bytes.substr(8, len);
    header.erase(header.find_last_not_of(' ') + 1);
    return {header, bytes.substr(8 + len)};
  }
  // Rewrites the header of model.safetensors as text through `edit`, keeping the data section
  // (offsets are relative to it, so the header may change length).
  void rewrite_header(const std::function<std::string(std::string)>& edit) const {
    auto [header, data] = split_file();
    write_raw_safetensors(file("model.safetensors"), edit(header), data);
  }
  // The header's entry of `tensor`, as JSON text.
  std::string entry_of(const std::string& tensor) const { return json::parse(split_file().first).at(tensor).dump(); }
  // Expects Model::load to throw an Error whose message contains every fragment.
  void expect_error(std::initializer_list<std::string> fragments) {
    try {
      Model::load(dir_.string(), LoadOptions{DType::F32});
      FAIL() << "loading succeeded";
    } catch (const Error& e) {
      for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what() << "\n  lacks: " << f;
    }
  }

  fs::path dir_;
  ModelConfig cfg_;
};

void copy_all(std::map<std::string, TensorView>& t, SafetensorsWriter& w, const std::string& skip = "") {
  for (auto& [n, v] : t)
    if (n != skip) w.add(n, v.dtype, v.shape, v.data);
}

TEST_F(Checkpoint, ValidOneLoads) {
  auto m = Model::load(dir_.string(), LoadOptions{DType::F32});
  EXPECT_EQ(m->config().num_layers, cfg_.num_layers);
}

TEST_F(Checkpoint, MissingTensor) {
  rewrite([](auto& t, auto& w) { copy_all(t, w, "model.layers.1.mlp.up_proj.weight"); });
  expect_error({"missing tensor", "model.layers.1.mlp.up_proj.weight", dir_.string()});
}

TEST_F(Checkpoint, UnexpectedTensor) {
  rewrite([](auto& t, auto& w) {
    copy_all(t, w);
    float x[2] = {1, 2};
    w.add("model.layers.7.extra.weight", DType::F32, {2}, x);
  });
  expect_error({"unexpected tensor", "model.layers.7.extra.weight", "model.safetensors"});
}

TEST_F(Checkpoint, WrongShape) {
  rewrite([](auto& t, auto& w) {
    for (auto& [n, v] : t) {
      if (n == "model.layers.0.self_attn.k_proj.weight") {
        std::vector<uint16_t> d(size_t(v.numel() / 2));
        w.add(n, v.dtype, {v.shape[0] / 2, v.shape[1]}, d.data());
      } else {
        w.add(n, v.dtype, v.shape, v.data);
      }
    }
  });
  expect_error({"model.layers.0.self_attn.k_proj.weight", "shape", "expected", "model.safetensors"});
}

TEST_F(Checkpoint, WrongDtype) {
  rewrite([](auto& t, auto& w) {
    for (auto& [n, v] : t) {
      if (n == "model.norm.weight") {
        std::vector<int32_t> d(size_t(v.numel()));
        w.add(n, DType::I32, v.shape, d.data());
      } else {
        w.add(n, v.dtype, v.shape, v.data);
      }
    }
  });
  expect_error({"model.norm.weight", "I32", "model.safetensors"});
}

TEST_F(Checkpoint, TruncatedFile) {
  auto size = fs::file_size(file("model.safetensors"));
  fs::resize_file(file("model.safetensors"), size - 100);
  expect_error({"model.safetensors", "truncated"});
}

TEST_F(Checkpoint, TruncatedHeader) {
  fs::resize_file(file("model.safetensors"), 5);
  expect_error({"model.safetensors", "truncated"});
}

TEST_F(Checkpoint, MalformedHeaderJson) {
  std::fstream f(file("model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  f.write("{\"a\":}", 6);
  f.close();
  expect_error({"model.safetensors", "malformed safetensors header"});
}

TEST_F(Checkpoint, MalformedConfigJson) {
  std::ofstream(file("config.json")) << "{\"hidden_size\": 64,";
  expect_error({"config.json", "malformed JSON"});
}

TEST_F(Checkpoint, MissingConfigField) {
  json j = config();
  j.erase("num_hidden_layers");
  write_config(j);
  expect_error({"config.json", "num_hidden_layers"});
}

TEST_F(Checkpoint, BadConfigFieldType) {
  json j = config();
  j["hidden_size"] = "big";
  write_config(j);
  expect_error({"config.json", "hidden_size", "positive integer"});
}

TEST_F(Checkpoint, ImpossibleHeads) {
  json j = config();
  j["num_key_value_heads"] = 3;
  write_config(j);
  expect_error({"config.json", "num_key_value_heads"});
}

TEST_F(Checkpoint, UnsupportedArchitecture) {
  json j = config();
  j["architectures"] = {"GPT2LMHeadModel"};
  write_config(j);
  expect_error({"config.json", "unsupported architecture", "GPT2LMHeadModel"});
}

// Qwen2's q/k/v biases are read (checked against the float64 reference in test_reference); a
// checkpoint without them, biases on another architecture, and sliding-window attention are not.
TEST_F(Checkpoint, Qwen2NeedsItsBiasesAndFullAttention) {
  json j = config();
  j["architectures"] = {"Qwen2ForCausalLM"};
  write_config(j);
  expect_error({"unexpected tensor", "k_norm.weight", "Qwen2ForCausalLM"});  // a Qwen3 checkpoint
  rewrite([](auto& t, auto& w) {
    for (auto& [n, v] : t)
      if (n.find("_norm.weight") == std::string::npos || n.find("self_attn") == std::string::npos)
        w.add(n, v.dtype, v.shape, v.data);
  });
  expect_error({"missing tensor", "self_attn.q_proj.bias"});
  j["use_sliding_window"] = true;
  write_config(j);
  expect_error({"config.json", "use_sliding_window"});
  j = config();
  j["architectures"] = {"LlamaForCausalLM"};
  j["attention_bias"] = true;
  write_config(j);
  expect_error({"config.json", "attention_bias", "LlamaForCausalLM"});
}

TEST_F(Checkpoint, NoWeights) {
  fs::remove(file("model.safetensors"));
  expect_error({dir_.string(), "model.safetensors"});
}

TEST_F(Checkpoint, ShardedIndexNamesMissingShard) {
  fs::remove(file("model.safetensors"));
  json idx = {{"weight_map", {{"model.norm.weight", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(file("model.safetensors.index.json")) << idx.dump();
  expect_error({"model-00002-of-00002.safetensors", "cannot open"});
}

TEST_F(Checkpoint, ShardedIndexEscapingDirectory) {
  fs::remove(file("model.safetensors"));
  json idx = {{"weight_map", {{"model.norm.weight", "../../etc/passwd"}}}};
  std::ofstream(file("model.safetensors.index.json")) << idx.dump();
  expect_error({"model.safetensors.index.json", "model.norm.weight", "outside"});
}

// nlohmann::json keeps the last of two equal keys: without a check a repeated tensor (or field)
// would load silently, the first entry's bytes unowned.
TEST_F(Checkpoint, DuplicateTensorNameIsRefused) {
  const std::string norm = entry_of("model.norm.weight");
  rewrite_header([&](std::string h) { return h.substr(0, h.size() - 1) + ",\"model.norm.weight\":" + norm + "}"; });
  expect_error({"model.safetensors", "tensor 'model.norm.weight'", "twice"});
}

TEST_F(Checkpoint, DuplicateFieldOfATensorIsRefused) {
  rewrite_header([&](std::string h) {
    const std::string key = "\"model.norm.weight\":{";
    const size_t at = h.find(key);
    EXPECT_NE(at, std::string::npos) << h;
    return h.insert(at + key.size(), "\"dtype\":\"F32\",");
  });
  expect_error({"model.safetensors", "tensor 'model.norm.weight'", "'dtype'", "twice"});
}

TEST_F(Checkpoint, OverlappingTensorDataIsRefusedNamingBoth) {
  // model.norm.weight pointed at model.layers.0.input_layernorm.weight's bytes (same size).
  const json other = json::parse(entry_of("model.layers.0.input_layernorm.weight"));
  rewrite_header([&](std::string h) {
    json j = json::parse(h);
    j["model.norm.weight"]["data_offsets"] = other["data_offsets"];
    return j.dump();
  });
  expect_error({"model.safetensors", "overlap", "'model.norm.weight'", "'model.layers.0.input_layernorm.weight'"});
}

TEST_F(Checkpoint, DuplicateTensorInShardIndexIsRefused) {
  fs::rename(file("model.safetensors"), file("model-00001-of-00001.safetensors"));
  std::string map;
  const SafetensorsFile shard(file("model-00001-of-00001.safetensors"));
  for (const auto& [name, t] : shard.tensors())
    map += "\"" + name + "\": \"model-00001-of-00001.safetensors\", ";
  map += "\"model.norm.weight\": \"model-00001-of-00001.safetensors\"";
  std::ofstream(file("model.safetensors.index.json")) << "{\"weight_map\": {" << map << "}}";
  expect_error({"model.safetensors.index.json", "'model.norm.weight'", "twice"});
}

// Overlaps are found whatever the order of the ranges, and empty tensors own no bytes.
TEST(Safetensors, OverlapBehindAnEmptyTensorIsFound) {
  const std::string path = (fs::temp_directory_path() / ("dspark_st_" + std::to_string(::getpid()))).string();
  auto parse = [&](const json& header) {
    write_raw_safetensors(path, header.dump(), std::string(16, 'x'));
    SafetensorsFile f(path);
    return f.tensors().size();
  };
  auto u8 = [](int64_t n, uint64_t begin) {
    return json{{"dtype", "U8"}, {"shape", {n}}, {"data_offsets", {begin, begin + uint64_t(n)}}};
  };
  // a [0, 10), the empty z at 5, b [6, 8): b lies inside a.
  std::string err;
  try {
    parse({{"a", u8(10, 0)}, {"z", u8(0, 5)}, {"b", u8(2, 6)}});
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("overlap"), std::string::npos) << err;
  EXPECT_NE(err.find("'a'"), std::string::npos) << err;
  EXPECT_NE(err.find("'b'"), std::string::npos) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
  EXPECT_EQ(parse({{"a", u8(10, 0)}, {"z", u8(0, 5)}, {"b", u8(6, 10)}}), 3u);  // adjacent, and an empty one inside
  fs::remove(path);
}

TEST_F(Checkpoint, LoadedWeightsRoundTrip) {
  // Weights written as bf16 come back bit-exact in a bf16 model.
  auto m = Model::load(dir_.string(), LoadOptions{DType::BF16});
  std::vector<float> want(size_t(cfg_.hidden_size) * 2);
  random_source(3)->read("model.embed_tokens.weight", {2, cfg_.hidden_size}, DType::F32, want.data(), cfg_.hidden_size);
  const uint16_t* got = static_cast<const uint16_t*>(m->embed().data);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], f32_to_bf16(want[i])) << i;
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// The benchmark shapes have the sizes of the published models (Qwen3 model cards: parameters in
// all and without the embedding).
TEST(ShapeConfig, QwenShapesHaveThePublishedSizes) {
  struct Want {
    const char* name;
    double total_b, non_embedding_b;
  };
  for (const Want& w : {Want{"qwen3-0.6b", 0.6, 0.44}, Want{"qwen3-1.7b", 1.7, 1.4}, Want{"qwen3-4b", 4.0, 3.6},
                        Want{"qwen3-8b", 8.2, 6.95}}) {
    const ModelConfig c = shape_config(w.name);
    const double total = double(c.num_parameters()) / 1e9;
    const double embedding = double(c.vocab_size) * c.hidden_size * (c.tie_word_embeddings ? 1 : 2) / 1e9;
    EXPECT_NEAR(total, w.total_b, 0.05 * w.total_b) << w.name;
    EXPECT_NEAR(total - embedding, w.non_embedding_b, 0.02 * w.non_embedding_b) << w.name;
  }
  EXPECT_FALSE(shape_config("qwen3-8b").tie_word_embeddings);
  EXPECT_TRUE(shape_config("qwen3-4b").tie_word_embeddings);
}

}  // namespace
}  // namespace dspark
