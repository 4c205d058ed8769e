// The exporter (bounded, never blocking, retrying an unreachable store) and the Redis store's
// failure modes: out of memory (StoreFull) and a server restart (AOF keeps committed samples;
// the store reconnects by itself).
#include <algorithm>

#include "connector/exporter.h"
#include "connector/hidden_states_store.h"
#include "connector_fixtures.h"

namespace dspark::connector_test {
namespace {

using connector::Exporter;
using connector::ExporterOptions;
using connector::HiddenStatesStore;
using connector::open_store;
using connector::StoreError;
using connector::StoreFull;
using std::chrono::milliseconds;

#define REQUIRE_REDIS() \
  if (!redis_available()) GTEST_SKIP() << kRedisServer << " is absent (Debian package redis-server)"

std::function<std::unique_ptr<HiddenStatesStore>()> opener(
    const std::string& url, milliseconds timeout = milliseconds(2000)) {
  return [url, timeout] { return open_store(url, timeout); };
}

TEST(Exporter, WritesSamplesAndErrorManifestsAndDrainsOnClose) {
  TempDir tmp;
  const std::string url = "file:" + tmp.sub("store");
  std::vector<HiddenSample> want;
  for (int i = 0; i < 20; ++i)
    want.push_back(make_sample("e-" + std::to_string(i), 5 + i, 2, 16, "bfloat16", i));
  int64_t bytes = 0;
  {
    ExporterOptions opt;
    opt.max_pending = 64;
    opt.threads = 3;
    Exporter ex(opener(url), opt);
    for (const auto& s : want) {
      EXPECT_TRUE(ex.submit(s));
      bytes += int64_t(s.hidden_bytes.size() + 8 * s.token_ids.size());
    }
    EXPECT_TRUE(ex.submit_error("e-err", "extraction failed"));
    ex.close(milliseconds(20000));
    const auto c = ex.counts();
    EXPECT_EQ(c.written, 20);
    EXPECT_EQ(c.errors_written, 1);
    EXPECT_EQ(c.pending, 0);
    EXPECT_EQ(c.failed + c.dropped_full + c.dropped_store_full, 0);
    EXPECT_EQ(c.bytes_written, bytes);
    EXPECT_FALSE(ex.submit(want[0]));  // closed
    ex.close();                        // twice: fine
  }
  auto store = open_store(url);
  for (const auto& s : want) expect_same(store->get_sample(s.handle), s);
  EXPECT_THROW(store->get_sample("e-err"), connector::SampleUnusable);
  // ~Exporter drains too.
  {
    Exporter ex(opener(url), ExporterOptions{});
    EXPECT_TRUE(ex.submit(make_sample("d-1", 3, 1, 8, "float32", 1)));
  }
  EXPECT_TRUE(store->get_manifest("d-1").has_value());
}

// Past the pending bound (count or bytes) a sample is dropped at once, counted; submit never
// waits on the store. The store here is a Redis URL that nothing listens on.
TEST(Exporter, BoundDropsTheExcessWithoutBlocking) {
  ExporterOptions opt;
  opt.max_pending = 2;
  opt.threads = 1;
  opt.retry_for = milliseconds(1000);
  std::vector<HiddenSample> samples;
  for (int i = 0; i < 50; ++i)
    samples.push_back(make_sample("b-" + std::to_string(i), 64, 2, 256, "bfloat16", i));
  Exporter ex(opener("redis://127.0.0.1:" + std::to_string(free_port()), milliseconds(300)), opt);
  int accepted = 0;
  auto slowest = std::chrono::steady_clock::duration::zero();
  for (HiddenSample& s : samples) {
    const auto t0 = std::chrono::steady_clock::now();
    accepted += ex.submit(std::move(s));
    slowest = std::max(slowest, std::chrono::steady_clock::now() - t0);
  }
  EXPECT_LT(slowest, milliseconds(200));  // a bound on blocking, not a benchmark
  EXPECT_EQ(accepted, 2);
  auto c = ex.counts();
  EXPECT_EQ(c.dropped_full, 48);
  EXPECT_EQ(c.pending, 2);
  ex.close(milliseconds(10000));
  c = ex.counts();
  EXPECT_EQ(c.failed, 2);  // retried for retry_for, then given up
  EXPECT_EQ(c.written, 0);
  EXPECT_EQ(c.pending, 0);
}

TEST(Exporter, ByteBoundCountsPendingBytes) {
  TempDir tmp;
  ExporterOptions opt;
  opt.max_pending = 100;
  opt.max_pending_bytes = 3000;
  opt.threads = 1;
  opt.retry_for = milliseconds(60000);
  Exporter ex(opener("redis://127.0.0.1:" + std::to_string(free_port()), milliseconds(200)), opt);
  const HiddenSample s = make_sample("y-1", 10, 1, 64, "bfloat16", 1);  // 1280 bytes
  EXPECT_TRUE(ex.submit(s));
  EXPECT_TRUE(ex.submit(s));
  EXPECT_FALSE(ex.submit(s));  // 3840 > 3000, though one is in progress, not queued
  EXPECT_TRUE(ex.submit_error("y-2", "failed"));  // never dropped for bytes
  EXPECT_EQ(ex.counts().dropped_full, 1);
  // close() gives up after its timeout, though retry_for is long.
  const auto t0 = std::chrono::steady_clock::now();
  ex.close(milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(5000));
  const auto c = ex.counts();
  EXPECT_EQ(c.failed, 3);
  EXPECT_EQ(c.pending, 0);
}

// maxmemory with noeviction: SET answers OOM. put_sample throws StoreFull and leaves no key of
// the sample; the exporter counts it and goes on.
TEST(RedisStore, OutOfMemoryIsStoreFullAndLeavesNoKeys) {
  REQUIRE_REDIS();
  TempDir tmp;
  RedisServer server(tmp.sub("redis"), false);
  ASSERT_TRUE(server.start()) << server.log();
  RawRedis raw(server.port());
  auto store = open_store(server.url());
  EXPECT_FALSE(store->get_manifest("x"));  // connected before memory is measured
  const int64_t used = raw.info_int("memory", "used_memory");
  ASSERT_GT(used, 0);
  raw.cmd({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  // Room for 128 KiB of hidden states but not for 512 KiB of token ids after them: the first SET
  // succeeds, the second is refused, and put_sample deletes what the first wrote.
  raw.cmd({"CONFIG", "SET", "maxmemory", std::to_string(used + 384 * 1024)});
  const HiddenSample big = make_sample("big-1", 65536, 1, 1, "bfloat16", 1);
  try {
    store->put_sample(big);
    ADD_FAILURE() << "no StoreFull";
  } catch (const StoreFull& e) {
    EXPECT_NE(std::string(e.what()).find(server.url()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("OOM"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("SET big-1:token_ids"), std::string::npos) << e.what();
  }
  EXPECT_EQ(raw.keys("big-1*"), std::vector<std::string>{});

  ExporterOptions opt;
  opt.threads = 1;
  Exporter ex(opener(server.url()), opt);
  EXPECT_TRUE(ex.submit(make_sample("big-2", 64, 4, 4096, "bfloat16", 2)));  // 2 MiB
  ASSERT_TRUE(eventually([&] { return ex.counts().pending == 0; }));
  EXPECT_EQ(ex.counts().dropped_store_full, 1);
  EXPECT_EQ(ex.counts().failed, 0);
  EXPECT_EQ(raw.keys("big-2*"), std::vector<std::string>{});
  raw.cmd({"CONFIG", "SET", "maxmemory", "0"});
  const HiddenSample small = make_sample("small-1", 4, 2, 8, "bfloat16", 3);
  EXPECT_TRUE(ex.submit(small));
  ex.close(milliseconds(10000));
  EXPECT_EQ(ex.counts().written, 1);
  expect_same(store->get_sample("small-1"), small);
}

// kill -9 and a restart on the same port with the AOF: a committed sample survives, the store
// object reconnects by itself after StoreErrors during the outage, and the exporter retries a
// sample submitted during the outage until Redis is back.
TEST(RedisStore, RestartKeepsCommittedSamplesAndReconnects) {
  REQUIRE_REDIS();
  TempDir tmp;
  RedisServer server(tmp.sub("redis"), /*aof=*/true);
  ASSERT_TRUE(server.start()) << server.log();
  const int port = server.port();
  auto store = open_store(server.url(), milliseconds(1000));
  const HiddenSample a = make_sample("rs-a", 12, 2, 32, "bfloat16", 1);
  store->put_sample(a);

  server.stop(SIGKILL);
  EXPECT_THROW(store->get_manifest("rs-a"), StoreError);
  EXPECT_THROW(store->put_sample(make_sample("rs-b", 2, 1, 4, "bfloat16", 2)), StoreError);
  EXPECT_THROW(store->get_sample("rs-a"), StoreError);
  ASSERT_TRUE(server.start(port)) << server.log();
  expect_same(store->get_sample("rs-a"), a);  // reconnected on its own; the AOF kept it

  // Reconnect after a restart also when the old connection looked alive.
  server.stop(SIGKILL);
  ASSERT_TRUE(server.start(port)) << server.log();
  EXPECT_NO_THROW({
    try {
      store->get_manifest("rs-a");
    } catch (const StoreError&) {  // the first call may see the dead connection
      store->get_manifest("rs-a");
    }
  });
  store->reconnect();
  expect_same(store->get_sample("rs-a"), a);

  ExporterOptions opt;
  opt.threads = 1;
  opt.retry_for = milliseconds(30000);
  Exporter ex(opener(server.url(), milliseconds(500)), opt);
  server.stop(SIGKILL);
  const HiddenSample c = make_sample("rs-c", 9, 2, 16, "float32", 3);
  ASSERT_TRUE(ex.submit(c));
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_EQ(ex.counts().pending, 1);
  EXPECT_EQ(ex.counts().written, 0);
  ASSERT_TRUE(server.start(port)) << server.log();
  EXPECT_TRUE(eventually([&] { return ex.counts().written == 1; }, milliseconds(20000)));
  ex.close(milliseconds(10000));
  EXPECT_EQ(ex.counts().failed, 0);
  expect_same(connector::wait_for_sample(*store, "rs-c", milliseconds(5000)), c);
  // wait_for_sample rides out an outage shorter than its timeout. (The server is restarted from
  // this thread: its child dies with the thread that started it.)
  server.stop(SIGKILL);
  HiddenSample got;
  std::string error;
  std::thread waiter([&] {
    try {
      got = connector::wait_for_sample(*store, "rs-a", milliseconds(15000));
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(milliseconds(300));
  const bool restarted = server.start(port);
  waiter.join();
  ASSERT_TRUE(restarted) << server.log();
  EXPECT_EQ(error, "");
  expect_same(got, a);
}

}  // namespace
}  // namespace dspark::connector_test
