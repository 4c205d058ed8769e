// The hidden-states store, both backends (a real redis-server; a directory): round trips, the
// manifest as commit marker under a concurrent reader, corruption and error manifests,
// handles(prefix), deletion, URLs and sanitize_handle.
#include <atomic>
#include <set>

#include "connector/hidden_states_store.h"
#include "connector_fixtures.h"
#include "core/crc32.h"

namespace dspark::connector_test {
namespace {

using connector::HiddenStatesStore;
using connector::open_store;
using connector::SampleUnusable;
using connector::StoreError;
using connector::wait_for_sample;
using json = nlohmann::json;
using Why = SampleUnusable::Why;
using std::chrono::milliseconds;

// The SampleUnusable that f throws (why and message), or fails the test.
template <class F>
std::pair<Why, std::string> unusable_of(F&& f) {
  try {
    f();
  } catch (const SampleUnusable& e) {
    return {e.why, e.what()};
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected SampleUnusable, got: " << e.what();
    return {Why::Timeout, ""};
  }
  ADD_FAILURE() << "expected SampleUnusable, nothing was thrown";
  return {Why::Timeout, ""};
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (redis()) {
      if (!redis_available())
        GTEST_SKIP() << kRedisServer << " is absent (Debian package redis-server): the Redis "
                     << "backend is not tested";
      server_ = std::make_unique<RedisServer>(tmp_.sub("redis"), false);
      ASSERT_TRUE(server_->start()) << server_->log();
      url_ = server_->url();
    } else {
      url_ = "file:" + tmp_.sub("store");
    }
    store_ = open_store(url_);
  }
  bool redis() const { return GetParam() == "redis"; }
  std::string dir() const { return url_.substr(5); }
  std::unique_ptr<RawRedis> raw() { return std::make_unique<RawRedis>(server_->port()); }

  // Behind the store's back: replaces the manifest's bytes.
  void write_meta(const std::string& h, const std::string& text) {
    if (redis()) {
      raw()->set(h + ":meta", text);
    } else {
      std::ofstream(dir() + "/" + h + ".meta.json", std::ios::binary) << text;
    }
  }
  json read_meta(const std::string& h) {
    auto m = store_->get_manifest(h);
    EXPECT_TRUE(m.has_value()) << h;
    return m ? *m : json();
  }
  // Flips one byte of the hidden_states tensor's data.
  void corrupt_hidden(const std::string& h) {
    if (redis()) {
      auto r = raw();
      const std::string key = h + ":hidden_states";
      const std::string byte = *r->get(key);
      r->cmd({"SETRANGE", key, "3", std::string(1, char(byte[3] ^ 0x5a))});
      return;
    }
    const std::string path = dir() + "/" + h + ".safetensors";
    std::string bytes;
    {
      std::ifstream in(path, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      bytes = ss.str();
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; --i) hl = (hl << 8) | uint8_t(bytes[i]);
    const json header = json::parse(bytes.substr(8, hl));
    const size_t at = 8 + hl + header["hidden_states"]["data_offsets"][0].get<size_t>() + 3;
    bytes[at] = char(bytes[at] ^ 0x5a);
    std::ofstream(path, std::ios::binary) << bytes;
  }
  void remove_hidden(const std::string& h) {
    if (redis())
      raw()->cmd({"DEL", h + ":hidden_states"});
    else
      fs::remove(dir() + "/" + h + ".safetensors");
  }
  // The keys (files) of handle h that exist.
  std::vector<std::string> leftovers(const std::string& h) {
    if (redis()) return raw()->keys(h + ":*");
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir()))
      if (e.path().filename().string().starts_with(h + ".")) out.push_back(e.path().string());
    return out;
  }
  // A tensor written without its manifest: a put under way, or one that died.
  void write_partial(const std::string& h) {
    if (redis()) {
      raw()->set(h + ":hidden_states", "xyz");
    } else {
      std::ofstream(dir() + "/" + h + ".safetensors") << "partial";
      std::ofstream(dir() + "/" + h + ".meta.json.tmp") << "{}";
    }
  }

  TempDir tmp_;
  std::unique_ptr<RedisServer> server_;
  std::string url_;
  std::unique_ptr<HiddenStatesStore> store_;
};

