#include "runtime/held_rows.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace dspark {

FeaturePool::FeaturePool(int width, size_t segment_bytes)
    : width_(width), page_floats_(size_t(std::max(width, 1)) * kRowsPerPage) {
  if (width <= 0) fail("feature pool: row width ", width, " is not positive");
  pages_per_segment_ = std::max<size_t>(1, (segment_bytes + page_bytes() - 1) / page_bytes());
  // A whole number of 2 MiB huge pages, so that the kernel aligns the mapping to them.
  constexpr size_t kHuge = size_t(2) << 20;
  segment_bytes_ = (pages_per_segment_ * page_bytes() + kHuge - 1) / kHuge * kHuge;
  const char* env = std::getenv("DSPARK_FEATURE_POOL_RELEASE");
  release_ = env && std::string_view(env) == "1";
  if (release_) system_page_ = size_t(::sysconf(_SC_PAGESIZE));
}

int32_t FeaturePool::take() {
  if (!free_.empty()) {
    const int32_t p = free_.back();
    free_.pop_back();
    return p;
  }
  if (size_t(made_) == segments_.size() * pages_per_segment_) {
    segments_.emplace_back(segment_bytes_);
    // Returned pages must not come back as parts of huge pages (khugepaged collapses ranges).
    if (release_) ::madvise(segments_.back().data(), segments_.back().bytes(), MADV_NOHUGEPAGE);
  }
  return made_++;
}

void FeaturePool::give(int32_t page) {
  if (release_) {  // the whole system pages inside it
    const uintptr_t b = reinterpret_cast<uintptr_t>(this->page(page)), e = b + page_bytes();
    const uintptr_t sp = system_page_, lo = (b + sp - 1) / sp * sp, hi = e / sp * sp;
    if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }
  free_.push_back(page);
}

float* FeaturePool::page(int32_t p) const {
  const HugeBuffer& s = segments_[size_t(p) / pages_per_segment_];
  return static_cast<float*>(s.data()) + (size_t(p) % pages_per_segment_) * page_floats_;
}

HeldRows& HeldRows::operator=(HeldRows&& o) noexcept {
  if (this != &o) {
    clear();
    pool_ = o.pool_;
    pages_ = std::move(o.pages_);
    off_ = std::exchange(o.off_, 0);
    rows_ = std::exchange(o.rows_, 0);
    o.pages_.clear();
  }
  return *this;
}

const float* HeldRows::row(int i) const {
  constexpr int R = FeaturePool::kRowsPerPage;
  const int slot = off_ + i;
  return pool_->page(pages_[size_t(slot / R)]) + size_t(slot % R) * size_t(pool_->width());
}

void HeldRows::append(FeaturePool& pool, const float* src, int64_t stride, int n) {
  constexpr int R = FeaturePool::kRowsPerPage;
  if (pool_ && pool_ != &pool) fail("held rows: appended from another feature pool");
  pool_ = &pool;
  const size_t w = size_t(pool.width());
  for (int i = 0; i < n; ++i) {
    const int slot = off_ + rows_;
    if (slot == int(pages_.size()) * R) pages_.push_back(pool.take());
    std::memcpy(pool.page(pages_.back()) + size_t(slot % R) * w, src + int64_t(i) * stride,
                w * sizeof(float));
    ++rows_;
  }
}

void HeldRows::append_rows_of(const HeldRows& other, int from, int n) {
  if (n <= 0) return;
  if (from < 0 || from + n > other.rows_)
    fail("held rows: rows ", from, " .. ", from + n, " of ", other.rows_, " asked for");
  // Each source row is a contiguous run of width floats.
  for (int i = 0; i < n; ++i) append(*other.pool_, other.row(from + i), 0, 1);
}

void HeldRows::drop_front(int n) {
  constexpr int R = FeaturePool::kRowsPerPage;
  n = std::clamp(n, 0, rows_);
  off_ += n;
  rows_ -= n;
  const int whole = rows_ == 0 ? int(pages_.size()) : off_ / R;
  for (int i = 0; i < whole; ++i) pool_->give(pages_[size_t(i)]);
  pages_.erase(pages_.begin(), pages_.begin() + whole);
  off_ = rows_ == 0 ? 0 : off_ - whole * R;
}

const float* HeldRows::contiguous(float* dst) const {
  constexpr int R = FeaturePool::kRowsPerPage;
  if (rows_ == 0) return nullptr;
  if (off_ / R == (off_ + rows_ - 1) / R) return row(0);
  const size_t w = size_t(pool_->width());
  for (int i = 0; i < rows_;) {  // a page's run of rows at a time
    const int slot = off_ + i, n = std::min(rows_ - i, R - slot % R);
    std::memcpy(dst + size_t(i) * w, row(i), size_t(n) * w * sizeof(float));
    i += n;
  }
  return dst;
}

void HeldRows::clear() {
  if (pool_)
    for (int32_t p : pages_) pool_->give(p);
  pages_.clear();
  off_ = rows_ = 0;
}

}  // namespace dspark
