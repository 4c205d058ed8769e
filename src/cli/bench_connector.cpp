// dspark bench connector: hidden-state samples per second through the connector's store, writer
// to reader, as a server's exporter and the online trainer move them (put tensors + manifest;
// poll the manifest, read, verify every CRC, delete). scripts/bench-connector.sh puts the figure
// next to redis-benchmark's raw SET/GET rate for the same value size.
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/bench_connector.h"
#include "connector/hidden_states_store.h"
#include "core/error.h"
#include "core/flags.h"
#include "core/timer.h"

namespace dspark {

int bench_connector(int argc, char** argv) {
  Args args;
  args.flag("store", "redis://HOST:PORT/DB or file:DIR (an empty store: samples are written there)")
      .flag("samples", "samples to move", true, "200")
      .flag("tokens", "tokens per sample (a prompt and its response)", true, "160")
      .flag("layers", "hidden-state layers per token", true, "4")
      .flag("hidden", "hidden size", true, "512")
      .flag("dtype", "bf16 or f32", true, "bf16")
      .flag("json", "print the result as JSON", false);
  if (!args.parse(argc, argv, "bench connector",
                  "Moves hidden-state samples through the connector's store, one writer "
                  "and one reader at once, and reports samples and bytes per second."))
    return 0;
  const std::string url = args.str("store");
  if (url.empty()) fail("flag --store is required");
  const int n = int(args.integer("samples", 1, 1 << 20));
  const int64_t T = args.integer("tokens", 1, 1 << 20), L = args.integer("layers", 1, 256),
                H = args.integer("hidden", 1, 1 << 16);
  const std::string dt = args.str("dtype");
  if (dt != "bf16" && dt != "f32") fail("flag --dtype must be bf16 or f32, got '", dt, "'");
  const int64_t elem = dt == "bf16" ? 2 : 4;

  connector::HiddenSample proto;
  proto.dtype = dt == "bf16" ? "bfloat16" : "float32";
  proto.hidden = int(H);
  for (int l = 0; l < L; ++l) proto.layer_ids.push_back(l + 1);
  for (int64_t t = 0; t < T; ++t) proto.token_ids.push_back(t % 1000);
  proto.hidden_bytes.resize(size_t(T * L * H * elem));
  for (size_t i = 0; i < proto.hidden_bytes.size(); ++i)
    proto.hidden_bytes[i] = char((i * 2654435761u) >> 24);
  const int64_t bytes = int64_t(proto.hidden_bytes.size()) + T * 8;
  const std::string prefix = "bench-" + std::to_string(::time(nullptr)) + "-";

  auto writer = connector::open_store(url), reader = connector::open_store(url);
  double put_s = 0, get_s = 0;
  const double t0 = now_seconds();
  std::thread w([&] {
    connector::HiddenSample s = proto;
    for (int i = 0; i < n; ++i) {
      s.handle = prefix + std::to_string(i);
      const double a = now_seconds();
      writer->put_sample(s);
      put_s += now_seconds() - a;
    }
  });
  int64_t verified = 0;
  for (int i = 0; i < n; ++i) {
    const std::string h = prefix + std::to_string(i);
    const double a = now_seconds();
    connector::HiddenSample got = connector::wait_for_sample(*reader, h, std::chrono::seconds(60),
                                                             std::chrono::milliseconds(1));
    reader->delete_sample(h);
    get_s += now_seconds() - a;
    verified += got.num_tokens() == T ? 1 : 0;
  }
  w.join();
  const double wall = now_seconds() - t0;
  if (verified != n)
    fail("bench connector: ", n - verified, " samples came back with the wrong size");
  const double sps = n / wall, mbps = double(bytes) * n / wall / 1e6;
  nlohmann::json out = {{"store", url},
                        {"samples", n},
                        {"sample_bytes", bytes},
                        {"tokens", T},
                        {"layers", L},
                        {"hidden", H},
                        {"dtype", dt},
                        {"seconds", wall},
                        {"samples_per_s", sps},
                        {"mb_per_s", mbps},
                        {"writer_busy_fraction", put_s / wall},
                        {"reader_busy_fraction", get_s / wall}};
  if (args.on("json")) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("%d samples of %lld bytes (%lld tokens x %lld layers x %lld, %s) through %s\n", n,
                (long long)bytes, (long long)T, (long long)L, (long long)H, dt.c_str(),
                url.c_str());
    std::printf("  %.1f samples/s, %.1f MB/s (writer busy %.0f%%, reader %.0f%%)\n", sps, mbps,
                100 * put_s / wall, 100 * get_s / wall);
  }
  return 0;
}

}  // namespace dspark