TEST_P(StoreTest, RoundTripBf16AndF32) {
  for (const std::string dtype : {"bfloat16", "float32"}) {
    SCOPED_TRACE(dtype);
    std::vector<float> values;
    const HiddenSample s = make_sample("rt-" + dtype, 17, 3, 40, dtype, 7, &values);
    store_->put_sample(s);
    const HiddenSample got = store_->get_sample(s.handle);
    expect_same(got, s);
    std::vector<float> row(40);
    for (int t = 0; t < 17; ++t)
      for (int l = 0; l < 3; ++l) {
        got.row_f32(t, l, row.data());
        for (int i = 0; i < 40; ++i)
          ASSERT_EQ(row[i], values[(size_t(t) * 3 + l) * 40 + i]) << t << " " << l << " " << i;
      }
    EXPECT_THROW(got.row_f32(17, 0, row.data()), Error);
    EXPECT_THROW(got.row_f32(0, 3, row.data()), Error);

    const json m = read_meta(s.handle);
    EXPECT_EQ(m["version"], 1);
    EXPECT_EQ(m["status"], "ok");
    EXPECT_EQ(m["layer_ids"], json({1, 3, 5}));
    EXPECT_EQ(m["info"], s.info);
    EXPECT_EQ(m["tensors"]["hidden_states"]["shape"], json({17, 3, 40}));
    EXPECT_EQ(m["tensors"]["hidden_states"]["dtype"], dtype);
    EXPECT_EQ(m["tensors"]["hidden_states"]["crc32"],
              crc32_hex(crc32_bytes(s.hidden_bytes.data(), s.hidden_bytes.size())));
    EXPECT_EQ(m["tensors"]["token_ids"]["shape"], json({17}));
    EXPECT_EQ(m["tensors"]["token_ids"]["dtype"], "int64");
  }
  // A sample put again under its handle replaces the old one whole.
  const HiddenSample again = make_sample("rt-float32", 5, 2, 8, "bfloat16", 99);
  store_->put_sample(again);
  expect_same(store_->get_sample(again.handle), again);
  // wait_for_sample of a committed sample returns it at once.
  expect_same(wait_for_sample(*store_, again.handle, milliseconds(1000)), again);
}

