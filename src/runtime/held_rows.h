// Feature rows the model runner holds for a backbone drafter (DSpark, DFlash): target hidden
// states not yet given to the drafter, and rows parked for a later prefix hit. They live in pages
// of kRowsPerPage rows from one pool, as the KV cache lives in blocks. The pool takes memory in
// huge-page segments and keeps it: a page one request gives back is the next one's, so a
// long-running server's memory stays flat and its steps take no page faults. (Buffers that grew
// per request took 1,000-17,000 faults a run of 104 requests at 16 users, about 0.1 ms each on a
// virtual machine.) With DSPARK_FEATURE_POOL_RELEASE=1 in the environment a page given back is
// returned to the system at once (its next use faults it in again), so that RSS shows the pages in
// use: for leak tests, as glibc's MALLOC_TRIM_THRESHOLD_=0 is for malloc. Engine thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/buffer.h"

namespace dspark {

class FeaturePool {
 public:
  static constexpr int kRowsPerPage = 16;
  // Rows of `width` floats; a segment holds at least `segment_bytes` (rounded to whole pages).
  explicit FeaturePool(int width, size_t segment_bytes = size_t(32) << 20);
  FeaturePool(const FeaturePool&) = delete;
  FeaturePool& operator=(const FeaturePool&) = delete;

  int width() const { return width_; }
  size_t page_bytes() const { return page_floats_ * sizeof(float); }
  int32_t take();  // a free page (a new segment when none is left)
  void give(int32_t page);
  float* page(int32_t p) const;
  size_t pages_in_use() const { return size_t(made_) - free_.size(); }
  size_t reserved_bytes() const { return segments_.size() * segment_bytes_; }

 private:
  int width_;
  size_t page_floats_;
  size_t pages_per_segment_, segment_bytes_;
  std::vector<HugeBuffer> segments_;
  std::vector<int32_t> free_;
  int32_t made_ = 0;      // pages handed out of the segments so far
  bool release_ = false;  // DSPARK_FEATURE_POOL_RELEASE
  size_t system_page_ = 0;  // the system's page size, with release_
};

// A sequence of rows in pool pages: a request's held rows, or a parked entry's. Gives its pages
// back when cleared or destroyed (the pool must outlive it). Move-only.
class HeldRows {
 public:
  HeldRows() = default;
  HeldRows(HeldRows&& o) noexcept { *this = std::move(o); }
  HeldRows& operator=(HeldRows&& o) noexcept;
  HeldRows(const HeldRows&) = delete;
  HeldRows& operator=(const HeldRows&) = delete;
  ~HeldRows() { clear(); }

  int rows() const { return rows_; }
  size_t bytes() const { return pool_ ? pages_.size() * pool_->page_bytes() : 0; }
  // Appends n rows: row i's pool.width() floats at src + i * stride.
  void append(FeaturePool& pool, const float* src, int64_t stride, int n);
  // Appends rows [from, from + n) of `other` (same pool).
  void append_rows_of(const HeldRows& other, int from, int n);
  // Drops the first n rows (pages they leave empty go back).
  void drop_front(int n);
  // Rows [0, rows()) as one array: in place when they lie in one page, else copied to `dst`
  // (room for rows() rows).
  const float* contiguous(float* dst) const;
  void clear();

 private:
  const float* row(int i) const;
  FeaturePool* pool_ = nullptr;
  std::vector<int32_t> pages_;
  int off_ = 0, rows_ = 0;  // row i is at page slot off_ + i
};

}  // namespace dspark
