// What both backends share: URLs, the manifest (built, parsed, verified), handles, waiting.
#include "connector/hidden_states_store.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

#include "connector/store_common.h"
#include "core/crc32.h"
#include "core/dtype.h"

namespace dspark::connector {

static_assert(std::endian::native == std::endian::little,
              "the store's tensors are little-endian bytes of host values");

using json = nlohmann::json;

namespace detail {

namespace {

std::string where(const std::string& handle, const std::string& url) {
  return "hidden-states sample \"" + handle + "\" (" + url + ")";
}

[[noreturn]] void unusable(SampleUnusable::Why why, const std::string& handle,
                           const std::string& url, const std::string& what) {
  throw SampleUnusable(why, where(handle, url) + ": " + what);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorSpec tensor_spec(const json& tensors, const char* name, const std::string& handle,
                       const std::string& url) {
  auto bad = [&](const std::string& what) {
    unusable(SampleUnusable::Why::BadManifest, handle, url,
             std::string("manifest tensor ") + name + ": " + what);
  };
  auto it = tensors.find(name);
  if (it == tensors.end()) bad("missing");
  const json& t = *it;
  if (!t.is_object()) bad("not an object");
  TensorSpec spec;
  auto sh = t.find("shape");
  if (sh == t.end() || !sh->is_array()) bad("missing or non-array \"shape\"");
  for (const json& d : *sh) {
    if (!d.is_number_unsigned()) bad("shape entries must be non-negative integers");
    spec.shape.push_back(int64_t(std::min<uint64_t>(d.get<uint64_t>(), uint64_t(1) << 62)));
  }
  auto dt = t.find("dtype");
  if (dt == t.end() || !dt->is_string()) bad("missing or non-string \"dtype\"");
  spec.dtype = dt->get<std::string>();
  const size_t esize = manifest_dtype_size(spec.dtype);
  if (esize == 0) bad("unknown dtype \"" + spec.dtype + "\"");
  auto crc = t.find("crc32");
  if (crc == t.end() || !crc->is_string()) bad("missing or non-string \"crc32\"");
  try {
    spec.crc = parse_crc32_hex(crc->get<std::string>(), "crc32");
  } catch (const Error& e) {
    bad(e.what());
  }
  // Sizes beyond 2^48 elements cannot be a sample; refusing them keeps the product exact.
  uint64_t numel = 1;
  for (int64_t d : spec.shape) {
    if (d > (int64_t(1) << 40) || (d && numel > (uint64_t(1) << 48) / uint64_t(d)))
      unusable(SampleUnusable::Why::Shape, handle, url,
               std::string(name) + ": shape " + shape_str(spec.shape) + " is too large");
    numel *= uint64_t(d);
  }
  spec.nbytes = size_t(numel) * esize;
  return spec;
}

// The first `max` bytes of s, not splitting a UTF-8 sequence.
std::string utf8_prefix(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (uint8_t(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

bool handle_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

}  // namespace

bool valid_handle(const std::string& handle) {
  return !handle.empty() && std::all_of(handle.begin(), handle.end(), handle_char);
}

void check_handle(const std::string& handle) {
  if (handle.empty()) fail("hidden-states sample handle is empty");
  if (!valid_handle(handle))
    fail("hidden-states sample handle \"", handle,
         "\" has a character outside [A-Za-z0-9_-] (see sanitize_handle)");
}

size_t manifest_dtype_size(const std::string& dtype) {
  if (dtype == "bfloat16") return 2;
  if (dtype == "float32") return 4;
  if (dtype == "int64") return 8;
  return 0;
}

void check_sample(const HiddenSample& s) {
  check_handle(s.handle);
  const std::string w = "hidden-states sample \"" + s.handle + "\"";
  if (s.dtype != "bfloat16" && s.dtype != "float32")
    fail(w, ": dtype \"", s.dtype, "\", expected \"bfloat16\" or \"float32\"");
  if (s.hidden < 1) fail(w, ": hidden must be at least 1, got ", s.hidden);
  if (s.layer_ids.empty()) fail(w, ": no layer ids");
  const uint64_t want = uint64_t(s.num_tokens()) * s.layer_ids.size() * uint64_t(s.hidden) *
                        manifest_dtype_size(s.dtype);
  if (s.hidden_bytes.size() != want)
    fail(w, ": hidden_bytes has ", s.hidden_bytes.size(), " bytes, [", s.num_tokens(), ", ",
         s.layer_ids.size(), ", ", s.hidden, "] ", s.dtype, " needs ", want);
  if (!s.info.is_object()) fail(w, ": info must be a JSON object");
}

std::string token_bytes(const std::vector<int64_t>& ids) {
  std::string out(ids.size() * sizeof(int64_t), '\0');
  if (!ids.empty()) std::memcpy(out.data(), ids.data(), out.size());
  return out;
}

json ok_manifest(const HiddenSample& s, const std::string& tokens) {
  const int64_t n = s.num_tokens();
  json hs = {{"shape", {n, int64_t(s.layer_ids.size()), int64_t(s.hidden)}},
             {"dtype", s.dtype},
             {"crc32", crc32_hex(crc32_bytes(s.hidden_bytes.data(), s.hidden_bytes.size()))}};
  json tok = {{"shape", {n}},
              {"dtype", "int64"},
              {"crc32", crc32_hex(crc32_bytes(tokens.data(), tokens.size()))}};
  json m = json::object();
  m["version"] = kManifestVersion;
  m["status"] = "ok";
  m["tensors"] = {{kHiddenStates, std::move(hs)}, {kTokenIds, std::move(tok)}};
  m["layer_ids"] = s.layer_ids;
  m["info"] = s.info;
  return m;
}

json error_manifest(const std::string& message) {
  json m = json::object();
  m["version"] = kManifestVersion;
  m["status"] = "error";
  m["error"] = utf8_prefix(message, kMaxErrorBytes);
  return m;
}

std::string dump_manifest(const json& m) {
  return m.dump(-1, ' ', false, json::error_handler_t::replace);
}

json parse_manifest_text(const std::string& text, const std::string& handle,
                         const std::string& url) {
  json m = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded())
    unusable(SampleUnusable::Why::BadManifest, handle, url, "the manifest is not valid JSON");
  return m;
}

CheckedManifest check_manifest(const json& m, const std::string& handle, const std::string& url) {
  using Why = SampleUnusable::Why;
  if (!m.is_object()) unusable(Why::BadManifest, handle, url, "the manifest is not a JSON object");
  auto ver = m.find("version");
  if (ver == m.end() || !ver->is_number_integer() || ver->get<int64_t>() != kManifestVersion)
    unusable(Why::BadManifest, handle, url,
             "manifest version " + (ver == m.end() ? std::string("missing") : ver->dump()) +
                 ", expected " + std::to_string(kManifestVersion));
  auto st = m.find("status");
  if (st == m.end() || !st->is_string())
    unusable(Why::BadManifest, handle, url, "manifest without a string \"status\"");
  if (*st == "error") {
    auto e = m.find("error");
    const std::string msg = e != m.end() && e->is_string() ? e->get<std::string>() : "(no message)";
    unusable(Why::ErrorManifest, handle, url, "extraction failed on the producer: " + msg);
  }
  if (*st != "ok")
    unusable(Why::BadManifest, handle, url,
             "manifest status \"" + st->get<std::string>() + "\", expected \"ok\" or \"error\"");
  auto tensors = m.find("tensors");
  if (tensors == m.end() || !tensors->is_object())
    unusable(Why::BadManifest, handle, url, "manifest without a \"tensors\" object");
  CheckedManifest c;
  c.hidden = tensor_spec(*tensors, kHiddenStates, handle, url);
  c.tokens = tensor_spec(*tensors, kTokenIds, handle, url);
  if (c.hidden.dtype != "bfloat16" && c.hidden.dtype != "float32")
    unusable(Why::BadManifest, handle, url,
             "hidden_states dtype \"" + c.hidden.dtype + "\", expected bfloat16 or float32");
  if (c.tokens.dtype != "int64")
    unusable(Why::BadManifest, handle, url,
             "token_ids dtype \"" + c.tokens.dtype + "\", expected int64");
  auto lids = m.find("layer_ids");
  if (lids == m.end() || !lids->is_array())
    unusable(Why::BadManifest, handle, url, "manifest without a \"layer_ids\" array");
  for (const json& l : *lids) {
    if (!l.is_number_integer() || l.get<int64_t>() < std::numeric_limits<int>::min() ||
        l.get<int64_t>() > std::numeric_limits<int>::max())
      unusable(Why::BadManifest, handle, url, "layer_ids entries must be integers");
    c.layer_ids.push_back(int(l.get<int64_t>()));
  }
  if (auto info = m.find("info"); info != m.end()) {
    if (!info->is_object())
      unusable(Why::BadManifest, handle, url, "manifest info is not an object");
    c.info = *info;
  }
  const auto& hs = c.hidden.shape;
  const auto& tk = c.tokens.shape;
  if (hs.size() != 3 || tk.size() != 1 || hs[0] != tk[0] || hs[1] != int64_t(c.layer_ids.size()) ||
      hs[2] < 1 || hs[2] > std::numeric_limits<int>::max())
    unusable(Why::Shape, handle, url,
             "hidden_states shape " + shape_str(hs) + " does not fit token_ids shape " +
                 shape_str(tk) + " and " + std::to_string(c.layer_ids.size()) +
                 " layer ids (expected [num_tokens, layers, hidden] and [num_tokens])");
  return c;
}

HiddenSample make_sample(const std::string& handle, const std::string& url,
                         const CheckedManifest& m, std::string hidden_bytes,
                         const std::string& tokens) {
  using Why = SampleUnusable::Why;
  auto check = [&](const char* name, const TensorSpec& spec, const std::string& bytes) {
    if (bytes.size() != spec.nbytes)
      unusable(Why::Shape, handle, url,
               std::string(name) + " has " + std::to_string(bytes.size()) + " bytes, shape " +
                   shape_str(spec.shape) + " " + spec.dtype + " needs " +
                   std::to_string(spec.nbytes));
    const uint32_t crc = crc32_bytes(bytes.data(), bytes.size());
    if (crc != spec.crc)
      unusable(Why::Crc, handle, url,
               std::string(name) + " CRC32 " + crc32_hex(crc) + " does not match the manifest's " +
                   crc32_hex(spec.crc));
  };
  check(kHiddenStates, m.hidden, hidden_bytes);
  check(kTokenIds, m.tokens, tokens);
  HiddenSample s;
  s.handle = handle;
  s.token_ids.resize(tokens.size() / sizeof(int64_t));
  if (!tokens.empty()) std::memcpy(s.token_ids.data(), tokens.data(), tokens.size());
  s.layer_ids = m.layer_ids;
  s.hidden = int(m.hidden.shape[2]);
  s.dtype = m.hidden.dtype;
  s.hidden_bytes = std::move(hidden_bytes);
  s.info = m.info;
  return s;
}

}  // namespace detail

void HiddenSample::row_f32(int64_t t, int layer, float* out) const {
  const size_t esize = detail::manifest_dtype_size(dtype);
  const int64_t layers = int64_t(layer_ids.size());
  if (t < 0 || t >= num_tokens() || layer < 0 || layer >= layers)
    fail("hidden-states sample \"", handle, "\": row (token ", t, ", slot ", layer, ") outside [",
         num_tokens(), ", ", layers, "]");
  if ((dtype != "bfloat16" && dtype != "float32") || hidden < 1 ||
      hidden_bytes.size() != size_t(num_tokens() * layers * hidden) * esize)
    fail("hidden-states sample \"", handle, "\": hidden_bytes do not hold [", num_tokens(), ", ",
         layers, ", ", hidden, "] ", dtype);
  const char* row = hidden_bytes.data() + size_t((t * layers + layer) * hidden) * esize;
  convert_to_f32(dtype == "bfloat16" ? DType::BF16 : DType::F32, row, out, size_t(hidden));
}

const char* why_name(SampleUnusable::Why why) {
  using W = SampleUnusable::Why;
  static const std::map<W, const char*> kNames = {
      {W::Timeout, "timeout"}, {W::ErrorManifest, "error_manifest"}, {W::BadManifest, "bad_manifest"},
      {W::Missing, "missing"}, {W::Crc, "crc"},                     {W::Shape, "shape"}};
  auto it = kNames.find(why);
  return it == kNames.end() ? "?" : it->second;
}

namespace {

[[noreturn]] void bad_url(const std::string& url, const std::string& why) {
  fail("hidden-states store URL \"", url, "\": ", why,
       " (expected redis://HOST:PORT[/DB] or file:DIR)");
}

// Decimal digits only, at most `max`.
bool parse_uint(const std::string& s, int64_t max, int64_t* out) {
  if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *out = std::stoll(s);
  return *out <= max;
}

}  // namespace

std::unique_ptr<HiddenStatesStore> open_store(const std::string& url,
                                              std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) bad_url(url, "the timeout must be positive");
  static constexpr std::string_view kRedis = "redis://", kFile = "file:";
  if (url.starts_with(kRedis)) {
    std::string rest = url.substr(kRedis.size());
    std::string db_part;
    bool has_db = false;
    if (size_t slash = rest.find('/'); slash != std::string::npos) {
      db_part = rest.substr(slash + 1);
      rest.resize(slash);
      has_db = true;
    }
    std::string host, port_part;
    if (rest.starts_with('[')) {  // [IPv6]:PORT
      const size_t close = rest.find(']');
      if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
        bad_url(url, "expected [ADDRESS]:PORT");
      host = rest.substr(1, close - 1);
      port_part = rest.substr(close + 2);
    } else {
      const size_t colon = rest.rfind(':');
      if (colon == std::string::npos) bad_url(url, "no port");
      host = rest.substr(0, colon);
      port_part = rest.substr(colon + 1);
    }
    if (host.empty()) bad_url(url, "no host");
    int64_t port = 0, db = 0;
    if (!parse_uint(port_part, 65535, &port) || port == 0)
      bad_url(url, "port \"" + port_part + "\" is not an integer from 1 to 65535");
    if (has_db && !parse_uint(db_part, std::numeric_limits<int>::max(), &db))
      bad_url(url, "database \"" + db_part + "\" is not a non-negative integer");
    return detail::open_redis_store(url, host, int(port), int(db), timeout);
  }
  if (url.starts_with(kFile)) {
    const std::string dir = url.substr(kFile.size());
    if (dir.empty()) bad_url(url, "no directory");
    return detail::open_dir_store(url, dir);
  }
  bad_url(url, "unknown scheme");
}

HiddenSample wait_for_sample(HiddenStatesStore& store, const std::string& handle,
                             std::chrono::milliseconds timeout, std::chrono::milliseconds poll) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + timeout;
  if (poll.count() < 1) poll = std::chrono::milliseconds(1);
  std::string last_error;
  for (;;) {
    try {
      if (store.get_manifest(handle)) return store.get_sample(handle);
      last_error.clear();
    } catch (const StoreError& e) {  // a store restarting: retried until the deadline
      last_error = e.what();
    }
    const auto now = clock::now();
    if (now >= deadline) {
      std::string msg = "hidden-states sample \"" + handle + "\" (" + store.url() +
                        "): not committed within " + std::to_string(timeout.count()) + " ms";
      if (!last_error.empty()) msg += " (the store: " + last_error + ")";
      throw SampleUnusable(SampleUnusable::Why::Timeout, msg);
    }
    std::this_thread::sleep_for(std::min<clock::duration>(poll, deadline - now));
  }
}

std::string sanitize_handle(std::string_view request_id) {
  // Per code point, as vLLM's re.sub on a Python str: a UTF-8 sequence becomes one '_'.
  std::string out;
  out.reserve(request_id.size() + 1);
  for (char c : request_id) {
    if ((uint8_t(c) & 0xC0) == 0x80) continue;  // continuation byte of a non-ASCII character
    out += detail::handle_char(c) ? c : '_';
  }
  if (!out.empty() && out[0] >= '0' && out[0] <= '9') out.insert(out.begin(), 'k');
  return out;
}

}  // namespace dspark::connector