// The manifest is the commit marker: a reader polling while a writer writes (each with its own
// store, as the exporter's threads and the trainer have) never gets a partial sample.
TEST_P(StoreTest, ReaderNeverSeesAPartialSample) {
  constexpr int kSamples = 150;
  std::vector<HiddenSample> want;
  for (int i = 0; i < kSamples; ++i)
    want.push_back(make_sample("w-" + std::to_string(i), 1 + i % 61, 3, 256,
                               i % 2 ? "float32" : "bfloat16", uint32_t(i)));
  std::atomic<bool> done{false};
  std::thread writer([&] {
    try {
      auto st = open_store(url_);
      for (const auto& s : want) st->put_sample(s);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
    done = true;
  });
  // A sweeper: whatever handles() lists must read back whole.
  std::atomic<int> swept{0}, sweep_errors{0};
  std::string sweep_error;
  std::thread sweeper([&] {
    auto st = open_store(url_);
    while (!done) {
      for (const std::string& h : st->handles("w-")) {
        try {
          const HiddenSample got = st->get_sample(h);
          if (got.hidden_bytes != want[std::stoi(h.substr(2))].hidden_bytes) ++sweep_errors;
          ++swept;
        } catch (const std::exception& e) {
          if (sweep_errors++ == 0) sweep_error = e.what();
        }
      }
    }
  });
  auto reader = open_store(url_);
  int read_errors = 0;
  for (const auto& s : want) {
    try {
      expect_same(wait_for_sample(*reader, s.handle, milliseconds(30000), milliseconds(1)), s);
    } catch (const std::exception& e) {
      if (read_errors++ < 3) ADD_FAILURE() << e.what();
    }
  }
  writer.join();
  sweeper.join();
  EXPECT_EQ(read_errors, 0);
  EXPECT_EQ(sweep_errors, 0) << sweep_error;
  EXPECT_GT(swept, 0);
  EXPECT_EQ(store_->handles("w-").size(), size_t(kSamples));
}

TEST_P(StoreTest, CorruptTensorIsACrcError) {
  const HiddenSample s = make_sample("crc-1", 9, 2, 16, "bfloat16", 3);
  store_->put_sample(s);
  corrupt_hidden(s.handle);
  auto [why, msg] = unusable_of([&] { store_->get_sample(s.handle); });
  EXPECT_EQ(why, Why::Crc) << msg;
  EXPECT_NE(msg.find("\"crc-1\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("hidden_states CRC32"), std::string::npos) << msg;
  EXPECT_STREQ(connector::why_name(why), "crc");
  // wait_for_sample does not wait on it: the sample is committed and unusable.
  EXPECT_EQ(unusable_of([&] { wait_for_sample(*store_, s.handle, milliseconds(5000)); }).first,
            Why::Crc);
}

TEST_P(StoreTest, ErrorManifestFailsFast) {
  const std::string long_message = "extraction failed: " + std::string(5000, 'x') + "\xc3\xa9";
  store_->put_error("err-1", long_message);
  const json m = read_meta("err-1");
  EXPECT_EQ(m["status"], "error");
  EXPECT_EQ(m["version"], 1);
  EXPECT_FALSE(m.contains("tensors"));
  EXPECT_EQ(m["error"].get<std::string>(), long_message.substr(0, 4096));
  const auto t0 = std::chrono::steady_clock::now();
  auto [why, msg] = unusable_of([&] { wait_for_sample(*store_, "err-1", milliseconds(20000)); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(why, Why::ErrorManifest) << msg;
  EXPECT_NE(msg.find("\"err-1\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("extraction failed: xxx"), std::string::npos) << msg;
  // An error manifest replaces a sample's tensors too.
  store_->put_sample(make_sample("err-2", 3, 1, 4, "float32", 1));
  store_->put_error("err-2", "oops");
  EXPECT_EQ(unusable_of([&] { store_->get_sample("err-2"); }).first, Why::ErrorManifest);
  for (const std::string& f : leftovers("err-2"))
    EXPECT_TRUE(f.ends_with("meta") || f.ends_with(".meta.json")) << f;
}

TEST_P(StoreTest, AbsentSampleTimesOut) {
  const auto t0 = std::chrono::steady_clock::now();
  auto [why, msg] = unusable_of(
      [&] { wait_for_sample(*store_, "absent-1", milliseconds(300), milliseconds(20)); });
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(why, Why::Timeout) << msg;
  EXPECT_NE(msg.find("\"absent-1\""), std::string::npos) << msg;
  EXPECT_GE(waited, milliseconds(300));
  EXPECT_LT(waited, milliseconds(5000));
  EXPECT_FALSE(store_->get_manifest("absent-1").has_value());
  EXPECT_EQ(unusable_of([&] { store_->get_sample("absent-1"); }).first, Why::Missing);
}

TEST_P(StoreTest, BadManifestsAndMissingTensors) {
  const HiddenSample s = make_sample("bad-1", 4, 2, 8, "bfloat16", 5);
  store_->put_sample(s);
  const json good = read_meta("bad-1");
  auto expect = [&](Why want, const std::string& what) {
    auto [why, msg] = unusable_of([&] { store_->get_sample("bad-1"); });
    EXPECT_EQ(why, want) << what << ": " << msg;
    EXPECT_NE(msg.find("\"bad-1\""), std::string::npos) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  };
  write_meta("bad-1", "{not json");
  expect(Why::BadManifest, "not valid JSON");
  EXPECT_THROW(store_->get_manifest("bad-1"), SampleUnusable);
  json m = good;
  m["version"] = 2;
  write_meta("bad-1", m.dump());
  expect(Why::BadManifest, "version 2");
  m = good;
  m["status"] = "maybe";
  write_meta("bad-1", m.dump());
  expect(Why::BadManifest, "status \"maybe\"");
  m = good;
  m["tensors"].erase("token_ids");
  write_meta("bad-1", m.dump());
  expect(Why::BadManifest, "token_ids: missing");
  m = good;
  m["tensors"]["hidden_states"]["crc32"] = "XYZ";
  write_meta("bad-1", m.dump());
  expect(Why::BadManifest, "crc32");
  m = good;
  m["layer_ids"] = {1};
  write_meta("bad-1", m.dump());
  expect(Why::Shape, "1 layer ids");
  m = good;
  m["tensors"]["token_ids"]["shape"] = {5};
  write_meta("bad-1", m.dump());
  expect(Why::Shape, "token_ids shape [5]");
  m = good;  // consistent shapes that the stored bytes do not have
  m["tensors"]["hidden_states"]["shape"] = {4, 2, 4};
  write_meta("bad-1", m.dump());
  if (redis())
    expect(Why::Shape, "hidden_states has 128 bytes");
  else
    expect(Why::Shape, "the manifest says");
  write_meta("bad-1", good.dump());
  expect_same(store_->get_sample("bad-1"), s);
  remove_hidden("bad-1");
  expect(Why::Missing, "absent");
}

TEST_P(StoreTest, HandlesListsOnlyCommittedSamplesWithThePrefix) {
  store_->put_sample(make_sample("pa-1", 2, 1, 4, "bfloat16", 1));
  store_->put_sample(make_sample("pa-2", 2, 1, 4, "float32", 2));
  store_->put_sample(make_sample("pb-1", 2, 1, 4, "bfloat16", 3));
  store_->put_error("pa-err", "failed");
  write_partial("pa-3");
  using V = std::vector<std::string>;
  EXPECT_EQ(store_->handles("pa-"), (V{"pa-1", "pa-2", "pa-err"}));
  EXPECT_EQ(store_->handles("pa-1"), (V{"pa-1"}));
  EXPECT_EQ(store_->handles(""), (V{"pa-1", "pa-2", "pa-err", "pb-1"}));
  EXPECT_EQ(store_->handles("p*"), V{});  // a prefix, not a pattern
  EXPECT_EQ(store_->handles("p?-1"), V{});
  EXPECT_EQ(store_->handles("[p]a"), V{});
  EXPECT_EQ(store_->handles("zz"), V{});

  store_->delete_sample("pa-1");
  EXPECT_EQ(leftovers("pa-1"), V{});
  EXPECT_FALSE(store_->get_manifest("pa-1").has_value());
  EXPECT_EQ(store_->handles("pa-"), (V{"pa-2", "pa-err"}));
  store_->delete_sample("pa-err");
  store_->delete_sample("pa-1");  // absent: fine
  store_->delete_sample("pa-3");  // a partial sample goes too
  EXPECT_EQ(leftovers("pa-3"), V{});
  EXPECT_EQ(store_->handles("pa-"), (V{"pa-2"}));
}

TEST_P(StoreTest, BadSamplesAndHandlesAreRefused) {
  HiddenSample s = make_sample("ok-1", 3, 2, 4, "bfloat16", 1);
  s.hidden_bytes.pop_back();
  std::string e = error_of([&] { store_->put_sample(s); });
  EXPECT_NE(e.find("\"ok-1\""), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_bytes has 47 bytes"), std::string::npos) << e;
  s = make_sample("ok-1", 3, 2, 4, "float16", 1);
  EXPECT_NE(error_of([&] { store_->put_sample(s); }).find("dtype \"float16\""), std::string::npos);
  s = make_sample("ok-1", 3, 2, 4, "bfloat16", 1);
  s.info = json::array();
  EXPECT_NE(error_of([&] { store_->put_sample(s); }).find("info"), std::string::npos);
  EXPECT_EQ(leftovers("ok-1"), std::vector<std::string>{});
  for (const std::string h : {"a/b", "", "../x", "a:b", "a*"}) {
    s = make_sample(h, 1, 1, 1, "bfloat16", 1);
    e = error_of([&] { store_->put_sample(s); });
    EXPECT_NE(e.find("handle"), std::string::npos) << h << ": " << e;
    EXPECT_THROW(store_->get_manifest(h), Error) << h;
    EXPECT_THROW(store_->put_error(h, "x"), Error) << h;
  }
  // An empty sample (no tokens) is a sample.
  s = make_sample("empty-1", 0, 2, 4, "float32", 1);
  store_->put_sample(s);
  expect_same(store_->get_sample("empty-1"), s);
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values("redis", "dir"),
                         [](const auto& info) { return info.param; });

// Redis only: the values are the raw little-endian bytes, readable with the manifest alone.
TEST(RedisStore, ValuesAreRawLittleEndianBytesInTheSelectedDb) {
  if (!redis_available())
    GTEST_SKIP() << kRedisServer << " is absent (Debian package redis-server)";
  TempDir tmp;
  RedisServer server(tmp.sub("redis"), false);
  ASSERT_TRUE(server.start()) << server.log();
  auto store = open_store(server.url(3));
  const HiddenSample s = make_sample("raw-1", 6, 2, 8, "float32", 4);
  store->put_sample(s);
  RawRedis db3(server.port(), 3), db0(server.port(), 0);
  std::string le;
  for (int64_t v : s.token_ids)
    for (int i = 0; i < 8; ++i) le += char(uint8_t(uint64_t(v) >> (8 * i)));
  EXPECT_EQ(db3.get("raw-1:token_ids"), le);
  EXPECT_EQ(db3.get("raw-1:hidden_states"), s.hidden_bytes);
  const json m = json::parse(*db3.get("raw-1:meta"));
  EXPECT_EQ(m["tensors"]["token_ids"]["crc32"], crc32_hex(crc32_bytes(le.data(), le.size())));
  EXPECT_EQ(db0.keys("*"), std::vector<std::string>{});
  // A token_ids byte changed directly in Redis: the CRC says so.
  db3.cmd({"SETRANGE", "raw-1:token_ids", "0", "\x7f"});
  try {
    store->get_sample("raw-1");
    ADD_FAILURE() << "no error";
  } catch (const SampleUnusable& e) {
    EXPECT_EQ(e.why, Why::Crc);
    EXPECT_NE(std::string(e.what()).find("token_ids CRC32"), std::string::npos) << e.what();
  }
  // A database the server does not have: StoreError naming the URL.
  auto bad = open_store(server.url(999));
  const std::string e = error_of([&] { bad->get_manifest("x"); });
  EXPECT_NE(e.find(server.url(999)), std::string::npos) << e;
  EXPECT_NE(e.find("SELECT 999"), std::string::npos) << e;
}

TEST(RedisStore, ConnectsLazilyAndNamesTheUrl) {
  const int port = free_port();
  const std::string url = "redis://127.0.0.1:" + std::to_string(port);
  auto store = open_store(url, milliseconds(500));  // nothing listens: no error yet
  for (int i = 0; i < 2; ++i) {
    try {
      store->get_manifest("x");
      ADD_FAILURE() << "no StoreError";
    } catch (const StoreError& e) {
      EXPECT_NE(std::string(e.what()).find(url), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(store->put_sample(make_sample("x", 1, 1, 1, "bfloat16", 1)), StoreError);
  EXPECT_THROW(store->handles(""), StoreError);
  EXPECT_THROW(wait_for_sample(*store, "x", milliseconds(100)), SampleUnusable);
}

TEST(OpenStore, BadUrlsNameTheUrl) {
  for (const std::string url :
       {"redis://", "redis://host:notaport", "ftp://x", "file:", "redis://host", "redis://:6379",
        "redis://h:0", "redis://h:70000", "redis://h:1/x", "redis://h:1/", "redis://[::1", "",
        "redis:/h:1"}) {
    const std::string e = error_of([&] { open_store(url); });
    EXPECT_NE(e.find("\"" + url + "\""), std::string::npos) << url << ": " << e;
  }
  EXPECT_NE(error_of([&] { open_store("file:/tmp/x", milliseconds(0)); }).find("timeout"),
            std::string::npos);
  TempDir tmp;
  const std::string file = tmp.sub("plain");
  std::ofstream(file) << "x";
  EXPECT_NE(error_of([&] { open_store("file:" + file); }).find("file:" + file), std::string::npos);
  // A directory store creates its directory.
  open_store("file:" + tmp.sub("a/b"));
  EXPECT_TRUE(fs::is_directory(tmp.sub("a/b")));
  EXPECT_EQ(open_store("redis://localhost:6399/2")->url(), "redis://localhost:6399/2");
}

TEST(SanitizeHandle, IsVllmsRule) {
  EXPECT_EQ(connector::sanitize_handle("abc-1_x"), "abc-1_x");
  EXPECT_EQ(connector::sanitize_handle("a/b c"), "a_b_c");
  EXPECT_EQ(connector::sanitize_handle("9x"), "k9x");
  EXPECT_EQ(connector::sanitize_handle("cmpl-3f2a.0:1"), "cmpl-3f2a_0_1");
  EXPECT_EQ(connector::sanitize_handle("\xc3\xa9t\xc3\xa9"), "_t_");  // one '_' per character
  EXPECT_EQ(connector::sanitize_handle("_9"), "_9");
  EXPECT_EQ(connector::sanitize_handle(""), "");
}

}  // namespace
}  // namespace dspark::connector_test
