// Feature rows held for the drafter in pool pages (src/runtime/held_rows.h): rows read back as
// written across page boundaries, dropped and copied rows keep their order, and pages go back to
// the pool and are reused, so the pool's memory stops growing once requests come and go.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/held_rows.h"

namespace dspark {
namespace {

constexpr int kW = 5;
constexpr int R = FeaturePool::kRowsPerPage;

// Row r of a source: kW floats that name the row and the column.
std::vector<float> source_rows(int first, int n, int stride) {
  std::vector<float> v(size_t(n) * size_t(stride), -1.0f);
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < kW; ++c) v[size_t(r * stride + c)] = float((first + r) * 100 + c);
  return v;
}

// Checks that `h` holds rows first .. first + h.rows() - 1 of source_rows.
void expect_rows(const HeldRows& h, int first) {
  std::vector<float> dst(size_t(h.rows()) * kW + 1, -7.0f);
  const float* p = h.contiguous(dst.data());
  for (int r = 0; r < h.rows(); ++r)
    for (int c = 0; c < kW; ++c)
      ASSERT_EQ(p[r * kW + c], float((first + r) * 100 + c)) << "row " << r << " col " << c;
}

TEST(HeldRows, RowsReadBackAcrossPagesWithAStride) {
  FeaturePool pool(kW, 1);
  HeldRows h;
  const int stride = kW + 3;  // the forward's taps are wider than the drafter's features
  std::vector<float> a = source_rows(0, R - 3, stride), b = source_rows(R - 3, 2 * R + 1, stride);
  h.append(pool, a.data(), stride, R - 3);
  expect_rows(h, 0);
  h.append(pool, b.data(), stride, 2 * R + 1);
  EXPECT_EQ(h.rows(), 3 * R - 2);
  EXPECT_EQ(pool.pages_in_use(), 3u);
  expect_rows(h, 0);
  // Within one page the rows are read in place, with no copy.
  std::vector<float> unused(size_t(R) * kW);
  HeldRows one;
  one.append(pool, a.data(), stride, 4);
  EXPECT_NE(one.contiguous(unused.data()), unused.data());
  expect_rows(one, 0);
}

TEST(HeldRows, DroppedRowsGiveBackTheirPages) {
  FeaturePool pool(kW, 1);
  HeldRows h;
  std::vector<float> a = source_rows(0, 3 * R, kW);
  h.append(pool, a.data(), kW, 3 * R);
  h.drop_front(R + 2);
  EXPECT_EQ(h.rows(), 2 * R - 2);
  EXPECT_EQ(pool.pages_in_use(), 2u);
  expect_rows(h, R + 2);
  std::vector<float> b = source_rows(3 * R, 5, kW);  // appends after a drop continue in order
  h.append(pool, b.data(), kW, 5);
  expect_rows(h, R + 2);
  h.drop_front(h.rows());
  EXPECT_EQ(h.rows(), 0);
  EXPECT_EQ(pool.pages_in_use(), 0u);
}

TEST(HeldRows, CopiedRowsAndMovesKeepTheRows) {
  FeaturePool pool(kW, 1);
  HeldRows parked, copy;
  std::vector<float> a = source_rows(0, 2 * R + 3, kW);
  parked.append(pool, a.data(), kW, 2 * R + 3);
  copy.append_rows_of(parked, 7, R + 4);
  EXPECT_EQ(copy.rows(), R + 4);
  expect_rows(copy, 7);
  expect_rows(parked, 0);  // the entry stays whole
  HeldRows moved = std::move(parked);
  EXPECT_EQ(parked.rows(), 0);
  expect_rows(moved, 0);
  EXPECT_ANY_THROW(copy.append_rows_of(moved, 2 * R, 4));  // past its end
}

TEST(HeldRows, PagesAreReusedSoThePoolStopsGrowing) {
  FeaturePool pool(kW, size_t(4) * R * kW * sizeof(float));  // 4 pages a segment
  std::vector<float> a = source_rows(0, 100, kW);
  size_t reserved = 0;
  for (int round = 0; round < 50; ++round) {
    std::vector<HeldRows> live(6);
    for (size_t i = 0; i < live.size(); ++i) live[i].append(pool, a.data(), kW, 10 + int(i) * 15);
    for (size_t i = 0; i < live.size(); ++i) expect_rows(live[i], 0);
    if (round == 0) reserved = pool.reserved_bytes();
    EXPECT_EQ(pool.reserved_bytes(), reserved) << "round " << round;
  }  // (each round's rows are destroyed: their pages go back)
  EXPECT_EQ(pool.pages_in_use(), 0u);
  EXPECT_GT(reserved, 0u);
}

TEST(HeldRows, ABadWidthIsRefused) {
  EXPECT_ANY_THROW(FeaturePool(0));
}

}  // namespace
}  // namespace dspark
